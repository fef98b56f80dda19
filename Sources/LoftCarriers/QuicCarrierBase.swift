import CNgtcp2
import Glibc
import LoftCore
import LoftHTTP
import LoftIO
import LoftQUIC
import LoftTLS

/// What the quic and h3 carriers share (`QuicCarrier`, `H3Carrier`, each a final class on this
/// one): the QUIC connection (ngtcp2 + GnuTLS) and its life, the client's dial (the front's
/// addresses in turn) and connected UDP socket with its migration, the server's place on the
/// listener's socket (`QuicServerConnection`), the session's state on the carrier core, the
/// session stream (id 0) and the flows' streams (`QuicFlow`), and QUIC datagrams (quic only).
/// A subclass says what its ALPN makes of the connection once the handshake is done
/// (`connectionReady`) and, for h3, through which stream layer the bytes go (`layer`).
class QuicCarrierBase: Carrier, FlowCarrier, QuicConnectionDelegate, QuicPacketSink, IOHandler {
    enum State: CarrierState { case resolving, handshake, open, closing, closed }

    let kind: CarrierKind
    /// The stream layer over the connection when it is not its raw streams (h3's request bodies).
    final var layer: QuicFlowLayer?
    /// Where the session's and the flows' bytes go: the QUIC streams, or h3's request bodies.
    final var streams: QuicFlowLayer? { layer ?? quic }
    /// The session's datagrams go as QUIC datagrams (quic; h3 negotiates no HTTP datagrams:
    /// nghttp3 0.8 cannot send SETTINGS_H3_DATAGRAM).
    private let datagrams: Bool
    weak var delegate: CarrierDelegate?
    /// The connection closes on its own time (its CONNECTION_CLOSE, the draining period): the
    /// carrier is held until it is over (`connectionFinished`), not only until closed.
    final let core: CarrierCore<State>
    final var runtime: CarrierRuntime { core.runtime }
    let client: CarrierClient?
    /// Server: the listener's record of the connection (its ids, its address).
    private(set) weak var entry: QuicServerConnection?
    private(set) weak var listener: QuicListener?
    private(set) var quic: QuicConnection?
    final var state: State {
        get { core.state }
        set { core.state = newValue }
    }
    private var fd: Int32 = -1
    private var fdWantsWrite = false
    final var request: CarrierRequest?
    private var peerAddress: Endpoint?
    let sessionStream: Int64 = 0
    /// The flows' streams (every stream but the session's).
    private var flows: [Int64: QuicFlow] = [:]
    nonisolated(unsafe) private static let recvBuffer = UnsafeMutableRawPointer.allocate(byteCount: 65_536, alignment: 16)
    /// Client sockets' reads (one recvmmsg of up to 8 datagrams or GRO batches), on the loop.
    nonisolated(unsafe) private static let recvBatch = UDPReceiveBatch(slots: 8)

    final var side: CarrierSide { core.side }
    final var isServer: Bool { core.isServer }
    final var isOpen: Bool { core.isOpen }
    final var peer: Endpoint? { peerAddress }
    final var tlsDescription: String { quic?.tlsDescription ?? "" }

    private let alpn: String
    private let baseLimits: QuicLimits

    init(client: CarrierClient, delegate: CarrierDelegate, kind: CarrierKind, alpn: String, limits: QuicLimits, datagrams: Bool) {
        core = CarrierCore(.client, runtime: client.runtime, state: .resolving, releaseWhenClosed: false)
        self.client = client
        self.delegate = delegate
        self.kind = kind
        self.alpn = alpn
        baseLimits = limits
        self.datagrams = datagrams
        bindCore()
    }

    /// Server side: made by the listener once the handshake of `entry`'s connection chose this
    /// carrier's ALPN; the connection is its from then on (`connectionReady` follows).
    init(server entry: QuicServerConnection, listener: QuicListener, connection q: QuicConnection, kind: CarrierKind, datagrams: Bool) {
        core = CarrierCore(.server, runtime: listener.runtime, state: .handshake, releaseWhenClosed: false)
        client = nil
        self.entry = entry
        self.listener = listener
        peerAddress = entry.peer
        self.kind = kind
        alpn = q.alpn
        baseLimits = q.limits
        self.datagrams = datagrams
        bindCore()
        attach(q)
        q.delegate = self
    }

    /// After the QUIC handshake (client: with the ALPN it asked for): what the carrier's ALPN
    /// makes of the connection (quic: the session stream; h3: HTTP/3 and its CONNECT).
    func connectionReady(_ c: QuicConnection) {}

    /// Client: the connection of a failed attempt is gone (and what the carrier made on it).
    func connectionDropped() {}

    /// QUIC flushes itself after the batch; input waiting is delivered (`processSoon`).
    private func bindCore() {
        core.bind(flush: { [weak self] in self?.flush() }, process: { [weak self] in self?.deliver() })
    }

    private func attach(_ q: QuicConnection) {
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
        layer = nil
        connectionDropped()
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
        var limits = baseLimits
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
                                              alpn: alpn, local: la, remote: SocketAddress(remote),
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
    final func migrate(_ done: @escaping (Bool) -> Void) -> Bool {
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

    final func handleIO(_ events: UInt32) {
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

    final func sendPackets(_ bytes: UnsafeRawBufferPointer, segment: Int, to: SocketAddress, from conn: QuicConnection) -> Bool {
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

    /// Client: the handshake is done; the front must have chosen the ALPN asked for. (A
    /// server carrier is made after its handshake, `init(server:)`.)
    func quicHandshakeDone(_ c: QuicConnection) {
        guard !isServer, state == .handshake else { return }
        guard c.alpn == alpn else {
            fail(.rejected(status: 0, "the front did not negotiate ALPN \(alpn) (got \(c.alpn.isEmpty ? "none" : c.alpn))"))
            return
        }
        connectionReady(c)
    }

    func quicReadable(_ c: QuicConnection, stream: Int64) { streamReadable(stream) }

    /// Bytes (or the FIN) for the session or a flow (h3: in the request's body).
    final func streamReadable(_ stream: Int64) {
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

    final func openFlow() -> QuicFlow? {
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

    /// Client: a flow's stream was refused (h3: its CONNECT).
    final func flowRefused(_ stream: Int64) {
        flows.removeValue(forKey: stream)?.failed(.other(ECONNREFUSED))
    }

    final func forgetFlow(_ f: QuicFlow) {
        if flows[f.id] === f { flows[f.id] = nil }
    }

    final func soon(_ body: @escaping () -> Void) { runtime.loop.soon(body) }

    /// The connection is gone: every flow's stream with it.
    private func failFlows() {
        guard !flows.isEmpty else { return }
        let all = Array(flows.values)
        flows.removeAll()
        runtime.loop.soon { for f in all { f.failed(.other(ECONNRESET)) } }
    }

    final func deliver() {
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

    final func streamWritable(_ stream: Int64) {
        if stream == sessionStream && state == .open { delegate?.carrierWritable(self) }
        else { flows[stream]?.writable() }
    }

    func quicStreamReset(_ c: QuicConnection, stream: Int64, code: UInt64) { streamReset(stream, code: code) }

    final func streamReset(_ stream: Int64, code: UInt64) {
        guard stream == sessionStream else {
            flows.removeValue(forKey: stream)?.failed(.other(ECONNRESET))
            return
        }
        fail(.io("session stream reset by the peer (code \(code))"))
    }

    final func quicDatagram(_ c: QuicConnection, _ bytes: UnsafeRawBufferPointer) {
        guard state == .open, datagrams else { return }
        delegate?.carrier(self, datagram: bytes)
    }

    final var maxDatagram: Int { state == .open && datagrams ? quic?.datagramCapacity ?? 0 : 0 }
    final var maxPacket: Int { state == .open ? quic?.pathMaxPacket ?? 0 : 0 }

    final func sendDatagram(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard state == .open, datagrams, let q = quic, bytes.count <= q.datagramCapacity else { return false }
        return q.sendDatagram(bytes)
    }

    final func quicClosed(_ c: QuicConnection, _ reason: CarrierCloseReason) {
        let old = state
        state = .closed
        failFlows()
        releaseSocket()
        if isServer && old == .handshake, let entry { listener?.handshakeEnded(entry, reason); return }
        if old != .closing && old != .closed { notifyClosed(reason) }
    }

    final func quicConnectionID(_ c: QuicConnection, _ id: QuicCID, add: Bool) {
        if let entry { listener?.route(id, to: entry, add: add) }
    }

    private func connectionFinished() {
        failFlows()
        releaseSocket()
        if let entry { listener?.forget(entry) }
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

    final func write(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard state == .open, let q = streams else { return 0 }
        return q.write(sessionStream, bytes)
    }

    final var writableBytes: Int {
        guard state == .open, let q = streams else { return 0 }
        return q.writeRoom(sessionStream)
    }

    final var bufferedBytes: Int { streams?.unsent(sessionStream) ?? 0 }

    /// The connection is over (its CONNECTION_CLOSE sent), or there is none.
    final var drained: Bool { quic.map { $0.closed } ?? true }

    final func flush() { quic?.flush() }

    /// QUIC's windows hold the peer back while the session's bytes wait unread.
    final func setReading(_ on: Bool) { core.setReading(on, nil) }

    final func close() {
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

    final func abort() {
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

    final func fail(_ reason: CarrierCloseReason) {
        if core.fail(cutting: { closeConnection(graceful: false) }) { notifyClosed(reason) }
    }
}

/// Reads the socket a client migrated away from, for its carrier.
private final class OldSocket: IOHandler {
    weak var carrier: QuicCarrierBase?
    init(_ c: QuicCarrierBase) { carrier = c }
    func handleIO(_ events: UInt32) { carrier?.readOld() }
}
