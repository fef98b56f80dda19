import LoftCarriers
import LoftHTTP
import XCTest

final class HTTPParserTests: XCTestCase {
    private func req(_ text: String) -> HTTPParseResult<HTTPRequestHead> {
        withBytes(Array(text.utf8)) { HTTPParser.parseRequest($0) }
    }

    private func status(_ text: String) -> Int? {
        if case .failure(let e) = req(text) { return e.status }
        return nil
    }

    func testRequestParses() {
        let text = "POST /loft?session=abc&x=1 HTTP/1.1\r\nHost: front.test\r\nTransfer-Encoding:  chunked \r\nX-A: 1\r\n\r\nBODY"
        guard case .complete(let h, let consumed) = req(text) else { return XCTFail() }
        XCTAssertEqual(consumed, text.utf8.count - 4)
        XCTAssertEqual(h.method, "POST")
        XCTAssertEqual(h.path, "/loft")
        XCTAssertEqual(h.query, "session=abc&x=1")
        XCTAssertEqual(try h.queryParameter("session"), "abc")
        XCTAssertEqual(try h.queryParameter("none"), nil)
        XCTAssertEqual(h.headers.values("transfer-encoding"), ["chunked"])
        XCTAssertEqual(try h.headers.single("HOST"), "front.test")
    }

    func testIncompleteUntilTheEmptyLine() {
        let text = "GET /loft HTTP/1.1\r\nHost: a\r\n\r\n"
        let bytes = Array(text.utf8)
        for cut in 0..<bytes.count {
            guard case .incomplete = withBytes(Array(bytes[0..<cut]), { HTTPParser.parseRequest($0) }) else {
                return XCTFail("prefix \(cut) is not incomplete")
            }
        }
    }

    func testMalformedRequests() {
        XCTAssertEqual(status("GET /loft HTTP/1.1\nHost: a\n\n"), 400)                  // bare LF
        XCTAssertEqual(status("GET /loft HTTP/1.1\r\nHost: a\rb\r\n\r\n"), 400)          // bare CR
        XCTAssertEqual(status("GET  /loft HTTP/1.1\r\nHost: a\r\n\r\n"), 400)            // double space
        XCTAssertEqual(status("GET /loft\r\nHost: a\r\n\r\n"), 400)                      // HTTP/0.9 style
        XCTAssertEqual(status("GET loft HTTP/1.1\r\nHost: a\r\n\r\n"), 400)              // not origin-form
        XCTAssertEqual(status("GET /loft HTTP/1.0\r\nHost: a\r\n\r\n"), 505)
        XCTAssertEqual(status("GET /loft HTTP/2.0\r\nHost: a\r\n\r\n"), 505)
        XCTAssertEqual(status("GET /loft HTTP/1.1\r\nHost : a\r\n\r\n"), 400)            // space before colon
        XCTAssertEqual(status("GET /loft HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n"), 400)  // obs-fold
        XCTAssertEqual(status("GET /loft HTTP/1.1\r\nNoColon\r\n\r\n"), 400)
        XCTAssertEqual(status("GET /loft HTTP/1.1\r\n: empty\r\n\r\n"), 400)
        XCTAssertEqual(status("GET /loft HTTP/1.1\r\nX: a\u{01}b\r\n\r\n"), 400)         // control character
        XCTAssertEqual(status("G(T /loft HTTP/1.1\r\nHost: a\r\n\r\n"), 400)             // method not a token
        XCTAssertEqual(status("\r\n"), 400)
    }

    func testHeadSizeAndFieldCaps() {
        let big = "GET /loft HTTP/1.1\r\nX: " + String(repeating: "a", count: HTTPParser.maxHeadBytes) + "\r\n\r\n"
        XCTAssertEqual(status(big), 431)
        // Oversized without an end yet: refused as soon as the cap is reached.
        XCTAssertEqual(status("GET /loft HTTP/1.1\r\nX: " + String(repeating: "a", count: HTTPParser.maxHeadBytes)), 431)
        let many = "GET /loft HTTP/1.1\r\n" + (0...HTTPParser.maxFields).map { "X\($0): 1\r\n" }.joined() + "\r\n"
        XCTAssertEqual(status(many), 431)
    }

    func testDuplicatesAndTokens() {
        guard case .complete(let h, _) = req("GET /?session=1&session=2 HTTP/1.1\r\nHost: a\r\nHost: b\r\n"
            + "Connection: keep-alive ,  UPGRADE\r\n\r\n") else { return XCTFail() }
        XCTAssertThrowsError(try h.headers.single("host"))
        XCTAssertThrowsError(try h.queryParameter("session"))
        XCTAssertTrue(h.headers.contains("connection", token: "upgrade"))
        XCTAssertFalse(h.headers.contains("connection", token: "close"))
    }

    func testResponses() {
        func resp(_ t: String) -> HTTPParseResult<HTTPResponseHead> { withBytes(Array(t.utf8)) { HTTPParser.parseResponse($0) } }
        guard case .complete(let h, _) = resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") else { return XCTFail() }
        XCTAssertEqual(h.status, 200)
        XCTAssertEqual(h.reason, "OK")
        guard case .complete(let h2, _) = resp("HTTP/1.1 404 \r\n\r\n") else { return XCTFail() }
        XCTAssertEqual(h2.status, 404)
        for bad in ["HTTP/1.0 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n",
                    "HTTP/1.1 200 OK\nX: y\n\n", "HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n"] {
            guard case .failure = resp(bad) else { return XCTFail(bad) }
        }
    }

    // MARK: chunked

    private func chunked(_ text: String, step: Int = Int.max) -> (data: [UInt8], end: Bool, failure: String?) {
        let bytes = Array(text.utf8)
        var d = ChunkedDecoder()
        var buf = [UInt8]()
        var data = [UInt8]()
        var fed = 0
        var pos = 0
        while true {
            if fed < bytes.count {
                let n = min(step, bytes.count - fed)
                buf += bytes[fed..<(fed + n)]
                fed += n
            }
            var stop = false
            while !stop {
                let e = buf.withUnsafeBytes { d.next($0, &pos) }
                switch e {
                case .needMore: stop = true
                case .data(let r): data += buf[r]
                case .end: return (data, true, nil)
                case .failure(let why): return (data, false, why)
                }
            }
            if fed == bytes.count { return (data, false, nil) }
        }
    }

    func testChunkedDecodes() {
        let text = "0005\r\nhello\r\n1;name=value\r\n!\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n"
        for step in [1, 2, 7, Int.max] {
            let r = chunked(text, step: step)
            XCTAssertEqual(String(decoding: r.data, as: UTF8.self), "hello!0123456789", "step \(step)")
            XCTAssertTrue(r.end)
            XCTAssertNil(r.failure)
        }
        XCTAssertTrue(chunked("0\r\n\r\n").end)
        XCTAssertFalse(chunked("5\r\nhel").end)
    }

    func testChunkedMalformed() {
        XCTAssertNotNil(chunked("\r\n").failure)                                  // no size
        XCTAssertNotNil(chunked("g\r\n").failure)                                 // not hex
        XCTAssertNotNil(chunked("-1\r\n").failure)
        XCTAssertNotNil(chunked("0x5\r\nhello\r\n").failure)
        XCTAssertNotNil(chunked("5\nhello\r\n").failure)                          // bare LF
        XCTAssertNotNil(chunked("5\r\nhelloX\r\n").failure)                       // data not followed by CRLF
        XCTAssertNotNil(chunked("5\r\nhello\n").failure)
        XCTAssertNotNil(chunked("1000000000000000\r\n").failure)                  // 16 hex digits
        XCTAssertNotNil(chunked("5;" + String(repeating: "e", count: 2000) + "\r\n").failure)
        XCTAssertNotNil(chunked("0\r\n bad\r\n\r\n").failure)                     // folded trailer
        XCTAssertNotNil(chunked("0\r\nX: " + String(repeating: "t", count: 9000) + "\r\n\r\n").failure)
        XCTAssertNotNil(chunked("0\r\n\rX").failure)
    }

    func testChunkHeaderEncoding() {
        var b = [UInt8](repeating: 0, count: 6)
        for (n, s) in [(0xFFFF, "ffff\r\n"), (1, "0001\r\n"), (0x1A2, "01a2\r\n")] {
            b.withUnsafeMutableBytes { ChunkedEncoder.writeHeader(n, to: $0.baseAddress!) }
            XCTAssertEqual(String(decoding: b, as: UTF8.self), s)
        }
        // What loft writes, loft reads.
        let r = chunked("0003\r\nabc\r\n0000\r\n\r\n")
        XCTAssertEqual(r.data, Array("abc".utf8))
        XCTAssertTrue(r.end)
    }
}
