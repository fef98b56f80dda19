import CAres
import LoftCore

/// DNS messages for lookups loft sends itself over a link (sstp: SOCKS5 names resolved through
/// the DNS servers IPCP gave, over a UDP association on the PPP link). The query is built and
/// the answer parsed by c-ares (`ares_create_query`, `ares_parse_a_reply` /
/// `ares_parse_aaaa_reply`), the same library as the loop's `Resolver`.
public enum DNSWire {
    public enum RecordType: Int32, Sendable { case a = 1, aaaa = 28 }

    public enum Answer: Equatable, Sendable {
        /// The addresses (at most 32), and the smallest TTL in seconds.
        case addresses([IPAddress], ttl: Int)
        /// No such name, or no records of the type.
        case notFound
        /// Not a usable answer (malformed, truncated, another id).
        case malformed
    }

    /// A query for `name` (recursion desired), or nil for a name DNS cannot carry.
    public static func query(_ name: String, type: RecordType, id: UInt16) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: 512)
        let n = out.withUnsafeMutableBufferPointer { cares_make_query(name, type.rawValue, id, $0.baseAddress, Int32($0.count)) }
        return n > 12 ? Array(out[0..<Int(n)]) : nil
    }

    /// The answer to the query with `id` and `type`.
    public static func answer(_ bytes: UnsafeRawBufferPointer, type: RecordType, id: UInt16) -> Answer {
        guard bytes.count >= 12, bytes.count <= 65535, UInt16(bytes[0]) << 8 | UInt16(bytes[1]) == id,
              bytes[2] & 0x80 != 0 else { return .malformed }
        var found = [cares_address](repeating: cares_address(), count: 32)
        var ttl: Int32 = -1
        let n = found.withUnsafeMutableBufferPointer { out in
            cares_parse_answer(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(bytes.count), type.rawValue,
                               out.baseAddress, Int32(out.count), &ttl)
        }
        if n == -Int32(CARES_RESULT_NOT_FOUND) { return .notFound }
        guard n > 0, n <= 32 else { return .malformed }
        let addresses = found[0..<Int(n)].map { a -> IPAddress in
            withUnsafeBytes(of: a.bytes) { b in
                a.family == 4 ? IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: b[0..<4]))
                              : IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: b[0..<16]))
            }
        }
        return .addresses(addresses, ttl: Int(max(0, ttl)))
    }
}
