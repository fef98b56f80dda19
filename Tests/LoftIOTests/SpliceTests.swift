import CLinux
import Glibc
import LoftCore
@testable import LoftIO
import LoftTestSupport
import XCTest

final class Owner: SpliceOwner {
    var connected = 0
    var failed: [FlowFailure] = []
    var ended: [Splice.Ending] = []
    var moved = 0
    var attachOnConnect: TestStream?
    /// Owners keep their splices.
    var splices: [Splice] = []
    func spliceConnected(_ splice: Splice) {
        connected += 1
        if let a = attachOnConnect { splice.attach(a) }
    }
    func spliceFailed(_ splice: Splice, _ failure: FlowFailure) { failed.append(failure) }
    func spliceEnded(_ splice: Splice, _ ending: Splice.Ending) { ended.append(ending) }
    func spliceMoved(_ splice: Splice) { moved += 1 }
}

extension EventLoop {
    /// Runs the loop for about `ms` milliseconds (timers, deferred work).
    func turn(_ ms: UInt64 = 0) {
        schedule(after: ms) { [unowned self] in self.stop() }
        run()
    }
}

func bytes(_ n: Int, seed: UInt8 = 0) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) } }

final class SpliceTests: XCTestCase {
    var loop: EventLoop!
    var owner: Owner!
    var out: TestOutbound!
    var app: TestStream!

    override func setUpWithError() throws {
        loop = try EventLoop()
        owner = Owner()
        out = FakeOutbound(name: "memory", type: "memory") { destination, events in
            TestStream(destination: destination, events: events, readInterest: true, announcesRoom: false)
        }
        app = TestStream(readInterest: true, announcesRoom: false)
        owner.attachOnConnect = app
    }

    /// A splice dialled and connected: `app` inbound, the returned stream outbound.
    func connectedSplice(idleMs: UInt64 = 0, meter: SpliceMeter? = nil) -> (Splice, TestStream) {
        let s = Splice(loop: loop, owner: owner, meter: meter, connectTimeoutMs: 10_000, idleTimeoutMs: idleMs)
        owner.splices.append(s)
        s.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        let remote = out.streams[0]
        remote.events?.streamConnected(remote)
        XCTAssertEqual(owner.connected, 1)
        XCTAssertTrue(s.isRelaying)
        return (s, remote)
    }

    func testBytesBothWaysAreCountedOnce() {
        let meter = SpliceMeter()
        let (s, remote) = connectedSplice(meter: meter)
        app.feed(bytes(100_000))
        remote.feed(bytes(70_000, seed: 3))
        XCTAssertTrue(remote.written == bytes(100_000), "\(remote.written.count) bytes written")
        XCTAssertTrue(app.written == bytes(70_000, seed: 3), "\(app.written.count) bytes written")
        XCTAssertEqual(s.bytesUp, 100_000)
        XCTAssertEqual(s.bytesDown, 70_000)
        XCTAssertEqual(meter.bytesUp, 100_000)
        XCTAssertEqual(meter.bytesDown, 70_000)
        XCTAssertGreaterThan(owner.moved, 0)
    }

    func testRemoteHeldWhileUnattached() {
        let s = Splice(loop: loop, owner: owner, connectTimeoutMs: 10_000)
        owner.attachOnConnect = nil
        s.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        let remote = out.streams[0]
        remote.events?.streamConnected(remote)
        XCTAssertFalse(remote.readInterest, "remote bytes wait until the inbound end is attached")
        remote.incoming = bytes(10)
        let early: [UInt8] = [1, 2, 3]
        early.withUnsafeBytes { s.attach(app, initialUp: $0) }
        XCTAssertTrue(app.written == bytes(10), "\(app.written.count) bytes written")
        XCTAssertEqual(remote.written, [1, 2, 3], "bytes read before attach go first")
    }

    func testBackpressureHoldsAtMostOneReadAndResumes() {
        let (_, remote) = connectedSplice()
        remote.room = 1000
        let data = bytes(3 * Splice.chunk)
        app.feed(data)
        XCTAssertFalse(app.readInterest, "a full destination pauses reads from the source")
        XCTAssertEqual(remote.written.count, 1000)
        XCTAssertLessThanOrEqual(data.count - app.incoming.count, Splice.chunk, "at most one read waits in the splice")
        let readsWhilePaused = app.readCalls
        for _ in 0..<200 where remote.written.count < data.count { remote.drain(50_000) }
        XCTAssertTrue(remote.written == data, "\(remote.written.count) bytes written")
        XCTAssertTrue(app.readInterest)
        XCTAssertGreaterThan(app.readCalls, readsWhilePaused)
    }

    /// The remote end's reads are off until attach. A server that speaks first to an app that
    /// is already full when attached must have them off again: the paused flag left over from
    /// the dial made that pause a no-op, and level-triggered epoll then reported the socket
    /// readable on every turn (a spin with many such flows).
    func testRemoteSpeakingFirstToAFullAppStaysPausedAfterAttach() {
        let s = Splice(loop: loop, owner: owner, connectTimeoutMs: 10_000)
        owner.splices.append(s)
        owner.attachOnConnect = nil
        s.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        let remote = out.streams[0]
        remote.events?.streamConnected(remote)
        let data = bytes(3 * Splice.chunk, seed: 5)
        remote.incoming = data
        app.room = 1000
        s.attach(app)
        XCTAssertEqual(app.written.count, 1000)
        XCTAssertFalse(remote.readInterest, "a full app pauses reads from the remote")
        let readsWhilePaused = remote.readCalls
        for _ in 0..<200 where app.written.count < data.count { app.drain(50_000) }
        XCTAssertTrue(app.written == data, "\(app.written.count) bytes written")
        XCTAssertTrue(remote.readInterest)
        XCTAssertGreaterThan(remote.readCalls, readsWhilePaused)
    }

    func testZeroCopySourceIsConsumedOnlyAsWritten() {
        let (_, remote) = connectedSplice()
        app.zeroCopy = true
        remote.room = 10_000
        let data = bytes(50_000)
        app.feed(data)
        XCTAssertEqual(app.incoming.count, 40_000, "only what the destination took is consumed")
        XCTAssertFalse(app.readInterest)
        remote.drain(1_000_000)
        XCTAssertTrue(remote.written == data, "\(remote.written.count) bytes written")
    }

    /// A destination that takes writes in place: the source reads straight into it, only
    /// what it has room for (nothing waits in the splice), in its pieces, and resumes.
    func testInPlaceDestinationIsReadIntoDirectly() {
        let (s, remote) = connectedSplice()
        remote.inPlace = true
        remote.room = 10_000
        let data = bytes(50_000)
        app.feed(data)
        XCTAssertEqual(remote.written.count, 10_000)
        XCTAssertEqual(app.incoming.count, 40_000, "only what the destination had room for was read")
        XCTAssertEqual(remote.commits, 4, "3,000-byte pieces: 3 + 3 + 3 + 1")
        XCTAssertFalse(app.readInterest)
        remote.drain(1_000_000)
        XCTAssertTrue(remote.written == data, "\(remote.written.count) bytes written")
        XCTAssertEqual(s.bytesUp, 50_000)
        app.finishInput()
        XCTAssertTrue(remote.shut, "the EOF follows the bytes")
    }

    func testHalfCloseEachWayThenClose() {
        let (s, remote) = connectedSplice()
        app.feed(bytes(5000))
        app.finishInput()
        XCTAssertTrue(remote.shut, "the app's EOF is the remote's half-close")
        XCTAssertFalse(app.shut)
        // The remote keeps sending after the app's FIN.
        remote.feed(bytes(20_000, seed: 9))
        XCTAssertTrue(app.written == bytes(20_000, seed: 9), "\(app.written.count) bytes written")
        XCTAssertTrue(owner.ended.isEmpty)
        remote.finishInput()
        XCTAssertTrue(app.shut)
        XCTAssertEqual(owner.ended, [.closed])
        XCTAssertTrue(app.closed && remote.closed)
        XCTAssertEqual(app.resetCalls + remote.resetCalls, 0)
        XCTAssertTrue(s.isFinished)
    }

    func testEOFWaitsForPendingBytes() {
        let (_, remote) = connectedSplice()
        remote.room = 100
        app.feed(bytes(1000))
        app.finishInput()
        XCTAssertFalse(remote.shut, "no half-close while bytes wait")
        remote.drain(10_000)
        XCTAssertTrue(remote.written == bytes(1000), "\(remote.written.count) bytes written")
        XCTAssertTrue(remote.shut)
    }

    func testResetWhilePausedResetsTheOtherSideOnce() {
        let (_, remote) = connectedSplice()
        app.room = 0
        remote.feed(bytes(Splice.chunk))
        XCTAssertFalse(remote.readInterest)
        let reads = remote.readCalls
        remote.fail(.other(ECONNRESET))
        XCTAssertEqual(app.resetCalls, 1)
        XCTAssertEqual(owner.ended, [.reset(inbound: false, .other(ECONNRESET))])
        // Nothing more happens, however often the failed end reports.
        remote.events?.streamReadable(remote)
        remote.events?.streamFailed(remote, .other(ECONNRESET))
        XCTAssertEqual(remote.readCalls, reads)
        XCTAssertEqual(owner.ended.count, 1)
    }

    func testReadFailureAndBrokenWrite() {
        let (_, remote) = connectedSplice()
        remote.breakReads(.other(ECONNRESET))
        remote.events?.streamReadable(remote)
        XCTAssertEqual(app.resetCalls, 1)
        XCTAssertEqual(owner.ended, [.reset(inbound: false, .other(ECONNRESET))])

        let owner2 = Owner()
        let app2 = TestStream(readInterest: true, announcesRoom: false)
        owner2.attachOnConnect = app2
        let s2 = Splice(loop: loop, owner: owner2, connectTimeoutMs: 10_000)
        owner2.splices.append(s2)
        s2.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        let remote2 = out.streams[1]
        remote2.events?.streamConnected(remote2)
        remote2.close()  // writes now return -1
        app2.feed(bytes(10))
        XCTAssertEqual(remote2.resetCalls, 1)
        XCTAssertEqual(app2.resetCalls, 1)
        XCTAssertEqual(owner2.ended.count, 1)
    }

    /// On virtual time: the connect deadline is a loop timer.
    func testConnectFailureAndDeadline() throws {
        loop = try EventLoop(clock: VirtualClock())
        let s = Splice(loop: loop, owner: owner, connectTimeoutMs: 10_000)
        s.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        out.streams[0].fail(.refused)
        XCTAssertEqual(owner.failed, [.refused])
        XCTAssertTrue(s.isFinished)

        let owner2 = Owner()
        let s2 = Splice(loop: loop, owner: owner2, connectTimeoutMs: 30)
        owner2.splices.append(s2)
        s2.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        let t0 = loop.currentTime
        loop.turn(100)
        XCTAssertEqual(owner2.failed, [.timedOut])
        XCTAssertEqual(out.streams[1].resetCalls, 1)
        XCTAssertGreaterThanOrEqual(loop.currentTime - t0, 30)
    }

    /// On virtual time: the idle deadline is a loop timer.
    func testIdleDeadlineFollowsActivity() throws {
        loop = try EventLoop(clock: VirtualClock())
        let (_, remote) = connectedSplice(idleMs: 60)
        loop.turn(40)
        app.feed(bytes(10))  // activity pushes the deadline out
        loop.turn(40)
        XCTAssertTrue(owner.ended.isEmpty, "active within the idle timeout")
        loop.turn(80)
        XCTAssertEqual(owner.ended, [.idle])
        XCTAssertEqual(app.resetCalls, 1)
        XCTAssertEqual(remote.resetCalls, 1)
    }

    func testEventsFromInsideAWriteWaitATurn() {
        let (_, remote) = connectedSplice()
        // The remote reports "writable" from inside every write, and has bytes of its own.
        remote.onWrite = { [unowned remote] in remote.events?.streamWritable(remote); remote.events?.streamReadable(remote) }
        remote.incoming = bytes(300_000, seed: 5)
        app.feed(bytes(600_000))
        loop.turn(0)
        loop.turn(0)
        XCTAssertTrue(remote.written == bytes(600_000), "\(remote.written.count) bytes written")
        XCTAssertTrue(app.written == bytes(300_000, seed: 5), "\(app.written.count) bytes written")
    }

    func testOwnerResetAndCloseCallNoOwner() {
        let (s, remote) = connectedSplice()
        s.reset()
        XCTAssertEqual(app.resetCalls, 1)
        XCTAssertEqual(remote.resetCalls, 1)
        XCTAssertTrue(owner.ended.isEmpty)
        s.reset()
        XCTAssertEqual(app.resetCalls, 1)
    }

    func testRemainderBuffer() {
        var p = SpliceBuffer()
        XCTAssertTrue(p.isEmpty)
        XCTAssertNil(p.base, "no buffer until one is needed")
        let a: [UInt8] = Array(0..<100)
        a.withUnsafeBytes { p.append($0.baseAddress!, 100) }
        XCTAssertEqual(p.count, 100)
        p.consume(60)
        XCTAssertEqual(p.count, 40)
        XCTAssertEqual(p.bytes!.load(as: UInt8.self), 60)
        a.withUnsafeBytes { p.append($0.baseAddress!, 10) }
        XCTAssertEqual(p.count, 50)
        XCTAssertEqual(p.start, 0, "compacted before appending")
        XCTAssertEqual(p.bytes!.load(fromByteOffset: 40, as: UInt8.self), 0)
        p.consume(50)
        XCTAssertTrue(p.isEmpty)
        p.release()
        XCTAssertNil(p.base)
    }
}

/// Counts what a SocketStream tells its driver.
final class EventCounter: ByteStreamEvents {
    var connected = 0, failed: [FlowFailure] = [], readable = 0, writable = 0
    func streamConnected(_: ByteStream) { connected += 1 }
    func streamFailed(_: ByteStream, _ failure: FlowFailure) { failed.append(failure) }
    func streamReadable(_: ByteStream) { readable += 1 }
    func streamWritable(_: ByteStream) { writable += 1 }
}

final class SocketStreamTests: XCTestCase {
    /// A listening socket on 127.0.0.1 and its port.
    func listener() -> (Int32, UInt16) {
        let l = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let a = SocketAddress(Endpoint("127.0.0.1:0")!)
        _ = a.withSockaddr { bind(l, $0, $1) }
        listen(l, 8)
        return (l, Sockets.localEndpoint(l)!.port)
    }

    /// The peer sends, then resets, while the driver does not read: one failure, no storm of
    /// wake-ups (the defect was 100 % of a core until the app read).
    func testResetWhileReadsPausedIsOneFailure() throws {
        let loop = try EventLoop()
        let (l, port) = listener()
        defer { Glibc.close(l) }
        let ev = EventCounter()
        let s = SocketStream(loop: loop, events: ev, meter: nil)
        s.connect(Endpoint(IPAddress("127.0.0.1")!, port))
        loop.turn(50)
        XCTAssertEqual(ev.connected, 1)
        let peer = accept(l, nil, nil)
        XCTAssertGreaterThanOrEqual(peer, 0)
        s.setReadInterest(false)
        var big = [UInt8](repeating: 7, count: 200_000)
        _ = send(peer, &big, big.count, Int32(MSG_DONTWAIT))
        _ = clinux_set_linger_reset(peer)
        Glibc.close(peer)
        loop.turn(200)
        XCTAssertEqual(ev.failed, [FlowFailure(errno: ECONNRESET)])
        XCTAssertEqual(ev.readable, 0, "no readable while reads are paused")
        XCTAssertEqual(s.fd, -1, "the failed socket is closed")
    }

    /// Both directions finished while reads are paused: out of epoll (no repeated hang-ups),
    /// and the rest is readable once reads are wanted.
    func testHangupWhilePausedWaitsForReads() throws {
        let loop = try EventLoop()
        let (l, port) = listener()
        defer { Glibc.close(l) }
        let ev = EventCounter()
        let s = SocketStream(loop: loop, events: ev, meter: nil)
        s.connect(Endpoint(IPAddress("127.0.0.1")!, port))
        loop.turn(50)
        let peer = accept(l, nil, nil)
        s.setReadInterest(false)
        s.shutdownWrite()
        var msg: [UInt8] = [1, 2, 3]
        _ = send(peer, &msg, 3, 0)
        Glibc.close(peer)
        loop.turn(100)
        XCTAssertEqual(ev.readable, 0)
        XCTAssertTrue(ev.failed.isEmpty)
        s.setReadInterest(true)
        loop.turn(20)
        XCTAssertEqual(ev.readable, 1)
        var buf = [UInt8](repeating: 0, count: 16)
        let r = buf.withUnsafeMutableBytes { s.read(into: $0) }
        XCTAssertEqual(r, .data(3))
        XCTAssertEqual(buf.withUnsafeMutableBytes { s.read(into: $0) }, .eof)
        s.close()
    }

    /// Request and answer: once a read after a short read found nothing, the next short read
    /// is not followed by one (no recv that can only fail), and nothing is lost by it: bytes
    /// that come later, and the EOF, are read at epoll's next report.
    func testShortReadsLoseNothing() throws {
        let loop = try EventLoop()
        let (l, port) = listener()
        defer { Glibc.close(l) }
        let ev = EventCounter()
        let s = SocketStream(loop: loop, events: ev, meter: nil)
        s.connect(Endpoint(IPAddress("127.0.0.1")!, port))
        loop.turn(50)
        XCTAssertEqual(ev.connected, 1)
        let peer = accept(l, nil, nil)
        defer { Glibc.close(peer) }
        var buf = [UInt8](repeating: 0, count: 64)
        func send(_ m: [UInt8]) { var m = m; _ = Glibc.send(peer, &m, m.count, 0) }
        for round in 0..<3 {
            send([1, 2, UInt8(round)])
            let before = ev.readable
            loop.turn(20)
            XCTAssertGreaterThan(ev.readable, before, "round \(round)")
            XCTAssertEqual(buf.withUnsafeMutableBytes { s.read(into: $0) }, .data(3))
            XCTAssertEqual(buf[2], UInt8(round))
            // Bytes that come between the short read and the next are there at the next report.
            send([9])
            XCTAssertEqual(buf.withUnsafeMutableBytes { s.read(into: $0) }, round == 0 ? .data(1) : .wouldBlock)
            if round > 0 {
                loop.turn(20)
                XCTAssertEqual(buf.withUnsafeMutableBytes { s.read(into: $0) }, .data(1))
            }
            XCTAssertEqual(buf.withUnsafeMutableBytes { s.read(into: $0) }, .wouldBlock)
        }
        send([5, 6])
        shutdown(peer, Int32(SHUT_WR))
        loop.turn(20)
        XCTAssertEqual(buf.withUnsafeMutableBytes { s.read(into: $0) }, .data(2))
        XCTAssertEqual(buf.withUnsafeMutableBytes { s.read(into: $0) }, .eof, "the FIN was reported: read behind the bytes")
        s.close()
    }

    /// A driver that turns reads off when told of the connect (as the splice does until it
    /// attaches the app's end): a reset that comes meanwhile is reported once reads are wanted.
    func testResetBeforeReadsAreWantedIsReported() throws {
        final class PausingDriver: ByteStreamEvents {
            let counter = EventCounter()
            func streamConnected(_ s: ByteStream) { s.setReadInterest(false); counter.streamConnected(s) }
            func streamFailed(_ s: ByteStream, _ f: FlowFailure) { counter.streamFailed(s, f) }
            func streamReadable(_ s: ByteStream) { counter.streamReadable(s) }
            func streamWritable(_ s: ByteStream) { counter.streamWritable(s) }
        }
        let loop = try EventLoop()
        let (l, port) = listener()
        defer { Glibc.close(l) }
        let ev = PausingDriver()
        let s = SocketStream(loop: loop, events: ev, meter: nil)
        s.connect(Endpoint(IPAddress("127.0.0.1")!, port))
        loop.turn(50)
        XCTAssertEqual(ev.counter.connected, 1)
        let peer = accept(l, nil, nil)
        _ = clinux_set_linger_reset(peer)
        Glibc.close(peer)
        loop.turn(50)
        XCTAssertEqual(ev.counter.readable, 0)
        s.setReadInterest(true)
        loop.turn(50)
        var buf = [UInt8](repeating: 0, count: 16)
        if ev.counter.failed.isEmpty {
            XCTAssertGreaterThan(ev.counter.readable, 0)
            XCTAssertEqual(buf.withUnsafeMutableBytes { s.read(into: $0) }, .failed(FlowFailure(errno: ECONNRESET)))
        } else {
            XCTAssertEqual(ev.counter.failed, [FlowFailure(errno: ECONNRESET)])
        }
        s.close()
    }
}
