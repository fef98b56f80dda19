/// Why the SOCKS5 server discarded a UDP datagram.
public enum Socks5DropReason: Int, CaseIterable, Sendable, CustomStringConvertible {
    /// FRAG ≠ 0 (fragment reassembly is not offered).
    case fragmented
    /// From a source that is not the control connection's peer (IP, and port if one was named).
    case foreignSource
    /// Shorter than its header, or an unknown address type.
    case malformed
    /// The router's choice for the association's first destination was a drop rule.
    case ruleDropped
    /// The chosen outbound has no datagram service.
    case noOutbound
    /// The outbound could not send it.
    case sendFailed
    /// A reply that could not be sent to the client (socket buffer full, too large).
    case clientSendFailed

    public var description: String {
        switch self {
        case .fragmented: return "fragmented"
        case .foreignSource: return "foreign-source"
        case .malformed: return "malformed"
        case .ruleDropped: return "rule"
        case .noOutbound: return "no-outbound"
        case .sendFailed: return "send-failed"
        case .clientSendFailed: return "client-send-failed"
        }
    }
}

/// The SOCKS5 server's counters: plain integers on the loop thread, read by status and metrics.
/// "Up" is client → destination, "down" destination → client.
public struct Socks5Counters: Sendable {
    /// `socks5.max-clients`.
    public var maxClients: Int = 0
    /// TCP clients open now, in any phase (handshake, CONNECT relay, UDP control).
    public var openClients: Int = 0
    public var clientsAccepted: UInt64 = 0
    /// Clients closed at accept because `openClients` was at `maxClients` and every one of
    /// them was past its handshake.
    public var refusedAtLimit: UInt64 = 0
    /// Clients still in their handshake closed to make room for a new one at `maxClients`.
    public var evictedInHandshake: UInt64 = 0
    /// Greeting + request not complete within the handshake deadline.
    public var handshakeTimeouts: UInt64 = 0
    /// CONNECTs answered 0x06 because the outbound did not connect within connect-timeout.
    public var connectTimeouts: UInt64 = 0
    /// Greetings without method 0x00 (answered 0xFF).
    public var methodRejected: UInt64 = 0
    /// Greetings or requests whose VER was not 5 (closed without a reply).
    public var badVersion: UInt64 = 0
    /// Replies sent, indexed by REP code (0x00...0x08).
    public var replies = [UInt64](repeating: 0, count: Socks5.ReplyCode.allCases.count)
    /// CONNECT relays that ended: gracefully (both FINs) and by reset (either side).
    public var relaysClosed: UInt64 = 0
    public var relaysReset: UInt64 = 0
    /// Relays closed by tcp-idle-timeout.
    public var idleClosed: UInt64 = 0
    public var tcpBytesUp: UInt64 = 0
    public var tcpBytesDown: UInt64 = 0

    /// UDP associations alive now (one per UDP ASSOCIATE control connection).
    public var activeAssociations: Int = 0
    public var associationsOpened: UInt64 = 0
    public var udpPacketsUp: UInt64 = 0
    public var udpPacketsDown: UInt64 = 0
    /// Payload bytes (without the SOCKS5 UDP header).
    public var udpBytesUp: UInt64 = 0
    public var udpBytesDown: UInt64 = 0
    public var udpDrops = [UInt64](repeating: 0, count: Socks5DropReason.allCases.count)

    public init() {}

    public func replied(_ code: Socks5.ReplyCode) -> UInt64 { replies[Int(code.rawValue)] }
    public func dropped(_ reason: Socks5DropReason) -> UInt64 { udpDrops[reason.rawValue] }
    public var totalUDPDrops: UInt64 { udpDrops.reduce(0, +) }
}
