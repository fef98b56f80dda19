import XCTest
@testable import LoftCore

final class TCPOptionsTests: XCTestCase {
    /// A TCP SYN-ACK from 198.18.0.2:80 (or fd00::2) to the app with the given options.
    private func synAck(v6: Bool = false, options: [UInt8]) -> [UInt8] {
        var t = [UInt8](repeating: 0, count: 20) + options
        while t.count % 4 != 0 { t.append(0) }
        t[0] = 0; t[1] = 80; t[2] = 0x9c; t[3] = 0x40
        t[12] = UInt8(t.count / 4) << 4
        t[13] = PacketSummary.tcpSYN | PacketSummary.tcpACK
        t[14] = 0xff; t[15] = 0xff
        let src = IPAddress(v6 ? "fd00::2" : "198.18.0.2")!, dst = IPAddress(v6 ? "fd00::1" : "198.18.0.1")!
        let sum = t.withUnsafeBytes { InternetChecksum.transport(source: src, destination: dst, proto: IPProtocol.tcp, segment: $0) }
        t[16] = UInt8(sum >> 8); t[17] = UInt8(sum & 0xff)
        return PacketBuilder.ipPacket(source: src, destination: dst, proto: IPProtocol.tcp, payload: t)
    }

    private func check(_ packet: [UInt8], expectMSS: UInt16?, file: StaticString = #filePath, line: UInt = #line) {
        packet.withUnsafeBytes { p in
            guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535) else { return XCTFail("no parse", file: file, line: line) }
            XCTAssertTrue(s.transportChecksumIsValid(p), "checksum", file: file, line: line)
            XCTAssertEqual(TCPOptions.mss(inTCPHeader: UnsafeRawBufferPointer(rebasing: p[s.transportOffset...])), expectMSS,
                           file: file, line: line)
        }
    }

    func testReadsMSSAfterOtherOptions() {
        check(synAck(options: [2, 4, 0x05, 0xb4]), expectMSS: 1460)
        check(synAck(options: [1, 1, 3, 3, 7, 2, 4, 0x23, 0x28]), expectMSS: 9000)
        check(synAck(options: [4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 2, 4, 0xff, 0xd7]), expectMSS: 65495)
        check(synAck(options: []), expectMSS: nil)
    }

    func testMalformedOptionsGiveNoMSS() {
        check(synAck(options: [3, 0, 2, 4, 5, 0xb4]), expectMSS: nil)          // length 0
        check(synAck(options: [3, 9, 2, 4, 5, 0xb4]), expectMSS: nil)          // runs past the header
        check(synAck(options: [0, 2, 4, 5, 0xb4]), expectMSS: nil)             // after end-of-list
        check(synAck(options: [2, 3, 5, 0xb4]), expectMSS: nil)                // MSS of length 3
        check(synAck(options: [1, 1, 1]), expectMSS: nil)                      // NOPs only
    }

    func testRaisesMSSKeepingTheChecksumAtEvenAndOddOffsets() {
        for v6 in [false, true] {
            for options: [UInt8] in [[2, 4, 0x05, 0xb4], [1, 2, 4, 0x05, 0xb4], [1, 1, 1, 2, 4, 0x05, 0xb4],
                                     [4, 2, 1, 2, 4, 0x05, 0xb4, 1, 3, 3, 7]] {
                var p = synAck(v6: v6, options: options)
                let t = v6 ? 40 : 20
                let changed = p.withUnsafeMutableBytes { TCPOptions.raiseMSS(in: $0, transportOffset: t, to: 65495) }
                XCTAssertTrue(changed, "\(options)")
                check(p, expectMSS: 65495)
                // Never lowered.
                let again = p.withUnsafeMutableBytes { TCPOptions.raiseMSS(in: $0, transportOffset: t, to: 1460) }
                XCTAssertFalse(again)
                check(p, expectMSS: 65495)
            }
        }
    }

    func testNoMSSOptionChangesNothing() {
        var p = synAck(options: [1, 1, 4, 2])
        let before = p
        XCTAssertFalse(p.withUnsafeMutableBytes { TCPOptions.raiseMSS(in: $0, transportOffset: 20, to: 9000) })
        XCTAssertEqual(p, before)
        XCTAssertFalse(p.withUnsafeMutableBytes { TCPOptions.raiseMSS(in: $0, transportOffset: 60, to: 9000) })
    }

    /// lwIP's SYN-ACK with its window scale 1, at an odd and an even position: set to 3, the
    /// checksum stays valid and the MSS is untouched; no option, or already 3: nothing changes.
    func testSetsWindowScaleKeepingTheChecksum() {
        for (options, v6) in [([2, 4, 0x05, 0xb4, 1, 3, 3, 1], false),        // odd: lwIP's layout
                              ([2, 4, 0x05, 0xb4, 3, 3, 1, 1], true),         // even
                              ([1, 1, 3, 3, 1, 2, 4, 0xff, 0xd7], false)] as [([UInt8], Bool)] {
            var p = synAck(v6: v6, options: options)
            let t = v6 ? 40 : 20
            let mss = p.withUnsafeBytes { TCPOptions.mss(inTCPHeader: UnsafeRawBufferPointer(rebasing: $0[t...])) }
            XCTAssertTrue(p.withUnsafeMutableBytes { TCPOptions.setWindowScale(in: $0, transportOffset: t, to: 3) })
            XCTAssertEqual(p.withUnsafeBytes { TCPOptions.windowScale(inTCPHeader: UnsafeRawBufferPointer(rebasing: $0[t...])) }, 3)
            check(p, expectMSS: mss)
            XCTAssertFalse(p.withUnsafeMutableBytes { TCPOptions.setWindowScale(in: $0, transportOffset: t, to: 3) })
            XCTAssertFalse(p.withUnsafeMutableBytes { TCPOptions.setWindowScale(in: $0, transportOffset: t, to: 15) }, "above 14")
        }
        var none = synAck(options: [2, 4, 0x05, 0xb4])
        let before = none
        XCTAssertFalse(none.withUnsafeMutableBytes { TCPOptions.setWindowScale(in: $0, transportOffset: 20, to: 3) })
        XCTAssertEqual(none, before)
        XCTAssertNil(synAck(options: [3, 2, 1, 1]).withUnsafeBytes { TCPOptions.windowScale(inTCPHeader: UnsafeRawBufferPointer(rebasing: $0[20...])) })
    }
}
