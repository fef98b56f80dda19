import XCTest
@testable import LoftCore

final class AddressTests: XCTestCase {
    func testIPv4RoundTrip() {
        XCTAssertEqual(IPAddress("198.18.1.2"), .v4(0xC612_0102))
        XCTAssertEqual(IPAddress("198.18.1.2")?.description, "198.18.1.2")
        XCTAssertNil(IPAddress("198.18.1"))
        XCTAssertNil(IPAddress("198.18.1.256"))
    }

    func testIPv6RoundTrip() {
        XCTAssertEqual(IPAddress("fd00:1::2"), .v6(0xFD00_0001_0000_0000, 2))
        XCTAssertEqual(IPAddress("fd00:1::2")?.description, "fd00:1::2")
        XCTAssertNil(IPAddress("fd00:::2"))
    }

    /// Found by fuzz/run (address_text): inet_pton stopped at a NUL, so text with one inside
    /// parsed as its prefix (a config could say "::\0anything").
    func testTextWithNULIsRefused() {
        XCTAssertNil(IPAddress("::\u{0}\u{4}"))
        XCTAssertNil(IPAddress("198.18.1.2\u{0}junk"))
        XCTAssertNil(Endpoint("198.18.1.2\u{0}:80"))
        XCTAssertNil(IPPrefix("198.18.0.0\u{0}/15"))
    }

    func testEndpoints() {
        XCTAssertEqual(Endpoint("127.0.0.1:11080"), Endpoint(IPAddress("127.0.0.1")!, 11080))
        XCTAssertEqual(Endpoint("[::1]:80"), Endpoint(IPAddress("::1")!, 80))
        XCTAssertEqual(Endpoint(IPAddress("fd00::1")!, 53).description, "[fd00::1]:53")
        XCTAssertNil(Endpoint("::1:80"))
        XCTAssertNil(Endpoint("1.2.3.4:70000"))
        XCTAssertNil(Endpoint("[::1]80"))
    }

    func testPrefixContains() {
        let p = IPPrefix("198.18.0.0/15")!
        XCTAssertTrue(p.contains(IPAddress("198.19.255.255")!))
        XCTAssertFalse(p.contains(IPAddress("198.20.0.0")!))
        XCTAssertFalse(p.contains(IPAddress("fd00::1")!))
        XCTAssertTrue(IPPrefix("0.0.0.0/0")!.contains(IPAddress("203.0.113.1")!))
        let v6 = IPPrefix("fd00:1::/96")!
        XCTAssertTrue(v6.contains(IPAddress("fd00:1::ffff:1")!))
        XCTAssertFalse(v6.contains(IPAddress("fd00:1::1:0:0")!))
        XCTAssertTrue(IPPrefix("fd00::1/128")!.contains(IPAddress("fd00::1")!))
        XCTAssertNil(IPPrefix("198.18.0.0/33"))
        XCTAssertNil(IPPrefix("198.18.0.0/x"))
    }

    func testFlowFailureFromErrno() {
        XCTAssertEqual(FlowFailure(errno: ECONNREFUSED), .refused)
        XCTAssertEqual(FlowFailure(errno: EHOSTUNREACH), .hostUnreachable)
        XCTAssertEqual(FlowFailure(errno: ENETUNREACH), .networkUnreachable)
        XCTAssertEqual(FlowFailure(errno: ETIMEDOUT), .timedOut)
    }
}
