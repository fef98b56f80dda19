// Fake-IP DNS (docs/fakeip.md): a DNS query from an app through the TUN, as the netstack's
// FakeIP responder answers it (DNSQuery.parse / answer over a FakeIPPool of 4 names, so that
// names are evicted), the pool's file as restore() reads it (first byte odd), and (first byte
// 2 mod 4) a DNS server's answer as the netstack learns names from it (DNSNames: the question
// by DNSQuery.parse(response:), the addresses by c-ares). An answer is the query's id
// and question with QR set and one record per address of the asked family; a file that
// restores writes back to text that restores to the same mapping.
import LoftCore
import LoftFakeIP
@testable import LoftNetstack

nonisolated(unsafe) let fake = FakeIP(pool: FakeIPPool(ipv4: IPPrefix("198.19.0.0/29"), ipv6: IPPrefix("fd00:fa::/64"), maxEntries: 4)!,
                                      ttl: 5, selects: { !$0.hasSuffix(".excluded.test") })

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    guard let mode = p.first else { return 0 }
    let rest = UnsafeRawBufferPointer(rebasing: p[1...])
    if mode & 3 == 2 {
        let names = DNSNames()
        names.learn(rest, now: 0)
        if names.learned > 0 {
            guard let q = DNSQuery.parse(rest, response: true), q.name != nil else { fatalError("learned from what does not parse") }
        }
        return 0
    }
    if mode & 1 == 0 {
        guard let reply = fake.answer(rest) else { return 0 }
        guard let q = DNSQuery.parse(rest), let name = q.name else { fatalError("answered what does not parse") }
        let per = q.type == DNSQuery.typeA ? 16 : 28
        guard reply.count == q.questionEnd + per, reply[0] == rest[0], reply[1] == rest[1], reply[2] & 0x80 != 0,
              Array(reply[12..<q.questionEnd]) == Array(rest[12..<q.questionEnd]) else { fatalError("bad answer \(reply)") }
        let address = reply.suffix(per == 16 ? 4 : 16).withUnsafeBytes { per == 16 ? IPAddress(ipv4Bytes: $0) : IPAddress(ipv6Bytes: $0) }
        guard fake.pool.name(for: address) == name else { fatalError("\(address) does not stand for \(name)") }
        return 0
    }
    var pool = FakeIPPool(ipv4: IPPrefix("198.19.0.0/24"), ipv6: nil, maxEntries: 16)!
    let text = String(decoding: rest, as: UTF8.self)
    guard pool.restore(text) == nil else { return 0 }
    var again = FakeIPPool(ipv4: IPPrefix("198.19.0.0/24"), ipv6: nil, maxEntries: 16)!
    guard again.restore(pool.encoded()) == nil, again.encoded() == pool.encoded() else { fatalError("no round trip: \(text)") }
    return 0
}
