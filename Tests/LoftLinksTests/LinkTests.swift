import XCTest
import LoftCore
import LoftConfig
@testable import LoftLinks
import CImage

/// The link formats of docs/links.md: every outbound type and carrier survives share → import
/// field by field; links in the common vless:// form import; bad links fail at their column.
final class LinkTests: XCTestCase {
    static let uuid = "27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b"
    static let pin = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    static let at = SourcePosition(file: "t", line: 1, column: 1)
    /// Two DER-shaped certificates (a SEQUENCE; the link does not look inside).
    static let certs: [[UInt8]] = [[0x30, 0x82, 0x01, 0x10] + (0..<272).map { UInt8($0 & 0xff) },
                                   [0x30, 0x81, 0x20] + Array(repeating: 0xab, count: 32)]

    static let verifications: [TLSVerification] = [.pinSHA256(pin), .systemStore, .insecure, .caFile("/etc/loft/ca.pem")]

    /// Every field of the outbound as the link must carry it.
    func assertSame(_ a: OutboundSettings, _ b: Connection, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(b.outbound.name, a.name, file: file, line: line)
        var expected = a.kind
        if case .caFile = a.tlsVerification {
            var x = a
            x.setTLS(.caFile(Connection.caFileName(a.name)))
            expected = x.kind
            XCTAssertEqual(b.ca, Self.certs, file: file, line: line)
        } else {
            XCTAssertEqual(b.ca, [], file: file, line: line)
        }
        XCTAssertEqual(b.outbound.kind, expected, file: file, line: line)
        XCTAssertEqual(b.outbound.quicMaxPacket, a.quicMaxPacket, file: file, line: line)
        XCTAssertEqual(b.outbound.keepalive, a.keepalive, file: file, line: line)
        XCTAssertNil(b.outbound.stateFile, file: file, line: line)
        XCTAssertTrue(b.named, file: file, line: line)
    }

    func roundTrip(_ o: OutboundSettings, file: StaticString = #filePath, line: UInt = #line) {
        var ca: [[UInt8]] = []
        if case .caFile = o.tlsVerification { ca = Self.certs }
        guard let link = Link.format(o, ca: ca) else { return XCTFail("no link for \(o.name)", file: file, line: line) }
        do {
            let c = try Link.parse(link)
            assertSame(o, c, file: file, line: line)
            // A second share gives the same link: nothing is lost or reordered.
            XCTAssertEqual(Link.format(c.outbound, ca: c.ca), link, file: file, line: line)
            // And the outbound file import writes reads back as the same outbound.
            let text = OutboundYAML.text(c.outbound)
            if c.ca.isEmpty {
                let back = try ConfigLoader.parseOutbound(text, file: "o.yaml", baseDirectory: ".")
                XCTAssertEqual(back.kind, c.outbound.kind, file: file, line: line)
                XCTAssertEqual(back.quicMaxPacket, c.outbound.quicMaxPacket, file: file, line: line)
                XCTAssertEqual(back.keepalive, c.outbound.keepalive, file: file, line: line)
            }
        } catch {
            XCTFail("\(link): \(error)", file: file, line: line)
        }
    }

    func testEveryLoftCarrierRoundTrips() {
        var n = 0
        for carrier in ConfigText.carriers {
            for t in Self.verifications {
                for sni: String? in [nil, "front.example"] {
                    for server in ["front.example:443", "198.18.0.7:8443", "[fd00::7]:443"] {
                        var o = OutboundSettings(name: "home-\(carrier)", kind: .loft(server: server, carrier: carrier,
                            token: "t0k en/+&#?@:%é\u{1}", tls: t, serverName: sni), position: Self.at)
                        if carrier == "quic" || carrier == "h3" { o.quicMaxPacket = n % 2 == 0 ? nil : 8952 }
                        roundTrip(o)
                        n += 1
                    }
                }
            }
        }
        XCTAssertEqual(n, 5 * 4 * 2 * 3)
    }

    func testVLESSRoundTrips() {
        for t in Self.verifications {
            for alpn in [[], ["h2"], ["h2", "http/1.1"]] {
                roundTrip(OutboundSettings(name: "v.1_x", kind: .vless(server: "[2001:db8::1]:443", uuid: Self.uuid, tls: t,
                                                                       serverName: alpn.isEmpty ? nil : "cdn.example", alpn: alpn), position: Self.at))
            }
        }
    }

    func testSSTPRoundTrips() {
        for t in Self.verifications {
            for auth: [SSTPAuthMethod] in [[.mschapv2, .pap], [.pap], [.mschapv2], [.pap, .mschapv2]] {
                for keepalive: Duration? in [nil, .seconds(30), .milliseconds(1500)] {
                    var o = OutboundSettings(name: "gw", kind: .sstp(server: "gw.example:443", user: "DOMAIN\\me@corp",
                        password: "p:a@ss%/ #&=", tls: t, serverName: "gw.example", auth: auth), position: Self.at)
                    o.keepalive = keepalive
                    roundTrip(o)
                }
            }
        }
    }

    /// A link as other clients share it (v2rayN, v2rayNG, Nekobox), written from the public form.
    func testCommonVLESSForm() throws {
        let c = try Link.parse("vless://27F0A1C2-5B3E-4D6F-9A8B-0C1D2E3F4A5B@[2001:db8::5]:8443/?encryption=none&security=tls&sni=cdn.example&fp=chrome&type=tcp&headerType=none&flow=&alpn=h2%2Chttp%2F1.1#Server%20%F0%9F%87%A9%F0%9F%87%AA%20(1)")
        XCTAssertEqual(c.outbound.kind, .vless(server: "[2001:db8::5]:8443", uuid: Self.uuid, tls: .systemStore,
                                               serverName: "cdn.example", alpn: ["h2", "http/1.1"]))
        XCTAssertEqual(c.name, "Server-1")
        let insecure = try Link.parse("vless://\(Self.uuid)@v.example:443?encryption=none&security=tls&type=tcp&allowInsecure=1")
        XCTAssertEqual(insecure.outbound.tlsVerification, .insecure)
        XCTAssertEqual(insecure.name, "vless-v.example")
        XCTAssertFalse(insecure.named)
    }

    func testNames() {
        XCTAssertEqual(Link.sanitize("My Server 🇩🇪"), "My-Server")
        XCTAssertEqual(Link.sanitize("direct"), "direct-1")
        XCTAssertEqual(Link.sanitize("🇩🇪"), "imported")
        XCTAssertEqual(Link.sanitize(String(repeating: "a", count: 70)).count, 64)
    }

    func assertError(_ link: String, column: Int, _ fragment: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            let c = try Link.parse(link)
            XCTFail("parsed: \(c)", file: file, line: line)
        } catch {
            XCTAssertEqual(error.column, column, "\(error)", file: file, line: line)
            XCTAssertTrue(error.message.contains(fragment), "\(error.message) lacks \(fragment)", file: file, line: line)
        }
    }

    func testBadLinks() {
        let u = Self.uuid
        assertError("https://x", column: 1, "unknown scheme")
        assertError("vless:/x", column: 1, "no \"://\"")
        assertError("vless://\(u)@h.example:443?encryption=none&security=tls&foo=1#x", column: 89, "unknown parameter \"foo\"")
        assertError("vless://\(u)@h.example:443?encryption=none#x", column: 59, "needs security=tls")
        assertError("vless://\(u)@h.example:443?security=reality", column: 60, "security must be tls")
        assertError("vless://\(u)@h.example:443?security=tls&type=ws", column: 73, "type must be tcp")
        assertError("vless://not-a-uuid@h.example:443?security=tls", column: 9, "needs a UUID")
        assertError("vless://\(u)@h.example:0?security=tls", column: 56, "port must be 1 to 65535")
        assertError("vless://\(u)@fd00::1:443?security=tls", column: 46, "the host must be")
        assertError("loft://tok@h.example:443?carrier=smoke", column: 26, "carrier must be one of")
        assertError("loft://tok@h.example:443", column: 24, "needs carrier=")
        assertError("loft://tok@h.example:443?carrier=ws&quic-max-packet=1400", column: 37, "quic-max-packet is for carrier quic or h3")
        assertError("loft://tok@h.example:443?carrier=ws&pin-sha256=\(Self.pin)&insecure=1", column: 113, "at most one of")
        assertError("loft://t%zzok@h.example:443?carrier=ws", column: 9, "two hex digits")
        assertError("loft://tok@h.example:443?carrier=ws&carrier=h2", column: 37, "given twice")
        assertError("loft://tok@h.example:443?carrier=ws&ca=AAAA", column: 37, "DER certificate")
        assertError("sstp://user@h.example:443", column: 8, "user:password")
        assertError("sstp://u:p@h.example:443?auth=chap", column: 26, "auth must be")
        assertError("sstp://u:p@h.example:443?keepalive=10m", column: 26, "keepalive must be")
        assertError("loft://t ok@h.example:443?carrier=ws", column: 9, "no spaces")
        assertError("loft://tok@h.example:443/path?carrier=ws", column: 25, "no path")
    }
}

/// The `.loft` file and the encrypted file.
final class ConnectionFileTests: XCTestCase {
    static let links = [
        "loft://tok@front.example:443?carrier=h2&pin-sha256=\(LinkTests.pin)#home",
        "vless://\(LinkTests.uuid)@v.example:443?encryption=none&security=tls&type=tcp#v",
        "sstp://u:p@gw.example:443?insecure=1#gw",
    ]

    func testReadsWhatItWrites() throws {
        let text = ConnectionFile.write(Self.links)
        let read = try ConnectionFile.read(Array(text.utf8))
        XCTAssertEqual(read.map(\.name), ["home", "v", "gw"])
        XCTAssertEqual(read.compactMap { Link.format($0.outbound, ca: $0.ca) }, Self.links)
    }

    /// Every prefix of a file is an error: a file cut anywhere never imports as fewer connections.
    func testEveryTruncationFails() {
        let bytes = Array(ConnectionFile.write(Self.links).utf8)
        for n in 0..<bytes.count {
            XCTAssertThrowsError(try ConnectionFile.read(Array(bytes.prefix(n))), "prefix of \(n) bytes read")
        }
    }

    func testErrorsHaveLineAndColumn() {
        func error(_ text: String) -> FileError? {
            do { _ = try ConnectionFile.read(Array(text.utf8)); return nil } catch { return error }
        }
        XCTAssertEqual(error("loft-connections 2\nend 0\n")?.line, 1)
        let bad = error("loft-connections 1\n# c\nloft://tok@h.example:443?carrier=ws&x=1#a\nend 1\n")
        XCTAssertEqual(bad?.line, 3)
        XCTAssertEqual(bad?.column, 37)
        XCTAssertEqual(error("loft-connections 1\n\(Self.links[0])\nend 2\n")?.line, 3)
        XCTAssertEqual(error("loft-connections 1\n\(Self.links[0])\nend 1\nmore\n")?.line, 4)
    }

    func testSealedOpens() throws {
        let plain = Array(ConnectionFile.write(Self.links).utf8)
        let sealed = SealedFile.seal(plain, passphrase: Array("correct horse".utf8), iterations: 100_000)
        XCTAssertEqual(sealed.count, SealedFile.headerSize + plain.count + 16)
        XCTAssertEqual(try SealedFile.open(sealed, passphrase: Array("correct horse".utf8)), plain)
        XCTAssertThrowsError(try SealedFile.open(sealed, passphrase: Array("correct horsf".utf8)))
        // Two files of the same text differ (salt and nonce per file).
        XCTAssertNotEqual(SealedFile.seal(plain, passphrase: [1], iterations: 100_000), SealedFile.seal(plain, passphrase: [1], iterations: 100_000))
    }

    /// A changed bit anywhere (header, ciphertext, tag) fails; so does every truncation.
    func testEveryChangedByteFails() {
        let plain = Array("loft-connections 1\nsstp://u:p@gw.example:443#gw\nend 1\n".utf8)
        let pass = Array("pw".utf8)
        let sealed = SealedFile.seal(plain, passphrase: pass, iterations: 100_000)
        // Positions in the header other than the iteration count cost one derivation each; the
        // count's bytes are checked too (most values fall outside the allowed range at once).
        for i in stride(from: 0, to: sealed.count, by: 3) {
            var b = sealed
            b[i] ^= 0x01
            XCTAssertThrowsError(try SealedFile.open(b, passphrase: pass), "byte \(i) changed and still opened")
        }
        for n in [0, 8, 44, 45, 60, sealed.count - 1] {
            XCTAssertThrowsError(try SealedFile.open(Array(sealed.prefix(n)), passphrase: pass), "prefix \(n) opened")
        }
    }

    /// A file written from the format by hand (the same steps as docs/links.md's Python).
    func testKnownVector() throws {
        let sealed = SealedFile.seal(Array("x".utf8), passphrase: Array("pw".utf8), iterations: 100_000,
                                     salt: Array(repeating: 1, count: 16), nonce: Array(repeating: 2, count: 12))
        XCTAssertEqual(Array(sealed.prefix(13)), Array("LOFTSEAL".utf8) + [1, 0x00, 0x01, 0x86, 0xa0])
        XCTAssertEqual(Array(sealed[41..<45]), [0, 0, 0, 1])
        XCTAssertEqual(try SealedFile.open(sealed, passphrase: Array("pw".utf8)), Array("x".utf8))
    }
}

/// `outbound-dir` and `tls.system-ca` in the configuration.
final class OutboundDirTests: XCTestCase {
    func testOutboundDirIsRead() throws {
        let dir = NSTemporaryDirectory() + "/loft-links-\(getpid())"
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir + "/o.d", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "socks5: off\noutbound-dir: o.d\ndefault: b\noutbounds:\n  - { name: a, type: direct }\n".write(toFile: dir + "/main.yaml", atomically: true, encoding: .utf8)
        try "name: b\ntype: vless\nserver: v.example:443\nuuid: \(LinkTests.uuid)\ntls: { system-ca: true }\n".write(toFile: dir + "/o.d/b.yaml", atomically: true, encoding: .utf8)
        try "not an outbound".write(toFile: dir + "/o.d/readme.txt", atomically: true, encoding: .utf8)
        let c = try ConfigLoader.load(path: dir + "/main.yaml")
        XCTAssertEqual(c.outbounds.map(\.name), ["a", "b"])
        XCTAssertEqual(c.outbounds[1].tlsVerification, .systemStore)
        XCTAssertEqual(c.defaultAction, .via(outbound: "b"))
        XCTAssertEqual(c.outbounds[1].position.file, dir + "/o.d/b.yaml")
        // A name used twice, and an error inside an outbound file at its own line and column.
        try "name: a\ntype: drop\n".write(toFile: dir + "/o.d/c.yaml", atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try ConfigLoader.load(path: dir + "/main.yaml")) { e in
            XCTAssertTrue("\(e)".hasPrefix(dir + "/o.d/c.yaml:1:7:"), "\(e)")
        }
        try "name: c\ntype: vless\nserver: v.example:443\nuuid: \(LinkTests.uuid)\ntls: { system-ca: true, insecure: true }\n".write(toFile: dir + "/o.d/c.yaml", atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try ConfigLoader.load(path: dir + "/main.yaml")) { e in
            XCTAssertTrue("\(e)".hasPrefix(dir + "/o.d/c.yaml:5:25:"), "\(e)")
        }
    }
}

/// QR codes drawn with libqrencode read back with zbar; the terminal drawing's size.
final class QRTests: XCTestCase {
    static let link = "vless://\(LinkTests.uuid)@vless.example:443?encryption=none&security=tls&sni=cdn.example&alpn=h2%2Chttp%2F1.1&type=tcp#vps"

    func testPNGReadsBack() throws {
        guard let png = QRCode.png(Self.link) else { return XCTFail("no code") }
        XCTAssertTrue(Picture.looksLike(png))
        XCTAssertEqual(try Picture.codes(png), [Self.link])
        let image = try Picture.gray(png)
        XCTAssertEqual(image.width, image.height)
        XCTAssertEqual(image.width % 8, 0)
    }

    /// A typical link fits an 80-column terminal, two module rows a line.
    func testTerminalSize() throws {
        let (w, _) = try XCTUnwrap(QRCode.modules(Self.link))
        let text = try XCTUnwrap(QRCode.terminal(Self.link))
        let lines = text.split(separator: "\n")
        XCTAssertEqual(lines.count, (w + 2 * QRCode.quietZone + 1) / 2)
        XCTAssertTrue(lines.allSatisfy { $0.count == w + 2 * QRCode.quietZone })
        XCTAssertLessThanOrEqual(lines[0].count, 80)
        XCTAssertTrue(text.allSatisfy { "█▀▄ \n".contains($0) })
    }

    func testPictureErrors() {
        XCTAssertThrowsError(try Picture.codes([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0])) { e in
            XCTAssertTrue("\(e)".hasPrefix("PNG"), "\(e)")
        }
        XCTAssertThrowsError(try Picture.codes([0xff, 0xd8, 0xff, 0xe0, 0, 16])) { e in
            XCTAssertTrue("\(e)".hasPrefix("JPEG"), "\(e)")
        }
        // A blank picture: no code.
        XCTAssertThrowsError(try Picture.codes(QRCode.png("x", scale: 1)!.count > 0 ? blank() : [])) { e in
            XCTAssertTrue("\(e)".contains("no QR code"), "\(e)")
        }
        XCTAssertNil(QRCode.modules(String(repeating: "x", count: 8000)))
    }

    func blank() -> [UInt8] {
        var len = 0
        let pixels = [UInt8](repeating: 255, count: 64 * 64)
        let p = cimage_encode_png(pixels, 64, 64, &len)!
        defer { cimage_free(p) }
        return Array(UnsafeBufferPointer(start: p, count: len))
    }

    /// Halving keeps the mean of each 2×2 block.
    func testHalve() {
        let (out, w, h) = Picture.halve([0, 255, 10, 20, 255, 0, 30, 40], 4, 2)
        XCTAssertEqual(w, 2)
        XCTAssertEqual(h, 1)
        XCTAssertEqual(out, [127, 25])
    }
}

extension LinkTests {
    func testSpacesOnlyInTheName() throws {
        XCTAssertEqual(try Link.parse("sstp://u:p@gw.example:443#My Gateway").name, "My-Gateway")
        assertError("sstp://u:p@gw.example:443?auth=pap #x", column: 35, "no spaces")
        assertError("sstp://u:p@gw.example:443#a\u{7}b", column: 28, "control characters")
    }
}
