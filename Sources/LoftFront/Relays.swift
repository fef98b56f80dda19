import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftSessionStream

/// One TCP stream of a session joined to a socket to its destination by a splice: the
/// session's stream is the inbound end (`SessionStream`), the socket the outbound end. This
/// is the stream's handshake (OPEN answered once the destination connects) and its entry in
/// the connection's table.
final class StreamRelay: SpliceOwner {
    private unowned let connection: FrontConnection
    let stream: UInt32
    let destination: Destination
    private var splice: Splice?
    private var end: SessionStream?

    private var session: FrontSession { connection.session }
    private var server: FrontServer { connection.server }

    init(connection: FrontConnection, stream: UInt32, destination: Destination) {
        self.connection = connection
        self.stream = stream
        self.destination = destination
    }

    func start() {
        let s = Splice(loop: server.loop, owner: self, meter: server.meter, connectTimeoutMs: server.connectTimeoutMs)
        splice = s
        // Names are resolved by the outbound, which keeps to the addresses the front allows.
        s.dial(server.outbound, to: destination)
    }

    // MARK: SpliceOwner

    func spliceConnected(_ splice: Splice) {
        server.stats.streamsOpened += 1
        session.accept(stream: stream)
        Log.debug("stream-open", ["stream": stream, "to": destination])
        let e = SessionStream(side: .front, session: session, id: stream, destination: destination,
                              loop: server.loop, events: nil)
        end = e
        // The client may have sent data (and FIN) right after OPEN: the splice reads it now.
        splice.attach(e)
    }

    func spliceFailed(_ splice: Splice, _ failure: FlowFailure) {
        server.stats.streamsFailed += 1
        Log.debug("stream-failed", ["stream": stream, "to": destination, "reason": failure])
        session.refuse(stream: stream, reason: OpenFailReason(failure))
        self.splice = nil
        connection.relayEnded(stream)
    }

    func spliceEnded(_ splice: Splice, _ ending: Splice.Ending) {
        if ending != .closed {
            server.stats.streamsReset += 1
            Log.debug("stream-reset", ["stream": stream, "to": destination, "ending": "\(ending)"])
        }
        self.splice = nil
        end = nil
        connection.relayEnded(stream)
    }

    // MARK: from the session

    func sessionReadable() { end?.readable() }
    func sessionWritable() { end?.writable() }

    /// The stream is gone with its session or was reset by the client: reset the socket.
    func abandon() {
        end?.abandon()
        end = nil
        splice?.reset()
        splice = nil
    }
}

/// One UDP association of a session joined to the front's sockets (one per address family, so
/// replies from any remote come back).
final class DatagramRelay: DatagramEvents {
    private unowned let connection: FrontConnection
    let association: UInt32
    private var sockets: DatagramAssociation?
    /// Loop time of the last datagram either way (for the idle timeout).
    var lastActive: UInt64

    init?(connection: FrontConnection, association: UInt32) {
        self.connection = connection
        self.association = association
        lastActive = connection.server.loop.now
        guard let a = connection.server.outbound.openAssociation(events: self) else { return nil }
        sockets = a
    }

    func send(_ payload: UnsafeRawBufferPointer, to destination: Destination) {
        if sockets?.send(payload, to: destination) != true { connection.server.stats.datagramsDropped += 1 }
    }

    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {
        lastActive = connection.server.loop.now
        let stats = connection.session.send(association: association, from: .ip(from), payload)
        if stats { connection.server.stats.datagramsDown += 1 } else { connection.server.stats.datagramsDropped += 1 }
    }

    private var idleTimer: TimerHandle?

    /// The idle deadline, re-armed from the last datagram when it fires (one timer per idle
    /// period, none per datagram).
    func armIdle() {
        let server = connection.server
        idleTimer = server.loop.schedule(at: lastActive &+ server.udpIdleMs) { [weak self] in
            guard let self, self.sockets != nil else { return }
            self.idleTimer = nil
            if self.connection.server.loop.now &- self.lastActive < self.connection.server.udpIdleMs {
                self.armIdle()
            } else {
                self.connection.associationIdle(self)
            }
        }
    }

    func close() {
        if let t = idleTimer { connection.server.loop.cancel(t) }
        idleTimer = nil
        sockets?.close()
        sockets = nil
    }
}

/// quic: one TCP flow on a QUIC stream of its own (docs/protocol.md §1.2). The stream starts
/// with the client's OPEN frame, read exactly by the flow's preface end (`PrefaceStream` with
/// `FlowPreamble.OpenCodec`); the destination is dialed; OPEN_OK (then the splice joins the
/// stream itself to the socket) or OPEN_FAIL (then the stream's FIN) answers it.
final class FlowRelay: SpliceOwner, ByteStreamEvents {
    private unowned let connection: FrontConnection
    let flow: QuicFlow
    private var splice: Splice?
    private var head: PrefaceStream<FlowPreamble.OpenCodec>!
    private var refused = false
    private(set) var destination: Destination?
    /// Until the OPEN is whole: a stream that never finishes it is reset (it would hold its
    /// buffers for as long as the session lives).
    private var openDeadline: TimerHandle?
    private let loop: EventLoop

    private var server: FrontServer { connection.server }

    init(connection: FrontConnection, flow: QuicFlow) {
        self.connection = connection
        self.flow = flow
        loop = connection.server.loop
        head = PrefaceStream(codec: FlowPreamble.OpenCodec(), events: self) { [unowned self] in self.judge($0) }
        head.attach(flow, connected: true)
        openDeadline = loop.schedule(after: connection.server.connectTimeoutMs) { [weak self] in
            self?.openExpired()
        }
    }

    deinit { stopDeadline() }

    private func stopDeadline() {
        if let t = openDeadline { loop.cancel(t) }
        openDeadline = nil
    }

    /// No whole OPEN within connect-timeout: the stream is reset (the session goes on).
    private func openExpired() {
        openDeadline = nil
        guard destination == nil, !refused else { return }
        refused = true
        server.stats.openTimeouts += 1
        Log.debug("flow-open-timeout", ["peer": connection.peerText, "flow": flow.id, "bytes": head.answerBytes])
        head.reset()
        connection.flowEnded(self)
    }

    // MARK: the OPEN

    /// The OPEN may have come with the stream: read what there is (the connection asks once,
    /// after it keeps the relay).
    func readOpen() { head.readNow() }

    func streamConnected(_: ByteStream) {}
    func streamWritable(_: ByteStream) {}
    func streamReadable(_: ByteStream) {}

    /// The stream broke, or it was not an OPEN (then the preface end reset it).
    func streamFailed(_: ByteStream, _ failure: FlowFailure) {
        splice?.reset()
        splice = nil
        connection.flowEnded(self)
    }

    /// The preface end's verdict on the OPEN.
    private func judge(_ outcome: PrefaceOutcome<FlowPreamble.Open>) -> FlowFailure? {
        guard case .answered(.open(let network, let dest)) = outcome else {
            // Not an OPEN (or the stream ended before it was whole): the preface end resets
            // the stream (the session goes on).
            refused = true
            stopDeadline()
            server.stats.protocolErrors += 1
            Log.debug("flow-malformed", ["peer": connection.peerText])
            return .other(EPROTO)
        }
        opened(network, dest)
        return nil
    }

    private func opened(_ network: FlowNetwork, _ dest: Destination) {
        destination = dest
        stopDeadline()
        guard network == .tcp else { return answer(.networkNotSupported) }
        if case .ip(let e) = dest, !server.destinationAllowed(e.address) { return answer(.notAllowed) }
        // No reads while the destination is dialed (the preface end applies it as it accepts).
        head.setReadInterest(false)
        let s = Splice(loop: server.loop, owner: self, meter: server.meter, connectTimeoutMs: server.connectTimeoutMs)
        splice = s
        s.dial(server.outbound, to: dest)
    }

    /// OPEN_FAIL, then the stream's FIN.
    private func answer(_ reason: OpenFailReason) {
        refused = true
        server.stats.streamsFailed += 1
        write(FlowPreamble.openFail(reason))
        head.close()
        connection.flowEnded(self)
    }

    private func write(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { b -> Int in
            var v = iovec(iov_base: UnsafeMutableRawPointer(mutating: b.baseAddress!), iov_len: b.count)
            return flow.write(&v, count: 1)
        }
    }

    // MARK: SpliceOwner

    func spliceConnected(_ splice: Splice) {
        server.stats.streamsOpened += 1
        Log.debug("stream-open", ["flow": flow.id, "to": destination.map { "\($0)" } ?? ""])
        write(FlowPreamble.openOK)
        flow.setReadInterest(true)
        // From here the splice has the stream itself: the preface end is out of the way.
        splice.attach(flow)
    }

    func spliceFailed(_ splice: Splice, _ failure: FlowFailure) {
        self.splice = nil
        Log.debug("stream-failed", ["flow": flow.id, "to": destination.map { "\($0)" } ?? "", "reason": failure])
        answer(OpenFailReason(failure))
    }

    func spliceEnded(_ splice: Splice, _ ending: Splice.Ending) {
        if ending != .closed { server.stats.streamsReset += 1 }
        self.splice = nil
        connection.flowEnded(self)
    }

    /// The carrier is gone: reset the socket.
    func abandon() {
        stopDeadline()
        splice?.reset()
        splice = nil
    }
}
