/// Why a carrier ended. A carrier closed with `close()` or `abort()` by its own embedder reports
/// nothing.
public enum CarrierCloseReason: Sendable, Equatable, CustomStringConvertible {
    /// The peer ended the channel cleanly (ws Close 1000/1001 or none; get: the last chunk; h2:
    /// END_STREAM).
    case closed
    /// ws: the peer closed with another code.
    case peerClosed(code: UInt16, reason: String)
    /// The peer broke RFC 6455, HTTP/1.1 or HTTP/2; it was told (close code, 4xx, GOAWAY) when
    /// possible.
    case protocolError(String)
    /// Client: the server refused the handshake (its HTTP status, or 0 when it was not HTTP).
    case rejected(status: Int, String)
    /// TLS failed: handshake, certificate verification, pin, or a record error later.
    case tls(String)
    /// Client: no TCP connection (refused, unreachable, no address for the name).
    case connectFailed(String)
    /// A deadline passed: connect, handshake, join or close.
    case timeout(String)
    /// The connection broke without a proper end (reset, EOF without Close or last chunk).
    case io(String)

    public var description: String {
        switch self {
        case .closed: return "closed"
        case .peerClosed(let c, let r): return "peer closed \(c)\(r.isEmpty ? "" : " \(r)")"
        case .protocolError(let s): return "protocol error: \(s)"
        case .rejected(let st, let s): return st > 0 ? "rejected \(st): \(s)" : "rejected: \(s)"
        case .tls(let s): return "tls: \(s)"
        case .connectFailed(let s): return "connect failed: \(s)"
        case .timeout(let s): return "timeout: \(s)"
        case .io(let s): return "io: \(s)"
        }
    }
}
