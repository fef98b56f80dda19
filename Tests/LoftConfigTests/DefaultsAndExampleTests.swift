import XCTest
import LoftCore
@testable import LoftConfig

final class DefaultsAndExampleTests: XCTestCase {
    func testBuiltInDefault() {
        let c = Configuration.builtInDefault
        XCTAssertEqual(c.log, .info)
        XCTAssertNil(c.tun)
        XCTAssertEqual(c.socks5, Socks5Settings(listen: endpoint("127.0.0.1:11080"), maxClients: 1024))
        XCTAssertEqual(c.bridge, BridgeSettings(peerPort: 9090, extensionPort: 9091, mtu: 1500))
        XCTAssertEqual(c.outbounds, [])
        XCTAssertEqual(c.rules, [])
        XCTAssertEqual(c.defaultAction, .direct)
        XCTAssertFalse(c.hold)
        XCTAssertEqual(c.control, "/run/loft/control.sock")
        XCTAssertEqual(c.limits.maxFlows, 16384)
        XCTAssertEqual(c.limits.connectTimeout, .seconds(10))
        XCTAssertEqual(c.limits.tcpIdleTimeout, .seconds(7200))
        XCTAssertEqual(c.limits.udpIdleTimeout, .seconds(60))
        XCTAssertNil(c.metrics)
    }

    func testEmptyAndCommentOnlyFilesAreTheDefault() {
        for text in ["", "\n\n", "# only a comment\n", "# a\n\n   # b\n", "---\n", "~\n", "---\n# c\n...\n"] {
            XCTAssertEqual(parseOK(text), .builtInDefault, "for \(Values.quote(text))")
        }
    }

    func testTunDefaults() {
        let t = TunSettings()
        XCTAssertEqual(t.name, "loft0")
        XCTAssertNil(t.netns)
        XCTAssertEqual(t.mtu, 1500)
        XCTAssertEqual(t.ipv4, prefix("198.18.0.1/30"))
        XCTAssertEqual(t.ipv6, prefix("fd00:18::1/126"))
        XCTAssertTrue(t.routeAll)
        XCTAssertEqual(t.dns, [])
        XCTAssertEqual(t.icmp, .reply)
        XCTAssertEqual(parseOK("tun: {}\n")?.tun, t)
        XCTAssertEqual(parseOK("tun:\n")?.tun, t)
        XCTAssertEqual(parseOK("tun: on\n")?.tun, t)
        XCTAssertNil(parseOK("tun: off\n")?.tun)
    }

    func testPartialSectionsKeepDefaultsForMissingKeys() {
        guard let c = parseOK("""
            tun:
              mtu: 9000
            socks5:
              max-clients: 4096
            bridge: { mtu: 1400 }
            limits:
              max-flows: 100
            """) else { return }
        XCTAssertEqual(c.tun, TunSettings(mtu: 9000))
        XCTAssertEqual(c.socks5, Socks5Settings(maxClients: 4096))
        XCTAssertEqual(c.bridge, BridgeSettings(mtu: 1400))
        XCTAssertEqual(c.limits, LimitSettings(maxFlows: 100))
        XCTAssertEqual(c.log, .info)
        XCTAssertEqual(c.defaultAction, .direct)
    }

    static let example = """
        log: debug                   # error | warn | info | debug
        tun:                         # absent: no TUN
          name: loft0
          netns: app                 # optional: TUN inside this namespace (created if missing)
          mtu: 1500
          ipv4: 198.18.0.1/30        # replaced by the holder's Status when a session is up
          ipv6: fd00:18::1/126
          route-all: true            # default routes (v4, v6) into the TUN; false: only the TUN subnet
          dns: [198.18.0.2, "fd00:18::2"]
          icmp: reply                # reply (answered locally) | drop
        socks5:
          listen: 127.0.0.1:11080    # loopback only
          max-clients: 1024          # 128 … 65536
        bridge:
          peer-port: 9090            # the other process binds 127.0.0.1:9090
          extension-port: 9091       # loft binds 127.0.0.1:9091 and connects to the peer
        outbounds:
          - name: home
            type: loft               # loft | direct | drop (later sstp | vless)
            server: 198.18.7.1:8443
            carrier: ws              # get | ws | h2 | quic | h3
            token: "s3cr3t-token"
            tls: { server-name: front.test, ca: certs/ca.pem }   # or pin-sha256, or insecure: true
          - name: lab
            type: loft
            server: "[fd00::7]:443"
            carrier: h3
            token: t2
            tls: { pin-sha256: 0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789ABCDEF }
          - name: blackhole
            type: drop
        rules:                       # first match wins
          - { action: drop,   to: [198.18.99.0/24] }
          - { action: direct, to: [198.18.1.0/24] }
          - { action: drop, reset: true, ports: [25, "6660-6669"], network: tcp }
          - { action: via, outbound: lab, domains: [Lab.Example, "*.lab.example"] }
          - { action: via, outbound: home, to: [0.0.0.0/0, "::/0"] }
        default: home                # when no rule matches
        hold: true                   # fail-closed when the holder's session is down
        control: /run/loft/test.sock
        limits:
          max-flows: 50000
          connect-timeout: 1500ms
          tcp-idle-timeout: 1h
          udp-idle-timeout: 30
        metrics: 127.0.0.1:9100
        """

    func testFullExample() {
        guard let c = parseOK(Self.example, baseDirectory: "/etc/loft") else { return }
        XCTAssertEqual(c.log, .debug)
        XCTAssertEqual(c.tun, TunSettings(name: "loft0", netns: "app", mtu: 1500,
                                          ipv4: prefix("198.18.0.1/30"), ipv6: prefix("fd00:18::1/126"),
                                          routeAll: true, dns: [ip("198.18.0.2"), ip("fd00:18::2")],
                                          icmp: .reply))
        XCTAssertEqual(c.socks5, Socks5Settings(listen: endpoint("127.0.0.1:11080"), maxClients: 1024))
        XCTAssertEqual(c.bridge, BridgeSettings(peerPort: 9090, extensionPort: 9091, mtu: 1500))
        XCTAssertEqual(c.outbounds, [
            OutboundSettings(name: "home",
                             kind: .loft(server: "198.18.7.1:8443", carrier: "ws", token: "s3cr3t-token",
                                         tls: .caFile("/etc/loft/certs/ca.pem"), serverName: "front.test"),
                             position: at(18, 5)),
            OutboundSettings(name: "lab",
                             kind: .loft(server: "[fd00::7]:443", carrier: "h3", token: "t2",
                                         tls: .pinSHA256("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
                                         serverName: nil),
                             position: at(24, 5)),
            OutboundSettings(name: "blackhole", kind: .drop, position: at(30, 5)),
        ])
        XCTAssertEqual(c.rules, [
            RuleSettings(action: .drop(reset: false), to: [prefix("198.18.99.0/24")], position: at(33, 5)),
            RuleSettings(action: .direct, to: [prefix("198.18.1.0/24")], position: at(34, 5)),
            RuleSettings(action: .drop(reset: true), ports: [25...25, 6660...6669], network: "tcp",
                         position: at(35, 5)),
            RuleSettings(action: .via(outbound: "lab"), domains: ["lab.example", "*.lab.example"],
                         position: at(36, 5)),
            RuleSettings(action: .via(outbound: "home"), to: [prefix("0.0.0.0/0"), prefix("::/0")],
                         position: at(37, 5)),
        ])
        XCTAssertEqual(c.defaultAction, .via(outbound: "home"))
        XCTAssertTrue(c.hold)
        XCTAssertEqual(c.control, "/run/loft/test.sock")
        XCTAssertEqual(c.limits, LimitSettings(maxFlows: 50000, connectTimeout: .milliseconds(1500),
                                               tcpIdleTimeout: .seconds(3600), udpIdleTimeout: .seconds(30)))
        XCTAssertEqual(c.metrics, endpoint("127.0.0.1:9100"))
    }

    func testDesignExampleVerbatim() {
        // The outline in the design notes, as written there.
        let text = """
            log: info
            tun:
              name: loft0
              netns: app
              mtu: 1500
              ipv4: 198.18.0.1/30
              ipv6: fd00:18::1/126
              route-all: true
              dns: [1.1.1.1, 1.0.0.1]
              icmp: reply
            socks5:
              listen: 127.0.0.1:11080
              max-clients: 1024
            bridge:
              peer-port: 9090
              extension-port: 9091
            outbounds:
              - name: home
                type: loft
                server: 127.0.0.1:8443
                carrier: ws
                token: "…"
                tls: { server-name: front.test, ca: certs/ca.pem }
            rules:
              - { action: drop,   to: [198.18.99.0/24] }
              - { action: direct, to: [198.18.1.0/24] }
              - { action: via, outbound: home, to: [0.0.0.0/0, "::/0"] }
            default: direct
            hold: false
            control: /run/loft/control.sock
            """
        guard let c = parseOK(text) else { return }
        XCTAssertEqual(c.tun?.dns, [ip("1.1.1.1"), ip("1.0.0.1")])
        XCTAssertEqual(c.outbounds.first?.kind,
                       .loft(server: "127.0.0.1:8443", carrier: "ws", token: "…",
                             tls: .caFile("certs/ca.pem"), serverName: "front.test"))
        XCTAssertEqual(c.rules.map(\.action), [.drop(reset: false), .direct, .via(outbound: "home")])
        XCTAssertEqual(c.defaultAction, .direct)
        XCTAssertEqual(c.limits, LimitSettings())
        XCTAssertNil(c.metrics)
    }

    func testLogLevelsAreOrdered() {
        XCTAssertTrue(LogLevel.error < .warn && LogLevel.warn < .info && LogLevel.info < .debug)
        XCTAssertEqual(LogLevel.allCases.sorted(), [.error, .warn, .info, .debug])
        for level in LogLevel.allCases {
            XCTAssertEqual(parseOK("log: \(level.rawValue)")?.log, level)
        }
    }

    func testSourcePositionAndErrorDescriptions() {
        XCTAssertEqual(at(3, 7, "a.yaml").description, "a.yaml:3:7")
        XCTAssertEqual(ConfigError(position: at(3, 7, "a.yaml"), message: "bad").description, "a.yaml:3:7: bad")
        XCTAssertEqual(ConfigError(file: "a.yaml", message: "cannot read: x").description, "a.yaml: cannot read: x")
    }
}
