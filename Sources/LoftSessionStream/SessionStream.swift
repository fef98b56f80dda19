import Glibc
import LoftCore
import LoftIO
import LoftProtocol

/// Told when one of its streams ends from its own side (close, reset), so its table forgets it.
public protocol SessionStreamOwner: AnyObject {
    func sessionStreamEnded(_ stream: SessionStream)
}

/// Bytes the streams of one session carried (the holder's status counts them).
public final class SessionStreamMeter {
    public var bytesUp: UInt64 = 0
    public var bytesDown: UInt64 = 0
    public init() {}
}

/// One TCP stream of a loft session as a byte stream: the holder's flows (`.client`) and the
/// front's relays (`.front`) both end in one. It talks to the session itself (DATA, CREDIT,
/// FIN, RST); the session's owner moves the session's output to the carrier when the session
/// says it has some. The sides differ only where the two ends always did:
/// - the client's stream exists before its OPEN (`id` nil while it waits for the session),
///   hears OPEN_OK (`connected`) or OPEN_FAIL (`fail`), and tells its events from the loop,
///   never from inside the session's callback; closing one not finished both ways is RST
///   connection-reset; it reports its room as unknown (`writeRoom` Int.max);
/// - the front's stream is made once its OPEN is answered, tells `streamReadable` at once,
///   reports its credit as its `writeRoom`, and closing it is the session's close (RST
///   cancel unless finished both ways).
public final class SessionStream: ByteStream {
    public enum Side: Sendable { case client, front }

    public weak var events: ByteStreamEvents?
    public let side: Side
    public let destination: Destination
    /// Its id on the session: nil while it waits for the session (client), and once it is gone.
    public var id: UInt32?
    private unowned let session: SessionEnd
    private let loop: EventLoop
    private weak var owner: SessionStreamOwner?
    private let meter: SessionStreamMeter?
    private var readInterest = true
    /// OPEN_OK arrived: until then a lost stream fails instead of turning readable.
    private var isConnected = false
    /// The session had something (data, FIN) while read interest was off.
    private var missedReadable = false
    private var failure: FlowFailure?
    private var sawEOF = false
    private var finSent = false
    public private(set) var isDone = false
    private var notifyScheduled = false

    public init(side: Side, session: SessionEnd, id: UInt32?, destination: Destination, loop: EventLoop,
                events: ByteStreamEvents?, owner: SessionStreamOwner? = nil, meter: SessionStreamMeter? = nil) {
        self.side = side
        self.session = session
        self.id = id
        self.destination = destination
        self.loop = loop
        self.events = events
        self.owner = owner
        self.meter = meter
    }

    // MARK: from the session

    /// OPEN_OK (client).
    public func connected() {
        isConnected = true
        events?.streamConnected(self)
    }

    /// Never connected: the flow fails (an RST or ICMP for the app).
    public func fail(_ f: FlowFailure) {
        guard !isDone else { return }
        isDone = true
        events?.streamFailed(self, f)
    }

    public func failSoon(_ f: FlowFailure) {
        loop.soon { [weak self] in self?.fail(f) }
    }

    /// Was connected, now gone (RST from the front, or the carrier was lost).
    public func lost(_ f: FlowFailure) {
        id = nil
        guard !isDone else { return }
        // Its OPEN was never answered: the app is still connecting and waits for streamFailed.
        guard isConnected else { fail(f); return }
        failure = f
        notify()
    }

    /// Front: the stream is gone from the session (reset by the client, or the session ended);
    /// no reset goes back, and nothing more is told.
    public func abandon() {
        id = nil
        failure = .other(ECONNRESET)
        events = nil
    }

    /// DATA or FIN arrived.
    public func readable() {
        guard readInterest else { missedReadable = true; return }
        if side == .front { events?.streamReadable(self) } else { notify() }
    }

    /// Credit grew, or the session's output drained.
    public func writable() { events?.streamWritable(self) }

    /// streamReadable (or the loss) from the loop, not from inside a session callback.
    private func notify() {
        guard !notifyScheduled else { return }
        notifyScheduled = true
        loop.soon(notifyAction)
    }

    /// Made once: scheduling it per DATA frame then allocates nothing. A lost stream is one
    /// streamFailed, whether or not reads are wanted.
    private lazy var notifyAction: () -> Void = { [weak self] in
        guard let self else { return }
        self.notifyScheduled = false
        guard !self.isDone else { return }
        if let f = self.failure {
            self.isDone = true
            self.events?.streamFailed(self, f)
        } else if self.readInterest {
            self.events?.streamReadable(self)
        }
    }

    // MARK: ByteStream

    public var writeRoom: Int {
        guard side == .front, let id else { return Int.max }
        return session.writableBytes(stream: id)
    }

    public func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard failure == nil, !isDone, let id else { return -1 }
        var total = 0
        for i in 0..<count {
            let seg = segments[i]
            guard let base = seg.iov_base, seg.iov_len > 0 else { continue }
            let n = session.write(stream: id, UnsafeRawBufferPointer(start: base, count: seg.iov_len))
            total += n
            if n < seg.iov_len { break }
        }
        if total > 0, let meter { meter.bytesUp &+= UInt64(total) }
        return total
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        if let failure { return .failed(failure) }
        if sawEOF { return .eof }
        guard let id else { return .wouldBlock }
        switch session.read(stream: id, into: buffer) {
        case .data(let n):
            if let meter { meter.bytesDown &+= UInt64(n) }
            return .data(n)
        case .wouldBlock: return .wouldBlock
        case .eof: sawEOF = true; return .eof
        }
    }

    public func setReadInterest(_ on: Bool) {
        readInterest = on
        guard on else { return }
        // Client: a FIN that came while off leaves no bytes behind, only the flag.
        if missedReadable || (side == .client && (failure != nil || id.map { session.readableBytes(stream: $0) > 0 } == true)) {
            missedReadable = false
            notify()
        }
    }

    public func shutdownWrite() {
        guard !finSent else { return }
        finSent = true
        if let id { session.finish(stream: id) }
    }

    public func close() {
        guard !isDone else { return }
        isDone = true
        end(reset: side == .client && !(sawEOF && finSent))
    }

    public func reset() {
        guard !isDone else { return }
        isDone = true
        end(reset: true)
    }

    private func end(reset: Bool) {
        owner?.sessionStreamEnded(self)
        guard let id else { return }
        self.id = nil
        if reset { session.reset(stream: id, reason: .connectionReset) } else { session.close(stream: id) }
    }
}
