import Glibc
import LoftCore
import LoftIO

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
        let n: Int
        switch Syscall.recv(fd, buf + handshakeCount, room) {
        case .success(let count): n = count
        case .failure(let e):
            if e.wouldBlock { return }
            close(graceful: false)
            return
        }
        if n == 0 { close(graceful: true); return }
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
        let sent = bytes.withUnsafeBytes { Syscall.send(fd, $0.baseAddress!, $0.count, flags: Int32(MSG_NOSIGNAL)) }
        if case .success(bytes.count) = sent { return true }
        close(graceful: false)
        return false
    }

    private func reply(_ code: Socks5.ReplyCode, bound: Endpoint = Socks5.unspecifiedBound) {
        server.count(reply: code)
        var storage = (UInt64(0), UInt64(0), UInt64(0))
        let n = withUnsafeMutableBytes(of: &storage) { raw -> Int in
            let len = Socks5.writeReply(code, bound: bound, to: raw.baseAddress!)
            guard case .success(len) = Syscall.send(fd, raw.baseAddress!, len, flags: Int32(MSG_NOSIGNAL)) else { return -1 }
            return len
        }
        if n < 0 { Log.debug("socks5.reply-failed", ["client": peer]) }
    }

    /// After an error reply: FIN, then read and discard until the client closes or lingerMs
    /// passes, so the reply is read before any reset.
    private func linger() {
        guard phase != .closed else { return }
        splice = nil
        phase = .lingering
        _ = Syscall.shutdown(fd, Int32(SHUT_WR))
        handshake?.deallocate()
        handshake = nil
        handshakeCount = 0
        setDeadline(after: server.options.lingerMs)
        setMask(IOEvents.readable)
    }

    private func discardInput() {
        for _ in 0..<8 {
            switch Syscall.recv(fd, server.scratch.baseAddress!, server.scratch.count) {
            case .success(let n) where n > 0: continue
            case .success: close(graceful: true)
            case .failure(let e):
                if e.wouldBlock { return }
                close(graceful: false)
            }
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
        if !graceful { Syscall.setLingerReset(fd) }
        _ = Syscall.close(fd)
    }
}
