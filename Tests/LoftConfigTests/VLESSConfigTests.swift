import XCTest
import LoftCore
@testable import LoftConfig

/// `type: vless` outbounds: the keys, their checks, and errors at the right line and column.
final class VLESSConfigTests: XCTestCase {
    static let uuid = "27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b"

    func testVLESSOutbound() {
        guard let c = parseOK("""
            outbounds:
              - name: v
                type: vless
                server: vless.example:443
                uuid: 27F0A1C2-5B3E-4D6F-9A8B-0C1D2E3F4A5B
                tls: { server-name: cdn.example, ca: ca.pem }
              - name: w
                type: vless
                server: "[fd00::7]:8443"
                uuid: 27f0a1c25b3e4d6f9a8b0c1d2e3f4a5b
                tls: { pin-sha256: \(String(repeating: "ab", count: 32)) }
                alpn: [h2, http/1.1]
              - { name: x, type: vless, server: 198.18.0.9:443, uuid: \(Self.uuid), tls: { insecure: true }, alpn: h2 }
            rules:
              - { action: via, outbound: v, to: [198.18.9.0/24] }
            """, baseDirectory: "/etc/loft") else { return }
        XCTAssertEqual(c.outbounds[0].kind, .vless(server: "vless.example:443", uuid: Self.uuid,
                                                   tls: .caFile("/etc/loft/ca.pem"), serverName: "cdn.example", alpn: []))
        XCTAssertEqual(c.outbounds[1].kind, .vless(server: "[fd00::7]:8443", uuid: Self.uuid,
                                                   tls: .pinSHA256(String(repeating: "ab", count: 32)), serverName: nil,
                                                   alpn: ["h2", "http/1.1"]))
        XCTAssertEqual(c.outbounds[2].kind, .vless(server: "198.18.0.9:443", uuid: Self.uuid, tls: .insecure,
                                                   serverName: nil, alpn: ["h2"]))
        XCTAssertEqual(c.rules[0].action, .via(outbound: "v"))
    }

    func testVLESSErrors() {
        let head = "outbounds:\n  - name: v\n    type: vless\n"
        assertError(head + "    server: v.example:443\n    tls: { insecure: true }\n", at: 2, 5,
                    "outbounds[0] (v, type vless) is missing required key \"uuid\"")
        assertError(head + "    uuid: \(Self.uuid)\n    tls: { insecure: true }\n", at: 2, 5, "missing required key \"server\"")
        assertError(head + "    server: v.example:443\n    uuid: \(Self.uuid)\n", at: 2, 5, "missing required key \"tls\"")
        assertError(head + "    uuid: 27f0a1c2-5b3e-4d6f-9a8b\n", at: 4, 11, "outbounds[0].uuid must be a UUID",
                    "got 27f0a1c2-5b3e-4d6f-9a8b")
        assertError(head + "    uuid: 27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5g\n", at: 4, 11, "must be a UUID")
        assertError(head + "    uuid: 27f0a1c25-b3e-4d6f-9a8b-0c1d2e3f4a5b\n", at: 4, 11, "must be a UUID")
        assertError(head + "    server: v.example\n", at: 4, 13, "outbounds[0].server must be host:port")
        assertError(head + "    tls: { server-name: x.example }\n", at: 4, 10, "needs exactly one of ca, pin-sha256, system-ca: true, insecure")
        assertError(head + "    alpn: [h2, \"a b\"]\n", at: 4, 16, "outbounds[0].alpn must be protocol names")
        assertError(head + "    alpn: { a: 1 }\n", at: 4, 11, "outbounds[0].alpn")
        assertError(head + "    carrier: ws\n", at: 4, 5,
                    "key \"carrier\" in outbounds[0] is not for type vless; type vless takes name, type, server, uuid, tls, alpn")
        assertError(head + "    token: t\n", at: 4, 5, "key \"token\" in outbounds[0] is not for type vless")
        assertError("outbounds:\n  - { name: a, type: loft, uuid: \(Self.uuid) }\n", at: 2, 28,
                    "key \"uuid\" in outbounds[0] is not for type loft")
        assertError("outbounds:\n  - { name: a, type: direct, alpn: h2 }\n", at: 2, 30,
                    "key \"alpn\" in outbounds[0] is not for type direct")
    }
}
