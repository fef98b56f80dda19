import LoftCarriers
import LoftConfig
import LoftControl
import LoftCore
import LoftIO
import LoftDirect
import LoftProtocol
import LoftTLS

/// The front: accepts carriers, runs one FrontSession on each, hands out overlay addresses per
/// instance and dials the destinations of the sessions' streams from this host.
public final class FrontServer: CarrierListenerDelegate {
    public let settings: FrontSettings
    let loop: EventLoop
    let runtime: CarrierRuntime
    let outbound: DirectOutbound
    /// Checked on every address a client names (OPEN, DGRAM) and, in the outbound, on every
    /// address a name it sends resolves to.
    let destinationAllowed: (IPAddress) -> Bool
    let pool: AddressPool
    let limits: SessionLimits
    let keepaliveMs: UInt32
    let expiryMs: UInt64
    let connectTimeoutMs: UInt64
    let udpIdleMs: UInt64
    private let tokens: [[UInt8]]
    private var listener: CarrierListener?
    private var control: ControlServer?
    private var connections: [ObjectIdentifier: FrontConnection] = [:]
    /// Which connection holds each attached instance.
    private var attachments: [InstanceID: FrontConnection] = [:]
    /// Replay: sessions whose carrier was lost, streams kept for a RESUME (FrontReplay.swift).
    var parked: [InstanceID: FrontConnection] = [:]
    let resumeGraceMs: UInt64
    var stats = FrontStats()
    /// Freed memory back to the system after a burst of ended streams and flows.
    private(set) lazy var heapTrim = HeapTrim(loop: loop)
    private(set) var shuttingDown = false
    /// TCP payload moved by the relays' splices (client → destinations is up).
    let meter = SpliceMeter()

    /// Carriers that have not sent HELLO/RESUME yet must do so within this.
    var helloDeadlineMs: UInt64 = 10_000
    /// Carriers beyond max-sessions kept open at once (handshakes in flight, resumes racing their
    /// old carrier).
    static let extraCarriers = 64

    public var localEndpoint: Endpoint? { listener?.localEndpoint }

    public init(settings: FrontSettings, loop: EventLoop) throws {
        self.settings = settings
        self.loop = loop
        runtime = try CarrierRuntime(loop: loop)
        pool = AddressPool(ipv4: settings.pool.ipv4, ipv6: settings.pool.ipv6, maxLeases: settings.maxSessions)
        // 1 MiB receive window per stream, as the holder uses: 256 KiB caps one upload at half
        // the carrier's speed on loopback (bench/holder); idle streams give their buffers back.
        var l = SessionLimits(streamWindow: 1 << 20)
        l.maxStreams = settings.maxStreams
        // Replay (docs/protocol.md §8.1): on unless resume-grace is 0.
        resumeGraceMs = settings.resumeGrace.wholeMilliseconds
        l.replay = resumeGraceMs > 0
        l.maxReplayBytes = settings.resumeBuffer
        limits = l
        keepaliveMs = UInt32(clamping: settings.keepalive.wholeMilliseconds)
        expiryMs = settings.instanceExpiry.wholeMilliseconds
        connectTimeoutMs = settings.connectTimeout.wholeMilliseconds
        udpIdleMs = max(1, settings.udpIdleTimeout.wholeMilliseconds)
        tokens = settings.tokens.map { Array($0.utf8) }
        destinationAllowed = Self.destinationAllowed(settings: settings)
        // A name a client sends is held to the same addresses as one it names itself.
        outbound = DirectOutbound(name: "front", loop: loop, resolver: runtime.resolver,
                                  allowResolved: destinationAllowed)
    }


    /// Loads the state file (if any), binds the listener (and the control socket), starts the
    /// timers.
    public func start() throws {
        loadState()
        let kinds = Set(settings.carriers.compactMap { CarrierKind(rawValue: $0.rawValue) })
        var options = CarrierServerOptions(listen: settings.listen, path: settings.path, kinds: kinds,
                                           tls: TLSServerOptions(certificateFile: settings.certificateFile,
                                                                 keyFile: settings.keyFile))
        options.quicMaxStreams = settings.maxStreams
        options.quicMaxPacket = settings.quicMaxPacket
        options.multipath = settings.mptcp
        switch settings.quicRetry {
        case .auto: options.quicRetry = .auto
        case .always: options.quicRetry = .always
        case .never: options.quicRetry = .never
        case .threshold(let n): options.quicRetry = .under(threshold: n)
        }
        listener = try CarrierListener(options, runtime: runtime, delegate: self)
        if let path = settings.control {
            control = try ControlServer(path: path, loop: loop) { [weak self] line in
                guard let self else { return .failure(.init("stopping")) }
                return self.handleControl(line)
            }
        }
    }

    // MARK: listener

    public func carrierListener(_ listener: CarrierListener, admit request: CarrierRequest) -> Bool {
        !shuttingDown
    }

    public func carrierListener(_ listener: CarrierListener, accepted carrier: Carrier) {
        stats.carriersAccepted += 1
        if !carrier.multipath.isEmpty, carrier.multipath.allSatisfy(\.active) { stats.carriersMptcp += 1 }
        let connection = FrontConnection(server: self, carrier: carrier)
        if connections.count >= settings.maxSessions + Self.extraCarriers {
            stats.carriersRefused += 1
            Log.info("session-refused", ["reason": "overloaded", "peer": carrier.peer.map { "\($0)" } ?? "-",
                                         "carriers": connections.count])
            connection.refuse(.overloaded, "too many carriers")
            return
        }
        connections[ObjectIdentifier(connection)] = connection
        connection.armTick()
        Log.debug("carrier-accepted", ["peer": carrier.peer.map { "\($0)" } ?? "-", "carrier": carrier.kind.rawValue,
                                       "tls": carrier.tlsDescription])
        loop.schedule(after: helloDeadlineMs) { [weak self, weak connection] in
            guard let self, let connection, connection.isAwaitingHello else { return }
            self.stats.refusedNoHello += 1
            Log.info("session-refused", ["reason": "no-hello", "peer": connection.peerText])
            connection.finish(.protocolError, "no HELLO or RESUME within \(self.helloDeadlineMs) ms")
        }
    }

    // MARK: from connections

    func tokenAccepted(_ token: String) -> Bool {
        // Compare every configured token in full so timing does not tell how much matched.
        let given = Array(token.utf8)
        var found = false
        for t in tokens {
            var diff = t.count ^ given.count
            for i in 0..<t.count { diff |= Int(t[i] ^ (i < given.count ? given[i] : 0)) }
            if diff == 0 { found = true }
        }
        return found
    }

    enum AdmitResult {
        case accepted(Status)
        case refused(GoAwayReason, String)
    }

    /// HELLO with a good token: a new instance with the next free addresses.
    func admitNew(_ connection: FrontConnection) -> AdmitResult {
        guard !shuttingDown else { return .refused(.shutdown, "the front is shutting down") }
        let id = InstanceID.random()
        guard let lease = pool.assign(id) else {
            stats.refusedOverloaded += 1
            return .refused(.overloaded, pool.count >= settings.maxSessions ? "max-sessions reached" : "no overlay addresses left")
        }
        attachments[id] = connection
        stats.sessionsOpened += 1
        stateChanged()
        return .accepted(status(for: lease))
    }

    /// RESUME with a good token: the same addresses; an older carrier of the instance is told
    /// it was superseded.
    func admitResume(_ connection: FrontConnection, instance id: InstanceID) -> AdmitResult {
        guard !shuttingDown else { return .refused(.shutdown, "the front is shutting down") }
        guard pool.lease(id) != nil else {
            stats.refusedUnknownInstance += 1
            return .refused(.unknownInstance, "instance \(id) is not known here (expired or never seen)")
        }
        if let old = attachments[id], old !== connection {
            stats.sessionsSuperseded += 1
            Log.info("session-superseded", ["instance": id, "old_peer": old.peerText, "new_peer": connection.peerText])
            old.finish(.superseded, "instance resumed on another carrier")
        }
        guard let lease = pool.attach(id) else { return .refused(.unknownInstance, "instance \(id) is not known here") }
        attachments[id] = connection
        stats.sessionsResumed += 1
        stateChanged()
        return .accepted(status(for: lease))
    }

    private func status(for lease: Lease) -> Status {
        let v4 = IPPrefix(lease.ipv4, settings.pool.ipv4.length)!
        let v6 = lease.ipv6.flatMap { a in settings.pool.ipv6.flatMap { IPPrefix(a, $0.length) } }
        let overlay = Overlay(ipv4: v4, gateway4: pool.gateway4, ipv6: v6, gateway6: v6 == nil ? nil : pool.gateway6,
                              mtu: UInt16(settings.mtu), dns: settings.dns)
        return Status(instanceID: lease.instanceID, keepaliveMs: keepaliveMs, maxStreams: UInt32(settings.maxStreams),
                      overlay: overlay)
    }

    func attachments(_ id: InstanceID) -> FrontConnection? { attachments[id] }

    func registerAttached(_ connection: FrontConnection, _ id: InstanceID) {
        attachments[id] = connection
        connections[ObjectIdentifier(connection)] = connection
    }

    func forgetConnection(_ connection: FrontConnection) {
        connections.removeValue(forKey: ObjectIdentifier(connection))
    }

    /// The connection's carrier is gone: its instance (if any) is kept for RESUME until expiry.
    func connectionEnded(_ connection: FrontConnection) {
        connections.removeValue(forKey: ObjectIdentifier(connection))
        if let id = connection.instanceID, parked[id] === connection { parked.removeValue(forKey: id) }
        if let id = connection.instanceID, attachments[id] === connection {
            attachments.removeValue(forKey: id)
            pool.detach(id, now: loop.now, expiryMs: expiryMs)
            expireAt(loop.now &+ expiryMs)
            stateChanged()
        }
    }

    /// Whether a destination may be dialed: not unspecified, multicast or broadcast, and not in
    /// the overlay pools (the front is no router between its clients).
    static func destinationAllowed(settings: FrontSettings) -> (IPAddress) -> Bool {
        let pool4 = settings.pool.ipv4, pool6 = settings.pool.ipv6
        return { address in
            if address.isUnspecified || address.isMulticast { return false }
            if case .v4(let a) = address, a == UInt32.max { return false }
            if pool4.contains(address) { return false }
            if let pool6, pool6.contains(address) { return false }
            return true
        }
    }

    // MARK: timers

    // Each connection arms its own keepalive deadline (FrontConnection.armTick).

    /// A state write that failed is tried again a second later (until `shutdown`).
    private var stateRetryTimer: TimerHandle?

    private func armStateRetry() {
        guard stateRetryTimer == nil, !shuttingDown else { return }
        stateRetryTimer = loop.schedule(after: 1000) { [weak self] in
            guard let self else { return }
            self.stateRetryTimer = nil
            if self.stateDirty && !self.shuttingDown { self.scheduleStateWrite() }
        }
    }

    /// A detached instance's expiry: a timer at that time frees whatever has expired by then
    /// (nothing, if the instance was resumed meanwhile).
    private func expireAt(_ at: UInt64) {
        loop.schedule(at: at) { [weak self] in
            guard let self, !self.shuttingDown else { return }
            for lease in self.pool.sweep(now: self.loop.now) {
                self.stats.instancesExpired += 1
                Log.info("instance-expired", ["instance": lease.instanceID, "ipv4": lease.ipv4])
                self.stateChanged()
            }
        }
    }

    // MARK: state file

    /// The table differs from the state file.
    private(set) var stateDirty = false
    private var stateWriteScheduled = false
    private var lastStateWrite: UInt64?
    /// The file at start could not be used: it is left for the operator until the table changes.
    private var keepingIgnoredFile = false
    private var stateWriteFailing = false
    /// Writes are coalesced to at most one per this, and one per loop iteration.
    static let stateWriteIntervalMs: UInt64 = 100

    /// An instance was created, detached, resumed or expired.
    func stateChanged() {
        guard settings.stateFile != nil else { return }
        stateDirty = true
        scheduleStateWrite()
    }

    private func scheduleStateWrite() {
        guard !stateWriteScheduled else { return }
        stateWriteScheduled = true
        let due = (lastStateWrite ?? 0) &+ Self.stateWriteIntervalMs
        let write = { [weak self] in
            guard let self else { return }
            self.stateWriteScheduled = false
            self.saveState()
        }
        // After the current batch of events, so one iteration's changes make one write.
        if lastStateWrite == nil || loop.now >= due { loop.soon(write) } else { loop.schedule(at: due, write) }
    }

    /// Writes the state file if the table changed since the last write; `final` (a clean exit)
    /// writes it in any case, with the lifetimes left now, unless an ignored file is being kept.
    /// false when the write failed (it is tried again on the next change or sweep).
    @discardableResult
    public func saveState(final: Bool = false) -> Bool {
        guard let path = settings.stateFile, stateDirty || (final && !keepingIgnoredFile) else { return true }
        lastStateWrite = loop.now
        let text = FrontState.encode(FrontState.snapshot(of: pool, now: loop.now))
        if let error = StateFile.write(text, to: path) {
            // Once per run of failures: the retry each second would flood the log.
            if !stateWriteFailing { Log.warn("state-file-write-failed", ["path": path, "error": error]) }
            stateWriteFailing = true
            if !final { armStateRetry() }
            return false
        }
        if stateWriteFailing { Log.info("state-file-written", ["path": path]) }
        stateWriteFailing = false
        stateDirty = false
        keepingIgnoredFile = false
        return true
    }

    /// Restores the instances of the state file, all detached. A file that does not parse is
    /// logged and left alone (not overwritten before the first change), and the front starts empty.
    private func loadState() {
        guard let path = settings.stateFile else { return }
        let bytes: [UInt8]
        switch StateFile.read(path, maxBytes: FrontState.maxFileBytes) {
        case .missing:
            Log.info("state-loaded", ["path": path, "instances": 0, "file": "absent"])
            return
        case .failed(let error):
            Log.warn("state-file-ignored", ["path": path, "reason": "cannot read: \(error)"])
            keepingIgnoredFile = true
            return
        case .bytes(let b): bytes = b
        }
        let snapshot: FrontState.Snapshot
        do throws(FrontState.Corrupt) {
            snapshot = try FrontState.decode(bytes)
        } catch {
            Log.warn("state-file-ignored", ["path": path, "reason": error.description])
            keepingIgnoredFile = true
            return
        }
        let (restored, dropped) = FrontState.restore(snapshot, into: pool, now: loop.now, expiryMs: expiryMs)
        for (e, reason) in dropped {
            Log.warn("state-entry-dropped", ["instance": e.id, "ipv4": e.ipv4, "ipv6": e.ipv6.map { "\($0)" } ?? "-",
                                             "reason": reason])
        }
        for lease in pool.allLeases { if let at = lease.expiresAt { expireAt(at) } }
        Log.info("state-loaded", ["path": path, "instances": restored, "dropped": dropped.count])
    }

    // MARK: stats and control

    public func report() -> FrontStats {
        var s = stats
        s.bytesUp = meter.bytesUp
        s.bytesDown = meter.bytesDown
        s.carriersOpen = connections.count
        s.memoryTrims = heapTrim.trims
        s.sessionsAttached = attachments.count
        s.instancesDetached = pool.count - pool.attachedCount
        for c in connections.values {
            s.streamsOpen += c.openStreams
            s.associationsOpen += c.openAssociations
            s.replayHeldBytes += c.session.replayHeldBytes
        }
        s.sessionsParkedNow = parked.count
        for c in parked.values { s.replayHeldBytes += c.session.replayHeldBytes }
        if let l = listener?.stats, let q = listener?.quicStats {
            s.handshakesFailed = UInt64(l.handshakeFailed + q.handshakeFailed)
            s.handshakesEvicted = UInt64(l.evicted + q.evicted)
            s.requestsRejected = UInt64(l.rejected)
            s.mptcpAccepted = UInt64(l.multipathAccepted)
            s.mptcpFallbacks = UInt64(l.multipathFallbacks)
            s.quicPacketsDropped = UInt64(q.dropped)
            if let v = listener?.quicValidation {
                s.quicRetries = UInt64(v.retries)
                s.quicTokensValidated = UInt64(v.validated)
                s.quicTokensInvalid = UInt64(v.badTokens)
                s.quicResets = UInt64(v.resets)
                s.quicAmplificationHeld = UInt64(v.amplificationHeld)
            }
        }
        return s
    }

    public func logStats(_ event: String = "stats") {
        Log.emit(.info, event, report().fields)
    }

    private func handleControl(_ line: String) -> Result<String, ControlServer.ControlError> {
        switch line.trimmingCharacters() {
        case "stats", "status": return .success(report().text)
        case "sessions":
            var out = ""
            for c in connections.values.sorted(by: { $0.openedAt < $1.openedAt }) { out += c.summary + "\n" }
            return .success(out)
        default: return .failure(.init("unknown request (stats, sessions)"))
        }
    }

    // MARK: shutdown

    /// GOAWAY shutdown to every session, carriers closed gracefully; `done` runs once their
    /// bytes are out (or after a grace period).
    public func shutdown(_ done: @escaping () -> Void) {
        guard !shuttingDown else { return }
        shuttingDown = true
        if let t = stateRetryTimer { loop.cancel(t) }
        stateRetryTimer = nil
        listener?.close()
        control?.stop()
        control = nil
        let open = Array(connections.values)
        for c in open { c.finish(.shutdown, "the front is shutting down") }
        for c in Array(parked.values) { c.endParked("the front is shutting down") }
        // The listener stopped taking new carriers, but quic's established ones still send
        // through its socket (their GOAWAY and CONNECTION_CLOSE); it closes with the last.
        let deadline = loop.now + 2000
        func check() {
            if open.allSatisfy({ $0.carrierFlushed }) { done(); return }
            if loop.now >= deadline {
                for c in open where !c.carrierFlushed { c.abortClosingCarrier() }
                done()
                return
            }
            loop.schedule(after: 100, check)
        }
        loop.schedule(after: 100, check)
    }
}

extension String {
    func trimmingCharacters() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" || f == "\r" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\r" { s = s.dropLast() }
        return String(s)
    }
}
