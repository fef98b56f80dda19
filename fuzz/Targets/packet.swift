// TUN and bridge input: PacketSummary.parse (plain and with link-local IPv6 allowed; IPv4/IPv6 headers, extension headers, TCP/UDP/ICMP),
// the transport checksums, and the replies PacketBuilder makes from a parsed packet (RST for a
// SYN, ICMP unreachable, ICMP fragmentation-needed), which must themselves carry valid checksums;
// a fragment's datagram id (packet mode routes later fragments by it); an IPv4 datagram cut
// into fragments for a smaller link, each of which must parse, fit and carry its piece.
import LoftCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    _ = InternetChecksum.of(p)
    // The packet-mode input's parse (link-local IPv6 allowed) takes all the other one takes,
    // and its link-local answers are the only extra ones.
    let linkLocal = PacketSummary.parse(p, maxLength: 65535, linkLocal: true)
    guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535) else {
        if case .success(let l) = linkLocal { precondition(l.isLinkLocal, "linkLocal passed a packet that is not link-local") }
        return 0
    }
    guard case .success(let l) = linkLocal, l.destination == s.destination, !s.isLinkLocal else {
        preconditionFailure("linkLocal refused or changed what the plain parse takes")
    }
    let id = s.fragmentID(p)
    if s.isLaterFragment && id == nil { fatalError("a later fragment without a datagram id") }
    if id != nil && !s.isFragmented(p) { fatalError("a datagram id for a packet that is no fragment") }
    _ = s.transportChecksumIsValid(p)
    if s.version == 4 {
        let limit = 68 + size % 1400
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
        defer { scratch.deallocate() }
        var carried = 0
        let cut = IPv4Fragmentation.split(p, maxPacket: limit, scratch: scratch) { f in
            if f.count > limit { fatalError("a fragment of \(f.count) bytes above \(limit)") }
            // (A first fragment of 8 bytes may be too short for the transport's parse.)
            if f[4] != p[4] || f[5] != p[5] || Int(f[2]) << 8 | Int(f[3]) != f.count {
                fatalError("a fragment lost its datagram id or length")
            }
            if InternetChecksum.of(UnsafeRawBufferPointer(rebasing: f[0..<s.transportOffset])) != 0 { fatalError("a fragment's header sum") }
            carried += f.count - s.transportOffset
        }
        if cut && carried != size - s.transportOffset { fatalError("fragments carry \(carried) bytes of \(size - s.transportOffset)") }
    }
    var replies: [[UInt8]] = [PacketBuilder.unreachable(p, summary: s, kind: .port),
                              PacketBuilder.unreachable(p, summary: s, kind: .prohibited)]
    if s.isTCPOpen { replies.append(PacketBuilder.resetForSYN(p, summary: s)) }
    if s.version == 4 { replies.append(PacketBuilder.fragmentationNeeded(p, summary: s, mtu: 576)) }
    for r in replies {
        r.withUnsafeBytes { q in
            guard case .success(let rs) = PacketSummary.parse(q, maxLength: 65535) else { return }
            if !rs.transportChecksumIsValid(q) { fatalError("a built reply has a bad checksum") }
        }
    }
    return 0
}
