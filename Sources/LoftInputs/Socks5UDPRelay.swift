import Glibc
import LoftCore
import LoftIO

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
        _ = Syscall.setOption(s, SOL_SOCKET, SO_RCVBUF, 4 << 20)
        _ = Syscall.setOption(s, SOL_SOCKET, SO_SNDBUF, 4 << 20)
        if case .failure(let e) = Syscall.bind(s, to: SocketAddress(bound)) {
            _ = Syscall.close(s)
            throw Socks5Server.StartError(description: "socks5: cannot bind UDP \(bound): \(e)")
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
        _ = Syscall.close(fd)
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
            guard case .success(let n) = Syscall.recvfrom(fd, rx.baseAddress!, rx.count, flags: Int32(MSG_DONTWAIT), from: &from)
            else { return }
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
                guard case .success(let sent) = Syscall.sendmsg(fd, &msg, flags: Int32(MSG_DONTWAIT)) else { return -1 }
                return sent
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
