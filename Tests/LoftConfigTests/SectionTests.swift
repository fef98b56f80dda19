import XCTest
import LoftCore
@testable import LoftConfig

final class SectionTests: XCTestCase {
    // MARK: socks5 and bridge on/off

    func testSocks5AndBridgeOff() {
        guard let off = parseOK("socks5: off\nbridge: off\n") else { return }
        XCTAssertNil(off.socks5)
        XCTAssertNil(off.bridge)
        var expected = Configuration.builtInDefault
        expected.socks5 = nil
        expected.bridge = nil
        XCTAssertEqual(off, expected)

        // Turned back on, with and without keys; absent is the default (on).
        XCTAssertEqual(parseOK("socks5: {}\nbridge: {}\n"), .builtInDefault)
        XCTAssertEqual(parseOK("socks5: on\nbridge: true\n"), .builtInDefault)
        XCTAssertEqual(parseOK("hold: false\n"), .builtInDefault)
        XCTAssertNil(parseOK("socks5: false\n")?.socks5)
        XCTAssertEqual(parseOK("socks5: off\n")?.bridge, BridgeSettings())
        XCTAssertEqual(parseOK("bridge: off\n")?.socks5, Socks5Settings())
        assertError("socks5: \"off\"\n", at: 1, 9, "socks5 must be a mapping, off or on, got \"off\"")
        assertError("bridge: [9090]\n", at: 1, 9, "bridge must be a mapping, off or on, got a list")
    }

    func testSocks5Listen() {
        XCTAssertEqual(parseOK("socks5:\n  listen: 127.0.0.2:1080\n")?.socks5?.listen, endpoint("127.0.0.2:1080"))
        XCTAssertEqual(parseOK("socks5:\n  listen: 127.255.0.1:11081\n")?.socks5?.listen, endpoint("127.255.0.1:11081"))
        assertError("socks5:\n  listen: 10.0.0.1:1080\n", at: 2, 11,
                    "socks5.listen must be a loopback address", "got 10.0.0.1:1080")
        assertError("socks5:\n  listen: 0.0.0.0:1080\n", at: 2, 11, "socks5.listen must be a loopback address")
        assertError("socks5:\n  listen: \"[::1]:1080\"\n", at: 2, 11, "socks5.listen must be a loopback address")
        assertError("socks5:\n  listen: 128.0.0.1:1080\n", at: 2, 11, "socks5.listen must be a loopback address")
        assertError("socks5:\n  listen: localhost:1080\n", at: 2, 11, "socks5.listen must be address:port")
        assertError("socks5:\n  listen: 127.0.0.1\n", at: 2, 11, "socks5.listen must be address:port")
        assertError("socks5:\n  listen: 127.0.0.1:0\n", at: 2, 11, "socks5.listen needs a port from 1 to 65535")
    }

    func testSocks5MaxClientsRange() {
        assertError("socks5:\n  max-clients: 127\n", at: 2, 16,
                    "socks5.max-clients must be an integer from 128 to 65536, got 127")
        assertError("socks5:\n  max-clients: 65537\n", at: 2, 16,
                    "socks5.max-clients must be an integer from 128 to 65536, got 65537")
        XCTAssertEqual(parseOK("socks5:\n  max-clients: 128\n")?.socks5?.maxClients, 128)
        XCTAssertEqual(parseOK("socks5:\n  max-clients: 65536\n")?.socks5?.maxClients, 65536)
        XCTAssertEqual(parseOK("socks5:\n  max-clients: 65_536\n")?.socks5?.maxClients, 65536)
    }

    func testBridge() {
        XCTAssertEqual(parseOK("bridge: { peer-port: 1, extension-port: 65535, mtu: 1280 }")?.bridge,
                       BridgeSettings(peerPort: 1, extensionPort: 65535, mtu: 1280))
        assertError("bridge:\n  peer-port: 0\n", at: 2, 14, "bridge.peer-port must be an integer from 1 to 65535, got 0")
        assertError("bridge:\n  extension-port: 65536\n", at: 2, 19, "bridge.extension-port", "got 65536")
        assertError("bridge:\n  mtu: 1000\n", at: 2, 8, "bridge.mtu", "1280 to 65535")
        // Equal ports: reported at the port written last.
        assertError("bridge:\n  extension-port: 7000\n  peer-port: 7000\n", at: 3, 14,
                    "bridge.peer-port and bridge.extension-port must differ, both are 7000")
        assertError("bridge:\n  peer-port: 9091\n", at: 2, 14, "must differ, both are 9091")
    }

    func testMetrics() {
        XCTAssertEqual(parseOK("metrics: 127.0.0.1:9100")?.metrics, endpoint("127.0.0.1:9100"))
        XCTAssertEqual(parseOK("metrics: \"[::1]:9100\"")?.metrics, endpoint("[::1]:9100"))
        XCTAssertNil(parseOK("metrics: off")?.metrics)
        assertError("log: info\nmetrics: 0.0.0.0:9100\n", at: 2, 10, "metrics must be a loopback address")
        assertError("metrics: 9100\n", at: 1, 10, "metrics must be address:port")
        assertError("metrics: 127.0.0.1:11080\n", at: 1, 10, "same endpoint as socks5.listen")
        XCTAssertEqual(parseOK("socks5: off\nmetrics: 127.0.0.1:11080\n")?.metrics, endpoint("127.0.0.1:11080"))
    }

    // MARK: Outbounds

    static let loftOutbound = "    type: loft\n    server: front.example:443\n    carrier: quic\n    token: abc\n"

    func testOutboundKinds() {
        guard let c = parseOK("""
            outbounds:
              - name: a
                type: loft
                server: front.example:443
                carrier: get
                token: 0123
                tls: { server-name: cdn.example, insecure: true }
              - { name: lan, type: direct }
              - { name: sink, type: drop }
            """) else { return }
        XCTAssertEqual(c.outbounds.map(\.name), ["a", "lan", "sink"])
        XCTAssertEqual(c.outbounds[0].kind, .loft(server: "front.example:443", carrier: "get", token: "0123",
                                                  tls: .insecure, serverName: "cdn.example"))
        XCTAssertEqual(c.outbounds[1].kind, .direct)
        XCTAssertEqual(c.outbounds[2].kind, .drop)
        XCTAssertEqual(c.outbounds[1].position, at(8, 5))
        XCTAssertNil(c.outbounds[0].stateFile)
    }

    /// `state-file` (type loft): kept resolved against the config file's folder.
    func testOutboundStateFile() {
        let yaml = "outbounds:\n  - name: a\n" + Self.loftOutbound + "    tls: { insecure: true }\n    state-file: %@\n"
        XCTAssertEqual(parseOK(yaml.replacingOccurrences(of: "%@", with: "home.state"), baseDirectory: "/etc/loft")?
            .outbounds.first?.stateFile, "/etc/loft/home.state")
        XCTAssertEqual(parseOK(yaml.replacingOccurrences(of: "%@", with: "/run/loft/home.state"), baseDirectory: "/etc/loft")?
            .outbounds.first?.stateFile, "/run/loft/home.state")
        assertError(yaml.replacingOccurrences(of: "%@", with: "/run/loft/"), at: 8, 17,
                    "outbounds[0].state-file must be a file path")
        assertError("outbounds:\n  - { name: a, type: direct, state-file: x }\n", at: 2, 30,
                    "key \"state-file\" in outbounds[0] is not for type direct; type direct takes only name and type")
    }

    /// `quic-max-packet` (type loft, carrier quic or h3): the largest UDP payload of the
    /// carrier; absent: path MTU discovery up to 1452.
    func testOutboundQuicMaxPacket() {
        let yaml = "outbounds:\n  - name: a\n" + Self.loftOutbound + "    tls: { insecure: true }\n"
        XCTAssertNil(parseOK(yaml)?.outbounds.first?.quicMaxPacket)
        XCTAssertEqual(parseOK(yaml + "    quic-max-packet: 8952\n")?.outbounds.first?.quicMaxPacket, 8952)
        XCTAssertEqual(parseOK(yaml.replacingOccurrences(of: "carrier: quic", with: "carrier: h3") + "    quic-max-packet: 1200\n")?
            .outbounds.first?.quicMaxPacket, 1200)
        assertError(yaml + "    quic-max-packet: 20000\n", at: 8, 22, "outbounds[0].quic-max-packet must be an integer from 1200 to 16384, got 20000")
        assertError(yaml + "    quic-max-packet: big\n", at: 8, 22, "outbounds[0].quic-max-packet must be an integer from 1200 to 16384")
        assertError(yaml.replacingOccurrences(of: "carrier: quic", with: "carrier: ws") + "    quic-max-packet: 8952\n", at: 8, 5,
                    "outbounds[0].quic-max-packet is for carrier quic or h3, not ws")
        assertError("outbounds:\n  - { name: a, type: vless, quic-max-packet: 8952 }\n", at: 2, 29,
                    "key \"quic-max-packet\" in outbounds[0] is not for type vless")
    }

    /// `resume-streams`, `resume-buffer` (type loft): replay (docs/protocol.md §8.1).
    func testOutboundResumeStreams() {
        let yaml = "outbounds:\n  - name: a\n" + Self.loftOutbound + "    tls: { insecure: true }\n"
        XCTAssertEqual(parseOK(yaml)?.outbounds.first?.resumeStreams, true)
        XCTAssertEqual(parseOK(yaml)?.outbounds.first?.resumeBuffer, 16 << 20)
        XCTAssertEqual(parseOK(yaml + "    resume-streams: false\n")?.outbounds.first?.resumeStreams, false)
        XCTAssertEqual(parseOK(yaml + "    resume-buffer: 33554432\n")?.outbounds.first?.resumeBuffer, 32 << 20)
        assertError(yaml + "    resume-buffer: 10\n", at: 8, 20, "outbounds[0].resume-buffer must be an integer from 4194304 to 1073741824")
        assertError("outbounds:\n  - { name: a, type: vless, resume-streams: true }\n", at: 2, 29,
                    "key \"resume-streams\" in outbounds[0] is not for type vless")
    }

    /// `mptcp` (types loft and vless): the TCP connections as Multipath TCP; absent: false. Not
    /// for the carriers over UDP, nor for sstp.
    func testOutboundMultipath() {
        let yaml = "outbounds:\n  - name: a\n" + Self.loftOutbound.replacingOccurrences(of: "carrier: quic", with: "carrier: ws")
            + "    tls: { insecure: true }\n"
        XCTAssertEqual(parseOK(yaml)?.outbounds.first?.mptcp, false)
        XCTAssertEqual(parseOK(yaml + "    mptcp: true\n")?.outbounds.first?.mptcp, true)
        XCTAssertEqual(parseOK(yaml.replacingOccurrences(of: "carrier: ws", with: "carrier: get") + "    mptcp: true\n")?.outbounds.first?.mptcp, true)
        XCTAssertEqual(parseOK(yaml.replacingOccurrences(of: "carrier: ws", with: "carrier: h2") + "    mptcp: yes\n")?.outbounds.first?.mptcp, true)
        XCTAssertEqual(parseOK(yaml.replacingOccurrences(of: "carrier: ws", with: "carrier: quic") + "    mptcp: false\n")?.outbounds.first?.mptcp, false)
        assertError(yaml.replacingOccurrences(of: "carrier: ws", with: "carrier: quic") + "    mptcp: true\n", at: 8, 5,
                    "outbounds[0].mptcp is for the carriers over TCP (ws, get, h2), not quic")
        assertError(yaml.replacingOccurrences(of: "carrier: ws", with: "carrier: h3") + "    mptcp: true\n", at: 8, 5,
                    "outbounds[0].mptcp is for the carriers over TCP (ws, get, h2), not h3")
        assertError(yaml + "    mptcp: maybe\n", at: 8, 12, "outbounds[0].mptcp must be")
        XCTAssertEqual(parseOK("outbounds:\n  - { name: v, type: vless, server: \"198.18.0.9:443\", uuid: 27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b, tls: { insecure: true }, mptcp: true }\n")?
            .outbounds.first?.mptcp, true)
        assertError("outbounds:\n  - { name: a, type: direct, mptcp: true }\n", at: 2, 30,
                    "key \"mptcp\" in outbounds[0] is not for type direct")
    }

    func testOutboundErrors() {
        assertError("outbounds:\n  - name: a\n" + Self.loftOutbound, at: 2, 5,
                    "outbounds[0] (a, type loft) is missing required key \"tls\"")
        assertError("outbounds:\n  - name: a\n    type: loft\n    tls: { insecure: true }\n", at: 2, 5,
                    "missing required key \"server\"")
        assertError("outbounds:\n  - type: direct\n", at: 2, 5, "outbounds[0] is missing required key \"name\"")
        assertError("outbounds:\n  - name: x\n", at: 2, 5, "missing required key \"type\"")
        assertError("outbounds:\n  - { name: direct, type: direct }\n", at: 2, 13,
                    "outbounds[0].name \"direct\" is reserved")
        assertError("outbounds:\n  - { name: drop, type: drop }\n", at: 2, 13, "\"drop\" is reserved")
        assertError("outbounds:\n  - { name: a, type: direct }\n  - { name: a, type: drop }\n", at: 3, 13,
                    "outbounds[1].name \"a\" is already used by outbounds[0] (line 2, column 5)")
        assertError("outbounds:\n  - { name: a, type: vmess }\n", at: 2, 22,
                    "outbounds[0].type must be loft, vless, sstp, direct or drop, got vmess")
        assertError("outbounds:\n  - { name: a, type: direct, carrier: ws }\n", at: 2, 30,
                    "key \"carrier\" in outbounds[0] is not for type direct")
        assertError("outbounds:\n  - name: a\n    type: loft\n    server: front.example\n", at: 4, 13,
                    "outbounds[0].server must be host:port", "got front.example")
        assertError("outbounds:\n  - name: a\n    type: loft\n    server: \"fd00::1:443\"\n", at: 4, 13,
                    "outbounds[0].server must be host:port")
        assertError("outbounds:\n  - name: a\n    type: loft\n    server: f.example:70000\n", at: 4, 13,
                    "outbounds[0].server")
        assertError("outbounds:\n  - name: a\n    type: loft\n    carrier: tcp\n", at: 4, 14,
                    "outbounds[0].carrier must be get, ws, h2, quic or h3, got tcp")
        assertError("outbounds:\n  - name: a\n    type: loft\n    token: \"\"\n", at: 4, 12,
                    "outbounds[0].token must be a non-empty string")
    }

    func testTLSErrors() {
        func with(_ tls: String) -> String { "outbounds:\n  - name: a\n" + Self.loftOutbound + "    tls: \(tls)\n" }
        assertError(with("{ server-name: f.example }"), at: 7, 10,
                    "outbounds[0].tls needs exactly one of ca, pin-sha256, system-ca: true, insecure: true")
        assertError(with("{ insecure: false }"), at: 7, 10, "needs exactly one of")
        assertError(with("{ ca: a.pem, insecure: true }"), at: 7, 23,
                    "outbounds[0].tls takes exactly one of ca, pin-sha256, system-ca: true, insecure: true; insecure is a second one")
        assertError(with("{ pin-sha256: abcd }"), at: 7, 24, "outbounds[0].tls.pin-sha256 must be 64 hex digits",
                    "got abcd")
        assertError(with("{ pin-sha256: \(String(repeating: "g", count: 64)) }"), at: 7, 24, "64 hex digits")
        assertError(with("{ insecure: yes-please }"), at: 7, 22, "outbounds[0].tls.insecure must be true or false")
        assertError(with("{ server-name: \"bad name\", insecure: true }"), at: 7, 25,
                    "outbounds[0].tls.server-name must be a DNS name")
        assertError(with("insecure"), at: 7, 10, "outbounds[0].tls must be a mapping")
        let pin = String(repeating: "aB", count: 32)
        guard let c = parseOK(with("{ pin-sha256: \(pin) }")) else { return }
        XCTAssertEqual(c.outbounds[0].kind, .loft(server: "front.example:443", carrier: "quic", token: "abc",
                                                  tls: .pinSHA256(pin.lowercased()), serverName: nil))
    }

    // MARK: Rules

    func testRuleFields() {
        guard let c = parseOK("""
            rules:
              - action: drop
                reset: true
                to: 10.0.0.0/8
                ports: [80, 443, "8000-8100", 9000-9001]
                network: udp
                domains: [Example.COM., "*.Example.org"]
              - { action: drop, reset: false }
              - { action: direct, to: [192.0.2.1, "2001:db8::/32"] }
              - { action: via, outbound: direct }
            """) else { return }
        XCTAssertEqual(c.rules[0], RuleSettings(action: .drop(reset: true), to: [prefix("10.0.0.0/8")],
                                                ports: [80...80, 443...443, 8000...8100, 9000...9001],
                                                network: "udp", domains: ["example.com", "*.example.org"],
                                                position: at(2, 5)))
        XCTAssertEqual(c.rules[1].action, .drop(reset: false))
        XCTAssertEqual(c.rules[1].to, [])
        XCTAssertEqual(c.rules[2].to, [prefix("192.0.2.1/32"), prefix("2001:db8::/32")])
        XCTAssertEqual(c.rules[3].action, .direct) // the reserved name is the built-in
    }

    func testRuleErrors() {
        assertError("rules:\n  - { to: [10.0.0.0/8] }\n", at: 2, 5,
                    "rules[0] is missing required key \"action\" (direct, drop or via)")
        assertError("rules:\n  - { action: forward }\n", at: 2, 15, "rules[0].action must be direct, drop or via, got forward")
        assertError("rules:\n  - { action: via }\n", at: 2, 5, "rules[0] has action via but no outbound")
        assertError("rules:\n  - { action: direct, outbound: x }\n", at: 2, 23, "rules[0].outbound is only for action via")
        assertError("rules:\n  - { action: direct, reset: true }\n", at: 2, 23, "rules[0].reset is only for action drop")
        assertError("rules:\n  - { action: drop, to: [10.0.0.0/8, 10.0.0.0/40] }\n", at: 2, 38,
                    "rules[0].to[1] must be an address or address/length", "got 10.0.0.0/40")
        assertError("rules:\n  - { action: drop, to: [] }\n", at: 2, 25, "rules[0].to is empty")
        assertError("rules:\n  - { action: drop, ports: [\"9000-8000\"] }\n", at: 2, 29,
                    "rules[0].ports[0] must be a port from 1 to 65535 or a range", "got \"9000-8000\"")
        assertError("rules:\n  - { action: drop, ports: [0] }\n", at: 2, 29, "rules[0].ports[0]")
        assertError("rules:\n  - { action: drop, ports: [1, 65536] }\n", at: 2, 32, "rules[0].ports[1]")
        assertError("rules:\n  - { action: drop, network: icmp }\n", at: 2, 30, "rules[0].network must be tcp or udp")
        assertError("rules:\n  - { action: drop, domains: [\"a..b\"] }\n", at: 2, 31, "rules[0].domains[0] must be a domain name")
        assertError("rules:\n  - { action: drop, domains: [\"a.*.b\"] }\n", at: 2, 31, "rules[0].domains[0]")
        assertError("rules:\n  - { action: drop, domains: [\"*\"] }\n", at: 2, 31, "rules[0].domains[0]")
    }

    func testViaMustNameAnOutbound() {
        // Reported at the rule, even when outbounds come after the rules.
        assertError("""
            rules:
              - { action: direct }
              - action: via
                outbound: hom
            outbounds:
              - { name: home, type: direct }
            """, at: 3, 5, "rules[1].outbound \"hom\" is not an outbound (defined: home)")
        assertError("rules:\n  - { action: via, outbound: x }\n", at: 2, 5, "no outbounds are defined")
        XCTAssertEqual(parseOK("rules:\n  - { action: via, outbound: home }\noutbounds:\n  - { name: home, type: direct }\n")?
                        .rules.first?.action, .via(outbound: "home"))
    }

    func testDefaultAction() {
        XCTAssertEqual(parseOK("default: drop")?.defaultAction, .drop(reset: false))
        XCTAssertEqual(parseOK("default: direct")?.defaultAction, .direct)
        XCTAssertEqual(parseOK("default: x\noutbounds: [{ name: x, type: drop }]")?.defaultAction, .via(outbound: "x"))
        assertError("outbounds: [{ name: x, type: drop }]\ndefault: y\n", at: 2, 10,
                    "default must be direct, drop or an outbound name, got \"y\" (defined: x)")
        assertError("default: [direct]\n", at: 1, 10, "default must be direct, drop or an outbound name, got a list")
    }
}
