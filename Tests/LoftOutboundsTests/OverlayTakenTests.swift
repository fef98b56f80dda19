import LoftCore
import LoftProtocol
import XCTest
@testable import LoftOutbounds

/// An overlay address the TUN already has (its configured one, under another prefix) is
/// refused; the very prefix the TUN has is no change and passes.
final class OverlayTakenTests: XCTestCase {
    func overlay(_ v4: String) -> Overlay {
        Overlay(ipv4: IPPrefix(v4)!, gateway4: IPAddress("198.18.64.1")!, ipv6: nil, gateway6: nil, mtu: 1400, dns: [])
    }

    func testAnAddressTheTUNHasIsRefused() {
        let tun = [IPPrefix("198.18.0.1/30")!, IPPrefix("fd00:18::1/126")!]
        XCTAssertEqual(HolderOutbound.unusable(overlay("198.18.0.1/24"), taken: tun), "IPv4 address 198.18.0.1: an address the TUN already has")
        XCTAssertNil(HolderOutbound.unusable(overlay("198.18.0.1/30"), taken: tun))
        XCTAssertNil(HolderOutbound.unusable(overlay("198.18.64.2/24"), taken: tun))
    }

    /// The one check both use.
    func testHostAddressProblem() {
        func p(_ a: String, peer: String? = nil, taken: [String] = []) -> String? {
            HostAddress.problem(IPAddress(a)!, peer: peer.flatMap { IPAddress($0) }, taken: taken.compactMap { IPAddress($0) })
        }
        XCTAssertEqual(p("127.0.0.1"), "loopback")
        XCTAssertEqual(p("127.255.0.9"), "loopback")
        XCTAssertEqual(p("0.0.0.0"), "unspecified (0.0.0.0/8)")
        XCTAssertEqual(p("224.0.0.1"), "multicast")
        XCTAssertEqual(p("239.255.255.250"), "multicast")
        XCTAssertEqual(p("255.255.255.255"), "the limited broadcast address")
        XCTAssertEqual(p("240.0.0.1"), "reserved (240.0.0.0/4)")
        XCTAssertEqual(p("198.19.5.1", peer: "198.19.5.1"), "the peer's own address")
        XCTAssertEqual(p("198.18.0.1", taken: ["198.18.0.1"]), "an address the TUN already has")
        XCTAssertNil(p("198.19.5.2", peer: "198.19.5.1", taken: ["198.18.0.1"]))
        XCTAssertNil(p("10.0.0.1"))
        XCTAssertNil(p("100.64.0.9"))
        XCTAssertEqual(p("::"), "unspecified")
        XCTAssertEqual(p("::1"), "loopback")
        XCTAssertEqual(p("ff02::1"), "multicast")
        XCTAssertEqual(p("::ffff:10.0.0.1"), "an IPv4-mapped address")
        XCTAssertNil(p("fd00:64::2", peer: "fd00:64::1"))
    }
}
