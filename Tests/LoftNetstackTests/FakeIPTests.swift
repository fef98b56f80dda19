import LoftCore
import LoftFakeIP
@testable import LoftNetstack
import XCTest

/// Fake-IP in the netstack (docs/fakeip.md): queries answered here, flows to pool addresses
/// dialled by name, an unknown pool address refused.
final class FakeIPNetstackTests: XCTestCase {
    let app = Endpoint(IPAddress("10.0.0.2")!, 40000)
    let dns = Endpoint(IPAddress("198.18.0.2")!, 53)

    func harness(_ exclude: String = "excluded.test") -> Harness {
        let h = Harness()
        let pool = FakeIPPool(ipv4: IPPrefix("198.19.0.0/24"), ipv6: IPPrefix("fd00:fa::/64"), maxEntries: 64)!
        h.netstack.fakeIP = FakeIP(pool: pool, ttl: 5, selects: { $0 != exclude })
        return h
    }

    /// A query for `name` of `type` (1: A, 28: AAAA).
    func query(_ name: String, type: UInt8 = 1, id: UInt8 = 7) -> [UInt8] {
        var q: [UInt8] = [0, id, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]
        for label in name.split(separator: ".") { q.append(UInt8(label.utf8.count)); q += Array(label.utf8) }
        return q + [0, 0, type, 0, 1]
    }

    /// The UDP payloads the stack wrote to the app, with their sources.
    func datagrams(_ h: Harness) -> [(from: Endpoint, payload: [UInt8])] {
        h.takePackets().compactMap { p in
            guard p[0] >> 4 == 4, p[9] == 17 else { return nil }
            let t = Int(p[0] & 0x0F) * 4
            let from = Endpoint(p.withUnsafeBytes { IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: $0[12..<16])) },
                                UInt16(p[t]) << 8 | UInt16(p[t + 1]))
            return (from, Array(p[(t + 8)...]))
        }
    }

    func testQueryAnsweredFromThePoolAndFlowsDialledByName() throws {
        let h = harness()
        defer { h.shutdown() }
        h.send(udpPacket(from: app, to: dns, payload: query("www.example.org")))
        let answers = datagrams(h)
        XCTAssertEqual(answers.count, 1)
        XCTAssertEqual(answers.first?.from, dns, "the answer comes from the server the app asked")
        let answer = try XCTUnwrap(answers.first?.payload)
        XCTAssertEqual(Array(answer.suffix(4)), [198, 19, 0, 1])
        XCTAssertEqual(h.outbound.associations.count, 0, "nothing went out")
        XCTAssertEqual(h.netstack.fakeIP?.answers, 1)

        // TCP to the address: the SYN is held, the outbound dialled by the name.
        var tcp = AppTCP(local: app, remote: Endpoint(IPAddress("198.19.0.1")!, 443))
        h.send(tcp.syn())
        XCTAssertEqual(h.outbound.streams.first?.destination, .domain("www.example.org", 443))
        XCTAssertEqual(h.router.requests.last?.name, "www.example.org")
        XCTAssertEqual(h.netstack.flowSnapshot().first?.nameSource, "fake-ip")

        // UDP to it: an association of its own, dialled by the name; replies from the real
        // server reach the app from the pool address.
        let fake = Endpoint(IPAddress("198.19.0.1")!, 443)
        h.send(udpPacket(from: Endpoint(app.address, 40001), to: fake, payload: [1, 2, 3]))
        let assoc = try XCTUnwrap(h.outbound.associations.last)
        XCTAssertEqual(assoc.sent.first?.to, .domain("www.example.org", 443))
        assoc.reply([9, 9], from: Endpoint(IPAddress("93.184.216.34")!, 443))
        h.turn()
        let back = datagrams(h)
        XCTAssertEqual(back.first?.from, fake)
        XCTAssertEqual(back.first?.payload, [9, 9])
    }

    func testExcludedNamesAndOtherTypesGoToTheRealDNS() {
        let h = harness()
        defer { h.shutdown() }
        h.send(udpPacket(from: app, to: dns, payload: query("excluded.test")))
        h.send(udpPacket(from: Endpoint(app.address, 40002), to: dns, payload: query("www.example.org", type: 16)))
        XCTAssertEqual(datagrams(h).count, 0)
        XCTAssertEqual(h.outbound.associations.flatMap(\.sent).count, 2, "both went to the real DNS")
        XCTAssertEqual(h.netstack.fakeIP?.answers, 0)
    }

    func testUnknownPoolAddressIsRefused() {
        let h = harness()
        defer { h.shutdown() }
        var tcp = AppTCP(local: app, remote: Endpoint(IPAddress("198.19.0.77")!, 443))
        h.send(tcp.syn())
        h.deliver(to: &tcp)
        XCTAssertTrue(tcp.rstReceived, "an RST to the SYN")
        XCTAssertEqual(h.outbound.streams.count, 0, "never dialled")
        h.send(udpPacket(from: app, to: Endpoint(IPAddress("198.19.0.78")!, 443), payload: [1]))
        XCTAssertEqual(h.outbound.associations.count, 0)
        let icmp = h.takePackets().filter { $0[9] == 1 }
        XCTAssertEqual(icmp.count, 1, "ICMP port unreachable")
        XCTAssertEqual(h.netstack.fakeIP?.refused, 2)
    }
}
