import CLinux
import Glibc
import LoftConfig
import LoftCore
import LoftIO

/// The SOCKS5 server (RFC 1928, no authentication) on a loopback address: CONNECT and UDP
/// ASSOCIATE, each handed to the router like a TUN flow. Everything runs on the one event-loop
/// thread with nonblocking sockets.
///
/// - One TCP listener and one UDP socket, bound to the same address and port number.
/// - Each TCP client: greeting and request within `handshakeTimeoutMs`, then either a CONNECT
///   relay (the reply waits for the outbound's connect, at most `connectTimeoutMs`) or a UDP
///   association that lives exactly as long as the TCP connection.
/// - A CONNECT relay is a splice (LoftIO) between the client's socket and the outbound's
///   stream: backpressure, half-close, resets and the idle deadline are the splice's.
public final class Socks5Server: IOHandler {
    public struct Options: Sendable {
        public var listen: Endpoint
        public var maxClients: Int
        /// Greeting + request must be complete within this (slow or silent clients are closed).
        public var handshakeTimeoutMs: UInt64 = 10_000
        /// A CONNECT whose outbound has not connected within this is answered 0x06.
        public var connectTimeoutMs: UInt64 = 10_000
        /// A CONNECT relay with no bytes either way for this long is closed (0: never).
        public var idleTimeoutMs: UInt64 = 0
        /// After an error reply: how long the rest of the client's bytes are read and discarded
        /// before the close (so the reply is not lost to a reset).
        public var lingerMs: UInt64 = 2_000

        public init(listen: Endpoint, maxClients: Int) {
            self.listen = listen
            self.maxClients = maxClients
        }

        public init(_ settings: Socks5Settings) {
            self.init(listen: settings.listen, maxClients: settings.maxClients)
        }
    }

    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Bytes read per call while discarding a lingering client's input.
    static let chunk = 64 * 1024

    let options: Options
    let loop: EventLoop
    let router: FlowRouter
    /// Counted here; CONNECT bytes are counted by the relays' splices into `meter`.
    private var tally = Socks5Counters()
    let meter = SpliceMeter()
    public var counters: Socks5Counters {
        var c = tally
        c.tcpBytesUp = meter.bytesUp
        c.tcpBytesDown = meter.bytesDown
        return c
    }
    /// The address and port both sockets are bound to (the port is known after start when
    /// `listen` named port 0).
    public private(set) var bound: Endpoint

    private var listenFD: Int32 = -1
    private var udp: Socks5UDPRelay?
    private var clients: [Int32: Socks5Client] = [:]
    /// Clients not past their request yet (greeting, request, or lingering after an error
    /// reply), oldest first: the ones evicted when a new client finds the table full.
    private var handshaking = ActivityList<Socks5Client>()
    /// Clients with a deadline (handshake, connect, linger).
    private var acceptResume: TimerHandle?
    private var lastLimitLog: UInt64 = 0
    private var running = false
    let scratch: UnsafeMutableRawBufferPointer

    public init(options: Options, loop: EventLoop, router: FlowRouter) {
        self.options = options
        self.loop = loop
        self.router = router
        self.bound = options.listen
        scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunk, alignment: 16)
        tally.maxClients = options.maxClients
    }

    deinit {
        stop()
        scratch.deallocate()
    }

    // MARK: start and stop

    public func start() throws {
        let s = Sockets.make(family: Sockets.family(of: options.listen), type: Int32(SOCK_STREAM.rawValue))
        guard s >= 0 else { throw StartError(description: "socks5: socket: \(String(cString: strerror(Sockets.errno)))") }
        var one: Int32 = 1
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let addr = SocketAddress(options.listen)
        guard addr.withSockaddr({ bind(s, $0, $1) }) == 0 else {
            let e = Sockets.errno
            Glibc.close(s)
            throw StartError(description: "socks5: cannot bind TCP \(options.listen): \(String(cString: strerror(e)))")
        }
        guard listen(s, 4096) == 0 else {
            let e = Sockets.errno
            Glibc.close(s)
            throw StartError(description: "socks5: listen on \(options.listen): \(String(cString: strerror(e)))")
        }
        bound = Sockets.localEndpoint(s) ?? options.listen
        let relay: Socks5UDPRelay
        do {
            relay = try Socks5UDPRelay(server: self, bound: bound)
        } catch {
            Glibc.close(s)
            throw error
        }
        listenFD = s
        udp = relay
        running = true
        loop.register(s, IOEvents.readable, self)
        Log.info("socks5.listening", ["listen": bound, "udp": bound, "max-clients": options.maxClients])
    }

    /// Closes every client (their outbounds too) and both sockets.
    public func stop() {
        guard running else { return }
        running = false
        for c in Array(clients.values) { c.close(graceful: true) }
        udp?.stop()
        udp = nil
        loop.unregister(listenFD)
        Glibc.close(listenFD)
        listenFD = -1
        Log.info("socks5.stopped", ["accepted": counters.clientsAccepted, "refused": counters.refusedAtLimit,
                                    "bytes_up": counters.tcpBytesUp, "bytes_down": counters.tcpBytesDown,
                                    "udp_up": counters.udpPacketsUp, "udp_down": counters.udpPacketsDown,
                                    "udp_drops": counters.totalUDPDrops])
    }

    // MARK: accepting

    public func handleIO(_ events: UInt32) {
        guard running else { return }
        for _ in 0..<64 {
            var peer = SocketAddress()
            // accept4 is not in Swift's Glibc import: accept, then nonblocking + close-on-exec.
            let fd = peer.withMutableSockaddr { accept(listenFD, $0, $1) }
            if fd >= 0 {
                _ = fcntl(fd, F_SETFL, O_NONBLOCK | O_RDWR)
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            }
            if fd < 0 {
                let e = Sockets.errno
                if e == EINTR || e == ECONNABORTED { continue }
                if e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM {
                    // Out of descriptors: stop accepting for a moment instead of spinning.
                    loop.modify(listenFD, 0)
                    if acceptResume == nil {
                        acceptResume = loop.schedule(after: 100) { [weak self] in
                            guard let self, self.running else { return }
                            self.acceptResume = nil
                            self.loop.modify(self.listenFD, IOEvents.readable)
                        }
                    }
                    Log.warn("socks5.accept.paused", ["error": String(cString: strerror(e)), "open": counters.openClients])
                }
                return
            }
            if tally.openClients >= options.maxClients, let victim = handshaking.oldest {
                // Full: the client that has been in its handshake longest makes room. Only
                // clients past their handshake can fill the table against a new one.
                tally.evictedInHandshake &+= 1
                Log.debug("socks5.evicted", ["client": victim.peer, "phase": "\(victim.phase)"])
                victim.close(graceful: false)
            }
            if tally.openClients >= options.maxClients {
                tally.refusedAtLimit &+= 1
                _ = clinux_set_linger_reset(fd)
                Glibc.close(fd)
                if loop.now >= lastLimitLog + 1000 {
                    lastLimitLog = loop.now
                    Log.info("socks5.limit", ["max-clients": options.maxClients, "refused": tally.refusedAtLimit])
                }
                continue
            }
            _ = clinux_set_nodelay(fd)
            let client = Socks5Client(server: self, fd: fd, peer: peer.endpoint ?? Socks5.unspecifiedBound)
            clients[fd] = client
            handshaking.append(client)
            tally.openClients += 1
            tally.clientsAccepted &+= 1
            client.begin()
        }
    }

    func removed(_ c: Socks5Client) {
        handshakeEnded(c)
        if clients[c.fd] === c {
            clients[c.fd] = nil
            tally.openClients -= 1
        }
    }

    /// `c` completed its request (it relays or holds an association now), or is gone.
    func handshakeEnded(_ c: Socks5Client) {
        guard c.inHandshakeList else { return }
        c.inHandshakeList = false
        handshaking.remove(c)
    }

    // MARK: hooks for clients and the UDP relay

    func count(reply code: Socks5.ReplyCode) { tally.replies[Int(code.rawValue)] &+= 1 }
    func countHandshakeTimeout() { tally.handshakeTimeouts &+= 1 }
    func countConnectTimeout() { tally.connectTimeouts &+= 1 }
    func countMethodRejected() { tally.methodRejected &+= 1 }
    func countBadVersion() { tally.badVersion &+= 1 }
    func countRelayEnd(_ ending: Splice.Ending) {
        switch ending {
        case .closed: tally.relaysClosed &+= 1
        case .reset: tally.relaysReset &+= 1
        case .idle: tally.relaysReset &+= 1; tally.idleClosed &+= 1
        }
    }
    func countUDP(up bytes: Int) { tally.udpPacketsUp &+= 1; tally.udpBytesUp &+= UInt64(bytes) }
    func countUDP(down bytes: Int) { tally.udpPacketsDown &+= 1; tally.udpBytesDown &+= UInt64(bytes) }
    func countDrop(_ r: Socks5DropReason) { tally.udpDrops[r.rawValue] &+= 1 }
    func associationOpened() { tally.activeAssociations += 1; tally.associationsOpened &+= 1 }
    func associationClosed() { tally.activeAssociations -= 1 }

    func openAssociation(for client: Socks5Client, namedPort: UInt16) -> Socks5Association? {
        udp?.open(peer: client.peer.address, namedPort: namedPort)
    }
}

/// One TCP client: handshake, then a CONNECT relay (its socket spliced to the outbound's
/// stream) or a UDP association's control connection.
final class Socks5Client: IOHandler, SpliceOwner, ActivityListed {
    enum Phase { case greeting, request, connecting, relaying, associated, lingering, closed }

    /// Neighbours in the server's list of clients still in their handshake.
    unowned(unsafe) var older: Socks5Client?
    unowned(unsafe) var newer: Socks5Client?
    var inHandshakeList = true

    unowned let server: Socks5Server
    let fd: Int32
    let peer: Endpoint
    var phase = Phase.greeting
    /// The handshake's or the linger's deadline.
    private var deadline: TimerHandle?
    private var mask: UInt32 = 0
    private var registered = false
    /// Handshake bytes received so far (freed when the handshake ends).
    private var handshake: UnsafeMutableRawPointer?
    private var handshakeCount = 0
    private static let handshakeCapacity = 1024
    /// The CONNECT relay; from `relaying` on, the client socket belongs to its inbound end.
    private var splice: Splice?
    private var destination: Destination = .ip(Socks5.unspecifiedBound)
    private var association: Socks5Association?

    init(server: Socks5Server, fd: Int32, peer: Endpoint) {
        self.server = server
        self.fd = fd
        self.peer = peer
    }

    deinit {
        handshake?.deallocate()
    }

    func begin() {
        handshake = .allocate(byteCount: Self.handshakeCapacity, alignment: 8)
        setDeadline(after: server.options.handshakeTimeoutMs)
        setMask(IOEvents.readable)
        // The greeting often arrives with the connection: read it now, not a loop turn later.
        readHandshake()
    }

    private func setDeadline(after ms: UInt64) {
        clearDeadline()
        deadline = server.loop.schedule(after: ms) { [weak self] in
            guard let self else { return }
            self.deadline = nil
            self.deadlinePassed()
        }
    }

    private func clearDeadline() {
        if let d = deadline { server.loop.cancel(d) }
        deadline = nil
    }

    private func setMask(_ m: UInt32) {
        guard phase != .closed else { return }
        if !registered {
            mask = m
            server.loop.register(fd, m, self)
            registered = true
        } else if m != mask {
            mask = m
            server.loop.modify(fd, m)
        }
    }

    // MARK: I/O on the client socket (until the relay owns it)

    func handleIO(_ ev: UInt32) {
        switch phase {
        case .greeting, .request:
            if ev & IOEvents.error != 0 { close(graceful: false); return }
            readHandshake()
        case .connecting:
            // Not reading; an error or hang-up means the client is gone.
            if ev & (IOEvents.error | IOEvents.hangup) != 0 {
                splice?.reset()
                splice = nil
                close(graceful: false)
            }
        case .associated:
            controlIO(ev)
        case .lingering:
            discardInput()
        case .relaying, .closed:
            return
        }
    }

    private func readHandshake() {
        guard let buf = handshake else { return }
        let room = Self.handshakeCapacity - handshakeCount
        guard room > 0 else { return }
        let n = recv(fd, buf + handshakeCount, room, 0)
        if n == 0 { close(graceful: true); return }
        if n < 0 {
            let e = Sockets.errno
            if e == EAGAIN || e == EWOULDBLOCK || e == EINTR { return }
            close(graceful: false)
            return
        }
        handshakeCount += n
        processHandshake()
    }

    private func consumeHandshake(_ n: Int) {
        guard let buf = handshake else { return }
        if n < handshakeCount { memmove(buf, buf + n, handshakeCount - n) }
        handshakeCount -= n
    }

    private func processHandshake() {
        guard let buf = handshake else { return }
        while phase == .greeting || phase == .request {
            let bytes = UnsafeRawBufferPointer(start: buf, count: handshakeCount)
            if phase == .greeting {
                switch Socks5.Greeting.parse(bytes) {
                case .incomplete:
                    return
                case .malformed:
                    server.countBadVersion()
                    Log.debug("socks5.bad-version", ["client": peer])
                    close(graceful: true)
                    return
                case .complete(let g, let length):
                    consumeHandshake(length)
                    guard g.offersNoAuthentication else {
                        server.countMethodRejected()
                        Log.debug("socks5.no-method", ["client": peer, "methods": g.methodCount])
                        sendHandshake(Socks5.methodSelection(Socks5.methodNoAcceptable))
                        linger()
                        return
                    }
                    guard sendHandshake(Socks5.methodSelection(Socks5.methodNoAuthentication)) else { return }
                    phase = .request
                }
            } else {
                switch Socks5.Request.parse(bytes) {
                case .incomplete:
                    return
                case .malformed(let m):
                    Log.debug("socks5.bad-request", ["client": peer, "error": "\(m)"])
                    if let code = m.reply {
                        reply(code)
                        linger()
                    } else {
                        server.countBadVersion()
                        close(graceful: true)
                    }
                    return
                case .complete(let request, let length):
                    consumeHandshake(length)
                    start(request)
                    return
                }
            }
        }
    }

    /// A handshake message; the send buffer of a fresh socket takes it whole, or the client
    /// is not worth keeping.
    @discardableResult
    private func sendHandshake(_ bytes: [UInt8]) -> Bool {
        let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if n == bytes.count { return true }
        close(graceful: false)
        return false
    }

    private func reply(_ code: Socks5.ReplyCode, bound: Endpoint = Socks5.unspecifiedBound) {
        server.count(reply: code)
        var storage = (UInt64(0), UInt64(0), UInt64(0))
        let n = withUnsafeMutableBytes(of: &storage) { raw -> Int in
            let len = Socks5.writeReply(code, bound: bound, to: raw.baseAddress!)
            return send(fd, raw.baseAddress, len, Int32(MSG_NOSIGNAL)) == len ? len : -1
        }
        if n < 0 { Log.debug("socks5.reply-failed", ["client": peer]) }
    }

    /// After an error reply: FIN, then read and discard until the client closes or lingerMs
    /// passes, so the reply is read before any reset.
    private func linger() {
        guard phase != .closed else { return }
        splice = nil
        phase = .lingering
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
        handshake?.deallocate()
        handshake = nil
        handshakeCount = 0
        setDeadline(after: server.options.lingerMs)
        setMask(IOEvents.readable)
    }

    private func discardInput() {
        for _ in 0..<8 {
            let n = recv(fd, server.scratch.baseAddress, server.scratch.count, 0)
            if n > 0 { continue }
            if n < 0 {
                let e = Sockets.errno
                if e == EAGAIN || e == EWOULDBLOCK || e == EINTR { return }
            }
            close(graceful: n == 0)
            return
        }
    }

    private func deadlinePassed() {
        switch phase {
        case .greeting, .request:
            server.countHandshakeTimeout()
            Log.debug("socks5.handshake-timeout", ["client": peer, "phase": phase == .greeting ? "greeting" : "request"])
            close(graceful: false)
        case .lingering:
            close(graceful: true)
        default:
            return
        }
    }

    // MARK: the request

    private func start(_ request: Socks5.Request) {
        destination = request.destination
        switch request.command {
        case .connect:
            switch server.router.route(FlowRequest(network: .tcp, source: peer, destination: destination)).decision {
            case .drop:
                Log.debug("socks5.connect", ["client": peer, "dst": destination, "result": "drop-rule"])
                reply(.notAllowed)
                linger()
            case .outbound(let outbound):
                phase = .connecting
                server.handshakeEnded(self)
                clearDeadline()
                setMask(0)
                Log.debug("socks5.connect", ["client": peer, "dst": destination, "outbound": outbound.name])
                let s = Splice(loop: server.loop, owner: self, meter: server.meter,
                               connectTimeoutMs: server.options.connectTimeoutMs,
                               idleTimeoutMs: server.options.idleTimeoutMs)
                splice = s
                s.dial(outbound, to: destination)
            }
        case .udpAssociate:
            // DST.PORT: the port the client will send from, or 0 (not known yet).
            guard let a = server.openAssociation(for: self, namedPort: destination.port) else {
                reply(.generalFailure)
                linger()
                return
            }
            association = a
            phase = .associated
            server.handshakeEnded(self)
            clearDeadline()
            handshake?.deallocate()
            handshake = nil
            handshakeCount = 0
            Log.debug("socks5.associate", ["client": peer, "port": destination.port])
            reply(.succeeded, bound: server.bound)
            setMask(IOEvents.readable)
        case .bind:
            reply(.commandNotSupported)
            linger()
        }
    }

    // MARK: the relay

    func spliceConnected(_ splice: Splice) {
        guard phase == .connecting else { return }
        phase = .relaying
        reply(.succeeded)
        // The client socket now belongs to the relay's inbound end.
        server.loop.unregister(fd)
        registered = false
        let client = SocketStream(loop: server.loop, connected: fd)
        // Bytes the client sent after its request, before the reply: first in line.
        let early = handshake.map { UnsafeRawBufferPointer(start: $0, count: handshakeCount) }
        splice.attach(client, initialUp: early)
        handshake?.deallocate()
        handshake = nil
        handshakeCount = 0
    }

    func spliceFailed(_ splice: Splice, _ failure: FlowFailure) {
        guard phase == .connecting else { return }
        self.splice = nil
        if failure == .timedOut {
            server.countConnectTimeout()
            Log.debug("socks5.connect-timeout", ["client": peer, "dst": destination])
            reply(.ttlExpired)
        } else {
            Log.debug("socks5.connect-failed", ["client": peer, "dst": destination, "reason": failure])
            reply(Socks5.ReplyCode(failure))
        }
        linger()
    }

    func spliceEnded(_ splice: Splice, _ ending: Splice.Ending) {
        server.countRelayEnd(ending)
        self.splice = nil
        // The relay closed the client socket.
        phase = .closed
        server.removed(self)
    }

    // MARK: UDP ASSOCIATE control connection

    private func controlIO(_ ev: UInt32) {
        // Bytes on the control connection mean nothing; its end ends the association.
        if ev & IOEvents.error != 0 { close(graceful: false); return }
        discardInput()
    }

    // MARK: closing

    /// Closes the client socket (with a reset unless `graceful`), its outbound and its
    /// association.
    func close(graceful: Bool) {
        guard phase != .closed else { return }
        clearDeadline()
        let wasRelaying = phase == .relaying
        if let s = splice {
            splice = nil
            // While relaying this closes the client socket too.
            if graceful { s.close() } else { s.reset() }
        }
        if let a = association {
            association = nil
            a.close()
        }
        phase = .closed
        server.removed(self)
        handshake?.deallocate()
        handshake = nil
        guard !wasRelaying else { return }
        if registered { server.loop.unregister(fd) }
        registered = false
        if !graceful { _ = clinux_set_linger_reset(fd) }
        Glibc.close(fd)
    }
}

// MARK: - UDP ASSOCIATE

/// The one UDP socket for every association, bound to the TCP listener's address and port.
/// Datagrams are matched to associations by source endpoint: an association whose request
/// named a port is found by (peer IP, port) from the start; one that named port 0 takes the
/// first source port its peer IP sends from that no other association holds.
final class Socks5UDPRelay: IOHandler {
    unowned let server: Socks5Server
    let fd: Int32
    private var bySource: [Endpoint: Socks5Association] = [:]
    /// Port-0 associations that have not seen their first datagram yet, oldest first.
    private var unclaimed: [Socks5Association] = []
    private let rx: UnsafeMutableRawBufferPointer
    private let header: UnsafeMutableRawPointer

    init(server: Socks5Server, bound: Endpoint) throws {
        let s = Sockets.make(family: Sockets.family(of: bound), type: Int32(SOCK_DGRAM.rawValue))
        guard s >= 0 else { throw Socks5Server.StartError(description: "socks5: UDP socket: \(String(cString: strerror(Sockets.errno)))") }
        var size: Int32 = 4 << 20
        setsockopt(s, SOL_SOCKET, SO_RCVBUF, &size, 4)
        setsockopt(s, SOL_SOCKET, SO_SNDBUF, &size, 4)
        let addr = SocketAddress(bound)
        guard addr.withSockaddr({ bind(s, $0, $1) }) == 0 else {
            let e = Sockets.errno
            Glibc.close(s)
            throw Socks5Server.StartError(description: "socks5: cannot bind UDP \(bound): \(String(cString: strerror(e)))")
        }
        self.server = server
        fd = s
        rx = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
        header = .allocate(byteCount: Socks5.maxUDPHeaderLength, alignment: 16)
        server.loop.register(s, IOEvents.readable, self)
    }

    deinit {
        rx.deallocate()
        header.deallocate()
    }

    func stop() {
        for a in unclaimed { a.close() }
        for a in Array(bySource.values) { a.close() }
        server.loop.unregister(fd)
        Glibc.close(fd)
    }

    func open(peer: IPAddress, namedPort: UInt16) -> Socks5Association? {
        let a = Socks5Association(relay: self, peer: peer)
        if namedPort != 0 {
            let source = Endpoint(peer, namedPort)
            guard bySource[source] == nil else { return nil }
            a.source = source
            bySource[source] = a
        } else {
            unclaimed.append(a)
        }
        server.associationOpened()
        return a
    }

    func closed(_ a: Socks5Association) {
        if let s = a.source, bySource[s] === a { bySource[s] = nil }
        if let i = unclaimed.firstIndex(where: { $0 === a }) { unclaimed.remove(at: i) }
        server.associationClosed()
    }

    private func association(for source: Endpoint) -> Socks5Association? {
        if let a = bySource[source] { return a }
        guard let i = unclaimed.firstIndex(where: { $0.peer == source.address }) else { return nil }
        let a = unclaimed.remove(at: i)
        a.source = source
        bySource[source] = a
        return a
    }

    func handleIO(_ events: UInt32) {
        // Bounded per wake-up so a flood cannot starve the loop.
        for _ in 0..<64 {
            var from = SocketAddress()
            let n = from.withMutableSockaddr { recvfrom(fd, rx.baseAddress, rx.count, Int32(MSG_DONTWAIT), $0, $1) }
            if n < 0 { return }
            guard let source = from.endpoint, let a = association(for: source) else {
                server.countDrop(.foreignSource)
                continue
            }
            let datagram = UnsafeRawBufferPointer(rebasing: rx[0..<n])
            guard let frag = Socks5.UDPHeader.fragmentByte(datagram) else { server.countDrop(.malformed); continue }
            guard frag == 0 else { server.countDrop(.fragmented); continue }
            switch Socks5.UDPHeader.parse(datagram) {
            case .complete(let h, let length):
                a.forward(UnsafeRawBufferPointer(rebasing: datagram[length...]), to: h.destination)
            default:
                server.countDrop(.malformed)
            }
        }
    }

    /// A reply from `from` to the association's client: header + payload in one sendmsg.
    func sendToClient(_ a: Socks5Association, _ payload: UnsafeRawBufferPointer, from: Endpoint) {
        guard let client = a.source else { return }
        let hlen = Socks5.UDPHeader.write(source: .ip(from), to: header)
        var iov = (iovec(iov_base: header, iov_len: hlen),
                   iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress), iov_len: payload.count))
        let to = SocketAddress(client)
        let n = to.withSockaddr { sa, len -> Int in
            withUnsafeMutableBytes(of: &iov) { raw -> Int in
                var msg = msghdr()
                msg.msg_name = UnsafeMutableRawPointer(mutating: sa)
                msg.msg_namelen = len
                msg.msg_iov = raw.baseAddress!.assumingMemoryBound(to: iovec.self)
                msg.msg_iovlen = 2
                return sendmsg(fd, &msg, Int32(MSG_DONTWAIT))
            }
        }
        if n == hlen + payload.count {
            server.countUDP(down: payload.count)
        } else {
            server.countDrop(.clientSendFailed)
        }
    }

    func route(_ a: Socks5Association, to destination: Destination) -> DatagramAssociation? {
        let source = a.source ?? Endpoint(a.peer, 0)
        switch server.router.route(FlowRequest(network: .udp, source: source, destination: destination)).decision {
        case .drop:
            server.countDrop(.ruleDropped)
            return nil
        case .outbound(let o):
            guard let out = o.openAssociation(events: a) else {
                server.countDrop(.noOutbound)
                return nil
            }
            Log.debug("socks5.udp-route", ["client": source, "dst": destination, "outbound": o.name])
            return out
        }
    }

    func countUp(_ bytes: Int) { server.countUDP(up: bytes) }
    func countSendFailed() { server.countDrop(.sendFailed) }
}

/// One UDP ASSOCIATE: the client's datagrams to one outbound association (chosen by the
/// router for the first destination), its replies back to the client.
final class Socks5Association: DatagramEvents {
    unowned let relay: Socks5UDPRelay
    let peer: IPAddress
    var source: Endpoint?
    private var outbound: DatagramAssociation?
    private var closed = false

    init(relay: Socks5UDPRelay, peer: IPAddress) {
        self.relay = relay
        self.peer = peer
    }

    func forward(_ payload: UnsafeRawBufferPointer, to destination: Destination) {
        guard !closed else { return }
        if outbound == nil {
            outbound = relay.route(self, to: destination)
            guard outbound != nil else { return }
        }
        if outbound!.send(payload, to: destination) {
            relay.countUp(payload.count)
        } else {
            relay.countSendFailed()
        }
    }

    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {
        guard !closed else { return }
        relay.sendToClient(self, payload, from: from)
    }

    func close() {
        guard !closed else { return }
        closed = true
        outbound?.close()
        outbound = nil
        relay.closed(self)
    }
}
