import XCTest
import LoftCore
@testable import LoftConfig

/// The example in docs/config.md must stay valid and mean what its comments say.
final class DocsExampleTests: XCTestCase {
    func testDocsExampleParses() throws {
        // Tests/LoftConfigTests/<this file> → repository root.
        var root = "\(#filePath)"
        for _ in 0..<3 { root = ConfigLoader.directory(of: root) }
        let docs = root + "/docs/config.md"
        guard case .success(let bytes) = ConfigLoader.readFile(docs) else {
            return XCTFail("cannot read \(docs)")
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let start = try XCTUnwrap(text.range(of: "```yaml\n"))
        let end = try XCTUnwrap(text.range(of: "\n```", range: start.upperBound..<text.endIndex))
        let example = String(text[start.upperBound..<end.lowerBound])

        let dir = temporaryDirectory(self)
        XCTAssertEqual(mkdir(dir + "/lists", 0o755), 0)
        writeFile(dir + "/lists/lan.txt", "# LAN\n192.168.0.0/16\nfd12::/16\n")
        let c = try ConfigLoader.parse(example, file: "config.md", baseDirectory: dir)
        XCTAssertEqual(c.tun?.netns, "app")
        XCTAssertEqual(c.socks5, Socks5Settings())
        XCTAssertEqual(c.bridge, BridgeSettings())
        XCTAssertEqual(c.limits, LimitSettings())
        XCTAssertEqual(c.outbounds.map(\.name), ["home", "vps", "blackhole"])
        XCTAssertEqual(c.outbounds[1].kind, .vless(server: "vless.example:443", uuid: "27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b",
                                                   tls: .pinSHA256("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
                                                   serverName: "vless.example", alpn: []))
        XCTAssertEqual(c.rules.count, 6)
        XCTAssertEqual(c.rules[4].action, .via(outbound: "vps"))
        XCTAssertEqual(c.rules[2].to, [prefix("198.18.1.0/24"), prefix("192.168.0.0/16"), prefix("fd12::/16")])
        XCTAssertEqual(c.rules[3].domains, ["example.com", "*.example.org"])
        XCTAssertEqual(c.metrics, endpoint("127.0.0.1:9100"))
        XCTAssertEqual(c.defaultAction, .direct)
    }
}
