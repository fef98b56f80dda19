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
    /// Bytes moved (either way): the owner's idea of "recently active" for eviction. Told at
    /// the first bytes, then at most once per loop millisecond (`lastActivity` changed): bytes
    /// moved again in the same millisecond leave the splice as recently active as it was.
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
public final class Splice: ByteStreamEvents {
    public enum Ending: Equatable, Sendable {
        /// EOF both ways, everything written.
        case closed
        /// One side broke (a reset, an error); the other was reset.
        case reset(inbound: Bool, FlowFailure)
        /// No byte either way for the idle timeout; both were reset.
        case idle
    }

    enum State: UInt8 { case dialing, connected, relaying, finished }

    /// Which end: the app's (inbound) or the remote's (outbound).
    enum Side {
        case inbound, outbound
        var other: Side { self == .inbound ? .outbound : .inbound }
    }

    let loop: EventLoop
    /// Unowned: the owner holds the splice for the splice's whole life.
    public unowned let owner: SpliceOwner
    private let meter: SpliceMeter?
    private let connectTimeoutMs: UInt32
    private let idleTimeoutMs: UInt32
    private var state = State.dialing
    /// Per side: EOF was read from its stream, shutdownWrite was sent to it, its read interest
    /// is off (the other side is full, or EOF was read). One byte for both sides.
    private var flags: UInt8 = 0
    private var repumpQueued = false
    /// The owner was told of bytes moved (`spliceMoved`) at `lastActivity`.
    private var movedTold = false
    // The ends, in the splice itself (one allocation per relay): each side's stream and the
    // bytes read from the other side that the stream has not taken yet.
    private var inStream: ByteStream?
    private var outStream: ByteStream?
    private var inPending = SpliceBuffer()
    private var outPending = SpliceBuffer()
    /// The connect deadline until `attach`, then the idle deadline: one timer per splice.
    private var deadline = TimerHandle.none
    private var releaseTimer = TimerHandle.none

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
    /// The iovecs a zero-copy source describes its bytes in: likewise one for the thread (no
    /// pump runs inside another, `depth`), not sixteen zeroed on the stack per read.
    nonisolated(unsafe) static let peekVectors = UnsafeMutablePointer<iovec>.allocate(capacity: 16)

    public init(loop: EventLoop, owner: SpliceOwner, meter: SpliceMeter? = nil,
                connectTimeoutMs: UInt64, idleTimeoutMs: UInt64 = 0) {
        self.loop = loop
        self.owner = owner
        self.meter = meter
        self.connectTimeoutMs = UInt32(clamping: connectTimeoutMs)
        self.idleTimeoutMs = UInt32(clamping: idleTimeoutMs)
        lastActivity = loop.now
    }

    deinit {
        // Timer actions hold the splice unowned: none may run after this; nor may the ends
        // report to it.
        cancel(&deadline)
        cancel(&releaseTimer)
        inStream?.events = nil
        outStream?.events = nil
        inPending.release()
        outPending.release()
    }

    /// The end joined to `stream` (nil: `stream` is not one of this splice's ends, or the
    /// other is not attached yet). An end that counts what the flow holds asks for it.
    public func otherEnd(of stream: ByteStream) -> ByteStream? {
        if stream === outStream { return inStream }
        if stream === inStream { return outStream }
        return nil
    }

    public var isConnected: Bool { state == .connected || state == .relaying }
    public var isRelaying: Bool { state == .relaying }
    public var isFinished: Bool { state == .finished }
    /// Either side has sent its EOF (the flow is closing).
    public var isHalfClosed: Bool { has(.readEOF, .inbound) || has(.readEOF, .outbound) }

    // MARK: the ends

    private enum Flag: UInt8 { case readEOF = 1, shut = 2, readsPaused = 4 }

    private func has(_ f: Flag, _ side: Side) -> Bool {
        flags & (side == .inbound ? f.rawValue : f.rawValue << 4) != 0
    }

    private func set(_ f: Flag, _ side: Side, _ on: Bool = true) {
        let bit = side == .inbound ? f.rawValue : f.rawValue << 4
        if on { flags |= bit } else { flags &= ~bit }
    }

    private func stream(_ side: Side) -> ByteStream? { side == .inbound ? inStream : outStream }

    /// The bytes waiting for `side`'s stream.
    private func pending(_ side: Side) -> SpliceBuffer { side == .inbound ? inPending : outPending }

    private func withPending<R>(_ side: Side, _ body: (inout SpliceBuffer) -> R) -> R {
        side == .inbound ? body(&inPending) : body(&outPending)
    }

    /// The side `s` is, for an event it sent (an end this splice does not hold any more sends
    /// none: `drop` takes the splice out of both).
    private func side(of s: ByteStream) -> Side { s === inStream ? .inbound : .outbound }

    // MARK: owner's calls

    /// Opens the outbound end and starts the connect deadline.
    public func dial(_ out: Outbound, to destination: Destination) {
        precondition(state == .dialing && outStream == nil)
        arm(at: loop.now &+ UInt64(connectTimeoutMs))
        outStream = out.openStream(to: destination, events: self)
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
        cancel(&deadline)
        if idleTimeoutMs > 0 { arm(at: lastActivity &+ UInt64(idleTimeoutMs)) }
        inStream = stream
        stream.events = self
        if let initialUp, initialUp.count > 0 { outPending.append(initialUp.baseAddress!, initialUp.count) }
        stream.setReadInterest(true)
        // The remote's reads were paused since it connected: resumed through the flag, so a
        // later pause (the app full already) turns them off again.
        resume(.outbound)
        run(from: .inbound, to: .outbound)
        run(from: .outbound, to: .inbound)
    }

    /// Resets both ends now (eviction, shutdown, the input gave up). No owner callback.
    public func reset() {
        guard state != .finished else { return }
        finish()
        inStream?.reset()
        outStream?.reset()
        drop()
    }

    /// Closes both ends gracefully now (a stop). No owner callback.
    public func close() {
        guard state != .finished else { return }
        finish()
        inStream?.close()
        outStream?.close()
        drop()
    }

    // MARK: events from the ends

    public func streamConnected(_ stream: ByteStream) {
        guard side(of: stream) == .outbound, state == .dialing else { return }
        state = .connected
        // Remote bytes wait until the inbound end is attached.
        outStream?.setReadInterest(false)
        set(.readsPaused, .outbound)
        owner.spliceConnected(self)
    }

    public func streamFailed(_ stream: ByteStream, _ failure: FlowFailure) {
        let side = side(of: stream)
        switch state {
        case .finished:
            return
        case .dialing, .connected:
            guard side == .outbound else { return }
            finish()
            outStream = nil
            owner.spliceFailed(self, failure)
        case .relaying:
            broke(side, failure)
        }
    }

    public func streamReadable(_ stream: ByteStream) {
        let side = side(of: stream)
        run(from: side, to: side.other)
    }

    public func streamWritable(_ stream: ByteStream) {
        let side = side(of: stream)
        run(from: side.other, to: side)
    }

    // MARK: moving bytes

    /// Pumps in progress on this thread. A stream may report an event from inside a write the
    /// splice made on it (a session whose output drained frees another stream's credit, say):
    /// pumping then would reuse the copy buffer under the outer pump, so it waits a turn.
    nonisolated(unsafe) private static var depth = 0

    private func run(from src: Side, to dst: Side) {
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
            self.run(from: .inbound, to: .outbound)
            self.run(from: .outbound, to: .inbound)
        }
    }

    private func pump(from src: Side, to dst: Side) {
        guard state == .relaying, let from = stream(src), let to = stream(dst) else { return }
        // What the destination refused earlier goes first.
        let waiting = pending(dst)
        if !waiting.isEmpty {
            var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: waiting.bytes), iov_len: waiting.count)
            let n = to.write(&iov, count: 1)
            if n < 0 { broke(dst, .other(EPIPE)); return }
            let left = withPending(dst) { $0.consume(n); return $0.count }
            if n > 0 { moved(n, up: dst == .outbound) }
            if left > 0 {
                lastBackpressure = loop.now
                pause(src)
                return
            }
            scheduleRelease()
        }
        if has(.readEOF, src) {
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
            let iov = Self.peekVectors
            var count = 0
            if let peeked = from.peek(iov, max: 16, count: &count) {
                // Zero-copy: the source's own memory goes straight to the destination.
                switch peeked {
                case .data(let n) where n > 0:
                    let w = to.write(iov, count: count)
                    if w < 0 { broke(dst, .other(EPIPE)); return }
                    if w > 0 {
                        from.consume(w)
                        moved(w, up: src == .inbound)
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
            if let space = to.writeSpace(max: want) {
                // In place: the source reads straight into the destination's own buffer (a
                // socket into a QUIC stream's send ring), no copy through the splice's.
                guard space.count > 0 else {
                    lastBackpressure = loop.now
                    pause(src)
                    return
                }
                let r = from.read(into: space)
                guard case .data(let n) = r, n > 0 else {
                    noBytes(r, from: src, to: dst)
                    return
                }
                to.commitWrite(n)
                moved(n, up: src == .inbound)
                if state != .relaying { return }
                budget -= n
                continue
            }
            let r = from.read(into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<want]))
            switch r {
            case .data(let n) where n > 0:
                var seg = iovec(iov_base: scratch.baseAddress, iov_len: n)
                let w = to.write(&seg, count: 1)
                if w < 0 { broke(dst, .other(EPIPE)); return }
                // A remainder is counted when it is written.
                if w > 0 { moved(w, up: src == .inbound) }
                if state != .relaying { return }
                if w < n {
                    lastBackpressure = loop.now
                    withPending(dst) { $0.append(scratch.baseAddress! + w, n - w) }
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
    private func noBytes(_ r: StreamReadResult, from src: Side, to dst: Side) {
        switch r {
        case .eof:
            set(.readEOF, src)
            pause(src)
            passEOF(src, dst)
        case .failed(let f):
            broke(src, f)
        case .data, .wouldBlock:
            resume(src)
        }
    }

    private func moved(_ n: Int, up: Bool) {
        if up {
            bytesUp &+= UInt64(n)
            meter?.bytesUp &+= UInt64(n)
        } else {
            bytesDown &+= UInt64(n)
            meter?.bytesDown &+= UInt64(n)
        }
        let now = loop.now
        guard now != lastActivity || !movedTold else { return }
        lastActivity = now
        movedTold = true
        owner.spliceMoved(self)
    }

    private func pause(_ side: Side) {
        guard !has(.readsPaused, side) else { return }
        set(.readsPaused, side)
        stream(side)?.setReadInterest(false)
    }

    private func resume(_ side: Side) {
        guard has(.readsPaused, side), !has(.readEOF, side) else { return }
        set(.readsPaused, side, false)
        stream(side)?.setReadInterest(true)
    }

    /// `src` reached EOF and `dst` holds nothing more from it: half-close `dst`.
    private func passEOF(_ src: Side, _ dst: Side) {
        if !has(.shut, dst) {
            set(.shut, dst)
            // When that finishes the relay, the stream is closed at once (finishIfDone); one
            // whose close sends its end itself (a socket's FIN) needs no half-close before.
            if let s = stream(dst), !(isDone && s.closeSendsEnd) { s.shutdownWrite() }
        }
        finishIfDone()
    }

    /// Both sides: EOF read, shut, nothing waiting.
    private var isDone: Bool { state == .relaying && flags & 0x33 == 0x33 && inPending.isEmpty && outPending.isEmpty }

    private func finishIfDone() {
        guard isDone else { return }
        finish()
        inStream?.close()
        outStream?.close()
        drop()
        owner.spliceEnded(self, .closed)
    }

    /// `side` broke (read or write failed, or it reported a failure): reset both.
    private func broke(_ side: Side, _ failure: FlowFailure) {
        guard state != .finished else { return }
        finish()
        inStream?.reset()
        outStream?.reset()
        drop()
        owner.spliceEnded(self, .reset(inbound: side == .inbound, failure))
    }

    private func finish() {
        state = .finished
        cancel(&deadline)
        cancel(&releaseTimer)
    }

    /// Lets go of both ends, clearing their events first: a SocketStream holds its splice
    /// unowned(unsafe) while that is set.
    private func drop() {
        inStream?.events = nil
        outStream?.events = nil
        inStream = nil
        outStream = nil
        inPending.release()
        outPending.release()
    }

    // MARK: deadlines

    private func cancel(_ t: inout TimerHandle) {
        if t != .none { loop.cancel(t) }
        t = .none
    }

    private func arm(at t: UInt64) {
        deadline = loop.schedule(at: t) { [unowned(unsafe) self] in self.deadlinePassed() }
    }

    private func deadlinePassed() {
        deadline = .none
        switch state {
        case .dialing, .connected:
            finish()
            outStream?.reset()
            drop()
            owner.spliceFailed(self, .timedOut)
        case .relaying:
            // Idle only if nothing moved for the whole timeout; otherwise wait for the rest.
            let idle = UInt64(idleTimeoutMs)
            if loop.now &- lastActivity < idle {
                arm(at: lastActivity &+ idle)
                return
            }
            finish()
            inStream?.reset()
            outStream?.reset()
            drop()
            owner.spliceEnded(self, .idle)
        case .finished:
            return
        }
    }

    /// Remainder buffers are kept while backpressure recurs (no allocation per refusal) and
    /// given back once the splice has been calm for a while, so quiet flows hold none.
    private func scheduleRelease() {
        guard releaseTimer == .none, state == .relaying else { return }
        releaseTimer = loop.schedule(after: Self.releaseAfterMs) { [unowned(unsafe) self] in self.releaseIfCalm() }
    }

    private func releaseIfCalm() {
        releaseTimer = .none
        guard state == .relaying else { return }
        if loop.now &- lastBackpressure < Self.releaseAfterMs {
            scheduleRelease()
            return
        }
        if inPending.isEmpty { inPending.release() }
        if outPending.isEmpty { outPending.release() }
    }
}

/// A remainder: bytes a stream refused, sent before anything else is read. Allocated on first
/// need (one chunk), reused while backpressure recurs.
struct SpliceBuffer {
    private(set) var base: UnsafeMutableRawPointer?
    private var first: UInt32 = 0
    private var last: UInt32 = 0
    private(set) var start: Int {
        get { Int(first) }
        set { first = UInt32(newValue) }
    }
    private(set) var end: Int {
        get { Int(last) }
        set { last = UInt32(newValue) }
    }

    var isEmpty: Bool { first == last }
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
