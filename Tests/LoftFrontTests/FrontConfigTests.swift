import Foundation
import LoftConfig
import LoftCore
import XCTest

final class FrontConfigTests: XCTestCase {
    static let minimal = """
        listen: 0.0.0.0:8443
        tls: { certificate: server.pem, key: server.key }
        tokens: ["secret-1"]
        pool: { ipv4: 198.18.64.0/24 }

        """

    private func parse(_ text: String, base: String = ".", checkFiles: Bool = false) throws(ConfigError) -> FrontSettings {
        try FrontConfigLoader.parse(text, file: "front.yaml", baseDirectory: base, checkFiles: checkFiles)
    }

    private func assertError(_ text: String, at line: Int, _ column: Int, _ fragments: String..., base: String = ".",
                             checkFiles: Bool = false, file: StaticString = #filePath, sourceLine: UInt = #line) {
        do {
            let s = try parse(text, base: base, checkFiles: checkFiles)
            XCTFail("expected an error, got \(s)", file: file, line: sourceLine)
        } catch {
            XCTAssertEqual(error.position, SourcePosition(file: "front.yaml", line: line, column: column),
                           "error was: \(error)", file: file, line: sourceLine)
            for f in fragments {
                XCTAssertTrue(error.message.contains(f), "\"\(error.message)\" lacks \"\(f)\"", file: file, line: sourceLine)
            }
            XCTAssertTrue(error.description.hasPrefix("front.yaml:\(line):\(column): "), error.description,
                          file: file, line: sourceLine)
        }
    }

    func testMinimalConfigGetsTheDefaults() throws {
        let s = try parse(Self.minimal, base: "/etc/loft")
        XCTAssertEqual(s.listen, Endpoint("0.0.0.0:8443"))
        XCTAssertEqual(s.path, "/loft")
        XCTAssertEqual(s.carriers, [.ws, .get, .h2])
        XCTAssertEqual(s.certificateFile, "/etc/loft/server.pem")
        XCTAssertEqual(s.keyFile, "/etc/loft/server.key")
        XCTAssertEqual(s.tokens, ["secret-1"])
        XCTAssertEqual(s.pool, FrontPoolSettings(ipv4: IPPrefix("198.18.64.0/24")!))
        XCTAssertEqual(s.mtu, 1400)
        XCTAssertEqual(s.dns, [])
        XCTAssertEqual(s.keepalive, .seconds(10))
        XCTAssertEqual(s.instanceExpiry, .seconds(600))
        XCTAssertEqual(s.maxSessions, 1024)
        XCTAssertEqual(s.maxStreams, 16384)
        XCTAssertEqual(s.connectTimeout, .seconds(10))
        XCTAssertNil(s.control)
        XCTAssertEqual(s.log, .info)
        XCTAssertNil(s.stateFile)
        XCTAssertEqual(s.udpIdleTimeout, .seconds(60))
    }

    func testStateFileAndUDPIdleTimeout() throws {
        let s = try parse(Self.minimal + "state-file: state/front.state\nudp-idle-timeout: 90s\n", base: "/etc/loft")
        XCTAssertEqual(s.stateFile, "/etc/loft/state/front.state")
        XCTAssertEqual(s.udpIdleTimeout, .seconds(90))
        XCTAssertEqual(try parse(Self.minimal + "state-file: /var/lib/loft/front.state\n", base: "/etc/loft").stateFile,
                       "/var/lib/loft/front.state")
        XCTAssertEqual(try parse(Self.minimal + "udp-idle-timeout: 1h\n").udpIdleTimeout, .seconds(3600))
        let m = Self.minimal
        assertError(m + "state-file: [a]\n", at: 5, 13, "state-file must be a non-empty string")
        assertError(m + "state-file: \"\"\n", at: 5, 13, "state-file must be a non-empty string")
        assertError(m + "state-file: state/\n", at: 5, 13, "state-file must be a file path")
        assertError(m + "udp-idle-timeout: 500ms\n", at: 5, 19, "udp-idle-timeout must be a duration from 1s to 1h", "got 500ms")
        assertError(m + "udp-idle-timeout: 2h\n", at: 5, 19, "udp-idle-timeout must be a duration from 1s to 1h")
        assertError(m + "state-files: x\n", at: 5, 1, "unknown key \"state-files\"", "did you mean \"state-file\"?")
        assertError(m + "state-file: a\nstate-file: b\n", at: 6, 1, "duplicate key \"state-file\"")
    }

    func testQuicRetry() throws {
        XCTAssertEqual(try parse(Self.minimal).quicRetry, .auto)
        XCTAssertEqual(try parse(Self.minimal + "quic-retry: always\n").quicRetry, .always)
        XCTAssertEqual(try parse(Self.minimal + "quic-retry: never\n").quicRetry, .never)
        XCTAssertEqual(try parse(Self.minimal + "quic-retry: auto\n").quicRetry, .auto)
        XCTAssertEqual(try parse(Self.minimal + "quic-retry: 8\n").quicRetry, .threshold(8))
        let m = Self.minimal
        assertError(m + "quic-retry: 0\n", at: 5, 13, "quic-retry must be auto, always, never or a number of handshakes 1...1000000", "got 0")
        assertError(m + "quic-retry: sometimes\n", at: 5, 13, "quic-retry must be")
    }

    /// `resume-grace`, `resume-buffer`, `resume-budget`: replay (docs/protocol.md §8.1).
    func testResumeKeys() throws {
        let m = Self.minimal
        let d = try parse(m)
        XCTAssertEqual(d.resumeGrace, .seconds(30))
        XCTAssertEqual(d.resumeBuffer, 16 << 20)
        XCTAssertEqual(d.resumeBudget, 256 << 20)
        XCTAssertEqual(try parse(m + "resume-grace: 0s\n").resumeGrace, .zero)
        XCTAssertEqual(try parse(m + "resume-grace: 2m\n").resumeGrace, .seconds(120))
        XCTAssertEqual(try parse(m + "resume-buffer: 8388608\nresume-budget: 1073741824\n").resumeBuffer, 8 << 20)
        assertError(m + "resume-grace: 2h\n", at: 5, 15, "resume-grace must be a duration from 0s to 1h")
        assertError(m + "resume-buffer: 1000\n", at: 5, 16, "resume-buffer must be an integer from 4194304 to 1073741824", "got 1000")
        assertError(m + "resume-budget: lots\n", at: 5, 16, "resume-budget must be an integer")
    }

    /// `mptcp`: the TCP listener takes Multipath TCP (absent: false).
    func testMultipath() throws {
        let m = Self.minimal
        XCTAssertFalse(try parse(m).mptcp)
        XCTAssertTrue(try parse(m + "mptcp: true\n").mptcp)
        XCTAssertFalse(try parse(m + "mptcp: off\n").mptcp)
        assertError(m + "mptcp: both\n", at: 5, 8, "mptcp must be true or false, got")
    }

    /// `quic-max-packet`: the quic and h3 carriers' largest UDP payload (absent: path MTU
    /// discovery up to 1452); only with quic or h3 in `carriers`.
    func testQuicMaxPacket() throws {
        let m = Self.minimal
        XCTAssertNil(try parse(m).quicMaxPacket)
        XCTAssertEqual(try parse(m + "carriers: [quic]\nquic-max-packet: 8952\n").quicMaxPacket, 8952)
        XCTAssertEqual(try parse(m + "carriers: [ws, h3]\nquic-max-packet: 1200\n").quicMaxPacket, 1200)
        XCTAssertEqual(try parse(m + "carriers: [quic]\nquic-max-packet: 16_384\n").quicMaxPacket, 16384)
        assertError(m + "carriers: [quic]\nquic-max-packet: 1199\n", at: 6, 18, "quic-max-packet must be an integer from 1200 to 16384", "got 1199")
        assertError(m + "carriers: [quic]\nquic-max-packet: 65000\n", at: 6, 18, "quic-max-packet must be an integer from 1200 to 16384")
        assertError(m + "quic-max-packet: 8952\n", at: 5, 1, "quic-max-packet is for the quic and h3 carriers; carriers lists neither")
    }

    func testFullExample() throws {
        let s = try parse("""
            log: debug
            listen: 127.0.0.1:8443
            path: /loft
            carriers: [ws]
            tls: { certificate: /pki/server.pem, key: /pki/server.key }
            tokens: ["secret-1", "secret-2"]
            pool:
              ipv4: 198.18.64.0/24
              ipv6: fd00:64::/64
            mtu: 1400
            dns: [198.18.1.2, "fd00:1::2"]
            keepalive: 5s
            instance-expiry: 10m
            max-sessions: 10
            max-streams: 100
            connect-timeout: 3s
            control: /run/loft/front.sock
            """)
        XCTAssertEqual(s.log, .debug)
        XCTAssertEqual(s.carriers, [.ws])
        XCTAssertEqual(s.certificateFile, "/pki/server.pem")
        XCTAssertEqual(s.tokens, ["secret-1", "secret-2"])
        XCTAssertEqual(s.pool.ipv6, IPPrefix("fd00:64::/64"))
        XCTAssertEqual(s.dns, [IPAddress("198.18.1.2")!, IPAddress("fd00:1::2")!])
        XCTAssertEqual(s.keepalive, .seconds(5))
        XCTAssertEqual(s.instanceExpiry, .seconds(600))
        XCTAssertEqual(s.maxSessions, 10)
        XCTAssertEqual(s.maxStreams, 100)
        XCTAssertEqual(s.connectTimeout, .seconds(3))
        XCTAssertEqual(s.control, "/run/loft/front.sock")
    }

    func testUnknownKeysArePlacedExactly() {
        assertError(Self.minimal + "max-session: 5\n", at: 5, 1, "unknown key \"max-session\" at the top level",
                    "did you mean \"max-sessions\"?")
        assertError(Self.minimal.replacingOccurrences(of: "key: server.key", with: "keys: server.key"), at: 2, 33,
                    "unknown key \"keys\" in tls", "did you mean \"key\"?")
        assertError(Self.minimal.replacingOccurrences(of: "{ ipv4: 198.18.64.0/24 }", with: "{ ipv4: 198.18.64.0/24, ip6: x }"),
                    at: 4, 31, "unknown key \"ip6\" in pool")
    }

    func testMissingRequiredKeys() {
        assertError("listen: 0.0.0.0:8443\n", at: 1, 1, "missing required key \"tls\"")
        assertError("tokens: [a]\n", at: 1, 1, "missing required key \"listen\"")
        assertError(Self.minimal.replacingOccurrences(of: "tokens: [\"secret-1\"]\n", with: ""), at: 1, 1,
                    "missing required key \"tokens\"")
        assertError(Self.minimal.replacingOccurrences(of: "pool: { ipv4: 198.18.64.0/24 }\n", with: ""), at: 1, 1,
                    "missing required key \"pool\"")
        assertError(Self.minimal.replacingOccurrences(of: "{ ipv4: 198.18.64.0/24 }", with: "{ ipv6: \"fd00::/64\" }"),
                    at: 4, 7, "pool is missing required key \"ipv4\"")
        assertError(Self.minimal.replacingOccurrences(of: "key: server.key", with: "certificate: b"), at: 2, 33,
                    "duplicate key \"certificate\" in tls")
        assertError(Self.minimal.replacingOccurrences(of: ", key: server.key", with: ""), at: 2, 6,
                    "tls is missing required key \"key\"")
        XCTAssertThrowsError(try parse("")) { e in
            XCTAssertTrue("\(e)".contains("front.yaml: the front configuration is empty"), "\(e)")
        }
    }

    func testQuicAndH3OnOnePort() throws {
        XCTAssertEqual(try parse(Self.minimal + "carriers: [h2, quic, h3]\n").carriers, [.h2, .quic, .h3])
        XCTAssertEqual(try parse(Self.minimal + "carriers: [h3]\n").carriers, [.h3])
    }

    func testBadValues() {
        let m = Self.minimal
        assertError(m.replacingOccurrences(of: "0.0.0.0:8443", with: "localhost:8443"), at: 1, 9, "listen must be address:port")
        assertError(m.replacingOccurrences(of: "0.0.0.0:8443", with: "0.0.0.0:0"), at: 1, 9, "needs a port")
        assertError(m + "path: loft\n", at: 5, 7, "path must start with /")
        assertError(m + "path: \"/a?b\"\n", at: 5, 7, "path must start with /")
        assertError(m + "carriers: [ws, h4]\n", at: 5, 16, "carriers[1] must be ws, get, h2, quic or h3, got h4")
        assertError(m + "carriers: [ws, ws]\n", at: 5, 16, "carriers[1] repeats ws")
        assertError(m + "carriers: []\n", at: 5, 11, "carriers is empty")
        assertError(m.replacingOccurrences(of: "[\"secret-1\"]", with: "[\"a\", \"a\"]"), at: 3, 15,
                    "tokens[1] repeats a token first given at front.yaml:3:10")
        assertError(m.replacingOccurrences(of: "[\"secret-1\"]", with: "[\"\(String(repeating: "x", count: 256))\"]"),
                    at: 3, 10, "tokens[0] must be 1 to 255 bytes")
        assertError(m.replacingOccurrences(of: "[\"secret-1\"]", with: "[]"), at: 1, 1, "no tokens are given")
        assertError(m.replacingOccurrences(of: "198.18.64.0/24", with: "198.18.64.1/24"), at: 4, 15,
                    "pool.ipv4 has host bits set; did you mean 198.18.64.0/24?")
        assertError(m.replacingOccurrences(of: "198.18.64.0/24", with: "198.18.64.0/31"), at: 4, 15,
                    "pool.ipv4 must have a length from 8 to 30")
        assertError(m.replacingOccurrences(of: "198.18.64.0/24", with: "fd00::/64"), at: 4, 15,
                    "pool.ipv4 must be an IPv4 network/length")
        assertError(m.replacingOccurrences(of: "{ ipv4: 198.18.64.0/24 }", with: "{ ipv4: 198.18.64.0/24, ipv6: \"fd00::/127\" }"),
                    at: 4, 37, "pool.ipv6 must have a length from 64 to 126")
        assertError(m + "mtu: 500\n", at: 5, 6, "mtu must be an integer from 576 to 65535, got 500")
        assertError(m.replacingOccurrences(of: "{ ipv4: 198.18.64.0/24 }", with: "{ ipv4: 198.18.64.0/24, ipv6: \"fd00::/64\" }")
                    + "mtu: 1000\n", at: 5, 6, "mtu must be at least 1280 with an IPv6 pool")
        assertError(m + "dns: [1.1.1.1, one]\n", at: 5, 16, "dns[1] must be an IPv4 or IPv6 address, got one")
        assertError(m + "keepalive: 0s\n", at: 5, 12, "keepalive must be a duration from 1s to 5m")
        assertError(m + "instance-expiry: forever\n", at: 5, 18, "instance-expiry must be a duration")
        assertError(m + "max-sessions: 0\n", at: 5, 15, "max-sessions must be an integer from 1 to 1000000")
        assertError(m + "max-streams: many\n", at: 5, 14, "max-streams must be an integer from 1 to 65536")
        assertError(m + "log: loud\n", at: 5, 6, "log must be error, warn, info or debug")
        assertError(m + "control: /\(String(repeating: "s", count: 120))\n", at: 5, 10, "control must be a socket path of at most 107 bytes")
        assertError("- listen\n", at: 1, 1, "must be a mapping")
        assertError("listen: [\n", at: 2, 1)
    }

    func testControlOff() throws {
        XCTAssertNil(try parse(Self.minimal + "control: off\n").control)
    }

    func testFilesAreCheckedAndTokensFileIsRead() throws {
        let dir = NSTemporaryDirectory() + "loft-front-config-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        assertError(Self.minimal, at: 2, 21, "tls.certificate: cannot read \"\(dir)/server.pem\"", base: dir, checkFiles: true)
        _ = FileManager.default.createFile(atPath: dir + "/server.pem", contents: Data("x".utf8))
        _ = FileManager.default.createFile(atPath: dir + "/server.key", contents: Data("x".utf8))
        XCTAssertEqual(try parse(Self.minimal, base: dir, checkFiles: true).keyFile, dir + "/server.key")

        _ = FileManager.default.createFile(atPath: dir + "/tokens", contents: Data("# clients\nalpha\n\n  beta  \n".utf8))
        let withFile = Self.minimal.replacingOccurrences(of: "tokens: [\"secret-1\"]", with: "tokens-file: tokens")
        XCTAssertEqual(try parse(withFile, base: dir).tokens, ["alpha", "beta"])
        let both = Self.minimal + "tokens-file: tokens\n"
        XCTAssertEqual(try parse(both, base: dir).tokens, ["secret-1", "alpha", "beta"])

        _ = FileManager.default.createFile(atPath: dir + "/tokens", contents: Data("alpha\nsecret-1\n".utf8))
        do {
            _ = try parse(both, base: dir)
            XCTFail("a repeated token must fail")
        } catch {
            XCTAssertEqual(error.position, SourcePosition(file: dir + "/tokens", line: 2, column: 1), "\(error)")
            XCTAssertTrue(error.message.contains("repeats a token first given at front.yaml:3:10"), error.message)
        }
        assertError(Self.minimal + "tokens-file: missing\n", at: 5, 14, "tokens-file: cannot read", base: dir)
    }
}
