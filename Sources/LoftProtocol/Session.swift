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

    public init(maxStreams: Int = 1024, streamWindow: UInt32 = LoftWire.initialStreamWindow,
                maxOutputBytes: Int = 4 << 20, maxDatagramQueue: Int = 1 << 20, maxBufferedBytes: Int? = nil) {
        self.maxStreams = maxStreams; self.streamWindow = streamWindow; self.maxOutputBytes = maxOutputBytes
        self.maxDatagramQueue = maxDatagramQueue; self.maxBufferedBytes = maxBufferedBytes
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
    public init() {}
}

public enum StreamRead: Equatable, Sendable { case data(Int), wouldBlock, eof }

enum SessionRole { case client, front }

final class StreamState {
    enum Phase { case opening, open }
    let id: UInt32
    let network: FlowNetwork
    /// Client: OPEN sent, no answer yet. Front: OPEN received, not yet accepted.
    var phase: Phase = .opening
    var recv = ByteQueue()
    /// Bytes the peer may still send before it needs more CREDIT.
    var recvAllowance: UInt32 = LoftWire.initialStreamWindow
    /// Read since the last CREDIT this side sent.
    var consumedSinceGrant: UInt32 = 0
    var sendCredit: UInt64 = UInt64(LoftWire.initialStreamWindow)
    var localFin = false
    var remoteFin = false
    /// Counts toward maxStreams.
    var live = true
    /// A write or writableBytes was cut short by the output bound.
    var outputBlocked = false
    /// Bytes arrived since the last tick; a stream quiet for a whole tick gives its receive
    /// storage back, so idle flows hold no buffer however much they carried before.
    var recvTouched = false

    init(id: UInt32, network: FlowNetwork) { self.id = id; self.network = network }
}

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

/// The machinery both ends share: frame assembly, streams, credit, output, keepalive.
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
    private var partial: UnsafeMutableRawPointer?
    private var partialCount = 0
    /// The DATA frame whose body is being received piece by piece (stream 0: dropped).
    private var dataStream: UInt32 = 0
    private var dataRemaining = 0
    private var dataLength = 0

    var keepaliveMs: UInt64 = 0
    var pingEnabled = false
    var lastHeard: UInt64?
    var heardSinceTick = false
    var lastPingAt: UInt64?
    var pingSeq: UInt64 = 0
    var pingOutstanding: (value: UInt64, at: UInt64)?
    var pongUnresolved = false
    var rttMs: UInt64?
    private var receiveNow: UInt64?

    /// PONGs may push the output this far past maxOutputBytes before the peer is cut off.
    static let controlSlack = 64 << 10

    init(role: SessionRole, limits: SessionLimits) {
        self.role = role
        self.limits = limits
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

    func withOutput(_ body: (UnsafeRawBufferPointer) -> Int) {
        guard !output.isEmpty else { return }
        // Swapped out so a body that calls back into the session cannot collide with it.
        var q = ByteQueue()
        swap(&q, &output)
        let taken = q.withUnsafeReadableBytes { body($0) }
        let n = max(0, min(taken, q.count))
        q.consume(n)
        counters.bytesOut += UInt64(n)
        if !output.isEmpty {
            output.withUnsafeReadableBytes { q.append($0) }
            output.removeAll(keepingCapacity: true)
        }
        swap(&q, &output)
        if anyOutputBlocked && output.count < limits.maxOutputBytes / 2 {
            anyOutputBlocked = false
            for s in streams.values where s.outputBlocked && streams[s.id] === s {
                s.outputBlocked = false
                host?.engineWritable(s.id)
            }
        }
        signal()
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

    // MARK: input

    func receive(_ bytes: UnsafeRawBufferPointer, now: UInt64?) throws(ProtocolError) {
        guard !failed, !ignoringInput, !bytes.isEmpty else { return }
        counters.bytesIn += UInt64(bytes.count)
        if let now { lastHeard = now; heardSinceTick = false } else { heardSinceTick = true }
        receiveNow = now
        do {
            try consume(bytes)
        } catch {
            fail(error)
            signal()
            throw error
        }
        signal()
    }

    /// One DGRAM frame that arrived outside the byte channel (a QUIC DATAGRAM): exactly one
    /// frame, header included; anything else is a protocol error, as in the channel.
    func receiveDatagram(_ bytes: UnsafeRawBufferPointer, now: UInt64?) throws(ProtocolError) {
        guard !failed, !ignoringInput else { return }
        counters.bytesIn += UInt64(bytes.count)
        if let now { lastHeard = now; heardSinceTick = false } else { heardSinceTick = true }
        do throws(ProtocolError) {
            let hs = LoftWire.headerSize
            guard bytes.count >= hs else { throw .truncatedBody(.dgram) }
            let h = try WireFormat.parseHeader(UnsafeRawBufferPointer(rebasing: bytes[0..<hs]))
            guard h.type == .dgram else { throw .unexpectedFrame(h.type) }
            guard h.length == bytes.count - hs else { throw .badLength(.dgram, bytes.count - hs) }
            // Datagrams are not ordered with the stream: one for an association this end does
            // not hold (not yet, or no more) crossed its OPEN or RST, and is dropped. The client
            // takes one that overtook the OPEN_OK: the front sends DGRAMs only once it accepted.
            guard let st = streams[h.stream] else {
                counters.datagramsIgnored += 1
                return
            }
            counters.framesIn += 1
            guard let host, try host.engineGate(.dgram) else { return }
            var r = BodyReader(UnsafeRawBufferPointer(rebasing: bytes[hs...]), .dgram)
            let remote = try r.destination()
            if st.network != .udp { throw .wrongNetwork(.dgram, h.stream) }
            counters.datagramsIn += 1
            host.engineDatagram(h.stream, remote, r.rest())
        } catch {
            fail(error)
            signal()
            throw error
        }
        signal()
    }

    func carrierEnded() throws(ProtocolError) {
        guard !failed && !ignoringInput else { return }
        if dataRemaining > 0 { throw .incompleteFrame(buffered: LoftWire.headerSize + dataLength - dataRemaining) }
        if partialCount > 0 { throw .incompleteFrame(buffered: partialCount) }
    }

    private var stopped: Bool { failed || ignoringInput }

    private func consume(_ input: UnsafeRawBufferPointer) throws(ProtocolError) {
        var rest = input
        let hs = LoftWire.headerSize
        if dataRemaining > 0 {
            let gen = generation
            rest = try continueData(rest)
            if dataRemaining > 0 || rest.isEmpty || stopped || gen != generation { return }
        }
        if partialCount > 0 {
            let buf = partial!
            if partialCount < hs {
                let take = min(hs - partialCount, rest.count)
                (buf + partialCount).copyMemory(from: rest.baseAddress!, byteCount: take)
                partialCount += take
                rest = UnsafeRawBufferPointer(rebasing: rest[take...])
                if partialCount < hs { return }
            }
            let h = try WireFormat.parseHeader(UnsafeRawBufferPointer(start: buf, count: hs))
            let gen = generation
            if h.type == .data {
                // The body goes straight to the stream from here on, never through `partial`.
                partialCount = 0
                try beginData(h)
                if gen != generation || stopped { return }
                rest = try continueData(rest)
                if dataRemaining > 0 || stopped || gen != generation { return }
            } else {
                let total = hs + h.length
                let take = min(total - partialCount, rest.count)
                if take > 0 {
                    (buf + partialCount).copyMemory(from: rest.baseAddress!, byteCount: take)
                    partialCount += take
                    rest = UnsafeRawBufferPointer(rebasing: rest[take...])
                }
                if partialCount < total { return }
                partialCount = 0
                try handle(h, UnsafeRawBufferPointer(start: buf + hs, count: h.length))
                if gen != generation || stopped { return }
            }
        }
        while rest.count >= hs {
            let h = try WireFormat.parseHeader(rest)
            let total = hs + h.length
            let gen = generation
            guard rest.count >= total else {
                if h.type == .data {
                    try beginData(h)
                    if gen != generation || stopped { return }
                    _ = try continueData(UnsafeRawBufferPointer(rebasing: rest[hs...]))
                    return
                }
                break
            }
            // Straight from the caller's bytes: DATA is copied once, into the stream's queue.
            try handle(h, UnsafeRawBufferPointer(rebasing: rest[hs..<total]))
            if gen != generation || stopped { return }
            rest = UnsafeRawBufferPointer(rebasing: rest[total...])
        }
        if !rest.isEmpty {
            if partial == nil {
                partial = UnsafeMutableRawPointer.allocate(byteCount: LoftWire.maxFrameSize, alignment: 8)
            }
            partial!.copyMemory(from: rest.baseAddress!, byteCount: rest.count)
            partialCount = rest.count
        }
    }

    /// A DATA frame whose body is still arriving: checked (and its credit taken) on the header.
    private func beginData(_ h: FrameHeader) throws(ProtocolError) {
        counters.framesIn += 1
        guard let host, try host.engineGate(.data) else {
            dataStream = 0   // dropped: the body is skipped
            dataRemaining = h.length; dataLength = h.length
            return
        }
        dataStream = try admitData(h.stream, h.length)?.id ?? 0
        dataRemaining = h.length; dataLength = h.length
    }

    /// Hands the next piece of the current DATA body to its stream; returns what follows it.
    private func continueData(_ input: UnsafeRawBufferPointer) throws(ProtocolError) -> UnsafeRawBufferPointer {
        let n = min(dataRemaining, input.count)
        guard n > 0 else { return input }
        dataRemaining -= n
        // Looked up per piece: a reader may have reset the stream meanwhile (its bytes are dropped).
        if dataStream != 0, let s = streams[dataStream] {
            deliverData(s, UnsafeRawBufferPointer(rebasing: input[..<n]))
        }
        return UnsafeRawBufferPointer(rebasing: input[n...])
    }

    private func handle(_ h: FrameHeader, _ body: UnsafeRawBufferPointer) throws(ProtocolError) {
        counters.framesIn += 1
        guard let host, try host.engineGate(h.type) else { return }
        switch h.type {
        case .data:
            try onData(h.stream, body)
        case .dgram:
            var r = BodyReader(body, .dgram)
            let remote = try r.destination()
            try onDatagram(h.stream, remote, r.rest())
        default:
            let frame = try WireFormat.parseBody(h, body)
            switch frame {
            case .open(let id, let network, let destination): try onOpen(id, network, destination)
            case .openOK(let id): try onOpenOK(id)
            case .openFail(let id, let reason): try onOpenFail(id, reason)
            case .fin(let id): try onFin(id)
            case .rst(let id, let reason): try onRst(id, reason)
            case .credit(let id, let inc): try onCredit(id, inc)
            case .ping(let v): try onPing(v)
            case .pong(let v): onPong(v)
            case .hello, .resume, .status, .goaway: try host.engineSessionFrame(frame)
            case .data, .dgram: break
            }
        }
    }

    /// The stream for a frame; nil for an id that is gone (a race), a throw for one never opened.
    private func lookup(_ type: FrameType, _ id: UInt32) throws(ProtocolError) -> StreamState? {
        if let s = streams[id] { return s }
        if id <= highestID { return nil }
        throw .unopenedStream(type, id)
    }

    private func onData(_ id: UInt32, _ body: UnsafeRawBufferPointer) throws(ProtocolError) {
        guard let s = try admitData(id, body.count) else { return }
        deliverData(s, body)
    }

    /// Every DATA rule, on the header: the stream, or nil to drop the body (a race).
    private func admitData(_ id: UInt32, _ length: Int) throws(ProtocolError) -> StreamState? {
        guard let s = try lookup(.data, id) else { return nil }
        if s.network != .tcp { throw .wrongNetwork(.data, id) }
        if role == .client && s.phase == .opening { throw .unexpectedFrame(.data) }
        if s.remoteFin { throw .afterFin(.data, id) }
        if length > Int(s.recvAllowance) { throw .creditExceeded(id) }
        if bufferedTotal + length > maxBuffered { throw .bufferLimit(maxBuffered) }
        s.recvAllowance -= UInt32(length)
        counters.dataBytesIn += UInt64(length)
        return s
    }

    private func deliverData(_ s: StreamState, _ bytes: UnsafeRawBufferPointer) {
        s.recv.append(bytes)
        s.recvTouched = true
        bufferedTotal += bytes.count
        host?.engineReadable(s.id)
    }

    private func onFin(_ id: UInt32) throws(ProtocolError) {
        guard let s = try lookup(.fin, id) else { return }
        if s.network != .tcp { throw .wrongNetwork(.fin, id) }
        if role == .client && s.phase == .opening { throw .unexpectedFrame(.fin) }
        if s.remoteFin { throw .afterFin(.fin, id) }
        s.remoteFin = true
        settle(s)
        host?.engineReadable(id)
    }

    private func onRst(_ id: UInt32, _ reason: RstReason) throws(ProtocolError) {
        guard let s = try lookup(.rst, id) else { return }
        remove(s)
        counters.streamsReset += 1
        host?.engineReset(id, reason)
    }

    private func onCredit(_ id: UInt32, _ inc: UInt32) throws(ProtocolError) {
        guard let s = try lookup(.credit, id) else { return }
        if s.network != .tcp { throw .wrongNetwork(.credit, id) }
        let credit = s.sendCredit + UInt64(inc)
        if credit > UInt64(UInt32.max) { throw .creditOverflow(id) }
        s.sendCredit = credit
        if !s.localFin { host?.engineWritable(id) }
    }

    private func onDatagram(_ id: UInt32, _ remote: Destination, _ payload: UnsafeRawBufferPointer) throws(ProtocolError) {
        guard let s = try lookup(.dgram, id) else { return }
        if s.network != .udp { throw .wrongNetwork(.dgram, id) }
        if role == .client && s.phase == .opening { throw .unexpectedFrame(.dgram) }
        counters.datagramsIn += 1
        host?.engineDatagram(id, remote, payload)
    }

    private func onOpen(_ id: UInt32, _ network: FlowNetwork, _ destination: Destination) throws(ProtocolError) {
        if role == .client { throw .unexpectedFrame(.open) }
        if id & 1 == 0 || id <= highestID { throw .badNewStreamID(id) }
        if liveCount >= maxStreamsAllowed { throw .streamLimit(UInt32(clamping: maxStreamsAllowed)) }
        let s = StreamState(id: id, network: network)
        streams[id] = s
        highestID = id
        liveCount += 1
        counters.streamsOpened += 1
        host?.engineStreamRequested(id, network, destination)
    }

    private func onOpenOK(_ id: UInt32) throws(ProtocolError) {
        if role == .front { throw .unexpectedFrame(.openOK) }
        guard let s = try lookup(.openOK, id) else { return }
        if s.phase != .opening { throw .unexpectedFrame(.openOK) }
        s.phase = .open
        host?.engineStreamOpened(id)
    }

    private func onOpenFail(_ id: UInt32, _ reason: OpenFailReason) throws(ProtocolError) {
        if role == .front { throw .unexpectedFrame(.openFail) }
        guard let s = try lookup(.openFail, id) else { return }
        if s.phase != .opening { throw .unexpectedFrame(.openFail) }
        remove(s)
        host?.engineStreamOpenFailed(id, reason)
    }

    private func onPing(_ v: UInt64) throws(ProtocolError) {
        queueControl(.pong(v))
        // A peer that pings without reading the answers would grow our output forever.
        if output.count > limits.maxOutputBytes + Self.controlSlack { throw .outputOverflow(output.count) }
    }

    private func onPong(_ v: UInt64) {
        counters.pongsReceived += 1
        guard let p = pingOutstanding, p.value == v else { return }
        if let now = receiveNow {
            rttMs = now >= p.at ? now - p.at : 0
            pingOutstanding = nil
        } else {
            pongUnresolved = true   // timed at the next tick
        }
    }

    // MARK: stream bookkeeping

    private func settle(_ s: StreamState) {
        if s.live && s.localFin && s.remoteFin { s.live = false; liveCount -= 1 }
        if !s.live && s.recv.isEmpty { streams[s.id] = nil }
    }

    private func remove(_ s: StreamState) {
        streams[s.id] = nil
        if s.live { s.live = false; liveCount -= 1 }
        bufferedTotal -= s.recv.count
        s.recv.removeAll()
    }

    /// Client: a new stream or association.
    func open(network: FlowNetwork, destination: Destination) -> UInt32? {
        guard !failed, liveCount < maxStreamsAllowed, nextID < UInt32.max else { return nil }
        let id = nextID
        do { try queue(.open(stream: id, network: network, destination: destination)) } catch { return nil }
        nextID += 2
        highestID = id
        let s = StreamState(id: id, network: network)
        streams[id] = s
        liveCount += 1
        counters.streamsOpened += 1
        if network == .tcp { grantExtraWindow(s) }
        signal()
        return id
    }

    /// A window above the initial one is granted as soon as the stream exists for the peer.
    private func grantExtraWindow(_ s: StreamState) {
        if window > LoftWire.initialStreamWindow {
            let extra = window - LoftWire.initialStreamWindow
            queueControl(.credit(stream: s.id, increment: extra))
            s.recvAllowance += extra
        }
    }

    /// Front: answer to OPEN.
    func accept(_ id: UInt32) {
        guard !failed, let s = streams[id], s.phase == .opening else { return }
        queueControl(.openOK(stream: id))
        s.phase = .open
        if s.network == .tcp { grantExtraWindow(s) }
        signal()
    }

    func refuse(_ id: UInt32, _ reason: OpenFailReason) {
        guard !failed, let s = streams[id], s.phase == .opening else { return }
        queueControl(.openFail(stream: id, reason: reason.rawValue == 0 ? .generalFailure : reason))
        remove(s)
        signal()
    }

    /// Front streams take DATA only after accept; client streams from the OPEN on.
    private func sendable(_ s: StreamState) -> Bool {
        !failed && !s.localFin && (role == .client || s.phase == .open)
    }

    /// Payload bytes that fit in `room` output bytes as DATA frames.
    private static func payloadRoom(_ room: Int) -> Int {
        guard room > LoftWire.headerSize else { return 0 }
        let frame = LoftWire.maxFrameSize
        return room / frame * LoftWire.maxBodySize + max(0, room % frame - LoftWire.headerSize)
    }

    func write(_ id: UInt32, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard !bytes.isEmpty, let s = streams[id], s.network == .tcp, sendable(s) else { return 0 }
        let want = Int(min(UInt64(bytes.count), s.sendCredit))
        var written = 0
        while written < want {
            let room = limits.maxOutputBytes - output.count - LoftWire.headerSize
            if room <= 0 { break }
            let n = min(want - written, LoftWire.maxBodySize, room)
            FrameEncoder.encodeData(stream: id, UnsafeRawBufferPointer(rebasing: bytes[written..<written + n]), into: &output)
            counters.framesOut += 1
            written += n
        }
        if written < want { s.outputBlocked = true; anyOutputBlocked = true }
        if written > 0 {
            s.sendCredit -= UInt64(written)
            counters.dataBytesOut += UInt64(written)
            queuedSinceSignal = true
            signal()
        }
        return written
    }

    func writableBytes(_ id: UInt32) -> Int {
        guard let s = streams[id], s.network == .tcp, sendable(s) else { return 0 }
        let room = Self.payloadRoom(limits.maxOutputBytes - output.count)
        let credit = Int(s.sendCredit)
        if room < credit { s.outputBlocked = true; anyOutputBlocked = true }
        return min(room, credit)
    }

    func read(_ id: UInt32, into buffer: UnsafeMutableRawBufferPointer) -> StreamRead {
        guard let s = streams[id], s.network == .tcp else { return .eof }
        if s.recv.isEmpty {
            if s.remoteFin { settle(s); return .eof }
            return .wouldBlock
        }
        if buffer.isEmpty { return .data(0) }
        let n = s.recv.read(into: buffer)
        bufferedTotal -= n
        if !s.remoteFin && !failed {
            // Half the window read: give it back in one CREDIT.
            s.consumedSinceGrant += UInt32(n)
            if s.consumedSinceGrant >= window / 2 {
                queueControl(.credit(stream: id, increment: s.consumedSinceGrant))
                s.recvAllowance += s.consumedSinceGrant
                s.consumedSinceGrant = 0
            }
        }
        settle(s)
        signal()
        return .data(n)
    }

    func readableBytes(_ id: UInt32) -> Int { streams[id]?.recv.count ?? 0 }

    func finish(_ id: UInt32) {
        guard let s = streams[id], s.network == .tcp, sendable(s) else { return }
        queueControl(.fin(stream: id))
        s.localFin = true
        s.outputBlocked = false
        settle(s)
        signal()
    }

    func resetStream(_ id: UInt32, _ reason: RstReason) {
        guard let s = streams[id] else { return }
        if !failed { queueControl(.rst(stream: id, reason: reason)) }
        remove(s)
        counters.streamsReset += 1
        signal()
    }

    /// Frees a finished stream; one not finished both ways is reset (cancel).
    func close(_ id: UInt32) {
        guard let s = streams[id] else { return }
        if s.localFin && s.remoteFin { remove(s) } else { resetStream(id, .cancel) }
    }

    /// Carriers with datagrams of their own (quic): each DGRAM frame, header included, is
    /// offered here first; a false (too big for one datagram) sends it in the output instead.
    var datagramSink: ((UnsafeRawBufferPointer) -> Bool)?
    private var datagramScratch = ByteQueue()

    func sendDatagram(_ id: UInt32, _ remote: Destination, _ payload: UnsafeRawBufferPointer) -> Bool {
        guard let s = streams[id], s.network == .udp, !failed, role == .client || s.phase == .open,
              let size = FrameEncoder.datagramSize(remote: remote, payloadCount: payload.count) else {
            counters.datagramsDropped += 1
            return false
        }
        // Only once the association is open both ways: before that a DATAGRAM could overtake
        // the OPEN (or the OPEN_OK) on the session stream, so those go in the output, in order.
        if let sink = datagramSink, s.phase == .open {
            datagramScratch.removeAll(keepingCapacity: true)
            if (try? FrameEncoder.encodeDatagram(association: id, remote: remote, payload, into: &datagramScratch)) != nil,
               datagramScratch.withUnsafeReadableBytes({ sink($0) }) {
                counters.framesOut += 1
                counters.datagramsOut += 1
                return true
            }
        }
        guard output.count + size <= min(limits.maxDatagramQueue, limits.maxOutputBytes) else {
            counters.datagramsDropped += 1
            return false
        }
        do {
            try FrameEncoder.encodeDatagram(association: id, remote: remote, payload, into: &output)
        } catch {
            counters.datagramsDropped += 1
            return false
        }
        counters.framesOut += 1
        counters.datagramsOut += 1
        queuedSinceSignal = true
        signal()
        return true
    }

    func closeAssociation(_ id: UInt32) {
        guard let s = streams[id], s.network == .udp else { return }
        resetStream(id, .cancel)
    }

    // MARK: keepalive

    func tick(now: UInt64) -> Bool {
        for st in streams.values {
            if !st.recvTouched && st.recv.isEmpty && st.recv.capacity > 0 { st.recv.removeAll(keepingCapacity: false) }
            st.recvTouched = false
        }
        guard keepaliveMs > 0, !failed else { return true }
        if heardSinceTick || lastHeard == nil { lastHeard = now; heardSinceTick = false }
        if pongUnresolved, let p = pingOutstanding {
            rttMs = now >= p.at ? now - p.at : 0
            pongUnresolved = false
            pingOutstanding = nil
        }
        let heard = lastHeard!
        if now >= heard && now - heard >= 2 * keepaliveMs { return false }
        if pingEnabled, lastPingAt.map({ now < $0 || now - $0 >= keepaliveMs }) ?? true {
            pingSeq += 1
            queueControl(.ping(pingSeq))
            lastPingAt = now
            pingOutstanding = (pingSeq, now)
            counters.pingsSent += 1
            signal()
        }
        return true
    }
}
