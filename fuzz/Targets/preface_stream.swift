// Fuzz target: the preface end (LoftIO/PrefaceStream.swift and its PrefaceReader) reading an
// answer with the codecs beside their wire formats (FlowPreamble.OpenCodec and AnswerCodec,
// LoftProtocol; VLESS.ResponseCodec, LoftOutbounds). The first byte picks the codec (0 the
// client's OPEN, 1 the front's answer, 2 VLESS's response header, read both by an end that
// waits for it and by one that reads it in line with the reads, as VLESS's TCP flow does) and,
// with the second, how the rest arrives (pieces of 1 to 16 bytes, a readable event or a read
// each, then EOF).
// Checks: the verdict comes at most once, and exactly once by EOF; the answer is read
// exactly (never past the codec's capacity, and what the codec made of those bytes is what
// the parser says of them alone); once accepted, every later byte reads through in order.
import Glibc
import LoftCore
import LoftIO
import LoftOutbounds
import LoftProtocol

/// An inner stream fed in pieces.
final class Feed: ByteStream {
    weak var events: ByteStreamEvents?
    var bytes: [UInt8] = []
    var offset = 0
    var eof = false
    func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int { 0 }
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        let n = min(buffer.count, bytes.count - offset)
        if n > 0 {
            bytes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
            offset += n
            return .data(n)
        }
        return eof ? .eof : .wouldBlock
    }
    func setReadInterest(_ on: Bool) {}
    func shutdownWrite() {}
    func close() {}
    func reset() {}

    /// Takes `all` in pieces of 1 to 16 bytes, their sizes drawn from `seed`, calling `after`
    /// after each piece; then its EOF, and `after` once more.
    func trickle(_ all: [UInt8], seed: UInt8, _ after: () -> Void) {
        var at = 0
        var step = UInt(seed)
        while at < all.count {
            let n = min(all.count - at, 1 + Int(step & 15))
            step = step &* 31 &+ 7
            bytes += all[at..<(at + n)]
            at += n
            after()
        }
        eof = true
        after()
    }
}

final class Sink: ByteStreamEvents {
    var connected = 0, failed = 0
    func streamConnected(_: ByteStream) { connected += 1 }
    func streamFailed(_: ByteStream, _: FlowFailure) { failed += 1 }
    func streamReadable(_: ByteStream) {}
    func streamWritable(_: ByteStream) {}
}

func run<C: PrefaceCodec>(_ codec: C, _ input: UnsafeRawBufferPointer, seed: UInt8,
                          accept: @escaping (C.Answer) -> Bool, same: @escaping (C.Answer, UnsafeRawBufferPointer) -> Bool) {
    let inner = Feed()
    let sink = Sink()
    var verdicts = 0
    let all = [UInt8](input)
    var end: PrefaceStream<C>!
    end = PrefaceStream(codec: codec, events: sink) { outcome in
        verdicts += 1
        precondition(end.answerBytes <= codec.capacity, "read past the codec's capacity")
        switch outcome {
        case .answered(let a):
            let n = end.answerBytes
            precondition(n == inner.offset, "the answer was not read exactly")
            precondition(all.withUnsafeBytes { same(a, UnsafeRawBufferPointer(rebasing: $0[0..<n])) },
                         "the codec's answer differs from the parser's on the same bytes")
            return accept(a) ? nil : .other(EPROTO)
        case .cut(let f):
            return f
        }
    }
    end.attach(inner, connected: true)
    inner.trickle(all, seed: seed) {
        end.streamReadable(inner)
        precondition(verdicts <= 1)
    }
    precondition(verdicts == 1, "no verdict by EOF")
    precondition(sink.connected + sink.failed == 1)
    guard end.answered else { return }
    // Everything after the answer reads through, in order.
    var rest: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 7)
    while case .data(let n) = buf.withUnsafeMutableBytes({ end.read(into: $0) }) { rest += buf[0..<n] }
    precondition(rest == Array(all[end.answerBytes...]), "the bytes after the answer do not read through")
}

final class NoOwner: PrefaceOwner {
    func prefaceConnected() {}
    func prefaceFailed() {}
    func prefaceReadFailed() {}
    func prefaceRecheck() {}
    func prefaceEnded(reset: Bool, connected: Bool, failed: Bool) {}
}

/// The in-line end's loop (its held preamble's wait; never run here).
let fuzzLoop = try! EventLoop()

/// VLESS's response header read in line: the caller's reads take it off the front, one verdict
/// at most, by EOF exactly one; a refusal is the read's result; once accepted every later byte
/// reads through in order.
func runInLine(_ input: UnsafeRawBufferPointer, seed: UInt8) {
    let codec = VLESS.ResponseCodec()
    let inner = Feed()
    let sink = Sink()
    let owner = NoOwner()
    var verdicts = 0
    let all = [UInt8](input)
    var end: PrefaceStream<VLESS.ResponseCodec>!
    end = PrefaceStream(codec: codec, events: sink, inLine: PrefaceInLine(loop: fuzzLoop, preambleWaitMs: 10, owner: owner)) { outcome in
        verdicts += 1
        precondition(end.answerBytes <= codec.capacity, "read past the codec's capacity")
        switch outcome {
        case .answered(let a):
            precondition(end.answerBytes == inner.offset, "the answer was not read exactly")
            return a == .ok ? nil : .other(EPROTO)
        case .cut(let f):
            return f
        }
    }
    end.attach(inner, connected: false, holding: [0])
    var out: [UInt8] = []
    var refused = false
    var buf = [UInt8](repeating: 0, count: 7)
    func drain() {
        while true {
            switch buf.withUnsafeMutableBytes({ end.read(into: $0) }) {
            case .data(let n): out += buf[0..<n]
            case .failed: refused = true; return
            default: return
            }
        }
    }
    inner.trickle(all, seed: seed) {
        drain()
        precondition(verdicts <= 1)
    }
    precondition(verdicts == 1, "no verdict by EOF")
    precondition(sink.connected + sink.failed == 0, "in line: the reads say it, not the events")
    precondition(end.answered != refused, "accepted, or the reads failed")
    guard end.answered else { return }
    precondition(out == Array(all[end.answerBytes...]), "the bytes after the answer do not read through")
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 1 else { return 0 }
    let all = UnsafeRawBufferPointer(start: data, count: size)
    let body = UnsafeRawBufferPointer(rebasing: all[2...])
    switch all[0] % 3 {
    case 0:
        run(FlowPreamble.OpenCodec(), body, seed: all[1],
            accept: { if case .open = $0 { return true } else { return false } },
            same: { a, b in a == FlowPreamble.parseOpen(b) })
    case 1:
        run(FlowPreamble.AnswerCodec(), body, seed: all[1],
            accept: { $0 == .accepted },
            same: { a, b in a == FlowPreamble.parseAnswer(b) })
    default:
        run(VLESS.ResponseCodec(), body, seed: all[1],
            accept: { $0 == .ok },
            same: { a, b in
                switch VLESS.parseResponse(b) {
                case .done(_, let n): return a == .ok && n == b.count
                case .bad: return a == .bad(firstByte: b.first ?? 0)
                case .needMore: return false
                }
            })
        runInLine(body, seed: all[1])
    }
    return 0
}
