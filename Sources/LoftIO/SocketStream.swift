import Glibc
import LoftCore

/// Streams and bytes counted at a kind of socket (an outbound's, say), as they happen.
public final class StreamMeter {
    /// Streams opened, ever.
    public var streams: UInt64 = 0
    /// Streams not yet closed, reset or failed.
    public var live = 0
    /// Bytes written to the sockets (towards their peers) and read from them.
    public var bytesWritten: UInt64 = 0
    public var bytesRead: UInt64 = 0
    public init() {}
}

/// A nonblocking TCP socket as a `ByteStream`: one an outbound dials, or one a listener
/// accepted (a SOCKS5 client). Level-triggered epoll, interest kept to what the driver wants.
///
/// Events epoll reports whatever the interest (error, hang-up) never repeat for nothing: an
/// error while reads are paused is one `streamFailed` (the socket is then closed); a clean
/// hang-up while reads are paused takes the socket out of epoll until reads are wanted again.
///
/// System calls a flow spends here, beyond the data's: a dialled socket is registered for its
/// connect's completion only (one-shot, so the registration is disarmed once that reports and
/// a driver that pauses reads until it attaches the other end costs no `epoll_ctl`), SO_ERROR
/// is asked only when that report is an error or a hang-up, and a read that would only find
/// the socket empty is not made (`drained`): the one after a short read, and the first after
/// a connect whose report had nothing to read.
public final class SocketStream: ByteStream, IOHandler {
    /// The driver. A splice is held unowned(unsafe): it holds this stream while it drives it and
    /// clears this before it lets go (or lets go of it failed, when no event comes any more).
    /// Any other driver weakly: a weak reference gives its target a side table, and then every
    /// retain and release of it takes the slow path, several per event for a splice.
    public var events: ByteStreamEvents? {
        get { splice ?? otherEvents }
        set {
            if let s = newValue as? Splice {
                splice = s
                otherEvents = nil
            } else {
                splice = nil
                otherEvents = newValue
            }
        }
    }
    private unowned(unsafe) var splice: Splice?
    private weak var otherEvents: ByteStreamEvents?
    private let loop: EventLoop
    public private(set) var fd: Int32 = -1
    private var connecting = false
    private var finished = false
    private var failure: FlowFailure?
    private var readInterest = true
    private var wantWrite = false
    private var mask: UInt32 = 0
    private var registered = false
    /// Out of epoll after a hang-up while reads were off (see the type's comment).
    private var parked = false
    private let meter: StreamMeter?
    private var live = false
    /// The last read returned less than it asked for (the receive queue was empty then), and
    /// another would find nothing (see `rereadFindsNothing`); or the connect's report said
    /// nothing was there to read: the next read, while epoll watches for reads, returns
    /// `.wouldBlock` without the system call. Cleared by epoll's next report for this socket
    /// (level-triggered: bytes that came meanwhile, or the FIN, are reported then).
    private var drained = false
    /// epoll's last report said the peer's FIN is in: a short read is followed by one more,
    /// which finds the EOF (so it leaves with the bytes before it).
    private var peerFinished = false
    /// What the read after a short read found last time on this socket: nothing (a request
    /// and answer connection, whose next bytes come with the next report), or bytes or the
    /// EOF (a peer that closes right behind its answer, whose FIN then leaves with it). Only
    /// while it found nothing is that read left out.
    private var rereadFindsNothing = false
    private var rereading = false
    /// The name being resolved before `connect` (an outbound's); cancelled when the stream
    /// ends first.
    public var resolving: ResolveRequest?

    /// A stream that `connect(_:)` (or `failSoon(_:)`) starts.
    public init(loop: EventLoop, events: ByteStreamEvents?, meter: StreamMeter?) {
        self.loop = loop
        self.meter = meter
        self.events = events
        begin()
    }

    /// A connected socket (accepted); this stream owns it from now on and closes it.
    public init(loop: EventLoop, connected fd: Int32, meter: StreamMeter? = nil) {
        self.loop = loop
        self.meter = meter
        self.fd = fd
        begin()
        updateMask()
    }

    private func begin() {
        guard let meter else { return }
        live = true
        meter.streams &+= 1
        meter.live += 1
    }

    private func ended() {
        guard live else { return }
        live = false
        meter?.live -= 1
    }

    deinit { teardown(reset: true) }

    /// Starts a nonblocking connect; `streamConnected` or `streamFailed` follows.
    public func connect(_ endpoint: Endpoint) {
        guard !finished, fd < 0 else { return }
        let s: Int32
        switch Sockets.open(family: Sockets.family(of: endpoint), type: Int32(SOCK_STREAM.rawValue)) {
        case .success(let fd): s = fd
        case .failure(let e): failSoon(FlowFailure(errno: e.code)); return
        }
        Syscall.setNoDelay(s)
        if case .failure(let e) = Syscall.connect(s, to: SocketAddress(endpoint)), e != .inProgress {
            _ = Syscall.close(s)
            failSoon(FlowFailure(errno: e.code))
            return
        }
        fd = s
        connecting = true
        // One-shot: the completion's report disarms the registration, so what the driver wants
        // next (usually nothing until it attaches the other end) costs no epoll_ctl then. Asked
        // with readable too: the report says whether the peer spoke already.
        setMask(Self.connectMask)
    }

    /// The close sends the FIN (its peer's EOF read, nothing of it is unread).
    public var closeSendsEnd: Bool { true }

    private static let connectMask = IOEvents.writable | IOEvents.readable | IOEvents.oneShot

    /// Fails on the next loop turn (never inside the call that opened the stream).
    public func failSoon(_ failure: FlowFailure) {
        guard !finished else { return }
        teardown(reset: false)
        self.failure = failure
        loop.soon { [weak self] in
            guard let self else { return }
            self.events?.streamFailed(self, failure)
        }
    }

    private func setMask(_ m: UInt32) {
        guard fd >= 0, !parked else { return }
        if !registered {
            mask = m
            loop.register(fd, m, self)
            registered = true
        } else if m != mask {
            mask = m
            loop.modify(fd, m)
        }
    }

    private func updateMask() {
        var m: UInt32 = 0
        if readInterest { m |= IOEvents.readable | IOEvents.readHangup }
        if wantWrite { m |= IOEvents.writable }
        setMask(m)
    }

    public func handleIO(_ ev: UInt32) {
        guard fd >= 0 else { return }
        drained = false
        peerFinished = ev & IOEvents.readHangup != 0
        if connecting {
            // The one-shot registration reported: it is disarmed now.
            mask = 0
            // A connect that failed reports an error or a hang-up (with its errno in SO_ERROR);
            // a plain writable report is a connected socket.
            if ev & (IOEvents.error | IOEvents.hangup) != 0 {
                let err = Syscall.socketError(fd)
                if err != 0 {
                    fail(FlowFailure(errno: err))
                    return
                }
            }
            if ev & IOEvents.writable == 0 {
                setMask(Self.connectMask)
                return
            }
            connecting = false
            // Nothing to read when it connected: the first read once epoll watches for reads
            // (a splice reads the remote as it attaches the app's end) needs no recv, and bytes
            // that came meanwhile are reported then.
            drained = ev & IOEvents.readable == 0
            events?.streamConnected(self)
            // Armed for what the driver wants now (it may have turned reads off meanwhile).
            updateMask()
            return
        }
        if ev & IOEvents.writable != 0 && wantWrite {
            wantWrite = false
            updateMask()
            events?.streamWritable(self)
            if fd < 0 { return }
        }
        if readInterest {
            // Data, EOF or an error: read() tells which (bytes before a reset come first).
            if ev & (IOEvents.readable | IOEvents.error | IOEvents.hangup) != 0 { events?.streamReadable(self) }
            return
        }
        if ev & IOEvents.error != 0 {
            // Reads are paused, so nobody would read the error: the stream is over now.
            let err = Syscall.socketError(fd)
            fail(FlowFailure(errno: err != 0 ? err : ECONNRESET))
        } else if ev & IOEvents.hangup != 0 {
            // Both directions are finished and reads are not wanted: out of epoll until they are
            // (what is left to read, and the EOF, stay in the socket).
            if registered { loop.unregister(fd) }
            registered = false
            parked = true
            if wantWrite {
                // Nothing can be written to a socket that hung up.
                fail(.other(EPIPE))
            }
        }
    }

    private func fail(_ f: FlowFailure) {
        teardown(reset: false)
        failure = f
        events?.streamFailed(self, f)
    }

    // MARK: ByteStream

    public func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard fd >= 0 else { return -1 }
        if connecting { return 0 }
        let n: Int
        switch Syscall.writev(fd, segments, Int32(count)) {
        case .success(let k): n = k
        case .failure(let e):
            guard e.wouldBlock else { return -1 }
            wantWrite = true
            updateMask()
            return 0
        }
        meter?.bytesWritten &+= UInt64(n)
        var total = 0
        for i in 0..<count { total += segments[i].iov_len }
        if n < total {
            wantWrite = true
            updateMask()
        }
        return n
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        guard fd >= 0 else { return failure.map { .failed($0) } ?? .eof }
        // Armed for reads: epoll reports whatever comes after the short read.
        if drained && registered && mask & IOEvents.readable != 0 { return .wouldBlock }
        let r = Syscall.recv(fd, buffer.baseAddress!, buffer.count)
        if rereading {
            rereading = false
            if case .failure(let e) = r { rereadFindsNothing = e.wouldBlock } else { rereadFindsNothing = false }
        }
        switch r {
        case .success(0):
            return .eof
        case .success(let n):
            meter?.bytesRead &+= UInt64(n)
            if n < buffer.count && !peerFinished {
                if rereadFindsNothing { drained = true } else { rereading = true }
            }
            return .data(n)
        case .failure(let e):
            return e.wouldBlock ? .wouldBlock : .failed(FlowFailure(errno: e.code))
        }
    }

    public func setReadInterest(_ on: Bool) {
        guard readInterest != on else { return }
        readInterest = on
        guard fd >= 0, !connecting else { return }
        if on && parked {
            // Hung up while paused: what is left (bytes, then EOF) is readable at once.
            parked = false
            loop.soon { [weak self] in
                guard let self, self.fd >= 0, self.readInterest else { return }
                self.events?.streamReadable(self)
            }
            return
        }
        updateMask()
    }

    public func shutdownWrite() {
        if fd >= 0 { _ = Syscall.shutdown(fd, Int32(SHUT_WR)) }
    }

    public func close() { teardown(reset: false) }
    public func reset() { teardown(reset: true) }

    private func teardown(reset: Bool) {
        resolving?.cancel()
        finished = true
        ended()
        guard fd >= 0 else { return }
        // The close takes the socket out of epoll (this stream's fd is its socket's only one).
        if registered { loop.forget(fd) }
        registered = false
        if reset { Syscall.setLingerReset(fd) }
        _ = Syscall.close(fd)
        fd = -1
    }
}
