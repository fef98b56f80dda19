import Glibc
import LoftCore
import LoftQUIC

/// A carrier that carries each TCP flow on a stream of its own (quic): the holder opens one
/// per flow; on the front the carrier's delegate gets `carrier(_:flowOpened:)`.
public protocol FlowCarrier: AnyObject {
    /// A new bidirectional stream for one flow; nil when the peer allows no more streams now.
    func openFlow() -> QuicFlow?
}

/// One QUIC stream of a quic carrier (h3: one request stream's body) as a byte stream: raw bytes both ways, FIN as the
/// stream's FIN, `reset` as RESET_STREAM + STOP_SENDING. Who opens it first writes (client) or
/// reads (front) the loft OPEN frame and its answer; the carrier knows nothing of them.
public final class QuicFlow: ByteStream {
    public weak var events: ByteStreamEvents?
    weak var carrier: QuicCarrierBase?
    public let id: Int64
    private var readInterest = true
    private var missedReadable = false
    private var finished = false

    init(carrier: QuicCarrierBase, id: Int64) {
        self.carrier = carrier
        self.id = id
    }

    private var quic: QuicFlowLayer? { finished ? nil : carrier?.streams }

    // MARK: from the carrier

    func readable() {
        if readInterest { events?.streamReadable(self) } else { missedReadable = true }
    }

    func writable() { events?.streamWritable(self) }

    /// Reset by the peer, or the connection is gone.
    func failed(_ f: FlowFailure) {
        guard !finished else { return }
        finished = true
        let e = events
        events = nil
        e?.streamFailed(self, f)
    }

    // MARK: ByteStream

    public var writeRoom: Int { quic?.writeRoom(id) ?? 0 }

    public func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard let q = quic else { return -1 }
        var total = 0
        for i in 0..<count {
            let seg = segments[i]
            guard let base = seg.iov_base, seg.iov_len > 0 else { continue }
            let n = q.write(id, UnsafeRawBufferPointer(start: base, count: seg.iov_len))
            total += n
            if n < seg.iov_len { break }
        }
        return total
    }

    /// The stream's send ring in place: the splice reads a socket straight into it.
    public func writeSpace(max: Int) -> UnsafeMutableRawBufferPointer? {
        guard let q = quic else { return nil }
        return q.writeSpace(id, max: max)
    }

    public func commitWrite(_ n: Int) { quic?.commitWrite(id, n) }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        guard let q = quic else { return .failed(.other(ECONNRESET)) }
        let (n, eof) = q.read(id, into: buffer)
        if n > 0 { return .data(n) }
        return eof ? .eof : .wouldBlock
    }

    /// The received bytes in place: the splice writes them straight to the other side and
    /// then consumes what was taken (no copy through its buffer).
    public func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        guard let q = quic else { return .failed(.other(ECONNRESET)) }
        let (n, eof) = q.peek(id, iov, max: max, count: &count)
        if n > 0 { return .data(n) }
        return eof ? .eof : .wouldBlock
    }

    public func consume(_ n: Int) { quic?.consume(id, n) }

    public func setReadInterest(_ on: Bool) {
        readInterest = on
        if on && missedReadable {
            missedReadable = false
            carrier?.soon { [weak self] in self?.readable() }
        }
    }

    public func shutdownWrite() { quic?.finish(id) }

    public func close() {
        guard !finished else { return }
        quic?.finish(id)
        quic?.release(id)
        finished = true
        events = nil
        carrier?.forgetFlow(self)
    }

    public func reset() {
        guard !finished else { return }
        quic?.reset(id, code: 0x102)
        finished = true
        events = nil
        carrier?.forgetFlow(self)
    }
}
