import Glibc
import LoftCore

/// What a preface end waits on before it has its inner stream (sstp's lookup of a name over
/// its link): cancelled when the end is closed first.
public protocol PrefaceWait: AnyObject {
    func cancel()
}

/// How the wait for the answer ended: the answer (the codec's), or the inner stream ended
/// before all of it (`ECONNRESET` for an EOF, else the read's failure).
public enum PrefaceOutcome<Answer> {
    case answered(Answer)
    case cut(FlowFailure)
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
/// Used by the holder's flows on their own QUIC streams (OPEN out, OPEN_OK or OPEN_FAIL in),
/// the front's quic flows (no preamble; the client's OPEN in) and sstp's pending link streams
/// (no preamble, no answer: the end waits for its inner stream); VLESS reads its response
/// header with its `PrefaceReader` (docs/architecture.md, "The preface end"). The inner stream
/// is called through `ByteStream`, as the splice calls this end.
public final class PrefaceStream<Codec: PrefaceCodec>: ByteStream, ByteStreamEvents {
    public weak var events: ByteStreamEvents?
    /// The stream it wraps (nil until attached).
    public private(set) var inner: ByteStream?
    private let meter: StreamMeter?
    /// The answer is in and accepted: every call passes through.
    public private(set) var answered = false
    private var innerConnected = false
    private var wantsReads = true
    private var shutdownPending = false
    /// Closed, reset or failed.
    private var finished = false
    private var failure: FlowFailure?
    /// What it waits on before it has its inner stream; cancelled by `close` or `reset` first.
    public var waitingOn: PrefaceWait?
    /// The answer's bytes read so far.
    public var answerBytes: Int { reader.count }
    private var reader: PrefaceReader<Codec>
    private var verdict: ((PrefaceOutcome<Codec.Answer>) -> FlowFailure?)?

    /// `verdict` runs once, when the answer is in or the stream was cut before it: nil accepts
    /// the answer (the end passes through from then on), a failure refuses it (the inner stream
    /// is reset and `streamFailed` reports the failure). It may close or reset the end itself.
    /// Without one, an answer is accepted and a cut stream fails with its failure.
    public init(codec: Codec, events: ByteStreamEvents?, meter: StreamMeter? = nil,
                verdict: ((PrefaceOutcome<Codec.Answer>) -> FlowFailure?)? = nil) {
        reader = PrefaceReader(codec)
        self.events = events
        self.meter = meter
        self.verdict = verdict
    }

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

    private func judge(_ outcome: PrefaceOutcome<Codec.Answer>) {
        let v = verdict
        verdict = nil
        let refusal: FlowFailure?
        if let v {
            refusal = v(outcome)
        } else if case .cut(let f) = outcome {
            refusal = f
        } else {
            refusal = nil
        }
        guard !finished else { return }
        if let refusal { return fail(refusal) }
        answered = true
        guard let inner else { return }
        inner.setReadInterest(wantsReads)
        if innerConnected { events?.streamConnected(self) }
    }

    // MARK: the inner stream's events

    public func streamConnected(_: ByteStream) {
        innerConnected = true
        if answered { events?.streamConnected(self) }
    }

    public func streamFailed(_: ByteStream, _ f: FlowFailure) {
        finished = true
        failure = f
        events?.streamFailed(self, f)
    }

    public func streamReadable(_: ByteStream) {
        guard answered else { return readAnswer() }
        events?.streamReadable(self)
    }

    public func streamWritable(_: ByteStream) { events?.streamWritable(self) }

    // MARK: ByteStream

    public var writeRoom: Int { inner?.writeRoom ?? 0 }

    public func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard let inner else { return failure == nil ? 0 : -1 }
        let n = inner.write(segments, count: count)
        if n > 0, let meter { meter.bytesWritten &+= UInt64(n) }
        return n
    }

    public func writeSpace(max: Int) -> UnsafeMutableRawBufferPointer? { inner?.writeSpace(max: max) }

    public func commitWrite(_ n: Int) {
        inner?.commitWrite(n)
        if n > 0, let meter { meter.bytesWritten &+= UInt64(n) }
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        guard answered, let inner else { return failure.map { .failed($0) } ?? .wouldBlock }
        let r = inner.read(into: buffer)
        if case .data(let n) = r, let meter { meter.bytesRead &+= UInt64(n) }
        return r
    }

    public func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        guard answered, let inner else { return nil }
        return inner.peek(iov, max: max, count: &count)
    }

    public func consume(_ n: Int) {
        inner?.consume(n)
        if let meter { meter.bytesRead &+= UInt64(n) }
    }

    public func setReadInterest(_ on: Bool) {
        wantsReads = on
        if answered { inner?.setReadInterest(on) }
    }

    public func shutdownWrite() {
        if let inner { inner.shutdownWrite() } else { shutdownPending = true }
    }

    public func close() {
        finished = true
        if let inner { inner.close() } else { waitingOn?.cancel(); waitingOn = nil }
    }

    public func reset() {
        finished = true
        if let inner { inner.reset() } else { waitingOn?.cancel(); waitingOn = nil }
    }
}

/// An answer read exactly from the start of a stream with its codec: its bytes so far, in a
/// buffer of the codec's capacity (allocated at the first read, given back with the answer).
/// Each read takes no more than the codec's `needMore` asks for, so the stream's own bytes
/// stay in the stream. `PrefaceStream` reads its answer with it; so does `VLESSStream`, which
/// reads VLESS's response header in line with the flow's reads.
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
