/// The TCP maximum segment size and window scale options: read from an app's SYN, rewritten in
/// the stack's SYN-ACK. lwIP announces and takes at most its compiled MSS (1460) and window
/// scale (1); on an input with a larger MTU the netstack announces an MSS that fits the MTU, and
/// on an input with large windows a larger scale (docs/netstack.md, "Large segments").
public enum TCPOptions {
    /// The MSS option of the TCP header at `tcp` (the header and its options), if present and
    /// well formed. Stops at end-of-list, at a malformed option and at the header's end.
    public static func mss(inTCPHeader tcp: UnsafeRawBufferPointer) -> UInt16? {
        guard let at = mssOffset(tcp) else { return nil }
        return UInt16(tcp[at]) << 8 | UInt16(tcp[at + 1])
    }

    /// The window scale option's shift count (RFC 7323), if present and well formed.
    public static func windowScale(inTCPHeader tcp: UnsafeRawBufferPointer) -> UInt8? {
        optionOffset(tcp, kind: 3, length: 3).map { tcp[$0] }
    }

    /// Where the MSS value's two bytes are in the header at `tcp`.
    static func mssOffset(_ tcp: UnsafeRawBufferPointer) -> Int? { optionOffset(tcp, kind: 2, length: 4) }

    /// Where the value of the first option `kind` is in the header at `tcp`, if that option has
    /// `length`. Stops at end-of-list, at a malformed option and at the header's end.
    static func optionOffset(_ tcp: UnsafeRawBufferPointer, kind wanted: UInt8, length wantedLength: Int) -> Int? {
        guard tcp.count >= 20 else { return nil }
        let end = min(Int(tcp[12] >> 4) * 4, tcp.count)
        var o = 20
        while o < end {
            let kind = tcp[o]
            if kind == 0 { return nil }
            if kind == 1 { o += 1; continue }
            guard o + 1 < end else { return nil }
            let len = Int(tcp[o + 1])
            guard len >= 2, o + len <= end else { return nil }
            if kind == wanted { return len == wantedLength ? o + 2 : nil }
            o += len
        }
        return nil
    }

    /// Raises the MSS option of the TCP segment in `packet` (an IPv4 or IPv6 packet whose TCP
    /// header starts at `transportOffset`) to `mss`, keeping the TCP checksum right (RFC 1624
    /// incremental update). Nothing changes when there is no MSS option or it is already at
    /// least `mss`. Returns whether the packet changed.
    @discardableResult
    public static func raiseMSS(in packet: UnsafeMutableRawBufferPointer, transportOffset t: Int, to mss: UInt16) -> Bool {
        guard t >= 0, t + 20 <= packet.count else { return false }
        guard let at = mssOffset(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(packet)[t...])) else { return false }
        let old = UInt16(packet[t + at]) << 8 | UInt16(packet[t + at + 1])
        guard old < mss else { return false }
        set(packet, t, at, UInt8(mss >> 8))
        set(packet, t, at + 1, UInt8(mss & 0xFF))
        return true
    }

    /// Lowers the MSS option of the TCP segment in `packet` to `mss` (a link that carries less
    /// than the TUN's MTU: sstp with a server MRU below IPv6's 1280), keeping the TCP checksum
    /// right. Nothing changes when there is no MSS option or it is already at most `mss`.
    @discardableResult
    public static func lowerMSS(in packet: UnsafeMutableRawBufferPointer, transportOffset t: Int, to mss: UInt16) -> Bool {
        guard t >= 0, t + 20 <= packet.count else { return false }
        guard let at = mssOffset(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(packet)[t...])) else { return false }
        let old = UInt16(packet[t + at]) << 8 | UInt16(packet[t + at + 1])
        guard old > mss else { return false }
        set(packet, t, at, UInt8(mss >> 8))
        set(packet, t, at + 1, UInt8(mss & 0xFF))
        return true
    }

    /// Sets the window scale option of the TCP segment in `packet` to `shift` (at most 14),
    /// keeping the TCP checksum right. Nothing changes when there is no such option. Returns
    /// whether the packet changed.
    @discardableResult
    public static func setWindowScale(in packet: UnsafeMutableRawBufferPointer, transportOffset t: Int, to shift: UInt8) -> Bool {
        guard t >= 0, t + 20 <= packet.count, shift <= 14 else { return false }
        guard let at = optionOffset(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(packet)[t...]), kind: 3, length: 3),
              packet[t + at] != shift
        else { return false }
        set(packet, t, at, shift)
        return true
    }

    /// Writes one byte of the TCP header at `t` and updates its checksum for the 16-bit word
    /// that byte is part of (RFC 1624: HC' = ~(~HC + ~m + m')).
    private static func set(_ packet: UnsafeMutableRawBufferPointer, _ t: Int, _ at: Int, _ value: UInt8) {
        let w = t + (at & ~1)
        let old = UInt16(packet[w]) << 8 | UInt16(packet[w + 1])
        packet[t + at] = value
        let new = UInt16(packet[w]) << 8 | UInt16(packet[w + 1])
        let sum = UInt16(packet[t + 16]) << 8 | UInt16(packet[t + 17])
        var acc = UInt32(~sum) + UInt32(~old) + UInt32(new)
        acc = (acc & 0xFFFF) + (acc >> 16)
        acc = (acc & 0xFFFF) + (acc >> 16)
        let c = ~UInt16(acc)
        packet[t + 16] = UInt8(c >> 8)
        packet[t + 17] = UInt8(c & 0xFF)
    }
}
