import CLwIP
import LoftCore
import LoftFakeIP

/// Fake-IP DNS (docs/fakeip.md): the A and AAAA queries of apps behind the TUN or the bridge
/// for the names it selects are answered here with addresses from its pool; a flow to such an
/// address is routed by the name and dialled by the name, never at the address; a pool address
/// that stands for no name is refused (an RST to the SYN, ICMP port unreachable to a datagram).
public final class FakeIP {
    public private(set) var pool: FakeIPPool
    public let ttl: UInt32
    /// Whether a name gets a pool address (`names` minus `exclude`); others are answered by
    /// the real DNS, as are other query types.
    let selects: (String) -> Bool
    /// After a name was given addresses it had not (the runtime saves the mapping).
    public var changed: (() -> Void)?
    public private(set) var answers: UInt64 = 0
    public private(set) var refused: UInt64 = 0

    /// The pools, kept apart from the mapping: `covers` is asked per packet on the packet-mode input.
    let ipv4: IPPrefix?, ipv6: IPPrefix?

    public init(pool: FakeIPPool, ttl: UInt32, selects: @escaping (String) -> Bool) {
        self.pool = pool
        ipv4 = pool.ipv4
        ipv6 = pool.ipv6
        self.ttl = ttl
        self.selects = selects
    }

    /// Takes back a saved mapping (FakeIPPool.restore); the error, or nil.
    public func restore(_ text: String) -> String? { pool.restore(text) }

    /// The answer to a DNS query loft gives itself; nil: the query goes on to the real DNS.
    func answer(_ b: UnsafeRawBufferPointer) -> [UInt8]? {
        guard let q = DNSQuery.parse(b), q.qclass == 1, q.type == DNSQuery.typeA || q.type == DNSQuery.typeAAAA,
              let name = q.name, selects(name) else { return nil }
        let known = pool.knows(name)
        let addresses = pool.addresses(for: name)
        if !known { changed?() }
        answers &+= 1
        return DNSQuery.answer(b, query: q, addresses: addresses, ttl: ttl)
    }

    /// Whether `address` lies in a pool.
    @inline(__always)
    func covers(_ address: IPAddress) -> Bool {
        (ipv4?.contains(address) ?? false) || (ipv6?.contains(address) ?? false)
    }

    /// For a flow to `address`: nil when it is not a pool address; `.some(nil)` for a pool
    /// address that stands for no name (refused, counted).
    func lookup(_ address: IPAddress) -> String?? {
        guard covers(address) else { return nil }
        guard let name = pool.name(for: address) else {
            refused &+= 1
            return .some(nil)
        }
        return .some(name)
    }
}

extension Netstack {
    /// A DNS reply from `from` (the server the app asked) to the app.
    func answerDNS(_ reply: [UInt8], from: Endpoint, to app: Endpoint, netif: Int) {
        var f = clwip_endpoint(from), t = clwip_endpoint(app)
        reply.withUnsafeBytes { r in
            if clwip_udp_send(lwip, Int32(netif), &f, &t, r.baseAddress, UInt16(r.count)) != 0 { drop(.stackMemory, netif) }
        }
    }
}
