import XCTest
import LoftCore
@testable import LoftConfig

final class DurationTests: XCTestCase {
    func testDurationForms() {
        XCTAssertEqual(Values.parseDuration("30", plain: true), .seconds(30))
        XCTAssertEqual(Values.parseDuration("500ms", plain: true), .milliseconds(500))
        XCTAssertEqual(Values.parseDuration("10s", plain: true), .seconds(10))
        XCTAssertEqual(Values.parseDuration("5m", plain: false), .seconds(300))
        XCTAssertEqual(Values.parseDuration("2h", plain: true), .seconds(7200))
        XCTAssertEqual(Values.parseDuration("7d", plain: true), .seconds(7 * 86_400))
        XCTAssertEqual(Values.parseDuration("0s", plain: true), .zero)
        for bad in ["", "s", "10 s", "1.5s", "-5s", "5x", "ms", "1h30m", "+5s", "99999999999999999999d", "-1"] {
            XCTAssertNil(Values.parseDuration(bad, plain: true), bad)
        }
        XCTAssertNil(Values.parseDuration("30", plain: false), "quoted bare numbers are text, not seconds")
    }

    func testDurationFormatting() {
        XCTAssertEqual(Values.format(.milliseconds(100)), "100ms")
        XCTAssertEqual(Values.format(.milliseconds(1500)), "1500ms")
        XCTAssertEqual(Values.format(.seconds(10)), "10s")
        XCTAssertEqual(Values.format(.seconds(300)), "5m")
        XCTAssertEqual(Values.format(.seconds(7200)), "2h")
        XCTAssertEqual(Values.format(.seconds(7 * 86_400)), "7d")
        XCTAssertEqual(Values.format(.zero), "0s")
    }

    func testLimitsDurations() {
        guard let c = parseOK("""
            limits:
              connect-timeout: 100ms
              tcp-idle-timeout: 7d
              udp-idle-timeout: 1d
            """) else { return }
        XCTAssertEqual(c.limits.connectTimeout, .milliseconds(100))
        XCTAssertEqual(c.limits.tcpIdleTimeout, .seconds(604_800))
        XCTAssertEqual(c.limits.udpIdleTimeout, .seconds(86_400))
        XCTAssertEqual(parseOK("limits: { connect-timeout: 5m, tcp-idle-timeout: 1, udp-idle-timeout: \"1s\" }")?.limits,
                       LimitSettings(connectTimeout: .seconds(300), tcpIdleTimeout: .seconds(1), udpIdleTimeout: .seconds(1)))
        XCTAssertEqual(parseOK("limits:\n")?.limits, LimitSettings())
    }

    func testLimitsRanges() {
        assertError("limits:\n  connect-timeout: 99ms\n", at: 2, 20,
                    "limits.connect-timeout must be a duration from 100ms to 5m", "got 99ms")
        assertError("limits:\n  connect-timeout: 301\n", at: 2, 20, "limits.connect-timeout", "got 301")
        assertError("limits:\n  tcp-idle-timeout: 8d\n", at: 2, 21, "limits.tcp-idle-timeout must be a duration from 1s to 7d")
        assertError("limits:\n  tcp-idle-timeout: 0\n", at: 2, 21, "limits.tcp-idle-timeout")
        assertError("limits:\n  udp-idle-timeout: 86401\n", at: 2, 21, "limits.udp-idle-timeout must be a duration from 1s to 1d")
        assertError("limits:\n  udp-idle-timeout: 1.5s\n", at: 2, 21, "ms, s, m, h or d", "got 1.5s")
        assertError("limits:\n  udp-idle-timeout: \"30\"\n", at: 2, 21, "limits.udp-idle-timeout", "got \"30\"")
        assertError("limits:\n  max-flows: 15\n", at: 2, 14, "limits.max-flows must be an integer from 16 to 1000000, got 15")
        assertError("limits:\n  max-flows: 1_000_001\n", at: 2, 14, "limits.max-flows")
        XCTAssertEqual(parseOK("limits: { max-flows: 1_000_000 }")?.limits.maxFlows, 1_000_000)
        XCTAssertEqual(parseOK("limits: { max-flows: 16 }")?.limits.maxFlows, 16)
        assertError("limits: off\n", at: 1, 9, "limits must be a mapping")
    }
}

final class ToFileTests: XCTestCase {
    func testToFileWithAThousandPrefixes() {
        let dir = temporaryDirectory(self)
        var text = "# destinations for the lab\n\n"
        var expected: [IPPrefix] = []
        for i in 0..<1000 {
            if i % 100 == 0 { text += "# block \(i / 100)\n   \n" }
            if i % 2 == 0 {
                text += "198.\(18 + i / 256).\(i % 256).0/24\n"
                expected.append(prefix("198.\(18 + i / 256).\(i % 256).0/24"))
            } else {
                text += "  fd00:\(String(i, radix: 16))::/64   # v6 \(i)\r\n"
                expected.append(prefix("fd00:\(String(i, radix: 16))::/64"))
            }
        }
        XCTAssertEqual(mkdir(dir + "/lists", 0o755), 0)
        writeFile(dir + "/lists/lab.txt", text)

        let yaml = "rules:\n  - action: drop\n    to: [203.0.113.0/24]\n    to-file: lists/lab.txt\n"
        guard let c = parseOK(yaml, baseDirectory: dir) else { return }
        XCTAssertEqual(c.rules.count, 1)
        XCTAssertEqual(c.rules[0].to.count, 1001)
        XCTAssertEqual(c.rules[0].to.first, prefix("203.0.113.0/24"))
        XCTAssertEqual(Array(c.rules[0].to.dropFirst()), expected)

        // An absolute path works from any base directory.
        let absolute = "rules:\n  - { action: direct, to-file: \(dir)/lists/lab.txt }\n"
        XCTAssertEqual(parseOK(absolute, baseDirectory: "/nowhere")?.rules.first?.to, expected)
    }

    func testBadLineIsReportedInTheListFile() {
        let dir = temporaryDirectory(self)
        var text = "# header\n"
        for i in 0..<500 { text += "10.\(i / 256).\(i % 256).0/24\n" }
        text += "10.9.9.0/24 # fine\n"
        text += "  not-a-prefix  # oops\n"   // line 503
        text += "10.1.1.0/24\n"
        writeFile(dir + "/nets.txt", text)
        let yaml = "log: info\nrules:\n  - { action: drop, to-file: nets.txt }\n"
        guard let error = parseError(yaml, baseDirectory: dir) else { return }
        XCTAssertEqual(error.position, SourcePosition(file: dir + "/nets.txt", line: 503, column: 1))
        XCTAssertTrue(error.description.hasPrefix("\(dir)/nets.txt:503:1: bad prefix \"not-a-prefix\""), error.description)
        XCTAssertTrue(error.message.contains("rules[0].to-file at test.yaml:3:30"), error.message)
    }

    func testMissingOrEmptyListFile() {
        let dir = temporaryDirectory(self)
        assertError("rules:\n  - { action: drop, to-file: missing.txt }\n", at: 2, 30,
                    "rules[0].to-file: cannot read \"\(dir)/missing.txt\": No such file or directory",
                    baseDirectory: dir)
        writeFile(dir + "/empty.txt", "# nothing yet\n\n")
        assertError("rules:\n  - { action: drop, to-file: empty.txt }\n", at: 2, 30,
                    "rules[0].to-file lists no prefixes", baseDirectory: dir)
        // A FIFO (or any file that is not a plain one) is refused, never read: `loft reload`
        // reads lists on the running loop, where a FIFO would block it.
        XCTAssertEqual(mkfifo(dir + "/fifo.txt", 0o600), 0)
        assertError("rules:\n  - { action: drop, to-file: fifo.txt }\n", at: 2, 30,
                    "rules[0].to-file: cannot read \"\(dir)/fifo.txt\": not a regular file", baseDirectory: dir)
        assertError("rules:\n  - { action: drop, to-file: /dev/null }\n", at: 2, 30,
                    "not a regular file", baseDirectory: dir)
        // With `to:` entries as well, an empty file is fine.
        XCTAssertEqual(parseOK("rules:\n  - { action: drop, to: 10.0.0.0/8, to-file: empty.txt }\n",
                               baseDirectory: dir)?.rules.first?.to, [prefix("10.0.0.0/8")])
    }
}

final class YAMLTreeTests: XCTestCase {
    func testTreeShapeAndPositions() throws {
        let root = try XCTUnwrap(try YAML.parse("a: 1\nb:\n  - x\n  - 'y'\nc: { d: \"e\" }\n", file: "f.yaml"))
        XCTAssertEqual(root.position, SourcePosition(file: "f.yaml", line: 1, column: 1))
        guard case .mapping(let pairs) = root.value else { return XCTFail("not a mapping") }
        XCTAssertEqual(pairs.map { $0.key.scalar }, ["a", "b", "c"])
        XCTAssertEqual(pairs[0].value, YAMLNode(.scalar("1", plain: true), at: SourcePosition(file: "f.yaml", line: 1, column: 4)))
        XCTAssertEqual(pairs[1].value, YAMLNode(.sequence([
            YAMLNode(.scalar("x", plain: true), at: SourcePosition(file: "f.yaml", line: 3, column: 5)),
            YAMLNode(.scalar("y", plain: false), at: SourcePosition(file: "f.yaml", line: 4, column: 5)),
        ]), at: SourcePosition(file: "f.yaml", line: 3, column: 3)))
        guard case .mapping(let inner) = pairs[2].value.value else { return XCTFail("not a mapping") }
        XCTAssertEqual(pairs[2].value.position.column, 4)
        XCTAssertEqual(inner.first?.value, YAMLNode(.scalar("e", plain: false), at: SourcePosition(file: "f.yaml", line: 5, column: 9)))
        XCTAssertNil(try YAML.parse("# nothing\n", file: "f.yaml"))
    }

    func testScalarsKeepTheirText() throws {
        let root = try XCTUnwrap(try YAML.parse("a: \"tab\\there\\u00e9\"\nb: |\n  two\n  lines\nc: 007\nd: ~\n", file: "f"))
        guard case .mapping(let pairs) = root.value else { return XCTFail("not a mapping") }
        XCTAssertEqual(pairs[0].value.scalar, "tab\there\u{e9}")
        XCTAssertEqual(pairs[1].value.scalar, "two\nlines\n")
        XCTAssertEqual(pairs[2].value.scalar, "007")
        XCTAssertTrue(pairs[3].value.isNull)
        XCTAssertFalse(YAMLNode(.scalar("~", plain: false), at: SourcePosition(file: "f", line: 1, column: 1)).isNull)
    }

    func testDeepNestingIsRefused() {
        let text = String(repeating: "[", count: 500) + String(repeating: "]", count: 500)
        XCTAssertThrowsError(try YAML.parse(text, file: "deep.yaml")) { error in
            XCTAssertTrue((error as? ConfigError)?.message.contains("nesting deeper than") == true, "\(error)")
        }
    }
}
