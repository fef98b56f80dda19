// TUN and bridge input: PacketSummary.parse (plain and with link-local IPv6 allowed; IPv4/IPv6 headers, extension headers, TCP/UDP/ICMP),
// the transport checksums, and the replies PacketBuilder makes from a parsed packet (RST for a
// SYN, ICMP unreachable), which must themselves carry valid checksums.
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
    _ = s.isFragmented(p)
    _ = s.transportChecksumIsValid(p)
    var replies: [[UInt8]] = [PacketBuilder.unreachable(p, summary: s, kind: .port),
                              PacketBuilder.unreachable(p, summary: s, kind: .prohibited)]
    if s.isTCPOpen { replies.append(PacketBuilder.resetForSYN(p, summary: s)) }
    for r in replies {
        r.withUnsafeBytes { q in
            guard case .success(let rs) = PacketSummary.parse(q, maxLength: 65535) else { return }
            if !rs.transportChecksumIsValid(q) { fatalError("a built reply has a bad checksum") }
        }
    }
    return 0
}
