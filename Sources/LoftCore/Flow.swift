import Glibc

/// Where a flow wants to go: an address, or a name the outbound resolves.
public enum Destination: Hashable, Sendable, CustomStringConvertible {
    case ip(Endpoint)
    case domain(String, UInt16)

    public var port: UInt16 {
        switch self { case .ip(let e): return e.port; case .domain(_, let p): return p }
    }
    public var description: String {
        switch self {
        case .ip(let e): return e.description
        case .domain(let n, let p): return "\(n):\(p)"
        }
    }
}

public enum FlowNetwork: String, Sendable { case tcp, udp, icmp }

/// Why an outbound could not carry a flow; inputs map it to their own signal (an RST or ICMP
/// unreachable for TUN flows, a SOCKS5 reply code).
public enum FlowFailure: Error, Sendable, Equatable, CustomStringConvertible {
    case refused, hostUnreachable, networkUnreachable, timedOut, notAllowed, resolveFailed
    case other(Int32)

    public init(errno e: Int32) {
        switch e {
        case ECONNREFUSED: self = .refused
        case EHOSTUNREACH, EHOSTDOWN: self = .hostUnreachable
        case ENETUNREACH, ENETDOWN, EADDRNOTAVAIL: self = .networkUnreachable
        case ETIMEDOUT: self = .timedOut
        case EACCES, EPERM: self = .notAllowed
        default: self = .other(e)
        }
    }

    public var description: String {
        switch self {
        case .refused: return "refused"
        case .hostUnreachable: return "host-unreachable"
        case .networkUnreachable: return "network-unreachable"
        case .timedOut: return "timed-out"
        case .notAllowed: return "not-allowed"
        case .resolveFailed: return "resolve-failed"
        case .other(let e): return "errno-\(e)"
        }
    }
}

public enum StreamReadResult: Equatable {
    case data(Int)
    case wouldBlock
    case eof
    case failed(FlowFailure)
}

/// What a byte stream tells whoever drives it (the splice, or an input while it connects).
/// All calls come on the loop thread, never from inside a call the driver made on the stream.
/// Each names the stream it comes from, so one driver can take the events of both its ends.
public protocol ByteStreamEvents: AnyObject {
    /// The remote end accepted the connection.
    func streamConnected(_ stream: ByteStream)
    /// The stream broke: connecting failed, the peer reset, or an error. The stream is finished;
    /// nothing more comes from it and the driver need not close it. Arrives whether or not
    /// reads are wanted, exactly once.
    func streamFailed(_ stream: ByteStream, _ failure: FlowFailure)
    /// Data or EOF can be read now (only while read interest is on).
    func streamReadable(_ stream: ByteStream)
    /// Earlier writes drained; write() accepts bytes again.
    func streamWritable(_ stream: ByteStream)
}

/// One end of a TCP-like byte stream: the lwIP flow towards an app, a SOCKS5 client socket,
/// an outbound's socket, a holder stream, a front session's stream. Every relay joins two of
/// them with the one `Splice` (LoftIO); no end knows what is on the other side.
///
/// Contract:
/// - Reads are pulled: `read(into:)` (or `peek`/`consume` for ends that hold bytes already)
///   while `setReadInterest(true)`; with interest off the end sends no `streamReadable`, and
///   an end whose peer hangs up or resets meanwhile must not wake the loop repeatedly for it
///   (a reset is one `streamFailed`; a clean hang-up waits until reads are wanted again).
/// - Writes take what fits now and return the count (0: full, `streamWritable` follows), or
///   -1 when the stream is broken. `writeRoom` says how much the next write would take.
/// - `shutdownWrite` sends EOF after the bytes written; `close` ends both directions
///   gracefully; `reset` ends them abortively (the peer sees a reset).
public protocol ByteStream: AnyObject {
    var events: ByteStreamEvents? { get set }
    /// Bytes the next `write` would take at least (Int.max: not known; write and see).
    var writeRoom: Int { get }
    /// Bytes written to this end that it still holds in loft's memory: not sent yet, or sent
    /// and not acknowledged (0: none, or they sit in a kernel buffer). A flow budget counts
    /// them (docs/vless.md).
    var heldBytes: Int { get }
    /// Takes as many bytes as it can now from the segments; returns the count (0: full, wait
    /// for streamWritable), or -1 when the connection is broken.
    func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult
    /// Zero-copy reads, for ends that already hold the bytes in memory (lwIP's pbufs): up to
    /// `max` iovecs over readable bytes, left in place until `consume(_:)`. `.data(n)`: n bytes
    /// in `count` iovecs. nil: this end supports only `read(into:)`.
    func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult?
    /// Drops `n` bytes from the front of what `peek` showed.
    func consume(_ n: Int)
    /// Writes in place, for ends that keep what they are given in a buffer of their own (a
    /// QUIC stream's send ring): up to `max` bytes of its free space, in one piece, for the
    /// caller to fill (a socket read straight into it) and then hand over with
    /// `commitWrite(_:)`. Empty: full now (streamWritable follows). nil: this end supports
    /// only `write`.
    func writeSpace(max: Int) -> UnsafeMutableRawBufferPointer?
    /// The first `n` bytes of the space `writeSpace` gave are written.
    func commitWrite(_ n: Int)
    /// Asks for one `streamWritable` once the peer has taken (acknowledged) some of the bytes
    /// written here, even if no write was refused: a flow budget that stopped the other end's
    /// reads looks again then. An end that holds no such bytes ignores it.
    func notifyWhenTaken()
    /// Backpressure towards the peer: while off, no streamReadable arrives.
    func setReadInterest(_ on: Bool)
    /// Half-close: no more bytes from this side.
    func shutdownWrite()
    /// A `close` once the peer's EOF is read sends this side's end itself (a socket's FIN), so
    /// a driver that closes right after may leave `shutdownWrite` out.
    var closeSendsEnd: Bool { get }
    /// Graceful close of both directions.
    func close()
    /// Abortive close (the remote sees a reset).
    func reset()
}

extension ByteStream {
    public var writeRoom: Int { Int.max }
    public var heldBytes: Int { 0 }
    public func notifyWhenTaken() {}
    public func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? { nil }
    public func consume(_ n: Int) {}
    public func writeSpace(max: Int) -> UnsafeMutableRawBufferPointer? { nil }
    public func commitWrite(_ n: Int) {}
    public var closeSendsEnd: Bool { false }
}

/// Replies for one UDP association.
public protocol DatagramEvents: AnyObject {
    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint)
    /// `remote` answered a datagram with ICMP port unreachable (the app can be told).
    func datagramRefused(by remote: Endpoint)
}

extension DatagramEvents {
    public func datagramRefused(by remote: Endpoint) {}
}

/// The outbound half of one UDP association (one app source endpoint, any remotes).
public protocol DatagramAssociation: AnyObject {
    var events: DatagramEvents? { get set }
    /// Sends one datagram; false when it had to be dropped.
    @discardableResult
    func send(_ payload: UnsafeRawBufferPointer, to: Destination) -> Bool
    func close()
}

public protocol Outbound: AnyObject {
    var name: String { get }
    /// Its row for `loft status` now: its own counts of what it carried, whichever input the
    /// flows came from.
    var status: OutboundStatus { get }
    func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream
    func openAssociation(events: DatagramEvents) -> DatagramAssociation?
    /// Whether a TUN or bridge flow whose name was sniffed is opened to that name (the far end,
    /// or this outbound, resolves it) rather than to the app's address (docs/sniffing.md).
    var dialsSniffedNames: Bool { get }
}

extension Outbound {
    public var dialsSniffedNames: Bool { false }
}

/// An outbound that carries IP packets, not streams (SSTP's PPP link). TUN flows routed to it
/// pass through the netstack unterminated: the router is asked on a flow's first packet, and
/// the flow's packets then go to `sendPacket` as they are (docs/sstp.md).
public protocol PacketOutbound: Outbound {
    /// One IP packet from the app; false when it was not taken (the link is down or full, the
    /// packet too large), which the outbound counts.
    func sendPacket(_ packet: UnsafeRawBufferPointer) -> Bool
    /// Whether a new flow routed here passes as packets now. False while the link is down and
    /// `hold` is off: the flow then goes through lwIP like any stream outbound's, and the
    /// outbound's `openStream`/`openAssociation` hand it to its fallback (direct). With `hold`
    /// it stays true: the flow's packets are refused (and counted) by `sendPacket`.
    var takesNewFlows: Bool { get }
    /// The largest IP packet the link carries now (sstp: the server's MRU, at most 4087). A
    /// packet flow's TCP segments are cut to it and its SYNs' MSS lowered to fit; a larger IPv4
    /// datagram is fragmented (or, with DF, answered with ICMP fragmentation-needed).
    var linkMTU: Int { get }
}

extension PacketOutbound {
    public var takesNewFlows: Bool { true }
    public var linkMTU: Int { 65535 }
}

/// TCP connections loft opens itself over a packet outbound's link, so that streams routed to
/// it (SOCKS5 CONNECT, the bridge's TCP) work too: the netstack's side (`NetstackLink`), held
/// by the outbound (docs/sstp.md).
public protocol PacketLinkStack: AnyObject {
    /// Opens a TCP connection from `address` (the link's own) to `destination`; its packets go
    /// to the outbound's `sendPacket`. nil when it cannot be opened (IPv6, no free port).
    func openStream(from address: IPAddress, to destination: Endpoint, events: ByteStreamEvents) -> ByteStream?
    /// A UDP association from `address` and a local port of its own: datagrams to any remote,
    /// replies from any remote (full cone). nil when it cannot be opened.
    func openAssociation(from address: IPAddress, events: DatagramEvents) -> DatagramAssociation?
    /// A packet from the link for the link's address: true when it belongs to a connection
    /// opened here (then it is taken), false when it is the TUN's.
    func takePacket(_ packet: UnsafeRawBufferPointer) -> Bool
    /// The link is gone (or has another address): every open connection fails.
    func linkDown()
    /// The link's MTU (the server's MRU) for connections opened from now on.
    func setMTU(_ mtu: Int)
    /// Connections open now.
    var connectionCount: Int { get }
}

public struct FlowRequest: Sendable {
    public var network: FlowNetwork
    public var source: Endpoint
    public var destination: Destination
    /// A name for an address destination (sniffed from the flow's first bytes): `domains`
    /// rules match it, address rules the address.
    public var name: String?
    public init(network: FlowNetwork, source: Endpoint, destination: Destination, name: String? = nil) {
        self.network = network; self.source = source; self.destination = destination; self.name = name
    }
}

public enum RouteDecision {
    case outbound(Outbound)
    /// Discard inside the stack; `reset` answers a TCP SYN with RST instead of silence.
    case drop(reset: Bool)
}

/// A route and the rule that decided it.
public struct RouteMatch {
    public var decision: RouteDecision
    /// The index of the deciding rule, -1 for the default (for per-rule accounting).
    public var rule: Int
    public init(_ decision: RouteDecision, rule: Int) { self.decision = decision; self.rule = rule }
}

/// Chooses the outbound for each new flow (the router implements it).
public protocol FlowRouter: AnyObject {
    func route(_ request: FlowRequest) -> RouteMatch
    /// Whether a name for `request` (an address destination) could make `route` decide
    /// otherwise than the address alone: a rule with `domains` comes before the first rule the
    /// address matches. Not counted as a match.
    func nameMayDecide(_ request: FlowRequest) -> Bool
}

extension FlowRouter {
    public func nameMayDecide(_ request: FlowRequest) -> Bool { false }
}
