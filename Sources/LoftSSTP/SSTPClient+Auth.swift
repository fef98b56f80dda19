// SSTPClient's authentication: PAP (RFC 1334) or MS-CHAPv2 (RFC 2759), then the crypto binding.
import LoftCore
import CTLS

extension SSTPClient {
    // MARK: authentication

    func sendPAP(now: UInt64) {
        if papSent == 0 { papID = takeID() }
        papSent += 1
        papDeadline = now + settings.restartMilliseconds
        guard let p = PAP.request(id: papID, user: Array(settings.user.utf8), password: Array(settings.password.utf8)) else {
            return fail(.authFailed("the user or password is longer than PAP's 255 bytes"))
        }
        ppp(PPP.pap, p)
    }

    func papPacket(_ p: PPP.Packet, now: UInt64) {
        guard phase == .auth, authMethod == .pap, p.id == papID, let reply = PAP.reply(p) else { return }
        papDeadline = nil
        switch reply {
        case .ack: authSucceeded(now: now)
        case .nak(let message): fail(.authFailed("PAP: the server refused the user or password" + (message.isEmpty ? "" : " (\(message))")))
        }
    }

    func chapPacket(_ p: PPP.Packet, now: UInt64) {
        guard authMethod == .mschapv2, phase == .auth else { return }
        switch p.code {
        case CHAP.challenge:
            guard let (value, _) = CHAP.parseChallenge(p), value.count == 16 else {
                return fail(.protocolError("MS-CHAPv2 challenge of the wrong size"))
            }
            if let r = chapResponse, r.id == p.id, r.authChallenge == value {
                ppp(PPP.chap, nil, raw: r.packet)   // the server repeated its challenge: the same answer
                return
            }
            let user = Array(settings.user.utf8)
            let peer = random(16)
            do {
                let nt = try MSCHAPv2.ntResponse(authenticatorChallenge: value, peerChallenge: peer, user: user,
                                                 password: settings.password)
                guard let r = CHAP.response(id: p.id, value: MSCHAPv2.responseValue(peerChallenge: peer, ntResponse: nt),
                                            name: user), let bytes = r.bytes else {
                    return fail(.authFailed("the user name is too long for MS-CHAPv2"))
                }
                chapResponse = (p.id, bytes, peer, value, nt)
                ppp(PPP.chap, nil, raw: bytes)
            } catch {
                fail(.authFailed("MS-CHAPv2 cannot run: \(error)"))
            }
        case CHAP.success:
            guard let r = chapResponse, p.id == r.id else { return }
            let message = CHAP.message(p)
            do {
                let expected = try MSCHAPv2.authenticatorResponse(password: settings.password, ntResponse: r.nt,
                                                                  peerChallenge: r.peerChallenge,
                                                                  authenticatorChallenge: r.authChallenge,
                                                                  user: Array(settings.user.utf8))
                guard message.hasPrefix(expected) else {
                    return fail(.authFailed("MS-CHAPv2: the server's authenticator response is wrong (it does not know the password)"))
                }
                let keys = try MSCHAPv2.clientMasterKeys(password: settings.password, ntResponse: r.nt)
                hlak = CryptoBinding.clientHLAK(send: keys.send, receive: keys.receive)
            } catch {
                return fail(.authFailed("MS-CHAPv2 cannot run: \(error)"))
            }
            authSucceeded(now: now)
        case CHAP.failure:
            guard let r = chapResponse, p.id == r.id else { return }
            fail(.authFailed("MS-CHAPv2: " + MSCHAPv2.failureReason(CHAP.message(p))))
        default:
            break
        }
    }

    func authSucceeded(now: UInt64) {
        guard !authDone, let req = bindingRequest else { return }
        authDone = true
        phase = .network
        let sha256 = req.hashBitmask & SSTP.hashSHA256 != 0
        emit(CryptoBinding.callConnected(request: req, certHash: sha256 ? certHash.sha256 : certHash.sha1, hlak: hlak))
        ipcp = Negotiation()
        ipcp.options = [.u32(PPP.IPCPOption.address, 0), .u32(PPP.IPCPOption.primaryDNS, 0), .u32(PPP.IPCPOption.secondaryDNS, 0)]
        sendRequest(&ipcp, PPP.ipcp, now: now)
        // IPV6CP is asked for too (servers such as SoftEther only answer a client's request); a
        // server without it Protocol-Rejects it or stays silent, and IPv4 carries on.
        if settings.ipv6 { startIPV6CP(now: now) }
    }
}
