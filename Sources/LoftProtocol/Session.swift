import LoftCore

/// What one session may hold. Both ends use the same limits type.
public struct SessionLimits: Sendable {
    /// Open TCP streams plus UDP associations. A stream stops counting once FIN went both
    /// ways (or on RST / OPEN_FAIL), at the same moment on both ends.
    public var maxStreams: Int = 1024
    /// Receive window per stream: the most bytes a stream ever buffers unread. Values below
    /// `LoftWire.initialStreamWindow` are raised to it (the peer may always send that much).
    public var streamWindow: UInt32 = LoftWire.initialStreamWindow
    /// Session output queue bound: DATA writes refuse beyond it (control frames still go).
    public var maxOutputBytes: Int = 4 << 20
    /// DGRAMs are dropped (counted), never queued while the output holds more than this.
    public var maxDatagramQueue: Int = 1 << 20
    /// Received bytes waiting to be read across the whole session; a peer that pushes past it
    /// is a protocol error (`bufferLimit`). nil: maxStreams × streamWindow, which a peer that
    /// honours credit can never exceed.
    public var maxBufferedBytes: Int?
    /// Offer (client) or accept (front) stream replay across carriers (docs/protocol.md §8.1).
    public var replay: Bool = false
    /// Replay: sent bytes kept until the peer acknowledges them, plus bytes not yet sent; writes
    /// stall at this bound. Raised to `maxOutputBytes` if lower.
    public var maxReplayBytes: Int = 16 << 20

    public init(maxStreams: Int = 1024, streamWindow: UInt32 = LoftWire.initialStreamWindow,
                maxOutputBytes: Int = 4 << 20, maxDatagramQueue: Int = 1 << 20, maxBufferedBytes: Int? = nil,
                replay: Bool = false, maxReplayBytes: Int = 16 << 20) {
        self.maxStreams = maxStreams; self.streamWindow = streamWindow; self.maxOutputBytes = maxOutputBytes
        self.maxDatagramQueue = maxDatagramQueue; self.maxBufferedBytes = maxBufferedBytes
        self.replay = replay; self.maxReplayBytes = maxReplayBytes
    }
}

/// Totals over the session's life (they survive detach/attach).
public struct SessionCounters: Sendable, Equatable {
    public var framesIn: UInt64 = 0
    public var framesOut: UInt64 = 0
    /// Carrier bytes: given to receive() / taken by withOutput().
    public var bytesIn: UInt64 = 0
    public var bytesOut: UInt64 = 0
    /// DATA payload bytes.
    public var dataBytesIn: UInt64 = 0
    public var dataBytesOut: UInt64 = 0
    public var datagramsIn: UInt64 = 0
    public var datagramsOut: UInt64 = 0
    /// DGRAMs not sent: output over maxDatagramQueue, too big, or no such association.
    public var datagramsDropped: UInt64 = 0
    /// quic: DGRAMs that arrived as QUIC DATAGRAMs for an association not open on this end
    /// (they crossed its OPEN, OPEN_OK or RST on the stream), dropped.
    public var datagramsIgnored: UInt64 = 0
    /// OPENs sent (client) or received (front).
    public var streamsOpened: UInt64 = 0
    /// RSTs sent and received.
    public var streamsReset: UInt64 = 0
    public var pingsSent: UInt64 = 0
    public var pongsReceived: UInt64 = 0
    /// Replay (§8.1): session bytes sent again after a RESUME because the peer had not got them.
    public var replayedBytes: UInt64 = 0
    /// Replay: attachments that continued the session's streams.
    public var streamsContinued: UInt64 = 0
    public var acksSent: UInt64 = 0
    public init() {}
}

public enum StreamRead: Equatable, Sendable { case data(Int), wouldBlock, eof }

enum SessionRole { case client, front }

/// What the engine tells the session object that owns it.
protocol SessionEngineHost: AnyObject {
    /// Before any frame: true to process, false to drop it silently; throws if not allowed now.
    func engineGate(_ type: FrameType) throws(ProtocolError) -> Bool
    /// HELLO, RESUME, STATUS, GOAWAY.
    func engineSessionFrame(_ frame: Frame) throws(ProtocolError)
    func engineStreamRequested(_ id: UInt32, _ network: FlowNetwork, _ destination: Destination)
    func engineStreamOpened(_ id: UInt32)
    func engineStreamOpenFailed(_ id: UInt32, _ reason: OpenFailReason)
    func engineReadable(_ id: UInt32)
    func engineWritable(_ id: UInt32)
    func engineReset(_ id: UInt32, _ reason: RstReason)
    func engineDatagram(_ id: UInt32, _ remote: Destination, _ payload: UnsafeRawBufferPointer)
    func engineOutputReady()
}

/// The machinery both ends share: its state and output are here; frame dispatch is in
/// SessionInput.swift, the stream table and flow control in SessionStreams.swift, keepalive in
/// SessionKeepalive.swift.
final class SessionEngine {
    let role: SessionRole
    let limits: SessionLimits
    /// Receive window per stream (never below the initial window).
    let window: UInt32
    let maxBuffered: Int
    weak var host: SessionEngineHost?

    var output = ByteQueue()
    var streams: [UInt32: StreamState] = [:]
    /// Highest stream id opened on this attachment; frames for lower ids that are gone are
    /// late frames of a race (RST, OPEN_FAIL) and are dropped.
    var highestID: UInt32 = 0
    var nextID: UInt32 = 1
    var liveCount = 0
    var bufferedTotal = 0
    var maxStreamsAllowed: Int
    var failed = false
    var ignoringInput = false
    /// Bumped by reset(); a frame handler that detached the session stops the input loop.
    var generation = 0
    var counters = SessionCounters()
    var queuedSinceSignal = false
    var anyOutputBlocked = false

    /// One incomplete frame, kept across receive() calls. Allocated once, at most one frame.
    var partial: UnsafeMutableRawPointer?
    var partialCount = 0
    /// The DATA frame whose body is being received piece by piece (stream 0: dropped).
    var dataStream: UInt32 = 0
    var dataRemaining = 0
    var dataLength = 0

    var keepaliveMs: UInt64 = 0
    var pingEnabled = false
    var lastHeard: UInt64?
    var heardSinceTick = false
    var lastPingAt: UInt64?
    var pingSeq: UInt64 = 0
    var pingOutstanding: (value: UInt64, at: UInt64)?
    var pongUnresolved = false
    var rttMs: UInt64?
    var receiveNow: UInt64?

    /// Carriers with datagrams of their own (quic): each DGRAM frame, header included, is
    /// offered here first; a false (too big for one datagram) sends it in the output instead.
    var datagramSink: ((UnsafeRawBufferPointer) -> Bool)?
    var datagramScratch = ByteQueue()

    // Replay (SessionReplay.swift, docs/protocol.md §8.1). `output` holds, in order, the bytes
    // sent but not acknowledged (`sentCount` of them, kept while `retaining`) and the bytes not
    // sent yet; `outBase` is the session offset of its first byte.
    var retaining = false
    var replay = false
    var sentCount = 0
    /// Older pieces of the output, sent in full and kept until acknowledged (oldest first),
    /// `keptBytes` in all: a fully sent output of `segmentBytes` or more is moved here whole
    /// and a fresh one takes the writes, so what is kept is never moved or copied.
    var kept: [ByteQueue] = []
    var keptBytes = 0
    /// An emptied piece, for the next one (its storage reused).
    var spares: [ByteQueue] = []
    var outBase: UInt64 = 0
    /// The peer's session bytes received (counted while `countingInput`) and the last ACK sent.
    var inOffset: UInt64 = 0
    var ackSent: UInt64 = 0
    /// The last ACK received (ACKs never go down).
    var lastAck: UInt64 = 0
    /// Bytes of ACK frames among those received since the last ACK sent: ACKs alone are not
    /// acknowledged at a tick (two idle ends would trade ACKs of ACKs every second).
    var ackOnlySince: UInt64 = 0
    var countingInput = false
    var streamStartPending = false
    /// Handshake frames (HELLO, RESUME, the STATUS answering them): sent before `output`,
    /// never part of the session's byte stream.
    var preamble = ByteQueue()
    /// The stream part of the output waits (client: until the STATUS of a continuing RESUME).
    var outputHeld = false
    /// No carrier; the streams are kept for a RESUME: writes take nothing, datagrams drop.
    var parked = false
    /// The client's input parser state while the handshake of a continuing RESUME is parsed.
    var stash: (partial: [UInt8], stream: UInt32, remaining: Int, length: Int)?
    let maxReplay: Int
    /// A fully sent output at least this large is kept aside whole (`kept`): 1 MiB, or a
    /// quarter of the replay bound if that is less.
    let segmentBytes: Int

    /// PONGs may push the output this far past maxOutputBytes before the peer is cut off.
    static let controlSlack = 64 << 10

    init(role: SessionRole, limits: SessionLimits) {
        self.role = role
        self.limits = limits
        maxReplay = max(limits.maxReplayBytes, limits.maxOutputBytes)
        segmentBytes = min(1 << 20, maxReplay / 4)
        window = max(limits.streamWindow, LoftWire.initialStreamWindow)
        maxBuffered = limits.maxBufferedBytes ?? limits.maxStreams.multipliedReportingOverflow(by: Int(window)).partialValue
        maxStreamsAllowed = limits.maxStreams
    }

    deinit { partial?.deallocate() }

    /// A new attachment (client detach/attach): everything per-carrier is forgotten.
    func reset() {
        generation += 1
        streams.removeAll()
        highestID = 0; nextID = 1; liveCount = 0; bufferedTotal = 0
        output.removeAll()
        partialCount = 0
        dataRemaining = 0
        failed = false; anyOutputBlocked = false; queuedSinceSignal = false
        resetKeepalive()
        resetReplay()
    }

    func resetKeepalive() {
        keepaliveMs = 0; pingEnabled = false
        lastHeard = nil; heardSinceTick = false; lastPingAt = nil; pingOutstanding = nil; pongUnresolved = false
    }

    // MARK: output

    func queue(_ frame: Frame) throws(ProtocolError) {
        try FrameEncoder.encode(frame, into: &output)
        counters.framesOut += 1
        queuedSinceSignal = true
    }

    /// For frames built here from checked values: encoding cannot fail.
    func queueControl(_ frame: Frame) {
        do { try queue(frame) } catch { assertionFailure("unencodable control frame \(frame): \(error)") }
    }

    /// Tells the host once per public call that bytes were queued.
    func signal() {
        if queuedSinceSignal {
            queuedSinceSignal = false
            host?.engineOutputReady()
        }
    }

    /// Bytes queued and not yet handed to the carrier (handshake frames included).
    var unsentCount: Int { preamble.count + (outputHeld ? 0 : output.count - sentCount) }

    /// What a write may still queue: the output bound over the unsent bytes, and with replay
    /// the replay bound over everything kept.
    @inline(__always) var outputRoom: Int {
        let room = limits.maxOutputBytes - (output.count - sentCount)
        return retaining ? min(room, maxReplay - keptBytes - output.count) : room
    }

    func withOutput(_ body: (UnsafeRawBufferPointer) -> Int) {
        if !preamble.isEmpty { withPreamble(body); return }
        guard output.count > sentCount, !outputHeld else { return }
        // With replay the bytes stay where they are until the peer acknowledges them.
        let n = Self.hand(&output, from: sentCount, keeping: retaining, to: body)
        if retaining { sentCount += n }
        counters.bytesOut += UInt64(n)
        if retaining && sentCount == output.count && sentCount >= segmentBytes { keepSentOutput() }
        unblockStreams()
        signal()
    }

    /// Streams whose write was cut short by the output (or replay) bound hear `streamWritable`
    /// once there is room for half the output bound again.
    func unblockStreams() {
        if anyOutputBlocked && !parked && outputRoom > limits.maxOutputBytes / 2 {
            anyOutputBlocked = false
            for s in streams.values where s.outputBlocked && streams[s.id] === s {
                s.outputBlocked = false
                host?.engineWritable(s.id)
            }
        }
    }

    private func withPreamble(_ body: (UnsafeRawBufferPointer) -> Int) {
        counters.bytesOut += UInt64(Self.hand(&preamble, from: 0, keeping: false, to: body))
        signal()
    }

    /// Hands `queue`'s bytes from `start` to `body` and returns how many it took, consumed
    /// unless `keeping`. The queue is swapped out meanwhile, so a body that calls back into the
    /// session and queues more cannot collide with it; what was queued so is appended after.
    @inline(__always)
    private static func hand(_ queue: inout ByteQueue, from start: Int, keeping: Bool,
                             to body: (UnsafeRawBufferPointer) -> Int) -> Int {
        var q = ByteQueue()
        swap(&q, &queue)
        let taken = q.withUnsafeReadableBytes { body(UnsafeRawBufferPointer(rebasing: $0[start...])) }
        let n = max(0, min(taken, q.count - start))
        if !keeping { q.consume(n) }
        if !queue.isEmpty {
            queue.withUnsafeReadableBytes { q.append($0) }
            queue.removeAll(keepingCapacity: true)
        }
        swap(&q, &queue)
        return n
    }

    /// Error path: GOAWAY goes out before the caller sees the throw.
    func fail(_ error: ProtocolError) {
        failed = true
        let reason: GoAwayReason
        if case .unsupportedVersion = error { reason = .unsupportedVersion } else { reason = .protocolError }
        queueControl(.goaway(reason: reason, text: Self.clip(error.description)))
    }

    static func clip(_ text: String) -> String {
        var t = text
        while t.utf8.count > LoftWire.maxGoAwayText { t.removeLast() }
        return t
    }
}
