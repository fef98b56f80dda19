import CLinux
import Glibc
import LoftCore
@testable import LoftIO
import LoftTestSupport
import XCTest

/// A byte stream in memory whose every move the test controls: bytes to read (`feed`), EOF
/// (`finishInput`), room for writes (`capacity`, `drain`), a failure (`fail`).
final class MemoryStream: ByteStream {
    weak var events: ByteStreamEvents?
    var inbox: [UInt8] = []
    var inputEOF = false
    var failure: FlowFailure?
    /// Bytes write() still takes (Int.max: everything).
    var capacity = Int.max
    var written: [UInt8] = []
    var readInterest = true
    var reads = 0
    var shut = false
    var closed = false
    var resets = 0
    /// Called inside write(), after taking bytes (to model a stream that reports events from
    /// inside a write).
    var onWrite: (() -> Void)?
    /// Offer reads as iovecs over `inbox` (an end that holds its bytes, as lwIP's does).
    var zeroCopy = false

    func feed(_ bytes: [UInt8]) {
        inbox += bytes
        if readInterest { events?.streamReadable(self) }
    }

    func finishInput() {
        inputEOF = true
        if readInterest { events?.streamReadable(self) }
    }

    func drain(_ n: Int) {
        capacity = capacity == Int.max ? Int.max : capacity + n
        events?.streamWritable(self)
    }

    func fail(_ f: FlowFailure) {
        failure = f
        events?.streamFailed(self, f)
    }

    func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        if failure != nil || closed || resets > 0 { return -1 }
        var total = 0
        for i in 0..<count {
            let take = min(segments[i].iov_len, capacity - total)
            if take <= 0 { break }
            written += UnsafeRawBufferPointer(start: segments[i].iov_base, count: take)
            total += take
        }
        if capacity != Int.max { capacity -= total }
        onWrite?()
        return total
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        reads += 1
        if let failure { return .failed(failure) }
        if inbox.isEmpty { return inputEOF ? .eof : .wouldBlock }
        let n = min(buffer.count, inbox.count)
        inbox.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: n) }
        inbox.removeFirst(n)
        return .data(n)
    }

    private var peeked: UnsafeMutableRawBufferPointer?

    func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        guard zeroCopy else { return nil }
        reads += 1
        if let failure { return .failed(failure) }
        if inbox.isEmpty { return inputEOF ? .eof : .wouldBlock }
        // Two iovecs over a copy the stream owns until consume.
        peeked?.deallocate()
        let p = UnsafeMutableRawBufferPointer.allocate(byteCount: inbox.count, alignment: 1)
        inbox.withUnsafeBytes { p.copyMemory(from: $0) }
        peeked = p
        let half = inbox.count / 2
        iov[0] = iovec(iov_base: p.baseAddress, iov_len: half)
        iov[1] = iovec(iov_base: p.baseAddress! + half, iov_len: inbox.count - half)
        count = half > 0 ? 2 : 1
        if half == 0 { iov[0] = iovec(iov_base: p.baseAddress, iov_len: inbox.count) }
        return .data(inbox.count)
    }

    func consume(_ n: Int) { inbox.removeFirst(n) }

    /// Take writes in place (`writeSpace`/`commitWrite`), in pieces of at most `piece` bytes
    /// (a ring's wrap), as a QUIC stream's send ring does.
    var inPlace = false
    var piece = 3_000
    var commits = 0
    private let space = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 1)

    func writeSpace(max: Int) -> UnsafeMutableRawBufferPointer? {
        guard inPlace else { return nil }
        let n = min(max, capacity, piece, space.count)
        return UnsafeMutableRawBufferPointer(rebasing: space[0..<n])
    }

    func commitWrite(_ n: Int) {
        written += UnsafeRawBufferPointer(rebasing: space[0..<n])
        if capacity != Int.max { capacity -= n }
        commits += 1
    }

    func setReadInterest(_ on: Bool) { readInterest = on }
    func shutdownWrite() { shut = true }
    func close() { closed = true }
    func reset() { resets += 1 }

    deinit {
        peeked?.deallocate()
        space.deallocate()
    }
}

final class Owner: SpliceOwner {
    var connected = 0
    var failed: [FlowFailure] = []
    var ended: [Splice.Ending] = []
    var moved = 0
    var attachOnConnect: MemoryStream?
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
    var out: FakeOutbound<MemoryStream>!
    var app: MemoryStream!

    override func setUpWithError() throws {
        loop = try EventLoop()
        owner = Owner()
        out = FakeOutbound(name: "memory", type: "memory") { _, events in
            let s = MemoryStream()
            s.events = events
            return s
        }
        app = MemoryStream()
        owner.attachOnConnect = app
    }

    /// A splice dialled and connected: `app` inbound, the returned stream outbound.
    func connectedSplice(idleMs: UInt64 = 0, meter: SpliceMeter? = nil) -> (Splice, MemoryStream) {
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
        remote.inbox = bytes(10)
        let early: [UInt8] = [1, 2, 3]
        early.withUnsafeBytes { s.attach(app, initialUp: $0) }
        XCTAssertTrue(app.written == bytes(10), "\(app.written.count) bytes written")
        XCTAssertEqual(remote.written, [1, 2, 3], "bytes read before attach go first")
    }

    func testBackpressureHoldsAtMostOneReadAndResumes() {
        let (_, remote) = connectedSplice()
        remote.capacity = 1000
        let data = bytes(3 * Splice.chunk)
        app.feed(data)
        XCTAssertFalse(app.readInterest, "a full destination pauses reads from the source")
        XCTAssertEqual(remote.written.count, 1000)
        XCTAssertLessThanOrEqual(data.count - app.inbox.count, Splice.chunk, "at most one read waits in the splice")
        let readsWhilePaused = app.reads
        for _ in 0..<200 where remote.written.count < data.count { remote.drain(50_000) }
        XCTAssertTrue(remote.written == data, "\(remote.written.count) bytes written")
        XCTAssertTrue(app.readInterest)
        XCTAssertGreaterThan(app.reads, readsWhilePaused)
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
        remote.inbox = data
        app.capacity = 1000
        s.attach(app)
        XCTAssertEqual(app.written.count, 1000)
        XCTAssertFalse(remote.readInterest, "a full app pauses reads from the remote")
        let readsWhilePaused = remote.reads
        for _ in 0..<200 where app.written.count < data.count { app.drain(50_000) }
        XCTAssertTrue(app.written == data, "\(app.written.count) bytes written")
        XCTAssertTrue(remote.readInterest)
        XCTAssertGreaterThan(remote.reads, readsWhilePaused)
    }

    func testZeroCopySourceIsConsumedOnlyAsWritten() {
        let (_, remote) = connectedSplice()
        app.zeroCopy = true
        remote.capacity = 10_000
        let data = bytes(50_000)
        app.feed(data)
        XCTAssertEqual(app.inbox.count, 40_000, "only what the destination took is consumed")
        XCTAssertFalse(app.readInterest)
        remote.drain(1_000_000)
        XCTAssertTrue(remote.written == data, "\(remote.written.count) bytes written")
    }

    /// A destination that takes writes in place: the source reads straight into it, only
    /// what it has room for (nothing waits in the splice), in its pieces, and resumes.
    func testInPlaceDestinationIsReadIntoDirectly() {
        let (s, remote) = connectedSplice()
        remote.inPlace = true
        remote.capacity = 10_000
        let data = bytes(50_000)
        app.feed(data)
        XCTAssertEqual(remote.written.count, 10_000)
        XCTAssertEqual(app.inbox.count, 40_000, "only what the destination had room for was read")
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
        XCTAssertEqual(app.resets + remote.resets, 0)
        XCTAssertTrue(s.isFinished)
    }

    func testEOFWaitsForPendingBytes() {
        let (_, remote) = connectedSplice()
        remote.capacity = 100
        app.feed(bytes(1000))
        app.finishInput()
        XCTAssertFalse(remote.shut, "no half-close while bytes wait")
        remote.drain(10_000)
        XCTAssertTrue(remote.written == bytes(1000), "\(remote.written.count) bytes written")
        XCTAssertTrue(remote.shut)
    }

    func testResetWhilePausedResetsTheOtherSideOnce() {
        let (_, remote) = connectedSplice()
        app.capacity = 0
        remote.feed(bytes(Splice.chunk))
        XCTAssertFalse(remote.readInterest)
        let reads = remote.reads
        remote.fail(.other(ECONNRESET))
        XCTAssertEqual(app.resets, 1)
        XCTAssertEqual(owner.ended, [.reset(inbound: false, .other(ECONNRESET))])
        // Nothing more happens, however often the failed end reports.
        remote.events?.streamReadable(remote)
        remote.events?.streamFailed(remote, .other(ECONNRESET))
        XCTAssertEqual(remote.reads, reads)
        XCTAssertEqual(owner.ended.count, 1)
    }

    func testReadFailureAndBrokenWrite() {
        let (_, remote) = connectedSplice()
        remote.failure = .other(ECONNRESET)
        remote.events?.streamReadable(remote)
        XCTAssertEqual(app.resets, 1)
        XCTAssertEqual(owner.ended, [.reset(inbound: false, .other(ECONNRESET))])

        let owner2 = Owner()
        let app2 = MemoryStream()
        owner2.attachOnConnect = app2
        let s2 = Splice(loop: loop, owner: owner2, connectTimeoutMs: 10_000)
        owner2.splices.append(s2)
        s2.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        let remote2 = out.streams[1]
        remote2.events?.streamConnected(remote2)
        remote2.closed = true  // writes now return -1
        app2.feed(bytes(10))
        XCTAssertEqual(remote2.resets, 1)
        XCTAssertEqual(app2.resets, 1)
        XCTAssertEqual(owner2.ended.count, 1)
    }

    func testConnectFailureAndDeadline() {
        let s = Splice(loop: loop, owner: owner, connectTimeoutMs: 10_000)
        s.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        out.streams[0].fail(.refused)
        XCTAssertEqual(owner.failed, [.refused])
        XCTAssertTrue(s.isFinished)

        let owner2 = Owner()
        let s2 = Splice(loop: loop, owner: owner2, connectTimeoutMs: 30)
        owner2.splices.append(s2)
        s2.dial(out, to: .ip(Endpoint("198.18.1.2:80")!))
        let t0 = monotonicMilliseconds()
        loop.turn(100)
        XCTAssertEqual(owner2.failed, [.timedOut])
        XCTAssertEqual(out.streams[1].resets, 1)
        XCTAssertGreaterThanOrEqual(monotonicMilliseconds() - t0, 30)
    }

    func testIdleDeadlineFollowsActivity() {
        let (_, remote) = connectedSplice(idleMs: 60)
        loop.turn(40)
        app.feed(bytes(10))  // activity pushes the deadline out
        loop.turn(40)
        XCTAssertTrue(owner.ended.isEmpty, "active within the idle timeout")
        loop.turn(80)
        XCTAssertEqual(owner.ended, [.idle])
        XCTAssertEqual(app.resets, 1)
        XCTAssertEqual(remote.resets, 1)
    }

    func testEventsFromInsideAWriteWaitATurn() {
        let (_, remote) = connectedSplice()
        // The remote reports "writable" from inside every write, and has bytes of its own.
        remote.onWrite = { [unowned remote] in remote.events?.streamWritable(remote); remote.events?.streamReadable(remote) }
        remote.inbox = bytes(300_000, seed: 5)
        app.feed(bytes(600_000))
        loop.turn(0)
        loop.turn(0)
        XCTAssertTrue(remote.written == bytes(600_000), "\(remote.written.count) bytes written")
        XCTAssertTrue(app.written == bytes(300_000, seed: 5), "\(app.written.count) bytes written")
    }

    func testOwnerResetAndCloseCallNoOwner() {
        let (s, remote) = connectedSplice()
        s.reset()
        XCTAssertEqual(app.resets, 1)
        XCTAssertEqual(remote.resets, 1)
        XCTAssertTrue(owner.ended.isEmpty)
        s.reset()
        XCTAssertEqual(app.resets, 1)
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
}
