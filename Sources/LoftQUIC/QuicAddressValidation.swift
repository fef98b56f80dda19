import CNgtcp2
import Glibc
import LoftCore
import LoftIO

/// Client: the servers' NEW_TOKEN tokens (RFC 9000 §8.1.3), one per server address, each used
/// for one next connection so its Initial skips a Retry. At most 64 servers (the oldest goes).
/// On the loop only.
package enum QuicTokens {
    nonisolated(unsafe) private static var tokens: [Endpoint: [UInt8]] = [:]
    nonisolated(unsafe) private static var order: [Endpoint] = []

    package static func put(_ token: [UInt8], for server: SocketAddress) {
        guard let k = server.endpoint, !token.isEmpty, token.count <= 512 else { return }
        if tokens.updateValue(token, forKey: k) == nil {
            order.append(k)
            if order.count > 64 { tokens[order.removeFirst()] = nil }
        }
    }

    package static func take(for server: SocketAddress) -> [UInt8]? {
        guard let k = server.endpoint, let t = tokens.removeValue(forKey: k) else { return nil }
        order.removeAll { $0 == k }
        return t
    }
}

/// RFC 9000 §8.1's anti-amplification limit for one unvalidated client address: at most three
/// times the bytes received from it are sent to it.
package struct AmplificationLimit: Equatable {
    package init() {}

    package private(set) var received = 0
    package private(set) var sent = 0
    /// Packets refused.
    package private(set) var held = 0

    package mutating func received(_ n: Int) { received += n }

    /// A batch of `packets` datagrams of `segment` bytes (the last may be shorter), `bytes` in
    /// all: how many of them, from the first, may go now (whole packets only); those are
    /// counted as sent, the rest as held.
    package mutating func send(packets: Int, segment: Int, bytes: Int) -> Int {
        let allowed = max(0, 3 * received - sent)
        if bytes <= allowed {
            sent += bytes
            return packets
        }
        let fit = segment > 0 ? min(packets, allowed / segment) : 0
        held += packets - fit
        sent += fit * segment
        return fit
    }
}
