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
    private var answer = PreambleReader(capacity: 16)
    private var wantsReads = true
    private var done = false

    /// Nil when the OPEN cannot be encoded (a name the codec refuses).
    init?(flow: QuicFlow, destination: Destination, events: ByteStreamEvents, holder: HolderOutbound) {
        inner = flow
        self.events = events
        self.holder = holder
        guard let bytes = FlowPreamble.open(destination) else { return nil }
        flow.events = self
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

    func streamConnected(_: ByteStream) {}

    func streamFailed(_: ByteStream, _ failure: FlowFailure) {
        finish()
        events?.streamFailed(self, failure)
    }

    func streamReadable(_: ByteStream) {
        guard answered else { readAnswer(); return }
        events?.streamReadable(self)
    }

    func streamWritable(_: ByteStream) { events?.streamWritable(self) }

    /// OPEN_OK or OPEN_FAIL from the front (FlowPreamble), read exactly: what follows is the
    /// flow's own bytes.
    private func readAnswer() {
        while !answered && !done {
            switch answer.parse(FlowPreamble.parseAnswer) {
            case .accepted:
                answered = true
                inner.setReadInterest(wantsReads)
                events?.streamConnected(self)
                return
            case .refused(let reason):
                fail(reason.flowFailure)
                return
            case .malformed(let e):
                Log.warn("holder.flow-protocol-error", ["error": e.description])
                fail(.other(EPROTO))
                return
            case .needMore(let need):
                switch answer.read(need, from: inner) {
                case .data: break
                case .wouldBlock: return
                case .eof: fail(.other(ECONNRESET)); return
                case .failed(let f): fail(f); return
                }
            }
        }
    }

    private func fail(_ f: FlowFailure) {
        guard !done else { return }
        inner.reset()
        finish()
        events?.streamFailed(self, f)
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

    func writeSpace(max: Int) -> UnsafeMutableRawBufferPointer? { inner.writeSpace(max: max) }

    func commitWrite(_ n: Int) {
        inner.commitWrite(n)
        if n > 0 { holder?.countUp(n) }
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
