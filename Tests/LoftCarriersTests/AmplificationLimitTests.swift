import LoftQUIC
import XCTest
@testable import LoftCarriers

/// RFC 9000 §8.1: to an address not yet validated, at most 3x the bytes received from it.
final class AmplificationLimitTests: XCTestCase {
    /// One 1,200-byte Initial: the first flight (two packets) and one probe go, the probes after
    /// them do not (ngtcp2 0.12.1's timeouts alone would send six packets).
    func testOneInitialAllowsThreeTimesItsBytes() {
        var a = AmplificationLimit()
        a.received(1200)
        XCTAssertEqual(a.send(packets: 2, segment: 1200, bytes: 2400), 2)
        XCTAssertEqual(a.send(packets: 2, segment: 1200, bytes: 2400), 1, "the second probe packet is over 3x")
        XCTAssertEqual(a.send(packets: 2, segment: 1200, bytes: 2400), 0)
        XCTAssertEqual(a.send(packets: 1, segment: 60, bytes: 60), 0, "not even a small one: 3,600 are gone")
        XCTAssertEqual(a.sent, 3600)
        XCTAssertEqual(a.held, 4)
    }

    /// Whole packets only; a short last packet counts as what it is.
    func testBatchIsCutAtAPacketBoundary() {
        var a = AmplificationLimit()
        a.received(1000)                   // 3,000 allowed
        XCTAssertEqual(a.send(packets: 3, segment: 1200, bytes: 2500), 3, "1200 + 1200 + 100 fit")
        XCTAssertEqual(a.sent, 2500)
        XCTAssertEqual(a.send(packets: 2, segment: 400, bytes: 800), 1, "500 left: one packet of 400")
        XCTAssertEqual(a.sent, 2900)
        XCTAssertEqual(a.held, 1)
    }

    /// More bytes from the client (its ACKs, a second Initial) open more room.
    func testMoreReceivedMoreAllowed() {
        var a = AmplificationLimit()
        a.received(1200)
        XCTAssertEqual(a.send(packets: 4, segment: 1200, bytes: 4800), 3)
        XCTAssertEqual(a.send(packets: 1, segment: 1200, bytes: 1200), 0)
        a.received(400)
        XCTAssertEqual(a.send(packets: 1, segment: 1200, bytes: 1200), 1)
        XCTAssertEqual(a.sent, 4800)
        XCTAssertEqual(a.held, 2)
    }

    func testNothingReceivedNothingSent() {
        var a = AmplificationLimit()
        XCTAssertEqual(a.send(packets: 1, segment: 1200, bytes: 1200), 0)
        XCTAssertEqual(a.held, 1)
    }
}
