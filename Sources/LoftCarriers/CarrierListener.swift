import Glibc
import LoftCore
import LoftHTTP
import LoftIO
import LoftTLS

/// Where and how the front listens.
public struct CarrierServerOptions: Sendable {
    /// The front's listen address (the one listener loft allows off loopback).
    public var listen: Endpoint
    /// The session path; requests for anything else get 404.
    public var path: String
    /// Which carriers this listener serves (one port serves all three: ALPN h2 is the h2
    /// carrier; over http/1.1 an upgrade request is ws, a plain GET/POST with `?session=` is get).
    public var kinds: Set<CarrierKind>
    public var tls: TLSServerOptions
    /// TLS handshake plus the request head, per connection.
    public var handshakeTimeoutMs: UInt64
    /// get: how long the first of the GET/POST pair waits for the other.
    public var joinTimeoutMs: UInt64
    /// Connections in the handshake at once; at the cap a new one takes the place of the one
    /// that has been in its handshake longest.
    public var maxPendingHandshakes: Int
    /// Connections in the handshake from one address at once; past it a new one from that
    /// address takes the place of that address's oldest (one address cannot push out others).
    public var maxPendingPerSource: Int = 32
    /// The handshake deadline once more than half the slots are taken.
    public var pressuredHandshakeTimeoutMs: UInt64 = 2_000
    /// Output buffer per TLS connection.
    public var outputBufferBytes: Int
    /// quic: the UDP address (nil: the TCP listener's address and port).
    public var quicListen: Endpoint?
    /// quic: when Initials are answered with a Retry (address validation).
    public var quicRetry: QuicRetryPolicy = .auto
    /// quic: the session's max-streams; QUIC's bidirectional stream limit becomes min(1024,
    /// this + 1) (nil: 1024).
    public var quicMaxStreams: Int?
    /// quic and h3: the largest UDP payload sent and taken (nil: 1452 with path MTU discovery).
    public var quicMaxPacket: Int?
    /// The TCP listener is a Multipath TCP one (IPPROTO_MPTCP): clients that ask get MPTCP,
    /// the others plain TCP as before.
    public var multipath = false

    public init(listen: Endpoint, path: String = "/loft", kinds: Set<CarrierKind> = [.ws, .get, .h2], tls: TLSServerOptions,
                handshakeTimeoutMs: UInt64 = 10_000, joinTimeoutMs: UInt64 = 10_000, maxPendingHandshakes: Int = 256,
                outputBufferBytes: Int = 256 * 1024) {
        self.listen = listen
        self.path = path
        self.kinds = kinds
        self.tls = tls
        self.handshakeTimeoutMs = handshakeTimeoutMs
        self.joinTimeoutMs = joinTimeoutMs
        self.maxPendingHandshakes = maxPendingHandshakes
        self.outputBufferBytes = outputBufferBytes
    }
}

public protocol CarrierListenerDelegate: AnyObject {
    /// Called with each valid request before a carrier is made (get: for each of the two);
    /// false answers 403. The session's own authentication (the HELLO token) comes later, on
    /// the carrier. Default: true.
    func carrierListener(_ listener: CarrierListener, admit request: CarrierRequest) -> Bool
    /// A carrier is up. Keep it (the listener does not) and set its delegate here.
    func carrierListener(_ listener: CarrierListener, accepted carrier: Carrier)
}

extension CarrierListenerDelegate {
    public func carrierListener(_ listener: CarrierListener, admit request: CarrierRequest) -> Bool { true }
}

/// Counters of one listener.
public struct CarrierListenerStats: Sendable {
    public var accepted = 0          // TCP connections accepted
    public var refused = 0           // closed at accept (could not be set up)
    public var evicted = 0           // closed in the handshake to make room for a newer one
    public var handshakeFailed = 0   // TLS failures, timeouts, closes before a request
    public var rejected = 0          // answered with an HTTP error
    public var carriers = 0          // carriers handed to the delegate
    public var multipathAccepted = 0 // multipath listener: connections accepted running MPTCP
    public var multipathFallbacks = 0 // multipath listener: connections accepted as plain TCP
}

/// Accepts TCP connections, does TLS, and by ALPN either hands the connection to an h2 carrier
/// (which waits for its extended CONNECT) or reads the HTTP/1.1 request head (strictly: see
/// HTTPParser) and turns it into a ws carrier or one leg of a get carrier.
public final class CarrierListener: IOHandler {
    public let options: CarrierServerOptions
    public private(set) var localEndpoint: Endpoint
    public private(set) var stats = CarrierListenerStats()
    public weak var delegate: CarrierListenerDelegate?
    let runtime: CarrierRuntime
    private let context: TLSContext
    private var fd: Int32
    private var pending: [ObjectIdentifier: PendingRequest] = [:]
    /// The same connections, oldest first, and how many each address has.
    private var pendingOrder = ActivityList<PendingRequest>()
    private var pendingPerSource: [IPAddress: Int] = [:]
    private var joins: [String: GetServerCarrier] = [:]
    /// quic: the UDP socket on the same port number.
    private var quic: QuicListener?
    /// The UDP address the quic carrier listens on (nil without quic).
    public var quicEndpoint: Endpoint? { quic?.localEndpoint }

    public init(_ options: CarrierServerOptions, runtime: CarrierRuntime, delegate: CarrierListenerDelegate) throws {
        guard options.path.hasPrefix("/"), !options.path.contains("?") else {
            throw TLSError("carrier path must start with / and have no query: \(options.path)")
        }
        self.options = options
        self.runtime = runtime
        self.delegate = delegate
        // ALPN picks the carrier family: h2 for the h2 carrier, http/1.1 for ws and get.
        var alpn: [String] = []
        if options.kinds.contains(.h2) { alpn.append("h2") }
        if options.kinds.contains(.ws) || options.kinds.contains(.get) { alpn.append("http/1.1") }
        context = try TLSContext(server: options.tls, alpn: alpn)
        let wantsQuic = options.kinds.contains(.quic) || options.kinds.contains(.h3)
        // Port 0 with quic on the same number: the kernel picks a TCP port whose UDP twin may be
        // taken; another pick is tried then (a few times) instead of failing the start.
        let retries = wantsQuic && options.listen.port == 0 && options.quicListen?.port == nil ? 8 : 1
        fd = -1
        localEndpoint = options.listen
        var attempt = 0
        while true {
            attempt += 1
            let s = try Self.listenTCP(options.listen, multipath: options.multipath)
            let local = Sockets.localEndpoint(s) ?? options.listen
            guard wantsQuic else { fd = s; localEndpoint = local; break }
            do {
                quic = try QuicListener(listen: Endpoint(options.quicListen?.address ?? local.address,
                                                         options.quicListen?.port ?? local.port),
                                        tls: options.tls, runtime: runtime, owner: self,
                                        maxPendingHandshakes: options.maxPendingHandshakes,
                                        maxPendingPerSource: options.maxPendingPerSource,
                                        retry: options.quicRetry, maxStreams: options.quicMaxStreams, maxPacket: options.quicMaxPacket,
                                        quic: options.kinds.contains(.quic), h3Path: options.kinds.contains(.h3) ? options.path : nil)
                fd = s
                localEndpoint = local
                break
            } catch let e as SystemError where e.code == EADDRINUSE && attempt < retries {
                _ = Syscall.close(s)
            } catch {
                _ = Syscall.close(s)
                throw error
            }
        }
        runtime.loop.register(fd, IOEvents.readable, self)
        Log.info("carrier.listen", ["address": localEndpoint, "path": options.path,
                                    "carriers": options.kinds.map(\.rawValue).sorted().joined(separator: ",")])
    }

    deinit { close() }

    /// A listening TCP socket on `listen` (SO_REUSEADDR, backlog 1024); `multipath`: an MPTCP
    /// one (TCP when the kernel refuses MPTCP sockets).
    private static func listenTCP(_ listen: Endpoint, multipath: Bool) throws -> Int32 {
        let s = Sockets.makeStream(family: Sockets.family(of: listen), multipath: multipath)
        guard s >= 0 else { throw SystemError("socket", Sockets.errno) }
        _ = Syscall.setOption(s, SOL_SOCKET, SO_REUSEADDR, 1)
        if case .failure(let e) = Syscall.bind(s, to: SocketAddress(listen)) {
            _ = Syscall.close(s)
            throw SystemError("bind \(listen)", e.code)
        }
        if case .failure(let e) = Syscall.listen(s, backlog: 1024) {
            _ = Syscall.close(s)
            throw SystemError("listen \(listen)", e.code)
        }
        return s
    }

    /// Stops accepting; connections still in the handshake are dropped. Carriers already handed
    /// out are not touched: the quic ones keep the UDP socket, which closes with the last of
    /// them (`QuicListener.stopAccepting`).
    public func close() {
        quic?.stopAccepting()
        guard fd >= 0 else { return }
        runtime.loop.unregister(fd)
        _ = Syscall.close(fd)
        fd = -1
        for p in Array(pending.values) {
            _ = removePending(p)
            p.conn.abort()
        }
        for j in joins.values { j.abort() }
        joins.removeAll()
    }

    public func handleIO(_ events: UInt32) {
        while fd >= 0 {
            let s: Int32
            switch Syscall.accept(fd) {
            case .success(let c): s = c
            case .failure(let e):
                if e.wouldBlock { return }
                if e.code == ECONNABORTED { continue }
                Log.warn("carrier.accept", ["error": e.description])
                return
            }
            stats.accepted += 1
            if options.multipath {
                if Multipath.of(s)?.active == true { stats.multipathAccepted += 1 } else { stats.multipathFallbacks += 1 }
            }
            Syscall.setNoDelay(s)
            let peer = (try? Syscall.peerAddress(s).get()) ?? SocketAddress()
            makeRoom(for: peer.endpoint?.address)
            guard let conn = TLSConnection.accepted(runtime: runtime, context: context, fd: s, peer: peer.endpoint,
                                                    inputBytes: 64 * 1024, outputBytes: options.outputBufferBytes) else {
                _ = Syscall.close(s)
                continue
            }
            let p = PendingRequest(conn: conn, listener: self)
            let pressured = pending.count * 2 >= options.maxPendingHandshakes
            addPending(p)
            let timeout = pressured ? min(options.handshakeTimeoutMs, options.pressuredHandshakeTimeoutMs)
                                    : options.handshakeTimeoutMs
            runtime.after(timeout) { [weak self, weak p] in
                guard let self, let p, self.removePending(p) else { return }
                self.stats.handshakeFailed += 1
                Log.debug("carrier.handshake_timeout", ["peer": p.conn.peer.map { "\($0)" } ?? ""])
                p.conn.abort()
            }
        }
    }

    // MARK: connections in their handshake

    private func addPending(_ p: PendingRequest) {
        pending[ObjectIdentifier(p)] = p
        pendingOrder.append(p)
        if let a = p.source { pendingPerSource[a, default: 0] += 1 }
    }

    /// False if `p` was not pending (any more).
    private func removePending(_ p: PendingRequest) -> Bool {
        guard pending.removeValue(forKey: ObjectIdentifier(p)) != nil else { return false }
        pendingOrder.remove(p)
        if let a = p.source {
            let n = (pendingPerSource[a] ?? 1) - 1
            pendingPerSource[a] = n > 0 ? n : nil
        }
        return true
    }

    /// Before a new connection from `source` joins: if its address is at its share, its own
    /// oldest handshake goes; else if every slot is taken, the oldest handshake of all goes.
    /// An established carrier is never touched: only handshakes compete with handshakes.
    private func makeRoom(for source: IPAddress?) {
        var victim: PendingRequest?
        if let source, (pendingPerSource[source] ?? 0) >= options.maxPendingPerSource {
            var p = pendingOrder.oldest
            while let q = p, q.source != source { p = q.newer }
            victim = p
        } else if pending.count >= options.maxPendingHandshakes {
            victim = pendingOrder.oldest
        }
        guard let v = victim, removePending(v) else { return }
        stats.evicted += 1
        Log.debug("carrier.handshake_evicted", ["peer": v.conn.peer.map { "\($0)" } ?? ""])
        v.conn.abort()
    }

    // MARK: from PendingRequest

    func handshakeEnded(_ p: PendingRequest, _ reason: CarrierCloseReason?) {
        guard removePending(p) else { return }
        stats.handshakeFailed += 1
        Log.debug("carrier.handshake_failed", ["peer": p.conn.peer.map { "\($0)" } ?? "", "reason": reason ?? .closed])
    }

    func reject(_ p: PendingRequest, _ e: HTTPError) {
        _ = removePending(p)
        stats.rejected += 1
        Log.info("carrier.rejected", ["peer": p.conn.peer.map { "\($0)" } ?? "", "status": e.status, "reason": e.message])
        let extra = e.status == 426 ? "Sec-WebSocket-Version: 13\r\n" : ""
        _ = p.conn.append(HTTPParser.errorResponse(e.status, extra: extra))
        p.conn.close(lingerMs: 1000)
    }

    func route(_ p: PendingRequest, _ head: HTTPRequestHead, consumed: Int) {
        do throws(HTTPError) {
            try dispatch(p, head, consumed: consumed)
        } catch {
            reject(p, error)
        }
    }

    private func dispatch(_ p: PendingRequest, _ head: HTTPRequestHead, consumed: Int) throws(HTTPError) {
        let conn = p.conn
        guard let host = try head.headers.single("host"), !host.isEmpty else { throw HTTPError(400, "Host header missing") }
        _ = host
        guard head.method == "GET" || head.method == "POST" else { throw HTTPError(405, "method \(head.method) not allowed") }
        guard head.path == options.path else { throw HTTPError(404, "no such path \(head.path)") }
        if !head.headers.values("upgrade").isEmpty {
            guard options.kinds.contains(.ws) else { throw HTTPError(400, "WebSocket is not served here") }
            let key = try WSHandshake.validate(request: head)
            let request = CarrierRequest(kind: .ws, peer: conn.peer, path: head.path, query: head.query,
                                         headers: head.headers, sessionID: nil)
            try admit(request)
            _ = removePending(p)
            conn.inStart += consumed
            let carrier = WSCarrier(server: conn, request: request, key: key)
            stats.carriers += 1
            Log.debug("carrier.ws.accepted", ["peer": conn.peer.map { "\($0)" } ?? ""])
            delegate?.carrierListener(self, accepted: carrier)
            return
        }
        guard options.kinds.contains(.get) else { throw HTTPError(400, "a WebSocket upgrade is required") }
        guard let raw = try head.queryParameter("session") else { throw HTTPError(400, "session parameter missing") }
        let id = raw.lowercased()
        guard id.utf8.count == 32, Hex.decode(id) != nil else { throw HTTPError(400, "session id is not 32 hex digits") }
        let te = head.headers.values("transfer-encoding")
        let cl = head.headers.values("content-length")
        if head.method == "GET" {
            guard te.isEmpty, cl.allSatisfy({ $0 == "0" }), cl.count <= 1 else { throw HTTPError(400, "a GET has no body") }
        } else {
            guard te.count == 1, te[0].lowercased() == "chunked" else { throw HTTPError(400, "the POST body must be chunked") }
            guard cl.isEmpty else { throw HTTPError(400, "Content-Length with Transfer-Encoding") }
        }
        let request = CarrierRequest(kind: .get, peer: conn.peer, path: head.path, query: head.query,
                                     headers: head.headers, sessionID: id)
        try admit(request)
        var carrier = joins[id]
        let isNew = carrier == nil
        if carrier == nil {
            carrier = GetServerCarrier(sessionID: id, runtime: runtime, listener: self)
        }
        let c = carrier!
        let attached = head.method == "GET" ? c.attachDown(conn, request) : c.attachUp(conn, request)
        guard attached else { throw HTTPError(409, "session \(id) already has a \(head.method)") }
        _ = removePending(p)
        conn.inStart += consumed
        if isNew {
            joins[id] = c
            let timeout = options.joinTimeoutMs
            runtime.after(timeout) { [weak self, weak c] in
                guard let self, let c, c.isJoining else { return }
                Log.info("carrier.get.join_timeout", ["session": id])
                self.joins.removeValue(forKey: id)
                self.stats.rejected += 1
                c.joinTimedOut()
            }
        }
        if c.isComplete {
            joins.removeValue(forKey: id)
            c.join()
            stats.carriers += 1
            Log.debug("carrier.get.accepted", ["peer": conn.peer.map { "\($0)" } ?? "", "session": id])
            delegate?.carrierListener(self, accepted: c)
        }
    }

    private func admit(_ r: CarrierRequest) throws(HTTPError) {
        if let d = delegate, !d.carrierListener(self, admit: r) { throw HTTPError(403, "refused by the front") }
    }

    // MARK: h2

    /// A connection that negotiated ALPN h2: an h2 carrier waits for its CONNECT.
    func startH2(_ p: PendingRequest) {
        guard pending[ObjectIdentifier(p)] != nil else { return }
        guard let carrier = H2Carrier(server: p.conn, listener: self) else {
            _ = removePending(p)
            stats.handshakeFailed += 1
            p.conn.abort()
            return
        }
        p.h2 = carrier
    }

    /// A request on an h2 or h3 connection refused (the `nth` on that connection): counted
    /// every time, logged once per connection (info; the rest at debug), so that a burst of
    /// refusals costs one log line.
    func refused(_ c: Carrier, _ status: Int, _ reason: String, nth: Int) {
        stats.rejected += 1
        Log.emit(nth == 1 ? .info : .debug, "carrier.rejected",
                 [("peer", c.peer.map { "\($0)" } ?? ""), ("carrier", c.kind.rawValue), ("status", status), ("reason", reason),
                  ("refusals", nth)])
    }

    func admitH2(_ r: CarrierRequest) -> Bool {
        delegate?.carrierListener(self, admit: r) ?? true
    }


    /// The handshake entry that holds `c` (at most maxPendingHandshakes to look through, once
    /// per h2 connection).
    private func pendingEntry(_ c: H2Carrier) -> PendingRequest? {
        pending.values.first { $0.h2 === c }
    }

    func acceptedH2(_ c: H2Carrier) {
        guard let p = pendingEntry(c), removePending(p) else { return }
        stats.carriers += 1
        Log.debug("carrier.h2.accepted", ["peer": c.peer.map { "\($0)" } ?? ""])
        delegate?.carrierListener(self, accepted: c)
    }

    /// An h2 connection ended before it carried a session.
    func h2Ended(_ c: H2Carrier, _ reason: CarrierCloseReason?) {
        guard let p = pendingEntry(c), removePending(p) else { return }
        stats.handshakeFailed += 1
        Log.debug("carrier.handshake_failed", ["peer": c.peer.map { "\($0)" } ?? "", "carrier": "h2", "reason": reason ?? .closed])
    }

    // MARK: quic

    func acceptedQuic(_ c: QuicCarrierBase) {
        if let r = c.request, let d = delegate, !d.carrierListener(self, admit: r) {
            stats.rejected += 1
            Log.info("carrier.rejected", ["peer": c.peer.map { "\($0)" } ?? "", "carrier": c.kind.rawValue, "status": 403, "reason": "refused by the front"])
            c.abort()
            return
        }
        stats.carriers += 1
        Log.debug("carrier.\(c.kind.rawValue).accepted", ["peer": c.peer.map { "\($0)" } ?? ""])
        delegate?.carrierListener(self, accepted: c)
    }

    /// The quic side's counters (Initials accepted and refused, handshakes failed).
    public var quicStats: (accepted: Int, evicted: Int, dropped: Int, handshakeFailed: Int) {
        guard let s = quic?.stats else { return (0, 0, 0, 0) }
        return (s.accepted, s.evicted, s.dropped, s.handshakeFailed)
    }

    /// Datagrams the quic side has received.
    var quicPackets: Int { quic?.stats.packets ?? 0 }

    /// The quic side's address validation and reset counters.
    public var quicValidation: (retries: Int, validated: Int, badTokens: Int, resets: Int, amplificationHeld: Int)? {
        guard let s = quic?.stats else { return nil }
        return (s.retries, s.validated, s.badTokens, s.resets, s.amplificationHeld)
    }

    func forget(_ c: GetServerCarrier) {
        if joins[c.sessionID] === c { joins.removeValue(forKey: c.sessionID) }
    }
}

/// A server connection until its request head is read.
final class PendingRequest: TLSConnectionOwner, ActivityListed {
    let conn: TLSConnection
    private weak var listener: CarrierListener?
    /// ALPN h2: the carrier that owns the connection until its CONNECT arrives.
    var h2: H2Carrier?
    /// The peer's address (handshakes are limited per address).
    let source: IPAddress?
    /// Neighbours in the listener's list of handshakes, oldest first.
    unowned(unsafe) var older: PendingRequest?
    unowned(unsafe) var newer: PendingRequest?

    init(conn: TLSConnection, listener: CarrierListener) {
        self.conn = conn
        self.listener = listener
        source = conn.peer?.address
        conn.owner = self
    }

    func tlsReady(_ c: TLSConnection) {
        if c.alpn == "h2" { listener?.startH2(self) }
    }
    func tlsFlushed(_ c: TLSConnection) {}

    func tlsReceived(_ c: TLSConnection) {
        guard let listener, c.owner === self else { return }
        let avail = UnsafeRawBufferPointer(start: c.input + c.inStart, count: c.inEnd - c.inStart)
        switch HTTPParser.parseRequest(avail) {
        case .incomplete: return
        case .failure(let e): listener.reject(self, e)
        case .complete(let head, let consumed): listener.route(self, head, consumed: consumed)
        }
    }

    func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?) {
        listener?.handshakeEnded(self, reason)
    }
}
