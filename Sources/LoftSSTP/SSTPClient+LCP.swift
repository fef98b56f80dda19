// SSTPClient's LCP (RFC 1661): the Configure exchange, echo, Protocol-Reject, Terminate.
import LoftCore
import CTLS

extension SSTPClient {
    // MARK: LCP

    func lcpPacket(_ p: PPP.Packet, now: UInt64) {
        switch PPP.Code(rawValue: p.code) {
        case .configureRequest:
            guard let options = PPP.parseOptions(p.data) else { counters.droppedIn += 1; return }
            if lcp.opened && phase != .lcp {
                return fail(.protocolError("the server restarted LCP after the link was open"))
            }
            var (code, reply, accepted) = SSTPClient.evaluateLCP(options, auth: settings.auth, magic: magic)
            if code == .configureNak && lcp.naks >= settings.maxFailure && !accepted.authRefused {
                // Max-Failure (RFC 1661 4.6): Naks that did not converge become a Reject of
                // the options (MRU, Magic-Number); the authentication protocol cannot be, below.
                let naked = Set(reply.map(\.type))
                code = .configureReject
                reply = options.filter { naked.contains($0.type) }
            }
            ppp(PPP.lcp, PPP.Packet(code: code.rawValue, id: p.id, data: PPP.encodeOptions(reply) ?? []))
            if code == .configureAck {
                lcp.theirs = true
                lcp.naks = 0
                peerMRU = accepted.mru
                authMethod = accepted.auth
            } else {
                lcp.naks += 1
                if lcp.naks > settings.maxConfigure {
                    let offered = options.first { $0.type == PPP.LCPOption.authProtocol }.map(SSTPClient.describeAuth) ?? "?"
                    return fail(code == .configureNak && accepted.authRefused
                        ? .authFailed("the server asks for \(offered), and auth allows only \(settings.auth.map(\.rawValue).joined(separator: ", "))")
                        : .protocolError("LCP did not converge after \(settings.maxConfigure) Configure-Naks"))
                }
            }
            lcpMaybeOpened(now: now)
        case .configureAck:
            guard p.id == lcp.id, lcp.deadline != nil, p.data == PPP.encodeOptions(lcp.options) else { return }
            lcp.ours = true
            lcp.failures = 0
            lcp.deadline = nil
            lcpMaybeOpened(now: now)
        case .configureNak:
            guard p.id == lcp.id, lcp.deadline != nil, let nak = PPP.parseOptions(p.data) else { return }
            lcp.failures += 1
            if gaveUp(lcp.failures, "LCP") { return }
            for o in nak {
                switch o.type {
                case PPP.LCPOption.mru:
                    if let v = o.u16, v >= 576, v <= UInt16(settings.mru) { set(&lcp.options, .u16(o.type, v)) }
                case PPP.LCPOption.magicNumber:
                    magic = random(4).reduce(0) { $0 << 8 | UInt32($1) }
                    set(&lcp.options, .u32(o.type, magic))
                default:
                    break   // a hint for an option loft does not ask for: ignored (RFC 1661 5.3)
                }
            }
            sendRequest(&lcp, PPP.lcp, now: now, fresh: true)
        case .configureReject:
            guard p.id == lcp.id, lcp.deadline != nil, let rej = PPP.parseOptions(p.data) else { return }
            lcp.failures += 1
            if gaveUp(lcp.failures, "LCP") { return }
            lcp.options.removeAll { o in rej.contains { $0.type == o.type } }
            if rej.contains(where: { $0.type == PPP.LCPOption.magicNumber }) { magic = 0 }
            sendRequest(&lcp, PPP.lcp, now: now, fresh: true)
        case .terminateRequest:
            ppp(PPP.lcp, PPP.Packet(.terminateAck, id: p.id))
            fail(phase == .disconnecting ? .stopped : .serverEnded("LCP Terminate-Request"))
        case .echoRequest:
            guard replyFits(p.data.count + 12) else { return }
            let m = magic
            ppp(PPP.lcp, PPP.Packet(.echoRequest.replyCode, id: p.id,
                                    data: [UInt8(m >> 24), UInt8((m >> 16) & 0xFF), UInt8((m >> 8) & 0xFF), UInt8(m & 0xFF)] + p.data.dropFirst(4)))
        case .protocolReject:
            if p.data.count >= 2, UInt16(p.data[0]) << 8 | UInt16(p.data[1]) == PPP.ipcp {
                fail(.protocolError("the server rejects IPCP (no IPv4 over this link)"))
            } else if p.data.count >= 2, UInt16(p.data[0]) << 8 | UInt16(p.data[1]) == PPP.ipv6cp {
                ipv6cp.deadline = nil   // no IPv6 on this link; nothing more is asked
            }
        case .terminateAck, .echoReply, .discardRequest, .codeReject:
            break
        case nil:
            guard replyFits(min(p.data.count + 4, peerMRU) + 12) else { return }
            ppp(PPP.lcp, PPP.Packet(.codeReject, id: takeID(), data: Array((p.bytes ?? []).prefix(max(0, peerMRU - 4)))))
        }
    }

    func lcpMaybeOpened(now: UInt64) {
        guard lcp.opened, phase == .lcp else { return }
        phase = .auth
        switch authMethod {
        case .pap?: sendPAP(now: now)
        case .mschapv2?: break   // the server's Challenge comes
        case nil: authSucceeded(now: now)
        }
    }

    /// The answer to the server's LCP Configure-Request (RFC 1661 5.1-5.4): Reject the options
    /// loft does not know, else Nak the values it cannot take, else Ack. MRU, the
    /// authentication protocol, Magic-Number, PFC and ACFC are known; ACCM is Acked (no HDLC
    /// here, it means nothing).
    public static func evaluateLCP(_ options: [PPP.Option], auth: [AuthMethod], magic: UInt32)
        -> (code: PPP.Code, reply: [PPP.Option], accepted: (mru: Int, auth: AuthMethod?, authRefused: Bool)) {
        var reject: [PPP.Option] = []
        var nak: [PPP.Option] = []
        var mru = 1500
        var method: AuthMethod?
        var authRefused = false
        for o in options {
            switch o.type {
            case PPP.LCPOption.mru:
                guard let v = o.u16 else { reject.append(o); continue }
                if v < 576 { nak.append(.u16(o.type, 576)) } else { mru = Int(v) }
            case PPP.LCPOption.accm:
                if o.data.count != 4 { reject.append(o) }
            case PPP.LCPOption.authProtocol:
                if o.data == [0xC2, 0x23, PPP.chapMSCHAPv2], auth.contains(.mschapv2) {
                    method = .mschapv2
                } else if o.data == [0xC0, 0x23], auth.contains(.pap) {
                    method = .pap
                } else if let first = auth.first {
                    authRefused = true
                    nak.append(PPP.Option(type: o.type, data: first == .mschapv2 ? [0xC2, 0x23, PPP.chapMSCHAPv2] : [0xC0, 0x23]))
                } else {
                    reject.append(o)
                }
            case PPP.LCPOption.magicNumber:
                guard let v = o.u32 else { reject.append(o); continue }
                // Equal to ours, or zero: a looped-back link or an invalid number (RFC 1661 6.4).
                if v == 0 || (v == magic && magic != 0) { nak.append(.u32(o.type, ~magic &+ 0x5A5A5A5A)) }
            case PPP.LCPOption.pfc, PPP.LCPOption.acfc:
                if !o.data.isEmpty { reject.append(o) }
            default:
                reject.append(o)
            }
        }
        if !reject.isEmpty { return (.configureReject, reject, (mru, method, authRefused)) }
        if !nak.isEmpty { return (.configureNak, nak, (mru, method, authRefused)) }
        return (.configureAck, options, (mru, method, false))
    }

    static func describeAuth(_ o: PPP.Option) -> String {
        switch o.data {
        case [0xC2, 0x23, PPP.chapMSCHAPv2]: return "MS-CHAPv2"
        case [0xC2, 0x23, 0x05]: return "CHAP-MD5"
        case [0xC2, 0x23, 0x80]: return "MS-CHAPv1"
        case [0xC0, 0x23]: return "PAP"
        case [0xC2, 0x27]: return "EAP"
        default: return "protocol " + o.data.map { SSTP.hex($0) }.joined()
        }
    }
}
