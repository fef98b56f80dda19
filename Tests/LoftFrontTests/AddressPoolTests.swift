import LoftCore
import LoftProtocol
import XCTest
@testable import LoftFront

final class AddressPoolTests: XCTestCase {
    private func id(_ n: UInt64) -> InstanceID { InstanceID(high: 0, low: n) }

    func testGatewayIsTheFirstHostAndClientsStartAtTheSecond() {
        let pool = AddressPool(ipv4: IPPrefix("198.18.64.0/24")!, ipv6: IPPrefix("fd00:64::/64")!)
        XCTAssertEqual(pool.gateway4, IPAddress("198.18.64.1"))
        XCTAssertEqual(pool.gateway6, IPAddress("fd00:64::1"))
        XCTAssertEqual(pool.capacity, 253)
        let a = pool.assign(id(1))!
        let b = pool.assign(id(2))!
        XCTAssertEqual(a.ipv4, IPAddress("198.18.64.2"))
        XCTAssertEqual(a.ipv6, IPAddress("fd00:64::2"))
        XCTAssertEqual(b.ipv4, IPAddress("198.18.64.3"))
        XCTAssertEqual(b.ipv6, IPAddress("fd00:64::3"))
        XCTAssertTrue(a.isAttached)
        XCTAssertEqual(pool.count, 2)
    }

    func testAssigningAKnownInstanceKeepsItsAddress() {
        let pool = AddressPool(ipv4: IPPrefix("10.0.0.0/29")!, ipv6: nil)
        let a = pool.assign(id(7))!
        XCTAssertEqual(pool.assign(id(7)), a)
        XCTAssertEqual(pool.count, 1)
        XCTAssertNil(a.ipv6)
    }

    func testResumeGetsTheSameAddressesWhileDetached() {
        let pool = AddressPool(ipv4: IPPrefix("198.18.64.0/24")!, ipv6: IPPrefix("fd00:64::/64")!)
        _ = pool.assign(id(1))
        let b = pool.assign(id(2))!
        pool.detach(id(2), now: 1000, expiryMs: 10_000)
        XCTAssertFalse(pool.lease(id(2))!.isAttached)
        XCTAssertEqual(pool.sweep(now: 5000), [])
        let resumed = pool.attach(id(2))!
        XCTAssertEqual(resumed.ipv4, b.ipv4)
        XCTAssertEqual(resumed.ipv6, b.ipv6)
        XCTAssertTrue(resumed.isAttached)
        // Attached again: no longer subject to expiry.
        XCTAssertEqual(pool.sweep(now: 100_000), [])
        XCTAssertNil(pool.attach(id(99)), "unknown instances do not resume")
    }

    func testExpiryFreesTheAddress() {
        let pool = AddressPool(ipv4: IPPrefix("10.0.0.0/30")!, ipv6: nil)
        XCTAssertEqual(pool.capacity, 1)
        let a = pool.assign(id(1))!
        XCTAssertEqual(a.ipv4, IPAddress("10.0.0.2"))
        XCTAssertNil(pool.assign(id(2)), "a /30 holds one client")
        pool.detach(id(1), now: 1000, expiryMs: 10_000)
        XCTAssertEqual(pool.sweep(now: 10_999), [])
        let expired = pool.sweep(now: 11_000)
        XCTAssertEqual(expired.map(\.instanceID), [id(1)])
        XCTAssertNil(pool.lease(id(1)))
        XCTAssertNil(pool.attach(id(1)), "an expired instance cannot resume")
        XCTAssertEqual(pool.assign(id(2))?.ipv4, IPAddress("10.0.0.2"))
    }

    func testExhaustionAndRoundRobinReuse() {
        let pool = AddressPool(ipv4: IPPrefix("10.0.0.0/29")!, ipv6: nil)
        XCTAssertEqual(pool.capacity, 5) // .2 … .6; .0 network, .1 gateway, .7 broadcast
        var addresses: [IPAddress] = []
        for n in 1...5 { addresses.append(pool.assign(id(UInt64(n)))!.ipv4) }
        XCTAssertEqual(addresses, (2...6).map { IPAddress("10.0.0.\($0)")! })
        XCTAssertTrue(pool.isFull)
        XCTAssertNil(pool.assign(id(6)))
        pool.release(id(2))
        XCTAssertEqual(pool.assign(id(6))?.ipv4, IPAddress("10.0.0.3"))
        pool.release(id(1))
        pool.release(id(4))
        // The cursor is past .3: the next free one after it comes first.
        XCTAssertEqual(pool.assign(id(7))?.ipv4, IPAddress("10.0.0.5"))
        XCTAssertEqual(pool.assign(id(8))?.ipv4, IPAddress("10.0.0.2"))
        XCTAssertNil(pool.assign(id(9)))
    }

    func testMaxLeasesAndTheSmallerPoolBoundCapacity() {
        XCTAssertEqual(AddressPool(ipv4: IPPrefix("10.0.0.0/16")!, ipv6: nil, maxLeases: 3).capacity, 3)
        XCTAssertEqual(AddressPool(ipv4: IPPrefix("10.0.0.0/24")!, ipv6: IPPrefix("fd00::/126")!).capacity, 2)
        let pool = AddressPool(ipv4: IPPrefix("10.0.0.0/24")!, ipv6: IPPrefix("fd00::/126")!)
        XCTAssertEqual(pool.assign(id(1))?.ipv6, IPAddress("fd00::2"))
        XCTAssertEqual(pool.assign(id(2))?.ipv6, IPAddress("fd00::3"))
        XCTAssertNil(pool.assign(id(3)))
    }

    func testIPv6HostArithmeticCarriesIntoTheHighHalf() {
        XCTAssertEqual(AddressPool.host(IPPrefix(IPAddress.v6(1, UInt64.max - 1), 126)!, 3), IPAddress.v6(2, 1))
    }
}
