import LoftCore
import LoftProtocol
import XCTest
@testable import LoftOutbounds

/// What the holder refuses to put on the TUN from a front's STATUS.
final class OverlayCheckTests: XCTestCase {
    private func overlay(_ v4: String, gw: String = "198.18.64.1", v6: String? = nil, gw6: String? = nil,
                         dns: [String] = []) -> Overlay {
        Overlay(ipv4: IPPrefix(v4)!, gateway4: IPAddress(gw)!, ipv6: v6.flatMap { IPPrefix($0) },
                gateway6: gw6.flatMap { IPAddress($0) }, mtu: 1400, dns: dns.compactMap { IPAddress($0) })
    }

    func testAnOrdinaryOverlayIsUsable() {
        XCTAssertNil(HolderOutbound.unusable(overlay("198.18.64.2/24", v6: "fd00:64::2/64", gw6: "fd00:64::1",
                                                     dns: ["198.18.1.2", "fd00:1::2"])))
        XCTAssertNil(HolderOutbound.unusable(overlay("10.7.0.2/8")))
    }

    func testLoopbackUnspecifiedAndMulticastAreRefused() {
        XCTAssertNotNil(HolderOutbound.unusable(overlay("127.0.0.2/24")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("0.0.0.0/24")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("224.0.0.5/24")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.2/24", gw: "127.0.0.1")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.2/24", v6: "::1/128", gw6: "fd00:64::1")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.2/24", v6: "fd00:64::2/64", gw6: "ff02::1")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.2/24", dns: ["0.0.0.0"])))
    }

    func testPrefixesThatWouldTakeOverEverythingAreRefused() {
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.2/0")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.2/7")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.2/24", v6: "fd00::2/8", gw6: "fd00::1")))
    }

    /// Issue 28: the holder's STATUS gets the same check as an SSTP server's IPCP address
    /// (`HostAddress.problem`): the limited broadcast, class E and the gateway itself too.
    func testAddressesNoHostMayHaveAreRefused() {
        XCTAssertNotNil(HolderOutbound.unusable(overlay("255.255.255.255/8")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("240.0.0.2/8")))
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.1/24")), "the front's gateway itself")
        XCTAssertNotNil(HolderOutbound.unusable(overlay("198.18.64.2/24", v6: "fd00:64::1/64", gw6: "fd00:64::1")))
    }
}
