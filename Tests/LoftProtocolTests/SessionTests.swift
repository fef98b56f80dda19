import XCTest
import LoftCore
@testable import LoftProtocol

final class SessionTests: XCTestCase {
    /// Delegates are weak: the recorders live as long as the test.
    private var kept: [FrontRecorder] = []

    func makeFront(limits: SessionLimits = .init(), keepaliveMs: UInt32) -> FrontSession {
        let front = FrontSession(limits: limits, keepaliveMs: keepaliveMs)
        let fd = FrontRecorder()
        kept.append(fd)
        front.delegate = fd
        return front
    }

    // MARK: handshake

    func testHelloStatus() throws {
        let p = Pair()
        p.client.attach()
        XCTAssertEqual(p.client.state, .handshaking)
        XCTAssertEqual(try decodeAll(Pair.take(p.client.withOutput)), [.hello(Hello(token: "tok", clientName: "laptop"))])
        p.client.detach()
        try p.establish()
        XCTAssertEqual(p.fd.hellos, [Hello(token: "tok", clientName: "laptop")])
        XCTAssertEqual(p.cd.established.count, 1)
        XCTAssertEqual(p.cd.established.first?.resumed, false)
        XCTAssertEqual(p.cd.established.first?.status, Sample.status(keepalive: 15_000))
        XCTAssertEqual(p.client.instanceID, Sample.instance)
        XCTAssertEqual(p.client.status?.overlay, Sample.overlay4)
        XCTAssertEqual(p.front.instanceID, Sample.instance)
        XCTAssertEqual(p.front.phase, .established)
        XCTAssertGreaterThan(p.cd.outputReady, 0)
    }

    func testFrontPutsItsKeepaliveAndLimitInStatus() throws {
        let p = Pair(frontLimits: SessionLimits(maxStreams: 3), keepaliveMs: 2500)
        p.fd.status = Sample.status(keepalive: 99, maxStreams: 1000)
        try p.establish()
        XCTAssertEqual(p.client.status?.keepaliveMs, 2500)
        XCTAssertEqual(p.client.status?.maxStreams, 3)
    }

    func testResumeKeepsInstanceID() throws {
        let p = Pair()
        try p.establish()
        let id = try XCTUnwrap(p.client.instanceID)
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        XCTAssertEqual(p.client.openStreamCount, 1)

        p.newCarrier()
        XCTAssertEqual(p.client.openStreamCount, 0, "resume resets open streams")
        XCTAssertEqual(p.client.read(stream: s, into: UnsafeMutableRawBufferPointer(start: nil, count: 0)), .eof)
        try p.pump()
        XCTAssertEqual(p.fd.resumes, [Resume(instanceID: id, token: "tok")])
        XCTAssertEqual(p.cd.established.count, 2)
        XCTAssertEqual(p.cd.established.last?.resumed, true)
        XCTAssertEqual(p.client.instanceID, id)
        XCTAssertEqual(p.front.instanceID, id)
        XCTAssertEqual(p.client.status?.overlay.ipv4, Sample.overlay4.ipv4)
        // Ids start over on the new attachment.
        XCTAssertEqual(p.client.openStream(to: Sample.v4), 1)
    }

    func testUnknownInstanceThenHello() throws {
        let p = Pair()
        try p.establish()
        p.fd.instances = []   // the front forgot it (restart)
        p.newCarrier()
        try p.pump()
        XCTAssertEqual(p.cd.goAways.map(\.reason), [.unknownInstance])
        p.client.forgetInstance()
        p.newCarrier()
        try p.pump()
        XCTAssertEqual(p.fd.hellos.count, 2)
        XCTAssertEqual(p.cd.established.last?.resumed, false)
        XCTAssertEqual(p.client.state, .established)
    }

    func testWrongTokenGoAway() throws {
        let p = Pair(token: "wrong")
        p.client.attach()
        try p.pump()
        XCTAssertEqual(p.cd.goAways.count, 1)
        XCTAssertEqual(p.cd.goAways.first?.reason, .badToken)
        XCTAssertEqual(p.cd.goAways.first?.text, "token not accepted")
        XCTAssertEqual(p.client.state, .handshaking)
        XCTAssertNil(p.client.instanceID)
        XCTAssertEqual(p.front.phase, .closing)
        XCTAssertNil(p.client.openStream(to: Sample.v4))
    }

    func testStatusChangeAndMismatch() throws {
        let p = Pair()
        try p.establish()
        var st = Sample.status(Sample.overlay6)
        st.instanceID = InstanceID(high: 9, low: 9)   // the front session keeps its own id
        p.front.sendStatus(st)
        try p.pump()
        XCTAssertEqual(p.cd.statusChanges.map(\.overlay), [Sample.overlay6])
        XCTAssertEqual(p.client.status?.instanceID, Sample.instance)
        XCTAssertThrowsProtocolError(.instanceMismatch) {
            try p.client.receive(frames: [.status(Status(instanceID: InstanceID(high: 1, low: 1), keepaliveMs: 1,
                                                         maxStreams: 1, overlay: Sample.overlay4))])
        }
    }

    func testUnsupportedVersionGoAway() throws {
        let front = FrontSession(keepaliveMs: 1000)
        let fd = FrontRecorder()
        front.delegate = fd
        XCTAssertThrowsProtocolError(.unsupportedVersion(2)) { try front.receive(rawFrame(0x01, [2] + be32(0) + [0, 0])) }
        let out = try front.takeFrames()
        XCTAssertEqual(out.count, 1)
        guard case .goaway(let reason, _)? = out.first else { return XCTFail("\(out)") }
        XCTAssertEqual(reason, .unsupportedVersion)
        XCTAssertTrue(fd.hellos.isEmpty)
    }

    // MARK: streams

    func testOpenAcceptRefuse() throws {
        let p = Pair()
        p.fd.refuseDomains = true
        try p.establish()
        let a = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        let b = try XCTUnwrap(p.client.openStream(to: .domain("nowhere.example", 443)))
        let c = try XCTUnwrap(p.client.openStream(to: Sample.v6))
        XCTAssertEqual([a, b, c], [1, 3, 5])
        try p.pump()
        XCTAssertEqual(p.fd.requested.map(\.destination), [Sample.v4, .domain("nowhere.example", 443), Sample.v6])
        XCTAssertEqual(p.fd.requested.map(\.network), [.tcp, .tcp, .tcp])
        XCTAssertEqual(p.cd.opened, [1, 5])
        XCTAssertEqual(p.cd.openFailed.map(\.stream), [3])
        XCTAssertEqual(p.cd.openFailed.first?.reason, .hostUnreachable)
        XCTAssertEqual(p.client.openStreamCount, 2)
        XCTAssertEqual(p.front.openStreamCount, 2)
        XCTAssertEqual(p.client.counters.streamsOpened, 3)
    }

    func testEarlyDataBeforeAccept() throws {
        let p = Pair()
        p.fd.autoAccept = false
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        let n = [UInt8]("GET / HTTP/1.1\r\n\r\n".utf8).withBytes { p.client.write(stream: s, $0) }
        XCTAssertEqual(n, 18)
        try p.pump()
        XCTAssertEqual(p.front.readableBytes(stream: s), 18)
        XCTAssertEqual([UInt8](repeating: 1, count: 4).withBytes { p.front.write(stream: s, $0) }, 0, "no DATA before accept")
        p.front.accept(stream: s)
        XCTAssertEqual([UInt8](repeating: 1, count: 4).withBytes { p.front.write(stream: s, $0) }, 4)
        try p.pump()
        XCTAssertEqual(p.cd.opened, [s])
        XCTAssertEqual(p.client.readableBytes(stream: s), 4)
    }

    /// 10 MiB each way through one stream, both readers slower than the writers.
    func testBulkBothWaysSlowReader() throws {
        let p = Pair()
        p.maxPiece = 40_000
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        let total = 10 << 20
        let window = Int(LoftWire.initialStreamWindow)
        func pattern(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: i &* 7 &+ i >> 12) }
        let source = (0..<total).map(pattern)
        var sentUp = 0, sentDown = 0, readUp = 0, readDown = 0
        var maxBufferedClient = 0, maxBufferedFront = 0
        var scratch = [UInt8](repeating: 0, count: 12_000)
        var mismatches = 0
        p.cd.onReadable = { c, id in maxBufferedClient = max(maxBufferedClient, c.readableBytes(stream: id)) }
        p.fd.onReadable = { f, id in maxBufferedFront = max(maxBufferedFront, f.readableBytes(stream: id)) }
        var upDone = false, downDone = false
        var rounds = 0
        while !(upDone && downDone) {
            rounds += 1
            XCTAssertLessThan(rounds, 100_000)
            if rounds > 100_000 { break }
            if sentUp < total {
                sentUp += source[sentUp...].withUnsafeBytes { p.client.write(stream: s, $0) }
                if sentUp == total { p.client.finish(stream: s) }
            }
            if sentDown < total {
                sentDown += source[sentDown...].withUnsafeBytes { p.front.write(stream: s, $0) }
                if sentDown == total { p.front.finish(stream: s) }
            }
            try p.pump()
            maxBufferedClient = max(maxBufferedClient, p.client.readableBytes(stream: s))
            maxBufferedFront = max(maxBufferedFront, p.front.readableBytes(stream: s))
            // Slow readers: 12 000 bytes per round each.
            let rf = scratch.withUnsafeMutableBytes { p.front.read(stream: s, into: $0) }
            switch rf {
            case .data(let n):
                for k in 0..<n where scratch[k] != pattern(readUp + k) { mismatches += 1 }
                readUp += n
            case .eof: upDone = true
            case .wouldBlock: break
            }
            let rc = scratch.withUnsafeMutableBytes { p.client.read(stream: s, into: $0) }
            switch rc {
            case .data(let n):
                for k in 0..<n where scratch[k] != pattern(readDown + k) { mismatches += 1 }
                readDown += n
            case .eof: downDone = true
            case .wouldBlock: break
            }
        }
        try p.pump()
        XCTAssertEqual(readUp, total)
        XCTAssertEqual(readDown, total)
        XCTAssertEqual(mismatches, 0)
        XCTAssertLessThanOrEqual(maxBufferedClient, window)
        XCTAssertLessThanOrEqual(maxBufferedFront, window)
        XCTAssertGreaterThan(maxBufferedClient, window / 2, "the slow reader should have let the window fill")
        XCTAssertGreaterThan(maxBufferedFront, window / 2)
        XCTAssertEqual(p.client.counters.dataBytesOut, UInt64(total))
        XCTAssertEqual(p.front.counters.dataBytesIn, UInt64(total))
        XCTAssertEqual(p.front.counters.dataBytesOut, UInt64(total))
        // Freed on both ends once FIN went both ways and all was read.
        XCTAssertEqual(p.client.openStreamCount, 0)
        XCTAssertEqual(p.front.openStreamCount, 0)
        XCTAssertEqual(p.client.trackedStreams, 0)
        XCTAssertEqual(p.front.trackedStreams, 0)
        XCTAssertEqual(p.client.bufferedBytes, 0)
    }

    func testLargerWindowIsGranted() throws {
        let big: UInt32 = 1 << 20
        let p = Pair(clientLimits: SessionLimits(streamWindow: big), frontLimits: SessionLimits(streamWindow: big))
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        XCTAssertEqual(p.front.writableBytes(stream: s), Int(big))
        XCTAssertEqual(p.client.writableBytes(stream: s), Int(big))
    }

    func testHalfCloseBothWays() throws {
        let p = Pair()
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        XCTAssertEqual([UInt8]("ping".utf8).withBytes { p.client.write(stream: s, $0) }, 4)
        p.client.finish(stream: s)
        XCTAssertEqual([UInt8]("x".utf8).withBytes { p.client.write(stream: s, $0) }, 0, "no DATA after own FIN")
        XCTAssertEqual(p.client.writableBytes(stream: s), 0)
        try p.pump()
        var buf = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(buf.withUnsafeMutableBytes { p.front.read(stream: s, into: $0) }, .data(4))
        XCTAssertEqual(Array(buf[0..<4]), Array("ping".utf8))
        XCTAssertEqual(buf.withUnsafeMutableBytes { p.front.read(stream: s, into: $0) }, .eof)
        // The other half still works.
        XCTAssertEqual(p.front.openStreamCount, 1)
        XCTAssertEqual([UInt8]("pong".utf8).withBytes { p.front.write(stream: s, $0) }, 4)
        try p.pump()
        XCTAssertEqual(buf.withUnsafeMutableBytes { p.client.read(stream: s, into: $0) }, .data(4))
        XCTAssertEqual(Array(buf[0..<4]), Array("pong".utf8))
        XCTAssertEqual(buf.withUnsafeMutableBytes { p.client.read(stream: s, into: $0) }, .wouldBlock)
        p.front.finish(stream: s)
        XCTAssertEqual(p.front.openStreamCount, 0)
        XCTAssertEqual(p.front.trackedStreams, 0)
        try p.pump()
        XCTAssertEqual(p.client.openStreamCount, 0)
        XCTAssertEqual(p.client.trackedStreams, 0)
        XCTAssertEqual(buf.withUnsafeMutableBytes { p.client.read(stream: s, into: $0) }, .eof)
    }

    func testFinishedStreamStopsCountingBeforeItIsRead() throws {
        let p = Pair(frontLimits: SessionLimits(maxStreams: 1))
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        _ = [UInt8](repeating: 1, count: 100).withBytes { p.client.write(stream: s, $0) }
        p.client.finish(stream: s)
        p.front.finish(stream: s)
        try p.pump()
        // The front has not read the 100 bytes, yet both ends agree the slot is free.
        XCTAssertEqual(p.front.readableBytes(stream: s), 100)
        XCTAssertEqual(p.front.openStreamCount, 0)
        XCTAssertEqual(p.client.openStreamCount, 0)
        let t = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        XCTAssertEqual(p.fd.requested.map(\.stream), [s, t])
        p.front.close(stream: s)
        XCTAssertEqual(p.front.trackedStreams, 1)
    }

    func testResetBothWaysAndLateFrames() throws {
        let p = Pair()
        try p.establish()
        let a = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        let b = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        // The front sends DATA and FIN on a while the client resets it: they cross.
        _ = [UInt8](repeating: 7, count: 1000).withBytes { p.front.write(stream: a, $0) }
        p.front.finish(stream: a)
        p.client.reset(stream: a, reason: .connectionReset)
        XCTAssertEqual(p.client.openStreamCount, 1)
        try p.pump()   // the late DATA/FIN for a are dropped silently
        XCTAssertEqual(p.fd.resets.map(\.stream), [a])
        XCTAssertEqual(p.fd.resets.first?.reason, .connectionReset)
        XCTAssertEqual(p.cd.readable[a], nil)
        XCTAssertEqual(p.front.openStreamCount, 1)

        p.front.reset(stream: b, reason: .timedOut)
        try p.pump()
        XCTAssertEqual(p.cd.resets.map(\.stream), [b])
        XCTAssertEqual(p.cd.resets.first?.reason, .timedOut)
        XCTAssertEqual(p.client.openStreamCount, 0)
        XCTAssertEqual(p.front.openStreamCount, 0)
        XCTAssertEqual([UInt8](repeating: 1, count: 4).withBytes { p.client.write(stream: b, $0) }, 0)
        XCTAssertEqual(p.client.counters.streamsReset, 2)
    }

    func testLateAnswersAfterClientReset() throws {
        let p = Pair()
        p.fd.autoAccept = false
        try p.establish()
        let a = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        let b = try XCTUnwrap(p.client.openAssociation(firstDestination: Sample.v6))
        try p.pump()
        // The front answers while the client gives up on both: the answers cross the RSTs.
        p.front.accept(stream: a)
        _ = [UInt8](repeating: 1, count: 10).withBytes { p.front.write(stream: a, $0) }
        p.front.refuse(stream: b, reason: .refused)
        p.client.reset(stream: a, reason: .cancel)
        p.client.closeAssociation(b)
        try p.pump()
        XCTAssertEqual(p.cd.opened, [])
        XCTAssertEqual(p.cd.openFailed.count, 0)
        XCTAssertEqual(p.fd.resets.map(\.stream), [a])   // b was already freed by the refusal
        XCTAssertEqual(p.client.openStreamCount, 0)
        XCTAssertEqual(p.front.openStreamCount, 0)
        XCTAssertEqual(p.client.state, .established)
    }

    func testClientGoAway() throws {
        let p = Pair()
        try p.establish()
        p.client.goAway(.shutdown, text: "bye")
        try p.pump()
        XCTAssertEqual(p.fd.goAways.map(\.reason), [.shutdown])
        XCTAssertEqual(p.fd.goAways.first?.text, "bye")
        XCTAssertEqual(p.front.phase, .closing)
    }

    func testStreamLimit() throws {
        let p = Pair(frontLimits: SessionLimits(maxStreams: 2))
        try p.establish()
        XCTAssertEqual(p.client.openStream(to: Sample.v4), 1)
        XCTAssertEqual(p.client.openAssociation(firstDestination: Sample.v4), 3)
        XCTAssertNil(p.client.openStream(to: Sample.v4))
        XCTAssertNil(p.client.openAssociation(firstDestination: Sample.v4))
        p.client.closeAssociation(3)
        XCTAssertEqual(p.client.openStream(to: Sample.v4), 5)
        try p.pump()
        XCTAssertEqual(p.front.openStreamCount, 2)
        XCTAssertEqual(p.fd.resets.map(\.stream), [3])
    }

    func testStreamLimitByHandcraftedClient() throws {
        let front = FrontSession(limits: SessionLimits(maxStreams: 2), keepaliveMs: 1000)
        let fd = FrontRecorder()
        front.delegate = fd
        try front.receive(frames: [.hello(Hello(token: "tok", clientName: "x")),
                                   .open(stream: 1, network: .tcp, destination: Sample.v4),
                                   .open(stream: 3, network: .udp, destination: Sample.v4)])
        _ = try front.takeFrames()
        XCTAssertThrowsProtocolError(.streamLimit(2)) {
            try front.receive(frames: [.open(stream: 5, network: .tcp, destination: Sample.v4)])
        }
        XCTAssertEqual(fd.requested.count, 2)
        guard case .goaway(.protocolError, let text)? = try front.takeFrames().last else { return XCTFail() }
        XCTAssertEqual(text, "more than 2 streams")
    }

    // MARK: flow control violations

    func testCreditExceededByHandcraftedClient() throws {
        let front = FrontSession(keepaliveMs: 1000)
        let fd = FrontRecorder()
        front.delegate = fd
        try front.receive(frames: [.hello(Hello(token: "tok", clientName: "x")),
                                   .open(stream: 1, network: .tcp, destination: Sample.v4)])
        let full = [UInt8](repeating: 0x55, count: LoftWire.maxBodySize)
        for _ in 0..<4 { try front.receive(frames: [.data(stream: 1, payload: full)]) }   // 262 140 bytes: within
        XCTAssertEqual(front.readableBytes(stream: 1), 4 * LoftWire.maxBodySize)
        _ = try front.takeFrames()
        XCTAssertThrowsProtocolError(.creditExceeded(1)) {
            try front.receive(frames: [.data(stream: 1, payload: [1, 2, 3, 4, 5])])
        }
        let out = try front.takeFrames()
        XCTAssertEqual(out, [.goaway(reason: .protocolError, text: "DATA beyond credit on stream 1")])
        // After the error the session takes no more input.
        try front.receive(frames: [.ping(1)])
        XCTAssertEqual(front.outputCount, 0)
    }

    func testCreditExceededByHandcraftedFront() throws {
        let client = ClientSession(token: "tok", clientName: "x")
        let cd = ClientRecorder()
        client.delegate = cd
        client.attach()
        _ = try client.takeFrames()
        try client.receive(frames: [.status(Sample.status())])
        let s = try XCTUnwrap(client.openStream(to: Sample.v4))
        try client.receive(frames: [.openOK(stream: s), .data(stream: s, payload: [UInt8](repeating: 0, count: 60_000))])
        var buf = [UInt8](repeating: 0, count: 200_000)
        XCTAssertEqual(buf.withUnsafeMutableBytes { client.read(stream: s, into: $0) }, .data(60_000))
        // Read 60 000 < half the window: no CREDIT yet, so the front still has 262 144 - 60 000.
        XCTAssertFalse(try client.takeFrames().contains { if case .credit = $0 { return true } else { return false } })
        try client.receive(frames: [.data(stream: s, payload: [UInt8](repeating: 0, count: 65_535)),
                                    .data(stream: s, payload: [UInt8](repeating: 0, count: 65_535)),
                                    .data(stream: s, payload: [UInt8](repeating: 0, count: 65_535))])
        XCTAssertEqual(client.readableBytes(stream: s), 196_605)
        // 262 144 - 60 000 - 196 605 = 5 539 bytes of credit left: one more byte is too much.
        try client.receive(frames: [.data(stream: s, payload: [UInt8](repeating: 0, count: 5_000))])
        try client.receive(frames: [.data(stream: s, payload: [UInt8](repeating: 0, count: 539))])
        XCTAssertThrowsProtocolError(.creditExceeded(s)) {
            try client.receive(frames: [.data(stream: s, payload: [1])])
        }
        XCTAssertEqual(try client.takeFrames(), [.goaway(reason: .protocolError, text: "DATA beyond credit on stream 1")])
    }

    func testCreditGrantedAtHalfWindow() throws {
        let client = ClientSession(token: "tok", clientName: "x")
        client.attach()
        try client.receive(frames: [.status(Sample.status())])
        let s = try XCTUnwrap(client.openStream(to: Sample.v4))
        _ = try client.takeFrames()
        try client.receive(frames: [.openOK(stream: s), .data(stream: s, payload: [UInt8](repeating: 0, count: 65_535)),
                                    .data(stream: s, payload: [UInt8](repeating: 0, count: 65_535))])
        var buf = [UInt8](repeating: 0, count: 131_071)
        XCTAssertEqual(buf.withUnsafeMutableBytes { client.read(stream: s, into: $0) }, .data(131_070))
        XCTAssertEqual(try client.takeFrames(), [], "131 070 < 131 072: not yet")
        try client.receive(frames: [.data(stream: s, payload: [1, 2])])
        XCTAssertEqual(buf.withUnsafeMutableBytes { client.read(stream: s, into: $0) }, .data(2))
        XCTAssertEqual(try client.takeFrames(), [.credit(stream: s, increment: 131_072)])
    }

    func testCreditOverflow() throws {
        let client = ClientSession(token: "tok", clientName: "x")
        client.attach()
        try client.receive(frames: [.status(Sample.status())])
        let s = try XCTUnwrap(client.openStream(to: Sample.v4))
        XCTAssertThrowsProtocolError(.creditOverflow(s)) {
            try client.receive(frames: [.credit(stream: s, increment: UInt32.max - LoftWire.initialStreamWindow + 1)])
        }
    }

    func testBufferLimit() throws {
        let front = makeFront(limits: SessionLimits(maxBufferedBytes: 300_000), keepaliveMs: 1000)
        try front.receive(frames: [.hello(Hello(token: "tok", clientName: "x")),
                                   .open(stream: 1, network: .tcp, destination: Sample.v4),
                                   .open(stream: 3, network: .tcp, destination: Sample.v4)])
        let chunk = [UInt8](repeating: 0, count: 50_000)
        for _ in 0..<4 { try front.receive(frames: [.data(stream: 1, payload: chunk)]) }
        for _ in 0..<2 { try front.receive(frames: [.data(stream: 3, payload: chunk)]) }
        XCTAssertEqual(front.bufferedBytes, 300_000)
        XCTAssertThrowsProtocolError(.bufferLimit(300_000)) { try front.receive(frames: [.data(stream: 3, payload: [1])]) }
    }

    // MARK: state machine violations

    func testFirstFrameMustBeHelloOrResume() throws {
        let front = makeFront(keepaliveMs: 1000)
        XCTAssertThrowsProtocolError(.unexpectedFrame(.ping)) { try front.receive(frames: [.ping(1)]) }
        XCTAssertEqual(try front.takeFrames(), [.goaway(reason: .protocolError, text: "unexpected PING")])
    }

    func testClientBeforeStatusOnlyTakesSessionFrames() throws {
        let client = ClientSession(token: "tok", clientName: "x")
        client.attach()
        _ = try client.takeFrames()
        try client.receive(frames: [.ping(5)])
        XCTAssertEqual(try client.takeFrames(), [.pong(5)])
        XCTAssertThrowsProtocolError(.unexpectedFrame(.openOK)) { try client.receive(frames: [.openOK(stream: 1)]) }
    }

    func testSecondHelloAndFrontOnlyFrames() throws {
        for bad: Frame in [.hello(Hello(token: "tok", clientName: "x")), .status(Sample.status()), .openOK(stream: 1)] {
            let front = makeFront(keepaliveMs: 1000)
            try front.receive(frames: [.hello(Hello(token: "tok", clientName: "x")),
                                       .open(stream: 1, network: .tcp, destination: Sample.v4)])
            XCTAssertThrowsProtocolError(.unexpectedFrame(bad.type)) { try front.receive(frames: [bad]) }
        }
    }

    func testOpenFromFrontIsUnexpected() throws {
        let client = ClientSession(token: "tok", clientName: "x")
        client.attach()
        try client.receive(frames: [.status(Sample.status())])
        XCTAssertThrowsProtocolError(.unexpectedFrame(.open)) {
            try client.receive(frames: [.open(stream: 1, network: .tcp, destination: Sample.v4)])
        }
    }

    func testDataBeforeOpenOK() throws {
        let client = ClientSession(token: "tok", clientName: "x")
        client.attach()
        try client.receive(frames: [.status(Sample.status())])
        let s = try XCTUnwrap(client.openStream(to: Sample.v4))
        XCTAssertThrowsProtocolError(.unexpectedFrame(.data)) { try client.receive(frames: [.data(stream: s, payload: [1])]) }
    }

    func testBadNewStreamIDs() throws {
        for (ids, bad) in [([UInt32(2)], UInt32(2)), ([5, 3], 3), ([7, 7], 7)] {
            let front = makeFront(keepaliveMs: 1000)
            try front.receive(frames: [.hello(Hello(token: "tok", clientName: "x"))])
            XCTAssertThrowsProtocolError(.badNewStreamID(bad)) {
                try front.receive(frames: ids.map { .open(stream: $0, network: .tcp, destination: Sample.v4) })
            }
        }
    }

    func testUnopenedStream() throws {
        let front = makeFront(keepaliveMs: 1000)
        try front.receive(frames: [.hello(Hello(token: "tok", clientName: "x")),
                                   .open(stream: 1, network: .tcp, destination: Sample.v4)])
        // Below the highest id and gone (here: never used) is a race and dropped; above it is an error.
        try front.receive(frames: [.rst(stream: 1, reason: .cancel), .data(stream: 1, payload: [1]), .credit(stream: 1, increment: 5)])
        XCTAssertThrowsProtocolError(.unopenedStream(.data, 3)) { try front.receive(frames: [.data(stream: 3, payload: [1])]) }
    }

    func testAfterFin() throws {
        let p = Pair()
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        try p.client.receive(frames: [.fin(stream: s)])
        XCTAssertThrowsProtocolError(.afterFin(.data, s)) { try p.client.receive(frames: [.data(stream: s, payload: [1])]) }
        let q = Pair()
        try q.establish()
        let t = try XCTUnwrap(q.client.openStream(to: Sample.v4))
        try q.pump()
        try q.front.receive(frames: [.fin(stream: t)])
        XCTAssertThrowsProtocolError(.afterFin(.fin, t)) { try q.front.receive(frames: [.fin(stream: t)]) }
    }

    func testWrongNetwork() throws {
        let p = Pair()
        try p.establish()
        let tcp = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        let udp = try XCTUnwrap(p.client.openAssociation(firstDestination: Sample.v4))
        try p.pump()
        XCTAssertThrowsProtocolError(.wrongNetwork(.dgram, tcp)) {
            try p.front.receive(frames: [.dgram(association: tcp, remote: Sample.v4, payload: [1])])
        }
        let q = Pair()
        try q.establish()
        _ = q.client.openStream(to: Sample.v4)
        let udp2 = try XCTUnwrap(q.client.openAssociation(firstDestination: Sample.v4))
        try q.pump()
        XCTAssertEqual(udp, udp2)
        XCTAssertThrowsProtocolError(.wrongNetwork(.data, udp2)) {
            try q.client.receive(frames: [.data(stream: udp2, payload: [1])])
        }
    }

    func testProtocolErrorFromFrontReachesFrontDelegate() throws {
        let p = Pair()
        try p.establish()
        // A front that breaks the rules: the client answers GOAWAY protocol-error.
        XCTAssertThrowsProtocolError(.unopenedStream(.fin, 9)) { try p.client.receive(frames: [.fin(stream: 9)]) }
        let up = Pair.take(p.client.withOutput)
        try p.front.receive(up)
        XCTAssertEqual(p.fd.goAways.map(\.reason), [.protocolError])
        XCTAssertEqual(p.fd.goAways.first?.text, "FIN on unopened stream 9")
        XCTAssertEqual(p.front.phase, .closing)
    }

    func testIncompleteFrameAtCarrierEnd() throws {
        let p = Pair()
        try p.establish()
        try p.client.carrierEnded()
        try p.client.receive(Array(try encodeAll([.ping(3)]).prefix(11)))
        XCTAssertThrowsProtocolError(.incompleteFrame(buffered: 11)) { try p.client.carrierEnded() }
    }

    func testDataStreamsIntoQueueAsItArrives() throws {
        let client = ClientSession(token: "tok", clientName: "x")
        let cd = ClientRecorder()
        client.delegate = cd
        client.attach()
        try client.receive(frames: [.status(Sample.status())])
        let s = try XCTUnwrap(client.openStream(to: Sample.v4))
        try client.receive(frames: [.openOK(stream: s)])
        let frame = try encodeAll([.data(stream: s, payload: (0..<1000).map { UInt8(truncatingIfNeeded: $0) }), .ping(4)])
        try client.receive(Array(frame[0..<5]))
        XCTAssertEqual(client.readableBytes(stream: s), 0)
        try client.receive(Array(frame[5..<108]))
        XCTAssertEqual(client.readableBytes(stream: s), 100, "readable before the frame is complete")
        XCTAssertEqual(cd.readable[s], 1)
        XCTAssertThrowsProtocolError(.incompleteFrame(buffered: 108)) { try client.carrierEnded() }
        try client.receive(Array(frame[108..<600]))
        try client.receive(Array(frame[600...]))
        XCTAssertEqual(client.readableBytes(stream: s), 1000)
        var buf = [UInt8](repeating: 0, count: 1000)
        XCTAssertEqual(buf.withUnsafeMutableBytes { client.read(stream: s, into: $0) }, .data(1000))
        XCTAssertEqual(buf, (0..<1000).map { UInt8(truncatingIfNeeded: $0) })
        _ = try client.takeFrames()
        XCTAssertEqual(client.counters.framesIn, 4)
        try client.carrierEnded()
    }

    func testDataHeaderCheckedBeforeBody() throws {
        let front = makeFront(keepaliveMs: 1000)
        try front.receive(frames: [.hello(Hello(token: "tok", clientName: "x")),
                                   .open(stream: 1, network: .tcp, destination: Sample.v4)])
        for _ in 0..<4 { try front.receive(frames: [.data(stream: 1, payload: [UInt8](repeating: 0, count: 65_535))]) }
        // 262 140 received: a 5-byte DATA passes 262 144, refused on its 8 header bytes alone.
        XCTAssertThrowsProtocolError(.creditExceeded(1)) { try front.receive(rawFrame(0x13, stream: 1, length: 5)) }
    }

    func testResetWhileDataArrives() throws {
        let p = Pair()
        p.maxPiece = 1000
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        let t = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        // The client's reader resets s as soon as bytes show up; the rest of the frame is dropped
        // and t, after it, still gets its bytes.
        p.cd.onReadable = { c, id in if id == s { c.reset(stream: s, reason: .cancel) } }
        _ = [UInt8](repeating: 1, count: 30_000).withBytes { p.front.write(stream: s, $0) }
        _ = [UInt8](repeating: 2, count: 3_000).withBytes { p.front.write(stream: t, $0) }
        try p.pump()
        XCTAssertEqual(p.cd.readable[s], 1)
        XCTAssertEqual(p.client.readableBytes(stream: s), 0)
        XCTAssertEqual(p.client.readableBytes(stream: t), 3_000)
        XCTAssertEqual(p.fd.resets.map(\.stream), [s])
        XCTAssertEqual(p.client.bufferedBytes, 3_000)
    }

    // MARK: datagrams

    func testDatagramsBothWays() throws {
        let p = Pair()
        try p.establish()
        p.fd.autoAccept = false
        let a = try XCTUnwrap(p.client.openAssociation(firstDestination: Sample.v4))
        let dests = [Sample.v4, Sample.v6, Sample.name]
        for (i, d) in dests.enumerated() {
            XCTAssertTrue([UInt8](repeating: UInt8(i), count: 10 + i).withBytes { p.client.send(association: a, to: d, $0) })
        }
        XCTAssertTrue([UInt8]().withBytes { p.client.send(association: a, to: Sample.v4, $0) }, "empty datagram")
        try p.pump()
        XCTAssertEqual(p.fd.requested.map(\.network), [.udp])
        XCTAssertEqual(p.fd.datagrams.map(\.to), dests + [Sample.v4])
        XCTAssertEqual(p.fd.datagrams.map(\.payload.count), [10, 11, 12, 0])
        XCTAssertEqual(p.fd.datagrams[2].payload, [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2])
        XCTAssertFalse([UInt8](repeating: 9, count: 3).withBytes { p.front.send(association: a, from: Sample.v4, $0) },
                       "no DGRAM before accept")
        p.front.accept(stream: a)
        for (i, d) in dests.enumerated() {
            XCTAssertTrue([UInt8](repeating: UInt8(100 + i), count: 20 + i).withBytes { p.front.send(association: a, from: d, $0) })
        }
        try p.pump()
        XCTAssertEqual(p.cd.opened, [a])
        XCTAssertEqual(p.cd.datagrams.map(\.from), dests)
        XCTAssertEqual(p.cd.datagrams.map(\.association), [a, a, a])
        XCTAssertEqual(p.cd.datagrams[1].payload, [UInt8](repeating: 101, count: 21))
        XCTAssertEqual(p.client.counters.datagramsOut, 4)
        XCTAssertEqual(p.client.counters.datagramsIn, 3)
        XCTAssertEqual(p.front.counters.datagramsDropped, 1)
        // Datagrams never wait behind a full output: dropped and counted.
        XCTAssertFalse([UInt8](repeating: 0, count: 60_000).withBytes { p.client.send(association: a, to: .domain("", 1), $0) })
        p.client.closeAssociation(a)
        try p.pump()
        XCTAssertEqual(p.fd.resets.map(\.stream), [a])
        XCTAssertEqual(p.fd.resets.first?.reason, .cancel)
    }

    /// quic: DGRAM frames go to the datagram sink (one frame each, header included) and come in
    /// through receiveDatagram; one the sink refuses goes in the output; a datagram that is not
    /// exactly one DGRAM frame is a protocol error (GOAWAY).
    func testDatagramSinkAndReceiveDatagram() throws {
        let p = Pair()
        try p.establish()
        var sunk: [[UInt8]] = []
        p.client.datagramSink = { frame in
            guard frame.count <= 200 else { return false }
            sunk.append([UInt8](frame))
            return true
        }
        let a = try XCTUnwrap(p.client.openAssociation(firstDestination: Sample.v4))
        try p.pump()                       // the OPEN, on the channel
        let small = [UInt8](repeating: 7, count: 50)
        XCTAssertTrue(small.withBytes { p.client.send(association: a, to: Sample.v4, $0) })
        XCTAssertEqual(p.client.outputCount, 0, "the DGRAM went to the sink, not the output")
        XCTAssertEqual(sunk.count, 1)
        XCTAssertEqual(sunk[0].count, 8 + 7 + 50)
        XCTAssertEqual(sunk[0][0], 0x20)
        let big = [UInt8](repeating: 8, count: 500)
        XCTAssertTrue(big.withBytes { p.client.send(association: a, to: Sample.v4, $0) })
        XCTAssertGreaterThan(p.client.outputCount, 500, "too big for the sink: in the output")
        try p.pump()
        XCTAssertEqual(p.fd.datagrams.map(\.payload.count), [500])
        try sunk[0].withUnsafeBytes { try p.front.receiveDatagram($0) }
        XCTAssertEqual(p.fd.datagrams.map(\.payload.count), [500, 50])
        XCTAssertEqual(p.front.counters.datagramsIn, 2)
        XCTAssertEqual(p.client.counters.datagramsOut, 2)
        // Before OPEN_OK the client's DGRAMs go in the output (behind the OPEN), not the sink.
        let b = try XCTUnwrap(p.client.openAssociation(firstDestination: Sample.v4))
        XCTAssertTrue(small.withBytes { p.client.send(association: b, to: Sample.v4, $0) })
        XCTAssertEqual(sunk.count, 1)
        XCTAssertGreaterThan(p.client.outputCount, 50)
        // A DATAGRAM that overtook the OPEN_OK is taken by the client.
        var early = sunk[0]
        withUnsafeBytes(of: b.bigEndian) { for i in 0..<4 { early[2 + i] = $0[i] } }
        try early.withUnsafeBytes { try p.client.receiveDatagram($0) }
        XCTAssertEqual(p.cd.datagrams.map(\.association), [b])
        // A DATAGRAM for an association this end does not hold is dropped, not an error.
        var stray = sunk[0]
        stray[5] = 99
        try stray.withUnsafeBytes { try p.front.receiveDatagram($0) }
        XCTAssertEqual(p.front.counters.datagramsIgnored, 1)
        // Two frames in one datagram, a PING, a short one: each a protocol error.
        for bad in [sunk[0] + sunk[0], [0x30, 0, 0, 0, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8], [0x20, 0, 0]] {
            let q = Pair()
            try q.establish()
            _ = try XCTUnwrap(q.client.openAssociation(firstDestination: Sample.v4))
            try q.pump()
            XCTAssertThrowsError(try bad.withUnsafeBytes { try q.front.receiveDatagram($0) }, "\(bad.prefix(8))")
            XCTAssertEqual(try q.front.takeFrames().last.map { if case .goaway(let r, _) = $0 { return r == .protocolError } else { return false } }, true)
        }
    }

    func testDatagramQueueBound() throws {
        let p = Pair(clientLimits: SessionLimits(maxDatagramQueue: 10_000))
        try p.establish()
        let a = try XCTUnwrap(p.client.openAssociation(firstDestination: Sample.v4))
        var sent = 0
        let payload = [UInt8](repeating: 1, count: 1000)
        for _ in 0..<20 where payload.withBytes({ p.client.send(association: a, to: Sample.v4, $0) }) { sent += 1 }
        XCTAssertEqual(sent, 9, "(1 015-byte frames after a 16-byte OPEN) under 10 000 bytes")
        XCTAssertLessThanOrEqual(p.client.outputCount, 10_000)
        XCTAssertEqual(p.client.counters.datagramsDropped, 11)
        try p.pump()
        XCTAssertEqual(p.fd.datagrams.count, 9)
    }

    // MARK: keepalive

    func testPingPongAndRTT() throws {
        let p = Pair(keepaliveMs: 1000)
        try p.establish()
        XCTAssertTrue(p.client.tick(now: 10_000))
        let ping = try p.client.takeFrames()
        XCTAssertEqual(ping, [.ping(1)])
        try p.front.receive(encodeAll(ping))
        let pong = try p.front.takeFrames()
        XCTAssertEqual(pong, [.pong(1)])
        try p.client.receive(encodeAll(pong), now: 10_023)
        XCTAssertEqual(p.client.rttMs, 23)
        // Not due again within the interval.
        XCTAssertTrue(p.client.tick(now: 10_500))
        XCTAssertEqual(p.client.outputCount, 0)
        // Without times in receive(), the PONG is timed at the next tick.
        XCTAssertTrue(p.client.tick(now: 11_000))
        try p.front.receive(Pair.take(p.client.withOutput))
        try p.client.receive(Pair.take(p.front.withOutput))
        XCTAssertTrue(p.client.tick(now: 11_040))
        XCTAssertEqual(p.client.rttMs, 40)
        XCTAssertEqual(p.client.counters.pingsSent, 2)
        XCTAssertEqual(p.client.counters.pongsReceived, 2)
    }

    func testDeadCarrierDetection() throws {
        let p = Pair(keepaliveMs: 1000)
        XCTAssertTrue(p.client.tick(now: 0), "no interval before STATUS")
        try p.establish()
        XCTAssertTrue(p.client.tick(now: 5_000))   // heard the STATUS: counts from here
        XCTAssertTrue(p.client.tick(now: 6_000))
        XCTAssertTrue(p.client.tick(now: 6_999))
        XCTAssertFalse(p.client.tick(now: 7_000), "2 intervals of silence")
        // The front too, with exact receive times.
        let front = makeFront(keepaliveMs: 1000)
        XCTAssertTrue(front.tick(now: 100))
        XCTAssertEqual(front.outputCount, 0, "no PING before HELLO")
        try encodeAll([.hello(Hello(token: "tok", clientName: "x"))]).withUnsafeBytes { try front.receive($0, now: 500) }
        _ = try front.takeFrames()
        XCTAssertTrue(front.tick(now: 2_499))
        XCTAssertEqual(try front.takeFrames(), [.ping(1)])
        XCTAssertFalse(front.tick(now: 2_500))
    }

    func testPeerThatNeverReadsPongs() throws {
        let front = makeFront(limits: SessionLimits(maxOutputBytes: 1000), keepaliveMs: 1000)
        try front.receive(frames: [.hello(Hello(token: "tok", clientName: "x"))])
        let pings = try encodeAll((0..<5000).map { .ping($0) })
        XCTAssertThrowsError(try front.receive(pings)) { e in
            guard case .outputOverflow(let n)? = e as? ProtocolError else { return XCTFail("\(e)") }
            // Cut off at the first PONG past the bound (+ slack), not later.
            XCTAssertGreaterThan(n, 1000 + SessionEngine.controlSlack)
            XCTAssertLessThanOrEqual(n, 1000 + SessionEngine.controlSlack + 16)
        }
        XCTAssertLessThan(front.counters.framesIn, 5001)
    }

    // MARK: output bound

    func testOutputBoundHonoured() throws {
        let p = Pair(clientLimits: SessionLimits(maxOutputBytes: 100_000))
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        let open = p.client.outputCount
        let big = [UInt8](repeating: 3, count: 1 << 20)
        let n = big.withBytes { p.client.write(stream: s, $0) }
        // One full frame (65 543) then what fits in the rest, less its header.
        XCTAssertEqual(n, 65_535 + (100_000 - open - 65_543 - 8))
        XCTAssertEqual(p.client.outputCount, 100_000)
        XCTAssertEqual(big.withBytes { p.client.write(stream: s, $0) }, 0)
        XCTAssertEqual(p.client.writableBytes(stream: s), 0)
        XCTAssertNil(p.cd.writable[s])
        // Draining to just above half: still refused, no signal.
        p.client.withOutput { _ in 49_000 }
        XCTAssertEqual(p.client.outputCount, 51_000)
        XCTAssertNil(p.cd.writable[s])
        p.client.withOutput { _ in 2_000 }
        XCTAssertEqual(p.cd.writable[s], 1, "fired once output went below half")
        XCTAssertEqual(p.client.writableBytes(stream: s), 100_000 - 49_000 - 8)
        let m = big.withBytes { p.client.write(stream: s, $0) }
        XCTAssertEqual(m, 100_000 - 49_000 - 8)
        XCTAssertEqual(p.client.outputCount, 100_000)
        XCTAssertEqual(p.client.counters.dataBytesOut, UInt64(n + m))
    }

    func testWritableAfterCredit() throws {
        let p = Pair()
        p.maxPiece = nil
        try p.establish()
        let s = try XCTUnwrap(p.client.openStream(to: Sample.v4))
        try p.pump()
        let big = [UInt8](repeating: 3, count: 1 << 20)
        XCTAssertEqual(big.withBytes { p.client.write(stream: s, $0) }, Int(LoftWire.initialStreamWindow))
        XCTAssertEqual(p.client.writableBytes(stream: s), 0)
        try p.pump()
        var buf = [UInt8](repeating: 0, count: 200_000)
        XCTAssertEqual(buf.withUnsafeMutableBytes { p.front.read(stream: s, into: $0) }, .data(200_000))
        try p.pump()
        XCTAssertEqual(p.cd.writable[s], 1)
        XCTAssertEqual(p.client.writableBytes(stream: s), 200_000)
    }
}
