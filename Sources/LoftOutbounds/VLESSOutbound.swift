import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftTLS

/// A `type: vless` outbound's settings.
public struct VLESSOptions: Sendable {
    public var host: String
    public var port: UInt16
    /// 16 bytes.
    public var uuid: [UInt8]
    public var tls: TLSClientOptions
    /// ALPN names offered in the handshake; empty: none.
    public var alpn: [String]
    /// A UDP destination's connection closes after this long without a datagram either way.
    public var udpIdleTimeoutMs: UInt64
    /// A UDP destination's connection that is not up (TCP and TLS) by then is given up (a TCP
    /// flow's deadline is its splice's).
    public var connectTimeoutMs: UInt64
    /// How long a new connection's request header waits for the app's first bytes (so both
    /// leave in one write) before it is sent alone.
    public var headerWaitMs: UInt64 = 10

    public init(host: String, port: UInt16, uuid: [UInt8], tls: TLSClientOptions, alpn: [String] = [],
                udpIdleTimeoutMs: UInt64 = 60_000, connectTimeoutMs: UInt64 = 10_000) {
        self.host = host; self.port = port; self.uuid = uuid; self.tls = tls; self.alpn = alpn
        self.udpIdleTimeoutMs = udpIdleTimeoutMs
        self.connectTimeoutMs = connectTimeoutMs
    }
}

/// Carries every flow over its own TLS connection to a VLESS server (VLESS version 0, no
/// addons: no XTLS, Vision or REALITY). TCP: the request header names the destination (an
/// address, or a name the server resolves), the stream follows; the server's response header
/// is read and checked before any byte reaches the app. UDP: one connection per association and
/// destination, datagrams framed with a 2-byte length.
public final class VLESSOutbound: Outbound {
    public let name: String
    let loop: EventLoop
    let runtime: CarrierRuntime
    let context: TLSContext
    let options: VLESSOptions
    let serverName: String
    let meter = Meter()

    /// Why a flow failed, as counted in `loft status` and logged (once per cause).
    public enum Failure: String, CaseIterable, Sendable {
        /// No TCP connection to the server (refused, unreachable, no address).
        case connect = "connect-failed"
        /// The TLS handshake failed (certificate not verified, pin mismatch, not TLS).
        case tls = "tls-failed"
        /// The connect deadline passed before the handshake finished.
        case timeout = "connect-timeout"
        /// The server ended the connection before its response header: a wrong UUID, or the
        /// server could not reach the destination, or the destination closed without a byte.
        case noResponse = "closed-before-response"
        /// The response header was not VLESS.
        case badResponse = "bad-response"
        /// The connection broke after the response (a reset, a TLS error).
        case broken = "broken"
    }

    /// What it carried and what failed (one loop thread).
    final class Meter {
        var flows: UInt64 = 0
        var live = 0
        var bytesUp: UInt64 = 0
        var bytesDown: UInt64 = 0
        var failures = [UInt64](repeating: 0, count: Failure.allCases.count)
        var udpDropped: UInt64 = 0
        /// Flows whose TLS handshake resumed a session.
        var resumed: UInt64 = 0
        var lastError = ""
        /// Causes logged since the last flow that got its response.
        var logged = Set<Failure>()
    }

    public init(name: String, loop: EventLoop, runtime: CarrierRuntime, options: VLESSOptions) throws {
        guard options.uuid.count == 16 else { throw TLSError("a VLESS UUID is 16 bytes") }
        self.name = name
        self.loop = loop
        self.runtime = runtime
        self.options = options
        context = try TLSContext(client: options.tls, alpn: options.alpn)
        // Every connection goes to the one server: a flow's handshake resumes the last session.
        context.enableResumption()
        var sn = options.tls.serverName ?? options.host
        if sn.hasPrefix("[") && sn.hasSuffix("]") { sn = String(sn.dropFirst().dropLast()) }
        serverName = sn
    }

    public var status: OutboundStatus {
        let m = meter
        // "failing": flows failed since the last one that got its response (or there was none).
        var s = OutboundStatus(name: name, type: "vless", state: m.logged.isEmpty ? "ready" : "failing")
        s.flows = m.flows; s.liveFlows = m.live; s.bytesUp = m.bytesUp; s.bytesDown = m.bytesDown
        let server = options.host.contains(":") ? "[\(options.host)]:\(options.port)" : "\(options.host):\(options.port)"
        s.detail = "server \(server)" + (m.lastError.isEmpty ? "" : ", last error \(m.lastError)")
        s.extra = Failure.allCases.enumerated().map { ($1.rawValue, m.failures[$0]) } + [("udp-dropped", m.udpDropped), ("tls-resumed", m.resumed)]
        return s
    }

    /// Failures of each cause so far.
    public func failures(_ f: Failure) -> UInt64 { meter.failures[Failure.allCases.firstIndex(of: f)!] }

    func failed(_ f: Failure, _ detail: String) {
        meter.failures[Failure.allCases.firstIndex(of: f)!] &+= 1
        meter.lastError = "\(f.rawValue): \(detail)"
        if meter.logged.insert(f).inserted {
            Log.warn("vless.failed", ["outbound": name, "reason": f.rawValue, "detail": detail])
        }
    }

    func responded() {
        guard !meter.logged.isEmpty else { return }
        meter.logged.removeAll()
        Log.info("vless.working", ["outbound": name])
    }

    /// The TLS connection to the server a new flow or destination gets.
    func dial(events: ByteStreamEvents, inputBytes: Int = 64 * 1024) -> ByteStream {
        if let testDialer { return testDialer(events) }
        return TLSStream(runtime: runtime, context: context, host: options.host, port: options.port,
                         serverName: serverName, events: events, inputBytes: inputBytes, outputBytes: 64 * 1024)
    }

    /// Tests only: the stream a dial returns instead of a TLS connection.
    var testDialer: ((ByteStreamEvents) -> ByteStream)?

    /// The cause a stream's failure counts as.
    static func cause(of stream: TLSStream?, responded: Bool) -> (Failure, String) {
        guard let stream, let reason = stream.cause else {
            return (responded ? .broken : .noResponse, "connection closed")
        }
        if !stream.isConnected {
            switch reason {
            case .connectFailed(let s): return (.connect, s)
            case .timeout(let s): return (.timeout, s)
            case .tls(let s): return (.tls, s)
            default: return (.tls, reason.description)
            }
        }
        return (responded ? .broken : .noResponse, reason.description)
    }

    public func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream {
        let header = VLESS.encode(VLESS.Request(uuid: options.uuid, command: .tcp, destination: destination))
        let s = VLESSStream(outbound: self, header: header ?? [], events: events)
        if header == nil {
            s.failSoon(.notAllowed)
        } else {
            s.start(dial(events: s))
        }
        return s
    }

    public func openAssociation(events: DatagramEvents) -> DatagramAssociation? {
        VLESSAssociation(outbound: self, events: events)
    }
}

/// One TCP flow through a VLESS server: its end of the splice. Wraps the TLS connection's
/// stream (`inner`), puts the request header in front of the first bytes written, and takes the
/// response header off the front of the first bytes read. Every other call passes through,
/// except that the loop's read budget may stop its reads (docs/vless.md): it counts what the
/// flow holds each time bytes are taken.
final class VLESSStream: ByteStream, ByteStreamEvents, ReadBudgetMember {
    weak var events: ByteStreamEvents?
    private let outbound: VLESSOutbound
    private let loop: EventLoop
    private(set) var inner: ByteStream?
    private weak var tls: TLSStream?
    /// The splice's other end (the app's), where what this flow read waits for the app.
    private weak var appEnd: ByteStream?
    /// This flow's place in the loop's read budget (nil once it ended).
    private var budget: ReadBudget.Entry?
    /// Reads wanted by the driver, and stopped by the budget.
    private var readWanted = true
    private var budgetPaused = false
    private var header: [UInt8]
    private var headerSent = 0
    private var headerTimer: TimerHandle?
    private var response = PrefaceReader(VLESS.ResponseCodec())
    private(set) var responded = false
    private(set) var connected = false
    private var shutPending = false
    /// The app ended its side (shutdownWrite passed on).
    private var appDone = false
    /// This flow's failure is counted (at most once).
    private var counted = false
    private var live = true
    private var failure: FlowFailure?

    init(outbound: VLESSOutbound, header: [UInt8], events: ByteStreamEvents) {
        self.outbound = outbound
        loop = outbound.loop
        self.header = header
        self.events = events
        outbound.meter.flows &+= 1
        outbound.meter.live += 1
        budget = outbound.runtime.readBudget.join(self)
    }

    /// Starts on `inner`, a stream whose events come to this one.
    func start(_ inner: ByteStream) {
        self.inner = inner
        tls = inner as? TLSStream
    }

    deinit {
        if let h = headerTimer { loop.cancel(h) }
        ended()
    }

    func failSoon(_ f: FlowFailure) {
        failure = f
        ended()
        loop.soon { [weak self] in
            guard let self else { return }
            self.events?.streamFailed(self, f)
        }
    }

    private func ended() {
        if let b = budget { outbound.runtime.readBudget.leave(b); budget = nil }
        guard live else { return }
        live = false
        outbound.meter.live -= 1
    }

    // MARK: the read budget

    /// Read from the server and not yet taken by the app: the TLS end's input buffer and the
    /// app end's send queue.
    func budgetHeld() -> Int {
        if appEnd == nil { appEnd = (events as? Splice)?.otherEnd(of: self) }
        return (tls?.bufferedInput ?? 0) + (appEnd?.heldBytes ?? 0)
    }

    func budgetPause(_ paused: Bool) {
        budgetPaused = paused
        inner?.setReadInterest(readWanted && !paused)
        // The app's next ACK brings the splice back here (streamWritable, then a read): the
        // budget looks again at once instead of on its next recheck.
        if paused { appEnd?.notifyWhenTaken() }
    }

    private func spent() {
        if let b = budget { outbound.runtime.readBudget.update(b) }
    }

    /// A read while stopped (the splice came back because the app took bytes): ask again.
    private func recheckIfStopped() {
        guard budgetPaused else { return }
        spent()
        if budgetPaused { appEnd?.notifyWhenTaken() }
    }

    private func count(_ f: VLESSOutbound.Failure, _ detail: String) {
        guard !counted else { return }
        counted = true
        outbound.failed(f, detail)
    }

    private var headerPending: Bool { headerSent < header.count }

    // MARK: events from the TLS stream

    func streamConnected(_: ByteStream) {
        connected = true
        if (inner as? TLSStream)?.resumed == true { outbound.meter.resumed &+= 1 }
        if headerPending {
            headerTimer = loop.schedule(after: outbound.options.headerWaitMs) { [weak self] in
                guard let self else { return }
                self.headerTimer = nil
                self.sendHeader()
            }
        }
        events?.streamConnected(self)
    }

    func streamFailed(_: ByteStream, _ f: FlowFailure) {
        let (cause, detail) = VLESSOutbound.cause(of: inner as? TLSStream, responded: responded)
        count(cause, detail)
        ended()
        failure = f
        events?.streamFailed(self, f)
    }

    func streamReadable(_: ByteStream) { events?.streamReadable(self) }

    func streamWritable(_: ByteStream) {
        if headerPending {
            sendHeader()
            if headerPending { return }
        }
        events?.streamWritable(self)
    }

    /// The header alone (the app had nothing to send in time, or is closing).
    private func sendHeader() {
        guard headerPending, connected, let inner else { return }
        if let h = headerTimer { loop.cancel(h); headerTimer = nil }
        let w = header.withUnsafeBytes { raw -> Int in
            var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + headerSent),
                            iov_len: header.count - headerSent)
            return inner.write(&iov, count: 1)
        }
        if w > 0 { headerSent += w }
        if !headerPending {
            header = []
            headerSent = 0
            if shutPending { shutPending = false; inner.shutdownWrite() }
        }
    }

    // MARK: ByteStream

    var writeRoom: Int {
        guard let inner else { return 1 }
        let r = inner.writeRoom
        guard headerPending, r != Int.max, r > 0 else { return r }
        return max(1, r - (header.count - headerSent))
    }

    func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard let inner, connected else { return failure == nil && inner != nil ? 0 : -1 }
        if !headerPending {
            let w = inner.write(segments, count: count)
            if w > 0 { outbound.meter.bytesUp &+= UInt64(w) }
            return w
        }
        // The header and the app's first bytes in one write (one TLS record when they fit).
        if let h = headerTimer { loop.cancel(h); headerTimer = nil }
        let h = header.count - headerSent
        let w = header.withUnsafeBytes { raw -> Int in
            withUnsafeTemporaryAllocation(of: iovec.self, capacity: count + 1) { iov in
                iov[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + headerSent), iov_len: h)
                for i in 0..<count { iov[i + 1] = segments[i] }
                return inner.write(iov.baseAddress!, count: count + 1)
            }
        }
        if w < 0 { return -1 }
        if w < h {
            headerSent += w
            return 0
        }
        header = []
        headerSent = 0
        outbound.meter.bytesUp &+= UInt64(w - h)
        return w - h
    }

    /// Reads the response header off the front, exactly (`VLESS.ResponseCodec`); nil once it
    /// is complete (bytes may follow), else what the caller's read returns.
    private func readResponse(_ inner: ByteStream) -> StreamReadResult? {
        switch response.read(from: inner) {
        case .answer(.ok):
            responded = true
            outbound.responded()
            return nil
        case .answer(.bad(let first)):
            count(.badResponse, "response starts with byte \(first)")
            failure = .other(EPROTO)
            return .failed(.other(EPROTO))
        case .wouldBlock:
            return .wouldBlock
        case .eof where appDone && response.count == 0:
            // The app had finished and the destination closed without a word (a client
            // that closed before sending anything, say): a plain end, not a failure.
            return .eof
        case .eof:
            count(.noResponse, response.count == 0 ? "closed without a response" : "closed inside the response header")
            failure = .other(ECONNRESET)
            return .failed(.other(ECONNRESET))
        case .failed(let f):
            let (_, detail) = VLESSOutbound.cause(of: inner as? TLSStream, responded: false)
            count(.noResponse, detail)
            failure = f
            return .failed(f)
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        guard let inner else { return failure.map { .failed($0) } ?? .eof }
        recheckIfStopped()
        if !responded, let r = readResponse(inner) { return r }
        let r = inner.read(into: buffer)
        switch r {
        case .data(let n):
            outbound.meter.bytesDown &+= UInt64(n)
            spent()
        case .failed: count(.broken, "read failed")
        default: break
        }
        return r
    }

    func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count n: inout Int) -> StreamReadResult? {
        n = 0
        guard let inner else { return failure.map { .failed($0) } ?? .eof }
        recheckIfStopped()
        if !responded, let r = readResponse(inner) { return r }
        let r = inner.peek(iov, max: max, count: &n)
        if case .failed = r { count(.broken, "read failed") }
        return r
    }

    func consume(_ n: Int) {
        inner?.consume(n)
        outbound.meter.bytesDown &+= UInt64(n)
        spent()
    }

    func setReadInterest(_ on: Bool) {
        readWanted = on
        inner?.setReadInterest(on && !budgetPaused)
    }

    func shutdownWrite() {
        guard let inner else { return }
        appDone = true
        if headerPending {
            shutPending = true
            sendHeader()
            return
        }
        inner.shutdownWrite()
    }

    func close() {
        if let h = headerTimer { loop.cancel(h); headerTimer = nil }
        ended()
        inner?.events = nil
        inner?.close()
        inner = nil
    }

    func reset() {
        if let h = headerTimer { loop.cancel(h); headerTimer = nil }
        // Reset before it connected and without a failure of its own: the connect deadline.
        if !connected && failure == nil { count(.timeout, "no TLS connection within the connect timeout") }
        ended()
        inner?.events = nil
        inner?.reset()
        inner = nil
    }
}
