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

    /// The tag the coalescer compares first is the same wherever `sameConnection` says the
    /// same connection (other segments of it: data, FIN, other windows and numbers), and
    /// differs for another port or family.
    func testConnectionTagFollowsSameConnection() {
        for v6 in [false, true] {
            let held = ack(1000, v6: v6)
            let others = [ack(2000, v6: v6), ack(1000, window: 7, v6: v6), ack(5, v6: v6, flags: 0x18, payload: 100),
                          ack(9, v6: v6, flags: 0x11), ack(1000, v6: v6, srcPort: 81), ack(1000, v6: !v6)]
            held.withUnsafeBytes { h in
                for o in others {
                    o.withUnsafeBytes { p in
                        if PureAck.sameConnection(p, as: h) {
                            XCTAssertEqual(PureAck.connectionTag(p), PureAck.connectionTag(h))
                        } else {
                            XCTAssertNotEqual(PureAck.connectionTag(p), PureAck.connectionTag(h))
                        }
                    }
                }
                XCTAssertEqual(others.filter { o in o.withUnsafeBytes { PureAck.sameConnection($0, as: h) } }.count, 4)
            }
        }
        XCTAssertNil([UInt8](repeating: 0, count: 19).withUnsafeBytes { PureAck.connectionTag($0) })
    }

    // MARK: AckCoalescer

    /// What the coalescer wrote, each packet's acknowledgment number and source port.
    final class Wire {
        var packets: [[UInt8]] = []
        lazy var coalescer = AckCoalescer { [unowned self] in self.packets.append(Array($0)) }
        /// Passes `p`; the packet as the caller writes it when not held.
        func send(_ p: [UInt8]) {
            let held = p.withUnsafeBytes { coalescer.pass($0) }
            if !held { packets.append(p) }
        }
        var summary: [String] {
            packets.map { p in
                let tcp = p[0] >> 4 == 4 ? 20 : 40
                let port = Int(p[tcp]) << 8 | Int(p[tcp + 1])
                let ack = p[tcp + 8..<tcp + 12].reduce(0) { $0 << 8 | Int($1) }
                return "\(port):\(ack)\(p[tcp + 13] == 0x10 ? "" : "+")"
            }
        }
    }

    func testInterleavedConnectionsKeepOneAckEachUntilTheBatchEnds() {
        let w = Wire()
        for n in 1...4 {
            w.send(ack(UInt32(n * 1000), srcPort: 80))
            w.send(ack(UInt32(n * 1000), srcPort: 81))
            w.send(ack(UInt32(n * 1000), v6: true, srcPort: 80))
        }
        XCTAssertEqual(w.packets.count, 0)
        XCTAssertEqual(w.coalescer.held, 3)
        w.coalescer.flush()
        XCTAssertEqual(w.summary, ["80:4000", "81:4000", "80:4000"])
        XCTAssertEqual(w.coalescer.coalesced, 9)
        XCTAssertEqual(w.coalescer.held, 0)
    }

    func testAConnectionsOtherSegmentsNeverOvertakeItsHeldAck() {
        let w = Wire()
        w.send(ack(1000, srcPort: 80))
        w.send(ack(1000, srcPort: 81))
        w.send(ack(2000, srcPort: 81, flags: 0x18, payload: 10))  // data on 81: its ACK goes first
        XCTAssertEqual(w.summary, ["81:1000", "81:2000+"])
        w.send(ack(3000, srcPort: 80, flags: 0x11))                // FIN on 80
        XCTAssertEqual(w.summary, ["81:1000", "81:2000+", "80:1000", "80:3000+"])
        XCTAssertEqual(w.coalescer.held, 0)
        // A large segment (written by the caller) releases the same way.
        w.send(ack(4000, srcPort: 82))
        let big = ack(5000, srcPort: 82, flags: 0x10, payload: 200)
        big.withUnsafeBytes { w.coalescer.release(before: $0) }
        XCTAssertEqual(w.summary.last, "82:4000")
    }

    func testDuplicateAcksBothLeaveInOrder() {
        let w = Wire()
        w.send(ack(1000))
        w.send(ack(1000))
        w.send(ack(1000))
        w.coalescer.flush()
        XCTAssertEqual(w.summary, ["80:1000", "80:1000", "80:1000"])
        XCTAssertEqual(w.coalescer.coalesced, 0)
    }

    func testAFullTableIsWrittenBeforeAnotherConnectionIsHeld() {
        let w = Wire()
        for port in 0..<AckCoalescer.slots { w.send(ack(1000, srcPort: UInt16(100 + port))) }
        XCTAssertEqual(w.packets.count, 0)
        w.send(ack(1000, srcPort: 999))
        XCTAssertEqual(w.packets.count, AckCoalescer.slots)
        XCTAssertEqual(w.coalescer.held, 1)
        w.coalescer.flush()
        XCTAssertEqual(w.summary.last, "999:1000")
    }

    func testOtherProtocolsPassUntouched() {
        let w = Wire()
        w.send(ack(1000))
        var udp = ack(1000, payload: 8)
        udp[9] = 17
        w.send(udp)
        XCTAssertEqual(w.packets.count, 1, "a UDP packet does not release a TCP connection's ACK")
        XCTAssertEqual(w.coalescer.held, 1)
    }
}
