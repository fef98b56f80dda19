import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftSessionStream

/// How one holder reaches its front.
public struct HolderOptions {
    public var carrier: CarrierClientOptions
    public var token: String
    public var clientName: String
    /// Fail-closed: while the session is down tunnelled flows are dropped, nothing goes direct.
    public var hold: Bool
    /// Longest wait between redials (the backoff doubles from `minBackoffMs` up to this).
    public var minBackoffMs: UInt64
    public var maxBackoffMs: UInt64
    public var limits: SessionLimits
    /// Where the instance is kept across loft's restarts (nil: memory only).
    public var stateFile: String?
    /// Receive window per stream. 256 KiB (the protocol's initial window) holds one stream
    /// to half the direct path's rate on loopback; 1 MiB lets it run at the carrier's speed
    /// (bench/holder). Idle streams give their buffers back, so this costs only while busy.
    public static let streamWindow: UInt32 = 1 << 20

    public init(carrier: CarrierClientOptions, token: String, clientName: String, hold: Bool,
                minBackoffMs: UInt64 = 500, maxBackoffMs: UInt64 = 30_000,
                limits: SessionLimits = SessionLimits(maxStreams: 65_536, streamWindow: HolderOptions.streamWindow)) {
        self.carrier = carrier; self.token = token; self.clientName = clientName; self.hold = hold
        self.minBackoffMs = minBackoffMs; self.maxBackoffMs = maxBackoffMs; self.limits = limits
    }
}

/// What `loft status` shows of a holder.
public struct HolderStats: Sendable {
    public var state = "idle"
    public var carrier = ""
    public var overlay = ""
    public var instance = ""
    public var rttMs: UInt64?
    public var dials: UInt64 = 0
    public var sessions: UInt64 = 0           // STATUS received after HELLO
    public var resumes: UInt64 = 0            // STATUS received after RESUME
    public var carrierLosses: UInt64 = 0
    public var pathChanges: UInt64 = 0
    public var migrations: UInt64 = 0         // path changes the carrier survived (quic: validated migration)
    public var quicPacket: UInt64 = 0         // quic, h3: the largest UDP payload on the path now (0: other carriers, not up)
    public var flowStreams: UInt64 = 0        // quic: TCP flows carried on QUIC streams of their own
    public var datagramFramesOut: UInt64 = 0  // quic: DGRAMs sent as QUIC DATAGRAM frames
    public var datagramFramesIn: UInt64 = 0   // quic: DGRAMs received as QUIC DATAGRAM frames
    public var holdDrops: UInt64 = 0          // flows and datagrams refused while down with hold
    public var fallbackFlows: UInt64 = 0      // flows sent direct while down without hold
    public var streamsReset: UInt64 = 0       // streams lost with a carrier
    public var streamLimitRefusals: UInt64 = 0 // flows refused at the front's max_streams
    // Carried through the session, whatever input the flow came from (TUN, bridge, SOCKS5).
    public var flowsOpened: UInt64 = 0        // streams and associations opened on a session
    public var bytesUp: UInt64 = 0            // app → front: stream bytes and datagram payloads
    public var bytesDown: UInt64 = 0          // front → app
    public var lastError = ""
}

/// The loft outbound: keeps one session to a front over a carrier; each TCP flow is a stream
/// of it and each UDP association a DGRAM association. The session outlives carriers: a lost
/// carrier is redialled with backoff and RESUME keeps the instance (and the overlay address).
public final class HolderOutbound: Outbound, SessionStreamOwner {
    public let name: String
    let loop: EventLoop
    let runtime: CarrierRuntime
    let client: CarrierClient
    let options: HolderOptions
    let session: ClientSession
    /// Where flows go while the session is down and `hold` is off.
    let fallback: Outbound?

    enum Link { case idle, dialing, handshaking, up, waiting, stopped }
    private(set) var link = Link.idle
    private var carrier: Carrier?
    private var linkSince: UInt64 = 0
    private var failures = 0
    /// Bumped for every carrier, so a redial scheduled for an older one is ignored.
    private var generation = 0
    /// The next redial while `waiting`; cancelled by a dial that comes first and by `stop`.
    private var redialTimer: TimerHandle?
    /// The once-a-second `tick`, from creation until `stop`.
    private var tickTimer: TimerHandle?

    private var streams: [UInt32: SessionStream] = [:]
    private var pendingStreams: [SessionStream] = []
    /// The bytes its streams carried (they count them as they write and read the session).
    private let streamMeter = SessionStreamMeter()
    private var associations: [UInt32: HolderAssociation] = [:]
    private var writeBlocked = false
    private var lastLimitLog: UInt64 = 0
    private var flushScheduled = false

    /// Counters kept as things happen; `stats` adds what is derived from the link and session.
    private var counts = HolderStats()
    public var stats: HolderStats {
        var s = counts
        s.bytesUp &+= streamMeter.bytesUp
        s.bytesDown &+= streamMeter.bytesDown
        s.state = switch link {
        case .idle: "idle"
        case .dialing, .handshaking: "dialing"
        case .up: "up"
        case .waiting: options.hold ? "held" : "down"
        case .stopped: "stopped"
        }
        s.rttMs = link == .up ? session.rttMs : nil
        s.quicPacket = link == .up ? UInt64(carrier?.maxPacket ?? 0) : 0
        return s
    }
    /// A STATUS arrived (first, after resume, or changed): apply the overlay.
    public var onStatus: ((Status) -> Void)?
    /// The TUN's configured addresses: a STATUS handing out one of them (with another prefix)
    /// is refused (`unusable`), as an SSTP server's IPCP address is.
    public var reservedAddresses: [IPPrefix] = []

    /// Longest wait from the carrier being up to the session's STATUS.
    static let handshakeTimeoutMs: UInt64 = 15_000

    public init(name: String, loop: EventLoop, runtime: CarrierRuntime, options: HolderOptions,
                fallback: Outbound?) throws {
        self.name = name
        self.loop = loop
        self.runtime = runtime
        self.options = options
        self.fallback = options.hold ? nil : fallback
        client = try CarrierClient(options.carrier, runtime: runtime)
        session = ClientSession(token: options.token, clientName: options.clientName, limits: options.limits)
        session.delegate = self
        restoreInstance()
        armTick()
    }

    // MARK: the instance across restarts

    static let stateHeader = "loft-holder-state 1"

    /// The first dial RESUMEs the instance the state file names, so the front gives back the
    /// same overlay address. A missing or unreadable file means HELLO (said in the log).
    private func restoreInstance() {
        guard let path = options.stateFile else { return }
        switch StateFile.read(path, maxBytes: 4096) {
        case .missing:
            return
        case .failed(let why):
            Log.warn("holder.state-unreadable", ["outbound": name, "file": path, "error": why])
        case .bytes(let b):
            if let id = Self.decodeState(b) {
                session.restore(instance: id)
                savedInstance = id  // a RESUME that keeps it need not write the file again
                Log.info("holder.state-restored", ["outbound": name, "instance": id.description])
            } else {
                Log.warn("holder.state-unreadable", ["outbound": name, "file": path,
                                                      "error": "not a \(Self.stateHeader) file with one instance id"])
            }
        }
    }

    /// The instance id of a state file's bytes: the header line, then the id; nil otherwise.
    static func decodeState(_ bytes: [UInt8]) -> InstanceID? {
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
        guard lines.count == 2, lines[0] == stateHeader else { return nil }
        return InstanceID(hex: String(lines[1]))
    }

    private var savedInstance: InstanceID?

    private func saveInstance(_ id: InstanceID) {
        guard let path = options.stateFile, id != savedInstance else { return }
        if let error = StateFile.write("\(Self.stateHeader)\n\(id)\n", to: path) {
            Log.warn("holder.state-not-saved", ["outbound": name, "file": path, "error": error])
            return
        }
        savedInstance = id
    }

    public var isUp: Bool { link == .up }

    /// Streams and associations on the live attachment.
    public var liveFlowCount: Int { streams.count + associations.count }

    /// Its `loft status` row from `stats`: the holder's own counts, which include SOCKS5 flows
    /// (the netstack never sees those). The detail names the carrier (quic and h3: with the
    /// largest packet on the path now), the overlay address, the round trip, and the last error
    /// while not up.
    public var status: OutboundStatus {
        let st = stats
        var s = OutboundStatus(name: name, type: "loft", state: st.state)
        s.flows = st.flowsOpened; s.liveFlows = liveFlowCount; s.bytesUp = st.bytesUp; s.bytesDown = st.bytesDown
        var d: [String] = []
        if !st.carrier.isEmpty { d.append(st.carrier) }
        if st.quicPacket > 0 { d.append("packets \(st.quicPacket) B") }
        if !st.overlay.isEmpty { d.append("overlay \(st.overlay)") }
        if let rtt = st.rttMs { d.append("rtt \(rtt) ms") }
        if !st.lastError.isEmpty && st.state != "up" { d.append("last error: \(st.lastError)") }
        s.detail = d.joined(separator: ", ")
        s.extra = [("dials", st.dials), ("sessions", st.sessions), ("resumes", st.resumes),
                   ("carrier-losses", st.carrierLosses), ("path-changes", st.pathChanges), ("migrations", st.migrations),
                   ("flow-streams", st.flowStreams),
                   ("datagram-frames-out", st.datagramFramesOut), ("datagram-frames-in", st.datagramFramesIn),
                   (OutboundStatus.holdDrops, st.holdDrops), ("fallback-flows", st.fallbackFlows),
                   ("streams-reset", st.streamsReset), ("stream-limit-refusals", st.streamLimitRefusals)]
        return s
    }

    /// Starts the first dial.
    public func start() {
        guard link == .idle else { return }
        dial()
    }

    /// The host's path changed (or `loft path-changed`): drop the live carrier and dial again at
    /// once; RESUME keeps the instance.
    /// Returns what it does, in words, for `loft path-changed`.
    @discardableResult
    public func pathChanged(reason: String) -> String {
        guard link != .stopped else { return "stopped" }
        counts.pathChanges += 1
        Log.info("holder.path-changed", ["outbound": name, "reason": reason])
        // quic: the connection moves to a new socket and the session with every stream stays;
        // only if the new path fails validation does it go the TCP carriers' way (RESUME).
        if let c = carrier, link == .up, c.migrate({ [weak self, weak c] ok in
            guard let self, let c, self.carrier === c else { return }
            if ok {
                self.counts.migrations += 1
                Log.info("holder.migrated", ["outbound": self.name, "migrations": self.counts.migrations])
            } else {
                c.abort()
                self.failures = 0
                self.carrierLost("path changed (\(reason)); migration failed", redialIn: 0)
            }
        }) {
            return "migrating the connection to the new path (the session and its streams stay; RESUME only if the path fails validation)"
        }
        if let c = carrier {
            c.abort()
            failures = 0  // a new path is a fresh start: flows wait for this dial again
            carrierLost("path changed (\(reason))", redialIn: 0)
            return "redialling with RESUME"
        } else if link == .waiting {
            failures = 0
            dial()
            return "dialling now"
        }
        return "dialling already"
    }

    /// Ends the session: GOAWAY is not sent (the front expires the instance); carriers close.
    public func stop() {
        link = .stopped
        for t in [tickTimer, redialTimer].compactMap({ $0 }) { loop.cancel(t) }
        tickTimer = nil
        redialTimer = nil
        carrier?.close()
        carrier = nil
        failAll(.networkUnreachable)
        session.detach()
    }

    // MARK: Outbound

    public func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream {
        switch link {
        case .up:
            // quic: the flow on a QUIC stream of its own (docs/protocol.md §1.2).
            if let fc = carrier as? FlowCarrier, let flow = fc.openFlow() {
                if let s = HolderFlowStream(flow: flow, destination: destination, events: events, holder: self) {
                    counts.flowsOpened += 1
                    counts.flowStreams += 1
                    return s
                }
            }
            let s = newStream(to: destination, events: events)
            openOnSession(s)
            return s
        case .dialing, .handshaking, .idle, .waiting, .stopped:
            // The first dial, or a redial right after a path change, is likely to succeed soon:
            // the flow waits for it. Down, or redialling after failures: no flow waits for a
            // front that keeps failing.
            if failures == 0 && (link == .dialing || link == .handshaking || link == .idle) {
                let s = newStream(to: destination, events: events)
                pendingStreams.append(s)
                return s
            }
            if let fallback {
                counts.fallbackFlows += 1
                return fallback.openStream(to: destination, events: events)
            }
            counts.holdDrops += 1
            let s = newStream(to: destination, events: events)
            s.failSoon(.networkUnreachable)
            return s
        }
    }

    /// A flow's end: a stream of the session, which it writes and reads itself.
    private func newStream(to destination: Destination, events: ByteStreamEvents) -> SessionStream {
        SessionStream(side: .client, session: session, id: nil, destination: destination, loop: loop,
                      events: events, owner: self, meter: streamMeter)
    }

    public func openAssociation(events: DatagramEvents) -> DatagramAssociation? {
        HolderAssociation(holder: self, events: events)
    }

    // MARK: carrier lifecycle

    private func dial() {
        guard link != .stopped else { return }
        if let t = redialTimer { loop.cancel(t) }
        redialTimer = nil
        generation += 1
        link = .dialing
        counts.dials += 1
        carrier = client.dial(delegate: self)
    }

    /// GOAWAY unknown-instance before the session was up: a state file (or a front that lost
    /// its own) named an instance the front does not have. The next dial is a HELLO, at once,
    /// and flows waiting for the session keep waiting: nothing is wrong with the path.
    private var helloAtOnce = false

    /// The carrier is gone (closed by the peer, broken, dead, or dropped by us).
    private func carrierLost(_ why: String, redialIn fixedDelay: UInt64? = nil) {
        let wasUp = link == .up
        let retryHello = helloAtOnce && !wasUp
        helloAtOnce = false
        carrier = nil
        writeBlocked = false
        session.detach()
        failAll(wasUp ? .other(ECONNRESET) : .networkUnreachable, keepWaiting: retryHello)
        counts.carrierLosses += wasUp ? 1 : 0
        counts.lastError = why
        guard link != .stopped else { return }
        link = .waiting
        let delay = retryHello ? 0 : fixedDelay ?? backoff()
        Log.warn("holder.down", ["outbound": name, "reason": why, "redial-ms": delay,
                                 "hold": options.hold])
        let g = generation
        if let t = redialTimer { loop.cancel(t) }
        redialTimer = nil
        if delay == 0 {
            loop.soon { [weak self] in if let self, self.generation == g, self.link == .waiting { self.dial() } }
        } else {
            redialTimer = loop.schedule(after: delay) { [weak self] in
                guard let self else { return }
                self.redialTimer = nil
                if self.generation == g, self.link == .waiting { self.dial() }
            }
        }
    }

    /// Exponential backoff with ±25 % jitter, so many clients of one front do not redial in step.
    private func backoff() -> UInt64 {
        failures += 1
        let exp = min(failures - 1, 16)
        let base = min(options.maxBackoffMs, options.minBackoffMs << UInt64(exp))
        let jitter = Double.random(in: 0.75...1.25)
        return max(100, UInt64(Double(base) * jitter))
    }

    /// Flows waiting for the session (unless `keepWaiting`), and streams of the lost
    /// attachment: all fail now.
    private func failAll(_ failure: FlowFailure, keepWaiting: Bool = false) {
        if !keepWaiting {
            let pending = pendingStreams
            pendingStreams.removeAll()
            if options.hold { counts.holdDrops += UInt64(pending.count) }
            for s in pending { s.fail(failure) }
        }
        let open = streams
        streams.removeAll()
        if !open.isEmpty { counts.streamsReset += UInt64(open.count) }
        for (_, s) in open { s.lost(failure) }
        for (_, a) in associations { a.detached() }
        associations.removeAll()
    }

    /// Schedules the next `tick` a second from now; each tick schedules the one after it.
    private func armTick() {
        tickTimer = loop.schedule(after: 1000) { [weak self] in
            guard let self else { return }
            self.tickTimer = nil
            self.tick()
            if self.link != .stopped { self.armTick() }
        }
    }

    private func tick() {
        let now = loop.now
        switch link {
        case .handshaking:
            // Dialing is bounded by the carrier's connect timeout; this bounds HELLO → STATUS.
            if now - linkSince > Self.handshakeTimeoutMs, let c = carrier {
                c.abort()
                carrierLost("handshake timeout")
            } else if !session.tick(now: now) {
                carrier?.abort()
                carrierLost("no answer from the front")
            }
        case .up:
            if !session.tick(now: now) {
                carrier?.abort()
                carrierLost("keepalive: nothing heard for 2 intervals")
                return
            }
            flushOutput()
        default:
            break
        }
    }

    // MARK: output

    /// Moves the session's queued bytes into the carrier (which frames and sends them after
    /// the current batch of events).
    func flushOutput() {
        guard let c = carrier, c.isOpen, !writeBlocked else { return }
        while session.outputCount > 0 {
            var took = 0
            session.withOutput { bytes in
                took = c.write(bytes)
                return took
            }
            if took == 0 { writeBlocked = true; return }
        }
    }

    func scheduleFlush() {
        guard !flushScheduled else { return }
        flushScheduled = true
        loop.soon(flushAction)
    }

    /// Made once, so a flush per loop iteration allocates nothing.
    private lazy var flushAction: () -> Void = { [weak self] in
        guard let self else { return }
        self.flushScheduled = false
        self.flushOutput()
    }

    // MARK: flows on QUIC streams

    func countUp(_ n: Int) { counts.bytesUp += UInt64(n) }
    func countDown(_ n: Int) { counts.bytesDown += UInt64(n) }

    // MARK: streams

    private func openOnSession(_ s: SessionStream) {
        guard let id = session.openStream(to: s.destination) else {
            // The front's max_streams (STATUS) is reached: the flow is refused, counted, and
            // said once per second at most.
            counts.streamLimitRefusals += 1
            if loop.now - lastLimitLog >= 1000 {
                lastLimitLog = loop.now
                Log.warn("holder.stream-limit", ["outbound": name, "open": session.openStreamCount,
                                                 "max": session.status?.maxStreams ?? 0, "refused": counts.streamLimitRefusals])
            }
            s.fail(.networkUnreachable)
            return
        }
        s.id = id
        streams[id] = s
        counts.flowsOpened += 1
        scheduleFlush()
    }

    /// A stream closed or reset by its flow: forgotten here (the stream told the session).
    public func sessionStreamEnded(_ s: SessionStream) {
        if let i = pendingStreams.firstIndex(where: { $0 === s }) { pendingStreams.remove(at: i) }
        if let id = s.id { streams.removeValue(forKey: id) }
    }

    // MARK: datagrams

    func associationSend(_ a: HolderAssociation, _ payload: UnsafeRawBufferPointer, to: Destination) -> Bool {
        guard link == .up else {
            if options.hold {
                counts.holdDrops += 1
                return false
            }
            return a.sendFallback(payload, to: to, via: fallback)
        }
        if a.id == nil {
            guard let id = session.openAssociation(firstDestination: to) else { return false }
            a.id = id
            associations[id] = a
            counts.flowsOpened += 1
        }
        let ok = session.send(association: a.id!, to: to, payload)
        if ok { counts.bytesUp &+= UInt64(payload.count) }
        scheduleFlush()
        return ok
    }

    func associationClose(_ a: HolderAssociation) {
        guard let id = a.id else { return }
        a.id = nil
        associations.removeValue(forKey: id)
        if link == .up {
            session.closeAssociation(id)
            scheduleFlush()
        }
    }
}

// MARK: - carrier events

extension HolderOutbound: CarrierDelegate {
    public func carrierConnected(_ c: Carrier) {
        guard c === carrier else { return }
        link = .handshaking
        linkSince = loop.now
        counts.carrier = "\(c.kind.rawValue) \(c.tlsDescription)"
        // quic: DGRAMs as QUIC DATAGRAM frames (one that does not fit goes on the session stream).
        session.datagramSink = c.maxDatagram > 0 ? { [weak self, weak c] frame in
            guard let c, frame.count <= c.maxDatagram, c.sendDatagram(frame) else { return false }
            self?.counts.datagramFramesOut += 1
            return true
        } : nil
        session.attach()
        flushOutput()
    }

    public func carrier(_ c: Carrier, received bytes: UnsafeRawBufferPointer) {
        guard c === carrier else { return }
        // With the loop's time: the RTT is the PONG's arrival less the PING's sending, not
        // rounded up to the next keepalive tick (which made a loopback front read 1000 ms).
        let now = loop.now
        feed(c) { () throws(ProtocolError) in try session.receive(bytes, now: now) }
    }

    public func carrier(_ c: Carrier, datagram bytes: UnsafeRawBufferPointer) {
        guard c === carrier else { return }
        counts.datagramFramesIn += 1
        let now = loop.now
        feed(c) { () throws(ProtocolError) in try session.receiveDatagram(bytes, now: now) }
    }

    /// Hands the carrier's bytes to the session and sends what it answers. A protocol error
    /// has queued GOAWAY: it is sent, then the carrier is dropped.
    private func feed(_ c: Carrier, _ receive: () throws(ProtocolError) -> Void) {
        do {
            try receive()
        } catch {
            Log.error("holder.protocol-error", ["outbound": name, "error": error.description])
            flushOutput()
            c.close()
            carrierLost("protocol error: \(error.description)")
            return
        }
        flushOutput()
    }

    public func carrierWritable(_ c: Carrier) {
        guard c === carrier else { return }
        writeBlocked = false
        flushOutput()
    }

    public func carrier(_ c: Carrier, closed reason: CarrierCloseReason) {
        guard c === carrier else { return }
        if case .closed = reason {
            do { try session.carrierEnded() } catch {}
        }
        carrierLost("carrier \(reason)")
    }
}

// MARK: - session events

extension HolderOutbound: ClientSessionDelegate {
    public func sessionEstablished(_ s: ClientSession, status: Status, resumed: Bool) {
        if let problem = Self.unusable(status.overlay, taken: reservedAddresses) {
            // The front is trusted with the overlay, not with the host: an address that would
            // take over loopback, multicast or everything is not put on the TUN. The dial
            // counts as failed, so the backoff grows.
            Log.error("holder.status-refused", ["outbound": name, "overlay": describe(status.overlay), "reason": problem])
            session.goAway(.protocolError, text: "unusable overlay: \(problem)")
            flushOutput()
            carrier?.close()
            carrierLost("STATUS refused: \(problem)")
            return
        }
        link = .up
        failures = 0
        saveInstance(status.instanceID)
        counts.instance = status.instanceID.description
        counts.overlay = describe(status.overlay)
        if resumed { counts.resumes += 1 } else { counts.sessions += 1 }
        Log.info(resumed ? "holder.resumed" : "holder.up",
                 ["outbound": name, "instance": status.instanceID.description, "overlay": counts.overlay,
                  "carrier": counts.carrier, "mtu": status.overlay.mtu])
        onStatus?(status)
        let pending = pendingStreams
        pendingStreams.removeAll()
        for p in pending where !p.isDone { openOnSession(p) }
        flushOutput()
    }

    public func sessionStatusChanged(_ s: ClientSession, status: Status) {
        if let problem = Self.unusable(status.overlay, taken: reservedAddresses) {
            Log.error("holder.status-refused", ["outbound": name, "overlay": describe(status.overlay), "reason": problem])
            return
        }
        counts.overlay = describe(status.overlay)
        Log.info("holder.status", ["outbound": name, "overlay": counts.overlay])
        onStatus?(status)
    }

    public func sessionGoAway(_ s: ClientSession, reason: GoAwayReason, text: String) {
        // A front going away in order is news, not an error; a refusal is.
        let level: Log.Level = reason == .shutdown || reason == .superseded ? .warn : .error
        Log.emit(level, "holder.goaway", ["outbound": name, "reason": reason.description, "text": text])
        counts.lastError = "GOAWAY \(reason)\(text.isEmpty ? "" : ": \(text)")"
        if reason == .unknownInstance {
            session.forgetInstance()
            if link != .up { helloAtOnce = true }
        }
        // The front closes the carrier after GOAWAY; the close event redials with backoff.
    }

    public func streamOpened(_ s: ClientSession, stream: UInt32) {
        streams[stream]?.connected()
    }

    public func streamOpenFailed(_ s: ClientSession, stream: UInt32, reason: OpenFailReason) {
        guard let hs = streams.removeValue(forKey: stream) else { return }
        hs.id = nil
        hs.fail(reason.flowFailure)
    }

    public func streamReadable(_ s: ClientSession, stream: UInt32) {
        streams[stream]?.readable()
    }

    public func streamWritable(_ s: ClientSession, stream: UInt32) {
        streams[stream]?.writable()
    }

    public func streamReset(_ s: ClientSession, stream: UInt32, reason: RstReason) {
        guard let hs = streams.removeValue(forKey: stream) else {
            if let a = associations.removeValue(forKey: stream) { a.id = nil }
            return
        }
        hs.id = nil
        hs.lost(.other(ECONNRESET))
    }

    public func datagramReceived(_ s: ClientSession, association: UInt32, from: Destination,
                                 payload: UnsafeRawBufferPointer) {
        guard let a = associations[association], case .ip(let endpoint) = from else { return }
        counts.bytesDown &+= UInt64(payload.count)
        a.events?.datagramReceived(payload, from: endpoint)
    }

    public func sessionOutputReady(_ s: ClientSession) {
        scheduleFlush()
    }

    /// Why an overlay cannot go on the TUN, or nil when it can: its addresses pass the same
    /// check as an SSTP server's IPCP address (`HostAddress.problem`: not loopback,
    /// unspecified, multicast, broadcast or reserved, not the gateway itself, not an address
    /// the TUN already has), its gateways are not loopback, unspecified or multicast.
    /// `taken`: the TUN's configured addresses; an overlay prefix equal to one of them is no
    /// change and passes.
    static func unusable(_ o: Overlay, taken: [IPPrefix] = []) -> String? {
        func bad(_ a: IPAddress) -> Bool { a.isLoopback || a.isUnspecified || a.isMulticast }
        func others(_ p: IPPrefix) -> [IPAddress] { taken.filter { $0 != p }.map(\.address) }
        if let why = HostAddress.problem(o.ipv4.address, peer: o.gateway4, taken: others(o.ipv4)) {
            return "IPv4 address \(o.ipv4.address): \(why)"
        }
        if bad(o.gateway4) { return "IPv4 address or gateway is loopback, unspecified or multicast" }
        if o.ipv4.length < 8 { return "IPv4 prefix /\(o.ipv4.length) is wider than /8" }
        if let v6 = o.ipv6 {
            if let why = HostAddress.problem(v6.address, peer: o.gateway6, taken: others(v6)) {
                return "IPv6 address \(v6.address): \(why)"
            }
            if o.gateway6.map(bad) == true { return "IPv6 address or gateway is loopback, unspecified or multicast" }
            if v6.length < 16 { return "IPv6 prefix /\(v6.length) is wider than /16" }
        }
        if o.dns.contains(where: { $0.isUnspecified || $0.isMulticast }) { return "a DNS server is unspecified or multicast" }
        return nil
    }

    private func describe(_ o: Overlay) -> String {
        var t = o.ipv4.description
        if let v6 = o.ipv6 { t += " " + v6.description }
        return t
    }
}

// MARK: - one UDP association

final class HolderAssociation: DatagramAssociation, DatagramEvents {
    weak var events: DatagramEvents?
    unowned let holder: HolderOutbound
    var id: UInt32?
    /// Without hold, datagrams sent while the session is down go direct on this.
    private var fallbackAssociation: DatagramAssociation?

    init(holder: HolderOutbound, events: DatagramEvents) {
        self.holder = holder
        self.events = events
    }

    func send(_ payload: UnsafeRawBufferPointer, to: Destination) -> Bool {
        holder.associationSend(self, payload, to: to)
    }

    /// The session's attachment ended: the next datagram opens the association again.
    func detached() { id = nil }

    func sendFallback(_ payload: UnsafeRawBufferPointer, to: Destination, via fallback: Outbound?) -> Bool {
        if fallbackAssociation == nil { fallbackAssociation = fallback?.openAssociation(events: self) }
        return fallbackAssociation?.send(payload, to: to) ?? false
    }

    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {
        events?.datagramReceived(payload, from: from)
    }

    func close() {
        fallbackAssociation?.close()
        fallbackAssociation = nil
        holder.associationClose(self)
    }
}
