import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftTLS

/// One carrier and the FrontSession on it: the attachment of one instance. Owns the relays of
/// the session's streams; when the carrier goes, they go (the instance stays in the pool).
final class FrontConnection: CarrierDelegate, FrontSessionDelegate {
    unowned let server: FrontServer
    private var carrier: Carrier?
    /// The carrier after a graceful close, still sending what it holds (watched at shutdown).
    private var closingCarrier: Carrier?
    let session: FrontSession
    let openedAt: UInt64
    let peerText: String
    /// The instance for log lines: its id, or "-" before HELLO/RESUME was accepted.
    private var instanceText: String { instanceID.map { "\($0)" } ?? "-" }
    private(set) var instanceID: InstanceID?
    private var clientName = "-"
    private var streams: [UInt32: StreamRelay] = [:]
    private var associations: [UInt32: DatagramRelay] = [:]
    /// quic: flows on QUIC streams of their own.
    private var flows: [ObjectIdentifier: FlowRelay] = [:]
    /// Set once the session is finished: a GOAWAY is queued and the carrier closes after flushing.
    private var ending = false
    /// Reading from the carrier is paused while the session's output backs up.
    private var readingPaused = false
    /// The next keepalive `tick`, armed for when the session has something due (`armTick`).
    private var tickTimer: TimerHandle?
    private var tickAt = UInt64.max

    /// Session output past this pauses reading from the client. Stream data never takes the
    /// output past the session's bound (writableBytes stops first), so only a client that keeps
    /// asking (PING, OPEN) without reading the answers gets here.
    let outputHighWater: Int

    init(server: FrontServer, carrier: Carrier) {
        self.server = server
        self.carrier = carrier
        session = FrontSession(limits: server.limits, keepaliveMs: server.keepaliveMs,
                               replayGraceMs: UInt32(clamping: server.resumeGraceMs))
        outputHighWater = server.limits.maxOutputBytes
        openedAt = server.loop.now
        peerText = carrier.peer.map { "\($0)" } ?? "-"
        session.delegate = self
        carrier.delegate = self
        useDatagrams(of: carrier)
    }

    /// quic: DGRAMs as QUIC DATAGRAM frames (one that does not fit goes on the session stream).
    private func useDatagrams(of carrier: Carrier) {
        session.datagramSink = carrier.maxDatagram > 0 ? { [weak carrier] frame in
            guard let carrier, frame.count <= carrier.maxDatagram else { return false }
            return carrier.sendDatagram(frame)
        } : nil
    }

    // MARK: replay (docs/protocol.md §8.1)

    /// Loop time the carrier was lost and the session parked; nil while attached.
    private(set) var parkedAt: UInt64?
    private var graceTimer: TimerHandle?
    /// What a parked session holds: bytes kept for replay and received bytes not yet read.
    var parkedBytes: Int { session.replayHeldBytes + session.bufferedBytes }

    /// The carrier is lost (closed, reset, or dead): with replay the session parks, its relays
    /// and destination sockets stay (the sockets are not read while writes take nothing), for
    /// `resume-grace`; otherwise everything ends as before.
    private func carrierGone() {
        if !ending, instanceID != nil, server.resumeGraceMs > 0, session.park() { park() } else { tearDown(graceful: false) }
    }

    /// A continuing RESUME arrived on another carrier while this one still looks alive: it is
    /// dropped and the session parked, for the RESUME to take it. false: no replay here.
    func parkNow() -> Bool {
        guard carrier != nil, !ending, instanceID != nil, session.park() else { return false }
        Log.info("session-superseded", ["instance": instanceText, "old_peer": peerText, "streams": streams.count])
        park()
        return true
    }

    private func park() {
        guard let c = carrier else { return }
        carrier = nil
        c.delegate = nil
        c.abort()
        if let t = tickTimer { server.loop.cancel(t) }
        tickTimer = nil
        tickAt = .max
        readingPaused = false
        // Flows on QUIC streams of their own are not in the session's byte stream: they end.
        let flowRelays = Array(flows.values)
        flows.removeAll()
        for f in flowRelays { f.abandon() }
        server.stats.streamsReset += UInt64(flowRelays.count)
        server.stats.streamsLost += UInt64(flowRelays.count)
        parkedAt = server.loop.now
        Log.info("session-parked", ["instance": instanceText, "peer": peerText, "streams": streams.count,
                                    "associations": associations.count, "held_bytes": parkedBytes,
                                    "grace_ms": server.resumeGraceMs])
        graceTimer = server.loop.schedule(after: server.resumeGraceMs) { [weak self] in
            guard let self, self.parkedAt != nil else { return }
            self.graceTimer = nil
            self.server.stats.parkedExpired += 1
            self.endParked("resume-grace of \(self.server.resumeGraceMs) ms over")
        }
        server.connectionParked(self)
    }

    /// A parked session ends: its streams are reset both ways (the client learns it at its
    /// next RESUME, or by its own grace timer), destination sockets closed.
    func endParked(_ why: String) {
        guard parkedAt != nil else { return }
        Log.info("session-park-ended", ["instance": instanceText, "reason": why, "streams": streams.count,
                                        "associations": associations.count])
        server.stats.streamsLost += UInt64(streams.count + associations.count)
        tearDown(graceful: false)
    }

    /// Takes over the carrier of `from`, which read a continuing RESUME for this parked
    /// session: the client has `peerReceived` of the session's bytes. The STATUS that continues
    /// the streams goes first, then what the client has not got. A count this front never sent
    /// is a protocol error: GOAWAY on the new carrier, and the parked session ends.
    func resume(from: FrontConnection, carrier c: Carrier, peerReceived: UInt64) -> Bool {
        guard parkedAt != nil else { return false }
        let before = session.counters.replayedBytes
        do throws(ProtocolError) {
            try session.resumeParked(peerReceived: peerReceived)
        } catch {
            server.stats.protocolErrors += 1
            Log.info("session-protocol-error", ["instance": instanceText, "peer": from.peerText, "error": error])
            from.refuseResume(error)
            endParked("RESUME: \(error)")
            return true
        }
        if let t = graceTimer { server.loop.cancel(t) }
        graceTimer = nil
        parkedAt = nil
        let replayed = session.counters.replayedBytes &- before
        guard server.parkedResumed(self, replayed: replayed) else {
            tearDown(graceful: false)
            return false
        }
        from.giveUpCarrier()
        server.handedOver(from)
        carrier = c
        c.delegate = self
        useDatagrams(of: c)
        Log.info("session-resumed", ["instance": instanceText, "peer": from.peerText, "carrier": c.kind.rawValue,
                                     "streams": streams.count, "associations": associations.count,
                                     "replayed_bytes": replayed])
        server.loop.soon { [weak self] in
            guard let self, self.carrier === c else { return }
            c.setReading(true)
            self.armTick()
            self.flushOutput()
        }
        return true
    }

    /// This carrier's RESUME continued a parked session: it belongs to that one now.
    private func giveUpCarrier() {
        ending = true
        carrier = nil
        if let t = tickTimer { server.loop.cancel(t) }
        tickTimer = nil
    }

    private func refuseResume(_ error: ProtocolError) {
        _ = refuseAttach(.protocolError, error.description)
    }

    var isAwaitingHello: Bool { carrier != nil && !ending && instanceID == nil }
    var openStreams: Int { streams.count + flows.count }
    var openAssociations: Int { associations.count }
    /// Nothing of ours is left in the carrier (used to time the exit).
    var carrierFlushed: Bool { (carrier ?? closingCarrier)?.drained ?? true }

    /// A shutdown's deadline passed: what the closing carrier has not sent goes unsent (quic:
    /// its CONNECTION_CLOSE now, not after the last acknowledgement).
    func abortClosingCarrier() {
        closingCarrier?.abort()
    }

    var summary: String {
        "instance=\(instanceText) peer=\(peerText) client=\(clientName) streams=\(streams.count) associations=\(associations.count) age_s=\((server.loop.now - openedAt) / 1000)"
    }

    // MARK: ending

    /// A carrier the front will not serve: GOAWAY, then close.
    func refuse(_ reason: GoAwayReason, _ text: String) {
        finish(reason, text)
    }

    /// GOAWAY to the client, the carrier closed once the bytes are handed over, the streams closed.
    func finish(_ reason: GoAwayReason, _ text: String) {
        guard !ending, carrier != nil else { return }
        ending = true
        session.goAway(reason, text: text)
        flushOutput()
        tearDown(graceful: true)
    }

    /// The carrier is finished (closed by the peer, dead, or by `finish`): every stream and
    /// association is dropped, the instance detached.
    private func tearDown(graceful: Bool) {
        if let c = carrier {
            carrier = nil
            c.delegate = nil
            if graceful {
                c.close()
                closingCarrier = c
            } else {
                c.abort()
            }
        } else if parkedAt == nil {
            return
        }
        parkedAt = nil
        if let t = graceTimer { server.loop.cancel(t) }
        graceTimer = nil
        if let t = tickTimer { server.loop.cancel(t) }
        tickTimer = nil
        let relays = Array(streams.values)
        streams.removeAll()
        for r in relays { r.abandon() }
        let flowRelays = Array(flows.values)
        flows.removeAll()
        for f in flowRelays { f.abandon() }
        server.stats.streamsReset += UInt64(relays.count + flowRelays.count)
        server.heapTrim.freed(relays.count + flowRelays.count)
        for a in associations.values { a.close() }
        associations.removeAll()
        server.connectionEnded(self)
    }

    // MARK: keepalive

    /// Arms `tick` on the loop's timer heap for when the session next has something due
    /// (`FrontSession.nextTick`); each tick arms the next. Until the carrier ends or the
    /// session is finishing.
    func armTick() {
        if let t = tickTimer { server.loop.cancel(t) }
        tickTimer = nil
        tickAt = .max
        guard carrier != nil, !ending, let at = session.nextTick(now: server.loop.now) else { return }
        tickAt = at
        tickTimer = server.loop.schedule(at: at) { [weak self] in
            guard let self else { return }
            self.tickTimer = nil
            self.tickAt = .max
            self.tick(now: self.server.loop.now)
            self.armTick()
        }
    }

    /// A stream or association opened, or the session was established (PINGs start): the
    /// next tick comes no later than the new work needs.
    private func armTickSooner(within ms: UInt64) {
        if tickAt > server.loop.now &+ ms { armTick() }
    }

    func tick(now: UInt64) {
        guard carrier != nil, !ending else { return }
        if !session.tick(now: now) {
            server.stats.deadCarriers += 1
            Log.info("carrier-dead", ["instance": instanceText, "peer": peerText])
            carrierGone()
            return
        }
    }

    /// An association without a datagram either way for `udp-idle-timeout` (its own deadline)
    /// is closed (RST timed-out), so its sockets do not stay open for a client that forgot it.
    func associationIdle(_ a: DatagramRelay) {
        guard associations[a.association] === a else { return }
        associations.removeValue(forKey: a.association)
        a.close()
        session.reset(stream: a.association, reason: .timedOut)
        server.stats.associationsTimedOut += 1
        Log.debug("association-timed-out", ["instance": instanceText, "association": a.association])
    }

    // MARK: CarrierDelegate

    func carrierConnected(_ carrier: Carrier) {}

    func carrier(_ carrier: Carrier, received bytes: UnsafeRawBufferPointer) {
        guard !ending else { return }
        do throws(ProtocolError) {
            try session.receive(bytes, now: server.loop.now)
        } catch {
            protocolError(error)
            return
        }
        if ending { return }
        flushOutput()
    }

    func carrier(_ carrier: Carrier, datagram bytes: UnsafeRawBufferPointer) {
        guard !ending else { return }
        do throws(ProtocolError) {
            try session.receiveDatagram(bytes, now: server.loop.now)
        } catch {
            protocolError(error)
            return
        }
        if ending { return }
        flushOutput()
    }

    func carrierWritable(_ carrier: Carrier) {
        flushOutput()
    }

    func carrier(_ carrier: Carrier, closed reason: CarrierCloseReason) {
        guard self.carrier != nil else { return }
        if reason == .closed {
            do throws(ProtocolError) { try session.carrierEnded() } catch { Log.debug("carrier-ended", ["peer": peerText, "error": error]) }
        }
        server.stats.carriersLost += 1
        Log.info(instanceID == nil ? "carrier-closed" : "session-detached",
                 ["instance": instanceText, "peer": peerText, "reason": reason,
                  "streams": streams.count])
        carrierGone()
    }

    private func protocolError(_ error: ProtocolError) {
        server.stats.protocolErrors += 1
        Log.info("session-protocol-error", ["instance": instanceText, "peer": peerText, "error": error])
        // The session queued GOAWAY protocol-error: hand it over, then close.
        ending = true
        flushOutput()
        tearDown(graceful: true)
    }

    /// Moves the session's output into the carrier, as much as it takes.
    func flushOutput() {
        guard let c = carrier else { return }
        while session.outputCount > 0 {
            var took = 0
            session.withOutput { bytes in
                took = c.write(bytes)
                return took
            }
            if took == 0 { break }
        }
        // A client that does not read what we send is not read from either.
        let backedUp = session.outputCount > outputHighWater
        if backedUp != readingPaused && !ending {
            readingPaused = backedUp
            c.setReading(!backedUp)
        }
    }

    // MARK: FrontSessionDelegate: attaching

    func frontSession(_ s: FrontSession, hello: Hello) -> Status? {
        guard server.tokenAccepted(hello.token) else { return refuseToken() }
        clientName = hello.clientName.isEmpty ? "-" : hello.clientName
        switch server.admitNew(self) {
        case .accepted(let status):
            instanceID = status.instanceID
            server.loop.soon { [weak self] in self?.armTickSooner(within: 0) }
            Log.info("session-open", ["instance": status.instanceID, "peer": peerText, "client": clientName,
                                      "carrier": carrier?.kind.rawValue ?? "-", "ipv4": status.overlay.ipv4,
                                      "ipv6": status.overlay.ipv6.map { "\($0)" } ?? "-"])
            return status
        case .refused(let reason, let text):
            return refuseAttach(reason, text)
        }
    }

    func frontSession(_ s: FrontSession, resume: Resume) -> Status? {
        guard server.tokenAccepted(resume.token) else { return refuseToken() }
        if let rp = resume.replay, rp.continuing, let c = carrier,
           let parked = server.parkedConnection(resume.instanceID, for: self),
           parked.resume(from: self, carrier: c, peerReceived: rp.received) {
            return nil
        }
        server.dropParked(resume.instanceID)
        switch server.admitResume(self, instance: resume.instanceID) {
        case .accepted(let status):
            instanceID = status.instanceID
            server.loop.soon { [weak self] in self?.armTickSooner(within: 0) }
            Log.info("session-resumed", ["instance": status.instanceID, "peer": peerText,
                                         "carrier": carrier?.kind.rawValue ?? "-", "ipv4": status.overlay.ipv4])
            return status
        case .refused(let reason, let text):
            return refuseAttach(reason, text)
        }
    }

    private func refuseToken() -> Status? {
        server.stats.refusedBadToken += 1
        Log.info("session-refused", ["reason": "bad-token", "peer": peerText])
        return refuseAttach(.badToken, "token not accepted", logged: true)
    }

    private func refuseAttach(_ reason: GoAwayReason, _ text: String, logged: Bool = false) -> Status? {
        if !logged { Log.info("session-refused", ["reason": reason, "peer": peerText, "detail": text]) }
        // Closed after the session's receive() returns (the GOAWAY is flushed first): the
        // session must not be torn down from inside its own callback.
        session.goAway(reason, text: text)
        ending = true
        server.loop.soon { [weak self] in
            guard let self else { return }
            self.flushOutput()
            self.tearDown(graceful: true)
        }
        return nil
    }

    // MARK: FrontSessionDelegate: streams

    func streamRequested(_ s: FrontSession, stream: UInt32, network: FlowNetwork, destination: Destination) {
        guard !ending else { return }
        armTickSooner(within: 1000)
        switch network {
        case .tcp:
            if case .ip(let e) = destination, !server.destinationAllowed(e.address) {
                server.stats.streamsFailed += 1
                session.refuse(stream: stream, reason: .notAllowed)
                return
            }
            let relay = StreamRelay(connection: self, stream: stream, destination: destination)
            streams[stream] = relay
            relay.start()
        case .udp:
            guard let relay = DatagramRelay(connection: self, association: stream) else {
                session.refuse(stream: stream, reason: .generalFailure)
                return
            }
            associations[stream] = relay
            relay.armIdle()
            server.stats.associationsOpened += 1
            session.accept(stream: stream)
        case .icmp:
            session.refuse(stream: stream, reason: .networkNotSupported)
        }
    }

    func streamReadable(_ s: FrontSession, stream: UInt32) {
        streams[stream]?.sessionReadable()
    }

    func streamWritable(_ s: FrontSession, stream: UInt32) {
        streams[stream]?.sessionWritable()
    }

    func streamReset(_ s: FrontSession, stream: UInt32, reason: RstReason) {
        if let r = streams.removeValue(forKey: stream) {
            server.stats.streamsReset += 1
            server.heapTrim.freed(1)
            r.abandon()
        } else if let a = associations.removeValue(forKey: stream) {
            a.close()
        }
    }

    func datagramReceived(_ s: FrontSession, association: UInt32, to: Destination, payload: UnsafeRawBufferPointer) {
        guard let a = associations[association] else { return }
        a.lastActive = server.loop.now
        if case .ip(let e) = to, !server.destinationAllowed(e.address) {
            server.stats.datagramsDropped += 1
            return
        }
        server.stats.datagramsUp += 1
        a.send(payload, to: to)
    }

    func frontSessionGoAway(_ s: FrontSession, reason: GoAwayReason, text: String) {
        Log.info("session-goaway", ["instance": instanceText, "peer": peerText,
                                    "reason": reason, "text": text])
        // The client is leaving: close once this receive() is over.
        ending = true
        server.loop.soon { [weak self] in self?.tearDown(graceful: true) }
    }

    func sessionOutputReady(_ s: FrontSession) {
        // Flushed at the end of the current receive, or now for events from sockets.
        guard !ending else { return }
        scheduleFlush()
    }

    private var flushScheduled = false

    private func scheduleFlush() {
        guard !flushScheduled else { return }
        flushScheduled = true
        server.loop.soon { [weak self] in
            guard let self else { return }
            self.flushScheduled = false
            self.flushOutput()
        }
    }

    // MARK: from relays

    func relayEnded(_ stream: UInt32) {
        if streams.removeValue(forKey: stream) != nil { server.heapTrim.freed(1) }
    }

    // MARK: quic flows

    /// A client's stream for one flow: taken once the session is established, up to the
    /// front's max-streams (counted with the session's own streams).
    func carrier(_ carrier: Carrier, flowOpened flow: QuicFlow) -> Bool {
        guard !ending, instanceID != nil, openStreams < server.limits.maxStreams else { return false }
        let r = FlowRelay(connection: self, flow: flow)
        flows[ObjectIdentifier(r)] = r
        r.readOpen()
        return true
    }

    func flowEnded(_ r: FlowRelay) {
        guard flows.removeValue(forKey: ObjectIdentifier(r)) != nil else { return }
        server.heapTrim.freed(1)
    }
}
