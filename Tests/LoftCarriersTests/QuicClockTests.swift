import CNgtcp2
@testable import LoftCarriers
import LoftCore
import LoftIO
import LoftQUIC
import LoftTLS
import LoftTestSupport
import XCTest

/// QUIC on the loop's clock: ngtcp2's timestamps are the connection's loop's `nanoseconds`, so
/// on a `VirtualClock` its timers (loss detection, the handshake timeout, the idle timeout)
/// run as the test advances time, without waiting. With ngtcp2 on a clock of its own these
/// tests fail: minutes of virtual time pass in a fraction of a second of real time.
/// The two ends are joined in memory by `QuicResetTests.Link`, every packet crossing 1 ms later.
final class QuicClockTests: XCTestCase {
    /// A client with no server: its Initial is sent again at each loss-detection deadline
    /// (PTO, backing off), and the handshake timeout (10 s from the connection's start on the
    /// loop's clock) ends it, all in virtual time.
    func testHandshakeTimeoutAndRetransmitsOnVirtualTime() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let path = try QuicResetTests.Link(loop: loop)
        path.delayMs = 1
        path.serverless = true
        let realStart = monotonicMilliseconds()
        try path.dial()
        loop.advance(by: 1)
        XCTAssertEqual(path.clientSent, 1, "the first Initial")
        loop.advance(by: QuicLimits().handshakeTimeoutMs - 100)
        XCTAssertNil(path.clientClosed, "open until the handshake timeout")
        XCTAssertGreaterThanOrEqual(path.clientSent, 3, "the Initial was sent again at the loss-detection deadlines")
        let more = loop.advance(limitMs: 1_000) { path.clientClosed != nil }
        XCTAssertNotNil(path.clientClosed, "the handshake timeout ended the connection")
        XCTAssertLessThanOrEqual(more, 200, "at the handshake timeout")
        XCTAssertLessThan(monotonicMilliseconds() - realStart, 5_000, "virtual time, not real")
    }

    /// Once the handshake is done and the path goes silent, both ends stay up until the idle
    /// timeout (30 s) and the client ends with it: 30 s of virtual time.
    func testIdleTimeoutOnVirtualTime() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let path = try QuicResetTests.Link(loop: loop)
        path.delayMs = 1
        let realStart = monotonicMilliseconds()
        try path.dial()
        _ = loop.advance(step: 1, limitMs: 2_000) { path.handshakes == 2 }
        XCTAssertEqual(path.handshakes, 2, "handshake")
        // What the handshake's end sends (HANDSHAKE_DONE, NEW_TOKEN, acknowledgments) crosses.
        loop.advance(by: 50)
        path.cut = true
        let idle = QuicLimits().idleTimeoutMs
        loop.advance(by: idle - 1_000)
        XCTAssertNil(path.clientClosed, "open until the idle timeout")
        let more = loop.advance(limitMs: 3_000) { path.clientClosed != nil }
        guard case .timeout(let why)? = path.clientClosed else {
            return XCTFail("\(String(describing: path.clientClosed))")
        }
        XCTAssertEqual(why, "QUIC idle timeout")
        XCTAssertLessThanOrEqual(more, 1_100, "at the idle timeout")
        XCTAssertLessThan(monotonicMilliseconds() - realStart, 5_000, "virtual time, not real")
    }
}
