import LoftCore
import XCTest

/// The TUN offload header: reading and writing it, completing a partial checksum, and the
/// header plus checksum seed for a large TCP segment, on crafted IPv4/IPv6 packets with options
/// and odd lengths. The fast checksum against a byte-at-a-time reference.
final class VirtioNetHeaderTests: XCTestCase {
    let v4a = IPAddress("198.18.0.2")!, v4b = IPAddress("203.0.113.9")!
    let v6a = IPAddress("fd00:18::2")!, v6b = IPAddress("fd00:1:2::9")!

    /// An IPv4 or IPv6 TCP packet with `options` bytes of TCP options (NOPs) and `payload`
    /// bytes, its checksums correct.
    func tcp(_ src: IPAddress, _ dst: IPAddress, options: Int = 0, payload: Int) -> [UInt8] {
        let tcpLen = 20 + options
        var t = [UInt8](repeating: 0, count: tcpLen)
        t[0] = 0x30; t[1] = 0x39; t[2] = 0x01; t[3] = 0xBB
        t[4] = 0x11; t[5] = 0x22; t[6] = 0x33; t[7] = 0x44
        t[12] = UInt8(tcpLen / 4) << 4
        t[13] = PacketSummary.tcpACK
        t[14] = 0xFF; t[15] = 0xFF
        for i in 20..<tcpLen { t[i] = 1 }
        t += (0..<payload).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
        return ip(src, dst, proto: IPProtocol.tcp, transport: t, checksumAt: 16)
    }

    func udp(_ src: IPAddress, _ dst: IPAddress, payload: Int) -> [UInt8] {
        var u = [UInt8](repeating: 0, count: 8)
        u[0] = 0x13; u[1] = 0x88; u[2] = 0x00; u[3] = 0x35
        u[4] = UInt8((8 + payload) >> 8); u[5] = UInt8(truncatingIfNeeded: 8 + payload)
        u += (0..<payload).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }
        return ip(src, dst, proto: IPProtocol.udp, transport: u, checksumAt: 6)
    }

    func ip(_ src: IPAddress, _ dst: IPAddress, proto: UInt8, transport: [UInt8], checksumAt: Int) -> [UInt8] {
        var t = transport
        let c = t.withUnsafeBytes { InternetChecksum.transport(source: src, destination: dst, proto: proto, segment: $0) }
        t[checksumAt] = UInt8(c >> 8); t[checksumAt + 1] = UInt8(truncatingIfNeeded: c)
        if src.isIPv4 {
            var h = [UInt8](repeating: 0, count: 20)
            h[0] = 0x45
            let total = 20 + t.count
            h[2] = UInt8(total >> 8); h[3] = UInt8(truncatingIfNeeded: total)
            h[8] = 64; h[9] = proto
            h.replaceSubrange(12..<16, with: bytes(src)); h.replaceSubrange(16..<20, with: bytes(dst))
            let hc = h.withUnsafeBytes { InternetChecksum.of($0) }
            h[10] = UInt8(hc >> 8); h[11] = UInt8(truncatingIfNeeded: hc)
            return h + t
        }
        var h = [UInt8](repeating: 0, count: 40)
        h[0] = 0x60
        h[4] = UInt8(t.count >> 8); h[5] = UInt8(truncatingIfNeeded: t.count)
        h[6] = proto; h[7] = 64
        h.replaceSubrange(8..<24, with: bytes(src)); h.replaceSubrange(24..<40, with: bytes(dst))
        return h + t
    }

    /// What the kernel hands over with a partial checksum: the field holds the pseudo-header's
    /// folded sum (not complemented).
    func partial(_ packet: [UInt8], start: Int, offset: Int, src: IPAddress, dst: IPAddress, proto: UInt8) -> [UInt8] {
        var p = packet
        var pseudo = InternetChecksum()
        pseudo.add(src); pseudo.add(dst)
        let len = p.count - start
        if src.isIPv4 { pseudo.add(UInt16(proto)); pseudo.add(UInt16(len)) }
        else { pseudo.add(UInt16(len >> 16)); pseudo.add(UInt16(truncatingIfNeeded: len)); pseudo.add(UInt16(proto)) }
        let seed = ~pseudo.value
        p[start + offset] = UInt8(seed >> 8); p[start + offset + 1] = UInt8(truncatingIfNeeded: seed)
        return p
    }

    func bytes(_ a: IPAddress) -> [UInt8] {
        var b = [UInt8](repeating: 0, count: 16)
        let n = b.withUnsafeMutableBytes { a.write(to: $0.baseAddress!) }
        return Array(b[0..<n])
    }

    func checksum(_ p: [UInt8], at i: Int) -> UInt16 { UInt16(p[i]) << 8 | UInt16(p[i + 1]) }

    func testReadsAndWritesLittleEndian() {
        let h = VirtioNetHeader(flags: 1, gsoType: 4, headerLength: 0x0102, gsoSize: 1440, checksumStart: 40, checksumOffset: 16)
        var b = [UInt8](repeating: 0xEE, count: 12)
        b.withUnsafeMutableBytes { h.write(to: $0) }
        XCTAssertEqual(Array(b[0..<10]), [1, 4, 0x02, 0x01, 0xA0, 0x05, 40, 0, 16, 0])
        XCTAssertEqual(b.withUnsafeBytes { VirtioNetHeader($0) }, h)
        XCTAssertNil([UInt8](repeating: 0, count: 9).withUnsafeBytes { VirtioNetHeader($0) })
    }

    func testCompletesPartialChecksumsV4V6TCPUDPOddLengths() {
        let cases: [([UInt8], Int, Int, IPAddress, IPAddress, UInt8)] = [
            (tcp(v4a, v4b, payload: 1), 20, 16, v4a, v4b, IPProtocol.tcp),
            (tcp(v4a, v4b, options: 12, payload: 1447), 20, 16, v4a, v4b, IPProtocol.tcp),
            (tcp(v4a, v4b, options: 4, payload: 60_001), 20, 16, v4a, v4b, IPProtocol.tcp),
            (tcp(v6a, v6b, options: 8, payload: 999), 40, 16, v6a, v6b, IPProtocol.tcp),
            (tcp(v6a, v6b, payload: 0), 40, 16, v6a, v6b, IPProtocol.tcp),
            (udp(v4a, v4b, payload: 33), 20, 6, v4a, v4b, IPProtocol.udp),
            (udp(v6a, v6b, payload: 8000), 40, 6, v6a, v6b, IPProtocol.udp),
        ]
        for (i, (good, start, offset, src, dst, proto)) in cases.enumerated() {
            var p = partial(good, start: start, offset: offset, src: src, dst: dst, proto: proto)
            XCTAssertNotEqual(p, good, "case \(i): the partial packet differs")
            let h = VirtioNetHeader(flags: VirtioNetHeader.needsChecksum, gsoType: 0, headerLength: 0, gsoSize: 0,
                                    checksumStart: UInt16(start), checksumOffset: UInt16(offset))
            XCTAssertNil(p.withUnsafeMutableBytes { h.complete($0) }, "case \(i)")
            let want = checksum(good, at: start + offset), got = checksum(p, at: start + offset)
            // 0x0000 and 0xFFFF are the same one's-complement value; UDP must not carry 0.
            XCTAssertTrue(got == want || (want == 0 && got == 0xFFFF), "case \(i): \(got) != \(want)")
            if got == want { XCTAssertEqual(p, good, "case \(i)") }
            let s = p.withUnsafeBytes { try? PacketSummary.parse($0, maxLength: 65535).get() }
            XCTAssertEqual(p.withUnsafeBytes { s?.transportChecksumIsValid($0) }, true, "case \(i)")
        }
    }

    func testNothingToDoWithoutNeedsChecksum() {
        let good = tcp(v4a, v4b, payload: 100)
        var p = good
        let h = VirtioNetHeader(flags: VirtioNetHeader.dataValid, gsoType: VirtioNetHeader.gsoTCPv4, headerLength: 40,
                                gsoSize: 50, checksumStart: 0, checksumOffset: 0)
        XCTAssertNil(p.withUnsafeMutableBytes { h.complete($0) })
        XCTAssertEqual(p, good)
    }

    func testRefusesWhatTheStackCannotHonour() {
        var p = udp(v4a, v4b, payload: 3000)
        for gso in [VirtioNetHeader.gsoUDP, VirtioNetHeader.gsoUDPL4, 2, 9] {
            let h = VirtioNetHeader(flags: 0, gsoType: gso, headerLength: 28, gsoSize: 1000, checksumStart: 0, checksumOffset: 0)
            XCTAssertEqual(p.withUnsafeMutableBytes { h.complete($0) }, .offloadHeader, "gso type \(gso)")
        }
        let n = p.count
        for (start, offset) in [(n, 0), (n - 1, 0), (20, n), (65535, 65535), (20, 15)] {
            let h = VirtioNetHeader(flags: VirtioNetHeader.needsChecksum, gsoType: 0, headerLength: 0, gsoSize: 0,
                                    checksumStart: UInt16(clamping: start), checksumOffset: UInt16(clamping: offset))
            XCTAssertEqual(p.withUnsafeMutableBytes { h.complete($0) }, .offloadHeader, "start \(start) offset \(offset)")
        }
        // ECN's CWR bit on a TCP segment is fine.
        let ecn = VirtioNetHeader(flags: 0, gsoType: VirtioNetHeader.gsoTCPv4 | VirtioNetHeader.gsoECN, headerLength: 40,
                                  gsoSize: 1460, checksumStart: 0, checksumOffset: 0)
        var t = tcp(v4a, v4b, payload: 5000)
        XCTAssertNil(t.withUnsafeMutableBytes { ecn.complete($0) })
    }

    /// `h` asks the kernel to complete the TCP checksum (NEEDS_CSUM at the TCP header's checksum
    /// field), and `good` with `seed` in that field, completed as the kernel does, has its full
    /// checksum back.
    func assertSeedCompletes(_ good: [UInt8], _ h: VirtioNetHeader, _ seed: UInt16, ipLen: Int,
                             file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(h.flags, VirtioNetHeader.needsChecksum, file: file, line: line)
        XCTAssertEqual(Int(h.checksumStart), ipLen, file: file, line: line)
        XCTAssertEqual(h.checksumOffset, 16, file: file, line: line)
        var p = good
        p[ipLen + 16] = UInt8(seed >> 8); p[ipLen + 17] = UInt8(truncatingIfNeeded: seed)
        XCTAssertNil(p.withUnsafeMutableBytes { h.complete($0) }, file: file, line: line)
        XCTAssertEqual(checksum(p, at: ipLen + 16), checksum(good, at: ipLen + 16), file: file, line: line)
    }

    /// The seed is exactly what the kernel expects of a CHECKSUM_PARTIAL segment: completing it
    /// (summing from the TCP header to the end) gives the segment's full checksum back.
    func testLargeSegmentHeaderAndSeed() throws {
        for (src, dst, options, payload, mss) in [(v4a, v4b, 0, 64_000, 1460), (v4a, v4b, 12, 3001, 1448),
                                                  (v6a, v6b, 0, 65_000, 1440), (v6a, v6b, 8, 1441, 1440)] {
            let good = tcp(src, dst, options: options, payload: payload)
            let (h, seed) = try XCTUnwrap(good.withUnsafeBytes { VirtioNetHeader.forLargeTCP($0, segmentSize: mss) })
            let ipLen = src.isIPv4 ? 20 : 40
            XCTAssertEqual(h.gsoType, src.isIPv4 ? VirtioNetHeader.gsoTCPv4 : VirtioNetHeader.gsoTCPv6)
            XCTAssertEqual(Int(h.headerLength), ipLen + 20 + options)
            XCTAssertEqual(Int(h.gsoSize), mss)
            assertSeedCompletes(good, h, seed, ipLen: ipLen)
        }
    }

    /// A segment that fits the MTU but whose payload lwIP did not sum: NEEDS_CSUM without
    /// segmentation, and completing the seed gives the full checksum back.
    func testPartialChecksumHeaderAndSeed() throws {
        for (src, dst, options, payload) in [(v4a, v4b, 0, 1460), (v4a, v4b, 12, 1), (v6a, v6b, 0, 1440), (v6a, v6b, 8, 333)] {
            let good = tcp(src, dst, options: options, payload: payload)
            let (h, seed) = try XCTUnwrap(good.withUnsafeBytes { VirtioNetHeader.forPartialTCP($0) })
            let ipLen = src.isIPv4 ? 20 : 40
            XCTAssertEqual(h.gsoType, VirtioNetHeader.gsoNone)
            XCTAssertEqual(h.gsoSize, 0)
            assertSeedCompletes(good, h, seed, ipLen: ipLen)
        }
        XCTAssertNil(tcp(v4a, v4b, payload: 0).withUnsafeBytes { VirtioNetHeader.forPartialTCP($0) }, "no payload: lwIP summed it whole")
        XCTAssertNil(udp(v4a, v4b, payload: 100).withUnsafeBytes { VirtioNetHeader.forPartialTCP($0) })
    }

    /// Which read packets the stack may take with their checksum still partial.
    func testLeavesTCPChecksumPartialOnlyForTCPSegmentsWithPayload() {
        func header(start: Int, offset: Int = 16, gso: UInt8 = VirtioNetHeader.gsoNone, flags: UInt8 = VirtioNetHeader.needsChecksum) -> VirtioNetHeader {
            VirtioNetHeader(flags: flags, gsoType: gso, headerLength: 0, gsoSize: 0, checksumStart: UInt16(start), checksumOffset: UInt16(offset))
        }
        func leaves(_ h: VirtioNetHeader, _ p: [UInt8]) -> Bool { p.withUnsafeBytes { h.leavesTCPChecksumPartial($0) } }
        XCTAssertTrue(leaves(header(start: 20), tcp(v4a, v4b, payload: 1)))
        XCTAssertTrue(leaves(header(start: 20, gso: VirtioNetHeader.gsoTCPv4), tcp(v4a, v4b, options: 12, payload: 60_000)))
        XCTAssertTrue(leaves(header(start: 40, gso: VirtioNetHeader.gsoTCPv6 | VirtioNetHeader.gsoECN), tcp(v6a, v6b, payload: 3000)))
        XCTAssertFalse(leaves(header(start: 20), tcp(v4a, v4b, payload: 0)), "no payload: completing costs nothing")
        XCTAssertFalse(leaves(header(start: 20, flags: 0), tcp(v4a, v4b, payload: 100)), "checksum already complete")
        XCTAssertFalse(leaves(header(start: 24), tcp(v4a, v4b, payload: 100)), "not at the TCP header")
        XCTAssertFalse(leaves(header(start: 20, offset: 6), tcp(v4a, v4b, payload: 100)), "not the TCP checksum field")
        XCTAssertFalse(leaves(header(start: 20, gso: VirtioNetHeader.gsoUDP), tcp(v4a, v4b, payload: 100)))
        XCTAssertFalse(leaves(header(start: 20, offset: 6), udp(v4a, v4b, payload: 100)))
        var syn = tcp(v4a, v4b, payload: 10)
        syn[33] = 0x02
        XCTAssertFalse(leaves(header(start: 20), syn), "a SYN is held and injected later: completed")
        var fragment = tcp(v4a, v4b, payload: 100)
        fragment[6] = 0x20
        XCTAssertFalse(leaves(header(start: 20), fragment))
    }

    func testNoLargeSegmentHeaderForOthers() {
        let small = tcp(v4a, v4b, payload: 1460)
        XCTAssertNil(small.withUnsafeBytes { VirtioNetHeader.forLargeTCP($0, segmentSize: 1460) }, "fits one piece")
        XCTAssertNil(udp(v4a, v4b, payload: 9000).withUnsafeBytes { VirtioNetHeader.forLargeTCP($0, segmentSize: 1460) })
        XCTAssertNil(Array(tcp(v6a, v6b, payload: 3000)[0..<50]).withUnsafeBytes { VirtioNetHeader.forLargeTCP($0, segmentSize: 1000) })
        XCTAssertNil(tcp(v4a, v4b, payload: 3000).withUnsafeBytes { VirtioNetHeader.forLargeTCP($0, segmentSize: 0) })
    }

    /// Eight bytes per step, any alignment and length, equals the byte-pair reference.
    func testFastChecksumMatchesReference() {
        func reference(_ b: ArraySlice<UInt8>) -> UInt16 {
            var s: UInt32 = 0
            var i = b.startIndex
            while i + 1 < b.endIndex { s += UInt32(b[i]) << 8 | UInt32(b[i + 1]); i += 2 }
            if i < b.endIndex { s += UInt32(b[i]) << 8 }
            while s > 0xFFFF { s = (s & 0xFFFF) + (s >> 16) }
            return ~UInt16(s)
        }
        var rng = SystemRandomNumberGenerator()
        let data = (0..<70_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let ff = [UInt8](repeating: 0xFF, count: 70_000)
        for buffer in [data, ff] {
            for length in [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 1500, 65_535, 69_990] {
                for offset in 0..<8 {
                    let slice = buffer[offset ..< offset + length]
                    let fast = slice.withUnsafeBytes { InternetChecksum.of($0) }
                    XCTAssertEqual(fast, reference(slice), "length \(length) offset \(offset)")
                }
            }
        }
        // Accumulating in parts (odd parts included) equals one pass only at even boundaries.
        var c = InternetChecksum()
        data[0..<1000].withUnsafeBytes { c.add($0) }
        data[1000..<3001].withUnsafeBytes { c.add($0) }
        XCTAssertEqual(c.value, reference(data[0..<3001]))
    }
}
