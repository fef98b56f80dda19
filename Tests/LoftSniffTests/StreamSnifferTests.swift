import XCTest
@testable import LoftSniff

final class StreamSnifferTests: XCTestCase {
    /// curl 7.88 (OpenSSL 3.0) connecting to https://www.example.org/: its first TLS record,
    /// captured from a socket (517 bytes, SNI www.example.org).
    static let curlHello = hex("1603010200010001fc030330e29fe4b40827995423f46bfecc859a498b2ea5506a92ae92fa274b9730f773207d2b48edd240e81b0647a3d887aa25b33cd4333befb98d07795f2d0443501284003e130213031301c02cc030009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d003c0035002f00ff0100017500000014001200000f7777772e6578616d706c652e6f7267000b000403000102000a00160014001d0017001e00190018010001010102010301040010000e000c02683208687474702f312e31001600000017000000310000000d002a0028040305030603080708080809080a080b080408050806040105010601030303010302040205020602002b0009080304030303020301002d00020101003300260024001d00206e3dfa9a35eee19f2d7e5efc5a6c13af864c396ccb2b12f1e13cb5dd91316265001500ae000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000")

    nonisolated static func hex(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        var i = s.startIndex
        while i < s.endIndex {
            let j = s.index(i, offsetBy: 2)
            out.append(UInt8(s[i..<j], radix: 16)!)
            i = j
        }
        return out
    }

    func sniff(_ b: [UInt8]) -> (SniffResult, NameSource) { b.withUnsafeBytes { StreamSniffer.sniff($0) } }

    func testCurlHelloNamesItsServer() {
        XCTAssertEqual(Self.curlHello.count, 517)
        XCTAssertEqual(sniff(Self.curlHello).0, .name("www.example.org"))
        XCTAssertEqual(sniff(Self.curlHello).1, .sni)
    }

    /// The hello in any number of segments: every shorter prefix asks for more, never a wrong
    /// answer; bytes after the hello (the app's next record) change nothing.
    func testEveryPrefixAsksForMore() {
        for n in 0..<Self.curlHello.count {
            XCTAssertEqual(sniff(Array(Self.curlHello[0..<n])).0, .needMore, "prefix \(n)")
        }
        XCTAssertEqual(sniff(Self.curlHello + [0x14, 3, 3, 0, 1, 1]).0, .name("www.example.org"))
    }

    /// The same handshake message cut into three records (a client that fragments its hello).
    func testHelloOverSeveralRecords() {
        let body = Array(Self.curlHello[5...])
        var records: [UInt8] = []
        for piece in [body[0..<3], body[3..<200], body[200...]] {
            records += [0x16, 3, 1, UInt8(piece.count >> 8), UInt8(piece.count & 0xFF)] + piece
        }
        XCTAssertEqual(sniff(records).0, .name("www.example.org"))
        for n in stride(from: 0, to: records.count, by: 7) {
            XCTAssertEqual(sniff(Array(records[0..<n])).0, .needMore, "prefix \(n)")
        }
        // A record of another type in between: not a hello.
        var broken = records
        broken[5 + 3] = 0x17
        XCTAssertEqual(sniff(broken).0, .none)
    }

    func testHelloWithoutServerName() {
        // version, random, empty session id, one suite, null compression, no extensions.
        var body: [UInt8] = [3, 3] + [UInt8](repeating: 7, count: 32) + [0, 0, 2, 0x13, 0x01, 1, 0]
        let hs: [UInt8] = [1, 0, 0, UInt8(body.count)] + body
        XCTAssertEqual(sniff([0x16, 3, 1, 0, UInt8(hs.count)] + hs).0, .none)
        // An SNI of an address is no name.
        let name = Array("198.18.0.7".utf8)
        let sni: [UInt8] = [0, 0, 0, UInt8(name.count + 5), 0, UInt8(name.count + 3), 0, 0, UInt8(name.count)] + name
        body += [0, UInt8(sni.count)] + sni
        let hs2: [UInt8] = [1, 0, 0, UInt8(body.count)] + body
        XCTAssertEqual(sniff([0x16, 3, 1, 0, UInt8(hs2.count)] + hs2).0, .none)
    }

    func testHandshakeLengthPastTheLimitIsNotSniffed() {
        XCTAssertEqual(sniff([0x16, 3, 1, 0x40, 0x00, 1, 0x01, 0x00, 0x00]).0, .none)
        XCTAssertEqual(sniff([0x17, 3, 3, 0, 5]).0, .none)
        XCTAssertEqual(sniff([0x16, 2]).0, .none)
    }

    func testHTTPHost() {
        let head = Array("GET /x HTTP/1.1\r\nUser-Agent: t\r\nhOsT:  Example.COM:8080 \r\nAccept: */*\r\n\r\n".utf8)
        XCTAssertEqual(sniff(head).0, .name("example.com"))
        XCTAssertEqual(sniff(head).1, .host)
        let hostEnd = head.count - "Accept: */*\r\n\r\n".count
        for n in 0..<hostEnd - 2 {
            XCTAssertEqual(sniff(Array(head[0..<n])).0, .needMore, "prefix \(n)")
        }
        XCTAssertEqual(sniff(Array("POST / HTTP/1.0\nHost: a.b\n\n".utf8)).0, .name("a.b"))
        XCTAssertEqual(sniff(Array("GET / HTTP/1.1\r\nHost: 198.18.0.1\r\n\r\n".utf8)).0, .none)
        XCTAssertEqual(sniff(Array("GET / HTTP/1.1\r\nHost: [fd00::1]:80\r\n\r\n".utf8)).0, .none)
        XCTAssertEqual(sniff(Array("GET / HTTP/1.1\r\nAccept: x\r\n\r\nHost: late.test\r\n".utf8)).0, .none)
        XCTAssertEqual(sniff(Array("GET / SPDY/3\r\nHost: a.test\r\n\r\n".utf8)).0, .none)
        XCTAssertEqual(sniff(Array("GETX / HTTP/1.1\r\n".utf8)).0, .none)
        XCTAssertEqual(sniff(Array("SSH-2.0-OpenSSH_9.2\r\n".utf8)).0, .none)
        XCTAssertEqual(sniff(Array("GET / HTTP/1.1\r\nHost: a.test:80x\r\n\r\n".utf8)).0, .none)
        // A head that never ends within the limit.
        let long = Array("GET / HTTP/1.1\r\n".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: HTTPHost.maxBytes)
        XCTAssertEqual(sniff(long).0, .none)
    }

    func testHostNames() {
        func v(_ s: String) -> String? { Array(s.utf8).withUnsafeBytes { HostName.validate($0) } }
        XCTAssertEqual(v("WWW.Example.org."), "www.example.org")
        XCTAssertEqual(v("a_b-c.test"), "a_b-c.test")
        XCTAssertNil(v("1.2.3.4"))
        XCTAssertNil(v("a..b"))
        XCTAssertNil(v(".a"))
        XCTAssertNil(v(""))
        XCTAssertNil(v("."))
        XCTAssertNil(v("a b"))
        XCTAssertNil(v(String(repeating: "a", count: 64) + ".test"))
        XCTAssertEqual(v(String(repeating: "a", count: 63) + ".test"), String(repeating: "a", count: 63) + ".test")
        XCTAssertNotNil(v(String(repeating: "a.", count: 127)))
        XCTAssertNil(v(String(repeating: "a.", count: 128)))
    }

    func testOtherProtocolsAreNotSniffable() {
        XCTAssertEqual(sniff([]).0, .needMore)
        XCTAssertEqual(sniff([0x00, 0x01]).0, .none)
        XCTAssertEqual(sniff(Array("\u{0}\u{0}\u{0}\u{8}".utf8)).0, .none)
    }
}
