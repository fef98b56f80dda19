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
    /// Key `mptcp`: the connections are made as Multipath TCP, plain TCP when the server (or a
    /// middlebox) does not speak it; `loft status` counts which each TCP flow got.
    public var multipath = false

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
    /// The TCP flows' bytes (the UDP associations' are in `meter`).
    let streamMeter = StreamMeter()

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
        /// The UDP associations' bytes (the TCP flows' are in `streamMeter`).
        var bytesUp: UInt64 = 0
        var bytesDown: UInt64 = 0
        var failures = [UInt64](repeating: 0, count: Failure.allCases.count)
        var udpDropped: UInt64 = 0
        /// Flows whose TLS handshake resumed a session.
        var resumed: UInt64 = 0
        /// `multipath`: TCP flows whose connection runs MPTCP, and those that fell back to TCP.
        var mptcp: UInt64 = 0
        var mptcpFallbacks: UInt64 = 0
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
        s.flows = m.flows; s.liveFlows = m.live
        s.bytesUp = m.bytesUp &+ streamMeter.bytesWritten; s.bytesDown = m.bytesDown &+ streamMeter.bytesRead
        let server = options.host.contains(":") ? "[\(options.host)]:\(options.port)" : "\(options.host):\(options.port)"
        s.detail = "server \(server)" + (m.lastError.isEmpty ? "" : ", last error \(m.lastError)")
        s.extra = Failure.allCases.enumerated().map { ($1.rawValue, m.failures[$0]) } + [("udp-dropped", m.udpDropped), ("tls-resumed", m.resumed)]
        if options.multipath { s.extra += [("mptcp", m.mptcp), ("mptcp-fallbacks", m.mptcpFallbacks)] }
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
                         serverName: serverName, events: events, inputBytes: inputBytes, outputBytes: 64 * 1024,
                         multipath: options.multipath)
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
        let (end, flow) = makeEnd(events: events)
        guard let header else {
            flow.ended()
            end.failSoon(.notAllowed, on: loop)
            return end
        }
        let inner = dial(events: end)
        flow.tls = inner as? TLSStream
        end.attach(inner, connected: false, holding: header)
        return end
    }

    /// A TCP flow's end (the one preface end, in line: docs/architecture.md, "The preface end")
    /// and the flow beside it, before it has its TLS connection.
    func makeEnd(events: ByteStreamEvents) -> (PrefaceStream<VLESS.ResponseCodec>, VLESSFlow) {
        let flow = VLESSFlow(outbound: self)
        let inLine = PrefaceInLine(loop: loop, preambleWaitMs: options.headerWaitMs, owner: flow,
                                   budget: runtime.readBudget, budgetEntry: flow.budget)
        let end = PrefaceStream(codec: VLESS.ResponseCodec(), events: events, meter: streamMeter, inLine: inLine) { [unowned flow] in
            flow.judge($0)
        }
        flow.end = end
        return (end, flow)
    }

    public func openAssociation(events: DatagramEvents) -> DatagramAssociation? {
        VLESSAssociation(outbound: self, events: events)
    }
}

/// One TCP flow through a VLESS server, beside its end of the splice (the one preface end,
/// `PrefaceStream` in line over the TLS connection: the request header held for the app's
/// first bytes, the response header read off the front of the first reads): it counts the
/// flow, judges the response, counts its failure once by cause, and is the flow's place in
/// the loop's read budget (docs/vless.md), which the end updates on every read.
final class VLESSFlow: PrefaceOwner, ReadBudgetMember {
    private let outbound: VLESSOutbound
    /// The flow's end (it holds this flow).
    weak var end: PrefaceStream<VLESS.ResponseCodec>?
    weak var tls: TLSStream?
    /// The splice's other end (the app's), where what this flow read waits for the app.
    private weak var appEnd: ByteStream?
    /// This flow's place in the loop's read budget (nil once it ended).
    private(set) var budget: ReadBudget.Entry?
    private var budgetPaused = false
    private(set) var responded = false
    /// This flow's failure is counted (at most once).
    private var counted = false
    private var live = true

    init(outbound: VLESSOutbound) {
        self.outbound = outbound
        outbound.meter.flows &+= 1
        outbound.meter.live += 1
        budget = outbound.runtime.readBudget.join(self)
    }

    deinit { ended() }

    func ended() {
        if let b = budget { outbound.runtime.readBudget.leave(b); budget = nil }
        guard live else { return }
        live = false
        outbound.meter.live -= 1
    }

    private func count(_ f: VLESSOutbound.Failure, _ detail: String) {
        guard !counted else { return }
        counted = true
        outbound.failed(f, detail)
    }

    /// The verdict on the response header.
    func judge(_ outcome: PrefaceOutcome<VLESS.ResponseHeader>) -> FlowFailure? {
        switch outcome {
        case .answered(.ok):
            responded = true
            outbound.responded()
            return nil
        case .answered(.bad(let first)):
            count(.badResponse, "response starts with byte \(first)")
            return .other(EPROTO)
        case .cut(let f):
            let got = end?.answerBytes ?? 0
            guard end?.cutByEOF == true else {
                let (_, detail) = VLESSOutbound.cause(of: tls, responded: false)
                count(.noResponse, detail)
                return f
            }
            // The app had finished and the destination closed without a word (a client that
            // closed before sending anything, say): a plain end, not a failure.
            if end?.writeShut == true && got == 0 { return nil }
            count(.noResponse, got == 0 ? "closed without a response" : "closed inside the response header")
            return .other(ECONNRESET)
        }
    }

    // MARK: PrefaceOwner

    func prefaceConnected() {
        if tls?.resumed == true { outbound.meter.resumed &+= 1 }
        if outbound.options.multipath, let m = tls?.multipath {
            if m.active { outbound.meter.mptcp &+= 1 } else { outbound.meter.mptcpFallbacks &+= 1 }
        }
    }

    func prefaceFailed() {
        let (cause, detail) = VLESSOutbound.cause(of: tls, responded: responded)
        count(cause, detail)
        ended()
    }

    func prefaceReadFailed() { count(.broken, "read failed") }

    /// A read while stopped (the splice came back because the app took bytes): ask again.
    func prefaceRecheck() {
        guard budgetPaused else { return }
        spent()
        if budgetPaused { appEnd?.notifyWhenTaken() }
    }

    func prefaceEnded(reset: Bool, connected: Bool, failed: Bool) {
        // Reset before it connected and without a failure of its own: the connect deadline.
        if reset && !connected && !failed { count(.timeout, "no TLS connection within the connect timeout") }
        ended()
    }

    // MARK: the read budget

    /// Read from the server and not yet taken by the app: the TLS end's input buffer and the
    /// app end's send queue.
    func budgetHeld() -> Int {
        if appEnd == nil, let end { appEnd = (end.events as? Splice)?.otherEnd(of: end) }
        return (tls?.bufferedInput ?? 0) + (appEnd?.heldBytes ?? 0)
    }

    func budgetPause(_ paused: Bool) {
        budgetPaused = paused
        end?.pauseReads(paused)
        // The app's next ACK brings the splice back here (streamWritable, then a read): the
        // budget looks again at once instead of on its next recheck.
        if paused { appEnd?.notifyWhenTaken() }
    }

    private func spent() {
        if let b = budget { outbound.runtime.readBudget.update(b) }
    }
}
