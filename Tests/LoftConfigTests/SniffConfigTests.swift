import XCTest
import LoftCore
@testable import LoftConfig

/// The `sniff` section (docs/config.md, docs/sniffing.md).
final class SniffConfigTests: XCTestCase {
    func testDefaultsOn() {
        guard let c = parseOK("log: info\n") else { return }
        XCTAssertEqual(c.sniff, SniffSettings())
        XCTAssertTrue(c.sniff.enabled)
        XCTAssertEqual(c.sniff.wait, .milliseconds(300))
        XCTAssertEqual(c.sniff.maxBytes, 16_384)
        XCTAssertNil(c.sniff.skipPorts)
        XCTAssertFalse(c.sniff.directResolve)
    }

    func testOffAndKeys() {
        XCTAssertEqual(parseOK("sniff: off\n")?.sniff.enabled, false)
        XCTAssertEqual(parseOK("sniff: { enabled: false }\n")?.sniff.enabled, false)
        guard let c = parseOK("sniff:\n  wait: 1s\n  max-bytes: 4096\n  skip-ports: [22, \"6000-6010\"]\n  direct-resolve: true\n") else { return }
        XCTAssertEqual(c.sniff, SniffSettings(enabled: true, wait: .seconds(1), maxBytes: 4096,
                                              skipPorts: [22...22, 6000...6010], directResolve: true))
        XCTAssertEqual(parseOK("sniff: { skip-ports: [] }\n")?.sniff.skipPorts, [])
    }

    func testErrors() {
        assertError("sniff:\n  wait: 6s\n", at: 2, 9, "sniff.wait")
        assertError("sniff:\n  max-bytes: 100\n", at: 2, 14, "sniff.max-bytes")
        assertError("sniff:\n  skip-ports: [0]\n", at: 2, 16, "sniff.skip-ports[0]")
        assertError("sniff:\n  sniffing: true\n", at: 2, 3, "sniffing")
    }
}

/// The `fake-ip` section (docs/config.md, docs/fakeip.md).
final class FakeIPConfigTests: XCTestCase {
    func testOffByDefaultAndDefaults() {
        XCTAssertNil(parseOK("log: info\n")?.fakeIP)
        XCTAssertNil(parseOK("fake-ip: off\n")?.fakeIP)
        XCTAssertEqual(parseOK("fake-ip: on\n")?.fakeIP, FakeIPSettings())
        XCTAssertEqual(FakeIPSettings().ipv4, IPPrefix("198.19.0.0/16"))
        XCTAssertEqual(FakeIPSettings().ttl, .seconds(5))
    }

    func testKeys() {
        let c = parseOK("fake-ip:\n  ipv4: 198.19.7.9/24\n  ipv6: off\n  ttl: 10s\n  names: [\"*.Example.org\"]\n  exclude: [a.example.org.]\n  file: map.txt\n  max-entries: 100\n",
                        baseDirectory: "/etc/loft")
        XCTAssertEqual(c?.fakeIP, FakeIPSettings(ipv4: IPPrefix("198.19.7.0/24"), ipv6: nil, ttl: .seconds(10),
                                                 names: ["*.example.org"], exclude: ["a.example.org"], file: "/etc/loft/map.txt",
                                                 maxEntries: 100))
    }

    func testErrors() {
        assertError("fake-ip:\n  ipv4: 10.0.0.0/31\n", at: 2, 9, "fake-ip.ipv4", "8 … 30")
        assertError("fake-ip:\n  ipv6: 198.19.0.0/16\n", at: 2, 9, "fake-ip.ipv6")
        assertError("fake-ip:\n  ipv4: off\n  ipv6: off\n", at: 2, 3, "needs a pool")
        assertError("fake-ip:\n  ttl: 0s\n", at: 2, 8, "fake-ip.ttl")
        assertError("fake-ip:\n  max-entries: 5\n", at: 2, 16, "fake-ip.max-entries")
        assertError("tun: { route-all: false }\nfake-ip: on\n", at: 2, 10, "route-all")
    }
}
