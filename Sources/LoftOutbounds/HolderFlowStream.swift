import Glibc
import LoftCarriers
import LoftCore
import LoftProtocol

/// A TCP flow of the holder on a QUIC stream of its own (the quic carrier, docs/protocol.md
/// §1.2): the OPEN frame goes first, the front's OPEN_OK or OPEN_FAIL comes first, then raw
/// bytes both ways. Wraps the carrier's `QuicFlow`, whose events it takes until the answer is
/// in; from then on it passes everything through.
final class HolderFlowStream: ByteStream, ByteStreamEvents {
    weak var events: ByteStreamEvents?
    private let inner: QuicFlow
    private weak var holder: HolderOutbound?
    private var answered = false
    private var answer = [UInt8](repeating: 0, count: 9)
    private var answerCount = 0
    private var wantsReads = true
    private var done = false

    /// Nil when the OPEN cannot be encoded (a name the codec refuses).
    init?(flow: QuicFlow, destination: Destination, events: ByteStreamEvents, holder: HolderOutbound) {
        inner = flow
        self.events = events
        self.holder = holder
        var q = ByteQueue()
        do {
            try FrameEncoder.encode(.open(stream: 1, network: .tcp, destination: destination), into: &q)
        } catch {
            return nil
        }
        flow.events = self
        let bytes = q.withUnsafeReadableBytes { [UInt8]($0) }
        let wrote = bytes.withUnsafeBytes { b -> Int in
            var v = iovec(iov_base: UnsafeMutableRawPointer(mutating: b.baseAddress!), iov_len: b.count)
            return flow.write(&v, count: 1)
        }
        guard wrote == bytes.count else {
            flow.reset()
            return nil
        }
    }

    // MARK: the flow's events

    func streamConnected() {}

    func streamFailed(_ failure: FlowFailure) {
        finish()
        events?.streamFailed(failure)
    }

    func streamReadable() {
        guard answered else { readAnswer(); return }
        events?.streamReadable()
    }

    func streamWritable() { events?.streamWritable() }

    /// OPEN_OK (8 bytes) or OPEN_FAIL (9) from the front, read exactly: what follows is the
    /// flow's own bytes.
    private func readAnswer() {
        while !answered && !done {
            let need = answerCount < 8 ? 8 - answerCount : 9 - answerCount
            let r = answer.withUnsafeMutableBytes { b in
                inner.read(into: UnsafeMutableRawBufferPointer(rebasing: b[answerCount..<answerCount + need]))
            }
            switch r {
            case .data(let n):
                answerCount += n
                if answerCount == 8 && answer[0] == 0x11 && answer[1...7] == [0, 0, 0, 0, 1, 0, 0] {
                    answered = true
                    inner.setReadInterest(wantsReads)
                    holder?.flowAnswered(ok: true)
                    events?.streamConnected()
                    return
                }
                if answerCount == 9 && answer[0] == 0x12 && answer[1...7] == [0, 0, 0, 0, 1, 0, 1] && answer[8] != 0 {
                    let reason = OpenFailReason(rawValue: answer[8])
                    holder?.flowAnswered(ok: false)
                    fail(reason.flowFailure)
                    return
                }
                if answerCount >= 8 && !(answer[0] == 0x12 && answerCount == 8) {
                    Log.warn("holder.flow-protocol-error", ["answer": answer.prefix(answerCount).map { String($0, radix: 16) }.joined(separator: " ")])
                    fail(.other(EPROTO))
                    return
                }
            case .wouldBlock:
                return
            case .eof:
                fail(.other(ECONNRESET))
                return
            case .failed(let f):
                fail(f)
                return
            }
        }
    }

    private func fail(_ f: FlowFailure) {
        guard !done else { return }
        inner.reset()
        finish()
        events?.streamFailed(f)
    }

    private func finish() {
        done = true
    }

    // MARK: ByteStream

    var writeRoom: Int { inner.writeRoom }

    func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        let n = inner.write(segments, count: count)
        if n > 0 { holder?.countUp(n) }
        return n
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        guard answered else { return .wouldBlock }
        let r = inner.read(into: buffer)
        if case .data(let n) = r { holder?.countDown(n) }
        return r
    }

    func setReadInterest(_ on: Bool) {
        wantsReads = on
        if answered { inner.setReadInterest(on) }
    }

    func shutdownWrite() { inner.shutdownWrite() }

    func close() {
        finish()
        inner.close()
    }

    func reset() {
        finish()
        inner.reset()
    }
}
