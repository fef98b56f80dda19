import XCTest
@testable import LoftCore

final class PureAckTests: XCTestCase {
    /// A bare ACK from 198.18.0.1:80 to 198.18.0.2:40000 (v4), or fd00::1 → fd00::2 (v6).
    func ack(_ number: UInt32, window: UInt16 = 1000, v6: Bool = false, srcPort: UInt16 = 80,
             flags: UInt8 = 0x10, payload: Int = 0) -> [UInt8] {
        var p: [UInt8]
        if v6 {
            p = [0x60, 0, 0, 0, 0, UInt8(20 + payload), 6, 64]
            p += [0xfd, 0] + Array(repeating: 0, count: 13) + [1]
            p += [0xfd, 0] + Array(repeating: 0, count: 13) + [2]
        } else {
            let total = 40 + payload
            p = [0x45, 0, UInt8(total >> 8), UInt8(total & 0xFF), 0, 1, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]
        }
        p += [UInt8(srcPort >> 8), UInt8(srcPort & 0xFF), 0x9C, 0x40]  // ports
        p += [0, 0, 0x10, 0]                                                 // sequence
        p += [UInt8(number >> 24), UInt8(number >> 16 & 0xFF), UInt8(number >> 8 & 0xFF), UInt8(number & 0xFF)]
        p += [0x50, flags, UInt8(window >> 8), UInt8(window & 0xFF), 0, 0, 0, 0]
        p += Array(repeating: 0xAB, count: payload)
        return p
    }

    func supersedes(_ later: [UInt8], _ earlier: [UInt8]) -> Bool {
        later.withUnsafeBytes { l in earlier.withUnsafeBytes { e in PureAck.supersedes(l, e) } }
    }

    func testLaterAckOfTheSameConnectionSupersedes() {
        XCTAssertTrue(supersedes(ack(2000), ack(1000)))
        XCTAssertTrue(supersedes(ack(2000, v6: true), ack(1000, v6: true)))
        XCTAssertTrue(supersedes(ack(0x10), ack(0xFFFF_FFF0)), "sequence space wraps")
    }

    func testWindowUpdateSupersedesButDuplicateAcksAreKept() {
        XCTAssertTrue(supersedes(ack(1000, window: 2000), ack(1000, window: 1000)))
        XCTAssertFalse(supersedes(ack(1000), ack(1000)), "a duplicate ACK signals loss to the sender")
    }

    func testOlderAckOrAnotherConnectionDoesNot() {
        XCTAssertFalse(supersedes(ack(1000), ack(2000)))
        XCTAssertFalse(supersedes(ack(2000, srcPort: 81), ack(1000)))
        XCTAssertFalse(supersedes(ack(2000, v6: true), ack(1000)))
    }

    func testOnlyBareAcks() {
        XCTAssertFalse(supersedes(ack(2000, flags: 0x18), ack(1000)), "PSH")
        XCTAssertFalse(supersedes(ack(2000, flags: 0x11), ack(1000, flags: 0x11)), "FIN")
        XCTAssertFalse(supersedes(ack(2000, payload: 4), ack(1000, payload: 4)), "data")
        var fragment = ack(2000)
        fragment[6] = 0x20  // more fragments
        var earlier = ack(1000)
        earlier[6] = 0x20
        XCTAssertFalse(supersedes(fragment, earlier))
        XCTAssertFalse(supersedes([UInt8](repeating: 0, count: 40), [UInt8](repeating: 0, count: 40)))
    }
}
