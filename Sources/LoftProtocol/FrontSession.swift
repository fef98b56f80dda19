import LoftCore

public protocol FrontSessionDelegate: AnyObject {
    /// HELLO: return a STATUS to accept (the front chooses instance id and overlay), or nil
    /// and call goAway() (now, or later: sendStatus() may still accept).
    func frontSession(_ s: FrontSession, hello: Hello) -> Status?
    /// RESUME: STATUS for that instance (same overlay), or nil and goAway(.unknownInstance / .badToken).
    func frontSession(_ s: FrontSession, resume: Resume) -> Status?
    /// OPEN: answer with accept() or refuse(). Client DATA and DGRAMs may arrive before that.
    func streamRequested(_ s: FrontSession, stream: UInt32, network: FlowNetwork, destination: Destination)
    func streamReadable(_ s: FrontSession, stream: UInt32)
    func streamWritable(_ s: FrontSession, stream: UInt32)
    func streamReset(_ s: FrontSession, stream: UInt32, reason: RstReason)
    /// `payload` is valid only during the call.
    func datagramReceived(_ s: FrontSession, association: UInt32, to: Destination, payload: UnsafeRawBufferPointer)
    func sessionOutputReady(_ s: FrontSession)
    /// The client said GOAWAY (it is leaving, or found a protocol error in what the front sent).
    func frontSessionGoAway(_ s: FrontSession, reason: GoAwayReason, text: String)
}

extension FrontSessionDelegate {
    public func frontSessionGoAway(_ s: FrontSession, reason: GoAwayReason, text: String) {}
}

/// loft-front's end of one attachment (one carrier). The instance (overlay, id) lives in
/// loft-front; a RESUME on a new carrier gets a new FrontSession.
public final class FrontSession: SessionEnd, SessionEngineHost {
    public enum Phase: Sendable {
        /// Waiting for HELLO or RESUME.
        case awaitingHello
        /// HELLO/RESUME seen, the delegate has not answered with a STATUS yet.
        case deciding
        case established
        /// GOAWAY sent or received: input is ignored.
        case closing
    }

    public weak var delegate: FrontSessionDelegate?
    public private(set) var instanceID: InstanceID?
    public private(set) var phase: Phase = .awaitingHello
    /// What the client sent, once it did.
    public private(set) var hello: Hello?
    public private(set) var resume: Resume?

    private let keepaliveMs: UInt32
    /// Replay (docs/protocol.md §8.1): offered to clients that ask when `limits.replay` and a
    /// grace period above 0.
    public let replayGraceMs: UInt32
    /// The client offered replay in its HELLO/RESUME and this front does it.
    private var replayAgreed = false
    /// The last STATUS sent (a continuing RESUME gets it again).
    private var lastStatus: Status?

    public init(limits: SessionLimits = .init(), keepaliveMs: UInt32, replayGraceMs: UInt32 = 0) {
        self.keepaliveMs = max(1, keepaliveMs)
        self.replayGraceMs = limits.replay ? replayGraceMs : 0
        super.init(role: .front, limits: limits)
        engine.keepaliveMs = UInt64(self.keepaliveMs)   // a client that never says HELLO is dead too
        engine.host = self
    }

    /// While deciding: accepts the session. Once established: a changed overlay (the session's
    /// instance id is kept). keepalive_ms is always this session's, max_streams at most
    /// limits.maxStreams.
    public func sendStatus(_ status: Status) {
        var st = status
        st.keepaliveMs = keepaliveMs
        st.maxStreams = UInt32(clamping: min(Int(st.maxStreams), engine.limits.maxStreams))
        st.replay = replayAgreed ? StatusReplay(graceMs: replayGraceMs) : nil
        switch phase {
        case .deciding:
            break
        case .established:
            st.instanceID = instanceID ?? st.instanceID
        case .awaitingHello, .closing:
            return
        }
        do {
            // The STATUS answering HELLO/RESUME ends the handshake: the session's byte
            // stream (§8.1) starts after it.
            if phase == .deciding && replayAgreed { try engine.queuePreamble(.status(st)) } else { try engine.queue(.status(st)) }
        } catch {
            goAway(.shutdown, text: "front has an invalid overlay: \(error)")
            return
        }
        lastStatus = st
        if phase == .deciding {
            phase = .established
            instanceID = st.instanceID
            engine.pingEnabled = true
            if replayAgreed { engine.replay = true; engine.retaining = true }
        }
        engine.maxStreamsAllowed = Int(st.maxStreams)
        engine.signal()
    }

    /// Queues GOAWAY and ignores further input; the embedder flushes and closes.
    public func goAway(_ reason: GoAwayReason, text: String) {
        guard phase != .closing else { return }
        phase = .closing
        engine.ignoringInput = true
        engine.queueControl(.goaway(reason: reason, text: SessionEngine.clip(text)))
        engine.signal()
    }

    // MARK: replay (docs/protocol.md §8.1)

    /// The carrier is lost: with replay agreed, the streams are parked (writes take nothing,
    /// reading goes on) for a RESUME to continue with `resumeParked`; true then. false: no
    /// replay, or the session ended (GOAWAY, protocol error): tear it down as before.
    public func park() -> Bool {
        guard engine.replay, phase == .established, !engine.failed, !engine.ignoringInput else { return false }
        engine.park()
        return true
    }

    /// A continuing RESUME for this parked session arrived on a new carrier (read by another
    /// FrontSession, which is dropped): the client has `peerReceived` of this session's bytes.
    /// Queues the STATUS that continues the streams (before what is sent again); the embedder
    /// moves the new carrier here. Throws `replayOffset` for a count this side never sent: the
    /// session is finished then.
    public func resumeParked(peerReceived: UInt64) throws(ProtocolError) {
        guard engine.parked, var st = lastStatus else { throw .unexpectedFrame(.resume) }
        do {
            try engine.resumeOutput(peerReceived: peerReceived)
        } catch {
            engine.failed = true
            throw error
        }
        engine.countingInput = true
        engine.keepaliveMs = UInt64(keepaliveMs)
        engine.pingEnabled = true
        st.replay = StatusReplay(graceMs: replayGraceMs, continued: true, received: engine.inOffset)
        // Before what is sent again: the STATUS is the new carrier's handshake, not stream.
        do { try engine.queuePreamble(.status(st)) } catch { assertionFailure("STATUS sent before: \(error)") }
        lastStatus = st
        engine.signal()
    }

    /// OPEN_OK.
    public func accept(stream: UInt32) { engine.accept(stream) }
    /// OPEN_FAIL; the id is freed.
    public func refuse(stream: UInt32, reason: OpenFailReason) { engine.refuse(stream, reason) }

    /// DGRAM from `from` (the remote's address); only after accept(). false: dropped.
    public func send(association: UInt32, from: Destination, _ payload: UnsafeRawBufferPointer) -> Bool {
        engine.sendDatagram(association, from, payload)
    }

    // MARK: engine host

    func engineGate(_ type: FrameType) throws(ProtocolError) -> Bool {
        switch phase {
        case .awaitingHello:
            if type == .hello || type == .resume { return true }
            throw .unexpectedFrame(type)
        case .deciding:
            switch type {
            case .ping, .pong, .goaway: return true
            default: throw .unexpectedFrame(type)
            }
        case .established:
            return true
        case .closing:
            return false
        }
    }

    func engineSessionFrame(_ frame: Frame) throws(ProtocolError) {
        switch frame {
        case .hello(let h) where phase == .awaitingHello:
            phase = .deciding
            hello = h
            if replayGraceMs > 0 && h.capabilities & Hello.replay != 0 { agreeReplay() }
            if let st = delegate?.frontSession(self, hello: h) { sendStatus(st) }
        case .resume(let r) where phase == .awaitingHello:
            phase = .deciding
            resume = r
            if replayGraceMs > 0 && r.replay != nil { agreeReplay() }
            if let st = delegate?.frontSession(self, resume: r) { sendStatus(st) }
        case .goaway(let reason, let text):
            phase = .closing
            engine.ignoringInput = true
            delegate?.frontSessionGoAway(self, reason: reason, text: text)
        default:
            throw .unexpectedFrame(frame.type)
        }
    }

    /// The client offered replay and this front does it: its bytes after the HELLO/RESUME are
    /// the session's stream.
    private func agreeReplay() {
        replayAgreed = true
        engine.startStreamInput()
    }

    func engineStreamRequested(_ id: UInt32, _ network: FlowNetwork, _ destination: Destination) {
        delegate?.streamRequested(self, stream: id, network: network, destination: destination)
    }
    func engineStreamOpened(_ id: UInt32) {}
    func engineStreamOpenFailed(_ id: UInt32, _ reason: OpenFailReason) {}
    func engineReadable(_ id: UInt32) { delegate?.streamReadable(self, stream: id) }
    func engineWritable(_ id: UInt32) { delegate?.streamWritable(self, stream: id) }
    func engineReset(_ id: UInt32, _ reason: RstReason) { delegate?.streamReset(self, stream: id, reason: reason) }
    func engineDatagram(_ id: UInt32, _ remote: Destination, _ payload: UnsafeRawBufferPointer) {
        delegate?.datagramReceived(self, association: id, to: remote, payload: payload)
    }
    func engineOutputReady() { delegate?.sessionOutputReady(self) }
}
