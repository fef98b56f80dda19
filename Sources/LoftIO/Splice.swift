import Glibc
import LoftCore

/// What a splice tells the input that made it. All calls come on the loop thread.
public protocol SpliceOwner: AnyObject {
    /// The outbound end connected. Finish the input's own handshake (a SYN for lwIP, a SOCKS5
    /// reply, the session's accept), then `attach` the inbound end.
    func spliceConnected(_ splice: Splice)
    /// The outbound end could not connect, or the connect deadline passed before `attach`.
    /// Both ends are gone; the splice is finished.
    func spliceFailed(_ splice: Splice, _ failure: FlowFailure)
    /// After `attach`: both ends are closed or reset; the splice is finished.
    func spliceEnded(_ splice: Splice, _ ending: Splice.Ending)
    /// Bytes moved (either way): the owner's idea of "recently active" for eviction.
    func spliceMoved(_ splice: Splice)
}

extension SpliceOwner {
    public func spliceMoved(_ splice: Splice) {}
}

/// Bytes moved by every splice of one input (or the front), counted as they move.
public final class SpliceMeter {
    /// Inbound → outbound (the app's upload).
    public var bytesUp: UInt64 = 0
    /// Outbound → inbound.
    public var bytesDown: UInt64 = 0
    public init() {}
}

/// The one relay: joins an inbound byte stream (the app's side: an lwIP flow, a SOCKS5
/// client, a front session's stream) to an outbound one (a socket, a holder stream), and moves
/// bytes both ways with
/// - backpressure: a side is read only while the other takes bytes (at most one read's
///   remainder waits here, per direction);
/// - half-close: EOF read from one side is `shutdownWrite` on the other once its bytes are out;
/// - reset: either side breaking resets the other;
/// - deadlines on the loop's timer heap: connect (until `attach`) and idle (no byte either way);
/// - byte counting (per splice and into a shared meter).
/// Nothing else in loft pumps bytes between two streams.
public final class Splice {
    public enum Ending: Equatable, Sendable {
        /// EOF both ways, everything written.
        case closed
        /// One side broke (a reset, an error); the other was reset.
        case reset(inbound: Bool, FlowFailure)
        /// No byte either way for the idle timeout; both were reset.
        case idle
    }

    enum State { case dialing, connected, relaying, finished }

    let loop: EventLoop
    /// Unowned: the owner holds the splice for the splice's whole life.
    public unowned let owner: SpliceOwner
    private let meter: SpliceMeter?
    private let connectTimeoutMs: UInt64
    private let idleTimeoutMs: UInt64
    private var state = State.dialing
    private let inbound: End
    private let outbound: End
    /// The connect deadline until `attach`, then the idle deadline: one timer per splice.
    private var deadline: TimerHandle?
    private var deadlineAt: UInt64 = 0
    private var releaseTimer: TimerHandle?
    private var repumpQueued = false

    public private(set) var bytesUp: UInt64 = 0
    public private(set) var bytesDown: UInt64 = 0
    /// Loop time of the last byte moved (or of `dial`).
    public private(set) var lastActivity: UInt64
    /// Loop time of the last time a side refused bytes (for giving buffers back when calm).
    private var lastBackpressure: UInt64 = 0

    /// Bytes read per call in the copy path. (SOCKS5 through loopback and veth: 64 KiB reads
    /// moved ~4.5-5.5 Gbit/s per stream, 256 KiB ~6.5-9; more gained nothing.)
    public static let chunk = 256 * 1024
    /// Bytes moved per direction per wake-up before yielding to other work.
    static let budget = 1 << 20
    /// A side's remainder buffer is given back after this long without backpressure.
    static let releaseAfterMs: UInt64 = 2_000
    /// The copy buffer: one loop thread, and each read is written out before the next.
    nonisolated(unsafe) static let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)

    public init(loop: EventLoop, owner: SpliceOwner, meter: SpliceMeter? = nil,
                connectTimeoutMs: UInt64, idleTimeoutMs: UInt64 = 0) {
        self.loop = loop
        self.owner = owner
        self.meter = meter
        self.connectTimeoutMs = connectTimeoutMs
        self.idleTimeoutMs = idleTimeoutMs
        lastActivity = loop.now
        inbound = End(inbound: true)
        outbound = End(inbound: false)
        inbound.splice = self
        outbound.splice = self
    }

    deinit {
        // Timer actions hold the splice unowned: none may run after this.
        cancel(&deadline)
        cancel(&releaseTimer)
        inbound.pending.release()
        outbound.pending.release()
    }

    public var isConnected: Bool { state == .connected || state == .relaying }
    public var isRelaying: Bool { state == .relaying }
    public var isFinished: Bool { state == .finished }
    /// Either side has sent its EOF (the flow is closing).
    public var isHalfClosed: Bool { inbound.readEOF || outbound.readEOF }

    // MARK: owner's calls

    /// Opens the outbound end and starts the connect deadline.
    public func dial(_ out: Outbound, to destination: Destination) {
        precondition(state == .dialing && outbound.stream == nil)
        arm(at: loop.now &+ connectTimeoutMs)
        outbound.stream = out.openStream(to: destination, events: outbound)
    }

    /// Joins the inbound end (after `spliceConnected`) and starts moving bytes. `initialUp`:
    /// bytes the input already read from the inbound side (a SOCKS5 client's data behind its
    /// request), sent first.
    public func attach(_ stream: ByteStream, initialUp: UnsafeRawBufferPointer? = nil) {
        guard state == .connected else {
            // Finished meanwhile (a deadline): the inbound end goes too.
            stream.reset()
            return
        }
        state = .relaying
        // The connect deadline's timer stays and becomes the idle deadline's: when it fires it
        // is re-armed from the last activity (or it goes, with no idle timeout).
        if idleTimeoutMs == 0 {
            cancel(&deadline)
        } else if deadlineAt > loop.now &+ idleTimeoutMs {
            cancel(&deadline)
            arm(at: loop.now &+ idleTimeoutMs)
        }
        inbound.stream = stream
        stream.events = inbound
        if let initialUp, initialUp.count > 0 { outbound.pending.append(initialUp.baseAddress!, initialUp.count) }
        stream.setReadInterest(true)
        outbound.stream?.setReadInterest(true)
        run(from: inbound, to: outbound)
        run(from: outbound, to: inbound)
    }

    /// Resets both ends now (eviction, shutdown, the input gave up). No owner callback.
    public func reset() {
        guard state != .finished else { return }
        finish()
        inbound.stream?.reset()
        outbound.stream?.reset()
        drop()
    }

    /// Closes both ends gracefully now (a stop). No owner callback.
    public func close() {
        guard state != .finished else { return }
        finish()
        inbound.stream?.close()
        outbound.stream?.close()
        drop()
    }

    // MARK: events from the ends

    fileprivate func connected(_ end: End) {
        guard !end.inbound, state == .dialing else { return }
        state = .connected
        // Remote bytes wait until the inbound end is attached.
        outbound.stream?.setReadInterest(false)
        outbound.readsPaused = true
        owner.spliceConnected(self)
    }

    fileprivate func failed(_ end: End, _ failure: FlowFailure) {
        switch state {
        case .finished:
            return
        case .dialing, .connected:
            guard !end.inbound else { return }
            finish()
            outbound.stream = nil
            owner.spliceFailed(self, failure)
        case .relaying:
            broke(end, failure)
        }
    }

    fileprivate func readable(_ end: End) {
        run(from: end, to: end === inbound ? outbound : inbound)
    }

    fileprivate func writable(_ end: End) {
        run(from: end === inbound ? outbound : inbound, to: end)
    }

    // MARK: moving bytes

    /// Pumps in progress on this thread. A stream may report an event from inside a write the
    /// splice made on it (a session whose output drained frees another stream's credit, say):
    /// pumping then would reuse the copy buffer under the outer pump, so it waits a turn.
    nonisolated(unsafe) private static var depth = 0

    private func run(from src: End, to dst: End) {
        if Self.depth > 0 {
            repumpSoon()
            return
        }
        Self.depth += 1
        pump(from: src, to: dst)
        Self.depth -= 1
    }

    private func repumpSoon() {
        guard !repumpQueued, state == .relaying else { return }
        repumpQueued = true
        loop.soon { [weak self] in
            guard let self else { return }
            self.repumpQueued = false
            self.run(from: self.inbound, to: self.outbound)
            self.run(from: self.outbound, to: self.inbound)
        }
    }

    private func pump(from src: End, to dst: End) {
        guard state == .relaying, let from = src.stream, let to = dst.stream else { return }
        // What the destination refused earlier goes first.
        if !dst.pending.isEmpty {
            var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: dst.pending.bytes), iov_len: dst.pending.count)
            let n = to.write(&iov, count: 1)
            if n < 0 { broke(dst, .other(EPIPE)); return }
            dst.pending.consume(n)
            if n > 0 { moved(n, up: dst === outbound) }
            if !dst.pending.isEmpty {
                lastBackpressure = loop.now
                pause(src)
                return
            }
            scheduleRelease()
        }
        if src.readEOF {
            passEOF(src, dst)
            return
        }
        var budget = Self.budget
        let scratch = Self.scratch
        while budget > 0 {
            let room = to.writeRoom
            if room <= 0 {
                // The destination calls streamWritable when room comes back.
                pause(src)
                return
            }
            var iov = (iovec(), iovec(), iovec(), iovec(), iovec(), iovec(), iovec(), iovec(),
                       iovec(), iovec(), iovec(), iovec(), iovec(), iovec(), iovec(), iovec())
            var count = 0
            let peeked: StreamReadResult? = withUnsafeMutableBytes(of: &iov) { raw in
                from.peek(raw.baseAddress!.assumingMemoryBound(to: iovec.self), max: 16, count: &count)
            }
            if let peeked {
                // Zero-copy: the source's own memory goes straight to the destination.
                switch peeked {
                case .data(let n) where n > 0:
                    let w = withUnsafeMutableBytes(of: &iov) { raw in
                        to.write(raw.baseAddress!.assumingMemoryBound(to: iovec.self), count: count)
                    }
                    if w < 0 { broke(dst, .other(EPIPE)); return }
                    if w > 0 {
                        from.consume(w)
                        moved(w, up: src === inbound)
                        if state != .relaying { return }
                    }
                    if w < n {
                        lastBackpressure = loop.now
                        pause(src)
                        return
                    }
                    budget -= n
                    continue
                default:
                    noBytes(peeked, from: src, to: dst)
                    return
                }
            }
            let want = min(room, scratch.count, budget)
            let r = from.read(into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<want]))
            switch r {
            case .data(let n) where n > 0:
                var seg = iovec(iov_base: scratch.baseAddress, iov_len: n)
                let w = to.write(&seg, count: 1)
                if w < 0 { broke(dst, .other(EPIPE)); return }
                // A remainder is counted when it is written.
                if w > 0 { moved(w, up: src === inbound) }
                if state != .relaying { return }
                if w < n {
                    lastBackpressure = loop.now
                    dst.pending.append(scratch.baseAddress! + w, n - w)
                    pause(src)
                    return
                }
                budget -= n
                // Read again even after a short read: an EOF right behind the last bytes then
                // leaves with them (an app that closes once it has its answer would otherwise
                // close first and keep the TIME_WAIT).
            default:
                noBytes(r, from: src, to: dst)
                return
            }
        }
        // Budget spent with bytes still waiting: carry on after the other work of this turn
        // (a source that does not wake the loop again by itself would otherwise stall).
        repumpSoon()
    }

    /// A read that brought no bytes: wait for the source's next `streamReadable`, pass its EOF
    /// on, or reset both for its failure. (An empty `.data` waits too: never looped on.)
    private func noBytes(_ r: StreamReadResult, from src: End, to dst: End) {
        switch r {
        case .eof:
            src.readEOF = true
            pause(src)
            passEOF(src, dst)
        case .failed(let f):
            broke(src, f)
        case .data, .wouldBlock:
            resume(src)
        }
    }

    private func moved(_ n: Int, up: Bool) {
        lastActivity = loop.now
        if up {
            bytesUp &+= UInt64(n)
            meter?.bytesUp &+= UInt64(n)
        } else {
            bytesDown &+= UInt64(n)
            meter?.bytesDown &+= UInt64(n)
        }
        owner.spliceMoved(self)
    }

    private func pause(_ end: End) {
        guard !end.readsPaused else { return }
        end.readsPaused = true
        end.stream?.setReadInterest(false)
    }

    private func resume(_ end: End) {
        guard end.readsPaused, !end.readEOF else { return }
        end.readsPaused = false
        end.stream?.setReadInterest(true)
    }

    /// `src` reached EOF and `dst` holds nothing more from it: half-close `dst`.
    private func passEOF(_ src: End, _ dst: End) {
        if !dst.shut {
            dst.shut = true
            dst.stream?.shutdownWrite()
        }
        finishIfDone()
    }

    private func finishIfDone() {
        guard state == .relaying, inbound.readEOF, outbound.readEOF, inbound.shut, outbound.shut,
              inbound.pending.isEmpty, outbound.pending.isEmpty else { return }
        finish()
        inbound.stream?.close()
        outbound.stream?.close()
        drop()
        owner.spliceEnded(self, .closed)
    }

    /// `end` broke (read or write failed, or it reported a failure): reset both.
    private func broke(_ end: End, _ failure: FlowFailure) {
        guard state != .finished else { return }
        finish()
        inbound.stream?.reset()
        outbound.stream?.reset()
        drop()
        owner.spliceEnded(self, .reset(inbound: end.inbound, failure))
    }

    private func finish() {
        state = .finished
        cancel(&deadline)
        cancel(&releaseTimer)
    }

    private func drop() {
        inbound.stream?.events = nil
        outbound.stream?.events = nil
        inbound.stream = nil
        outbound.stream = nil
        inbound.pending.release()
        outbound.pending.release()
    }

    // MARK: deadlines

    private func cancel(_ t: inout TimerHandle?) {
        if let h = t { loop.cancel(h) }
        t = nil
    }

    private func arm(at t: UInt64) {
        deadlineAt = t
        deadline = loop.schedule(at: t) { [unowned self] in self.deadlinePassed() }
    }

    private func deadlinePassed() {
        deadline = nil
        switch state {
        case .dialing, .connected:
            finish()
            outbound.stream?.reset()
            drop()
            owner.spliceFailed(self, .timedOut)
        case .relaying:
            // Idle only if nothing moved for the whole timeout; otherwise wait for the rest.
            if loop.now &- lastActivity < idleTimeoutMs {
                arm(at: lastActivity &+ idleTimeoutMs)
                return
            }
            finish()
            inbound.stream?.reset()
            outbound.stream?.reset()
            drop()
            owner.spliceEnded(self, .idle)
        case .finished:
            return
        }
    }

    /// Remainder buffers are kept while backpressure recurs (no allocation per refusal) and
    /// given back once the splice has been calm for a while, so quiet flows hold none.
    private func scheduleRelease() {
        guard releaseTimer == nil, state == .relaying else { return }
        releaseTimer = loop.schedule(after: Self.releaseAfterMs) { [unowned self] in self.releaseIfCalm() }
    }

    private func releaseIfCalm() {
        releaseTimer = nil
        guard state == .relaying else { return }
        if loop.now &- lastBackpressure < Self.releaseAfterMs {
            scheduleRelease()
            return
        }
        if inbound.pending.isEmpty { inbound.pending.release() }
        if outbound.pending.isEmpty { outbound.pending.release() }
    }
}

/// One side of a splice: receives its stream's events, and keeps the bytes read from the
/// other side that this stream has not taken yet.
final class End: ByteStreamEvents {
    /// Unowned (the splice owns its ends); a callback holds the splice for its duration even
    /// if its owner lets go of it.
    unowned var splice: Splice?
    var stream: ByteStream?
    var pending = SpliceBuffer()
    // The flags last, together (one per flow per side: no padding between them).
    let inbound: Bool
    /// EOF was read from this stream.
    var readEOF = false
    /// shutdownWrite was sent to this stream.
    var shut = false
    /// Read interest is off (the other side is full, or EOF was read).
    var readsPaused = false

    init(inbound: Bool) { self.inbound = inbound }

    func streamConnected() { splice?.connected(self) }
    func streamFailed(_ failure: FlowFailure) { splice?.failed(self, failure) }
    func streamReadable() { splice?.readable(self) }
    func streamWritable() { splice?.writable(self) }
}

/// A remainder: bytes a stream refused, sent before anything else is read. Allocated on first
/// need (one chunk), reused while backpressure recurs.
struct SpliceBuffer {
    private(set) var base: UnsafeMutableRawPointer?
    private(set) var start = 0
    private(set) var end = 0

    var isEmpty: Bool { start == end }
    var count: Int { end - start }
    var bytes: UnsafeRawPointer? { base.map { UnsafeRawPointer($0 + start) } }

    /// Keeps `n` bytes (the splice never holds more than one chunk per side).
    mutating func append(_ p: UnsafeRawPointer, _ n: Int) {
        guard n > 0 else { return }
        if base == nil { base = .allocate(byteCount: Splice.chunk, alignment: 16) }
        if start > 0 {
            if start < end { memmove(base!, base! + start, end - start) }
            end -= start
            start = 0
        }
        let take = min(n, Splice.chunk - end)
        (base! + end).copyMemory(from: p, byteCount: take)
        end += take
    }

    mutating func consume(_ n: Int) {
        start += n
        if start >= end { start = 0; end = 0 }
    }

    mutating func release() {
        base?.deallocate()
        base = nil
        start = 0
        end = 0
    }
}
