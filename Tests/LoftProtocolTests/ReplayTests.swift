import XCTest
import LoftCore
@testable import LoftProtocol

/// Replay (docs/protocol.md §8.1): the codec of its fields and the state machine on the
/// sans-IO sessions, with carriers that lose bytes in flight.
final class ReplayCodecTests: XCTestCase {
    private func statusBody(flags: UInt8, tail: [UInt8]) -> [UInt8] {
        Sample.instance.bytes + be32(1000) + be32(8) + be16(1400) + [10, 0, 0, 2, 24, 10, 0, 0, 1, flags, 0] + tail
    }

    func testAckLayout() throws {
        XCTAssertEqual(try encoded(.ack(0x0102_0304_0506_0708)), [0x32, 0, 0, 0, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8])
        assertDecodeError(rawFrame(0x32, length: 7, [1, 2, 3, 4, 5, 6, 7]), .badLength(.ack, 7))
        assertDecodeError(rawFrame(0x32, stream: 1, be64(1)), .badStreamID(.ack, 1))
    }

    func testResumeReplayFields() throws {
        let base = [1] + Sample.instance.bytes + [3] + Array("tok".utf8)
        XCTAssertEqual(try decodeOne(rawFrame(0x02, base + be32(3) + be64(77))),
                       .resume(Resume(instanceID: Sample.instance, token: "tok", replay: ResumeReplay(continuing: true, received: 77))))
        XCTAssertEqual(try decodeOne(rawFrame(0x02, base + be32(1 | 0x100) + be64(0))),
                       .resume(Resume(instanceID: Sample.instance, token: "tok", replay: ResumeReplay(continuing: false, received: 0))),
                       "unknown capability bits are ignored")
        assertDecodeError(rawFrame(0x02, base + be32(2) + be64(0)), .invalidValue(.resume, field: "capabilities"))
        assertDecodeError(rawFrame(0x02, base + be32(1) + be64(5)), .invalidValue(.resume, field: "received"))
        assertDecodeError(rawFrame(0x02, base + be32(3) + [1, 2]), .truncatedBody(.resume))
        assertDecodeError(rawFrame(0x02, base + be32(3) + be64(0) + [9]), .badLength(.resume, base.count + 13))
        XCTAssertThrowsError(try encoded(.resume(Resume(instanceID: Sample.instance, token: "",
                                                        replay: ResumeReplay(continuing: false, received: 1)))))
    }

    func testStatusReplayFields() throws {
        let f = try decodeOne(rawFrame(0x03, statusBody(flags: 0x80, tail: be32(30_000) + [1] + be64(9))))
        guard case .status(let st)? = f else { return XCTFail("\(String(describing: f))") }
        XCTAssertEqual(st.replay, StatusReplay(graceMs: 30_000, continued: true, received: 9))
        assertDecodeError(rawFrame(0x03, statusBody(flags: 0x80, tail: be32(1) + [2] + be64(0))), .invalidValue(.status, field: "continued"))
        assertDecodeError(rawFrame(0x03, statusBody(flags: 0x80, tail: be32(1) + [0] + be64(3))), .invalidValue(.status, field: "received"))
        assertDecodeError(rawFrame(0x03, statusBody(flags: 0x80, tail: be32(1))), .truncatedBody(.status))
        assertDecodeError(rawFrame(0x03, statusBody(flags: 0x40, tail: [])), .invalidValue(.status, field: "flags"))
        // Without the flag the body ends at the DNS list, as in version 1 without replay.
        assertDecodeError(rawFrame(0x03, statusBody(flags: 0, tail: be32(1))), .badLength(.status, 37 + 4))
    }
}

/// A client and a front whose carrier can be cut, losing what is in flight; the front keeps a
/// parked session and hands it to a RESUME like loft-front does.
final class ReplayPair: FrontSessionDelegate {
    let client: ClientSession
    var front: FrontSession
    let cd = ClientRecorder()
    let frontLimits: SessionLimits
    let graceMs: UInt32
    /// Parked sessions by instance (loft-front's table).
    var parked: FrontSession?
    var instances: Set<InstanceID> = []
    var rng = SplitMix64(seed: 11)
    var accepted: [UInt32] = []
    var frontReadable: [UInt32: Int] = [:]
    var frontResets: [UInt32] = []
    var resumeError: ProtocolError?
    /// Carrier bytes taken from an end but not yet delivered (they are lost by `cut`).
    var upInFlight: [UInt8] = []
    var downInFlight: [UInt8] = []

    init(clientReplay: Bool = true, frontReplay: Bool = true, graceMs: UInt32 = 30_000,
         clientLimits: SessionLimits = .init(), frontLimits: SessionLimits = .init()) {
        var cl = clientLimits; cl.replay = clientReplay
        var fl = frontLimits; fl.replay = frontReplay
        client = ClientSession(token: "tok", clientName: "laptop", limits: cl)
        self.frontLimits = fl
        self.graceMs = graceMs
        front = FrontSession(limits: fl, keepaliveMs: 15_000, replayGraceMs: graceMs)
        client.delegate = cd
        front.delegate = self
    }

    // MARK: the carrier

    /// Moves up to `limit` bytes each way per round until nothing moves.
    func pump(limit: Int = .max) throws {
        for _ in 0..<100_000 {
            var moved = false
            client.withOutput { p in upInFlight += p; return p.count }
            front.withOutput { p in downInFlight += p; return p.count }
            if !upInFlight.isEmpty {
                let n = min(upInFlight.count, limit, Int(rng.next() % 9000) + 1)
                let chunk = Array(upInFlight[..<n]); upInFlight.removeFirst(n)
                try front.receive(chunk)
                moved = true
            }
            if !downInFlight.isEmpty {
                let n = min(downInFlight.count, limit, Int(rng.next() % 9000) + 1)
                let chunk = Array(downInFlight[..<n]); downInFlight.removeFirst(n)
                try client.receive(chunk)
                moved = true
            }
            if !moved && client.outputCount == 0 && front.outputCount == 0 { return }
        }
        XCTFail("pump did not settle")
    }

    /// Delivers only part of what is in flight (`up`/`down` bytes), then the carrier breaks:
    /// the rest is lost.
    func cut(up: Int = 0, down: Int = 0) throws {
        client.withOutput { p in upInFlight += p; return p.count }
        front.withOutput { p in downInFlight += p; return p.count }
        let u = Array(upInFlight.prefix(up)), d = Array(downInFlight.prefix(down))
        upInFlight = []; downInFlight = []
        if !u.isEmpty { try front.receive(u) }
        if !d.isEmpty { try client.receive(d) }
        client.detach()
        if front.park() { parked = front }
    }

    /// A new carrier: a fresh FrontSession reads the RESUME; a continuing one is handed to the
    /// parked session (if it is still there).
    func reattach() throws {
        front = FrontSession(limits: frontLimits, keepaliveMs: 15_000, replayGraceMs: graceMs)
        front.delegate = self
        client.attach()
        try pump()
    }

    // MARK: FrontSessionDelegate

    func frontSession(_ s: FrontSession, hello: Hello) -> Status? {
        instances.insert(Sample.instance)
        return Sample.status()
    }

    func frontSession(_ s: FrontSession, resume: Resume) -> Status? {
        guard instances.contains(resume.instanceID) else { s.goAway(.unknownInstance, text: "no"); return nil }
        if let rp = resume.replay, rp.continuing, let old = parked {
            parked = nil
            do {
                try old.resumeParked(peerReceived: rp.received)
            } catch {
                resumeError = error
                s.goAway(.protocolError, text: error.description)
                return nil
            }
            front = old   // the carrier now feeds the parked session
            return nil
        }
        parked = nil      // a client that did not keep its streams: the parked ones go
        return Sample.status()
    }

    func streamRequested(_ s: FrontSession, stream: UInt32, network: FlowNetwork, destination: Destination) {
        accepted.append(stream)
        s.accept(stream: stream)
    }
    func streamReadable(_ s: FrontSession, stream: UInt32) { frontReadable[stream, default: 0] += 1 }
    func streamWritable(_ s: FrontSession, stream: UInt32) {}
    func streamReset(_ s: FrontSession, stream: UInt32, reason: RstReason) { frontResets.append(stream) }
    func datagramReceived(_ s: FrontSession, association: UInt32, to: Destination, payload: UnsafeRawBufferPointer) {}
    func sessionOutputReady(_ s: FrontSession) {}

    // MARK: helpers

    func establish() throws {
        client.attach()
        try pump()
        XCTAssertEqual(client.state, .established)
    }

    static func readAll(_ s: SessionEnd, _ id: UInt32, into out: inout [UInt8]) -> Bool {
        var buf = [UInt8](repeating: 0, count: 70_000)
        while true {
            let r = buf.withUnsafeMutableBytes { s.read(stream: id, into: $0) }
            switch r {
            case .data(let n): out += buf[..<n]
            case .wouldBlock: return false
            case .eof: return true
            }
        }
    }

    static func write(_ s: SessionEnd, _ id: UInt32, _ bytes: [UInt8], from: inout Int) {
        while from < bytes.count {
            let n = bytes[from...].withUnsafeBytes { s.write(stream: id, $0) }
            if n == 0 { return }
            from += n
        }
    }
}

final class ReplayTests: XCTestCase {
    func pattern(_ n: Int, seed: UInt64) -> [UInt8] {
        var r = SplitMix64(seed: seed)
        return (0..<n).map { _ in UInt8(truncatingIfNeeded: r.next()) }
    }

    func testNegotiation() throws {
        let p = ReplayPair()
        p.client.attach()
        var hello: [UInt8] = []
        p.client.withOutput { hello = Array($0); return 0 }
        guard case .hello(let h)? = try decodeAll(hello).first else { return XCTFail() }
        XCTAssertEqual(h.capabilities, Hello.replay)
        try p.pump()
        XCTAssertTrue(p.client.replayActive)
        XCTAssertTrue(p.front.replayActive)
        XCTAssertEqual(p.client.replayGraceMs, 30_000)
        XCTAssertEqual(p.cd.established.first?.status.replay, StatusReplay(graceMs: 30_000))

        // A front without replay (config off, or one that never heard of it): plain version 1.
        let old = ReplayPair(frontReplay: false)
        try old.establish()
        XCTAssertFalse(old.client.replayActive)
        XCTAssertNil(old.cd.established.first?.status.replay)
        // Grace 0 turns it off too.
        let zero = ReplayPair(graceMs: 0)
        try zero.establish()
        XCTAssertFalse(zero.client.replayActive)
        // A client without replay sends capabilities 0 and gets no replay fields.
        let oldClient = ReplayPair(clientReplay: false)
        oldClient.client.attach()
        oldClient.client.withOutput { hello = Array($0); return 0 }
        guard case .hello(let h0)? = try decodeAll(hello).first else { return XCTFail() }
        XCTAssertEqual(h0.capabilities, 0)
        try oldClient.pump()
        XCTAssertFalse(oldClient.front.replayActive)
        // ... and after a carrier loss everything is dropped as before.
        _ = try XCTUnwrap(oldClient.client.openStream(to: Sample.v4))
        try oldClient.pump()
        try oldClient.cut()
        XCTAssertFalse(oldClient.client.isParked)
        XCTAssertNil(oldClient.parked)
        XCTAssertEqual(oldClient.client.heldStreamCount, 0)
    }

    func testAckOnlyWithReplay() throws {
        let p = ReplayPair(frontReplay: false)
        try p.establish()
        XCTAssertThrowsProtocolError(.unexpectedFrame(.ack)) { try p.client.receive(frames: [.ack(0)]) }
    }

    /// Both directions cut at random points, several times, with bytes lost in flight each way
    /// (ACKs among them): every byte arrives once, in order, and the FINs too.
    func testTransfersSurviveCarrierLosses() throws {
        try transfers(limits: .init())
    }

    /// The same with a small output and replay bound: fully sent output pieces are kept aside
    /// whole (`kept`), released by ACKs piece by piece, and joined again for a resume.
    func testTransfersWithKeptPieces() throws {
        let small = SessionLimits(maxOutputBytes: 64 << 10, maxReplayBytes: 256 << 10)
        let kept = try transfers(limits: small)
        XCTAssertGreaterThan(kept, 0, "the kept pieces were used")
    }

    @discardableResult
    func transfers(limits: SessionLimits) throws -> Int {
        var maxKept = 0
        for seed in 1...6 as ClosedRange<UInt64> {
            let p = ReplayPair(clientLimits: limits, frontLimits: limits)
            p.rng = SplitMix64(seed: seed)
            try p.establish()
            let id = try XCTUnwrap(p.client.openStream(to: Sample.v4))
            let down = pattern(3_000_000 + Int(seed) * 7_777, seed: seed)
            let up = pattern(2_000_000 + Int(seed) * 3_333, seed: seed + 100)
            var downAt = 0, upAt = 0
            var gotDown: [UInt8] = [], gotUp: [UInt8] = []
            var downDone = false, upDone = false, finDown = false, finUp = false
            var cuts = 0
            var rng = SplitMix64(seed: seed * 31)
            for round in 0..<10_000 {
                if !p.accepted.isEmpty && !finDown {
                    ReplayPair.write(p.front, id, down, from: &downAt)
                    if downAt == down.count { p.front.finish(stream: id); finDown = true }
                }
                if !finUp {
                    ReplayPair.write(p.client, id, up, from: &upAt)
                    if upAt == up.count { p.client.finish(stream: id); finUp = true }
                }
                if round % 3 == 2 && cuts < 8 {
                    // Part of what is in flight arrives, the rest is lost with the carrier.
                    try p.cut(up: Int(rng.next() % 200_000), down: Int(rng.next() % 200_000))
                    cuts += 1
                    XCTAssertTrue(p.client.isParked)
                    XCTAssertNotNil(p.parked)
                    try p.reattach()
                    XCTAssertNil(p.resumeError)
                    XCTAssertEqual(p.client.state, .established)
                } else {
                    try p.pump(limit: 100_000)
                }
                maxKept = max(maxKept, p.client.engine.keptBytes, p.front.engine.keptBytes)
                XCTAssertLessThanOrEqual(p.client.replayHeldBytes, p.client.engine.maxReplay)
                XCTAssertLessThanOrEqual(p.front.replayHeldBytes, p.front.engine.maxReplay)
                if !downDone { downDone = ReplayPair.readAll(p.client, id, into: &gotDown) }
                if !upDone { upDone = ReplayPair.readAll(p.front, id, into: &gotUp) }
                try p.pump(limit: 100_000)
                if downDone && upDone { break }
            }
            XCTAssertTrue(downDone && upDone, "seed \(seed)")
            XCTAssertEqual(gotDown.count, down.count, "seed \(seed)")
            XCTAssertTrue(gotDown == down, "seed \(seed): download differs")
            XCTAssertTrue(gotUp == up, "seed \(seed): upload differs")
            XCTAssertEqual(p.cd.resets.count, 0)
            XCTAssertEqual(p.frontResets, [])
            XCTAssertEqual(p.cd.established.count, cuts + 1)
            XCTAssertTrue(p.cd.established.dropFirst().allSatisfy(\.resumed))
            XCTAssertEqual(p.client.counters.streamsContinued, UInt64(cuts))
            XCTAssertGreaterThan(p.client.counters.replayedBytes + p.front.counters.replayedBytes, 0)
        }
        return maxKept
    }

    /// The OPEN is lost in flight: the RESUME's count says the front never got it, so it goes
    /// again and the stream opens on the new carrier; the front's OPEN_OK lost, likewise.
    func testControlFramesLostInFlight() throws {
        let p = ReplayPair()
        try p.establish()
        let id = try XCTUnwrap(p.client.openStream(to: Sample.name))
        try p.cut()   // nothing delivered
        XCTAssertEqual(p.accepted, [])
        try p.reattach()
        XCTAssertEqual(p.accepted, [id])
        XCTAssertEqual(p.cd.opened, [id])
        // OPEN delivered, OPEN_OK lost.
        let id2 = try XCTUnwrap(p.client.openStream(to: Sample.v6))
        XCTAssertEqual(id2, id + 2, "ids go on across a continued attachment")
        try p.cut(up: 1000)
        XCTAssertEqual(p.accepted, [id, id2])
        XCTAssertEqual(p.cd.opened, [id])
        try p.reattach()
        XCTAssertEqual(p.cd.opened, [id, id2])
        XCTAssertEqual(p.accepted, [id, id2], "the OPEN is not delivered twice")
        // RST crosses the cut.
        p.client.reset(stream: id, reason: .cancel)
        try p.cut()
        try p.reattach()
        XCTAssertEqual(p.frontResets, [id])
    }

    /// ACKs lost: the kept bytes are released by the count in RESUME / STATUS instead, and a
    /// tick acknowledges the tail that never reached `ackEvery`.
    func testLostAcksAndTickAck() throws {
        let p = ReplayPair()
        try p.establish()
        let id = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        var at = 0
        let bytes = pattern(100_000, seed: 5)
        ReplayPair.write(p.client, id, bytes, from: &at)
        try p.pump()
        // 100 000 bytes < ackEvery: no ACK yet, the client keeps them.
        XCTAssertGreaterThan(p.client.replayHeldBytes, 100_000)
        XCTAssertTrue(p.front.tick(now: 1))
        try p.pump()
        // Only the PONG answering the front's first PING (16 bytes) waits for the next ACK.
        XCTAssertEqual(p.client.replayHeldBytes, 16, "a tick ACKs the tail")
        // Now the ACK is lost with the carrier: RESUME's count releases the bytes instead.
        at = 0
        ReplayPair.write(p.client, id, bytes, from: &at)
        try p.pump()
        XCTAssertTrue(p.front.tick(now: 2))
        try p.cut()   // the front's ACK does not arrive
        XCTAssertGreaterThan(p.client.replayHeldBytes, 100_000)
        try p.reattach()
        XCTAssertEqual(p.client.replayHeldBytes, 0)
        XCTAssertEqual(p.client.counters.replayedBytes, 0, "nothing is sent twice")
        var got: [UInt8] = []
        _ = ReplayPair.readAll(p.front, id, into: &got)
        XCTAssertEqual(got.count, 200_000)
    }

    /// An ACK the front queued before the carrier broke, lost, arrives again after the STATUS
    /// whose count is above it: stale, ignored (not a protocol error).
    func testStaleAckReplayedAfterResume() throws {
        let p = ReplayPair(frontLimits: SessionLimits(streamWindow: 1 << 20))
        try p.establish()
        let id = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        var at = 0
        let bytes = pattern(200_000, seed: 9)
        ReplayPair.write(p.client, id, bytes, from: &at)
        // The front gets 300 000 bytes (an ACK for them queued), then the rest (no ACK yet);
        // nothing it sends arrives. The STATUS count is above the ACK, which is sent after it.
        var up: [UInt8] = []
        p.client.withOutput { up = Array($0); return $0.count }
        try p.front.receive(Array(up[..<min(up.count, 150_000)]))
        p.front.withOutput { $0.count }   // lost in flight
        XCTAssertEqual(p.front.counters.acksSent, 0)
        let more = pattern(200_000, seed: 10)
        at = 0
        ReplayPair.write(p.client, id, more, from: &at)
        p.client.withOutput { up += $0; return $0.count }
        try p.front.receive(Array(up[150_000..<300_000]))
        XCTAssertEqual(p.front.counters.acksSent, 1)
        try p.front.receive(Array(up[300_000...]))
        XCTAssertEqual(p.front.counters.acksSent, 1, "the tail is not ACKed yet")
        p.client.detach()
        XCTAssertTrue(p.front.park())
        p.parked = p.front
        try p.reattach()
        XCTAssertEqual(p.client.state, .established)
        XCTAssertNil(p.resumeError)
        var got: [UInt8] = []
        _ = ReplayPair.readAll(p.front, id, into: &got)
        XCTAssertTrue(got == bytes + more)
        XCTAssertTrue(p.front.tick(now: 5))
        try p.pump()
        XCTAssertLessThanOrEqual(p.client.replayHeldBytes, 16)
    }

    /// The carrier breaks in the middle of a DATA frame, and the next one breaks again in the
    /// middle of the STATUS answering the RESUME: the third continues the frame byte-exact.
    func testBreakInsideFrameAndInsideHandshake() throws {
        let p = ReplayPair()
        try p.establish()
        let id = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        var at = 0
        let bytes = pattern(200_000, seed: 3)
        ReplayPair.write(p.front, id, bytes, from: &at)
        try p.cut(down: 70_001)   // inside the second DATA frame
        // The next carrier: RESUME goes, half the STATUS comes back, then it breaks too.
        p.front = FrontSession(limits: p.frontLimits, keepaliveMs: 15_000, replayGraceMs: p.graceMs)
        p.front.delegate = p
        p.client.attach()
        var up: [UInt8] = []
        p.client.withOutput { up = Array($0); return $0.count }
        try p.front.receive(up)
        var down: [UInt8] = []
        p.front.withOutput { down = Array($0); return $0.count }
        XCTAssertGreaterThan(down.count, 20)
        try p.client.receive(Array(down[..<20]))
        XCTAssertEqual(p.client.state, .handshaking)
        p.client.detach()
        XCTAssertTrue(p.client.isParked)
        if p.front.park() { p.parked = p.front }
        try p.reattach()
        XCTAssertEqual(p.client.state, .established)
        var got: [UInt8] = []
        _ = ReplayPair.readAll(p.client, id, into: &got)
        XCTAssertTrue(got == bytes, "\(got.count) of \(bytes.count) bytes, in order")
        XCTAssertEqual(p.cd.resets.count, 0)
    }

    /// Idle ends do not trade ACKs of ACKs: once everything is acknowledged, ticks send none,
    /// and with no stream left nothing is due.
    func testIdleEndsStopAcking() throws {
        let p = ReplayPair()
        try p.establish()
        let id = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        var at = 0
        ReplayPair.write(p.client, id, pattern(10_000, seed: 4), from: &at)
        p.client.finish(stream: id)
        try p.pump()
        var got: [UInt8] = []
        _ = ReplayPair.readAll(p.front, id, into: &got)
        p.front.finish(stream: id)
        try p.pump()
        _ = ReplayPair.readAll(p.client, id, into: &got)
        for t in 1...4 as ClosedRange<UInt64> {
            XCTAssertTrue(p.client.tick(now: t * 1000)); XCTAssertTrue(p.front.tick(now: t * 1000))
            try p.pump()
        }
        let acks = (p.client.counters.acksSent, p.front.counters.acksSent)
        for t in 5...10 as ClosedRange<UInt64> {
            XCTAssertTrue(p.client.tick(now: t * 1000)); XCTAssertTrue(p.front.tick(now: t * 1000))
            try p.pump()
        }
        XCTAssertEqual(p.client.counters.acksSent, acks.0)
        XCTAssertEqual(p.front.counters.acksSent, acks.1)
        XCTAssertEqual(p.client.trackedStreams, 0)
        // Nothing due but the next PING (15 s keepalive): not a second from now.
        XCTAssertGreaterThan(p.client.nextTick(now: 10_000) ?? .max, 11_000)
        XCTAssertLessThanOrEqual(p.client.replayHeldBytes, 32, "at most an unacknowledged ACK or PONG")
    }

    /// The replay bound stalls writes, an ACK frees them.
    func testReplayBoundStallsWriters() throws {
        let limits = SessionLimits(maxOutputBytes: 256 << 10, maxReplayBytes: 512 << 10)
        let p = ReplayPair(clientLimits: limits)
        try p.establish()
        let id = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        let payload = [UInt8](repeating: 7, count: 64 << 10)
        var sent = 0
        for _ in 0..<40 {
            let n = payload.withUnsafeBytes { p.client.write(stream: id, $0) }
            sent += n
            p.client.withOutput { $0.count }   // handed to a carrier that never delivers
        }
        XCTAssertLessThanOrEqual(p.client.replayHeldBytes, 512 << 10)
        XCTAssertLessThan(sent, 262_144 + 1)   // the initial window bounds it too
        XCTAssertEqual(p.client.writableBytes(stream: id), 0)
        // The front gets it all and ACKs: writable again.
        let before = p.cd.writable[id, default: 0]
        try p.cut(up: .max)
        try p.reattach()
        var got: [UInt8] = []
        _ = ReplayPair.readAll(p.front, id, into: &got)
        XCTAssertEqual(got.count, sent)
        try p.pump()
        XCTAssertGreaterThan(p.cd.writable[id, default: 0], before)
        XCTAssertGreaterThan(p.client.writableBytes(stream: id), 0)
    }

    func testParkedWritesTakeNothing() throws {
        let p = ReplayPair()
        try p.establish()
        let id = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        try p.cut()
        XCTAssertEqual([UInt8](repeating: 1, count: 10).withUnsafeBytes { p.client.write(stream: id, $0) }, 0)
        XCTAssertEqual(p.client.writableBytes(stream: id), 0)
        XCTAssertEqual([UInt8](repeating: 1, count: 10).withUnsafeBytes { p.parked!.write(stream: id, $0) }, 0)
        XCTAssertNil(p.client.openStream(to: Sample.v4))
        XCTAssertEqual(p.client.outputCount, 0)
        let w = p.cd.writable[id, default: 0]
        try p.reattach()
        XCTAssertGreaterThan(p.cd.writable[id, default: 0], w, "writers hear the resume")
    }

    /// RESUME (or STATUS, or ACK) claiming more than was sent is a protocol error.
    func testClaimsBeyondSent() throws {
        let p = ReplayPair()
        try p.establish()
        let id = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        try p.cut()
        let front = try XCTUnwrap(p.parked)
        XCTAssertThrowsError(try front.resumeParked(peerReceived: 1 << 40)) {
            guard case .replayOffset(let c, _, _)? = $0 as? ProtocolError else { return XCTFail("\($0)") }
            XCTAssertEqual(c, 1 << 40)
        }
        // The client: an ACK beyond what it sent.
        let q = ReplayPair()
        try q.establish()
        _ = try XCTUnwrap(q.client.openStream(to: Sample.v4))
        q.client.withOutput { $0.count }
        XCTAssertThrowsError(try q.client.receive(frames: [.ack(1_000_000)])) {
            guard case .replayOffset(1_000_000, 0, _)? = $0 as? ProtocolError else { return XCTFail("\($0)") }
        }
        // The client: a STATUS continuing from beyond what it sent.
        let r = ReplayPair()
        try r.establish()
        _ = try XCTUnwrap(r.client.openStream(to: Sample.v4))
        try r.pump()
        r.client.detach()
        r.client.attach()
        r.client.withOutput { $0.count }
        var st = Sample.status()
        st.replay = StatusReplay(graceMs: 1000, continued: true, received: 1 << 30)
        XCTAssertThrowsError(try r.client.receive(frames: [.status(st)])) {
            guard case .replayOffset? = $0 as? ProtocolError else { return XCTFail("\($0)") }
        }
        // An ACK below an earlier one.
        let s = ReplayPair()
        try s.establish()
        let sid = try XCTUnwrap(s.client.openStream(to: Sample.v4))
        var at = 0
        ReplayPair.write(s.client, sid, pattern(50_000, seed: 1), from: &at)
        s.client.withOutput { $0.count }
        try s.client.receive(frames: [.ack(20)])
        XCTAssertThrowsError(try s.client.receive(frames: [.ack(10)])) {
            guard case .replayOffset(10, 20, _)? = $0 as? ProtocolError else { return XCTFail("\($0)") }
        }
        _ = id
    }

    /// The front does not have the streams (restarted from its state file, grace over): the
    /// client hears how many were lost, once, and starts the stream over.
    func testFrontWithoutTheStreams() throws {
        let p = ReplayPair()
        try p.establish()
        _ = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        _ = try XCTUnwrap(p.client.openStream(to: Sample.v6))
        try p.pump()
        try p.cut()
        p.parked = nil   // the front lost them
        var lost: [Int] = []
        final class L: ClientSessionDelegate {
            var base: ClientRecorder; var lost: (Int) -> Void
            init(_ b: ClientRecorder, _ l: @escaping (Int) -> Void) { base = b; lost = l }
            func sessionEstablished(_ s: ClientSession, status: Status, resumed: Bool) { base.sessionEstablished(s, status: status, resumed: resumed) }
            func sessionStatusChanged(_ s: ClientSession, status: Status) {}
            func sessionGoAway(_ s: ClientSession, reason: GoAwayReason, text: String) {}
            func streamOpened(_ s: ClientSession, stream: UInt32) {}
            func streamOpenFailed(_ s: ClientSession, stream: UInt32, reason: OpenFailReason) {}
            func streamReadable(_ s: ClientSession, stream: UInt32) {}
            func streamWritable(_ s: ClientSession, stream: UInt32) {}
            func streamReset(_ s: ClientSession, stream: UInt32, reason: RstReason) {}
            func datagramReceived(_ s: ClientSession, association: UInt32, from: Destination, payload: UnsafeRawBufferPointer) {}
            func sessionOutputReady(_ s: ClientSession) {}
            func sessionStreamsLost(_ s: ClientSession, count: Int) { lost(count) }
        }
        let l = L(p.cd) { lost.append($0) }
        p.client.delegate = l
        try p.reattach()
        XCTAssertEqual(lost, [2])
        XCTAssertEqual(p.client.state, .established)
        XCTAssertTrue(p.client.replayActive)
        XCTAssertEqual(p.client.heldStreamCount, 0)
        XCTAssertEqual(p.client.openStream(to: Sample.v4), 1, "ids start over")
        try p.pump()
        XCTAssertEqual(p.accepted.last, 1)
        // dropParked (the holder's grace timer) tells the same way.
        try p.cut()
        p.client.dropParked()
        XCTAssertEqual(lost, [2, 1])
        XCTAssertFalse(p.client.isParked)
    }

    /// A front that cannot read RESUME's replay fields answers GOAWAY protocol-error: the next
    /// RESUME goes without them.
    func testOldFrontRefusingReplayResume() throws {
        let p = ReplayPair()
        try p.establish()
        p.client.detach()
        p.client.attach()
        var out: [UInt8] = []
        p.client.withOutput { out = Array($0); return $0.count }
        guard case .resume(let r)? = try decodeAll(out).first else { return XCTFail() }
        XCTAssertNotNil(r.replay)
        try p.client.receive(frames: [.goaway(reason: .protocolError, text: "RESUME with bad length 30")])
        p.client.detach()
        p.client.attach()
        p.client.withOutput { out = Array($0); return $0.count }
        guard case .resume(let r2)? = try decodeAll(out).first else { return XCTFail() }
        XCTAssertNil(r2.replay)
    }

    /// GOAWAY ends the session's streams: nothing is parked after it.
    func testNoParkingAfterGoAway() throws {
        let p = ReplayPair()
        try p.establish()
        _ = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        p.front.goAway(.shutdown, text: "bye")
        try p.pump()
        p.client.detach()
        XCTAssertFalse(p.client.isParked)
        XCTAssertFalse(p.front.park())
    }
}
