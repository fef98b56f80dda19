/// The TCP maximum segment size option: read from an app's SYN, raised in the stack's SYN-ACK.
/// lwIP announces and takes at most its compiled MSS (1460); on an input with a larger MTU the
/// netstack announces one that fits the MTU instead (docs/netstack.md, "Large segments").
public enum TCPOptions {
    /// The MSS option of the TCP header at `tcp` (the header and its options), if present and
    /// well formed. Stops at end-of-list, at a malformed option and at the header's end.
    public static func mss(inTCPHeader tcp: UnsafeRawBufferPointer) -> UInt16? {
        guard let at = mssOffset(tcp) else { return nil }
        return UInt16(tcp[at]) << 8 | UInt16(tcp[at + 1])
    }

    /// Where the MSS value's two bytes are in the header at `tcp`.
    static func mssOffset(_ tcp: UnsafeRawBufferPointer) -> Int? {
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
            if kind == 2 { return len == 4 ? o + 2 : nil }
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
        let tcp = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(packet)[t...])
        guard let at = mssOffset(tcp) else { return false }
        let old = UInt16(tcp[at]) << 8 | UInt16(tcp[at + 1])
        guard old < mss else { return false }
        packet[t + at] = UInt8(mss >> 8)
        packet[t + at + 1] = UInt8(mss & 0xFF)
        guard at % 2 == 0 else {
            // Not one 16-bit word of the sum (an odd number of NOPs before it): summed again.
            packet[t + 16] = 0
            packet[t + 17] = 0
            guard case .success(let s) = PacketSummary.parse(UnsafeRawBufferPointer(packet), maxLength: packet.count)
            else { return true }
            let c = InternetChecksum.transport(source: s.source, destination: s.destination, proto: IPProtocol.tcp,
                                               segment: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(packet)[t...]))
            packet[t + 16] = UInt8(c >> 8)
            packet[t + 17] = UInt8(c & 0xFF)
            return true
        }
        // One 16-bit word of the sum changed.
        let sum = UInt16(packet[t + 16]) << 8 | UInt16(packet[t + 17])
        var acc = UInt32(~sum) + UInt32(~old) + UInt32(mss)
        acc = (acc & 0xFFFF) + (acc >> 16)
        acc = (acc & 0xFFFF) + (acc >> 16)
        let new = ~UInt16(acc)
        packet[t + 16] = UInt8(new >> 8)
        packet[t + 17] = UInt8(new & 0xFF)
        return true
    }
}
