import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftTLS
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
    var link = Link.idle
    var carrier: Carrier?
    var linkSince: UInt64 = 0
    var failures = 0
    /// Bumped for every carrier, so a redial scheduled for an older one is ignored.
    var generation = 0
    /// The next redial while `waiting`; cancelled by a dial that comes first and by `stop`.
    private var redialTimer: TimerHandle?
    /// The next `tick`, armed for when it is due (`armTick`).
    private var tickTimer: TimerHandle?
    private var tickAt = UInt64.max
    /// Replay: when parked streams are given up (HolderReplay.swift).
    var parkTimer: TimerHandle?
    var parkReason: String?
    var lastContinued: UInt64 = 0

    var streams: [UInt32: SessionStream] = [:]
    var pendingStreams: [SessionStream] = []
    /// The bytes its streams carried (they count them as they write and read the session).
    let streamMeter = SessionStreamMeter()
    /// The bytes of flows on QUIC streams of their own (quic, h3).
    let flowStreamMeter = StreamMeter()
    var associations: [UInt32: HolderAssociation] = [:]
    var writeBlocked = false
    var lastLimitLog: UInt64 = 0
    private var flushScheduled = false

    /// Counters kept as things happen; `stats` adds what is derived from the link and session.
    var counts = HolderStats()
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
    }

    /// The instance id last written to the state file (HolderInstance.swift).
    var savedInstance: InstanceID?

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
        // mptcp: a carrier running Multipath TCP stays while a subflow of each connection still
        // starts at an address the host has; the kernel moves the traffic there and its path
        // manager adds the new path's endpoints as subflows (docs/holder.md, "Multipath TCP").
        // If the connection does not survive, its end goes the usual way (RESUME).
        if let c = carrier, link == .up, options.carrier.multipath, case let paths = c.multipath,
           !paths.isEmpty, paths.allSatisfy(\.keepsAPath) {
            counts.multipathKept += 1
            Log.info("holder.path-kept", ["outbound": name, "mptcp": paths.map(\.description).joined(separator: "; ")])
            return "keeping the Multipath TCP carrier (the kernel moves it to the paths it has; RESUME only if it ends)"
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
        session.dropParked()
        cancelParkTimer()
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
    var helloAtOnce = false

    /// The carrier is gone (closed by the peer, broken, dead, or dropped by us).
    func carrierLost(_ why: String, redialIn fixedDelay: UInt64? = nil) {
        let wasUp = link == .up
        let retryHello = helloAtOnce && !wasUp
        helloAtOnce = false
        carrier = nil
        writeBlocked = false
        session.detach()
        if session.isParked {
            // Replay (docs/protocol.md §8.1): the flows pause until a RESUME continues them.
            failAll(.networkUnreachable, keepWaiting: retryHello, keepStreams: true)
            parkStreams()
        } else {
            failAll(wasUp ? .other(ECONNRESET) : .networkUnreachable, keepWaiting: retryHello)
        }
        counts.carrierLosses += wasUp ? 1 : 0
        counts.lastError = why
        guard link != .stopped else { return }
        link = .waiting
        armTick()
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
    func failAll(_ failure: FlowFailure, keepWaiting: Bool = false, keepStreams: Bool = false) {
        if !keepWaiting {
            let pending = pendingStreams
            pendingStreams.removeAll()
            if options.hold { counts.holdDrops += UInt64(pending.count) }
            for s in pending { s.fail(failure) }
        }
        if keepStreams { return }
        let open = streams
        streams.removeAll()
        if !open.isEmpty { counts.streamsReset += UInt64(open.count) }
        for (_, s) in open { s.lost(failure) }
        for (_, a) in associations { a.detached() }
        associations.removeAll()
    }

    /// Arms `tick` on the loop's timer heap for when it is next due: the handshake's limit
    /// while handshaking, the session's next keepalive deadline (`ClientSession.nextTick`)
    /// while handshaking or up; nothing otherwise. Each tick arms the next.
    func armTick() {
        if let t = tickTimer { loop.cancel(t) }
        tickTimer = nil
        tickAt = .max
        let now = loop.now
        let at: UInt64
        switch link {
        case .handshaking: at = min(linkSince &+ Self.handshakeTimeoutMs &+ 1, session.nextTick(now: now) ?? .max)
        case .up: guard let due = session.nextTick(now: now) else { return }; at = due
        default: return
        }
        tickAt = at
        tickTimer = loop.schedule(at: at) { [weak self] in
            guard let self else { return }
            self.tickTimer = nil
            self.tickAt = .max
            self.tick()
            self.armTick()
        }
    }

    /// A stream or association opened: its idle storage is looked at within a second.
    func armTickForStreams() {
        if tickAt > loop.now &+ 1000 { armTick() }
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
}

// MARK: - carrier events

extension HolderOutbound: CarrierDelegate {
    public func carrierConnected(_ c: Carrier) {
        guard c === carrier else { return }
        link = .handshaking
        linkSince = loop.now
        armTick()
        counts.carrier = "\(c.kind.rawValue) \(c.tlsDescription)"
        // mptcp: which one the kernel gave (MPTCP, or plain TCP after a fallback), said once per carrier.
        if options.carrier.multipath { Log.info("holder.mptcp", ["outbound": name, "carrier": c.multipath.map(\.description).joined(separator: "; ")]) }
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
