import LoftCore
import XCTest

/// Cutting a large TCP segment (the TUN's offload) into link-sized ones for packet mode.
final class TCPSegmentationTests: XCTestCase {
    func segment(v6: Bool, options: Int, payload: Int, flags: UInt8) -> [UInt8] {
        let src = IPAddress(v6 ? "fd00:18::2" : "198.18.0.2")!, dst = IPAddress(v6 ? "fd00:1::2" : "198.18.1.2")!
        var t = [UInt8](repeating: 0, count: 20 + options)
        t[0] = 0x9C; t[1] = 0x40; t[2] = 0x23; t[3] = 0x2A
        t[4] = 0xFF; t[5] = 0xFF; t[6] = 0xF0; t[7] = 0x00      // wraps around 2^32 while cut
        t[12] = UInt8((20 + options) / 4) << 4
        t[13] = flags
        t[14] = 0x10
        for i in 20..<(20 + options) { t[i] = 1 }
        t += (0..<payload).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let c = t.withUnsafeBytes { InternetChecksum.transport(source: src, destination: dst, proto: IPProtocol.tcp, segment: $0) }
        t[16] = UInt8(c >> 8); t[17] = UInt8(c & 0xFF)
        var p = PacketBuilder.ipPacket(source: src, destination: dst, proto: IPProtocol.tcp, payload: t)
        if !v6 { p[4] = 0x12; p[5] = 0x34 }
        if !v6 {
            p[10] = 0; p[11] = 0
            let hc = p.withUnsafeBytes { InternetChecksum.of(UnsafeRawBufferPointer(rebasing: $0[0..<20])) }
            p[10] = UInt8(hc >> 8); p[11] = UInt8(hc & 0xFF)
        }
        return p
    }

    func testCutsIntoValidPiecesThatJoinToTheOriginal() {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
        defer { scratch.deallocate() }
        for (v6, options, payload, mtu) in [(false, 0, 64_000, 1500), (false, 12, 3001, 1500), (true, 8, 65_000, 1400),
                                            (true, 0, 1461, 1500), (false, 0, 9000, 576)] {
            let flags = PacketSummary.tcpACK | PacketSummary.tcpFIN | 0x08 | 0x80
            let p = segment(v6: v6, options: options, payload: payload, flags: flags)
            let t = v6 ? 40 : 20, h = t + 20 + options
            var pieces: [[UInt8]] = []
            let cut = p.withUnsafeBytes { raw in
                TCPSegmentation.split(raw, transportOffset: t, maxPacket: mtu, scratch: scratch) { pieces.append(Array($0)) }
            }
            XCTAssertTrue(cut)
            XCTAssertEqual(pieces.count, (payload + (mtu - h) - 1) / (mtu - h))
            var joined: [UInt8] = []
            var expectSeq: UInt32 = 0xFFFF_F000
            for (i, q) in pieces.enumerated() {
                XCTAssertLessThanOrEqual(q.count, mtu)
                q.withUnsafeBytes { r in
                    guard case .success(let s) = PacketSummary.parse(r, maxLength: 65535) else { return XCTFail("piece \(i) does not parse") }
                    XCTAssertTrue(s.transportChecksumIsValid(r), "piece \(i) checksum")
                    XCTAssertEqual(s.tcpSequence(r), expectSeq, "piece \(i) sequence")
                }
                XCTAssertEqual(Array(q[t + 20 ..< h]), Array(p[t + 20 ..< h]), "options kept")
                let last = i == pieces.count - 1
                XCTAssertEqual(q[t + 13] & PacketSummary.tcpFIN != 0, last, "FIN on the last piece only")
                XCTAssertEqual(q[t + 13] & 0x08 != 0, last, "PSH on the last piece only")
                XCTAssertEqual(q[t + 13] & 0x80 != 0, i == 0, "CWR on the first piece only")
                XCTAssertTrue(q[t + 13] & PacketSummary.tcpACK != 0)
                if !v6 { XCTAssertEqual(UInt16(q[4]) << 8 | UInt16(q[5]), 0x1234 &+ UInt16(i), "IPv4 id") }
                joined += q[h...]
                expectSeq = expectSeq &+ UInt32(q.count - h)
            }
            XCTAssertEqual(joined, Array(p[h...]))
        }
    }

    func testLeavesAloneWhatFitsOrIsNotCuttable() {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
        defer { scratch.deallocate() }
        let small = segment(v6: false, options: 0, payload: 1460, flags: PacketSummary.tcpACK)
        XCTAssertFalse(small.withUnsafeBytes { TCPSegmentation.split($0, transportOffset: 20, maxPacket: 1500, scratch: scratch) { _ in XCTFail() } })
        let big = segment(v6: false, options: 40, payload: 3000, flags: PacketSummary.tcpACK)
        XCTAssertFalse(big.withUnsafeBytes { TCPSegmentation.split($0, transportOffset: 20, maxPacket: 80, scratch: scratch) { _ in XCTFail() } }, "headers alone fill the MTU")
        XCTAssertFalse(big.withUnsafeBytes { TCPSegmentation.split($0, transportOffset: 20, maxPacket: 1500, scratch: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<1000])) { _ in XCTFail() } }, "scratch too small")
    }
}

/// Cutting a UDP super-datagram (the TUN's USO) into the app's datagrams.
final class UDPSegmentationTests: XCTestCase {
    func superDatagram(v6: Bool, payload: Int) -> [UInt8] {
        let src = IPAddress(v6 ? "fd00:18::2" : "198.18.0.2")!, dst = IPAddress(v6 ? "fd00:1::2" : "198.18.1.2")!
        var u: [UInt8] = [0x9C, 0x40, 0x23, 0x2B, 0, 0, 0x12, 0x34]   // length and checksum: the offload's, not checked
        u += (0..<payload).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
        var p = PacketBuilder.ipPacket(source: src, destination: dst, proto: IPProtocol.udp, payload: u)
        if !v6 { p[4] = 0xFF; p[5] = 0xFE }   // the id wraps while cut
        return p
    }

    func testCutsIntoDatagramsWithFullChecksumsThatJoinToThePayload() throws {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
        defer { scratch.deallocate() }
        for (v6, payload, size) in [(false, 12_000, 1200), (true, 60_001, 1452), (false, 1, 1200), (true, 2400, 1200)] {
            let p = superDatagram(v6: v6, payload: payload)
            let t = v6 ? 40 : 20
            var pieces: [[UInt8]] = []
            let cut = p.withUnsafeBytes { UDPSegmentation.split($0, transportOffset: t, segmentSize: size, scratch: scratch) { pieces.append(Array($0)) } }
            XCTAssertTrue(cut)
            XCTAssertEqual(pieces.count, (payload + size - 1) / size)
            var joined: [UInt8] = []
            for (i, piece) in pieces.enumerated() {
                let s = try piece.withUnsafeBytes { try PacketSummary.parse($0, maxLength: 65535).get() }
                XCTAssertEqual(s.proto, IPProtocol.udp)
                XCTAssertTrue(piece.withUnsafeBytes { s.transportChecksumIsValid($0) }, "piece \(i) of \(payload)/\(size) v6 \(v6)")
                XCTAssertEqual(Int(piece[t + 4]) << 8 | Int(piece[t + 5]), piece.count - t, "UDP length")
                if !v6 {
                    XCTAssertEqual(Int(piece[4]) << 8 | Int(piece[5]), (0xFFFE + i) & 0xFFFF, "IPv4 id")
                    XCTAssertEqual(piece.withUnsafeBytes { InternetChecksum.of(UnsafeRawBufferPointer(rebasing: $0[0..<20])) }, 0)
                }
                XCTAssertLessThanOrEqual(piece.count - t - 8, size)
                joined += piece[(t + 8)...]
            }
            XCTAssertEqual(joined, Array(p[(t + 8)...]))
        }
    }

    func testRefusesWhatIsNotAUDPSuperDatagram() {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 16)
        defer { scratch.deallocate() }
        func cuts(_ p: [UInt8], _ size: Int) -> Bool {
            p.withUnsafeBytes { UDPSegmentation.split($0, transportOffset: 20, segmentSize: size, scratch: scratch) { _ in } }
        }
        XCTAssertFalse(cuts(superDatagram(v6: false, payload: 3000), 0), "segment size 0")
        XCTAssertFalse(cuts(superDatagram(v6: false, payload: 3000), 4000), "a piece larger than the scratch")
        XCTAssertFalse(cuts(superDatagram(v6: false, payload: 0), 1200), "no payload")
        var tcp = superDatagram(v6: false, payload: 3000)
        tcp[9] = IPProtocol.tcp
        XCTAssertFalse(cuts(tcp, 1200))
    }
}
