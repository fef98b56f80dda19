/// A bare TCP acknowledgment as the stack sends it: IPv4 or IPv6 (no extension headers), flags
/// exactly ACK, no payload. Used to thin out a batch of outgoing packets: of two such ACKs for
/// the same connection queued back to back, the later one says everything the earlier one did
/// (ACKs are cumulative, the window is the newest), so the earlier need not be sent.
public enum PureAck {
    /// Byte range of the connection's addresses and the offset of its TCP header, when `p` is
    /// a pure ACK.
    @inline(__always)
    static func layout(_ p: UnsafeRawBufferPointer) -> (addresses: Range<Int>, tcp: Int)? {
        guard p.count >= 40 else { return nil }
        let version = p[0] >> 4
        let addresses: Range<Int>
        let tcp: Int
        if version == 4 {
            tcp = Int(p[0] & 0x0F) * 4
            guard tcp >= 20, p[9] == IPProtocol.tcp, p.count >= tcp + 20 else { return nil }
            // Not a fragment (MF clear, offset zero).
            guard p[6] & 0x3F == 0, p[7] == 0 else { return nil }
            addresses = 12..<20
        } else if version == 6 {
            tcp = 40
            guard p[6] == IPProtocol.tcp, p.count >= 60 else { return nil }
            addresses = 8..<40
        } else {
            return nil
        }
        let dataOffset = Int(p[tcp + 12] >> 4) * 4
        guard dataOffset >= 20, p[tcp + 13] == 0x10, p.count == tcp + dataOffset else { return nil }
        return (addresses, tcp)
    }

    /// True when `p` is a bare ACK (see above).
    public static func matches(_ p: UnsafeRawBufferPointer) -> Bool { layout(p) != nil }

    /// True when `later` makes `earlier` redundant: both are pure ACKs of the same connection
    /// and direction, and `later` acknowledges more, or the same with another window (a window
    /// update). Two equal ACKs with equal windows are duplicate ACKs, which the sender counts
    /// for fast retransmit: both are kept.
    public static func supersedes(_ later: UnsafeRawBufferPointer, _ earlier: UnsafeRawBufferPointer) -> Bool {
        guard later.count == earlier.count, let a = layout(later), let b = layout(earlier), a == b else { return false }
        for i in a.addresses where later[i] != earlier[i] { return false }
        for i in a.tcp..<(a.tcp + 4) where later[i] != earlier[i] { return false }  // ports
        let newAck = later.loadUnaligned(fromByteOffset: a.tcp + 8, as: UInt32.self).bigEndian
        let oldAck = earlier.loadUnaligned(fromByteOffset: a.tcp + 8, as: UInt32.self).bigEndian
        let advance = Int32(bitPattern: newAck &- oldAck)
        if advance > 0 { return true }
        if advance < 0 { return false }
        return later[a.tcp + 14] != earlier[a.tcp + 14] || later[a.tcp + 15] != earlier[a.tcp + 15]
    }
}
