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
        engine.reset()
        engine.ignoringInput = false
        state = .handshaking
        resuming = instanceID != nil
        if let id = instanceID {
            engine.queueControl(.resume(Resume(instanceID: id, token: token)))
        } else {
            engine.queueControl(.hello(Hello(token: token, clientName: clientName)))
        }
        engine.signal()
    }

    /// The carrier is gone: every stream and association is dropped without callbacks, the
    /// output is cleared. Instance id and status stay for the next attach().
    public func detach() {
        engine.reset()
        engine.ignoringInput = true
        state = .detached
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
    }

    /// Queues GOAWAY (e.g. shutdown); the embedder flushes and closes.
    public func goAway(_ reason: GoAwayReason, text: String) {
        guard state != .detached else { return }
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
            delegate?.sessionGoAway(self, reason: reason, text: text)
        default:
            throw .unexpectedFrame(frame.type)
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
