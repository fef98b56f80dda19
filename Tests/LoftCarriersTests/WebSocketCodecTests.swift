@testable import LoftCarriers
import LoftCore
import LoftHTTP
import LoftTLS
import XCTest

final class WebSocketCodecTests: XCTestCase {
    /// RFC 6455 section 1.3 (the brief quoted this value cut short as s3pPLMBiTxaQ9kYGzzo=).
    func testAcceptForRFCExampleKey() {
        XCTAssertEqual(WSHandshake.accept(forKey: "dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    func testMadeKeysAreSixteenRandomBytes() {
        let a = WSHandshake.makeKey(), b = WSHandshake.makeKey()
        XCTAssertEqual(Base64.decode(a)?.count, 16)
        XCTAssertNotEqual(a, b)
    }

    func testBase64() {
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 * 37 + 11) }
            XCTAssertEqual(Base64.decode(Base64.encode(bytes)), bytes)
        }
        XCTAssertEqual(Base64.encode(Array("foobar".utf8)), "Zm9vYmFy")
        XCTAssertEqual(Base64.encode(Array("fo".utf8)), "Zm8=")
        XCTAssertNil(Base64.decode("Zm8"))
        XCTAssertNil(Base64.decode("Zm=8"))
        XCTAssertNil(Base64.decode("Z m8"))
        // Found by fuzz/run (base64_pin): leftover bits set made a second encoding of a value.
        XCTAssertNil(Base64.decode("2B2="))
        XCTAssertNil(Base64.decode("Zm9="))
        XCTAssertNil(Base64.decode("Zh=="))
        XCTAssertEqual(Base64.decode("Zg=="), Array("f".utf8))
    }

    // MARK: header encoding

    /// RFC 6455 §5.7's examples, byte for byte (the round trip below alone would pass a codec
    /// that encodes and parses the same wrong layout).
    func testRFC6455SectionFiveSevenLayouts() {
        let key: (UInt8, UInt8, UInt8, UInt8) = (0x37, 0xfa, 0x21, 0x3d)
        // "A single-frame unmasked text message": 0x81 0x05 "Hello"; the masked one: 0x81 0x85
        // 0x37 0xfa 0x21 0x3d, then 0x7f 0x9f 0x4d 0x51 0x58.
        XCTAssertEqual(WSFrameHeader(opcode: WSOpcode.text, payloadLength: 5).encoded(), [0x81, 0x05])
        XCTAssertEqual(WSFrameHeader(opcode: WSOpcode.text, maskKey: key, payloadLength: 5).encoded(),
                       [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d])
        var hello = Array("Hello".utf8)
        hello.withUnsafeMutableBytes { wsMask($0.baseAddress!, 5, key, phase: 0) }
        XCTAssertEqual(hello, [0x7f, 0x9f, 0x4d, 0x51, 0x58])
        // Masking from a phase: the same bytes when the payload comes in two pieces.
        var split = Array("Hello".utf8)
        split.withUnsafeMutableBytes {
            wsMask($0.baseAddress!, 2, key, phase: 0)
            wsMask($0.baseAddress! + 2, 3, key, phase: 2)
        }
        XCTAssertEqual(split, [0x7f, 0x9f, 0x4d, 0x51, 0x58])
        // "A fragmented unmasked text message": 0x01 0x03 "Hel", then 0x80 0x02 "lo".
        XCTAssertEqual(WSFrameHeader(fin: false, opcode: WSOpcode.text, payloadLength: 3).encoded(), [0x01, 0x03])
        XCTAssertEqual(WSFrameHeader(opcode: WSOpcode.continuation, payloadLength: 2).encoded(), [0x80, 0x02])
        // "Unmasked Ping request and masked Ping response": 0x89 0x05 "Hello"; 0x8a 0x85 + key + masked.
        XCTAssertEqual(WSFrameHeader(opcode: WSOpcode.ping, payloadLength: 5).encoded(), [0x89, 0x05])
        XCTAssertEqual(WSFrameHeader(opcode: WSOpcode.pong, maskKey: key, payloadLength: 5).encoded(),
                       [0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d])
        // "256 bytes binary message in a single unmasked frame": 0x82 0x7E 0x0100; "64KiB": 0x82
        // 0x7F 0x0000000000010000.
        XCTAssertEqual(WSFrameHeader(opcode: WSOpcode.binary, payloadLength: 256).encoded(), [0x82, 0x7e, 0x01, 0x00])
        XCTAssertEqual(WSFrameHeader(opcode: WSOpcode.binary, payloadLength: 65536).encoded(),
                       [0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0])

        // And read back: the client reads the RFC's ping, the server its masked pong, and the
        // masked "Hello" as a binary frame (the same bytes with opcode 2: loft refuses text).
        func events(_ bytes: [UInt8], _ role: WSRole) -> [WSDecoder.Event] {
            var d = WSDecoder(role: role), buf = bytes, pos = 0, out: [WSDecoder.Event] = []
            while out.count < 4 {
                let e = buf.withUnsafeMutableBytes { d.next($0, &pos) }
                if e == .needMore { break }
                if case .data(let r) = e { out.append(.ping(Array(buf[r]))) } else { out.append(e) }
            }
            return out
        }
        XCTAssertEqual(events([0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f], .client), [.ping(Array("Hello".utf8))])
        XCTAssertEqual(events([0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58], .server),
                       [.pong(Array("Hello".utf8))])
        XCTAssertEqual(events([0x82, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58], .server),
                       [.ping(Array("Hello".utf8))])   // .data's bytes, recorded as .ping for comparing
        // The RFC's unmasked text frame: a server refuses it (a client must mask, §5.1: 1002).
        XCTAssertEqual(failureCode(parse([0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f], by: .server)), 1002)
    }

    /// The copying mask (the ws client's frame writer) gives what a copy and then the in-place
    /// mask give, byte for byte, for every phase, for lengths across the 8- and 32-byte steps,
    /// and for a payload copied in in pieces; the source is left as it was.
    func testMaskCopyMatchesCopyThenMask() {
        let key: (UInt8, UInt8, UInt8, UInt8) = (0x37, 0xfa, 0x21, 0x3d)
        let keyBytes: [UInt8] = [0x37, 0xfa, 0x21, 0x3d]
        var rng = SystemRandomNumberGenerator()
        for length in Array(0...80) + [255, 1000, 16_384, 65_535] {
            let src = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            for phase in 0..<4 {
                let want = src.enumerated().map { $0.element ^ keyBytes[(phase + $0.offset) & 3] }
                var inPlace = src
                inPlace.withUnsafeMutableBytes { if length > 0 { wsMask($0.baseAddress!, length, key, phase: phase) } }
                XCTAssertEqual(inPlace, want, "in place, length \(length) phase \(phase)")
                var dst = [UInt8](repeating: 0, count: length + 3)
                src.withUnsafeBytes { s in
                    dst.withUnsafeMutableBytes { d in
                        guard length > 0 else { return }
                        wsMaskCopy(d.baseAddress! + 1, s.baseAddress!, length, key, phase: phase)
                    }
                }
                XCTAssertEqual(Array(dst[1..<(1 + length)]), want, "copy, length \(length) phase \(phase)")
                XCTAssertEqual(dst[0], 0)
                XCTAssertEqual(dst[length + 1], 0, "nothing written past the end")
            }
            // In pieces, each from the phase where the last ended (how FrameWriter extends a frame).
            var pieces = [UInt8](repeating: 0, count: length)
            var at = 0
            var cut = 1
            while at < length {
                let n = min(cut, length - at)
                src.withUnsafeBytes { s in
                    pieces.withUnsafeMutableBytes { d in wsMaskCopy(d.baseAddress! + at, s.baseAddress! + at, n, key, phase: at & 3) }
                }
                at += n
                cut = cut * 3 + 1
            }
            XCTAssertEqual(pieces, src.enumerated().map { $0.element ^ keyBytes[$0.offset & 3] }, "pieces, length \(length)")
        }
    }

    func testHeaderRoundTripAllLengthForms() {
        for len in [0, 1, 125, 126, 127, 65535, 65536, 1 << 33] as [UInt64] {
            for key in [nil, (UInt8(1), UInt8(2), UInt8(3), UInt8(4))] as [(UInt8, UInt8, UInt8, UInt8)?] {
                let h = WSFrameHeader(opcode: WSOpcode.binary, maskKey: key, payloadLength: len)
                let bytes = h.encoded()
                XCTAssertEqual(bytes.count, WSFrameHeader.size(payloadLength: len, masked: key != nil))
                let role: WSRole = key == nil ? .client : .server
                let r = withBytes(bytes) { WSFrameHeader.parse($0, receivedBy: role) }
                XCTAssertEqual(r, .header(h, size: bytes.count), "length \(len)")
                // Every prefix is incomplete, never an error.
                for cut in 0..<bytes.count {
                    XCTAssertEqual(withBytes(Array(bytes[0..<cut])) { WSFrameHeader.parse($0, receivedBy: role) }, .needMore)
                }
            }
        }
    }

    private func parse(_ bytes: [UInt8], by role: WSRole = .server) -> WSFrameHeader.ParseResult {
        withBytes(bytes) { WSFrameHeader.parse($0, receivedBy: role) }
    }

    private func failureCode(_ r: WSFrameHeader.ParseResult) -> UInt16? {
        if case .failure(let c, _) = r { return c }
        return nil
    }

    func testReservedBitsRefused() {
        for rsv: UInt8 in [0x40, 0x20, 0x10] {
            XCTAssertEqual(failureCode(parse([0x80 | rsv | 0x2, 0x80, 1, 2, 3, 4])), 1002)
        }
    }

    func testUnknownOpcodesRefused() {
        for op: UInt8 in [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
            XCTAssertEqual(failureCode(parse([0x80 | op, 0x80, 1, 2, 3, 4])), 1002, "opcode \(op)")
        }
    }

    func testFragmentedControlFramesRefused() {
        for op in [WSOpcode.close, WSOpcode.ping, WSOpcode.pong] {
            XCTAssertEqual(failureCode(parse([op, 0x80, 1, 2, 3, 4])), 1002)
        }
    }

    func testControlFramesOver125Refused() {
        XCTAssertEqual(failureCode(parse([0x89, 0x80 | 126, 0, 126, 1, 2, 3, 4])), 1002)
        XCTAssertEqual(failureCode(parse([0x88, 0x80 | 127, 0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 3, 4])), 1002)
        if case .header(let h, _) = parse([0x89, 0x80 | 125, 1, 2, 3, 4]) { XCTAssertEqual(h.payloadLength, 125) } else { XCTFail() }
    }

    func testMaskDirection() {
        // A server must get masked frames, a client unmasked ones.
        XCTAssertEqual(failureCode(parse([0x82, 0x01, 0x00], by: .server)), 1002)
        XCTAssertEqual(failureCode(parse([0x82, 0x81, 1, 2, 3, 4, 0], by: .client)), 1002)
        if case .header = parse([0x82, 0x01, 0x00], by: .client) {} else { XCTFail() }
    }

    func testLengthEncodingMustBeMinimalAnd63Bit() {
        XCTAssertEqual(failureCode(parse([0x82, 0x80 | 126, 0, 125, 1, 2, 3, 4])), 1002)
        XCTAssertEqual(failureCode(parse([0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 1, 2, 3, 4])), 1002)
        XCTAssertEqual(failureCode(parse([0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4])), 1002)
    }

    // MARK: the streaming decoder

    /// Encodes one frame as a peer in `role`'s opposite would send it.
    private func frame(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true, masked: Bool = true) -> [UInt8] {
        let key: (UInt8, UInt8, UInt8, UInt8)? = masked ? (0x37, 0xFA, 0x21, 0x3D) : nil
        var out = WSFrameHeader(fin: fin, opcode: opcode, maskKey: key, payloadLength: UInt64(payload.count)).encoded()
        let k: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]
        for (i, b) in payload.enumerated() { out.append(masked ? b ^ k[i & 3] : b) }
        return out
    }

    /// Runs a decoder over `bytes` fed in pieces of `step`; returns data and events.
    private func decode(_ bytes: [UInt8], role: WSRole = .server, step: Int = Int.max) -> (data: [UInt8], events: [WSDecoder.Event]) {
        var d = WSDecoder(role: role)
        var buf = [UInt8]()
        var data = [UInt8]()
        var events: [WSDecoder.Event] = []
        var fed = 0
        var consumed = 0
        outer: while true {
            if fed < bytes.count {
                let n = min(step, bytes.count - fed)
                buf += bytes[fed..<(fed + n)]
                fed += n
            }
            while true {
                var pos = consumed
                let e = buf.withUnsafeMutableBytes { d.next($0, &pos) }
                consumed = pos
                switch e {
                case .needMore:
                    if fed == bytes.count { break outer }
                    continue outer
                case .data(let r):
                    data += buf[r]
                default:
                    events.append(e)
                    if case .failure = e { break outer }
                    if case .close = e { break outer }
                }
            }
        }
        return (data, events)
    }

    func testDecoderUnmasksAndStreamsAnySplit() {
        let payload = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let bytes = frame(WSOpcode.binary, payload) + frame(WSOpcode.ping, [1, 2, 3]) + frame(WSOpcode.binary, [9, 9])
        for step in [1, 3, 1000, Int.max] {
            let r = decode(bytes, step: step)
            XCTAssertEqual(r.data, payload + [9, 9], "step \(step)")
            XCTAssertEqual(r.events, [.ping([1, 2, 3])])
        }
    }

    /// Frames of every length form (7-bit, 16-bit, 64-bit), a control frame between them and a
    /// close, split into two reads at every byte position, the decoder working in the buffer
    /// as WSCarrier does (the bytes it has not used stay in front of the next read's): the data
    /// and events come out exact (issue 28: any framed reader on any stream).
    func testDecoderSplitAtEveryByte() {
        let long = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 3) }
        let mid = (0..<300).map { UInt8(truncatingIfNeeded: $0) }
        let bytes = frame(WSOpcode.binary, [1, 2, 3]) + frame(WSOpcode.ping, [4, 5]) + frame(WSOpcode.binary, mid, fin: false)
            + frame(WSOpcode.continuation, []) + frame(WSOpcode.binary, long) + frame(WSOpcode.close, [0x03, 0xE8])
        // Every position through the first frames and the long frame's header, a few inside it.
        let head = bytes.count - long.count - 4
        for k in Array(0...head) + [head + 1000, bytes.count - 5, bytes.count - 1, bytes.count] {
            var d = WSDecoder(role: .server)
            var buf = [UInt8]()
            var pos = 0
            var data = [UInt8]()
            var events: [WSDecoder.Event] = []
            var ended = false
            for piece in [bytes[0..<k], bytes[k...]] where !ended {
                buf += piece
                loop: while true {
                    let e = buf.withUnsafeMutableBytes { d.next($0, &pos) }
                    switch e {
                    case .needMore: break loop
                    case .data(let r): data += buf[r]
                    default:
                        events.append(e)
                        if case .close = e { ended = true; break loop }
                        if case .failure = e { ended = true; break loop }
                    }
                }
            }
            XCTAssertTrue(data == [1, 2, 3] + mid + long, "split at byte \(k) of \(bytes.count)")
            XCTAssertEqual(events, [.ping([4, 5]), .close(code: 1000, reason: "")], "split at byte \(k)")
        }
    }

    func testDecoderAcceptsFragmentedBinaryWithInterleavedControl() {
        let bytes = frame(WSOpcode.binary, [1, 2], fin: false) + frame(WSOpcode.pong, [7]) + frame(WSOpcode.continuation, [3], fin: false)
            + frame(WSOpcode.continuation, [4], fin: true) + frame(WSOpcode.close, [0x03, 0xE8] + Array("bye".utf8))
        let r = decode(bytes)
        XCTAssertEqual(r.data, [1, 2, 3, 4])
        XCTAssertEqual(r.events, [.pong([7]), .close(code: 1000, reason: "bye")])
    }

    func testDecoderClientSideTakesUnmaskedFrames() {
        let r = decode(frame(WSOpcode.binary, [5, 6, 7], masked: false), role: .client)
        XCTAssertEqual(r.data, [5, 6, 7])
        XCTAssertEqual(decode(frame(WSOpcode.binary, [5], masked: true), role: .client).events.first.flatMap(code), 1002)
        XCTAssertEqual(decode(frame(WSOpcode.binary, [5], masked: false), role: .server).events.first.flatMap(code), 1002)
    }

    private func code(_ e: WSDecoder.Event) -> UInt16? {
        if case .failure(let c, _) = e { return c }
        return nil
    }

    private func failure(_ bytes: [UInt8]) -> UInt16? { decode(bytes).events.last.flatMap(code) }

    func testTextFramesRefusedWith1003() {
        XCTAssertEqual(failure(frame(WSOpcode.text, Array("hi".utf8))), 1003)
    }

    func testBadContinuationsRefused() {
        XCTAssertEqual(failure(frame(WSOpcode.continuation, [1])), 1002)
        XCTAssertEqual(failure(frame(WSOpcode.binary, [1], fin: false) + frame(WSOpcode.binary, [2])), 1002)
    }

    func testMalformedHeadersEndTheStream() {
        XCTAssertEqual(failure([0xC2, 0x80, 1, 2, 3, 4]), 1002)                      // RSV1
        XCTAssertEqual(failure([0x83, 0x80, 1, 2, 3, 4]), 1002)                      // opcode 3
        XCTAssertEqual(failure(frame(WSOpcode.ping, [1], fin: false)), 1002)         // fragmented ping
        XCTAssertEqual(failure([0x89, 0x80 | 126, 0, 200, 1, 2, 3, 4]), 1002)        // ping > 125
        XCTAssertEqual(failure(frame(WSOpcode.binary, [1], masked: false)), 1002)    // unmasked from a client
        // The failure is sticky: nothing after it is read.
        var d = WSDecoder(role: .server)
        var buf = [0x83, 0x80, 1, 2, 3, 4] + frame(WSOpcode.binary, [1])
        var pos = 0
        let e1 = buf.withUnsafeMutableBytes { d.next($0, &pos) }
        let e2 = buf.withUnsafeMutableBytes { d.next($0, &pos) }
        XCTAssertEqual(e1, e2)
    }

    func testClosePayloadChecks() {
        XCTAssertEqual(decode(frame(WSOpcode.close, [])).events, [.close(code: nil, reason: "")])
        XCTAssertEqual(failure(frame(WSOpcode.close, [0x03])), 1002)                  // 1-byte payload
        XCTAssertEqual(failure(frame(WSOpcode.close, [0x03, 0xED])), 1002)            // 1005 on the wire
        XCTAssertEqual(failure(frame(WSOpcode.close, [0x03, 0xEE])), 1002)            // 1006 on the wire
        XCTAssertEqual(failure(frame(WSOpcode.close, [0x00, 0x10])), 1002)            // below 1000
        XCTAssertEqual(failure(frame(WSOpcode.close, [0x03, 0xE8, 0xFF, 0xFE])), 1007) // reason not UTF-8
        XCTAssertEqual(decode(frame(WSOpcode.close, [0x0F, 0xA0, 0x68])).events, [.close(code: 4000, reason: "h")])
    }

    func testCloseCodeRanges() {
        for c: UInt16 in [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 4999] { XCTAssertTrue(WSCloseCode.isValidOnWire(c)) }
        for c: UInt16 in [0, 999, 1004, 1005, 1006, 1015, 2000, 2999, 5000] { XCTAssertFalse(WSCloseCode.isValidOnWire(c)) }
    }

    // MARK: handshake validation

    private func request(_ lines: [String]) -> HTTPRequestHead {
        let text = lines.joined(separator: "\r\n") + "\r\n\r\n"
        guard case .complete(let h, _) = withBytes(Array(text.utf8), { HTTPParser.parseRequest($0) }) else {
            fatalError("test request does not parse")
        }
        return h
    }

    private let goodLines = ["GET /loft HTTP/1.1", "Host: front.test", "Upgrade: websocket", "Connection: keep-alive, Upgrade",
                             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]

    private func status(_ lines: [String]) -> Int? {
        do {
            _ = try WSHandshake.validate(request: request(lines))
            return nil
        } catch {
            return error.status
        }
    }

    func testUpgradeRequestValidation() {
        XCTAssertNil(status(goodLines))
        XCTAssertEqual(try? WSHandshake.validate(request: request(goodLines)), "dGhlIHNhbXBsZSBub25jZQ==")
        XCTAssertEqual(status(goodLines.filter { !$0.hasPrefix("Upgrade") }), 400)
        XCTAssertEqual(status(goodLines.filter { !$0.hasPrefix("Connection") }), 400)
        XCTAssertEqual(status(goodLines.filter { !$0.hasPrefix("Sec-WebSocket-Key") }), 400)
        XCTAssertEqual(status(goodLines + ["Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA=="]), 400)     // duplicate key
        XCTAssertEqual(status(goodLines.map { $0.hasPrefix("Sec-WebSocket-Key") ? "Sec-WebSocket-Key: c2hvcnQ=" : $0 }), 400)
        XCTAssertEqual(status(goodLines.filter { !$0.hasPrefix("Sec-WebSocket-Version") }), 426)
        XCTAssertEqual(status(goodLines.map { $0.hasPrefix("Sec-WebSocket-Version") ? "Sec-WebSocket-Version: 8" : $0 }), 426)
        XCTAssertEqual(status(["POST /loft HTTP/1.1"] + goodLines.dropFirst()), 405)
        XCTAssertEqual(status(goodLines + ["Content-Length: 5"]), 400)
    }

    func testUpgradeResponseValidation() {
        let key = "dGhlIHNhbXBsZSBub25jZQ=="
        func check(_ lines: [String]) -> String? {
            let text = lines.joined(separator: "\r\n") + "\r\n\r\n"
            guard case .complete(let h, _) = withBytes(Array(text.utf8), { HTTPParser.parseResponse($0) }) else { return "unparsed" }
            return WSHandshake.validate(response: h, key: key)
        }
        let good = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade",
                    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="]
        XCTAssertNil(check(good))
        XCTAssertNotNil(check(["HTTP/1.1 200 OK"] + good.dropFirst()))
        XCTAssertNotNil(check(good.map { $0.hasPrefix("Sec-WebSocket-Accept") ? "Sec-WebSocket-Accept: AAAA" : $0 }))
        XCTAssertNotNil(check(good + ["Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="]))
        XCTAssertNotNil(check(good.filter { !$0.hasPrefix("Upgrade") }))
        XCTAssertNotNil(check(good + ["Sec-WebSocket-Extensions: permessage-deflate"]))
    }

    func testPinParsing() {
        let bytes = (0..<32).map { UInt8($0) }
        XCTAssertEqual(TLSClientOptions.parsePin("sha256/" + Base64.encode(bytes)), bytes)
        XCTAssertEqual(TLSClientOptions.parsePin("sha256//" + Base64.encode(bytes)), bytes)
        XCTAssertEqual(TLSClientOptions.parsePin(Base64.encode(bytes)), bytes)
        XCTAssertEqual(TLSClientOptions.parsePin(Hex.encode(bytes)), bytes)
        XCTAssertEqual(TLSClientOptions.parsePin(bytes.map { Hex.encode([$0]).uppercased() }.joined(separator: ":")), bytes)
        XCTAssertNil(TLSClientOptions.parsePin("sha256/AAAA"))
        XCTAssertNil(TLSClientOptions.parsePin(String(repeating: "g", count: 64)))
    }
}
