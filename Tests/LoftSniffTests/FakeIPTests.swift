import XCTest
import LoftCore
@testable import LoftFakeIP

/// Fake-IP's DNS codec and pool (docs/fakeip.md).
final class FakeIPTests: XCTestCase {
    /// `dig @198.18.0.2 www.example.org A` (dig 9.18: RD, AD, an EDNS OPT record with a cookie).
    static let digQuery = StreamSnifferTests.hex(
        "a1b20120000100000000000103777777076578616d706c65036f72670000010001"
            + "00002904d000000000000c000a0008f1e2d3c4b5a69788")

    func testQueryAndAnswer() throws {
        let q = try XCTUnwrap(Self.digQuery.withUnsafeBytes { DNSQuery.parse($0) })
        XCTAssertEqual(q.id, 0xa1b2)
        XCTAssertTrue(q.recursionDesired)
        XCTAssertEqual(q.name, "www.example.org")
        XCTAssertEqual(q.type, DNSQuery.typeA)
        XCTAssertEqual(q.qclass, 1)
        XCTAssertEqual(q.questionEnd, 12 + 17 + 4)
        let a = Self.digQuery.withUnsafeBytes {
            DNSQuery.answer($0, query: q, addresses: [IPAddress("198.19.0.1")!, IPAddress("fd00:fa::1")!], ttl: 5)
        }
        XCTAssertEqual(a, [0xa1, 0xb2, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0] + Array(Self.digQuery[12..<33])
                        + [0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 198, 19, 0, 1])
        var aaaa = Self.digQuery
        aaaa[30] = 28
        let q6 = try XCTUnwrap(aaaa.withUnsafeBytes { DNSQuery.parse($0) })
        let a6 = aaaa.withUnsafeBytes { DNSQuery.answer($0, query: q6, addresses: [IPAddress("198.19.0.1")!, IPAddress("fd00:fa::1")!], ttl: 5) }
        XCTAssertEqual(Array(a6.suffix(16)), [0xfd, 0, 0, 0xfa] + [UInt8](repeating: 0, count: 11) + [1])
        XCTAssertEqual(a6[7], 1)
        // Only v4 in the pool: AAAA gets no data.
        let none = aaaa.withUnsafeBytes { DNSQuery.answer($0, query: q6, addresses: [IPAddress("198.19.0.1")!], ttl: 5) }
        XCTAssertEqual(none[7], 0)
        XCTAssertEqual(none.count, 33)
    }

    func testNotQueries() {
        var response = Self.digQuery
        response[2] |= 0x80
        XCTAssertNil(response.withUnsafeBytes { DNSQuery.parse($0) })
        var pointer = Self.digQuery
        pointer[12] = 0xC0
        XCTAssertNil(pointer.withUnsafeBytes { DNSQuery.parse($0) })
        XCTAssertNil(Array(Self.digQuery.prefix(20)).withUnsafeBytes { DNSQuery.parse($0) })
        var two = Self.digQuery
        two[5] = 2
        XCTAssertNil(two.withUnsafeBytes { DNSQuery.parse($0) })
        // A reverse lookup's name is no host name: parsed, without a name.
        let ptr: [UInt8] = [0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0x31, 1, 0x32, 0, 0, 12, 0, 1]
        XCTAssertNil(ptr.withUnsafeBytes { DNSQuery.parse($0) }?.name)
    }

    func testPoolGivesStableAddressesAndEvictsTheLeastRecentlyUsed() throws {
        var p = try XCTUnwrap(FakeIPPool(ipv4: IPPrefix("198.19.0.0/30"), ipv6: IPPrefix("fd00:fa::/64"), maxEntries: 100))
        XCTAssertEqual(p.capacity, 2, "a /30 has two usable addresses")
        let a = p.addresses(for: "a.test")
        XCTAssertEqual(a, [IPAddress("198.19.0.1")!, IPAddress("fd00:fa::1")!])
        XCTAssertEqual(p.addresses(for: "b.test"), [IPAddress("198.19.0.2")!, IPAddress("fd00:fa::2")!])
        XCTAssertEqual(p.addresses(for: "a.test"), a, "the same name, the same addresses")
        XCTAssertEqual(p.name(for: IPAddress("fd00:fa::2")!), "b.test")
        // Full: c.test takes b.test's addresses (a.test was used later).
        XCTAssertEqual(p.addresses(for: "c.test"), [IPAddress("198.19.0.2")!, IPAddress("fd00:fa::2")!])
        XCTAssertFalse(p.knows("b.test"))
        XCTAssertEqual(p.name(for: IPAddress("198.19.0.2")!), "c.test")
        XCTAssertTrue(p.contains(IPAddress("198.19.0.3")!))
        XCTAssertNil(p.name(for: IPAddress("198.19.0.3")!), "in the pool, standing for nothing")
        XCTAssertFalse(p.contains(IPAddress("198.18.0.1")!))
    }

    func testFileRoundTrip() throws {
        var p = try XCTUnwrap(FakeIPPool(ipv4: IPPrefix("198.19.0.0/16"), ipv6: nil, maxEntries: 16))
        for n in ["x.test", "y.test", "z.test"] { _ = p.addresses(for: n) }
        _ = p.addresses(for: "x.test")
        let text = p.encoded()
        XCTAssertEqual(text, "loft-fake-ip 1 198.19.0.0/16 -\n2 y.test\n3 z.test\n1 x.test\n")
        var q = try XCTUnwrap(FakeIPPool(ipv4: IPPrefix("198.19.0.0/16"), ipv6: nil, maxEntries: 16))
        XCTAssertNil(q.restore(text))
        XCTAssertEqual(q.name(for: IPAddress("198.19.0.1")!), "x.test")
        XCTAssertEqual(q.addresses(for: "z.test"), [IPAddress("198.19.0.3")!])
        XCTAssertEqual(q.addresses(for: "new.test"), [IPAddress("198.19.0.4")!], "new names after the restored ones")
        // Another pool's file, or a bad line: nothing taken.
        var r = try XCTUnwrap(FakeIPPool(ipv4: IPPrefix("198.19.0.0/24"), ipv6: nil, maxEntries: 16))
        XCTAssertNotNil(r.restore(text))
        XCTAssertEqual(r.count, 0)
        XCTAssertNotNil(q.restore("loft-fake-ip 1 198.19.0.0/16 -\n1 x.test\nbad\n"))
        XCTAssertNotNil(q.restore("loft-fake-ip 1 198.19.0.0/16 -\n99 x.test\n"), "past the capacity")
        XCTAssertEqual(q.count, 4, "a failed restore keeps what was there")
    }
}
