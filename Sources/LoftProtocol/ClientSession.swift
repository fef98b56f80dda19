import LoftCore

public protocol ClientSessionDelegate: AnyObject {
    /// STATUS after HELLO or RESUME.
    func sessionEstablished(_ s: ClientSession, status: Status, resumed: Bool)
    /// A later STATUS (the overlay changed).
    func sessionStatusChanged(_ s: ClientSession, status: Status)
    /// The front said GOAWAY; it will close the carrier.
    func sessionGoAway(_ s: ClientSession, reason: GoAwayReason, text: String)
    /// OPEN_OK.
    func streamOpened(_ s: ClientSession, stream: UInt32)
    /// OPEN_FAIL; the id is already freed.
    func streamOpenFailed(_ s: ClientSession, stream: UInt32, reason: OpenFailReason)
    /// DATA or FIN arrived (read() tells which).
    func streamReadable(_ s: ClientSession, stream: UInt32)
    /// Send credit grew, or output drained after a write was cut short by it.
    func streamWritable(_ s: ClientSession, stream: UInt32)
    /// The front reset the stream (or association); it is gone.
    func streamReset(_ s: ClientSession, stream: UInt32, reason: RstReason)
    /// `payload` is valid only during the call.
    func datagramReceived(_ s: ClientSession, association: UInt32, from: Destination, payload: UnsafeRawBufferPointer)
    /// Bytes were queued: drain them to the carrier with withOutput().
    func sessionOutputReady(_ s: ClientSession)
    /// Replay (docs/protocol.md §8.1): the parked streams could not be continued (the front
    /// no longer had them, or `dropParked`); `count` streams and associations are gone, without
    /// a `streamReset` each. Comes before `sessionEstablished` when a RESUME found them gone.
    func sessionStreamsLost(_ s: ClientSession, count: Int)
}

extension ClientSessionDelegate {
    public func sessionStreamsLost(_ s: ClientSession, count: Int) {}
}

/// The holder's end of a loft session. One attachment = one carrier; the session (its
/// instance id and overlay) outlives carriers, its streams do not.
public final class ClientSession: SessionEnd, SessionEngineHost {
    public enum State: Sendable { case detached, handshaking, established }

    public weak var delegate: ClientSessionDelegate?
    public private(set) var state: State = .detached
    /// From the first STATUS; RESUME presents it.
    public private(set) var instanceID: InstanceID?
    public private(set) var status: Status?

    private let token: String
    private let clientName: String
    private var resuming = false
    /// Replay was offered in this attachment's HELLO or RESUME.
    private var offered = false
    /// This attachment continues parked streams (its RESUME said so).
    private var continuing = false
    /// A front that did not answer replay (an older one, or turned off): RESUME goes without
    /// the replay fields from then on, which any front reads.
    private var peerLacksReplay = false
    /// The streams may be parked at detach: false after a GOAWAY either way.
    private var parkable = true
    /// The front's grace period from the last STATUS with replay.
    public private(set) var replayGraceMs: UInt32 = 0

    /// `token` and `clientName` must be at most 255 bytes of UTF-8 (the config checks).
    public init(token: String, clientName: String, limits: SessionLimits = .init()) {
        precondition(token.utf8.count <= LoftWire.maxShortString && clientName.utf8.count <= LoftWire.maxShortString,
                     "token and client name are at most 255 bytes")
        self.token = token
        self.clientName = clientName
        super.init(role: .client, limits: limits)
        engine.ignoringInput = true
        engine.host = self
    }

    // MARK: carrier lifecycle

    /// A new carrier is up: queues RESUME when the instance is known, else HELLO.
    public func attach() {
        if engine.parked && (peerLacksReplay || instanceID == nil) { dropParked() }
        continuing = engine.parked
        if continuing {
            // Streams, output and the parser's place in the front's stream stay (§8.1).
            engine.generation += 1
            engine.failed = false
            engine.stashParser()
        } else {
            engine.reset()
        }
        engine.ignoringInput = false
        state = .handshaking
        parkable = true
        resuming = instanceID != nil
        offered = engine.limits.replay && !(resuming && peerLacksReplay)
        // What goes out after the HELLO/RESUME is kept until it is clear whether the front replays.
        engine.retaining = offered
        let hs: Frame
        if let id = instanceID {
            hs = .resume(Resume(instanceID: id, token: token,
                                replay: offered ? ResumeReplay(continuing: continuing, received: continuing ? engine.inOffset : 0) : nil))
        } else {
            hs = .hello(Hello(capabilities: offered ? Hello.replay : 0, token: token, clientName: clientName))
        }
        // With replay offered it is outside the session's byte stream (§8.1); without, it is
        // simply the first frame of the output, as in version 1.
        if offered {
            do { try engine.queuePreamble(hs) } catch { assertionFailure("unencodable \(hs): \(error)") }
        } else {
            engine.queueControl(hs)
        }
        engine.signal()
    }

    /// The carrier is gone. Without replay (or after GOAWAY) every stream and association is
    /// dropped without callbacks and the output is cleared; with replay they are parked
    /// (`isParked`) until the next attach() continues them. Instance id and status stay.
    public func detach() {
        if engine.replay && parkable && !engine.failed && (state == .established || engine.parked) {
            engine.park()   // the parser's place in the front's stream is kept
            engine.generation += 1
        } else if engine.parked {
            dropParked()
        } else {
            engine.reset()
        }
        engine.ignoringInput = true
        state = .detached
    }

    /// Replay: gives up the parked streams (the front's grace period is over, or the holder
    /// stops). `sessionStreamsLost` tells how many there were; the next attach() starts over.
    public func dropParked() {
        guard engine.parked else { return }
        let n = engine.streams.count
        engine.reset()
        delegate?.sessionStreamsLost(self, count: n)
    }

    /// Before the first attach(): the instance a previous run of the client had (its state
    /// file), so the first carrier sends RESUME. A front that has forgotten it answers GOAWAY
    /// unknown-instance, and the next attach() sends HELLO.
    public func restore(instance: InstanceID) {
        guard state == .detached else { return }
        instanceID = instance
    }

    /// After GOAWAY unknown-instance: the next attach() sends HELLO.
    public func forgetInstance() {
        instanceID = nil
        status = nil
        dropParked()
    }

    /// Queues GOAWAY (e.g. shutdown); the embedder flushes and closes.
    public func goAway(_ reason: GoAwayReason, text: String) {
        guard state != .detached else { return }
        parkable = false
        engine.outputHeld = false
        engine.queueControl(.goaway(reason: reason, text: SessionEngine.clip(text)))
        engine.ignoringInput = true
        engine.signal()
    }

    // MARK: streams

    /// OPEN tcp. nil: not established, maxStreams reached, or a destination that cannot be
    /// encoded (an empty or over-long name).
    public func openStream(to destination: Destination) -> UInt32? {
        guard state == .established else { return nil }
        return engine.open(network: .tcp, destination: destination)
    }

    // MARK: associations

    /// OPEN udp; DGRAMs may follow at once.
    public func openAssociation(firstDestination: Destination) -> UInt32? {
        guard state == .established else { return nil }
        return engine.open(network: .udp, destination: firstDestination)
    }

    /// false: dropped (output over maxDatagramQueue, too big, no such association).
    public func send(association: UInt32, to destination: Destination, _ payload: UnsafeRawBufferPointer) -> Bool {
        engine.sendDatagram(association, destination, payload)
    }

    // MARK: engine host

    func engineGate(_ type: FrameType) throws(ProtocolError) -> Bool {
        switch state {
        case .detached:
            return false
        case .handshaking:
            switch type {
            case .status, .goaway, .ping, .pong: return true
            default: throw .unexpectedFrame(type)
            }
        case .established:
            return true
        }
    }

    func engineSessionFrame(_ frame: Frame) throws(ProtocolError) {
        switch frame {
        case .status(let st):
            if state == .handshaking {
                if resuming, let id = instanceID, st.instanceID != id { throw .instanceMismatch }
                if st.replay != nil && !offered { throw .unexpectedFrame(.status) }
                if let rp = st.replay, !continuing, rp.continued { throw .invalidValue(.status, field: "continued") }
                try startReplay(st)
                adopt(st)
                state = .established
                delegate?.sessionEstablished(self, status: st, resumed: resuming)
            } else {
                if st.instanceID != instanceID { throw .instanceMismatch }
                adopt(st)
                delegate?.sessionStatusChanged(self, status: st)
            }
        case .goaway(let reason, let text):
            engine.ignoringInput = true
            parkable = false
            // A front that cannot read RESUME's replay fields calls them a protocol error.
            if state == .handshaking && resuming && offered && reason == .protocolError { peerLacksReplay = true }
            delegate?.sessionGoAway(self, reason: reason, text: text)
        default:
            throw .unexpectedFrame(frame.type)
        }
    }

    /// The STATUS answering this attachment's HELLO/RESUME decides replay (§8.1): continue the
    /// parked streams from where the front got to, or drop them and start the stream over.
    private func startReplay(_ st: Status) throws(ProtocolError) {
        let e = engine
        if let rp = st.replay {
            replayGraceMs = rp.graceMs
            if continuing && rp.continued {
                try e.resumeOutput(peerReceived: rp.received)
                e.replay = true
                e.startStreamInput()
                return
            }
        } else if offered {
            peerLacksReplay = true
        }
        if continuing {
            // The front does not have the streams (restarted, grace over, replay off).
            let n = e.streams.count
            let gen = e.generation
            e.reset()
            e.generation = gen
            delegate?.sessionStreamsLost(self, count: n)
        } else {
            // Bytes sent after HELLO/RESUME (none are expected) are the start of the stream.
            e.outputHeld = false
        }
        e.replay = st.replay != nil
        e.retaining = e.replay
        if !e.replay {
            try e.release(to: e.outBase &+ UInt64(e.keptBytes + e.sentCount))
        } else {
            e.startStreamInput()
        }
    }

    private func adopt(_ st: Status) {
        instanceID = st.instanceID
        status = st
        engine.keepaliveMs = UInt64(st.keepaliveMs)
        engine.pingEnabled = true
        engine.maxStreamsAllowed = min(engine.limits.maxStreams, Int(st.maxStreams))
    }

    func engineStreamRequested(_ id: UInt32, _ network: FlowNetwork, _ destination: Destination) {}
    func engineStreamOpened(_ id: UInt32) { delegate?.streamOpened(self, stream: id) }
    func engineStreamOpenFailed(_ id: UInt32, _ reason: OpenFailReason) {
        delegate?.streamOpenFailed(self, stream: id, reason: reason)
    }
    func engineReadable(_ id: UInt32) { delegate?.streamReadable(self, stream: id) }
    func engineWritable(_ id: UInt32) { delegate?.streamWritable(self, stream: id) }
    func engineReset(_ id: UInt32, _ reason: RstReason) { delegate?.streamReset(self, stream: id, reason: reason) }
    func engineDatagram(_ id: UInt32, _ remote: Destination, _ payload: UnsafeRawBufferPointer) {
        delegate?.datagramReceived(self, association: id, from: remote, payload: payload)
    }
    func engineOutputReady() { delegate?.sessionOutputReady(self) }
}
