import Foundation
import Glibc
import LoftCarriers
import LoftCore
import LoftFront
import LoftIO
import LoftProtocol
import LoftSessionStream
import XCTest
@testable import LoftDirect
@testable import LoftOutbounds

/// The holder against a real front on 127.0.0.1, both on one loop, with local echo servers
/// as destinations: the Outbound contract the netstack relies on, end to end.
final class HolderOutboundTests: XCTestCase {
    private let window = Int(HolderOptions.streamWindow)

    // MARK: the session

    private func comesUp(_ kind: CarrierKind) throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let holder = try sc.holder(kind, port: front.localEndpoint!.port)
        var statuses: [Status] = []
        holder.onStatus = { statuses.append($0) }
        XCTAssertEqual(holder.stats.state, "idle")
        XCTAssertFalse(holder.isUp)
        holder.start()
        XCTAssertEqual(holder.stats.state, "dialing")
        let ok = sc.run([{ !statuses.isEmpty }, sc.pause(100)])
        XCTAssertTrue(ok, "\(kind): stuck at step \(sc.failedStep ?? -1): \(holder.stats)")
        XCTAssertEqual(statuses.count, 1, "\(kind)")
        let s = try XCTUnwrap(statuses.first)
        // The overlay is the first address of the front's pool.
        XCTAssertEqual(s.overlay.ipv4, IPPrefix("198.18.64.2/24"))
        XCTAssertEqual(s.overlay.gateway4, IPAddress("198.18.64.1"))
        XCTAssertEqual(s.overlay.ipv6, IPPrefix("fd00:64::2/64"))
        XCTAssertEqual(s.overlay.gateway6, IPAddress("fd00:64::1"))
        XCTAssertEqual(s.overlay.mtu, 1400)
        XCTAssertEqual(s.overlay.dns, [IPAddress("198.18.1.2")!])
        XCTAssertEqual(s.keepaliveMs, 10_000)
        XCTAssertEqual(s.maxStreams, 16)
        let st = holder.stats
        XCTAssertTrue(holder.isUp)
        XCTAssertEqual(st.state, "up")
        XCTAssertEqual(st.sessions, 1)
        XCTAssertEqual(st.resumes, 0)
        XCTAssertEqual(st.dials, 1)
        XCTAssertEqual(st.carrierLosses, 0)
        XCTAssertEqual(st.instance, s.instanceID.description)
        XCTAssertEqual(st.overlay, "198.18.64.2/24 fd00:64::2/64")
        XCTAssertTrue(st.carrier.hasPrefix(kind.rawValue + " "), st.carrier)
        XCTAssertTrue(st.carrier.contains("TLS"), st.carrier)
        XCTAssertEqual(st.lastError, "")
        let r = front.report()
        XCTAssertEqual(r.sessionsOpened, 1)
        XCTAssertEqual(r.sessionsAttached, 1)
    }

    func testHolderComesUpOverWS() throws { try comesUp(.ws) }
    func testHolderComesUpOverGet() throws { try comesUp(.get) }
    func testHolderComesUpOverH2() throws { try comesUp(.h2) }

    // MARK: TCP

    private func bulkEcho(_ kind: CarrierKind) throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(kind, port: front.localEndpoint!.port)
        holder.start()
        let size = 8 << 20
        let p = StreamProbe()
        p.toSend = pattern(size)
        p.finishAfterSending = true
        var maxInFlight = 0
        var maxBuffered = 0
        let ok = sc.run(seconds: 40, [
            { holder.isUp },
            { p.conn = holder.openStream(to: .ip(echo.endpoint), events: p); return true },
            {
                maxInFlight = max(maxInFlight, Int(front.report().bytesDown) - p.received.count)
                maxBuffered = max(maxBuffered, holder.session.bufferedBytes)
                return p.eof || p.failure != nil || p.readFailure != nil || p.writeBroken
            },
        ])
        XCTAssertTrue(ok, "\(kind): stuck at step \(sc.failedStep ?? -1): sent \(p.sent) received \(p.received.count)")
        XCTAssertNil(p.failure)
        XCTAssertNil(p.readFailure)
        XCTAssertFalse(p.writeBroken)
        XCTAssertTrue(p.connected)
        XCTAssertEqual(p.sent, size)
        XCTAssertEqual(p.received.count, size)
        XCTAssertTrue(p.received == p.toSend, "\(kind): the echo is not byte-exact")
        XCTAssertTrue(p.eof)
        XCTAssertEqual(p.overReads, 0)
        // 8 MiB cannot go into a 1 MiB window at once: the holder said "full" and then "writable".
        XCTAssertGreaterThan(p.writesRefused, 0)
        XCTAssertGreaterThan(p.writableEvents, 0)
        XCTAssertLessThanOrEqual(maxInFlight, window)
        XCTAssertLessThanOrEqual(maxBuffered, window)
        XCTAssertEqual(echo.bytesIn, size)
        XCTAssertEqual(echo.eofs, 1)
        XCTAssertEqual(echo.closedClean, 1)
        let r = front.report()
        XCTAssertEqual(r.bytesUp, UInt64(size))
        XCTAssertEqual(r.bytesDown, UInt64(size))
        XCTAssertEqual(holder.stats.streamsReset, 0)
    }

    func testEightMebibytesEchoOverWS() throws { try bulkEcho(.ws) }
    func testEightMebibytesEchoOverGet() throws { try bulkEcho(.get) }
    func testEightMebibytesEchoOverH2() throws { try bulkEcho(.h2) }

    /// The reader stops: no streamReadable while off, no read larger than asked, and the bytes
    /// the front sent but the app has not read never exceed the stream's window.
    func testSlowReaderIsHeldToTheWindow() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(port: front.localEndpoint!.port)
        holder.start()
        let size = 6 << 20
        let p = StreamProbe()
        p.toSend = pattern(size, seed: 3)
        p.finishAfterSending = true
        p.readSize = 1000
        var receivedAtPause = 0
        var maxInFlight = 0
        var maxBuffered = 0
        var maxStreamBuffered = 0
        func sample() {
            maxInFlight = max(maxInFlight, Int(front.report().bytesDown) - p.received.count)
            maxBuffered = max(maxBuffered, holder.session.bufferedBytes)
            if let id = (p.conn as? SessionStream)?.id {
                maxStreamBuffered = max(maxStreamBuffered, holder.session.readableBytes(stream: id))
            }
        }
        let pause = sc.pause(1200)
        let ok = sc.run(seconds: 40, [
            { holder.isUp },
            { p.conn = holder.openStream(to: .ip(echo.endpoint), events: p); return true },
            { sample(); return p.received.count >= 1 << 20 || p.failure != nil },
            { p.setReading(false); receivedAtPause = p.received.count; return true },
            { sample(); return pause() },
            {
                // Held back: nothing read, the stream's buffer filled to its window at most.
                XCTAssertEqual(p.received.count, receivedAtPause)
                XCTAssertEqual(p.readableWhileOff, 0, "streamReadable while read interest was off")
                p.setReading(true)
                return true
            },
            { sample(); return p.eof || p.failure != nil || p.readFailure != nil },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): sent \(p.sent) received \(p.received.count)")
        XCTAssertNil(p.readFailure)
        XCTAssertEqual(p.overReads, 0, "a read returned more than its buffer")
        XCTAssertEqual(p.received.count, size)
        XCTAssertTrue(p.received == p.toSend, "the echo is not byte-exact")
        XCTAssertGreaterThanOrEqual(maxStreamBuffered, window / 2, "the pause filled the stream's window")
        XCTAssertLessThanOrEqual(maxStreamBuffered, window)
        XCTAssertLessThanOrEqual(maxBuffered, window)
        XCTAssertLessThanOrEqual(maxInFlight, window)
        XCTAssertEqual(holder.session.bufferedBytes, 0)
    }

    /// The app half-closes: the destination reads EOF, sends what is left and closes; the app
    /// reads every byte and then EOF.
    func testShutdownWriteReachesTheDestinationAndEOFComesBack() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(port: front.localEndpoint!.port)
        holder.start()
        let p = StreamProbe()
        p.toSend = pattern(300_000, seed: 5)
        p.finishAfterSending = true
        let ok = sc.run([
            { holder.isUp },
            { p.conn = holder.openStream(to: .ip(echo.endpoint), events: p); return true },
            { p.eof || p.failure != nil || p.readFailure != nil },
            { p.conn?.close(); return true },
            { front.report().streamsOpen == 0 },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): received \(p.received.count)")
        XCTAssertTrue(p.finSent)
        XCTAssertEqual(echo.eofs, 1, "the destination saw EOF")
        XCTAssertEqual(echo.closedClean, 1, "the destination echoed the rest and closed")
        XCTAssertEqual(echo.resets, 0)
        XCTAssertTrue(p.eof)
        XCTAssertNil(p.readFailure)
        XCTAssertTrue(p.received == p.toSend, "\(p.received.count) of \(p.toSend.count) bytes")
        // After EOF a read keeps saying EOF.
        var byte: UInt8 = 0
        let again = withUnsafeMutableBytes(of: &byte) { p.conn!.read(into: $0) }
        XCTAssertEqual(again, .eof)
        XCTAssertEqual(holder.stats.streamsReset, 0)
    }

    /// EOF from the destination while the app has read interest off, with nothing else left to
    /// read: turning interest back on must still report it.
    func testEOFThatArrivesWhileReadingIsOffIsReported() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(port: front.localEndpoint!.port)
        holder.start()
        let p = StreamProbe()
        p.toSend = pattern(10_000, seed: 9)
        let settle = sc.pause(300)
        let ok = sc.run(seconds: 10, [
            { holder.isUp },
            { p.conn = holder.openStream(to: .ip(echo.endpoint), events: p); return true },
            { p.received.count == p.toSend.count || p.failure != nil },
            { p.setReading(false); p.conn?.shutdownWrite(); return true },
            { echo.closedClean == 1 },
            settle,
            { p.setReading(true); return true },
            { p.eof || p.readFailure != nil },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): eof \(p.eof), readable events \(p.readableEvents)")
        XCTAssertTrue(p.eof)
        XCTAssertTrue(p.received == p.toSend)
        XCTAssertEqual(p.readableWhileOff, 0)
    }

    /// reset(): the destination sees a reset, within a second.
    func testResetReachesTheDestination() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(.get, port: front.localEndpoint!.port)
        holder.start()
        let p = StreamProbe()
        p.toSend = pattern(1000)
        var resetAt: UInt64 = 0
        var seenAt: UInt64 = 0
        let ok = sc.run(seconds: 10, [
            { holder.isUp },
            { p.conn = holder.openStream(to: .ip(echo.endpoint), events: p); return true },
            { p.received.count == 1000 || p.failure != nil },
            { resetAt = monotonicMilliseconds(); p.conn?.reset(); return true },
            { if echo.resets > 0 { seenAt = monotonicMilliseconds(); return true }; return echo.open == 0 },
            { front.report().streamsOpen == 0 },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1)")
        XCTAssertTrue(p.received == p.toSend)
        XCTAssertEqual(echo.resets, 1, "the destination saw ECONNRESET")
        XCTAssertEqual(echo.eofs, 0, "a reset, not a FIN")
        XCTAssertLessThan(seenAt - resetAt, 1000)
        XCTAssertEqual(front.report().streamsReset, 1)
        XCTAssertTrue(holder.isUp, "a reset stream does not touch the session")
    }

    func testClosedPortIsRefused() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let holder = try sc.holder(port: front.localEndpoint!.port)
        holder.start()
        let p = StreamProbe()
        let port = closedPort()
        let ok = sc.run([
            { holder.isUp },
            { p.conn = holder.openStream(to: .ip(Endpoint(loopback4, port)), events: p); return true },
            { p.failure != nil || p.connected },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1)")
        XCTAssertEqual(p.failure, .refused)
        XCTAssertFalse(p.connected)
        XCTAssertTrue(holder.isUp)
        XCTAssertEqual(front.report().streamsFailed, 1)
    }

    /// A flow opened before the session is up waits for it and then goes through.
    func testAFlowOpenedWhileDialingWaitsForTheSession() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(port: front.localEndpoint!.port)
        holder.start()
        let p = StreamProbe()
        p.toSend = pattern(5000)
        p.conn = holder.openStream(to: .ip(echo.endpoint), events: p)
        let ok = sc.run([{ p.received.count == 5000 || p.failure != nil }])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1)")
        XCTAssertTrue(p.received == p.toSend)
        XCTAssertEqual(holder.stats.fallbackFlows, 0)
    }

    // MARK: UDP

    func testDatagramsGoThroughTheSessionAndRepliesNameTheirSource() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echoA = UDPEchoServer(loop: sc.loop)
        let echoB = UDPEchoServer(loop: sc.loop)
        let holder = try sc.holder(port: front.localEndpoint!.port)
        holder.start()
        let d = DatagramProbe()
        var assoc: DatagramAssociation?
        var sentA = false
        var sentB = false
        let ok = sc.run([
            { holder.isUp },
            {
                assoc = holder.openAssociation(events: d)
                sentA = ([1, 2, 3] as [UInt8]).withUnsafeBytes { assoc?.send($0, to: .ip(echoA.endpoint)) ?? false }
                return true
            },
            { d.received.count == 1 },
            { sentB = ([9, 8] as [UInt8]).withUnsafeBytes { assoc?.send($0, to: .ip(echoB.endpoint)) ?? false }; return true },
            { d.received.count == 2 },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(d.received)")
        XCTAssertTrue(sentA)
        XCTAssertTrue(sentB)
        XCTAssertEqual(d.received.first?.payload, [1, 2, 3])
        XCTAssertEqual(d.received.first?.from, echoA.endpoint)
        XCTAssertEqual(d.received.last?.payload, [9, 8])
        XCTAssertEqual(d.received.last?.from, echoB.endpoint)
        XCTAssertEqual(echoA.datagrams, 1)
        XCTAssertEqual(echoB.datagrams, 1)
        let r = front.report()
        XCTAssertEqual(r.datagramsUp, 2)
        XCTAssertEqual(r.datagramsDown, 2)
        XCTAssertEqual(r.associationsOpen, 1, "one association for both remotes")
        assoc?.close()
    }

    // MARK: down: hold and fallback

    func testHoldRefusesFlowsWhileTheFrontIsGone() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let udp = UDPEchoServer(loop: sc.loop)
        let fallback = TestOutbound(name: "counting-direct", type: "counting", forwardingTo: DirectOutbound(loop: sc.loop))
        let holder = try sc.holder(port: front.localEndpoint!.port, hold: true, fallback: fallback, minBackoffMs: 1000)
        holder.start()
        let p = StreamProbe()
        p.toSend = pattern(100)
        let d = DatagramProbe()
        var assoc: DatagramAssociation?
        var stopped = false
        var sentWhileDown = true
        let ok = sc.run([
            { holder.isUp },
            { assoc = holder.openAssociation(events: d); front.shutdown { stopped = true }; return true },
            { stopped && holder.stats.state == "held" },
            {
                p.conn = holder.openStream(to: .ip(echo.endpoint), events: p)
                sentWhileDown = ([7] as [UInt8]).withUnsafeBytes { assoc?.send($0, to: .ip(udp.endpoint)) ?? true }
                return true
            },
            { p.failure != nil || p.connected },
            sc.pause(200),
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(holder.stats)")
        XCTAssertEqual(p.failure, .networkUnreachable)
        XCTAssertFalse(p.connected)
        XCTAssertFalse(sentWhileDown, "a datagram while held is dropped")
        XCTAssertEqual(holder.stats.holdDrops, 2, "one flow and one datagram")
        XCTAssertEqual(holder.stats.fallbackFlows, 0)
        XCTAssertEqual(holder.stats.carrierLosses, 1)
        XCTAssertFalse(holder.stats.lastError.isEmpty)
        XCTAssertEqual(fallback.streamsOpened, 0, "nothing goes direct")
        XCTAssertEqual(fallback.associationsOpened, 0, "nothing goes direct")
        XCTAssertEqual(echo.accepted, 0)
        XCTAssertEqual(udp.datagrams, 0)
        XCTAssertTrue(d.received.isEmpty)
        assoc?.close()
    }

    func testWithoutHoldFlowsGoThroughTheFallbackWhileTheFrontIsGone() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let udp = UDPEchoServer(loop: sc.loop)
        let fallback = TestOutbound(name: "counting-direct", type: "counting", forwardingTo: DirectOutbound(loop: sc.loop))
        let holder = try sc.holder(port: front.localEndpoint!.port, hold: false, fallback: fallback, minBackoffMs: 1000)
        holder.start()
        let p = StreamProbe()
        p.toSend = pattern(50_000)
        let d = DatagramProbe()
        var assoc: DatagramAssociation?
        var stopped = false
        var bytesUpBefore: UInt64 = 0
        var state = ""
        let ok = sc.run([
            { holder.isUp },
            {
                assoc = holder.openAssociation(events: d)
                bytesUpBefore = front.report().bytesUp
                front.shutdown { stopped = true }
                return true
            },
            { stopped && holder.stats.state == "down" },
            {
                state = holder.stats.state
                p.conn = holder.openStream(to: .ip(echo.endpoint), events: p)
                _ = ([4, 5] as [UInt8]).withUnsafeBytes { assoc?.send($0, to: .ip(udp.endpoint)) }
                return true
            },
            { (p.received.count == 50_000 && d.received.count == 1) || p.failure != nil },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(holder.stats) received \(p.received.count)")
        XCTAssertEqual(state, "down")
        XCTAssertNil(p.failure)
        XCTAssertTrue(p.received == p.toSend)
        XCTAssertEqual(d.received.first?.payload, [4, 5])
        XCTAssertEqual(d.received.first?.from, udp.endpoint)
        XCTAssertEqual(holder.stats.fallbackFlows, 1)
        XCTAssertEqual(holder.stats.holdDrops, 0)
        XCTAssertEqual(fallback.streamsOpened, 1)
        XCTAssertEqual(fallback.associationsOpened, 1)
        XCTAssertEqual(echo.accepted, 1)
        XCTAssertEqual(front.report().bytesUp, bytesUpBefore, "nothing went through the front")
        assoc?.close()
    }

    // MARK: resume

    /// pathChanged: the carrier is dropped, a new one resumes the same instance; the stream
    /// that was open is reset (streams do not survive a carrier), new flows work again.
    func testPathChangedResumesTheSameInstance() throws { try pathChangedResumes(.ws) }
    func testPathChangedResumesTheSameInstanceOverH2() throws { try pathChangedResumes(.h2) }

    private func pathChangedResumes(_ kind: CarrierKind) throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(kind, port: front.localEndpoint!.port)
        var statuses: [Status] = []
        holder.onStatus = { statuses.append($0) }
        holder.start()
        let udp = UDPEchoServer(loop: sc.loop)
        let d = DatagramProbe()
        var assoc: DatagramAssociation?
        func send(_ b: UInt8) { _ = ([b] as [UInt8]).withUnsafeBytes { assoc?.send($0, to: .ip(udp.endpoint)) } }
        let before = StreamProbe()
        before.toSend = pattern(1000)
        let after = StreamProbe()
        after.toSend = pattern(2000, seed: 1)
        var instance = ""
        let ok = sc.run([
            { holder.isUp },
            {
                before.conn = holder.openStream(to: .ip(echo.endpoint), events: before)
                assoc = holder.openAssociation(events: d)
                send(1)
                return true
            },
            { before.received.count == 1000 && d.received.count == 1 },
            { instance = holder.stats.instance; holder.pathChanged(reason: "test"); return true },
            { holder.stats.resumes == 1 && holder.isUp },
            { after.conn = holder.openStream(to: .ip(echo.endpoint), events: after); send(2); return true },
            { (after.received.count == 2000 && d.received.count == 2) || after.failure != nil },
            { echo.resets == 1 || echo.open == 1 },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(holder.stats)")
        let st = holder.stats
        XCTAssertFalse(instance.isEmpty)
        XCTAssertEqual(st.instance, instance, "RESUME keeps the instance")
        XCTAssertEqual(st.resumes, 1)
        XCTAssertEqual(st.sessions, 1)
        XCTAssertEqual(st.dials, 2)
        XCTAssertEqual(st.pathChanges, 1)
        XCTAssertEqual(st.carrierLosses, 1)
        XCTAssertEqual(st.streamsReset, 1)
        XCTAssertEqual(st.overlay, "198.18.64.2/24 fd00:64::2/64")
        XCTAssertEqual(statuses.count, 2)
        XCTAssertEqual(statuses.first, statuses.last, "the same STATUS after RESUME")
        XCTAssertEqual(before.failure, .other(ECONNRESET), "a stream lost with its carrier fails once, reading or not")
        XCTAssertTrue(after.received == after.toSend)
        // The association outlives the carrier: the next datagram opened it again.
        XCTAssertEqual(d.received.map(\.payload), [[1], [2]])
        XCTAssertEqual(d.received.last?.from, udp.endpoint)
        XCTAssertEqual(udp.datagrams, 2)
        let r = front.report()
        XCTAssertEqual(r.sessionsOpened, 1)
        XCTAssertEqual(r.sessionsResumed, 1)
    }

    /// A carrier lost while a stream's OPEN is still unanswered: that flow never connected, so
    /// it must fail (streamFailed: the app's SYN is answered), not turn readable.
    func testAnOpenInFlightWhenTheCarrierIsLostFails() throws {
        let sc = try Scenario()
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(port: front.localEndpoint!.port)
        holder.start()
        let p = StreamProbe()
        let ok = sc.run([
            { holder.isUp },
            {
                p.conn = holder.openStream(to: .ip(echo.endpoint), events: p)
                holder.pathChanged(reason: "test")
                return true
            },
            { p.failure != nil || p.connected || p.readableBeforeConnected > 0 },
            { holder.isUp },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(holder.stats)")
        XCTAssertNotNil(p.failure, "the flow was told nothing it can act on")
        XCTAssertFalse(p.connected)
        XCTAssertEqual(p.readableBeforeConnected, 0)
        XCTAssertEqual(holder.stats.resumes, 1)
    }

    /// A new front process on the same port with the same state file: the holder redials and
    /// resumes the same instance with the same overlay.
    func testRestartedFrontWithItsStateFileResumesTheInstance() throws {
        let dir = try scratchDirectory("loft-outbounds-state")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let stateFile = dir + "/front.state"
        let sc = try Scenario()
        var first: FrontServer? = try sc.startFront(stateFile: stateFile)
        let port = first!.localEndpoint!.port
        var second: FrontServer?
        let holder = try sc.holder(.get, port: port)
        var statuses: [Status] = []
        holder.onStatus = { statuses.append($0) }
        holder.start()
        var instance = ""
        var stopped = false
        let ok = sc.run(seconds: 20, [
            { holder.isUp },
            { instance = holder.stats.instance; first!.shutdown { stopped = true }; return true },
            { stopped && !holder.isUp },
            {
                // As loft-front does at a clean exit; then a new process on the same port and file.
                _ = first!.saveState(final: true)
                first = nil
                second = try? sc.startFront(port: port, stateFile: stateFile)
                return true
            },
            { second == nil || (holder.stats.resumes == 1 && holder.isUp) },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(holder.stats)")
        let r = try XCTUnwrap(second?.report(), "the second front did not start")
        XCTAssertEqual(holder.stats.instance, instance)
        XCTAssertEqual(holder.stats.resumes, 1)
        XCTAssertEqual(holder.stats.sessions, 1)
        XCTAssertEqual(holder.stats.overlay, "198.18.64.2/24 fd00:64::2/64")
        XCTAssertEqual(statuses.count, 2)
        XCTAssertEqual(statuses.first, statuses.last)
        XCTAssertEqual(r.sessionsResumed, 1)
        XCTAssertEqual(r.sessionsOpened, 0)
        XCTAssertEqual(r.sessionsAttached, 1)
    }

    /// loft itself restarts: a new holder with the same state file RESUMEs the instance the
    /// first one saved, and gets the same overlay; a file naming an instance the front does
    /// not know costs one GOAWAY, then HELLO at once (a waiting flow keeps waiting), and the new
    /// instance replaces it in the file.
    func testRestartedHolderWithItsStateFileResumesTheInstance() throws {
        let dir = try scratchDirectory("loft-holder-state")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let stateFile = dir + "/home.state"
        let sc = try Scenario()
        let front = try sc.startFront()
        let port = front.localEndpoint!.port
        let echo = TCPEchoServer(loop: sc.loop)
        let early = StreamProbe()
        early.toSend = pattern(100)
        let first = try sc.holder(port: port, stateFile: stateFile)
        first.start()
        var second: HolderOutbound?
        var third: HolderOutbound?
        var instance = ""
        var written = ""
        let ok = sc.run(seconds: 20, [
            { first.isUp },
            {
                instance = first.stats.instance
                written = (try? String(contentsOfFile: stateFile, encoding: .utf8)) ?? ""
                first.stop()
                second = try? sc.holder(port: port, stateFile: stateFile)
                second?.start()
                return true
            },
            { second == nil || second!.isUp },
            {
                second!.stop()
                // A front that never saw this instance.
                try? "loft-holder-state 1\n\(String(repeating: "ab", count: 16))\n".write(toFile: stateFile, atomically: true, encoding: .utf8)
                third = try? sc.holder(port: port, stateFile: stateFile)
                third?.start()
                // A flow that arrives during that first dial waits through the GOAWAY.
                early.conn = third?.openStream(to: .ip(echo.endpoint), events: early)
                return true
            },
            { third == nil || (third!.isUp && (early.received.count == 100 || early.failure != nil)) },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(second?.stats as Any) \(third?.stats as Any)")
        XCTAssertEqual(written, "loft-holder-state 1\n\(instance)\n")
        let s2 = try XCTUnwrap(second?.stats)
        XCTAssertEqual(s2.instance, instance, "the restarted holder resumed")
        XCTAssertEqual(s2.resumes, 1)
        XCTAssertEqual(s2.sessions, 0)
        XCTAssertEqual(s2.overlay, "198.18.64.2/24 fd00:64::2/64")
        let s3 = try XCTUnwrap(third?.stats)
        XCTAssertEqual(s3.sessions, 1, "HELLO after GOAWAY unknown-instance")
        XCTAssertEqual(s3.resumes, 0)
        XCTAssertEqual(s3.dials, 2, "RESUME refused, then HELLO at once: \(s3)")
        XCTAssertNil(early.failure, "the waiting flow was not failed")
        XCTAssertTrue(early.received == early.toSend)
        XCTAssertNotEqual(s3.instance, String(repeating: "ab", count: 16))
        let saved = (try? String(contentsOfFile: stateFile, encoding: .utf8)) ?? ""
        XCTAssertEqual(saved, "loft-holder-state 1\n\(s3.instance)\n")
        let r = front.report()
        XCTAssertEqual(r.sessionsResumed, 1)
    }

    /// stop(): flows fail, the state says so, and nothing is dialled again.
    func testStopEndsTheSession() throws {
        let sc = try Scenario(clock: VirtualClock())
        let front = try sc.startFront()
        let echo = TCPEchoServer(loop: sc.loop)
        let holder = try sc.holder(port: front.localEndpoint!.port, hold: true)
        holder.start()
        let open = StreamProbe()
        open.toSend = pattern(100)
        let late = StreamProbe()
        var dials: UInt64 = 0
        let ok = sc.run([
            { holder.isUp },
            { open.conn = holder.openStream(to: .ip(echo.endpoint), events: open); return true },
            { open.received.count == 100 },
            { holder.stop(); dials = holder.stats.dials; return true },
            { late.conn = holder.openStream(to: .ip(echo.endpoint), events: late); return true },
            { late.failure != nil && front.report().sessionsAttached == 0 },
            sc.pause(700),
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(holder.stats)")
        XCTAssertEqual(late.failure, .networkUnreachable)
        XCTAssertEqual(open.readFailure ?? open.failure, .networkUnreachable)
        XCTAssertFalse(holder.isUp)
        XCTAssertEqual(holder.stats.dials, dials, "no redial after stop")
        XCTAssertEqual(echo.accepted, 1)
    }

    /// A fresh folder under the temporary directory; the caller removes it.
    private func scratchDirectory(_ tag: String) throws -> String {
        let dir = NSTemporaryDirectory() + "\(tag)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }
}
