import Testing
import LoftCore
@testable import LoftSSTP

/// Issue 28: servers that flood, Nak every request or hand out addresses no host may have.
@Suite struct HostileServerTests {
    /// A server that sends LCP Echo-Requests (or frames of a protocol loft does not speak) of
    /// 4000 bytes and never reads: loft's replies wait in `output` only up to its limit, the
    /// rest are dropped, and after enough of them the connection ends.
    @Test(arguments: [true, false]) func floodWithoutReadingIsBounded(echo: Bool) {
        let s = SSTPClientTests.upWithIPv4()
        let body = [UInt8](repeating: 0xAB, count: 3996)
        var most = 0
        for i in 0..<2_000 where s.rec.ends.isEmpty {
            if echo {
                s.send(PPP.lcp, PPP.Packet(.echoRequest, id: UInt8(i & 0xFF), data: [0, 0, 0, 0] + body))
            } else {
                let h = SSTP.dataHeader(payloadLength: body.count + 4)
                s.feed([h.0, h.1, h.2, h.3, 0xFF, 0x03, 0x82, 0x81] + body)
            }
            most = max(most, s.client.output.count)   // nobody takes the output: the server does not read
        }
        #expect(most <= 256 * 1024 + 4_100, "output grew to \(most) bytes")
        #expect(s.rec.ends.count == 1)
        if case .protocolError(let why)? = s.rec.ends.first {
            #expect(why.hasPrefix("the server does not read: 256 replies dropped in a row"))
        } else {
            Issue.record("ends: \(s.rec.ends)")
        }
    }

    /// A server that Naks every LCP Configure-Request: Max-Failure (5) rounds, then the
    /// connection ends — not a tight loop until the 30 s handshake deadline.
    @Test func nakEveryRequestGivesUp() {
        var s = ScriptedServer(auth: [.mschapv2])
        s.client.start(now: s.now)
        s.feed(Array("HTTP/1.1 200 OK\r\n\r\n".utf8))
        s.send(SSTP.ControlMessage(.callConnectAck, [SSTP.BindingRequest(hashBitmask: SSTP.hashSHA256, nonce: ScriptedServer.nonce).attribute]))
        var requests = 0
        for round in 0..<100 where s.rec.ends.isEmpty {
            guard let req = s.take().ppp.first(where: { $0.0 == PPP.lcp && $0.1?.code == 1 })?.1 else { break }
            requests += 1
            s.send(PPP.lcp, PPP.Packet(.configureNak, id: req.id, data: PPP.encodeOptions([.u16(PPP.LCPOption.mru, UInt16(1400 + round % 2))])!))
        }
        #expect(requests <= 6, "\(requests) Configure-Requests")
        #expect(s.rec.ends == [.protocolError("LCP did not converge: the server refused 5 Configure-Requests in a row")])
    }

    /// IPCP: an address the server offers that cannot be loft's on this link is not taken
    /// (loft asks for 0.0.0.0 again); the server gives up or Max-Failure ends it, never up.
    @Test(arguments: ["127.0.0.1", "224.0.0.1", "255.255.255.255", "240.1.2.3", "0.1.2.3", "198.18.5.1"])
    func unusableAddressesAreRefused(_ bad: String) {
        var s = ScriptedServer(auth: [.pap])
        let pap = s.upToAuth(authOption: [0xC0, 0x23]).first { $0.0 == PPP.pap }!.1!
        s.send(PPP.pap, PPP.Packet(code: 2, id: pap.id, data: [0]))
        // The server's own address first (198.18.5.1): the last case offers it to loft.
        s.send(PPP.ipcp, PPP.Packet(.configureRequest, id: 8, data: PPP.encodeOptions([.u32(PPP.IPCPOption.address, 0xC6120501)])!))
        let a = IPAddress(bad)!
        guard case .v4(let raw) = a else { return }
        for _ in 0..<10 where s.rec.ends.isEmpty {
            guard let req = s.take().ppp.first(where: { $0.0 == PPP.ipcp && $0.1?.code == 1 })?.1 else { break }
            let asked = PPP.parseOptions(req.data)?.first { $0.type == PPP.IPCPOption.address }?.u32
            if asked == 0 {
                s.send(PPP.ipcp, PPP.Packet(.configureNak, id: req.id, data: PPP.encodeOptions([.u32(PPP.IPCPOption.address, raw)])!))
            } else {
                s.send(PPP.ipcp, PPP.Packet(.configureAck, id: req.id, data: req.data))   // loft took it: a real server acks
            }
        }
        #expect(s.rec.ups.isEmpty, "up with \(s.rec.ups.map(\.address))")
        #expect(s.rec.ends.count == 1)
        if case .protocolError(let why)? = s.rec.ends.first {
            #expect(why.contains("it offered \(bad) ("))
        } else {
            Issue.record("ends: \(s.rec.ends)")
        }
    }

    /// The TUN's MTU for the link: the server's MRU, at most what an SSTP packet holds.
    @Test func linkMTU() {
        func mtu(_ mru: Int) -> Int { SSTPClient.Link(address: .v4(0x0A000001), dns: [], peerMRU: mru, auth: nil).mtu }
        #expect(mtu(1000) == 1000)
        #expect(mtu(1500) == 1500)
        #expect(mtu(4087) == 4087)
        #expect(mtu(4088) == 4087)
        #expect(mtu(65535) == 4087)
    }

    /// An address the TUN already has (its configured one) is not taken either.
    @Test func anAddressTheTUNHasIsRefused() {
        var s = ScriptedServer(auth: [.pap], reserved: [IPAddress("198.18.0.1")!])
        let pap = s.upToAuth(authOption: [0xC0, 0x23]).first { $0.0 == PPP.pap }!.1!
        s.send(PPP.pap, PPP.Packet(code: 2, id: pap.id, data: [0]))
        for _ in 0..<10 where s.rec.ends.isEmpty {
            guard let req = s.take().ppp.first(where: { $0.0 == PPP.ipcp && $0.1?.code == 1 })?.1 else { break }
            s.send(PPP.ipcp, PPP.Packet(.configureNak, id: req.id, data: PPP.encodeOptions([.u32(PPP.IPCPOption.address, 0xC6120001)])!))
        }
        #expect(s.rec.ups.isEmpty)
        #expect(s.rec.ends == [.protocolError("IPCP did not converge: the server refused 5 Configure-Requests in a row; it offered 198.18.0.1 (an address the TUN already has) as loft's address, which loft does not take")])
    }

    /// The server asks for an MRU below 576 again and again: 5 Naks (Max-Failure), then the
    /// option is Rejected (RFC 1661 4.6), and a request without it is Acked.
    @Test func nakedOptionsBecomeARejectAfterMaxFailure() {
        var s = ScriptedServer(auth: [.pap])
        s.client.start(now: s.now)
        s.feed(Array("HTTP/1.1 200 OK\r\n\r\n".utf8))
        s.send(SSTP.ControlMessage(.callConnectAck, [SSTP.BindingRequest(hashBitmask: SSTP.hashSHA256, nonce: ScriptedServer.nonce).attribute]))
        _ = s.take()
        let small = PPP.encodeOptions([.u16(PPP.LCPOption.mru, 500), PPP.Option(type: PPP.LCPOption.authProtocol, data: [0xC0, 0x23])])!
        var codes: [UInt8] = []
        for id in 1...6 {
            s.send(PPP.lcp, PPP.Packet(.configureRequest, id: UInt8(id), data: small))
            codes += s.take().ppp.compactMap { $0.0 == PPP.lcp ? $0.1?.code : nil }
        }
        #expect(codes == [3, 3, 3, 3, 3, 4])
        s.send(PPP.lcp, PPP.Packet(.configureRequest, id: 7, data: [3, 4, 0xC0, 0x23]))
        #expect(s.take().ppp.first?.1 == PPP.Packet(.configureAck, id: 7, data: [3, 4, 0xC0, 0x23]))
        #expect(s.rec.ends.isEmpty)
    }
}
