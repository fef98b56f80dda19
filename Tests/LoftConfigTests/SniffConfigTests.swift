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
