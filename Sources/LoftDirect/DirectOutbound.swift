import Glibc
import LoftCore
import LoftIO

/// Dials every flow from the host with nonblocking sockets. loft's own sockets live in loft's
/// namespace (the host), never inside a TUN namespace, so nothing loops back into the TUN.
public final class DirectOutbound: Outbound {
    public let name: String
    let loop: EventLoop
    let resolver: Resolver?
    /// Which addresses a name may resolve to (nil: any). A name whose addresses all fail it
    /// gives a stream `.notAllowed`, and a datagram is dropped. loft-front applies here the
    /// check it makes on the addresses a client names itself.
    let allowResolved: ((IPAddress) -> Bool)?
    /// A sniffed name is resolved here and dialled (`sniff.direct-resolve`); otherwise the
    /// app's address is kept.
    let resolvesSniffedNames: Bool
    public var dialsSniffedNames: Bool { resolvesSniffedNames }

    public init(name: String = "direct", loop: EventLoop, resolver: Resolver? = nil,
                allowResolved: ((IPAddress) -> Bool)? = nil, resolvesSniffedNames: Bool = false) {
        self.name = name
        self.resolvesSniffedNames = resolvesSniffedNames
        self.loop = loop
        self.resolver = resolver
        self.allowResolved = allowResolved
    }

    /// Flows and bytes this outbound carried, whichever input they came from (TUN, bridge,
    /// SOCKS5): counted at its own sockets, as a holder counts its streams.
    public struct Usage: Sendable {
        public var flows: UInt64 = 0
        public var liveFlows = 0
        public var bytesUp: UInt64 = 0
        public var bytesDown: UInt64 = 0
        /// Datagrams a destination answered with ICMP port unreachable.
        public var refusedDatagrams: UInt64 = 0
    }

    /// The streams' counts, kept at their sockets.
    let streamMeter = StreamMeter()
    /// The associations' counts (one loop thread).
    final class Meter {
        var usage = Usage()
    }
    let meter = Meter()

    public var usage: Usage {
        var u = meter.usage
        u.flows &+= streamMeter.streams
        u.liveFlows += streamMeter.live
        u.bytesUp &+= streamMeter.bytesWritten
        u.bytesDown &+= streamMeter.bytesRead
        return u
    }

    /// Its `loft status` row from `usage`; always ready (it dials per flow, nothing to keep up).
    public var status: OutboundStatus {
        let u = usage
        var s = OutboundStatus(name: name, type: "direct", state: "ready")
        s.flows = u.flows; s.liveFlows = u.liveFlows; s.bytesUp = u.bytesUp; s.bytesDown = u.bytesDown
        s.extra = [("udp-port-unreachable", u.refusedDatagrams)]
        return s
    }

    public func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream {
        let stream = SocketStream(loop: loop, events: events, meter: streamMeter)
        switch destination {
        case .ip(let endpoint):
            stream.connect(endpoint)
        case .domain(let name, let port):
            guard let resolver else {
                stream.failSoon(.resolveFailed)
                break
            }
            stream.resolving = resolver.resolve(name, port: port, allow: allowResolved) { [weak stream] resolved in
                switch resolved {
                case .success(let endpoint): stream?.connect(endpoint)
                case .failure(let failure): stream?.failSoon(failure)
                }
            }
        }
        return stream
    }

    public func openAssociation(events: DatagramEvents) -> DatagramAssociation? {
        DirectAssociation(outbound: self, events: events)
    }
}

/// One UDP association: an unconnected socket per address family, opened on first use, so
/// replies from any remote come back (endpoint-independent mapping).
final class DirectAssociation: DatagramAssociation, IOHandler {
    weak var events: DatagramEvents?
    private let loop: EventLoop
    private let resolver: Resolver?
    private var v4: Int32 = -1
    private var v6: Int32 = -1
    private var closed = false
    private let meter: DirectOutbound.Meter
    private let outbound: DirectOutbound
    /// Names being resolved for datagrams; cancelled at close.
    var resolving: [ResolveRequest] = []
    // Shared receive buffer: one loop thread, and each datagram is delivered before the next read.
    nonisolated(unsafe) private static let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)

    init(outbound: DirectOutbound, events: DatagramEvents) {
        self.outbound = outbound
        loop = outbound.loop
        self.events = events
        resolver = outbound.resolver
        meter = outbound.meter
        meter.usage.flows &+= 1
        meter.usage.liveFlows += 1
    }

    private func socketFor(_ e: Endpoint) -> Int32 {
        if e.address.isIPv4 {
            if v4 < 0 { v4 = open(AF_INET) }
            return v4
        }
        if v6 < 0 { v6 = open(AF_INET6) }
        return v6
    }

    private func open(_ family: Int32) -> Int32 {
        let s = Sockets.make(family: family, type: Int32(SOCK_DGRAM.rawValue))
        guard s >= 0 else { return -1 }
        if family == AF_INET6 {
            _ = Syscall.setOption(s, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1)
        }
        // ICMP errors (a destination's port unreachable) come back on the error queue.
        Syscall.receiveUDPErrors(s, family: family)
        loop.register(s, IOEvents.readable, self)
        return s
    }

    @discardableResult
    func send(_ payload: UnsafeRawBufferPointer, to destination: Destination) -> Bool {
        guard !closed else { return false }
        switch destination {
        case .ip(let e):
            let s = socketFor(e)
            guard s >= 0 else { return false }
            guard case .success(let n) = Syscall.sendto(s, payload.baseAddress!, payload.count, to: SocketAddress(e)),
                  n == payload.count else { return false }
            meter.usage.bytesUp &+= UInt64(n)
            return true
        case .domain(let name, let port):
            guard let resolver else { return false }
            let copy = Array(payload)
            resolving.removeAll { !$0.isPending }
            resolving.append(resolver.resolve(name, port: port, allow: outbound.allowResolved) { [weak self] resolved in
                guard let self, case .success(let endpoint) = resolved else { return }
                copy.withUnsafeBytes { _ = self.send($0, to: .ip(endpoint)) }
            })
            return true
        }
    }

    func handleIO(_ ev: UInt32) {
        if ev & IOEvents.error != 0 {
            if v4 >= 0 { readErrors(v4) }
            if v6 >= 0 && !closed { readErrors(v6) }
            if closed { return }
        }
        if v4 >= 0 { receive(v4) }
        if v6 >= 0 && !closed { receive(v6) }
    }

    /// Empties the socket's error queue (EPOLLERR stays up while it holds anything): each
    /// port unreachable goes to the app's side.
    private func readErrors(_ s: Int32) {
        for _ in 0..<64 {
            var to = SocketAddress()
            let err = Syscall.readUDPError(s, to: &to)
            if err == 0 { return }
            if err == ECONNREFUSED, let ep = to.endpoint {
                meter.usage.refusedDatagrams &+= 1
                events?.datagramRefused(by: ep)
                if closed { return }
            }
        }
    }

    private func receive(_ s: Int32) {
        // Bounded per wake-up so one busy association cannot starve the loop.
        reading: for _ in 0..<64 {
            var from = SocketAddress()
            let n: Int
            switch Syscall.recvfrom(s, Self.buffer.baseAddress!, Self.buffer.count, flags: Int32(MSG_DONTWAIT), from: &from) {
            case .success(let count): n = count
            case .failure(let e):
                // The error the queue also holds (read by readErrors): more may follow it.
                if e.code == ECONNREFUSED { continue }
                break reading
            }
            guard let ep = from.endpoint else { continue }
            meter.usage.bytesDown &+= UInt64(n)
            events?.datagramReceived(UnsafeRawBufferPointer(rebasing: Self.buffer[0..<n]), from: ep)
            if closed { return }
        }
    }

    func close() {
        if !closed { meter.usage.liveFlows -= 1 }
        closed = true
        for r in resolving { r.cancel() }
        resolving.removeAll()
        for s in [v4, v6] where s >= 0 {
            loop.unregister(s)
            _ = Syscall.close(s)
        }
        v4 = -1; v6 = -1
    }

    deinit { if !closed { close() } }
}

/// Refuses every flow: the `drop` outbound.
public final class DropOutbound: Outbound {
    public let name: String
    let loop: EventLoop
    /// TCP flows refused, from any input (UDP associations are refused before they exist).
    public private(set) var refusedFlows: UInt64 = 0
    public init(name: String = "drop", loop: EventLoop) { self.name = name; self.loop = loop }
    /// Its `loft status` row: the flows it refused; it never carries a byte.
    public var status: OutboundStatus {
        var s = OutboundStatus(name: name, type: "drop", state: "ready")
        s.flows = refusedFlows
        return s
    }
    public func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream {
        refusedFlows &+= 1
        let s = SocketStream(loop: loop, events: events, meter: nil)
        s.failSoon(.notAllowed)
        return s
    }
    public func openAssociation(events: DatagramEvents) -> DatagramAssociation? { nil }
}
