// Fuzz target: LoftSSTP.NeighborDiscovery on one IPv6 packet from the link, the way SSTPClient
// meets it (loft's link-local address fixed, fe80::2, as the test responder gives it): whatever
// is answered is a Neighbor Solicitation for that address, and the answer a well-formed
// Neighbor Advertisement from it (64 bytes, hop limit 255, a valid ICMPv6 checksum) to the
// solicitation's source, or to all nodes when that was unspecified.
import LoftCore
import LoftSSTP

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    let mine = IPAddress.v6(0xFE80_0000_0000_0000, 2)
    guard let s = NeighborDiscovery.solicitation(p, for: mine) else {
        precondition(NeighborDiscovery.answer(p, for: mine) == nil)
        return 0
    }
    precondition(size >= 64 && p[40] == 135 && p[7] == 255 && s.target == mine)
    precondition(s.destination == mine || s.destination == NeighborDiscovery.solicitedNode(mine))
    let na = NeighborDiscovery.advertisement(answering: s)
    na.withUnsafeBytes { b in
        precondition(b.count == 64 && b[0] == 0x60 && b[5] == 24 && b[6] == 58 && b[7] == 255 && b[40] == 136)
        let src = IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: b[8..<24]))
        let dst = IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: b[24..<40]))
        precondition(src == mine && dst == (s.source.isUnspecified ? NeighborDiscovery.allNodes : s.source))
        precondition(InternetChecksum.transport(source: src, destination: dst, proto: 58,
                                                segment: UnsafeRawBufferPointer(rebasing: b[40...])) == 0)
    }
    return 0
}
