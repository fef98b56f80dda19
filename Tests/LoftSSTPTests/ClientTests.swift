import Testing
import LoftCore
@testable import LoftSSTP

/// Records what the client reports.
final class Recorder: SSTPClientDelegate {
    var ups: [SSTPClient.Link] = []
    var packets: [[UInt8]] = []
    var ends: [SSTPClient.End] = []
    func sstpOutputReady(_ c: SSTPClient) {}
    func sstpUp(_ c: SSTPClient, link: SSTPClient.Link) { ups.append(link) }
    func sstpPacket(_ c: SSTPClient, _ packet: UnsafeRawBufferPointer) { packets.append(Array(packet)) }
    func sstpDown(_ c: SSTPClient, _ end: SSTPClient.End) { ends.append(end) }
}

/// The server's side of the conversation, built from the codecs: it reads what the client
/// queued and answers as the script says.
struct ScriptedServer {
    let client: SSTPClient
    let rec = Recorder()
    var now: UInt64 = 1_000
    var oneByteAtATime = false
    var certHash = (sha1: [UInt8](repeating: 0x11, count: 20), sha256: [UInt8](repeating: 0x22, count: 32))
    static let nonce = [UInt8](repeating: 0x5A, count: 32)
    var counter: UInt8 = 0
    /// Every IPV6CP packet the client sent, as `take` saw them.
    var ipv6cpSeen: [PPP.Packet] = []

    init(auth: [SSTPClient.AuthMethod] = [.mschapv2, .pap], password: String = "clientPass", oneByteAtATime: Bool = false,
         ipv6: Bool = true, reserved: [IPAddress] = []) {
        var n: UInt8 = 0
        var settings = SSTPClient.Settings(host: "vpn.example", user: "User", password: password, auth: auth, ipv6: ipv6)
        settings.reservedAddresses = reserved
        // Counting bytes, except that every 16 random bytes (the correlation id, the MS-CHAPv2
        // peer challenge) are RFC 2759 §9.2's peer challenge, so the client's answer can be
        // judged with the RFC's vectors instead of with the client's own MSCHAPv2 code.
        let random: (Int) -> [UInt8] = { k in
            var counted: [UInt8] = []
            for _ in 0..<k { n &+= 1; counted.append(n) }
            return k == 16 ? RFC2759.peerChallenge : counted
        }
        client = SSTPClient(settings: settings, certHash: (sha1: [UInt8](repeating: 0x11, count: 20), sha256: [UInt8](repeating: 0x22, count: 32)),
                            random: random)
        client.delegate = rec
        self.oneByteAtATime = oneByteAtATime
    }

    /// Takes the client's output: the HTTP request (as text) and SSTP packets.
    mutating func take() -> (http: String?, control: [SSTP.ControlMessage], ppp: [(UInt16, PPP.Packet?, [UInt8])]) {
        var out = client.output
        client.output.removeAll()
        var http: String?
        if out.starts(with: Array("SSTP_DUPLEX_POST".utf8)) {
            let end = (0..<(out.count - 3)).first { out[$0..<($0 + 4)] == [13, 10, 13, 10] }! + 4
            http = String(decoding: out[0..<end], as: UTF8.self)
            out = Array(out[end...])
        }
        var control: [SSTP.ControlMessage] = []
        var ppp: [(UInt16, PPP.Packet?, [UInt8])] = []
        var at = 0
        while at < out.count {
            let r = out[at...].withUnsafeBytes { SSTP.parse($0) }
            switch r {
            case .control(let m, let n): control.append(m); at += n
            case .data(let payload, let n):
                let frame = Array(out[(at + payload.lowerBound)..<(at + payload.upperBound)])
                let (proto, off) = frame.withUnsafeBytes { PPP.parseFrame($0) }!
                let info = Array(frame[off...])
                ppp.append((proto, info.withUnsafeBytes { PPP.Packet($0) }, info))
                if proto == PPP.ipv6cp, let p = ppp.last?.1 { ipv6cpSeen.append(p) }
                at += n
            default: Issue.record("client sent bad SSTP: \(r)"); return (http, control, ppp)
            }
        }
        return (http, control, ppp)
    }

    func feed(_ bytes: [UInt8]) {
        if oneByteAtATime {
            for b in bytes { [b].withUnsafeBytes { client.receive($0, now: now) } }
        } else {
            bytes.withUnsafeBytes { client.receive($0, now: now) }
        }
    }
    func send(_ m: SSTP.ControlMessage) { feed(SSTP.encode(m)!) }
    func send(_ proto: UInt16, _ p: PPP.Packet) {
        let body = p.bytes!
        let h = SSTP.dataHeader(payloadLength: body.count + 4)
        let ph = PPP.header(proto)
        feed([h.0, h.1, h.2, h.3, ph.0, ph.1, ph.2, ph.3] + body)
    }

    /// HTTP, Call Connect, and LCP with `authOption` requested by the server; the client's
    /// own LCP request acked. Leaves the client in the auth phase.
    @discardableResult
    mutating func upToAuth(authOption: [UInt8]) -> [(UInt16, PPP.Packet?, [UInt8])] {
        client.start(now: now)
        let (http, _, _) = take()
        #expect(http?.hasPrefix("SSTP_DUPLEX_POST /sra_{BA195980-CD49-458b-9E23-C84EE0ADCD75}/ HTTP/1.1\r\n") == true)
        feed(Array("HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\n".utf8))
        let (_, cc, _) = take()
        #expect(cc == [SSTP.ControlMessage(.callConnectRequest, [SSTP.encapsulatedPPP()])])
        send(SSTP.ControlMessage(.callConnectAck, [SSTP.BindingRequest(hashBitmask: SSTP.hashSHA256, nonce: Self.nonce).attribute]))
        let (_, _, lcpReq) = take()
        #expect(lcpReq.count == 1 && lcpReq[0].0 == PPP.lcp && lcpReq[0].1?.code == 1)
        let req = lcpReq[0].1!
        send(PPP.lcp, PPP.Packet(.configureAck, id: req.id, data: req.data))
        let opts = PPP.encodeOptions([.u16(PPP.LCPOption.mru, 1400), PPP.Option(type: PPP.LCPOption.authProtocol, data: authOption),
                                      .u32(PPP.LCPOption.magicNumber, 0x01020304)])!
        send(PPP.lcp, PPP.Packet(.configureRequest, id: 1, data: opts))
        let (_, _, ack) = take()
        #expect(ack.count >= 1 && ack[0].1 == PPP.Packet(.configureAck, id: 1, data: opts))
        #expect(client.phase == .auth)
        return Array(ack.dropFirst())
    }

    /// MS-CHAPv2 as a server checks it, judged with RFC 2759 §9.2's vectors (user "User",
    /// password "clientPass", its authenticator and peer challenges), not with the client's own
    /// MSCHAPv2 code; returns the HLAK the server derives (RFC 3079 §3.5.3's keys).
    mutating func mschapv2(password: String = "clientPass", authenticatorOK: Bool = true) -> [UInt8]? {
        precondition(password == RFC2759.password, "the vectors are for the RFC's password")
        let challenge = RFC2759.authChallenge
        send(PPP.chap, PPP.Packet(code: CHAP.challenge, id: 42, data: [16] + challenge + Array("srv".utf8)))
        let (_, _, resp) = take()
        guard resp.count == 1, resp[0].0 == PPP.chap, let r = resp[0].1, r.code == CHAP.response, r.id == 42,
              r.data.count == 1 + 49 + 4, r.data[0] == 49 else {
            Issue.record("no MS-CHAPv2 response: \(resp)")
            return nil
        }
        let peer = Array(r.data[1..<17])
        let nt = Array(r.data[25..<49])
        #expect(Array(r.data[17..<25]) == [UInt8](repeating: 0, count: 8) && r.data[49] == 0)
        #expect(Array(r.data[50...]) == Array("User".utf8))
        #expect(peer == RFC2759.peerChallenge, "the peer challenge is not the client's random bytes")
        guard nt == RFC2759.ntResponse else {
            send(PPP.chap, PPP.Packet(code: CHAP.failure, id: 42,
                                      data: Array("E=691 R=0 C=00000000000000000000000000000000 V=3 M=Authentication failure".utf8)))
            return nil
        }
        var auth = RFC2759.authenticatorResponse
        if !authenticatorOK { auth = "S=" + String(repeating: "0", count: 40) }
        send(PPP.chap, PPP.Packet(code: CHAP.success, id: 42, data: Array((auth + " M=Welcome").utf8)))
        // The server's HLAK: its MasterReceiveKey | MasterSendKey, which are the client's send
        // and receive keys (RFC 3079 §3.5.3).
        return RFC2759.clientMasterSendKey + RFC2759.clientMasterReceiveKey
    }

    /// Checks the Call Connected message against the server's HLAK: byte for byte against the
    /// message computed outside loft (Python's hmac and hashlib, MS-SSTP §2.2.10 and §3.2.5.2.2:
    /// CMK = HMAC-SHA256(HLAK, "SSTP inner method derived CMK" | 32 0 | 1), the MAC an
    /// HMAC-SHA256 with the CMK over the message with a zero MAC; the same computation as
    /// Tests/interop/sstp_server.py), for the two HLAKs the tests use: MS-CHAPv2's from RFC
    /// 3079's keys, and PAP's 32 zero bytes. Nonce 0x5A x 32, certificate hash 0x22 x 32.
    func checkBinding(_ m: SSTP.ControlMessage, hlak: [UInt8]) {
        #expect(m.messageType == .callConnected)
        guard let b = m.attribute(.cryptoBinding).flatMap(SSTP.Binding.init) else { Issue.record("no binding"); return }
        #expect(b.hashProtocol == SSTP.hashSHA256 && b.nonce == Self.nonce && b.certHash == certHash.sha256)
        let head = "100100700004000100030068000000025a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
            + "2222222222222222222222222222222222222222222222222222222222222222"
        let mac: String
        switch hlak {
        case RFC2759.clientMasterSendKey + RFC2759.clientMasterReceiveKey:
            mac = "25fada785c77990c1a49126d00d00cb7081c47a5eed885c7af303a70f9f33fea"
        case [UInt8](repeating: 0, count: 32):
            mac = "24309537defd01fe84e74d99375ecc544a6dbbb2cec1d042550f727b09ef58eb"
        default:
            Issue.record("no recorded Call Connected for this HLAK"); return
        }
        #expect(SSTP.encode(m) == RFC2759.hex(head + mac), "compound MAC does not verify with the server's HLAK")
    }

    /// IPCP: the client asks for 0.0.0.0 and DNS, the server Naks with its values, then Acks;
    /// the server's own request carries its address and a compression option the client rejects.
    mutating func ipcp(address: [UInt8] = [198, 18, 5, 2]) {
        var (_, _, req) = take()
        let r = req.first { $0.0 == PPP.ipcp }!.1!
        #expect(PPP.parseOptions(r.data) == [.u32(PPP.IPCPOption.address, 0), .u32(PPP.IPCPOption.primaryDNS, 0),
                                             .u32(PPP.IPCPOption.secondaryDNS, 0)])
        send(PPP.ipcp, PPP.Packet(.configureNak, id: r.id, data: PPP.encodeOptions([
            PPP.Option(type: PPP.IPCPOption.address, data: address), PPP.Option(type: PPP.IPCPOption.primaryDNS, data: [198, 18, 5, 1]),
            PPP.Option(type: PPP.IPCPOption.secondaryDNS, data: [198, 18, 5, 53])])!))
        (_, _, req) = take()
        let r2 = req.first { $0.0 == PPP.ipcp }!.1!
        #expect(r2.id != r.id)
        let compression = PPP.Option(type: 2, data: [0x00, 0x2D, 0x0F, 0x01])
        send(PPP.ipcp, PPP.Packet(.configureRequest, id: 7, data: PPP.encodeOptions([.u32(PPP.IPCPOption.address, 0xC6120501), compression])!))
        let (_, _, rej) = take()
        #expect(rej.map { $0.1 } == [PPP.Packet(.configureReject, id: 7, data: PPP.encodeOptions([compression])!)])
        send(PPP.ipcp, PPP.Packet(.configureRequest, id: 8, data: PPP.encodeOptions([.u32(PPP.IPCPOption.address, 0xC6120501)])!))
        let (_, _, ack) = take()
        #expect(ack.map { $0.1?.code } == [2])
        #expect(client.phase == .network)
        send(PPP.ipcp, PPP.Packet(.configureAck, id: r2.id, data: r2.data))
    }
}

/// RFC 2759 §9.2's MS-CHAPv2 example and RFC 3079 §3.5.3's keys from it.
enum RFC2759 {
    static let password = "clientPass"
    static let authChallenge = hex("5B5D7C7D7B3F2F3E3C2C602132262628")
    static let peerChallenge = hex("21402324255E262A28295F2B3A337C7E")
    static let ntResponse = hex("82309ECD8D708B5EA08FAA3981CD83544233114A3D85D6DF")
    static let authenticatorResponse = "S=407A5589115FD0D6209F510FE9C04566932CDA56"
    static let clientMasterSendKey = hex("D5F0E9521E3EA9589645E86051C82226")
    static let clientMasterReceiveKey = hex("8B7CDC149B993A1BA118CB153F56DCCB")
    static func hex(_ s: String) -> [UInt8] {
        let c = Array(s.utf8)
        return stride(from: 0, to: c.count, by: 2).map { UInt8(String(decoding: c[$0..<($0 + 2)], as: UTF8.self), radix: 16)! }
    }
}

@Suite struct SSTPClientTests {
    @Test(arguments: [false, true]) func mschapv2ToUp(oneByteAtATime: Bool) {
        var s = ScriptedServer(oneByteAtATime: oneByteAtATime)
        s.upToAuth(authOption: [0xC2, 0x23, 0x81])
        guard let hlak = s.mschapv2() else { Issue.record("MS-CHAPv2 did not succeed"); return }
        let (_, cc, _) = s.take()
        #expect(cc.count == 1)
        if let m = cc.first { s.checkBinding(m, hlak: hlak) }
        // The IPCP request left with the Call Connected message; put it back for ipcp().
        s.client.output = []
        s.client.tick(now: s.now + 3_000)   // retransmit timer: the request again, same id
        s.now += 3_000
        s.ipcp()
        #expect(s.client.phase == .up)
        #expect(s.rec.ups == [SSTPClient.Link(address: IPAddress("198.18.5.2")!, dns: [IPAddress("198.18.5.1")!, IPAddress("198.18.5.53")!],
                                              peerMRU: 1400, auth: .mschapv2)])
        // IP both ways.
        let ip: [UInt8] = [0x45, 0, 0, 20] + [UInt8](repeating: 7, count: 16)
        s.send(PPP.ipv4, PPP.Packet(code: 0x45, id: 0, data: Array(ip[4...])))   // an IPv4 packet is any bytes here
        #expect(s.rec.packets == [[0x45, 0, 0, 20] + Array(ip[4...])])
        #expect(ip.withUnsafeBytes { s.client.send($0) })
        let (_, _, out) = s.take()
        #expect(out.count == 1 && out[0].0 == PPP.ipv4 && out[0].2 == ip)
        #expect([UInt8](repeating: 0, count: 1401).withUnsafeBytes { s.client.send($0) } == false)   // above the server's MRU
        #expect(s.client.counters.packetsIn == 1 && s.client.counters.packetsOut == 1 && s.client.counters.droppedOut == 1)
        #expect(s.rec.ends.isEmpty)
    }

    @Test func papWithNakAndRejectPaths() {
        var s = ScriptedServer(auth: [.pap])
        s.client.start(now: s.now)
        _ = s.take()
        s.feed(Array("HTTP/1.1 200 OK\r\n\r\n".utf8))
        _ = s.take()
        s.send(SSTP.ControlMessage(.callConnectAck, [SSTP.BindingRequest(hashBitmask: SSTP.hashSHA256, nonce: ScriptedServer.nonce).attribute]))
        var (_, _, lcp) = s.take()
        let first = lcp[0].1!
        // The server rejects the MRU option and Naks the magic number: the client asks again
        // without MRU and with a new magic number, under a new id.
        s.send(PPP.lcp, PPP.Packet(.configureReject, id: first.id, data: PPP.encodeOptions([.u16(PPP.LCPOption.mru, 1500)])!))
        (_, _, lcp) = s.take()
        let second = lcp[0].1!
        #expect(second.id != first.id && PPP.parseOptions(second.data)!.map(\.type) == [PPP.LCPOption.magicNumber])
        let oldMagic = PPP.parseOptions(second.data)![0]
        s.send(PPP.lcp, PPP.Packet(.configureNak, id: second.id, data: PPP.encodeOptions([oldMagic])!))
        (_, _, lcp) = s.take()
        let third = lcp[0].1!
        #expect(PPP.parseOptions(third.data)![0] != oldMagic)
        // A stale Ack (old id) changes nothing; the right one opens our side.
        s.send(PPP.lcp, PPP.Packet(.configureAck, id: second.id, data: second.data))
        s.send(PPP.lcp, PPP.Packet(.configureAck, id: third.id, data: third.data))
        // The server asks for CHAP-MD5: Nak with PAP (the only method allowed); then an option
        // loft does not know: Reject; then PAP: Ack.
        s.send(PPP.lcp, PPP.Packet(.configureRequest, id: 1, data: [3, 5, 0xC2, 0x23, 0x05]))
        (_, _, lcp) = s.take()
        #expect(lcp[0].1 == PPP.Packet(.configureNak, id: 1, data: [3, 4, 0xC0, 0x23]))
        s.send(PPP.lcp, PPP.Packet(.configureRequest, id: 2, data: [3, 4, 0xC0, 0x23, 13, 3, 6]))
        (_, _, lcp) = s.take()
        #expect(lcp[0].1 == PPP.Packet(.configureReject, id: 2, data: [13, 3, 6]))
        #expect(s.client.phase == .lcp)
        s.send(PPP.lcp, PPP.Packet(.configureRequest, id: 3, data: [3, 4, 0xC0, 0x23]))
        var out = s.take().ppp
        #expect(out[0].1 == PPP.Packet(.configureAck, id: 3, data: [3, 4, 0xC0, 0x23]))
        #expect(s.client.phase == .auth)
        // PAP: the request carries the user and password; it is sent again on the restart timer.
        let pap = out[1]
        #expect(pap.0 == PPP.pap && pap.1 == PAP.request(id: pap.1!.id, user: Array("User".utf8), password: Array("clientPass".utf8)))
        s.now += 3_000
        s.client.tick(now: s.now)
        out = s.take().ppp
        #expect(out.count == 1 && out[0].1 == pap.1)
        s.send(PPP.pap, PPP.Packet(code: 2, id: pap.1!.id, data: [0]))
        let after = s.take()
        #expect(after.control.count == 1)
        if let m = after.control.first { s.checkBinding(m, hlak: [UInt8](repeating: 0, count: 32)) }
        s.client.output = after.ppp.flatMap { p -> [UInt8] in
            let h = SSTP.dataHeader(payloadLength: p.2.count + 4)
            let ph = PPP.header(p.0)
            return [h.0, h.1, h.2, h.3, ph.0, ph.1, ph.2, ph.3] + p.2
        }
        s.ipcp(address: [10, 0, 0, 7])
        #expect(s.rec.ups.map(\.address) == [IPAddress("10.0.0.7")!] && s.rec.ups.first?.auth == .pap)
    }

    @Test func wrongPasswordMSCHAPv2() {
        var s = ScriptedServer(password: "wrong")
        s.upToAuth(authOption: [0xC2, 0x23, 0x81])
        #expect(s.mschapv2(password: "clientPass") == nil)
        #expect(s.rec.ends == [.authFailed("MS-CHAPv2: E=691 (authentication failure): Authentication failure")])
        #expect(s.client.phase == .down && s.client.nextDeadline == nil)
        // Nothing more is reported, whatever comes.
        s.send(SSTP.ControlMessage(.callAbort))
        #expect(s.rec.ends.count == 1)
    }

    @Test func serverWithoutThePassword() {
        var s = ScriptedServer()
        s.upToAuth(authOption: [0xC2, 0x23, 0x81])
        _ = s.mschapv2(authenticatorOK: false)
        #expect(s.rec.ends == [.authFailed("MS-CHAPv2: the server's authenticator response is wrong (it does not know the password)")])
        #expect(s.take().control.isEmpty)   // no Call Connected for an impostor
    }

    @Test func papRefused() {
        var s = ScriptedServer(auth: [.pap, .mschapv2])
        let pap = s.upToAuth(authOption: [0xC0, 0x23]).first { $0.0 == PPP.pap }!.1!
        s.send(PPP.pap, PPP.Packet(code: 3, id: pap.id, data: [13] + Array("Bad password!".utf8)))
        #expect(s.rec.ends == [.authFailed("PAP: the server refused the user or password (Bad password!)")])
    }

    @Test func authNotAllowed() {
        var s = ScriptedServer(auth: [.mschapv2])
        s.client.start(now: s.now)
        s.feed(Array("HTTP/1.1 200 OK\r\n\r\n".utf8))
        s.send(SSTP.ControlMessage(.callConnectAck, [SSTP.BindingRequest(hashBitmask: SSTP.hashSHA256, nonce: ScriptedServer.nonce).attribute]))
        for id in 1...11 { s.send(PPP.lcp, PPP.Packet(.configureRequest, id: UInt8(id), data: [3, 4, 0xC0, 0x23])) }
        #expect(s.rec.ends == [.authFailed("the server asks for PAP, and auth allows only mschapv2")])
    }

    @Test func refusals() {
        var s = ScriptedServer()
        s.client.start(now: s.now)
        s.feed(Array("HTTP/1.1 403 Forbidden\r\n\r\n".utf8))
        #expect(s.rec.ends == [.refused("the server answered the SSTP request with 'HTTP/1.1 403 Forbidden'")])

        s = ScriptedServer()
        s.client.start(now: s.now)
        s.feed(Array("HTTP/1.1 200 OK\r\n\r\n".utf8))
        s.send(SSTP.ControlMessage(.callConnectNak, [SSTP.StatusInfo(attributeID: 1, status: 4, value: [0, 1]).attribute]))
        #expect(s.rec.ends == [.refused("Call Connect refused (value-not-supported (attribute 1))")])

        s = ScriptedServer()
        s.client.start(now: s.now)
        s.feed(Array("HTTP/1.1 200 OK\r\n\r\n".utf8) + [0x11, 0, 0, 4])
        #expect(s.rec.ends == [.protocolError("not SSTP: version 0x11, not 0x10")])
        #expect(s.take().control.map(\.messageType) == [.callConnectRequest, .callAbort])

        s = ScriptedServer()
        s.client.start(now: s.now)
        s.feed(Array("HTTP/1.1 200 OK\r\n\r\n".utf8))
        s.send(SSTP.ControlMessage(.callConnectAck))
        #expect(s.rec.ends == [.protocolError("Call Connect Acknowledge without a usable Crypto Binding Request")])
    }

    @Test func timers() {
        // The handshake deadline.
        var s = ScriptedServer()
        s.client.start(now: 1_000)
        #expect(s.client.nextDeadline == 31_000)
        s.client.tick(now: 30_999)
        #expect(s.rec.ends.isEmpty)
        s.client.tick(now: 31_000)
        #expect(s.rec.ends == [.timeout("no link within 30 s (stuck in http)")])

        // LCP's Configure-Request goes out maxConfigure times, then the link gives up.
        s = ScriptedServer()
        s.client.start(now: s.now)
        s.feed(Array("HTTP/1.1 200 OK\r\n\r\n".utf8))
        s.send(SSTP.ControlMessage(.callConnectAck, [SSTP.BindingRequest(hashBitmask: SSTP.hashSHA1, nonce: ScriptedServer.nonce).attribute]))
        _ = s.take()
        var sent = 1
        var t: UInt64 = 1_000
        while s.rec.ends.isEmpty, let d = s.client.nextDeadline, d < 100_000 {
            t = d
            s.feed([0x10, 0x01, 0x00, 0x08, 0x00, 0x08, 0x00, 0x00].map { $0 })   // an Echo Request keeps the link heard
            s.client.tick(now: t)
            sent += s.take().ppp.filter { $0.0 == PPP.lcp }.count
        }
        #expect(sent == 10 && s.rec.ends == [.timeout("LCP: no answer to 10 Configure-Requests")], "\(s.rec.ends)")
    }

    @Test func keepalive() {
        var s = ScriptedServer(auth: [.pap], ipv6: false)
        let pap = s.upToAuth(authOption: [0xC0, 0x23]).first { $0.0 == PPP.pap }!.1!
        s.send(PPP.pap, PPP.Packet(code: 2, id: pap.id, data: [0]))
        s.ipcp()
        #expect(s.client.phase == .up)
        // Silence for the interval: one Echo Request; for twice that: down.
        let heard = s.now
        #expect(s.client.nextDeadline == heard + 30_000)
        s.client.tick(now: heard + 30_000)
        #expect(s.take().control.map(\.messageType) == [.echoRequest])
        #expect(s.client.nextDeadline == heard + 60_000)
        s.client.tick(now: heard + 45_000)
        #expect(s.take().control.isEmpty && s.rec.ends.isEmpty)
        // An answer resets the clock.
        s.now = heard + 50_000
        s.send(SSTP.ControlMessage(.echoResponse))
        #expect(s.client.nextDeadline == heard + 80_000)
        s.client.tick(now: heard + 80_000)
        s.client.tick(now: heard + 110_000)
        #expect(s.rec.ends == [.timeout("nothing from the server for 60 s")])
    }

    @Test func echoesAndProtocolReject() {
        var s = ScriptedServer(auth: [.pap], ipv6: false)
        s.upToAuth(authOption: [0xC0, 0x23])
        _ = s.take()
        s.send(SSTP.ControlMessage(.echoRequest))
        #expect(s.take().control.map(\.messageType) == [.echoResponse])
        s.send(PPP.lcp, PPP.Packet(.echoRequest, id: 9, data: [1, 2, 3, 4, 0xAB]))
        let reply = s.take().ppp
        #expect(reply.count == 1 && reply[0].1?.code == PPP.Code.echoReply.rawValue && reply[0].1?.id == 9)
        #expect(reply[0].1?.data.count == 5 && reply[0].1?.data.last == 0xAB)
        // IPV6CP turned off (Settings.ipv6 false): Protocol-Reject naming it.
        s.send(PPP.ipv6cp, PPP.Packet(.configureRequest, id: 1, data: [1, 10, 0, 0, 0, 0, 0, 0, 0, 1]))
        let rej = s.take().ppp
        #expect(rej.count == 1 && rej[0].1?.code == PPP.Code.protocolReject.rawValue && Array(rej[0].1!.data.prefix(2)) == [0x80, 0x57])
        // An unknown LCP code: Code-Reject.
        s.send(PPP.lcp, PPP.Packet(code: 77, id: 3))
        #expect(s.take().ppp.first?.1?.code == PPP.Code.codeReject.rawValue)
        #expect(s.rec.ends.isEmpty)
    }

    @Test func disconnects() {
        // stop(): Call Disconnect, down when acknowledged.
        var s = ScriptedServer(auth: [.pap])
        s.upToAuth(authOption: [0xC0, 0x23])
        _ = s.take()
        s.client.stop(now: s.now)
        #expect(s.take().control.map(\.messageType) == [.callDisconnect] && s.rec.ends.isEmpty)
        s.send(SSTP.ControlMessage(.callDisconnectAck))
        #expect(s.rec.ends == [.stopped])

        // stop() without an answer: down after a second.
        s = ScriptedServer(auth: [.pap])
        s.upToAuth(authOption: [0xC0, 0x23])
        s.client.stop(now: s.now)
        #expect(s.client.nextDeadline == s.now + 1_000)
        s.client.tick(now: s.now + 1_000)
        #expect(s.rec.ends == [.stopped])

        // The server disconnects: acknowledged, reported.
        s = ScriptedServer(auth: [.pap])
        s.upToAuth(authOption: [0xC0, 0x23])
        _ = s.take()
        s.send(SSTP.ControlMessage(.callDisconnect))
        #expect(s.take().control.map(\.messageType) == [.callDisconnectAck])
        #expect(s.rec.ends == [.serverEnded("Call Disconnect")])

        // LCP Terminate-Request: Terminate-Ack, reported.
        s = ScriptedServer(auth: [.pap])
        s.upToAuth(authOption: [0xC0, 0x23])
        _ = s.take()
        s.send(PPP.lcp, PPP.Packet(.terminateRequest, id: 5))
        #expect(s.take().ppp.first?.1 == PPP.Packet(.terminateAck, id: 5))
        #expect(s.rec.ends == [.serverEnded("LCP Terminate-Request")])

        // Call Abort with a status.
        s = ScriptedServer(auth: [.pap])
        s.upToAuth(authOption: [0xC0, 0x23])
        s.send(SSTP.ControlMessage(.callAbort, [SSTP.StatusInfo(attributeID: 0, status: 6).attribute]))
        #expect(s.rec.ends == [.serverEnded("Call Abort (retry-count-exceeded (attribute 0))")])
    }

    @Test func ipcpRenegotiationReportsTheNewAddress() {
        var s = ScriptedServer(auth: [.pap])
        let pap = s.upToAuth(authOption: [0xC0, 0x23]).first { $0.0 == PPP.pap }!.1!
        s.send(PPP.pap, PPP.Packet(code: 2, id: pap.id, data: [0]))
        s.ipcp()
        // The server starts IPCP again: the client acks, asks again, and reports the new address.
        s.send(PPP.ipcp, PPP.Packet(.configureRequest, id: 20, data: PPP.encodeOptions([.u32(PPP.IPCPOption.address, 0xC6120501)])!))
        #expect(s.client.phase == .network)
        let out = s.take().ppp
        let req = out.first { $0.1?.code == 1 }!.1!
        #expect(out.contains { $0.1?.code == 2 && $0.1?.id == 20 })
        s.send(PPP.ipcp, PPP.Packet(.configureNak, id: req.id, data: PPP.encodeOptions([PPP.Option(type: 3, data: [198, 18, 5, 9])])!))
        let req2 = s.take().ppp.first { $0.1?.code == 1 }!.1!
        s.send(PPP.ipcp, PPP.Packet(.configureAck, id: req2.id, data: req2.data))
        #expect(s.rec.ups.map(\.address) == [IPAddress("198.18.5.2")!, IPAddress("198.18.5.9")!])
    }

    /// PAP and IPCP done: the link is up with IPv4 only.
    static func upWithIPv4() -> ScriptedServer {
        var s = ScriptedServer(auth: [.pap])
        let pap = s.upToAuth(authOption: [0xC0, 0x23]).first { $0.0 == PPP.pap }!.1!
        s.send(PPP.pap, PPP.Packet(code: 2, id: pap.id, data: [0]))
        s.ipcp()
        _ = s.take()
        return s
    }

    static let zeroIID = [UInt8](repeating: 0, count: 8)
    static func iid(_ last: UInt8) -> PPP.Option { PPP.Option(type: PPP.IPV6CPOption.interfaceID, data: [0, 0, 0, 0, 0, 0, 0, last]) }
    /// An IPv6 packet's first 40 bytes (what the client passes on is not parsed).
    static let v6packet: [UInt8] = [0x60, 0, 0, 0, 0, 0, 59, 64] + [UInt8](repeating: 0xFE, count: 32)

    @Test func ipv6cpNegotiatesTheLinkLocalAddress() {
        var s = Self.upWithIPv4()
        #expect(s.rec.ups.count == 1 && s.rec.ups[0].ipv6 == nil)
        #expect(!Self.v6packet.withUnsafeBytes { s.client.send($0) }, "no IPv6 before IPV6CP")
        // loft asked for IPV6CP with IPCP, at authentication.
        guard let req = s.ipv6cpSeen.first(where: { $0.code == 1 }) else { Issue.record("no IPV6CP request"); return }
        // The server's request has an identifier of zero: loft Naks it with one of its own making.
        s.send(PPP.ipv6cp, PPP.Packet(.configureRequest, id: 30, data: PPP.encodeOptions([PPP.Option(type: 1, data: Self.zeroIID)])!))
        var out = s.take().ppp.filter { $0.0 == PPP.ipv6cp }
        guard let nak = out.first(where: { $0.1?.code == 3 })?.1, out.count == 1 else {
            Issue.record("not one Nak: \(out)"); return
        }
        #expect(nak.id == 30)
        let suggested = PPP.parseOptions(nak.data)?.first
        let ours = PPP.parseOptions(req.data)?.first
        #expect(suggested?.type == 1 && suggested?.data.count == 8 && suggested?.data != Self.zeroIID)
        #expect(ours?.type == 1 && ours?.data.count == 8 && ours?.data != Self.zeroIID && ours?.data != suggested?.data)
        #expect((ours?.data.first ?? 0xFF) & 0x02 == 0, "a locally made identifier")
        // The server Naks loft's identifier with ::2: loft asks again with it, with a new id.
        s.send(PPP.ipv6cp, PPP.Packet(.configureNak, id: req.id, data: PPP.encodeOptions([Self.iid(2)])!))
        out = s.take().ppp.filter { $0.0 == PPP.ipv6cp }
        guard let req2 = out.first(where: { $0.1?.code == 1 })?.1 else { Issue.record("no second request"); return }
        #expect(PPP.parseOptions(req2.data) == [Self.iid(2)] && req2.id != req.id)
        // Its next request carries a compression option: Rejected; then only ::1: Acked.
        let compression = PPP.Option(type: 2, data: [0x00, 0x4F])
        s.send(PPP.ipv6cp, PPP.Packet(.configureRequest, id: 31, data: PPP.encodeOptions([Self.iid(1), compression])!))
        #expect(s.take().ppp.map(\.1) == [PPP.Packet(.configureReject, id: 31, data: PPP.encodeOptions([compression])!)])
        s.send(PPP.ipv6cp, PPP.Packet(.configureRequest, id: 32, data: PPP.encodeOptions([Self.iid(1)])!))
        #expect(s.take().ppp.map(\.1) == [PPP.Packet(.configureAck, id: 32, data: PPP.encodeOptions([Self.iid(1)])!)])
        #expect(s.rec.ups.count == 1, "not open until loft's own request is acked")
        s.send(PPP.ipv6cp, PPP.Packet(.configureAck, id: req2.id, data: req2.data))
        #expect(s.rec.ups.count == 2)
        #expect(s.rec.ups.last?.ipv6 == IPAddress("fe80::2") && s.rec.ups.last?.peerIPv6 == IPAddress("fe80::1"))
        #expect(s.rec.ups.last?.address == s.rec.ups.first?.address)
        // IPv6 both ways as PPP protocol 0x0057.
        #expect(Self.v6packet.withUnsafeBytes { s.client.send($0) })
        let sent = s.take().ppp
        #expect(sent.count == 1 && sent.first?.0 == PPP.ipv6 && sent.first?.2 == Self.v6packet)
        let h = SSTP.dataHeader(payloadLength: Self.v6packet.count + 4)
        s.feed([h.0, h.1, h.2, h.3, 0xFF, 0x03, 0x00, 0x57] + Self.v6packet)
        #expect(s.rec.packets == [Self.v6packet])
        // Terminate-Request: acked; the link is reported again without IPv6, which is refused.
        s.send(PPP.ipv6cp, PPP.Packet(.terminateRequest, id: 33))
        #expect(s.take().ppp.map(\.1) == [PPP.Packet(.terminateAck, id: 33)])
        #expect(s.rec.ups.count == 3 && s.rec.ups.last?.ipv6 == nil)
        #expect(!Self.v6packet.withUnsafeBytes { s.client.send($0) })
        #expect(s.rec.ends.isEmpty)
    }

    /// IPV6CP opened with the server at ::1 and loft at ::2.
    static func upWithIPv6() -> ScriptedServer {
        var s = Self.upWithIPv4()
        let req = s.ipv6cpSeen.first { $0.code == 1 }!
        s.send(PPP.ipv6cp, PPP.Packet(.configureNak, id: req.id, data: PPP.encodeOptions([Self.iid(2)])!))
        let req2 = s.take().ppp.first { $0.0 == PPP.ipv6cp && $0.1?.code == 1 }!.1!
        s.send(PPP.ipv6cp, PPP.Packet(.configureRequest, id: 32, data: PPP.encodeOptions([Self.iid(1)])!))
        s.send(PPP.ipv6cp, PPP.Packet(.configureAck, id: req2.id, data: req2.data))
        _ = s.take()
        return s
    }

    /// What SoftEther's hub does (seen in an interop run): a host there resolves loft's
    /// link-local address with Neighbor Solicitations that come over the link; unanswered, it
    /// stops sending to loft. The client answers them itself; they never reach the TUN.
    @Test func neighborSolicitationsForLoftsAddressAreAnswered() {
        var s = Self.upWithIPv6()
        #expect(s.rec.ups.last?.ipv6 == IPAddress("fe80::2"))
        func feedIPv6(_ p: [UInt8]) {
            let h = SSTP.dataHeader(payloadLength: p.count + 4)
            s.feed([h.0, h.1, h.2, h.3, 0xFF, 0x03, 0x00, 0x57] + p)
        }
        // To the solicited-node address, then unicast: one Advertisement each, over PPP 0x0057.
        for dst in ["ff02::1:ff00:2", "fe80::2"] {
            feedIPv6(ND6.solicitation(from: "fe80::1", to: dst, target: "fe80::2"))
            let out = s.take().ppp
            guard out.count == 1, out[0].0 == PPP.ipv6, out[0].2.count == 64 else { Issue.record("no advertisement: \(out)"); return }
            let na = out[0].2
            #expect(Array(na[0..<8]) == [0x60, 0, 0, 0, 0, 24, 58, 255])
            #expect(Array(na[8..<24]) == ND6.bytes("fe80::2") && Array(na[24..<40]) == ND6.bytes("fe80::1"))
            #expect(na[40] == 136 && na[44] == 0x60 && Array(na[48..<64]) == ND6.bytes("fe80::2"))
            #expect(ND6.icmpSum(src: Array(na[8..<24]), dst: Array(na[24..<40]), icmp: Array(na[40...])) == 0)
        }
        #expect(s.client.counters.neighborAdvertisements == 2)
        #expect(s.rec.packets.isEmpty, "solicitations are not the TUN's")
        // One for another address is not answered (and goes the way of any packet).
        feedIPv6(ND6.solicitation(from: "fe80::1", to: "fe80::2", target: "fe80::3"))
        #expect(s.take().ppp.isEmpty && s.rec.packets.count == 1)
        // Without IPV6CP there is nothing to answer for.
        var v4 = Self.upWithIPv4()
        let ns = ND6.solicitation(from: "fe80::1", to: "ff02::1:ff00:2", target: "fe80::2")
        let h = SSTP.dataHeader(payloadLength: ns.count + 4)
        v4.feed([h.0, h.1, h.2, h.3, 0xFF, 0x03, 0x00, 0x57] + ns)
        #expect(!v4.take().ppp.contains { $0.0 == PPP.ipv6 } && v4.client.counters.neighborAdvertisements == 0)
    }

    @Test func ipv6cpRejectedOrUnansweredLeavesIPv4Alone() {
        // The server rejects loft's identifier: no IPv6, no retransmission, IPv4 carries on.
        var s = Self.upWithIPv4()
        guard let req = s.ipv6cpSeen.first(where: { $0.code == 1 }) else { Issue.record("no IPV6CP request"); return }
        s.send(PPP.ipv6cp, PPP.Packet(.configureReject, id: req.id, data: req.data))
        s.now += 3_000
        s.client.tick(now: s.now)
        #expect(!s.take().ppp.contains { $0.0 == PPP.ipv6cp })
        #expect(s.rec.ups.count == 1 && s.rec.ends.isEmpty)
        // A server without IPV6CP: its LCP Protocol-Reject ends the asking; IPv4 carries on.
        s = Self.upWithIPv4()
        s.send(PPP.lcp, PPP.Packet(.protocolReject, id: 50, data: [0x80, 0x57] + (s.ipv6cpSeen.first?.bytes ?? [])))
        s.now += 3_000
        s.client.tick(now: s.now)
        #expect(!s.take().ppp.contains { $0.0 == PPP.ipv6cp })
        #expect(s.rec.ups.count == 1 && s.rec.ends.isEmpty && s.client.phase == .up)
        // No answer at all: retransmitted on the restart timer, given up after Max-Configure.
        s = Self.upWithIPv4()
        s.send(PPP.ipv6cp, PPP.Packet(.configureRequest, id: 41, data: PPP.encodeOptions([Self.iid(1)])!))
        _ = s.take()
        var sent = 1
        for _ in 0..<12 {
            s.now += 3_000
            s.client.tick(now: s.now)
            s.send(SSTP.ControlMessage(.echoResponse))   // the server is alive
            sent += s.take().ppp.filter { $0.0 == PPP.ipv6cp && $0.1?.code == 1 }.count
        }
        #expect(sent == 10)
        #expect(s.rec.ups.count == 1 && s.rec.ends.isEmpty && s.client.phase == .up)
        // Before authentication IPV6CP is ignored (no Protocol-Reject either).
        s = ScriptedServer(auth: [.pap])
        s.upToAuth(authOption: [0xC0, 0x23])
        _ = s.take()
        s.send(PPP.ipv6cp, PPP.Packet(.configureRequest, id: 1, data: PPP.encodeOptions([Self.iid(1)])!))
        #expect(s.take().ppp.isEmpty)
    }

    @Test func ipv6cpEvaluation() {
        let ours: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 9], other: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        var r = SSTPClient.evaluateIPV6CP([Self.iid(1)], ours: ours, suggestion: other)
        #expect(r.code == .configureAck && r.peer == Self.iid(1).data)
        r = SSTPClient.evaluateIPV6CP([PPP.Option(type: 1, data: ours)], ours: ours, suggestion: other)
        #expect(r.code == .configureNak && r.reply == [PPP.Option(type: 1, data: other)] && r.peer == nil)
        r = SSTPClient.evaluateIPV6CP([PPP.Option(type: 1, data: Self.zeroIID)], ours: ours, suggestion: other)
        #expect(r.code == .configureNak)
        r = SSTPClient.evaluateIPV6CP([PPP.Option(type: 1, data: [1, 2, 3]), PPP.Option(type: 2, data: [0, 0x4F])], ours: ours, suggestion: other)
        #expect(r.code == .configureReject && r.reply.count == 2)
        r = SSTPClient.evaluateIPV6CP([], ours: ours, suggestion: other)
        #expect(r.code == .configureAck && r.peer == nil)
        #expect(SSTPClient.linkLocal([0x02, 0x11, 0x22, 0xFF, 0xFE, 0x33, 0x44, 0x55]) == IPAddress("fe80::211:22ff:fe33:4455"))
    }

    @Test func lcpEvaluation() {
        typealias O = PPP.Option
        let mschap = O(type: 3, data: [0xC2, 0x23, 0x81])
        var r = SSTPClient.evaluateLCP([.u16(1, 1400), mschap, .u32(5, 9), O(type: 7), O(type: 8), .u32(2, 0)], auth: [.mschapv2], magic: 1)
        #expect(r.code == .configureAck && r.accepted.mru == 1400 && r.accepted.auth == .mschapv2)
        r = SSTPClient.evaluateLCP([.u16(1, 100), mschap], auth: [.mschapv2], magic: 1)
        #expect(r.code == .configureNak && r.reply == [.u16(1, 576)])
        r = SSTPClient.evaluateLCP([.u16(1, 100), O(type: 17, data: [5, 220]), O(type: 7, data: [1])], auth: [.pap], magic: 1)
        #expect(r.code == .configureReject && r.reply == [O(type: 17, data: [5, 220]), O(type: 7, data: [1])])
        r = SSTPClient.evaluateLCP([mschap], auth: [.pap], magic: 1)
        #expect(r.code == .configureNak && r.reply == [O(type: 3, data: [0xC0, 0x23])] && r.accepted.authRefused)
        r = SSTPClient.evaluateLCP([.u32(5, 1)], auth: [.pap], magic: 1)   // our own magic: looped back
        #expect(r.code == .configureNak && r.reply.first?.type == 5 && r.reply.first?.u32 != 1)
    }
}
