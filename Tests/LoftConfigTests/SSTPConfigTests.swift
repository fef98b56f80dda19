import XCTest
import Glibc
import LoftCore
@testable import LoftConfig

/// `type: sstp` outbounds: the keys, their checks, and errors at the right line and column.
final class SSTPConfigTests: XCTestCase {
    func testSSTPOutbound() {
        guard let c = parseOK("""
            outbounds:
              - name: corp
                type: sstp
                server: vpn.example:443
                user: alice
                password: "s3cret pass"
                tls: { server-name: gw.example, ca: ca.pem }
              - name: lab
                type: sstp
                server: "[fd00::7]:443"
                user: bob
                password: x
                tls: { insecure: true }
                auth: [pap, mschapv2]
                keepalive: 5s
              - { name: old, type: sstp, server: 198.18.0.9:443, user: c, password: y, tls: { insecure: true }, auth: pap }
            default: corp
            """, baseDirectory: "/etc/loft") else { return }
        XCTAssertEqual(c.outbounds[0].kind, .sstp(server: "vpn.example:443", user: "alice", password: "s3cret pass",
                                                  tls: .caFile("/etc/loft/ca.pem"), serverName: "gw.example", auth: [.mschapv2, .pap]))
        XCTAssertEqual(c.outbounds[1].kind, .sstp(server: "[fd00::7]:443", user: "bob", password: "x", tls: .insecure,
                                                  serverName: nil, auth: [.pap, .mschapv2]))
        XCTAssertEqual(c.outbounds[2].kind, .sstp(server: "198.18.0.9:443", user: "c", password: "y", tls: .insecure,
                                                  serverName: nil, auth: [.pap]))
        XCTAssertNil(c.outbounds[0].keepalive)
        XCTAssertEqual(c.outbounds[1].keepalive, .seconds(5))
    }

    func testPasswordFile() throws {
        let dir = "/tmp/loft-sstp-config-\(getpid())"
        mkdir(dir, 0o700)
        defer { _ = unlink(dir + "/pw"); _ = unlink(dir + "/empty"); rmdir(dir) }
        let fd = open(dir + "/pw", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = "p\u{e4}ss word\r\nsecond line\n".withCString { write(fd, $0, strlen($0)) }
        close(fd)
        close(open(dir + "/empty", O_WRONLY | O_CREAT | O_TRUNC, 0o600))
        let head = "outbounds:\n  - name: s\n    type: sstp\n    server: v.example:443\n    user: u\n    tls: { insecure: true }\n"
        guard let c = parseOK(head + "    password-file: pw\n", baseDirectory: dir) else { return }
        XCTAssertEqual(c.outbounds[0].kind, .sstp(server: "v.example:443", user: "u", password: "p\u{e4}ss word", tls: .insecure,
                                                  serverName: nil, auth: [.mschapv2, .pap]))
        assertError(head + "    password-file: missing\n", at: 7, 20, "outbounds[0].password-file: cannot read",
                    baseDirectory: dir)
        assertError(head + "    password-file: empty\n", at: 7, 20, "the first line of", "must be the password",
                    baseDirectory: dir)
        assertError(head + "    password: a\n    password-file: pw\n", at: 8, 5,
                    "outbounds[0] takes one of password and password-file; password-file is a second one (the first at line 7, column 5)",
                    baseDirectory: dir)
    }

    func testSSTPErrors() {
        let head = "outbounds:\n  - name: s\n    type: sstp\n"
        let rest = "    server: v.example:443\n    tls: { insecure: true }\n"
        assertError(head + rest + "    password: p\n", at: 2, 5, "outbounds[0] (s, type sstp) is missing required key \"user\"")
        assertError(head + rest + "    user: u\n", at: 2, 5, "missing required key \"password (or password-file)\"")
        assertError(head + "    user: u\n    password: p\n    tls: { insecure: true }\n", at: 2, 5, "missing required key \"server\"")
        assertError(head + "    user: u\n    password: p\n    server: v.example:443\n", at: 2, 5, "missing required key \"tls\"")
        assertError(head + "    user: \"\"\n", at: 4, 11, "outbounds[0].user")
        assertError(head + "    user: \(String(repeating: "u", count: 256))\n", at: 4, 11, "at most 255 bytes")
        assertError(head + "    password: \(String(repeating: "p", count: 256))\n", at: 4, 15, "at most 255 bytes")
        assertError(head + "    auth: [mschapv2, chap]\n", at: 4, 22, "outbounds[0].auth[1] must be mschapv2 or pap", "got chap")
        assertError(head + "    auth: [pap, pap]\n", at: 4, 17, "outbounds[0].auth[1]: pap is already in the list")
        assertError(head + "    auth: []\n", at: 4, 11, "outbounds[0].auth must name at least one of mschapv2, pap")
        assertError(head + "    uuid: 27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b\n", at: 4, 5,
                    "key \"uuid\" in outbounds[0] is not for type sstp; type sstp takes name, type, server, user, password, password-file, tls, auth, keepalive")
        assertError(head + "    keepalive: 500ms\n", at: 4, 16, "outbounds[0].keepalive")
        assertError("outbounds:\n  - { name: a, type: loft, keepalive: 5s }\n", at: 2, 28, "key \"keepalive\" in outbounds[0] is not for type loft")
        assertError("outbounds:\n  - { name: a, type: vless, user: u }\n", at: 2, 29, "key \"user\" in outbounds[0] is not for type vless")
        assertError("outbounds:\n  - { name: a, type: loft, auth: pap }\n", at: 2, 28, "key \"auth\" in outbounds[0] is not for type loft")
        assertError("outbounds:\n  - { name: a, type: ssstp }\n", at: 2, 22, "outbounds[0].type must be")
    }
}
