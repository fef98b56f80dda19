import XCTest
import LoftCore
@testable import LoftConfig

final class ErrorTests: XCTestCase {
    // MARK: Unknown keys

    func testUnknownTopLevelKey() {
        assertError("log: info\ntunn:\n  mtu: 1500\n", at: 2, 1,
                    "unknown key \"tunn\" at the top level", "did you mean \"tun\"?",
                    "expected one of: log, tun, socks5, bridge, outbounds, rules, default, hold, control, limits, metrics")
    }

    func testUnknownKeyInTun() {
        assertError("tun:\n  name: loft0\n  mtuu: 1500\n", at: 3, 3,
                    "unknown key \"mtuu\" in tun (did you mean \"mtu\"? expected one of: name, netns, mtu, ipv4, ipv6, route-all, dns, icmp, offload)")
    }

    func testUnknownKeyInFlowMapping() {
        assertError("socks5: { listen: 127.0.0.1:1080, clients: 5 }\n", at: 1, 35,
                    "unknown key \"clients\" in socks5", "listen, max-clients")
    }

    func testUnknownKeyInNestedSections() {
        assertError("limits:\n  max-flows: 100\n  idle: 5\n", at: 3, 3, "unknown key \"idle\" in limits")
        assertError("bridge:\n  port: 1\n", at: 2, 3, "unknown key \"port\" in bridge",
                    "peer-port, extension-port, mtu")
        assertError("rules:\n  - action: direct\n  - action: drop\n    dst: [10.0.0.0/8]\n", at: 4, 5,
                    "unknown key \"dst\" in rules[1]")
        assertError("""
            outbounds:
              - name: a
                type: loft
                server: f.example:443
                carrier: ws
                token: t
                tls: { insecure: true, sni: x }
            """, at: 7, 28, "unknown key \"sni\" in outbounds[0].tls",
                    "expected one of: server-name, ca, pin-sha256, system-ca, insecure")
        assertError("outbounds:\n  - name: a\n    type: direct\n    via: b\n", at: 4, 5,
                    "unknown key \"via\" in outbounds[0]")
    }

    func testUnknownKeyIsReportedBeforeLaterBadValues() {
        // Document order: the unknown key on line 2 comes first.
        assertError("tun:\n  nmae: x\n  mtu: 1\n", at: 2, 3, "unknown key \"nmae\"")
        // ... and a bad value on line 2 before an unknown key on line 3.
        assertError("tun:\n  mtu: 1\n  nmae: x\n", at: 2, 8, "tun.mtu")
    }

    // MARK: Duplicate keys

    func testDuplicateKeys() {
        assertError("tun:\n  mtu: 1500\n  name: x\n  mtu: 1400\n", at: 4, 3,
                    "duplicate key \"mtu\" in tun (first at line 2, column 3)")
        assertError("log: info\nhold: true\nlog: debug\n", at: 3, 1,
                    "duplicate key \"log\" at the top level (first at line 1, column 1)")
        assertError("bridge: { mtu: 1400, \"mtu\": 1500 }\n", at: 1, 22, "duplicate key \"mtu\" in bridge")
    }

    func testNonScalarKey() {
        assertError("? [a, b]\n: 1\n", at: 1, 3, "keys must be names", "got a list")
    }

    // MARK: Types, values and ranges

    func testTunValueErrors() {
        assertError("tun:\n  mtu: 99999\n", at: 2, 8,
                    "tun.mtu must be an integer from 576 to 65535, got 99999")
        assertError("tun:\n  mtu: 575\n", at: 2, 8, "tun.mtu", "576 to 65535", "got 575")
        // IPv6 (on by default) needs 1280; without it 576 is allowed.
        assertError("tun:\n  mtu: 1279\n", at: 2, 8, "tun.mtu must be at least 1280 with IPv6 on", "got 1279")
        assertError("tun:\n  ipv4: off\n  mtu: 1000\n", at: 3, 8, "tun.mtu must be at least 1280 with IPv6 on")
        XCTAssertEqual(parseOK("tun:\n  mtu: 576\n  ipv6: off\n")?.tun?.mtu, 576)
        XCTAssertEqual(parseOK("tun:\n  offload: off\n")?.tun?.offload, .off)
        XCTAssertEqual(parseOK("tun: {}\n")?.tun?.offload, .auto)
        assertError("tun:\n  offload: on\n", at: 2, 12, "tun.offload", "auto", "off", "got on")
        assertError("tun:\n  mtu: \"1500\"\n", at: 2, 8, "tun.mtu", "got \"1500\"")
        assertError("tun:\n  mtu: [1500]\n", at: 2, 8, "tun.mtu", "got a list")
        assertError("tun:\n  mtu:\n", at: 2, 7, "tun.mtu", "got an empty value")
        assertError("tun: { name: this-name-is-too-long }\n", at: 1, 14, "tun.name", "1 to 15 characters",
                    "this-name-is-too-long")
        assertError("tun: { name: \"a b\" }\n", at: 1, 14, "tun.name", "got \"a b\"")
        assertError("tun: { netns: \"..\" }\n", at: 1, 15, "tun.netns")
        assertError("tun:\n  ipv4: fd00::1/64\n", at: 2, 9, "tun.ipv4 must be an IPv4 address/length",
                    "got fd00::1/64")
        assertError("tun:\n  ipv6: 198.18.0.1/30\n", at: 2, 9, "tun.ipv6 must be an IPv6 address/length")
        assertError("tun:\n  ipv4: 198.18.0.1/33\n", at: 2, 9, "tun.ipv4")
        assertError("tun:\n  ipv4: 198.18.0.1\n", at: 2, 9, "tun.ipv4", "address/length")
        assertError("tun:\n  ipv4: 0.0.0.0/8\n", at: 2, 9, "tun.ipv4", "unicast")
        assertError("tun:\n  dns: [1.1.1.1, 1.1.1]\n", at: 2, 18,
                    "tun.dns[1] must be an IPv4 or IPv6 address, got 1.1.1")
        assertError("tun:\n  icmp: answer\n", at: 2, 9, "tun.icmp must be reply or drop, got answer")
        assertError("tun:\n  route-all: maybe\n", at: 2, 14, "tun.route-all must be true or false, got maybe")
        assertError("tun: 5\n", at: 1, 6, "tun must be a mapping, off or on, got 5")
    }

    func testTunOptionalAddressesAndValues() {
        guard let c = parseOK("tun:\n  ipv4: off\n  ipv6: off\n  route-all: false\n  icmp: drop\n  dns: 9.9.9.9\n") else { return }
        XCTAssertNil(c.tun?.ipv4)
        XCTAssertNil(c.tun?.ipv6)
        XCTAssertEqual(c.tun?.routeAll, false)
        XCTAssertEqual(c.tun?.icmp, .drop)
        XCTAssertEqual(c.tun?.dns, [ip("9.9.9.9")])
        XCTAssertEqual(parseOK("tun: { name: a.b_c-9, netns: ns1, mtu: 65535 }")?.tun,
                       TunSettings(name: "a.b_c-9", netns: "ns1", mtu: 65535))
    }

    func testTopLevelValueErrors() {
        assertError("log: verbose\n", at: 1, 6, "log must be error, warn, info or debug, got verbose")
        assertError("hold: 1\n", at: 1, 7, "hold must be true or false, got 1")
        assertError("control: \"\"\n", at: 1, 10, "control must be a non-empty string")
        assertError("control: /\(String(repeating: "x", count: 120))\n", at: 1, 10, "at most 107 bytes")
        assertError("outbounds: { a: 1 }\n", at: 1, 12, "outbounds must be a list, got a mapping")
        assertError("rules:\n  - direct\n", at: 2, 5, "rules[0] must be a mapping with an action, got direct")
    }

    func testTopLevelMustBeAMapping() {
        assertError("- a\n- b\n", at: 1, 1, "the configuration must be a mapping", "got a list")
        assertError("\n\njust text\n", at: 3, 1, "the configuration must be a mapping",
                    "got the text \"just text\"")
    }

    // MARK: YAML syntax

    func testYAMLSyntaxErrors() {
        assertError("tun:\n  mtu: 1500\n bad: x\n", at: 3, 2, "invalid YAML: did not find expected key",
                    "while parsing a block mapping at line 1, column 1")
        assertError("a: b: c\n", at: 1, 5, "invalid YAML: mapping values are not allowed in this context")
        assertError("tun: [1, 2\n", at: 2, 1, "did not find expected ',' or ']'")
        assertError("control: \"unterminated\n", at: 2, 1, "found unexpected end of stream",
                    "while scanning a quoted scalar at line 1, column 10")
        assertError("tun:\n\tmtu: 1\n", at: 2, 1, "found character that cannot start any token")
        assertError("log: info\n---\nlog: debug\n", at: 2, 1, "only one YAML document is allowed")
        assertError("log: &l info\nhold: *l\n", at: 2, 7, "aliases", "not supported")
    }

    func testInvalidUTF8IsReportedByPosition() {
        let dir = temporaryDirectory(self)
        let path = dir + "/bad.yaml"
        let bytes: [UInt8] = Array("log: info\ncontrol: ".utf8) + [0xFF, 0xFE] + Array("\n".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
        do {
            _ = try ConfigLoader.load(path: path)
            XCTFail("expected an error")
        } catch {
            XCTAssertEqual(error.position, at(2, 10, path))
            XCTAssertTrue(error.message.contains("invalid YAML"), error.message)
        }
    }

    // MARK: Files

    func testUnreadableFile() {
        do {
            _ = try ConfigLoader.load(path: "/nonexistent/loft.yaml")
            XCTFail("expected an error")
        } catch {
            XCTAssertNil(error.position)
            XCTAssertEqual(error.description, "/nonexistent/loft.yaml: cannot read: No such file or directory")
        }
    }

    func testLoadReadsTheFileAndResolvesPathsAgainstItsFolder() throws {
        let dir = temporaryDirectory(self)
        writeFile(dir + "/nets.txt", "198.18.5.0/24\n")
        writeFile(dir + "/loft.yaml", """
            outbounds:
              - { name: h, type: loft, server: f.example:443, carrier: h2, token: t, tls: { ca: ca.pem } }
            rules:
              - { action: via, outbound: h, to-file: nets.txt }
            """)
        let c = try ConfigLoader.load(path: dir + "/loft.yaml")
        XCTAssertEqual(c.rules.first?.to, [prefix("198.18.5.0/24")])
        XCTAssertEqual(c.rules.first?.position, at(4, 5, dir + "/loft.yaml"))
        XCTAssertEqual(c.outbounds.first?.kind,
                       .loft(server: "f.example:443", carrier: "h2", token: "t",
                             tls: .caFile(dir + "/ca.pem"), serverName: nil))
        XCTAssertEqual(ConfigLoader.load_directoryForTests("loft.yaml"), ".")
        XCTAssertEqual(ConfigLoader.load_directoryForTests("/loft.yaml"), "/")
        XCTAssertEqual(ConfigLoader.load_directoryForTests("a/b/loft.yaml"), "a/b")
    }
}

extension ConfigLoader {
    static func load_directoryForTests(_ path: String) -> String { directory(of: path) }
}
