import LoftCore
import LoftFakeIP
import LoftIO

/// Names from DNS answers that pass through loft (docs/sniffing.md, "Names from DNS answers"):
/// an app's A or AAAA query to any server on UDP port 53 went out through an outbound, and the
/// answer's addresses are remembered with the name asked, for at least a minute and at most an
/// hour (the answer's TTL between), at most `capacity` addresses (the oldest go first). A new
/// flow to such an address is routed by that name where none was sniffed (source `dns`); it
/// is still dialled to its address (several names may share one).
final class DNSNames {
    static let capacity = 4096
    static let minimumMs: UInt64 = 60_000
    static let maximumMs: UInt64 = 3_600_000

    private var names: [IPAddress: (name: String, expires: UInt64)] = [:]
    /// Addresses in the order they were learned (a ring of `capacity`).
    private var order: [IPAddress] = []
    private var next = 0
    private(set) var learned: UInt64 = 0

    /// An answer from a DNS server, as the app gets it.
    func learn(_ payload: UnsafeRawBufferPointer, now: UInt64) {
        guard let q = DNSQuery.parse(payload, response: true), let name = q.name, q.qclass == 1,
              q.type == DNSQuery.typeA || q.type == DNSQuery.typeAAAA,
              case .addresses(let addresses, let ttl) = DNSWire.answer(payload, type: q.type == DNSQuery.typeA ? .a : .aaaa, id: q.id)
        else { return }
        let keep = min(max(UInt64(ttl) * 1000, Self.minimumMs), Self.maximumMs)
        for a in addresses {
            if names[a] == nil {
                if order.count < Self.capacity {
                    order.append(a)
                } else {
                    names[order[next]] = nil
                    order[next] = a
                    next = (next + 1) % Self.capacity
                }
            }
            names[a] = (name, now &+ keep)
            learned &+= 1
        }
    }

    func name(for address: IPAddress, now: UInt64) -> String? {
        guard let e = names[address], e.expires > now else { return nil }
        return e.name
    }
}
