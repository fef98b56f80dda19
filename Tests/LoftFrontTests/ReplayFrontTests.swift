import Glibc
import LoftCarriers
import LoftConfig
import LoftCore
import LoftIO
import LoftProtocol
import LoftTestSupport
import XCTest
@testable import LoftFront

/// Replay on a real front (docs/protocol.md §8.1), with clients that write the frames by hand:
/// a lost carrier parks the session with its stream to a TCP echo; a continuing RESUME on a new
/// carrier takes it over; a count never sent is a protocol error; the grace period and the
/// budget end parked sessions.
final class ReplayFrontTests: XCTestCase {
    private func settings(grace: Duration = .seconds(30), budget: Int = 256 << 20) -> FrontSettings {
        var s = FrontHarness.settings()
        s.resumeGrace = grace
        s.resumeBudget = budget
        return s
    }

    /// The session's bytes a raw client received after the STATUS that started its stream.
    private func streamBytes(_ c: RawClient) -> UInt64 {
        var n: UInt64 = 0, started = false
        for f in c.frames {
            if case .status = f, !started { started = true; continue }
            if started { n += UInt64((try? encodeAll([f]).count) ?? 0) }
        }
        return n
    }

    private func encodeAll(_ frames: [Frame]) throws -> [UInt8] {
        var q = ByteQueue()
        for f in frames { try FrameEncoder.encode(f, into: &q) }
        return q.takeAll()
    }

    private func helloReplay(_ c: RawClient) {
        c.send(.hello(Hello(capabilities: Hello.replay, token: "secret-1", clientName: "test")))
    }

    func testContinuingResumeTakesTheParkedSessionOver() throws {
        let h = try FrontHarness(settings())
        let echo = TCPEchoServer(loop: h.loop)
        let a = h.dial()
        var b: RawClient!
        let one = Array("before the break ".utf8), two = Array("after the break".utf8)
        var sentBefore: UInt64 = 0
        let ok = h.run([
            { a.connected }, { self.helloReplay(a); return true }, { a.status != nil },
            { a.send(.open(stream: 1, network: .tcp, destination: .ip(echo.endpoint))); return true },
            { a.has { $0 == .openOK(stream: 1) } },
            { a.send(.data(stream: 1, payload: one)); return true },
            { a.data[1] == one },
            {
                // Client bytes so far: OPEN, DATA and a PONG (16 bytes) for each PING. The
                // carrier is lost without a word.
                let pings = a.frames.filter { if case .ping = $0 { return true }; return false }.count
                sentBefore = UInt64((try? self.encodeAll([.open(stream: 1, network: .tcp, destination: .ip(echo.endpoint)),
                                                           .data(stream: 1, payload: one)]).count) ?? 0) + UInt64(16 * pings)
                a.carrier?.abort(); return true
            },
            { h.server.report().sessionsParkedNow == 1 },
            { b = h.dial(.h2); return true }, { b.connected },
            {
                b.send(.resume(Resume(instanceID: a.status!.instanceID, token: "secret-1",
                                      replay: ResumeReplay(continuing: true, received: self.streamBytes(a)))))
                return true
            },
            { b.status != nil || b.goAway != nil },
            { b.send(.data(stream: 1, payload: two)); return true },
            { b.data[1] == two },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): a \(a.frames), b \(b?.frames ?? [])")
        let st = try XCTUnwrap(b.status)
        XCTAssertEqual(st.replay?.continued, true)
        XCTAssertEqual(st.replay?.received, sentBefore, "the front's count of the client's bytes")
        XCTAssertEqual(st.instanceID, a.status?.instanceID)
        let r = h.server.report()
        XCTAssertEqual(r.sessionsParked, 1)
        XCTAssertEqual(r.sessionsResumedWithStreams, 1)
        XCTAssertEqual(r.sessionsParkedNow, 0)
        XCTAssertEqual(r.streamsLost, 0)
        XCTAssertEqual(r.sessionsAttached, 1)
        XCTAssertEqual(echo.accepted, 1, "one destination connection, kept across the carriers")
        XCTAssertEqual(echo.resets, 0)
    }

    func testResumeClaimingMoreThanSentIsAProtocolError() throws {
        let h = try FrontHarness(settings())
        let echo = TCPEchoServer(loop: h.loop)
        let a = h.dial()
        var b: RawClient!
        let ok = h.run([
            { a.connected }, { self.helloReplay(a); return true }, { a.status != nil },
            { a.send(.open(stream: 1, network: .tcp, destination: .ip(echo.endpoint))); return true },
            { a.has { $0 == .openOK(stream: 1) } },
            { a.carrier?.abort(); return true },
            { h.server.report().sessionsParkedNow == 1 },
            { b = h.dial(); return true }, { b.connected },
            {
                b.send(.resume(Resume(instanceID: a.status!.instanceID, token: "secret-1",
                                      replay: ResumeReplay(continuing: true, received: 1 << 30))))
                return true
            },
            { b.goAway != nil },
            { h.server.report().sessionsParkedNow == 0 && echo.open == 0 },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): b \(b?.frames ?? [])")
        XCTAssertEqual(b.goAway?.0, .protocolError)
        XCTAssertTrue(b.goAway?.1.contains("1073741824") ?? false, b.goAway?.1 ?? "")
        let r = h.server.report()
        XCTAssertEqual(r.protocolErrors, 1)
        XCTAssertEqual(r.streamsLost, 1)
        XCTAssertEqual(r.sessionsResumedWithStreams, 0)
    }

    func testGracePeriodEndsTheParkedSession() throws {
        let h = try FrontHarness(settings(grace: .seconds(3)), clock: VirtualClock())
        let echo = TCPEchoServer(loop: h.loop)
        let a = h.dial()
        var b: RawClient!
        var heldAfter = -1
        let ok = h.run([
            { a.connected }, { self.helloReplay(a); return true }, { a.status != nil },
            { a.send(.open(stream: 1, network: .tcp, destination: .ip(echo.endpoint))); return true },
            { a.has { $0 == .openOK(stream: 1) } },
            { a.carrier?.abort(); return true },
            { h.server.report().sessionsParkedNow == 1 },
            { h.server.report().parkedExpired == 1 },
            { echo.open == 0 },
            { heldAfter = h.server.report().replayHeldBytes; return true },
            // The instance is still there; its streams are not: a continuing RESUME hears so.
            { b = h.dial(); return true }, { b.connected },
            {
                b.send(.resume(Resume(instanceID: a.status!.instanceID, token: "secret-1",
                                      replay: ResumeReplay(continuing: true, received: 0))))
                return true
            },
            { b.status != nil },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): b \(b?.frames ?? [])")
        XCTAssertEqual(b.status?.replay, StatusReplay(graceMs: 3000, continued: false, received: 0))
        let r = h.server.report()
        XCTAssertEqual(r.streamsLost, 1)
        XCTAssertEqual(r.sessionsParkedNow, 0)
        XCTAssertEqual(heldAfter, 0, "nothing attached, nothing parked: nothing held")
    }

    func testBudgetEndsTheLongestParked() throws {
        let h = try FrontHarness(settings(budget: 1))
        let echo = TCPEchoServer(loop: h.loop)
        let a = h.dial()
        let ok = h.run([
            { a.connected }, { self.helloReplay(a); return true }, { a.status != nil },
            { a.send(.open(stream: 1, network: .tcp, destination: .ip(echo.endpoint))); return true },
            { a.has { $0 == .openOK(stream: 1) } },
            { a.carrier?.abort(); return true },
            { h.server.report().parkedEvicted == 1 },
            { echo.open == 0 },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        let r = h.server.report()
        XCTAssertEqual(r.sessionsParked, 1)
        XCTAssertEqual(r.sessionsParkedNow, 0)
        XCTAssertEqual(r.streamsLost, 1)
    }

    /// A client that does not offer replay gets none: its carrier's loss ends the streams.
    func testClientWithoutReplayIsNotParked() throws {
        let h = try FrontHarness(settings())
        let echo = TCPEchoServer(loop: h.loop)
        let a = h.dial()
        let ok = h.run([
            { a.connected }, { a.send(.hello(Hello(token: "secret-1", clientName: "old"))); return true }, { a.status != nil },
            { a.send(.open(stream: 1, network: .tcp, destination: .ip(echo.endpoint))); return true },
            { a.has { $0 == .openOK(stream: 1) } },
            { a.carrier?.abort(); return true },
            { echo.open == 0 },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertNil(a.status?.replay)
        XCTAssertEqual(h.server.report().sessionsParked, 0)
    }
}
