import Glibc
import LoftCore
import LoftIO

// The tests' echo servers, on the test's loop: one TCP, one UDP.

/// A TCP echo on `address` (127.0.0.1 unless given) with real backpressure: reads only while its echo is written out,
/// answers EOF with the rest of the echo then a close, and notes resets.
public final class TCPEchoServer: IOHandler {
    public let loop: EventLoop
    public let fd: Int32
    public let port: UInt16
    public let endpoint: Endpoint
    fileprivate var clients: [Int32: EchoConnection] = [:]
    public private(set) var accepted = 0
    public fileprivate(set) var eofs = 0
    public fileprivate(set) var resets = 0
    public fileprivate(set) var closedClean = 0
    public fileprivate(set) var bytesIn = 0
    /// Largest echo waiting in one connection at once.
    public fileprivate(set) var maxPending = 0

    public init(loop: EventLoop, address: IPAddress = .v4(0x7F00_0001)) {
        self.loop = loop
        let s = Sockets.make(family: address.isIPv4 ? AF_INET : AF_INET6, type: Int32(SOCK_STREAM.rawValue))
        var one: Int32 = 1
        if !address.isIPv4 { setsockopt(s, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size)) }
        let addr = SocketAddress(Endpoint(address, 0))
        let r = addr.withSockaddr { bind(s, $0, $1) }
        precondition(r == 0, "bind \(address): errno \(errno)")
        listen(s, 64)
        fd = s
        port = Sockets.localEndpoint(s)!.port
        endpoint = Endpoint(address, port)
        loop.register(fd, IOEvents.readable, self)
    }

    public var open: Int { clients.count }

    public func handleIO(_ events: UInt32) {
        let c = accept(fd, nil, nil)
        guard c >= 0 else { return }
        _ = fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK)
        accepted += 1
        let client = EchoConnection(fd: c, server: self)
        clients[c] = client
        loop.register(c, IOEvents.readable, client)
    }

    deinit {
        for (c, _) in clients { loop.unregister(c); Glibc.close(c) }
        loop.unregister(fd)
        Glibc.close(fd)
    }
}

final class EchoConnection: IOHandler {
    let fd: Int32
    unowned let server: TCPEchoServer
    private var pending: [UInt8] = []
    private var gotEOF = false
    private var mask = IOEvents.readable
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    init(fd: Int32, server: TCPEchoServer) { self.fd = fd; self.server = server }

    func handleIO(_ events: UInt32) {
        if events & IOEvents.writable != 0 { flush() }
        guard server.clients[fd] === self else { return }
        if mask & IOEvents.readable != 0 && events & (IOEvents.readable | IOEvents.error | IOEvents.hangup) != 0 {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                server.bytesIn += n
                pending.append(contentsOf: buffer[0..<n])
                server.maxPending = max(server.maxPending, pending.count)
                flush()
            } else if n == 0 {
                server.eofs += 1
                gotEOF = true
                flush()
            } else if errno == ECONNRESET {
                server.resets += 1
                finish()
            } else if errno != EAGAIN {
                finish()
            }
        }
    }

    private func flush() {
        while !pending.isEmpty {
            let w = pending.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if w > 0 { pending.removeFirst(w); continue }
            if w < 0 && errno == EAGAIN { break }
            if w < 0 && errno == ECONNRESET { server.resets += 1 }
            finish()
            return
        }
        if pending.isEmpty && gotEOF {
            server.closedClean += 1
            finish()
            return
        }
        // Backpressure: no reading while the echo waits for the peer.
        let want = pending.isEmpty ? IOEvents.readable : IOEvents.writable
        if want != mask { mask = want; server.loop.modify(fd, want) }
    }

    private func finish() {
        guard server.clients[fd] === self else { return }
        server.clients[fd] = nil
        server.loop.unregister(fd)
        Glibc.close(fd)
    }
}

/// A UDP socket that sends every datagram back to its sender.
public final class UDPEchoServer: IOHandler {
    public let fd: Int32
    public let endpoint: Endpoint
    public let loop: EventLoop
    public private(set) var datagrams = 0
    public var port: UInt16 { endpoint.port }

    public init(loop: EventLoop, address: IPAddress = .v4(0x7F00_0001)) {
        self.loop = loop
        let s = Sockets.make(family: address.isIPv4 ? AF_INET : AF_INET6, type: Int32(SOCK_DGRAM.rawValue))
        let addr = SocketAddress(Endpoint(address, 0))
        let r = addr.withSockaddr { bind(s, $0, $1) }
        precondition(r == 0, "bind \(address): errno \(errno)")
        fd = s
        endpoint = Endpoint(address, Sockets.localEndpoint(s)!.port)
        loop.register(fd, IOEvents.readable, self)
    }

    public func handleIO(_ events: UInt32) {
        var buf = [UInt8](repeating: 0, count: 65536)
        var from = SocketAddress()
        let n = from.withMutableSockaddr { recvfrom(fd, &buf, buf.count, Int32(MSG_DONTWAIT), $0, $1) }
        guard n >= 0 else { return }
        datagrams += 1
        _ = from.withSockaddr { sendto(fd, buf, n, 0, $0, $1) }
    }

    deinit {
        loop.unregister(fd)
        Glibc.close(fd)
    }
}
