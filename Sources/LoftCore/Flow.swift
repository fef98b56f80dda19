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

/// What the outbound half of a TCP flow tells the input half. All calls come on the loop thread.
public protocol StreamEvents: AnyObject {
    /// The remote end accepted the connection.
    func streamConnected()
    /// Connecting failed; the connection object is finished.
    func streamFailed(_ failure: FlowFailure)
    /// Data, EOF or an error can be read now.
    func streamReadable()
    /// Earlier writes drained; write() accepts bytes again.
    func streamWritable()
}

/// The outbound half of one TCP flow (one per flow: a socket, or a stream in a session).
public protocol StreamConnection: AnyObject {
    var events: StreamEvents? { get set }
    /// Takes as many bytes as it can now from the segments; returns the count (0: full, wait
    /// for streamWritable), or -1 when the connection is broken.
    func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult
    /// Backpressure towards the remote: while off, no streamReadable arrives.
    func setReadInterest(_ on: Bool)
    /// Half-close: no more bytes from the app.
    func shutdownWrite()
    /// Graceful close of both directions.
    func close()
    /// Abortive close (the remote sees a reset).
    func reset()
}

/// Replies for one UDP association.
public protocol DatagramEvents: AnyObject {
    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint)
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
    func openStream(to destination: Destination, events: StreamEvents) -> StreamConnection
    func openAssociation(events: DatagramEvents) -> DatagramAssociation?
}

public struct FlowRequest: Sendable {
    public var network: FlowNetwork
    public var source: Endpoint
    public var destination: Destination
    public init(network: FlowNetwork, source: Endpoint, destination: Destination) {
        self.network = network; self.source = source; self.destination = destination
    }
}

public enum RouteDecision {
    case outbound(Outbound)
    /// Discard inside the stack; `reset` answers a TCP SYN with RST instead of silence.
    case drop(reset: Bool)
}

/// Chooses the outbound for each new flow (the router implements it).
public protocol FlowRouter: AnyObject {
    func route(_ request: FlowRequest) -> RouteDecision
    /// Which rule decided the last route() call (-1: the default), for per-rule accounting.
    var lastMatch: Int { get }
}
