import Glibc
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
        _ = Syscall.setOption(s, SOL_SOCKET, SO_REUSEADDR, 1)
        if case .failure(let e) = Syscall.bind(s, to: SocketAddress(options.listen)) {
            _ = Syscall.close(s)
            throw StartError(description: "socks5: cannot bind TCP \(options.listen): \(e)")
        }
        if case .failure(let e) = Syscall.listen(s, backlog: 4096) {
            _ = Syscall.close(s)
            throw StartError(description: "socks5: listen on \(options.listen): \(e)")
        }
        bound = Sockets.localEndpoint(s) ?? options.listen
        let relay: Socks5UDPRelay
        do {
            relay = try Socks5UDPRelay(server: self, bound: bound)
        } catch {
            _ = Syscall.close(s)
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
        _ = Syscall.close(listenFD)
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
            // accept4: nonblocking and close-on-exec from the start (EINTR retried inside).
            let accepted = Syscall.accept(listenFD, peer: &peer)
            guard case .success(let fd) = accepted else {
                guard case .failure(let failure) = accepted else { return }
                let e = failure.code
                if e == ECONNABORTED { continue }
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
                Syscall.setLingerReset(fd)
                _ = Syscall.close(fd)
                if loop.now >= lastLimitLog + 1000 {
                    lastLimitLog = loop.now
                    Log.info("socks5.limit", ["max-clients": options.maxClients, "refused": tally.refusedAtLimit])
                }
                continue
            }
            Syscall.setNoDelay(fd)
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
