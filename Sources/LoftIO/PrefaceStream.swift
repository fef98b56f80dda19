import Glibc
import LoftCore

/// What a preface end waits on before it has its inner stream (sstp's lookup of a name over
/// its link): cancelled when the end is closed first.
public protocol PrefaceWait: AnyObject {
    func cancel()
}

/// How the wait for the answer ended: the answer (the codec's), or the inner stream ended
/// before all of it (`ECONNRESET` for an EOF, which the end's `cutByEOF` tells apart, else the
/// read's failure).
public enum PrefaceOutcome<Answer> {
    case answered(Answer)
    case cut(FlowFailure)
}

/// What a preface end that reads its answer in line (`PrefaceInLine`, VLESS) tells its owner
/// beside its events: its connect, its failures and its end, never a chunk of bytes. Each call
/// comes before the events hear of it.
public protocol PrefaceOwner: AnyObject {
    /// The inner stream connected.
    func prefaceConnected()
    /// The inner stream failed (its events' `streamFailed`).
    func prefaceFailed()
    /// A read after the answer failed.
    func prefaceReadFailed()
    /// Reads are stopped (`pauseReads`) and the caller reads again (its app took bytes): the
    /// owner asks its read budget again.
    func prefaceRecheck()
    /// The end's user closed it (`reset` false) or reset it; `connected`: the inner stream had
    /// connected; `failed`: the end had failed already (a failure, a refused answer).
    func prefaceEnded(reset: Bool, connected: Bool, failed: Bool)
}

/// How an end says connected before its answer (VLESS's TCP flow): it says connected as soon
/// as its inner stream is, holds its preamble for the first write (both leave in one write;
/// alone after `preambleWaitMs` on the loop's timer heap, or when the end is shut), reads the
/// answer in line with the caller's reads (a refused or cut answer is that read's result,
/// not a `streamFailed`), tells its `owner` of its connect, failures and end, and counts
/// every read in `budget` (with `budgetEntry`, its place there).
public struct PrefaceInLine {
    public let loop: EventLoop
    public let preambleWaitMs: UInt64
    public let owner: PrefaceOwner
    public let budget: ReadBudget?
    public let budgetEntry: ReadBudget.Entry?

    public init(loop: EventLoop, preambleWaitMs: UInt64, owner: PrefaceOwner,
                budget: ReadBudget? = nil, budgetEntry: ReadBudget.Entry? = nil) {
        self.loop = loop
        self.preambleWaitMs = preambleWaitMs
        self.owner = owner
        self.budget = budget
        self.budgetEntry = budgetEntry
    }
}

/// The one preface end: a stream that starts with a preamble out and an answer in, then
/// passes bytes through. It wraps its inner stream (`attach`, at once or once something it
/// waits on made it), writes the preamble whole, reads the peer's answer exactly (the codec,
/// a value type beside its wire format, says how many bytes more; the stream's own bytes
/// after it stay in the inner stream), lets the owner's verdict accept or refuse it once, and
/// from then on every call goes to the inner stream, with the bytes counted in `meter`.
/// Until the answer is in, reads say `wouldBlock`; writes, `writeRoom` and `shutdownWrite`
/// already go through (to nothing, before there is an inner stream: 0, or -1 once failed).
/// `streamConnected` comes once the answer is accepted and the inner stream is connected.
///
/// An end made with `PrefaceInLine` (VLESS) instead says connected with its inner stream,
/// holds its preamble for the first write and reads its answer in line with the reads (see
/// there).
///
/// Used by the holder's flows on their own QUIC streams (OPEN out, OPEN_OK or OPEN_FAIL in),
/// the front's quic flows (no preamble; the client's OPEN in), sstp's pending link streams
/// (no preamble, no answer: the end waits for its inner stream) and VLESS's TCP flows (in
/// line: the request header out with the app's first bytes, the response header in;
/// docs/architecture.md, "The preface end"). The inner stream is called through `ByteStream`,
/// as the splice calls this end.
public final class PrefaceStream<Codec: PrefaceCodec>: ByteStream, ByteStreamEvents {
    public weak var events: ByteStreamEvents?
    /// The stream it wraps (nil until attached; an in-line end lets it go when closed).
    public private(set) var inner: ByteStream?
    private let meter: StreamMeter?
    /// The answer is in and accepted: every call passes through.
    public private(set) var answered = false
    private var innerConnected = false
    private var wantsReads = true
    private var shutdownPending = false
    /// The end's user shut its side (`shutdownWrite` with an inner stream).
    public private(set) var writeShut = false
    /// Closed, reset or failed.
    private var finished = false
    private var failure: FlowFailure?
    /// What it waits on before it has its inner stream; cancelled by `close` or `reset` first.
    public var waitingOn: PrefaceWait?
    /// The answer's bytes read so far.
    public var answerBytes: Int { reader.count }
    /// The answer was cut by the inner stream's EOF (the verdict heard `.cut(ECONNRESET)`).
    public private(set) var cutByEOF = false
    private var reader: PrefaceReader<Codec>
    private var verdict: ((PrefaceOutcome<Codec.Answer>) -> FlowFailure?)?
    // An in-line end (`PrefaceInLine`): all nil or false for the others.
    private let inLine: Bool
    private let loop: EventLoop?
    private let preambleWaitMs: UInt64
    private let owner: PrefaceOwner?
    private let budget: ReadBudget?
    private let budgetEntry: ReadBudget.Entry?
    /// The preamble held for the first write, and how much of it is still to go.
    private var held: [UInt8] = []
    private var heldLeft = 0
    private var holdTimer: TimerHandle?
    /// Reads stopped by the read budget (`pauseReads`).
    private var readsPaused = false

    /// `verdict` runs once, when the answer is in or the stream was cut before it: nil accepts
    /// the answer (the end passes through from then on), a failure refuses it (the inner stream
    /// is reset and `streamFailed` reports the failure; in line: the read returns it). It may
    /// close or reset the end itself. Without one, an answer is accepted and a cut stream fails
    /// with its failure.
    public init(codec: Codec, events: ByteStreamEvents?, meter: StreamMeter? = nil, inLine: PrefaceInLine? = nil,
                verdict: ((PrefaceOutcome<Codec.Answer>) -> FlowFailure?)? = nil) {
        reader = PrefaceReader(codec)
        self.events = events
        self.meter = meter
        self.verdict = verdict
        self.inLine = inLine != nil
        loop = inLine?.loop
        preambleWaitMs = inLine?.preambleWaitMs ?? 0
        owner = inLine?.owner
        budget = inLine?.budget
        budgetEntry = inLine?.budgetEntry
    }

    deinit { if let holdTimer { loop?.cancel(holdTimer) } }

    /// Starts on `stream`, which reports to this end from now on (it has its reads on, as a new
    /// stream has): writes `preamble` whole, then waits for the answer (`connected`: the inner
    /// stream is connected already, as a QUIC stream is). False when the preamble did not all
    /// fit (the inner stream is reset; nothing is reported) or the end was closed meanwhile.
    @discardableResult
    public func attach(_ stream: ByteStream, connected: Bool, preamble: UnsafeRawBufferPointer? = nil) -> Bool {
        waitingOn = nil
        guard !finished else { stream.reset(); return false }
        inner = stream
        // (A stream that reported its connect already, to this end as its events, stays so.)
        if connected { innerConnected = true }
        stream.events = self
        if let preamble, preamble.count > 0 {
            var v = iovec(iov_base: UnsafeMutableRawPointer(mutating: preamble.baseAddress!), iov_len: preamble.count)
            guard stream.write(&v, count: 1) == preamble.count else {
                finished = true
                stream.reset()
                return false
            }
        }
        if shutdownPending {
            shutdownPending = false
            stream.shutdownWrite()
        }
        // An answer of no bytes (`NoAnswer`) is in at once.
        if case .answer(let a) = reader.codec.parse(UnsafeRawBufferPointer(start: nil, count: 0)) { judge(.answered(a)) }
        return true
    }

    /// An in-line end starts on `stream` (reporting to this end from now on), its `preamble`
    /// held for the first write: it goes out with the first bytes written, or alone once the
    /// inner stream has been connected for the wait (or when the end is shut, or when a
    /// partly written preamble gets room again). `connected`: the inner stream is connected
    /// already (the end says so now).
    public func attach(_ stream: ByteStream, connected: Bool, holding preamble: [UInt8]) {
        precondition(inLine, "a held preamble is an in-line end's")
        inner = stream
        stream.events = self
        held = preamble
        heldLeft = preamble.count
        if connected { streamConnected(stream) }
    }

    /// Fails the end (a wait that came to nothing, say): the inner stream, if any, is reset and
    /// `streamFailed` reports `f`, once.
    public func fail(_ f: FlowFailure) {
        waitingOn = nil
        guard !finished else { return }
        finished = true
        failure = f
        inner?.reset()
        events?.streamFailed(self, f)
    }

    /// Fails the end before it started (an in-line end whose preamble cannot be made): reads
    /// and writes say `f` from now on, and `streamFailed` reports it on the loop's next turn.
    public func failSoon(_ f: FlowFailure, on loop: EventLoop) {
        finished = true
        failure = f
        loop.soon { [weak self] in
            guard let self else { return }
            self.events?.streamFailed(self, f)
        }
    }

    /// Stops (true) or resumes (false) the inner stream's reads whatever the caller wants (the
    /// read budget; the caller's own read interest applies again once resumed).
    public func pauseReads(_ paused: Bool) {
        readsPaused = paused
        inner?.setReadInterest(wantsReads && !paused)
    }

    // MARK: the answer

    /// Reads what there is of the answer now: for an inner stream that may hold it already and
    /// will not say so again (a QUIC stream whose first bytes came with it).
    public func readNow() { readAnswer() }

    /// The answer, read exactly: what follows is the stream's own bytes.
    private func readAnswer() {
        guard !answered, !finished, let inner else { return }
        switch reader.read(from: inner) {
        case .answer(let a): judge(.answered(a))
        case .wouldBlock: return
        case .eof: judge(.cut(.other(ECONNRESET)))
        case .failed(let f): judge(.cut(f))
        }
    }

    /// The verdict on an outcome: nil accepts it (or there was none), else the refusal.
    private func refusal(_ outcome: PrefaceOutcome<Codec.Answer>) -> FlowFailure? {
        let v = verdict
        verdict = nil
        if let v { return v(outcome) }
        if case .cut(let f) = outcome { return f }
        return nil
    }

    private func judge(_ outcome: PrefaceOutcome<Codec.Answer>) {
        let refusal = refusal(outcome)
        guard !finished else { return }
        if let refusal { return fail(refusal) }
        answered = true
        guard let inner else { return }
        inner.setReadInterest(wantsReads)
        if innerConnected { events?.streamConnected(self) }
    }

    /// In line: the answer read exactly off the front of the caller's read. nil once it is in
    /// and accepted (the read goes on to the stream's own bytes), else what the read returns.
    private func answerInLine(_ inner: ByteStream) -> StreamReadResult? {
        if let failure { return .failed(failure) }
        let outcome: PrefaceOutcome<Codec.Answer>
        switch reader.read(from: inner) {
        case .answer(let a): outcome = .answered(a)
        case .wouldBlock: return .wouldBlock
        case .eof:
            cutByEOF = true
            outcome = .cut(.other(ECONNRESET))
        case .failed(let f): outcome = .cut(f)
        }
        if let refusal = refusal(outcome) {
            failure = refusal
            return .failed(refusal)
        }
        answered = true
        return nil
    }

    // MARK: the held preamble

    /// The held preamble alone (nothing was written in time, the end is shut, or room came back
    /// for the rest of it).
    private func sendHeld() {
        guard heldLeft > 0, innerConnected, let inner else { return }
        stopHold()
        let w = held.withUnsafeBytes { raw -> Int in
            var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + (raw.count - heldLeft)),
                            iov_len: heldLeft)
            return inner.write(&iov, count: 1)
        }
        if w > 0 { heldLeft -= w }
        if heldLeft == 0 {
            held = []
            if shutdownPending { shutdownPending = false; inner.shutdownWrite() }
        }
    }

    private func stopHold() {
        if let h = holdTimer { loop?.cancel(h); holdTimer = nil }
    }

    /// The held preamble and the first bytes written, in one write (one TLS record when they
    /// fit): the count of the caller's bytes taken (0 while only part of the preamble went).
    private func writeHeld(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard let inner, innerConnected else { return failure == nil && inner != nil ? 0 : -1 }
        stopHold()
        let h = heldLeft
        let w = held.withUnsafeBytes { raw -> Int in
            withUnsafeTemporaryAllocation(of: iovec.self, capacity: count + 1) { iov in
                iov[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + (raw.count - h)), iov_len: h)
                for i in 0..<count { iov[i + 1] = segments[i] }
                return inner.write(iov.baseAddress!, count: count + 1)
            }
        }
        if w < 0 { return -1 }
        if w < h {
            heldLeft -= w
            return 0
        }
        held = []
        heldLeft = 0
        if let meter { meter.bytesWritten &+= UInt64(w - h) }
        return w - h
    }

    // MARK: the inner stream's events

    public func streamConnected(_: ByteStream) {
        innerConnected = true
        if inLine {
            owner?.prefaceConnected()
            if heldLeft > 0, let loop {
                holdTimer = loop.schedule(after: preambleWaitMs) { [weak self] in
                    guard let self else { return }
                    self.holdTimer = nil
                    self.sendHeld()
                }
            }
            events?.streamConnected(self)
            return
        }
        if answered { events?.streamConnected(self) }
    }

    public func streamFailed(_: ByteStream, _ f: FlowFailure) {
        owner?.prefaceFailed()
        finished = true
        failure = f
        events?.streamFailed(self, f)
    }

    public func streamReadable(_: ByteStream) {
        guard answered || inLine else { return readAnswer() }
        events?.streamReadable(self)
    }

    public func streamWritable(_: ByteStream) {
        if heldLeft > 0 {
            sendHeld()
            if heldLeft > 0 { return }
        }
        events?.streamWritable(self)
    }

    // MARK: ByteStream

    public var writeRoom: Int {
        guard let inner else { return inLine ? 1 : 0 }
        let r = inner.writeRoom
        // Room for the caller's bytes behind the held preamble (at least 1: a write tries).
        guard heldLeft > 0, r != Int.max, r > 0 else { return r }
        return max(1, r - heldLeft)
    }

    public func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard heldLeft == 0, let inner else {
            if heldLeft > 0 { return writeHeld(segments, count: count) }
            return failure == nil ? 0 : -1
        }
        let n = inner.write(segments, count: count)
        if n > 0, let meter { meter.bytesWritten &+= UInt64(n) }
        return n
    }

    /// None for an in-line end (its preamble goes in front of the first write; its inner
    /// stream, TLS, has none).
    public func writeSpace(max: Int) -> UnsafeMutableRawBufferPointer? {
        guard !inLine else { return nil }
        return inner?.writeSpace(max: max)
    }

    public func commitWrite(_ n: Int) {
        inner?.commitWrite(n)
        if n > 0, let meter { meter.bytesWritten &+= UInt64(n) }
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        guard answered, !readsPaused, let inner else { return readSlow(into: buffer) }
        return passRead(inner, into: buffer)
    }

    /// A read before the answer, or while the budget stops reads, or without an inner stream.
    private func readSlow(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        guard inLine else { return failure.map { .failed($0) } ?? .wouldBlock }
        guard let inner else { return failure.map { .failed($0) } ?? .eof }
        if readsPaused { owner?.prefaceRecheck() }
        if !answered, let r = answerInLine(inner) { return r }
        return passRead(inner, into: buffer)
    }

    @inline(__always)
    private func passRead(_ inner: ByteStream, into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        let r = inner.read(into: buffer)
        switch r {
        case .data(let n):
            if let meter { meter.bytesRead &+= UInt64(n) }
            if let budgetEntry, let budget { budget.update(budgetEntry) }
        case .failed: owner?.prefaceReadFailed()
        default: break
        }
        return r
    }

    public func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        guard answered, !readsPaused, let inner else { return peekSlow(iov, max: max, count: &count) }
        return passPeek(inner, iov, max: max, count: &count)
    }

    private func peekSlow(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        guard inLine else { return nil }
        count = 0
        guard let inner else { return failure.map { .failed($0) } ?? .eof }
        if readsPaused { owner?.prefaceRecheck() }
        if !answered, let r = answerInLine(inner) { return r }
        return passPeek(inner, iov, max: max, count: &count)
    }

    @inline(__always)
    private func passPeek(_ inner: ByteStream, _ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        let r = inner.peek(iov, max: max, count: &count)
        if case .failed? = r, let owner { owner.prefaceReadFailed() }
        return r
    }

    public func consume(_ n: Int) {
        inner?.consume(n)
        if let meter { meter.bytesRead &+= UInt64(n) }
        if let budgetEntry, let budget { budget.update(budgetEntry) }
    }

    public func setReadInterest(_ on: Bool) {
        wantsReads = on
        if answered || inLine { inner?.setReadInterest(on && !readsPaused) }
    }

    public func shutdownWrite() {
        guard let inner else { shutdownPending = true; return }
        writeShut = true
        if heldLeft > 0 {
            // The held preamble first, then the shutdown behind it.
            shutdownPending = true
            sendHeld()
            return
        }
        inner.shutdownWrite()
    }

    public func close() {
        stopHold()
        if let owner { owner.prefaceEnded(reset: false, connected: innerConnected, failed: failure != nil) }
        finished = true
        if let inner {
            if inLine { inner.events = nil; self.inner = nil }
            inner.close()
        } else { waitingOn?.cancel(); waitingOn = nil }
    }

    public func reset() {
        stopHold()
        if let owner { owner.prefaceEnded(reset: true, connected: innerConnected, failed: failure != nil) }
        finished = true
        if let inner {
            if inLine { inner.events = nil; self.inner = nil }
            inner.reset()
        } else { waitingOn?.cancel(); waitingOn = nil }
    }
}

/// An answer read exactly from the start of a stream with its codec: its bytes so far, in a
/// buffer of the codec's capacity (allocated at the first read, given back with the answer).
/// Each read takes no more than the codec's `needMore` asks for, so the stream's own bytes
/// stay in the stream. `PrefaceStream` reads its answer with it (in line with the reads for an
/// end with `PrefaceInLine`).
public struct PrefaceReader<Codec: PrefaceCodec> {
    public let codec: Codec
    private var buffer: [UInt8] = []
    /// Bytes read so far.
    public private(set) var count = 0

    public enum Step {
        case answer(Codec.Answer)
        /// Not all of it yet (a read took nothing).
        case wouldBlock
        /// The stream ended before all of it.
        case eof
        /// The read failed, or the codec asked past its capacity (EPROTO).
        case failed(FlowFailure)
    }

    public init(_ codec: Codec) { self.codec = codec }

    /// Reads from `stream` until the answer is whole or a read stops it.
    public mutating func read(from stream: ByteStream) -> Step {
        while true {
            let parsed = buffer.withUnsafeBytes { b in
                codec.parse(UnsafeRawBufferPointer(rebasing: b[0..<Swift.min(count, b.count)]))
            }
            switch parsed {
            case .answer(let a):
                buffer = []
                return .answer(a)
            case .needMore(let need):
                let start = count
                // A codec that asks past its capacity is broken: the stream is refused.
                guard need > 0, start + need <= codec.capacity else { return .failed(.other(EPROTO)) }
                if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: codec.capacity) }
                let r = buffer.withUnsafeMutableBytes { b in
                    stream.read(into: UnsafeMutableRawBufferPointer(rebasing: b[start..<(start + need)]))
                }
                switch r {
                case .data(let n) where n > 0: count += n
                case .data, .wouldBlock: return .wouldBlock
                case .eof: return .eof
                case .failed(let f): return .failed(f)
                }
            }
        }
    }
}
