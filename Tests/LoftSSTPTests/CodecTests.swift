import Testing
@testable import LoftSSTP

func hex(_ s: String) -> [UInt8] {
    let c = Array(s.filter { $0.isHexDigit })
    return stride(from: 0, to: c.count, by: 2).map { UInt8(String(c[$0...$0 + 1]), radix: 16)! }
}

func parse(_ b: [UInt8]) -> SSTP.Parsed { b.withUnsafeBytes { SSTP.parse($0) } }

@Suite struct SSTPCodecTests {
    // MS-SSTP 4.7: the three packets of the crypto binding example, byte for byte.
    static let connectRequest = hex("10 01 00 0E 00 01 00 01 00 01 00 06 00 01")
    static let connectAck = hex("""
        10 01 00 30 00 02 00 01 00 04 00 28 00 00 00 02 41 2B 48 9A EB D7 EC C7 D0 89 66 F2 6B E7 CD 72
        B2 31 A0 E9 21 0D 7C 91 B3 08 86 2B 03 44 C4 35
        """)
    static let connected = hex("""
        10 01 00 70 00 04 00 01 00 03 00 68 00 00 00 02 41 2B 48 9A EB D7 EC C7 D0 89 66 F2 6B E7 CD 72
        B2 31 A0 E9 21 0D 7C 91 B3 08 86 2B 03 44 C4 35 79 93 EF 31 4C 49 3D AC E9 F0 2D 60 E7 E6 1C 84
        B6 69 0A AF E9 D7 AE EA 92 CB BE 8A D5 99 42 2D 52 A6 8E FD 8C FF BF 52 77 0B 8F 0F E8 EC 73 71
        65 83 AF 6D 61 1E B6 D1 79 B3 B2 08 40 98 54 49
        """)
    static let nonce = hex("412B489AEBD7ECC7D08966F26BE7CD72B231A0E9210D7C91B308862B0344C435")

    @Test func specCallConnectRequest() {
        let m = SSTP.ControlMessage(.callConnectRequest, [SSTP.encapsulatedPPP()])
        #expect(SSTP.encode(m) == Self.connectRequest)
        #expect(parse(Self.connectRequest) == .control(m, length: 14))
    }

    @Test func specCallConnectAck() {
        guard case .control(let m, let n) = parse(Self.connectAck) else { Issue.record("not parsed"); return }
        #expect(n == 48 && m.messageType == .callConnectAck)
        let req = SSTP.BindingRequest(m.attribute(.cryptoBindingRequest)!)
        #expect(req == SSTP.BindingRequest(hashBitmask: SSTP.hashSHA256, nonce: Self.nonce))
        #expect(SSTP.encode(SSTP.ControlMessage(.callConnectAck, [req!.attribute])) == Self.connectAck)
    }

    @Test func specCallConnected() {
        guard case .control(let m, let n) = parse(Self.connected) else { Issue.record("not parsed"); return }
        #expect(n == 112 && m.messageType == .callConnected)
        let b = SSTP.Binding(m.attribute(.cryptoBinding)!)!
        #expect(b.hashProtocol == SSTP.hashSHA256 && b.nonce == Self.nonce)
        #expect(b.certHash == hex("7993EF314C493DACE9F02D60E7E61C84B6690AAFE9D7AEEA92CBBE8AD599422D"))
        #expect(SSTP.encode(SSTP.ControlMessage(.callConnected, [b.attribute])) == Self.connected)
    }

    @Test func dataPacketAndPieces() {
        let frame: [UInt8] = [0xFF, 0x03, 0x00, 0x21, 0x45, 0x00]
        let h = SSTP.dataHeader(payloadLength: frame.count)
        let packet = [h.0, h.1, h.2, h.3] + frame
        #expect(packet[0...3] == [0x10, 0x00, 0x00, 0x0A])
        #expect(parse(packet + [0x10]) == .data(payload: 4..<10, length: 10))
        for cut in 0..<packet.count { #expect(parse(Array(packet[0..<cut])) == .needMore) }
        // Reserved bits of the length are ignored.
        var r = packet
        r[2] |= 0xF0
        #expect(parse(r) == .data(payload: 4..<10, length: 10))
    }

    @Test func malformed() {
        if case .bad = parse([0x20, 0, 0, 4]) {} else { Issue.record("version 2 accepted") }
        if case .bad = parse([0x11]) {} else { Issue.record("version 0x11 not refused at once") }
        if case .bad = parse([0x10, 0, 0, 3]) {} else { Issue.record("length 3 accepted") }
        if case .bad = parse([0x10, 1, 0, 7, 0, 1, 0]) {} else { Issue.record("short control accepted") }
        // Two attributes announced, one present.
        var two = Self.connectRequest
        two[7] = 2
        if case .bad = parse(two) {} else { Issue.record("missing attribute accepted") }
        // An attribute longer than the packet, and one shorter than its header.
        var long = Self.connectRequest
        long[11] = 7
        if case .bad = parse(long) {} else { Issue.record("long attribute accepted") }
        var short = Self.connectRequest
        short[11] = 3
        if case .bad = parse(short) {} else { Issue.record("short attribute accepted") }
        // Bytes after the attributes.
        let extra = [0x10, 0x01, 0x00, 0x0F] + Self.connectRequest[4...] + [0]
        if case .bad = parse(Array(extra)) {} else { Issue.record("trailing bytes accepted") }
        // Typed attributes with the wrong length are not read.
        #expect(SSTP.BindingRequest(SSTP.Attribute(.cryptoBindingRequest, [0, 0, 0, 2])) == nil)
        #expect(SSTP.Binding(SSTP.Attribute(.cryptoBinding, [UInt8](repeating: 0, count: 99))) == nil)
        #expect(SSTP.StatusInfo(SSTP.Attribute(.statusInfo, [0, 0, 0])) == nil)
    }

    @Test func statusInfo() {
        let s = SSTP.StatusInfo(attributeID: 1, status: 4, value: [0, 2])
        #expect(SSTP.StatusInfo(s.attribute) == s)
        #expect(s.description == "value-not-supported (attribute 1)")
        #expect(SSTP.encode(SSTP.ControlMessage(.callAbort, [SSTP.Attribute(id: 9, value: [UInt8](repeating: 0, count: 4092))])) == nil)
    }

    @Test func http() {
        let req = String(decoding: SSTP.httpRequest(host: "vpn.example", correlationID: "ABC"), as: UTF8.self)
        #expect(req.hasPrefix("SSTP_DUPLEX_POST /sra_{BA195980-CD49-458b-9E23-C84EE0ADCD75}/ HTTP/1.1\r\n"))
        #expect(req.contains("Host: vpn.example\r\n") && req.contains("Content-Length: 18446744073709551615\r\n") && req.hasSuffix("\r\n\r\n"))
        func p(_ s: String) -> SSTP.HTTPResponse { Array(s.utf8).withUnsafeBytes { SSTP.parseHTTPResponse($0) } }
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\nServer: x\r\n\r\n"
        #expect(p(ok) == .ok(length: ok.utf8.count))
        #expect(p(ok + "\u{10}\u{01}") == .ok(length: ok.utf8.count))
        #expect(p(String(ok.dropLast(1))) == .needMore)
        #expect(p("HTT") == .needMore)
        #expect(p("HTTP/1.1 404 Not Found\r\n\r\n") == .refused("HTTP/1.1 404 Not Found"))
        #expect(p("\u{10}\u{01}\u{00}\u{0E}xxxx") == .refused("????xxxx"))
        #expect(p("HTTP/1.1 200 OK\r\n" + String(repeating: "X", count: 9000)) == .refused("response headers longer than 8 KiB"))
    }
}

@Suite struct PPPCodecTests {
    func frame(_ b: [UInt8]) -> (proto: UInt16, offset: Int)? { b.withUnsafeBytes { PPP.parseFrame($0) } }

    @Test func frames() {
        #expect(frame([0xFF, 0x03, 0xC0, 0x21, 1]).map { [Int($0.proto), $0.offset] } == [0xC021, 4])
        #expect(frame([0xC0, 0x21, 1]).map { [Int($0.proto), $0.offset] } == [0xC021, 2])      // ACFC
        #expect(frame([0xFF, 0x03, 0x21, 0x45]).map { [Int($0.proto), $0.offset] } == [0x21, 3]) // PFC
        #expect(frame([0x21, 0x45]).map { [Int($0.proto), $0.offset] } == [0x21, 1])
        #expect(frame([]) == nil)
        #expect(frame([0xFF, 0x03]) == nil)
        #expect(frame([0xC0]) == nil)
        #expect(frame([0xC0, 0x20]) == nil)   // an even last byte is not a protocol
        let h = PPP.header(PPP.ipcp)
        #expect([h.0, h.1, h.2, h.3] == [0xFF, 0x03, 0x80, 0x21])
    }

    @Test func packetsAndOptions() {
        let opts = [PPP.Option.u16(PPP.LCPOption.mru, 1500), .u32(PPP.LCPOption.magicNumber, 0xDEADBEEF),
                    PPP.Option(type: PPP.LCPOption.acfc)]
        let data = PPP.encodeOptions(opts)!
        #expect(data == [1, 4, 0x05, 0xDC, 5, 6, 0xDE, 0xAD, 0xBE, 0xEF, 8, 2])
        #expect(PPP.parseOptions(data) == opts)
        #expect(opts[0].u16 == 1500 && opts[1].u32 == 0xDEADBEEF && opts[2].u16 == nil)
        let p = PPP.Packet(.configureRequest, id: 7, data: data)
        let bytes = p.bytes!
        #expect(bytes[0...3] == [1, 7, 0, 16])
        // Padding after the length is ignored; a length past the bytes or below 4 is refused.
        #expect((bytes + [0, 0]).withUnsafeBytes { PPP.Packet($0) } == p)
        #expect(bytes.dropLast().withUnsafeBytes { PPP.Packet($0) } == nil)
        #expect([1, 7, 0, 3].withUnsafeBytes { PPP.Packet($0) } == nil)
        #expect(PPP.parseOptions([1]) == nil)
        #expect(PPP.parseOptions([1, 1]) == nil)
        #expect(PPP.parseOptions([1, 5, 0, 0]) == nil)
        #expect(PPP.parseOptions([]) == [])
        #expect(PPP.encodeOptions([PPP.Option(type: 1, data: [UInt8](repeating: 0, count: 254))]) == nil)
    }

    @Test func pap() {
        let r = PAP.request(id: 3, user: Array("u".utf8), password: Array("pw".utf8))!
        #expect(r.bytes! == [1, 3, 0, 9, 1, 0x75, 2, 0x70, 0x77])
        #expect(PAP.reply(PPP.Packet(code: 2, id: 3, data: [2, 0x6F, 0x6B])) == .ack(message: "ok"))
        #expect(PAP.reply(PPP.Packet(code: 3, id: 3, data: [3, 0x62, 0x61, 0x64])) == .nak(message: "bad"))
        #expect(PAP.reply(PPP.Packet(code: 3, id: 3, data: [9, 0x62])) == .nak(message: ""))
        #expect(PAP.reply(PPP.Packet(code: 1, id: 3)) == nil)
        #expect(PAP.request(id: 1, user: [UInt8](repeating: 0x61, count: 256), password: []) == nil)
    }

    @Test func chap() {
        let c = PPP.Packet(code: CHAP.challenge, id: 9, data: [2, 0xAA, 0xBB, 0x73, 0x72, 0x76])
        #expect(CHAP.parseChallenge(c)! == ([0xAA, 0xBB], Array("srv".utf8)))
        #expect(CHAP.parseChallenge(PPP.Packet(code: CHAP.challenge, id: 9, data: [3, 0xAA])) == nil)
        #expect(CHAP.parseChallenge(PPP.Packet(code: CHAP.challenge, id: 9)) == nil)
        let r = CHAP.response(id: 9, value: [1, 2], name: Array("u".utf8))!
        #expect(r.bytes! == [2, 9, 0, 8, 2, 1, 2, 0x75])
        #expect(CHAP.message(PPP.Packet(code: CHAP.failure, id: 9, data: Array("E=691 R=0\u{01}".utf8))) == "E=691 R=0?")
    }
}

@Suite struct MSCHAPv2Tests {
    // RFC 2759 9.2.
    static let user = Array("User".utf8)
    static let password = "clientPass"
    static let authChallenge = hex("5B 5D 7C 7D 7B 3F 2F 3E 3C 2C 60 21 32 26 26 28")
    static let peerChallenge = hex("21 40 23 24 25 5E 26 2A 28 29 5F 2B 3A 33 7C 7E")
    static let ntResponse = hex("82 30 9E CD 8D 70 8B 5E A0 8F AA 39 81 CD 83 54 42 33 11 4A 3D 85 D6 DF")

    @Test func rfc2759Vectors() throws {
        #expect(MSCHAPv2.challengeHash(peer: Self.peerChallenge, authenticator: Self.authChallenge, user: Self.user)
                == hex("D0 2E 43 86 BC E9 12 26"))
        let h = try MSCHAPv2.passwordHash(Self.password)
        #expect(h == hex("44 EB BA 8D 53 12 B8 D6 11 47 44 11 F5 69 89 AE"))
        #expect(try MSCHAPv2.passwordHashHash(h) == hex("41 C0 0C 58 4B D2 D9 1C 40 17 A2 A1 2F A5 9F 3F"))
        #expect(try MSCHAPv2.ntResponse(authenticatorChallenge: Self.authChallenge, peerChallenge: Self.peerChallenge,
                                        user: Self.user, password: Self.password) == Self.ntResponse)
        #expect(try MSCHAPv2.authenticatorResponse(password: Self.password, ntResponse: Self.ntResponse,
                                                   peerChallenge: Self.peerChallenge,
                                                   authenticatorChallenge: Self.authChallenge, user: Self.user)
                == "S=407A5589115FD0D6209F510FE9C04566932CDA56")
        // A wrong password gives another response.
        #expect(try MSCHAPv2.ntResponse(authenticatorChallenge: Self.authChallenge, peerChallenge: Self.peerChallenge,
                                        user: Self.user, password: "clientPasS") != Self.ntResponse)
        #expect(MSCHAPv2.responseValue(peerChallenge: Self.peerChallenge, ntResponse: Self.ntResponse).count == 49)
    }

    // RFC 3079 3.5.3: the master key, and the 128-bit start keys (8B7C… is the server's send key,
    // which is the client's receive key).
    @Test func rfc3079MasterKeys() throws {
        let hh = hex("41 C0 0C 58 4B D2 D9 1C 40 17 A2 A1 2F A5 9F 3F")
        #expect(MSCHAPv2.masterKey(passwordHashHash: hh, ntResponse: Self.ntResponse)
                == hex("FD EC E3 71 7A 8C 83 8C B3 88 E5 27 AE 3C DD 31"))
        let keys = try MSCHAPv2.clientMasterKeys(password: Self.password, ntResponse: Self.ntResponse)
        #expect(keys.receive == hex("8B 7C DC 14 9B 99 3A 1B A1 18 CB 15 3F 56 DC CB"))
        #expect(keys.send == hex("D5 F0 E9 52 1E 3E A9 58 96 45 E8 60 51 C8 22 26"))
    }

    @Test func desKeyExpansion() {
        // RFC 2759's DES keys: 7 bytes spread over 8 (parity bit left clear).
        #expect(MSCHAPv2.desKey(hex("FF FF FF FF FF FF FF")[...]) == [UInt8](repeating: 0xFE, count: 8))
        #expect(MSCHAPv2.desKey(hex("00 00 00 00 00 00 01")[...]) == hex("00 00 00 00 00 00 00 02"))
    }

    @Test func failureMessages() {
        #expect(MSCHAPv2.failureReason("E=691 R=0 C=00112233445566778899AABBCCDDEEFF V=3 M=Authentication failure")
                == "E=691 (authentication failure): Authentication failure")
        #expect(MSCHAPv2.failureReason("E=649 R=0") == "E=649 (no dial-in permission)")
        #expect(MSCHAPv2.failureReason("nonsense") == "nonsense")
    }
}

@Suite struct CryptoBindingTests {
    // A computed example: the HLAK from RFC 3079's keys, the nonce of MS-SSTP 4.7, and the
    // SHA-256 of the bytes "a certificate" as the certificate hash; CMK and MAC computed
    // independently with Python's hmac and hashlib:
    //   cmk = hmac(hlak, b"SSTP inner method derived CMK" + bytes((32, 0, 1)), sha256)
    //   mac = hmac(cmk, the Call Connected packet with a zero MAC, sha256)
    @Test func sha256Binding() {
        let hlak = CryptoBinding.clientHLAK(send: hex("D5F0E9521E3EA9589645E86051C82226"),
                                            receive: hex("8B7CDC149B993A1BA118CB153F56DCCB"))
        #expect(CryptoBinding.cmk(hlak: hlak, sha256: true)
                == hex("150707e682b16f4ca9430560c562894afd10050db4182d35c3e9e06284445271"))
        let cert = hex("81acd762140fa692a142822d2fbe4dc6f54bcaa501f68ab37e5aeed0bafe4d99")
        let req = SSTP.BindingRequest(hashBitmask: SSTP.hashSHA1 | SSTP.hashSHA256, nonce: SSTPCodecTests.nonce)
        let msg = CryptoBinding.callConnected(request: req, certHash: cert, hlak: hlak)
        #expect(msg.count == 112)
        #expect(Array(msg[0..<16]) == hex("10 01 00 70 00 04 00 01 00 03 00 68 00 00 00 02"))
        #expect(Array(msg[16..<48]) == SSTPCodecTests.nonce && Array(msg[48..<80]) == cert)
        #expect(Array(msg[80..<112]) == hex("794a243df3555801824fec2f01904fc4aabf8b091e8a580fee1de15851fc35b9"))
    }

    // PAP: no keys, the HLAK is 32 zero bytes; a server offering only SHA-1 gets SHA-1 values
    // padded with zeros to 32 bytes.
    @Test func sha1BindingWithoutKeys() {
        let cert = hex("bbb2b7b14f224ff6ea3868f9803240406726b77c")
        let req = SSTP.BindingRequest(hashBitmask: SSTP.hashSHA1, nonce: SSTPCodecTests.nonce)
        let msg = CryptoBinding.callConnected(request: req, certHash: cert, hlak: CryptoBinding.noKeysHLAK)
        #expect(msg[15] == SSTP.hashSHA1)
        #expect(Array(msg[48..<80]) == cert + [UInt8](repeating: 0, count: 12))
        #expect(Array(msg[80..<112]) == hex("dcb38da5c098aeed65de97380c3e413ea9479ee5") + [UInt8](repeating: 0, count: 12))
    }
}
