// The TUN offload header (VirtioNetHeader): any 10 bytes as a header over any packet.
// A UDP super-datagram (USO) is cut into datagrams that parse with valid checksums.
// A header that leaves a TCP checksum partial for the stack names a parsed TCP segment's own checksum.
// Completing a partial checksum either refuses the header or leaves the region from the
// checksum's start summing to what the seed stood for; a large TCP segment's header and seed,
// completed the way the kernel does, give a segment whose checksum is valid; a TCP segment cut
// to a smaller MTU (packet mode) gives pieces that fit, parse and carry valid checksums.
import LoftCore

nonisolated(unsafe) let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = UnsafeRawBufferPointer(start: data, count: size)
    guard let header = VirtioNetHeader(input) else { return 0 }
    var packet = Array(input[VirtioNetHeader.size...])
    // A UDP super-datagram (USO) is cut into datagrams that parse with valid checksums.
// A header that leaves a TCP checksum partial for the stack: if the packet parses (the
    // stack drops it otherwise), the field is at the TCP header its IP header points to, the
    // segment carries payload, and completing would have accepted the header.
    if packet.withUnsafeBytes({ header.leavesTCPChecksumPartial($0) }),
       case .success(let s) = packet.withUnsafeBytes({ PacketSummary.parse($0, maxLength: 65535) }) {
        guard s.proto == IPProtocol.tcp, s.transportOffset == Int(header.checksumStart),
              Int(header.checksumStart) + 20 < packet.count,
              (packet.withUnsafeMutableBytes { header.complete($0) }) == nil
        else { fatalError("left partial, but not a TCP segment with payload at its checksum start: \(header)") }
        packet = Array(input[VirtioNetHeader.size...])
    }
    let field = Int(header.checksumStart) + Int(header.checksumOffset)
    let seedBefore = field + 2 <= packet.count ? UInt16(packet[field]) << 8 | UInt16(packet[field + 1]) : 0
    let refused = packet.withUnsafeMutableBytes { header.complete($0) }
    if refused == nil && header.flags & VirtioNetHeader.needsChecksum != 0 {
        // Completed: the region from the start, with the checksum in it, sums to the seed's
        // complement (so with the pseudo-header the seed stood for, to zero). 0 and 0xFFFF
        // are one value.
        let check = packet.withUnsafeBytes { InternetChecksum.of(UnsafeRawBufferPointer(rebasing: $0[Int(header.checksumStart)...])) }
        if check != seedBefore && !(check | seedBefore == 0xFFFF && check & seedBefore == 0) {
            fatalError("completed, but the region sums to \(check), not the seed \(seedBefore)")
        }
    }
    packet.withUnsafeBytes { p in
        guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535), s.proto == IPProtocol.tcp,
              !s.isLaterFragment else { return }
        let valid = s.transportChecksumIsValid(p)
        _ = TCPSegmentation.split(p, transportOffset: s.transportOffset, maxPacket: 1280, scratch: scratch) { piece in
            if piece.count > 1280 { fatalError("a piece of \(piece.count) bytes") }
            guard case .success(let s2) = PacketSummary.parse(piece, maxLength: 65535) else { fatalError("a piece does not parse") }
            if valid && !s2.transportChecksumIsValid(piece) { fatalError("a piece's checksum is wrong") }
        }
    }
    // A UDP super-datagram cut as the TUN does with USO: every datagram carries at most the
    // segment size and its lengths; those that parse (the stack's parser also judges the
    // addresses) are UDP with a valid checksum.
    packet.withUnsafeBytes { p in
        guard p.count > 0, header.gsoSize > 0 else { return }
        let t = p[0] >> 4 == 4 ? Int(p[0] & 0x0F) * 4 : 40
        _ = UDPSegmentation.split(p, transportOffset: t, segmentSize: Int(header.gsoSize), scratch: scratch) { piece in
            if piece.count - t - 8 > Int(header.gsoSize) { fatalError("a datagram larger than the segment size") }
            if Int(piece[t + 4]) << 8 | Int(piece[t + 5]) != piece.count - t { fatalError("a datagram's UDP length is wrong") }
            guard case .success(let s) = PacketSummary.parse(piece, maxLength: 65535) else { return }
            if s.proto != IPProtocol.udp || !s.transportChecksumIsValid(piece) { fatalError("a datagram's checksum is wrong") }
        }
    }
    let segment = Int(header.gsoSize)
    packet.withUnsafeBytes { p in
        // The large-segment header and the partial-checksum one (no segmentation).
        for made in [VirtioNetHeader.forLargeTCP(p, segmentSize: segment), VirtioNetHeader.forPartialTCP(p)] {
            guard let (h, seed) = made else { continue }
            guard Int(h.headerLength) <= p.count, h.gsoSize == 0 || h.gsoSize == header.gsoSize,
                  Int(h.checksumStart) + 18 <= p.count else { fatalError("header outside the packet: \(h)") }
            var seeded = Array(p)
            let field = Int(h.checksumStart) + Int(h.checksumOffset)
            seeded[field] = UInt8(seed >> 8)
            seeded[field + 1] = UInt8(truncatingIfNeeded: seed)
            if seeded.withUnsafeMutableBytes({ h.complete($0) }) != nil { fatalError("its own header refused") }
            seeded.withUnsafeBytes { q in
                if case .success(let s) = PacketSummary.parse(q, maxLength: 65535), !s.isLaterFragment,
                   s.proto == IPProtocol.tcp, s.transportOffset == Int(h.checksumStart), !s.transportChecksumIsValid(q) {
                    fatalError("seeded and completed, the checksum is not valid")
                }
            }
        }
    }
    return 0
}
