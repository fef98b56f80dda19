import CNgtcp2
import Glibc
import LoftCore
import LoftHTTP
import LoftIO
import LoftQUIC
import LoftTLS

/// The ALPN of the quic carrier.
let quicALPN = "loft"

/// The `quic` carrier: one loft session on the first bidirectional stream (id 0, the
/// client's) of a QUIC connection (ngtcp2 + GnuTLS, ALPN `loft`), each flow on a stream of its
/// own. The client owns a connected UDP socket; on the front the connection lives on the
/// listener's socket (`QuicListener`). With ALPN `h3` the same connection carries HTTP/3: the
/// `H3Carrier` part takes the streams' events and the session's CONNECT, and the session's and
/// flows' bytes go through its request bodies (`streams`).
final class QuicCarrier: Carrier, FlowCarrier, QuicConnectionDelegate, QuicPacketSink, IOHandler {
    enum State: CarrierState { case resolving, handshake, open, closing, closed }

    /// quic, or h3 (the same connection with HTTP/3 on its streams: `h3`).
    private(set) var kind = CarrierKind.quic
    /// h3: HTTP/3 over the connection's QUIC streams (docs/protocol.md §1.3).
    private(set) var h3: H3Carrier?
    /// Where the session's and the flows' bytes go: the QUIC streams, or h3's request bodies.
    var streams: QuicFlowLayer? { h3?.streams ?? quic }
    weak var delegate: CarrierDelegate?
    /// The connection closes on its own time (its CONNECTION_CLOSE, the draining period): the
    /// carrier is held until it is over (`connectionFinished`), not only until closed.
    private let core: CarrierCore<State>
    private var runtime: CarrierRuntime { core.runtime }
    let client: CarrierClient?
    private(set) weak var listener: QuicListener?
    private(set) var quic: QuicConnection?
    private(set) var state: State {
        get { core.state }
        set { core.state = newValue }
    }
    private var fd: Int32 = -1
    private var fdWantsWrite = false
    private(set) var request: CarrierRequest?
    private var peerAddress: Endpoint?
    /// The server's ids of this connection (for the listener's table).
    var cids: [QuicCID] = []
    /// Server: the Initial carried a token of the front's that verified (a handshake to evict
    /// last).
    var addressValidated = false
    let sessionStream: Int64 = 0
    /// The flows' streams (every stream but the session's).
    private var flows: [Int64: QuicFlow] = [:]
    nonisolated(unsafe) private static let recvBuffer = UnsafeMutableRawPointer.allocate(byteCount: 65_536, alignment: 16)
    /// Client sockets' reads (one recvmmsg of up to 8 datagrams or GRO batches), on the loop.
    nonisolated(unsafe) private static let recvBatch = UDPReceiveBatch(slots: 8)

    var side: CarrierSide { core.side }
    var isServer: Bool { core.isServer }
    var isOpen: Bool { core.isOpen }
    var peer: Endpoint? { peerAddress }
    var tlsDescription: String { quic?.tlsDescription ?? "" }

    init(client: CarrierClient, delegate: CarrierDelegate) {
        core = CarrierCore(.client, runtime: client.runtime, state: .resolving, releaseWhenClosed: false)
        self.client = client
        self.delegate = delegate
        kind = client.options.kind == .h3 ? .h3 : .quic
        bindCore()
    }

    /// Server side: made by the listener for an accepted Initial; `attach` gives it the connection.
    init(server listener: QuicListener, peer: Endpoint?) {
        core = CarrierCore(.server, runtime: listener.runtime, state: .handshake, releaseWhenClosed: false)
        client = nil
        self.listener = listener
        peerAddress = peer
        bindCore()
    }

    /// QUIC flushes itself after the batch; input waiting is delivered (`processSoon`).
    private func bindCore() {
        core.bind(flush: { [weak self] in self?.flush() }, process: { [weak self] in self?.deliver() })
    }

    func attach(_ q: QuicConnection) {
        quic = q
        q.onFinished = { [weak self] in self?.connectionFinished() }
    }

    deinit {
        if fd >= 0 { runtime.loop.unregister(fd); _ = Syscall.close(fd) }
    }

    // MARK: client

    func start() {
        guard let client else { return }
        let timeout = client.options.connectTimeoutMs
        core.dialDeadline(timeout, handshaking: { $0 == .resolving || $0 == .handshake }) { [weak self] in
            self?.fail(.timeout("no QUIC session stream within \(timeout) ms"))
        }
        client.resolve({ [weak self] r in self?.fail(r) }) { [weak self] endpoints in
            guard let self, self.state == .resolving else { return }
            self.addresses = DialAddresses(endpoints)
            self.attemptMs = max(1000, timeout / UInt64(endpoints.count))
            self.connectNext(failed: nil)
        }
    }

    /// The front's addresses not tried yet; the current attempt's number (for its deadline) and
    /// how long an attempt may take while other addresses remain (the connect timeout shared
    /// among the addresses, at least 1 s; the last one has what is left of the whole).
    private var addresses = DialAddresses([])
    private var attempt = 0
    private var attemptMs: UInt64 = 0

    /// Dials the next address of the front's name (`why`: how the attempt before failed); with
    /// none left, the dial fails with the last error. A failed attempt's connection goes
    /// without a word to the delegate.
    private func connectNext(failed why: String?) {
        guard !isServer, state == .resolving || state == .handshake else { return }
        if let q = quic {
            q.onFinished = nil
            q.abort()
            quic = nil
        }
        h3 = nil
        releaseSocket()
        fdWantsWrite = false
        state = .resolving
        guard let remote = addresses.next(failed: why) else {
            fail(.connectFailed(addresses.lastError))
            return
        }
        if let why { Log.info("carrier.quic.next-address", ["failed": why, "next": "\(remote)"]) }
        attempt += 1
        if addresses.remaining > 0 {
            let a = attempt, ms = attemptMs
            runtime.after(ms) { [weak self] in
                guard let self, self.attempt == a, self.state == .handshake else { return }
                self.connectNext(failed: "\(remote): no QUIC handshake within \(ms) ms")
            }
        }
        connect(remote)
    }

    private func connect(_ remote: Endpoint) {
        guard let client, let creds = client.quicCreds else { fail(.tls("no QUIC credentials")); return }
        peerAddress = remote
        let s = Sockets.make(family: Sockets.family(of: remote), type: Int32(SOCK_DGRAM.rawValue))
        guard s >= 0 else { connectNext(failed: "socket: \(String(cString: strerror(Sockets.errno)))"); return }
        if case .failure(let e) = Syscall.connect(s, to: SocketAddress(remote)) {
            _ = Syscall.close(s)
            connectNext(failed: "connect \(remote): \(e)")
            return
        }
        let la = (try? Syscall.localAddress(s).get()) ?? SocketAddress()
        Self.tune(s)
        var limits = kind == .h3 ? QuicLimits.h3 : QuicLimits()
        limits.maxPacket = client.options.quicMaxPacket ?? 0
        // A size above discovery's must fit the first hop at least (the kernel's path MTU).
        if limits.packetAboveDiscovery, let why = Self.pathTooSmall(s, packet: limits.maxPacket, peer: remote) {
            _ = Syscall.close(s)
            connectNext(failed: why)
            return
        }
        fd = s
        runtime.loop.register(s, IOEvents.readable, self)
        state = .handshake
        do {
            let q = try QuicConnection.client(loop: runtime.loop, sink: self, creds: creds, serverName: client.options.verifyName,
                                              alpn: kind == .h3 ? H3Carrier.alpn : quicALPN, local: la, remote: SocketAddress(remote),
                                              limits: limits)
            q.delegate = self
            attach(q)
        } catch {
            fail(.tls("\(error)"))
        }
    }

    // MARK: migration (client)

    /// The socket before the last migration: read for a while (packets already on their way
    /// to it), then closed.
    private var oldFD: Int32 = -1
    private var oldLocal = SocketAddress()

    /// A new UDP socket towards the same front (the kernel picks the source address of the
    /// new default route); QUIC moves the connection to it and validates the path.
    func migrate(_ done: @escaping (Bool) -> Void) -> Bool {
        guard !isServer, state == .open, let q = quic, let remote = peerAddress else { return false }
        let s = Sockets.make(family: Sockets.family(of: remote), type: Int32(SOCK_DGRAM.rawValue))
        guard s >= 0 else { return false }
        guard case .success = Syscall.connect(s, to: SocketAddress(remote)), case .success(let la) = Syscall.localAddress(s) else {
            _ = Syscall.close(s)
            return false
        }
        Self.tune(s)
        let previous = fd
        let previousLocal = q.local
        fd = s
        runtime.loop.register(s, IOEvents.readable, self)
        guard q.migrate(local: la) else {
            runtime.loop.unregister(s)
            _ = Syscall.close(s)
            fd = previous
            return false
        }
        retireOld()
        oldFD = previous
        oldLocal = previousLocal
        if previous >= 0 { runtime.loop.register(previous, IOEvents.readable, OldSocket(self)) }
        q.onPathValidated = { [weak self] ok in
            self?.runtime.after(1000) { [weak self] in self?.retireOld() }
            done(ok)
        }
        Log.info("carrier.quic.migrating", ["peer": "\(remote)", "local": la.endpoint.map { "\($0)" } ?? ""])
        return true
    }

    private func retireOld() {
        guard oldFD >= 0 else { return }
        runtime.loop.unregister(oldFD)
        _ = Syscall.close(oldFD)
        oldFD = -1
    }

    fileprivate func readOld() {
        guard oldFD >= 0, let q = quic else { return }
        for _ in 0..<64 {
            var segment = 0
            var from = SocketAddress()
            guard case .success(let n) = Syscall.recvSegments(oldFD, Self.recvBuffer, 65_536, segment: &segment, from: &from) else { return }
            QuicSocket.split(Self.recvBuffer, n, segment: segment) { q.receive($0, from: q.remote, at: oldLocal) }
        }
    }

    // MARK: socket (client)

    /// A QUIC socket: 4 MiB buffers each way (a burst of a 24 MiB window must not overflow
    /// them), UDP GRO (a read takes up to 64 datagrams of one size from one sender), and no
    /// fragmentation.
    static func tune(_ s: Int32) {
        _ = Syscall.setOption(s, SOL_SOCKET, SO_RCVBUF, 4 << 20)
        _ = Syscall.setOption(s, SOL_SOCKET, SO_SNDBUF, 4 << 20)
        Syscall.enableUDPReceiveOffload(s)
        // RFC 9000 section 14: QUIC's datagrams are never fragmented (a path MTU probe too large
        // is lost, as it should be; a configured size too large fails loudly, `packetTooBig`).
        Syscall.forbidFragmentation(s)
    }

    func handleIO(_ events: UInt32) {
        if events & IOEvents.writable != 0 && fdWantsWrite {
            fdWantsWrite = false
            runtime.loop.modify(fd, IOEvents.readable)
            quic?.socketWritable()
        }
        guard events & (IOEvents.readable | IOEvents.error) != 0 else { return }
        // At most 64 reads per wakeup, 8 per recvmmsg; a short recvmmsg means the socket is drained.
        for _ in 0..<8 {
            guard fd >= 0, quic != nil else { return }
            switch Syscall.recvMany(fd, Self.recvBatch) {
            case .success(let k):
                for i in 0..<k {
                    guard let q = quic else { return }
                    let r = Self.recvBatch.read(i)
                    guard let base = r.bytes.baseAddress else { continue }
                    QuicSocket.split(base, r.bytes.count, segment: r.segment) { q.receive($0, from: q.remote, at: q.local) }
                }
                if k < Self.recvBatch.slots { return }
            case .failure(let e):
                if e == .again { return }
                // In the handshake, the front's address refused (ICMP port unreachable) ends this
                // attempt; unreachable does too when the name has other addresses to try (alone,
                // QUIC's retransmissions wait for the path until the connect timeout).
                if !isServer && state == .handshake
                    && (e.code == ECONNREFUSED || (addresses.remaining > 0 && (e.code == EHOSTUNREACH || e.code == ENETUNREACH))) {
                    // Said as what it means: nothing listens for QUIC there (a front without
                    // quic or h3 in its `carriers:` answers TCP only).
                    let why = e.code == ECONNREFUSED ? "no QUIC listener answered (UDP port unreachable: refused; is quic or h3 in the front's carriers?)" : "\(e)"
                    connectNext(failed: "\(peerAddress.map { "\($0)" } ?? ""): \(why)")
                }
                return
            }
        }
    }

    func sendPackets(_ bytes: UnsafeRawBufferPointer, segment: Int, to: SocketAddress, from conn: QuicConnection) -> Bool {
        if isServer { return listener?.sendPackets(bytes, segment: segment, to: to, from: conn) ?? true }
        guard fd >= 0 else { return true }
        // Other errors are loss, like on the wire; QUIC recovers.
        switch QuicSocket.send(fd, bytes, segment: segment, to: nil) {
        case .sent: return true
        case .tooBig:
            if conn.packetTooBig(segment > 0 ? segment : bytes.count) {
                let why = Self.pathTooSmall(fd, packet: conn.limits.maxPacket, peer: peerAddress, emsgsize: true) ?? ""
                runtime.loop.soon { [weak self] in self?.fail(.connectFailed(why)) }
            }
            return true
        case .full:
            fdWantsWrite = true
            runtime.loop.modify(fd, IOEvents.readable | IOEvents.writable)
            return false
        }
    }

    /// "quic-max-packet N does not fit the path to X (MTU M: at most K)" when `packet`-byte
    /// datagrams and their IP and UDP headers exceed the connected socket's path MTU (as the
    /// kernel knows it: the route's, or less once ICMP said so); nil when they fit, unless a
    /// send already failed with EMSGSIZE.
    static func pathTooSmall(_ fd: Int32, packet: Int, peer: Endpoint?, emsgsize: Bool = false) -> String? {
        let v6 = peer.map { Sockets.family(of: $0) == Int32(AF_INET6) } ?? false
        let mtu = Syscall.pathMTU(fd, family: v6 ? Int32(AF_INET6) : Int32(AF_INET))
        let header = v6 ? 48 : 28
        let fits = mtu <= 0 || packet + header <= mtu
        guard !fits || emsgsize else { return nil }
        let why = fits ? "EMSGSIZE" : "MTU \(mtu): at most \(mtu - header)"
        return "quic-max-packet \(packet) does not fit the path to \(peer.map { "\($0)" } ?? "the front") (\(why))"
    }

    // MARK: connection events

    func quicHandshakeDone(_ c: QuicConnection) {
        if isServer {
            if c.alpn == H3Carrier.alpn {
                startH3(c)
                return
            }
            state = .open
            request = CarrierRequest(kind: kind, peer: peer, path: "", query: nil, headers: HTTPHeaders(), sessionID: nil)
            listener?.accepted(self)
            return
        }
        guard state == .handshake else { return }
        let want = kind == .h3 ? H3Carrier.alpn : quicALPN
        guard c.alpn == want else {
            fail(.rejected(status: 0, "the front did not negotiate ALPN \(want) (got \(c.alpn.isEmpty ? "none" : c.alpn))"))
            return
        }
        if kind == .h3 {
            startH3(c)
            return
        }
        guard let sid = c.openStream(), sid == sessionStream else {
            fail(.protocolError("cannot open the session stream"))
            return
        }
        state = .open
        Log.debug("carrier.quic.open", ["peer": peer.map { "\($0)" } ?? "", "tls": tlsDescription])
        delegate?.carrierConnected(self)
    }

    /// h3: HTTP/3 on the connection, which hands its streams' events to it from now on
    /// (`H3Carrier`); the session opens with its CONNECT.
    private func startH3(_ c: QuicConnection) {
        guard let h = H3Carrier(carrier: self, connection: c) else { fail(.protocolError("cannot start HTTP/3")); return }
        h3 = h
        kind = .h3
        c.delegate = h
        h.start()
    }

    func quicReadable(_ c: QuicConnection, stream: Int64) { streamReadable(stream) }

    /// Bytes (or the FIN) for the session or a flow (h3: in the request's body).
    func streamReadable(_ stream: Int64) {
        guard let c = streams else { return }
        guard stream == sessionStream else {
            if let f = flows[stream] { f.readable(); return }
            // A new stream of the client's: one flow, for the delegate (the front) to take.
            guard isServer, state == .open, stream & 3 == 0 else { c.reset(stream, code: 0x101); return }
            let f = QuicFlow(carrier: self, id: stream)
            flows[stream] = f
            if delegate?.carrier(self, flowOpened: f) != true {
                flows[stream] = nil
                c.reset(stream, code: 0x101)
            }
            return
        }
        deliver()
    }

    // MARK: flows

    func openFlow() -> QuicFlow? {
        guard !isServer, state == .open, let q = streams, let id = q.openStream(ringCap: Self.flowSendBuffer) else { return nil }
        let f = QuicFlow(carrier: self, id: id)
        flows[id] = f
        return f
    }

    /// Send buffer of a flow's stream (the session stream has 4 MiB too): what one flow can have
    /// in flight before the peer acknowledges. Under loss the bytes after a lost packet stay
    /// held for two or three round trips until its retransmission is acknowledged, so this caps
    /// a flow at about buffer / (2.5 x RTT): 1 MiB held 4 flows at 20 ms each way and 1 % loss
    /// to 246 Mbit/s in total, 4 MiB to 601 (bench/holder's netem part, docs/holder.md). All
    /// flows of a connection together stay within `QuicLimits.sendBudget`; the ring's pages
    /// are touched only where bytes were written (a flow that moved less touches less).
    static let flowSendBuffer = QuicLimits.flowSendBuffer

    func forgetFlow(_ f: QuicFlow) {
        if flows[f.id] === f { flows[f.id] = nil }
    }

    func soon(_ body: @escaping () -> Void) { runtime.loop.soon(body) }

    /// The connection is gone: every flow's stream with it.
    private func failFlows() {
        guard !flows.isEmpty else { return }
        let all = Array(flows.values)
        flows.removeAll()
        runtime.loop.soon { for f in all { f.failed(.other(ECONNRESET)) } }
    }

    private func deliver() {
        guard state == .open, !core.readingPaused, let q = streams else { return }
        let eof = q.drain(sessionStream) { bytes in
            if bytes.count > 0 { delegate?.carrier(self, received: bytes) }
        }
        if eof && state == .open {
            // The peer ended the session stream: ours ends too, then the connection.
            state = .closed
            q.finish(sessionStream)
            closeConnection(graceful: true)
            notifyClosed(.closed)
        }
    }

    func quicWritable(_ c: QuicConnection, stream: Int64) { streamWritable(stream) }

    func streamWritable(_ stream: Int64) {
        if stream == sessionStream && state == .open { delegate?.carrierWritable(self) }
        else { flows[stream]?.writable() }
    }

    func quicStreamReset(_ c: QuicConnection, stream: Int64, code: UInt64) { streamReset(stream, code: code) }

    func streamReset(_ stream: Int64, code: UInt64) {
        guard stream == sessionStream else {
            flows.removeValue(forKey: stream)?.failed(.other(ECONNRESET))
            return
        }
        fail(.io("session stream reset by the peer (code \(code))"))
    }

    func quicDatagram(_ c: QuicConnection, _ bytes: UnsafeRawBufferPointer) {
        // h3 negotiates no HTTP datagrams (nghttp3 0.8 cannot send SETTINGS_H3_DATAGRAM).
        guard state == .open, h3 == nil else { return }
        delegate?.carrier(self, datagram: bytes)
    }

    var maxDatagram: Int { state == .open && h3 == nil ? quic?.datagramCapacity ?? 0 : 0 }
    var maxPacket: Int { state == .open ? quic?.pathMaxPacket ?? 0 : 0 }

    func sendDatagram(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard state == .open, h3 == nil, let q = quic, bytes.count <= q.datagramCapacity else { return false }
        return q.sendDatagram(bytes)
    }

    func quicClosed(_ c: QuicConnection, _ reason: CarrierCloseReason) {
        let old = state
        state = .closed
        failFlows()
        releaseSocket()
        if isServer && old == .handshake { listener?.handshakeEnded(self, reason); return }
        if old != .closing && old != .closed { notifyClosed(reason) }
    }

    func quicConnectionID(_ c: QuicConnection, _ id: QuicCID, add: Bool) {
        listener?.route(id, to: self, add: add)
    }

    private func connectionFinished() {
        failFlows()
        releaseSocket()
        listener?.forget(self)
        core.release()
    }

    private func releaseSocket() {
        retireOld()
        guard fd >= 0 else { return }
        runtime.loop.unregister(fd)
        _ = Syscall.close(fd)
        fd = -1
    }

    // MARK: Carrier

    func write(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard state == .open, let q = streams else { return 0 }
        return q.write(sessionStream, bytes)
    }

    var writableBytes: Int {
        guard state == .open, let q = streams else { return 0 }
        return q.writeRoom(sessionStream)
    }

    var bufferedBytes: Int { streams?.unsent(sessionStream) ?? 0 }

    /// The connection is over (its CONNECTION_CLOSE sent), or there is none.
    var drained: Bool { quic.map { $0.closed } ?? true }

    func flush() { quic?.flush() }

    /// QUIC's windows hold the peer back while the session's bytes wait unread.
    func setReading(_ on: Bool) { core.setReading(on, nil) }

    func close() {
        delegate = nil
        switch state {
        case .open:
            state = .closing
            streams?.finish(sessionStream)
            closeConnection(graceful: true)
        case .resolving, .handshake:
            state = .closed
            closeConnection(graceful: false)
        case .closing, .closed:
            break
        }
    }

    func abort() {
        delegate = nil
        state = .closed
        closeConnection(graceful: false)
    }

    private func closeConnection(graceful: Bool) {
        failFlows()
        guard let q = quic, !q.closed else { connectionFinished(); return }
        core.hold(self)
        if graceful { q.close() } else { q.abort() }
    }

    // MARK: h3 (H3Carrier): the session's CONNECT

    /// Server: the session's CONNECT was accepted: the carrier goes to the listener.
    func h3SessionAccepted(path: String) {
        guard isServer, state == .handshake else { return }
        state = .open
        request = CarrierRequest(kind: .h3, peer: peer, path: path, query: nil, headers: HTTPHeaders(), sessionID: nil)
        listener?.accepted(self)
    }

    /// Client: the front answered the session's CONNECT with 200.
    func h3SessionOpened() {
        guard state == .handshake else { return }
        state = .open
        Log.debug("carrier.h3.open", ["peer": peer.map { "\($0)" } ?? "", "tls": tlsDescription])
        delegate?.carrierConnected(self)
        // Body bytes that came with the 200 were announced before the carrier was open.
        core.processSoon.schedule()
    }

    /// Client: a flow's CONNECT was refused.
    func h3FlowRefused(_ stream: Int64) {
        flows.removeValue(forKey: stream)?.failed(.other(ECONNREFUSED))
    }

    func fail(_ reason: CarrierCloseReason) {
        if core.fail(cutting: { closeConnection(graceful: false) }) { notifyClosed(reason) }
    }
}

/// Reads the socket a client migrated away from, for its carrier.
private final class OldSocket: IOHandler {
    weak var carrier: QuicCarrier?
    init(_ c: QuicCarrier) { carrier = c }
    func handleIO(_ events: UInt32) { carrier?.readOld() }
}
