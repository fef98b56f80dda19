import Glibc
import LoftCore
import LoftIO
import LoftTestSupport
import XCTest

/// A test answer: a tag byte ('+' accepts, '-' refuses, anything else is malformed), a length
/// byte, then that many bytes.
struct TaggedAnswer: PrefaceCodec {
    enum Answer: Equatable { case yes([UInt8]), no, junk(UInt8) }
    var capacity: Int { 2 + 255 }
    func parse(_ bytes: UnsafeRawBufferPointer) -> PrefaceParse<Answer> {
        if bytes.count < 2 { return .needMore(2 - bytes.count) }
        let total = 2 + Int(bytes[1])
        if bytes.count < total { return .needMore(total - bytes.count) }
        switch bytes[0] {
        case UInt8(ascii: "+"): return .answer(.yes(Array(bytes[2..<total])))
        case UInt8(ascii: "-"): return .answer(.no)
        default: return .answer(.junk(bytes[0]))
        }
    }

    /// The tests' verdict: '+' accepted, '-' refused with `.refused`, junk with EPROTO, a cut
    /// with its failure.
    static func verdict(_ outcome: PrefaceOutcome<Answer>) -> FlowFailure? {
        switch outcome {
        case .answered(.yes): return nil
        case .answered(.no): return .refused
        case .answered(.junk): return .other(EPROTO)
        case .cut(let f): return f
        }
    }
}

final class PrefaceStreamTests: XCTestCase {
    var log: RecordingStreamEvents!
    var inner: TestStream!
    var outcomes: [PrefaceOutcome<TaggedAnswer.Answer>] = []
    var meter: StreamMeter!
    /// The end made last (the inner stream holds its events weakly).
    var made: ByteStream?

    override func setUp() {
        log = RecordingStreamEvents()
        inner = TestStream(readInterest: true)
        outcomes = []
        meter = StreamMeter()
    }

    /// A preface end whose verdict accepts '+', refuses '-' with `.refused`, junk with EPROTO.
    func make(preamble: [UInt8] = Array("HELLO".utf8), attach: Bool = true, connected: Bool = true) -> PrefaceStream<TaggedAnswer> {
        let s = PrefaceStream(codec: TaggedAnswer(), events: log, meter: meter) { [unowned self] outcome in
            self.outcomes.append(outcome)
            return TaggedAnswer.verdict(outcome)
        }
        made = s
        if attach { XCTAssertTrue(preamble.withUnsafeBytes { s.attach(inner, connected: connected, preamble: $0) }) }
        return s
    }

    func write(_ s: ByteStream, _ b: [UInt8]) -> Int {
        b.withUnsafeBytes { raw in
            var v = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress!), iov_len: raw.count)
            return s.write(&v, count: 1)
        }
    }

    func read(_ s: ByteStream, _ max: Int = 100) -> (StreamReadResult, [UInt8]) {
        var b = [UInt8](repeating: 0, count: max)
        let r = b.withUnsafeMutableBytes { s.read(into: $0) }
        if case .data(let n) = r { return (r, Array(b[0..<n])) }
        return (r, [])
    }

    func testPreambleWrittenOnceBeforeAnythingElse() {
        let s = make()
        XCTAssertEqual(inner.writes, [Array("HELLO".utf8)])
        inner.feed(Array("+\u{0}".utf8))
        XCTAssertEqual(log.connected, 1)
        XCTAssertEqual(write(s, Array("data".utf8)), 4)
        XCTAssertEqual(inner.writes, [Array("HELLO".utf8), Array("data".utf8)])
        XCTAssertEqual(meter.bytesWritten, 4)
    }

    func testPreambleThatDoesNotFitResetsTheInnerStream() {
        inner.room = 3
        let s = PrefaceStream(codec: TaggedAnswer(), events: log)
        XCTAssertFalse(Array("HELLO".utf8).withUnsafeBytes { s.attach(inner, connected: true, preamble: $0) })
        XCTAssertEqual(inner.resetCalls, 1)
        XCTAssertEqual(log.failures, [])
    }

    func testAnswerThereBeforeAttachIsReadOnAsking() {
        inner.supply(Array("+\u{0}rest".utf8))
        let s = make()
        XCTAssertEqual(log.connected, 0, "no event said so")
        s.readNow()
        XCTAssertEqual(log.connected, 1)
        XCTAssertEqual(inner.unread, 4)
    }

    func testAnswerSplitAcrossReads() {
        let s = make()
        for piece in ["+", "\u{3}", "ab", "c"] {
            XCTAssertEqual(log.connected, 0)
            inner.feed(Array(piece.utf8))
            XCTAssertEqual(log.readable, 0, "no readable before the answer")
        }
        XCTAssertEqual(log.connected, 1)
        guard case .answered(.yes(let body)) = outcomes.first else { return XCTFail("\(outcomes)") }
        XCTAssertEqual(body, Array("abc".utf8))
        XCTAssertEqual(outcomes.count, 1)
        inner.feed(Array("xyz".utf8))
        XCTAssertEqual(log.readable, 1)
        let (r, got) = read(s)
        XCTAssertEqual(r, .data(3))
        XCTAssertEqual(got, Array("xyz".utf8))
        XCTAssertEqual(meter.bytesRead, 3)
    }

    func testAnswerAndDataInOneRead() {
        let s = make()
        XCTAssertEqual(read(s).0, .wouldBlock, "nothing before the answer")
        inner.feed(Array("+\u{1}aDATA".utf8))
        XCTAssertEqual(log.connected, 1)
        // Read exactly: the stream's own bytes stay in the inner stream.
        XCTAssertEqual(inner.unread, 4)
        XCTAssertEqual(read(s).1, Array("DATA".utf8))
        XCTAssertEqual(read(s).0, .wouldBlock)
    }

    func testZeroCopyReadsPassThroughAfterTheAnswer() {
        inner.zeroCopy = true
        let s = make()
        var iov = [iovec](repeating: iovec(), count: 4)
        var n = 0
        XCTAssertNil(s.peek(&iov, max: 4, count: &n), "before the answer: reads only")
        inner.feed(Array("+\u{0}abcd".utf8))
        XCTAssertEqual(s.peek(&iov, max: 4, count: &n), .data(4))
        s.consume(4)
        XCTAssertEqual(inner.unread, 0)
        XCTAssertEqual(meter.bytesRead, 4)
    }

    func testRefusedAnswerFailsOnceWithTheVerdictsFailure() {
        _ = make()
        inner.feed(Array("-\u{0}more".utf8))
        XCTAssertEqual(log.failures, [.refused])
        XCTAssertEqual(log.connected, 0)
        XCTAssertEqual(inner.resetCalls, 1)
        inner.feed(Array("+\u{0}".utf8))
        XCTAssertEqual(log.failures, [.refused])
        XCTAssertEqual(outcomes.count, 1)
    }

    func testMalformedAnswer() {
        let s = make()
        inner.feed(Array("?\u{0}".utf8))
        XCTAssertEqual(log.failures, [.other(EPROTO)])
        XCTAssertEqual(read(s).0, .failed(.other(EPROTO)))
        XCTAssertEqual(inner.resetCalls, 1)
        XCTAssertEqual(write(s, [1]), -1, "the inner stream is reset")
    }

    func testWithoutAVerdictACutStreamFailsWithItsFailure() {
        let s = PrefaceStream(codec: TaggedAnswer(), events: log)
        XCTAssertTrue(s.attach(inner, connected: true))
        inner.feed(Array("+".utf8))
        inner.finishInput()
        XCTAssertEqual(log.failures, [.other(ECONNRESET)])
    }

    func testEOFAndFailureBeforeTheAnswer() {
        _ = make()
        inner.feed(Array("+".utf8))
        inner.finishInput()
        guard case .cut(.other(ECONNRESET)) = outcomes.first else { return XCTFail("\(outcomes)") }
        XCTAssertEqual(log.failures, [.other(ECONNRESET)])

        setUp()
        _ = make()
        inner.breakReads(.other(ECONNRESET))
        inner.deliverReadiness()
        XCTAssertEqual(log.failures, [.other(ECONNRESET)])

        setUp()
        _ = make()
        inner.fail(.hostUnreachable)
        XCTAssertEqual(log.failures, [.hostUnreachable], "the inner stream's own failure passes through")
        XCTAssertTrue(outcomes.isEmpty)
    }

    func testCloseAndResetBeforeTheAnswer() {
        var s = make()
        s.close()
        XCTAssertEqual(inner.closeCalls, 1)
        inner.feed(Array("+\u{0}".utf8))
        XCTAssertEqual(log.connected, 0)
        XCTAssertTrue(outcomes.isEmpty)

        setUp()
        s = make()
        s.reset()
        XCTAssertEqual(inner.resetCalls, 1)
        inner.feed(Array("+\u{0}".utf8))
        XCTAssertEqual(log.connected, 0)
        XCTAssertEqual(log.failures, [])
    }

    func testVerdictMayCloseTheEnd() {
        var s: PrefaceStream<TaggedAnswer>!
        s = PrefaceStream(codec: TaggedAnswer(), events: log) { _ in s.close(); return nil }
        s.attach(inner, connected: true)
        inner.feed(Array("+\u{0}".utf8))
        XCTAssertEqual(inner.closeCalls, 1)
        XCTAssertEqual(log.connected, 0)
        XCTAssertFalse(s.answered)
    }

    func testBackpressureBothWays() {
        let s = make(preamble: [])
        // Reads wanted off before the answer: kept, applied once it is in.
        s.setReadInterest(false)
        XCTAssertEqual(inner.interestChanges, [])
        inner.feed(Array("+\u{0}".utf8))
        XCTAssertEqual(inner.interestChanges, [false])
        inner.supply(Array("x".utf8))
        inner.deliverReadiness()
        XCTAssertEqual(log.readable, 0)
        s.setReadInterest(true)
        inner.deliverReadiness()
        XCTAssertEqual(log.readable, 1)
        // Writes take what fits; the inner stream's writable comes through.
        inner.room = 2
        XCTAssertEqual(s.writeRoom, 2)
        XCTAssertEqual(write(s, Array("abcd".utf8)), 2)
        XCTAssertEqual(s.writeRoom, 0)
        inner.drain(10)
        XCTAssertEqual(log.writable, 1)
        XCTAssertEqual(write(s, Array("cd".utf8)), 2)
        XCTAssertEqual(inner.written, Array("abcd".utf8))
    }

    func testInPlaceWritesPassThrough() {
        inner.inPlace = true
        let s = make(preamble: [])
        let space = s.writeSpace(max: 5)!
        space.copyBytes(from: Array("hello".utf8))
        s.commitWrite(5)
        XCTAssertEqual(inner.written, Array("hello".utf8))
        XCTAssertEqual(meter.bytesWritten, 5)
    }

    // MARK: waiting for the inner stream (sstp's pending link streams)

    final class Wait: PrefaceWait {
        var cancelled = 0
        func cancel() { cancelled += 1 }
    }

    func testNoInnerStreamYet() {
        let s = PrefaceStream(codec: NoAnswer(), events: log)
        let w = Wait()
        s.waitingOn = w
        XCTAssertEqual(s.writeRoom, 0)
        XCTAssertEqual(write(s, [1, 2]), 0)
        XCTAssertEqual(read(s).0, .wouldBlock)
        s.setReadInterest(false)
        s.shutdownWrite()
        XCTAssertTrue(s.attach(inner, connected: false))
        XCTAssertNil(s.waitingOn)
        XCTAssertEqual(inner.shutdownWriteCalls, 1, "a shutdown asked for before comes now")
        XCTAssertEqual(inner.interestChanges, [false])
        XCTAssertEqual(log.connected, 0)
        inner.connect()
        XCTAssertEqual(log.connected, 1)
        XCTAssertEqual(w.cancelled, 0)
    }

    func testClosedWhileWaiting() {
        let s = PrefaceStream(codec: NoAnswer(), events: log)
        let w = Wait()
        s.waitingOn = w
        s.close()
        XCTAssertEqual(w.cancelled, 1)
        XCTAssertFalse(s.attach(inner, connected: false))
        XCTAssertEqual(inner.resetCalls, 1, "a stream that comes too late is reset")
    }

    func testFailedWhileWaiting() {
        let s = PrefaceStream(codec: NoAnswer(), events: log)
        s.waitingOn = Wait()
        s.fail(.hostUnreachable)
        s.fail(.timedOut)
        XCTAssertEqual(log.failures, [.hostUnreachable])
        XCTAssertNil(s.waitingOn)
        XCTAssertEqual(write(s, [1]), -1)
        XCTAssertEqual(read(s).0, .failed(.hostUnreachable))
    }
}

/// What an in-line end's owner heard.
final class OwnerLog: PrefaceOwner, ReadBudgetMember {
    var calls: [String] = []
    var held = 0
    weak var end: PrefaceStream<TaggedAnswer>?
    func prefaceConnected() { calls.append("connected") }
    func prefaceFailed() { calls.append("failed") }
    func prefaceReadFailed() { calls.append("read-failed") }
    func prefaceRecheck() { calls.append("recheck") }
    func prefaceEnded(reset: Bool, connected: Bool, failed: Bool) {
        calls.append("\(reset ? "reset" : "closed") connected=\(connected) failed=\(failed)")
    }
    func budgetHeld() -> Int { held }
    func budgetPause(_ paused: Bool) { end?.pauseReads(paused) }
}

/// An end made with `PrefaceInLine` (VLESS's TCP flow): connected with its inner stream, its
/// preamble held for the first write (or sent alone after the wait, on the loop's virtual
/// clock), its answer read in line with the reads, every read counted in the budget.
final class PrefaceInLineTests: XCTestCase {
    var loop: EventLoop!
    var log: RecordingStreamEvents!
    var inner: TestStream!
    var owner: OwnerLog!
    var meter: StreamMeter!
    var budget: ReadBudget!
    var outcomes: [PrefaceOutcome<TaggedAnswer.Answer>] = []
    let preamble = Array("HELLO".utf8)

    override func setUpWithError() throws {
        loop = try EventLoop(clock: VirtualClock())
        log = RecordingStreamEvents()
        inner = TestStream(readInterest: true)
        owner = OwnerLog()
        meter = StreamMeter()
        budget = ReadBudget(loop: loop, limit: 100)
        outcomes = []
    }

    /// An in-line end over `inner`, its preamble held, waiting 10 ms for a first write.
    func make(connected: Bool) -> PrefaceStream<TaggedAnswer> {
        let entry = budget.join(owner)
        let s = PrefaceStream(codec: TaggedAnswer(), events: log, meter: meter,
                              inLine: PrefaceInLine(loop: loop, preambleWaitMs: 10, owner: owner,
                                                    budget: budget, budgetEntry: entry)) { [unowned self] outcome in
            self.outcomes.append(outcome)
            return TaggedAnswer.verdict(outcome)
        }
        owner.end = s
        s.attach(inner, connected: connected, holding: preamble)
        return s
    }

    func write(_ s: ByteStream, _ b: [UInt8]) -> Int {
        b.withUnsafeBytes { raw in
            var v = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress!), iov_len: raw.count)
            return s.write(&v, count: 1)
        }
    }

    func read(_ s: ByteStream) -> (StreamReadResult, [UInt8]) {
        var b = [UInt8](repeating: 0, count: 100)
        let r = b.withUnsafeMutableBytes { s.read(into: $0) }
        if case .data(let n) = r { return (r, Array(b[0..<n])) }
        return (r, [])
    }

    func testHeldPreambleLeavesWithTheFirstWriteInOneWrite() {
        let s = make(connected: false)
        XCTAssertEqual(log.connected, 0)
        XCTAssertEqual(write(s, [1]), 0, "nothing is written before the inner stream is connected")
        inner.connect()
        XCTAssertEqual(log.connected, 1, "connected with the inner stream, before any answer")
        XCTAssertEqual(owner.calls, ["connected"])
        XCTAssertTrue(inner.writes.isEmpty, "the preamble waits for the first bytes")
        XCTAssertEqual(write(s, Array("data".utf8)), 4)
        XCTAssertEqual(inner.writes, [preamble + Array("data".utf8)], "one write: the preamble, then the bytes")
        XCTAssertEqual(meter.bytesWritten, 4, "only the caller's bytes are counted")
        loop.advance(by: 50)
        XCTAssertEqual(inner.writes.count, 1, "the wait ended with the write")
        XCTAssertEqual(write(s, [9]), 1)
        XCTAssertEqual(inner.writes.last!, [9])
    }

    func testHeldPreambleAloneAfterTheWaitOnTheVirtualClock() {
        let s = make(connected: false)
        loop.advance(by: 100)
        XCTAssertTrue(inner.writes.isEmpty, "the wait starts when the inner stream connects")
        inner.connect()
        loop.advance(by: 9)
        XCTAssertTrue(inner.writes.isEmpty, "not before the wait is over")
        loop.advance(by: 1)
        XCTAssertEqual(inner.writes, [preamble], "alone once the wait is over")
        XCTAssertEqual(write(s, [7]), 1)
        XCTAssertEqual(inner.writes, [preamble, [7]])
        XCTAssertEqual(meter.bytesWritten, 1)
    }

    func testPartlyWrittenPreambleThenShutdown() {
        let s = make(connected: true)
        inner.room = 2
        XCTAssertEqual(s.writeRoom, 1, "room smaller than the preamble still lets a write try")
        XCTAssertEqual(write(s, [1, 2]), 0)
        XCTAssertEqual(inner.written, Array(preamble[0..<2]))
        s.shutdownWrite()
        XCTAssertFalse(inner.shut, "the shutdown waits behind the preamble")
        inner.room = Int.max
        s.streamWritable(inner)
        XCTAssertEqual(inner.written, preamble)
        XCTAssertTrue(inner.shut)
        XCTAssertEqual(log.writable, 1, "the rest of the preamble went, then the caller hears of the room")
    }

    func testAnswerReadInLineThenBytesCountedInTheBudget() {
        let s = make(connected: true)
        inner.feed(Array("+\u{1}".utf8))
        XCTAssertEqual(log.readable, 1, "readable events pass before the answer")
        XCTAssertEqual(read(s).0, .wouldBlock, "part of the answer")
        XCTAssertTrue(outcomes.isEmpty)
        owner.held = 7
        inner.incoming = Array("Adata".utf8)
        let (r, bytes) = read(s)
        XCTAssertEqual(r, .data(4))
        XCTAssertEqual(bytes, Array("data".utf8), "the answer off the front, the bytes in the same read")
        guard case .answered(.yes) = outcomes.first else { return XCTFail("\(outcomes)") }
        XCTAssertEqual(meter.bytesRead, 4)
        XCTAssertEqual(budget.held, 7, "the read asked the budget")
        XCTAssertEqual(log.connected, 1, "said once, at the connect")
        owner.held = 200
        inner.incoming = [1]
        XCTAssertEqual(read(s).0, .data(1))
        XCTAssertFalse(inner.readInterest, "over the budget: reads stopped")
        s.setReadInterest(true)
        XCTAssertFalse(inner.readInterest, "the caller's interest waits while the budget stops reads")
        XCTAssertEqual(read(s).0, .wouldBlock)
        XCTAssertEqual(owner.calls, ["connected", "recheck"], "a read while stopped asks again")
        s.close()
        XCTAssertEqual(owner.calls.last, "closed connected=true failed=false")
        XCTAssertTrue(inner.closed)
    }

    func testRefusedAnswerIsTheReadsResult() {
        let s = make(connected: true)
        inner.incoming = Array("-\u{0}".utf8)
        XCTAssertEqual(read(s).0, .failed(.refused))
        XCTAssertEqual(read(s).0, .failed(.refused), "the failure stays")
        XCTAssertEqual(outcomes.count, 1, "one verdict")
        XCTAssertTrue(log.failures.isEmpty, "no streamFailed: the read said it")
        XCTAssertEqual(inner.resetCalls, 0, "the caller ends it")
        s.reset()
        XCTAssertEqual(owner.calls.last, "reset connected=true failed=true")
        XCTAssertEqual(inner.resetCalls, 1)
    }

    func testEOFBeforeTheAnswerIsToldApart() {
        let s = make(connected: true)
        inner.incoming = Array("+".utf8)
        inner.eof = true
        XCTAssertEqual(read(s).0, .failed(.other(ECONNRESET)))
        XCTAssertTrue(s.cutByEOF)
        XCTAssertEqual(s.answerBytes, 1)
        inner = TestStream(readInterest: true)
        let t = make(connected: false)
        XCTAssertFalse(t.cutByEOF)
        t.reset()
        XCTAssertEqual(owner.calls.last, "reset connected=false failed=false", "reset while connecting")
        loop.advance(by: 50)
        XCTAssertEqual(write(t, [1]), -1)
    }
}
