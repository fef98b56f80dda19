// SSTPClient's network control protocols: IPCP (RFC 1332) and IPV6CP (RFC 5072), and the checks their
// negotiations share (Max-Failure, addresses, replies that fit).
import LoftCore
import CTLS

extension SSTPClient {
    // MARK: IPCP

    func ipcpPacket(_ p: PPP.Packet, now: UInt64) {
        guard authDone else { return }   // before authentication NCPs are not negotiated (RFC 1661 3.5)
        switch PPP.Code(rawValue: p.code) {
        case .configureRequest:
            guard let options = PPP.parseOptions(p.data) else { counters.droppedIn += 1; return }
            if phase == .up {
                // The server renegotiates: this layer restarts (RFC 1661 4.3) and reports up again.
                phase = .network
                ipcp.ours = false
                ipcp.theirs = false
                ipcp.failures = 0
                sendRequest(&ipcp, PPP.ipcp, now: now, fresh: true)
            }
            let ours = ipcp.options.first { $0.type == PPP.IPCPOption.address }?.u32 ?? 0
            // The server's own address: one that cannot be a host's on this link (or is the
            // one loft asks for) is refused; loft does not need it (no gateway on the TUN).
            let reject = options.filter { o in
                guard o.type == PPP.IPCPOption.address, let v = o.u32 else { return true }
                return v != 0 && HostAddress.problem(.v4(v), peer: ours == 0 ? nil : .v4(ours)) != nil
            }
            if reject.isEmpty {
                peerIPCPAddress = options.first.flatMap { $0.u32 }.flatMap { $0 == 0 ? nil : IPAddress.v4($0) }
                ppp(PPP.ipcp, PPP.Packet(.configureAck, id: p.id, data: p.data))
                ipcp.theirs = true
            } else {
                ppp(PPP.ipcp, PPP.Packet(.configureReject, id: p.id, data: PPP.encodeOptions(reject) ?? []))
            }
            ipcpMaybeOpened()
        case .configureAck:
            guard p.id == ipcp.id, ipcp.deadline != nil, p.data == PPP.encodeOptions(ipcp.options) else { return }
            guard let a = ipcp.options.first(where: { $0.type == PPP.IPCPOption.address })?.u32, a != 0 else {
                return fail(.protocolError("IPCP: the server acknowledged address 0.0.0.0"
                                           + (refusedAddress.map { " after offering \($0), which loft does not take" } ?? "")))
            }
            if let why = addressProblem(a) {
                return fail(.protocolError("IPCP: the server acknowledged \(IPAddress.v4(a)) as loft's address: \(why)"))
            }
            ipcp.ours = true
            ipcp.failures = 0
            ipcp.deadline = nil
            ipcpMaybeOpened()
        case .configureNak:
            guard p.id == ipcp.id, ipcp.deadline != nil, let nak = PPP.parseOptions(p.data) else { return }
            ipcp.failures += 1
            if gaveUp(ipcp.failures, "IPCP") { return }
            for o in nak where o.data.count == 4 && ipcp.options.contains(where: { $0.type == o.type }) {
                if o.type == PPP.IPCPOption.address, let why = addressProblem(o.u32 ?? 0) {
                    // Not taken: loft asks for an address again (0.0.0.0), as pppd does with an
                    // address it will not use; Max-Failure ends it.
                    refusedAddress = "\(IPAddress.v4(o.u32 ?? 0)) (\(why))"
                    set(&ipcp.options, .u32(PPP.IPCPOption.address, 0))
                    continue
                }
                set(&ipcp.options, o)
            }
            sendRequest(&ipcp, PPP.ipcp, now: now, fresh: true)
        case .configureReject:
            guard p.id == ipcp.id, ipcp.deadline != nil, let rej = PPP.parseOptions(p.data) else { return }
            ipcp.failures += 1
            if gaveUp(ipcp.failures, "IPCP") { return }
            if rej.contains(where: { $0.type == PPP.IPCPOption.address }) {
                return fail(.protocolError("IPCP: the server will not give an address (it rejects IP-Address)"))
            }
            ipcp.options.removeAll { o in rej.contains { $0.type == o.type } }
            sendRequest(&ipcp, PPP.ipcp, now: now, fresh: true)
        case .terminateRequest:
            ppp(PPP.ipcp, PPP.Packet(.terminateAck, id: p.id))
            fail(.serverEnded("IPCP Terminate-Request"))
        case .codeReject, .terminateAck:
            break
        default:
            guard replyFits(min(p.data.count + 4, peerMRU) + 12) else { return }
            ppp(PPP.ipcp, PPP.Packet(.codeReject, id: takeID(), data: Array((p.bytes ?? []).prefix(max(0, peerMRU - 4)))))
        }
    }

    func ipcpMaybeOpened() {
        guard ipcp.opened, phase == .network else { return }
        func address(_ type: UInt8) -> IPAddress? {
            guard let o = ipcp.options.first(where: { $0.type == type }), o.data.count == 4, o.u32 != 0 else { return nil }
            return IPAddress.v4(o.u32!)
        }
        guard let a = address(PPP.IPCPOption.address) else { return }
        if let why = HostAddress.problem(a, peer: peerIPCPAddress, taken: settings.reservedAddresses) {
            return fail(.protocolError("IPCP: \(a) cannot be loft's address on this link: \(why)"))
        }
        phase = .up
        // A DNS server that is unspecified, multicast or broadcast is no server.
        let dns = [address(PPP.IPCPOption.primaryDNS), address(PPP.IPCPOption.secondaryDNS)].compactMap { $0 }
            .filter { d in HostAddress.problem(d).map { $0 == "loopback" } ?? true }
        var l = Link(address: a, dns: dns,
                     peerMRU: peerMRU, auth: authMethod)
        if ipv6cp.opened, let ours = ipv6cp.options.first?.data, let theirs = peerIID {
            l.ipv6 = Self.linkLocal(ours)
            l.peerIPv6 = Self.linkLocal(theirs)
        }
        link = l
        delegate?.sstpUp(self, link: l)
    }

    // MARK: IPV6CP (RFC 5072)

    /// fe80:: with an interface identifier.
    public static func linkLocal(_ iid: [UInt8]) -> IPAddress {
        let lo = iid.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return .v6(0xFE80_0000_0000_0000, lo)
    }

    /// The answer to the server's IPV6CP Configure-Request: options other than an 8-byte
    /// Interface-Identifier are Rejected; an identifier of zero or equal to loft's is Nak'ed
    /// with `suggestion`; else Ack, and the server's identifier.
    public static func evaluateIPV6CP(_ options: [PPP.Option], ours: [UInt8], suggestion: [UInt8])
        -> (code: PPP.Code, reply: [PPP.Option], peer: [UInt8]?) {
        let reject = options.filter { $0.type != PPP.IPV6CPOption.interfaceID || $0.data.count != 8 }
        if !reject.isEmpty { return (.configureReject, reject, nil) }
        guard let iid = options.first?.data else { return (.configureAck, options, nil) }
        if iid.allSatisfy({ $0 == 0 }) || iid == ours {
            return (.configureNak, [PPP.Option(type: PPP.IPV6CPOption.interfaceID, data: suggestion)], nil)
        }
        return (.configureAck, options, iid)
    }

    /// A random interface identifier, never zero, never `avoid`.
    func newIID(avoid: [UInt8]?) -> [UInt8] {
        var iid = random(8)
        iid[0] &= 0xFD   // the universal/local bit clear: a locally made identifier (RFC 4291 2.5.1)
        if iid.allSatisfy({ $0 == 0 }) || iid == avoid { iid[7] = iid[7] &+ 1 }
        if iid.allSatisfy({ $0 == 0 }) { iid[7] = 1 }
        return iid
    }

    func startIPV6CP(now: UInt64) {
        ipv6cpStarted = true
        ipv6cp = Negotiation()
        ipv6cp.options = [PPP.Option(type: PPP.IPV6CPOption.interfaceID, data: newIID(avoid: peerIID))]
        sendRequest(&ipv6cp, PPP.ipv6cp, now: now)
    }

    func ipv6cpPacket(_ p: PPP.Packet, now: UInt64) {
        switch PPP.Code(rawValue: p.code) {
        case .configureRequest:
            guard let options = PPP.parseOptions(p.data) else { counters.droppedIn += 1; return }
            if !ipv6cpStarted || ipv6cp.opened {
                // The server starts IPV6CP (again): loft asks for its identifier anew.
                startIPV6CP(now: now)
            }
            let ours = ipv6cp.options.first?.data ?? []
            let (code, reply, peer) = Self.evaluateIPV6CP(options, ours: ours, suggestion: newIID(avoid: ours))
            ppp(PPP.ipv6cp, PPP.Packet(code: code.rawValue, id: p.id, data: PPP.encodeOptions(reply) ?? []))
            if code == .configureAck {
                ipv6cp.theirs = true
                ipv6cp.naks = 0
                peerIID = peer
            } else {
                ipv6cp.naks += 1
                if ipv6cp.naks > settings.maxConfigure { ipv6cp.deadline = nil; ipv6cpStarted = true }
            }
            ipv6cpMaybeOpened()
        case .configureAck:
            guard p.id == ipv6cp.id, ipv6cp.deadline != nil, p.data == PPP.encodeOptions(ipv6cp.options) else { return }
            ipv6cp.ours = true
            ipv6cp.deadline = nil
            ipv6cpMaybeOpened()
        case .configureNak:
            guard p.id == ipv6cp.id, ipv6cp.deadline != nil, let nak = PPP.parseOptions(p.data) else { return }
            ipv6cp.failures += 1
            if ipv6cp.failures >= settings.maxFailure { ipv6cp.deadline = nil; return }   // no IPv6 here; IPv4 carries on
            if let o = nak.first(where: { $0.type == PPP.IPV6CPOption.interfaceID }) {
                // The server's suggestion, unless it is zero or its own: then another random one.
                let usable = o.data.count == 8 && !o.data.allSatisfy { $0 == 0 } && o.data != peerIID
                ipv6cp.options = [PPP.Option(type: PPP.IPV6CPOption.interfaceID, data: usable ? o.data : newIID(avoid: peerIID))]
            }
            sendRequest(&ipv6cp, PPP.ipv6cp, now: now, fresh: true)
        case .configureReject:
            guard p.id == ipv6cp.id, ipv6cp.deadline != nil else { return }
            // Without an interface identifier loft has no link-local address: no IPv6 here.
            ipv6cp.deadline = nil
        case .terminateRequest:
            ppp(PPP.ipv6cp, PPP.Packet(.terminateAck, id: p.id))
            ipv6cp = Negotiation()
            ipv6cpStarted = false
            if var l = link, l.ipv6 != nil {
                l.ipv6 = nil
                l.peerIPv6 = nil
                link = l
                if phase == .up { delegate?.sstpUp(self, link: l) }
            }
        case .codeReject, .terminateAck:
            break
        default:
            guard replyFits(min(p.data.count + 4, peerMRU) + 12) else { return }
            ppp(PPP.ipv6cp, PPP.Packet(.codeReject, id: takeID(), data: Array((p.bytes ?? []).prefix(max(0, peerMRU - 4)))))
        }
    }

    /// Both sides acked: the link's IPv6 addresses are known. After IPCP is up, the link is
    /// reported again with them.
    func ipv6cpMaybeOpened() {
        guard ipv6cp.opened, let ours = ipv6cp.options.first?.data, let theirs = peerIID else { return }
        guard phase == .up, var l = link else { return }   // IPCP's opening reports them
        let (a, b) = (Self.linkLocal(ours), Self.linkLocal(theirs))
        guard l.ipv6 != a || l.peerIPv6 != b else { return }
        l.ipv6 = a
        l.peerIPv6 = b
        link = l
        delegate?.sstpUp(self, link: l)
    }

    /// `failures` Configure-Naks or Rejects of loft's request in a row: at Max-Failure the
    /// negotiation is not converging (RFC 1661 4.6) and the connection ends (true).
    func gaveUp(_ failures: Int, _ name: String) -> Bool {
        guard failures >= settings.maxFailure else { return false }
        let offered = name == "IPCP" ? refusedAddress.map { "; it offered \($0) as loft's address, which loft does not take" } ?? "" : ""
        fail(.protocolError("\(name) did not converge: the server refused \(failures) Configure-Requests in a row\(offered)"))
        return true
    }

    /// Why an IPv4 address the server offers cannot be loft's on this link (the check the
    /// holder's STATUS gets too), nil when it can.
    func addressProblem(_ a: UInt32) -> String? {
        HostAddress.problem(.v4(a), peer: peerIPCPAddress, taken: settings.reservedAddresses)
    }

    /// A reply loft makes itself fits below `outputLimit`: true, else dropped and counted;
    /// `maxDroppedReplies` in a row end the connection.
    func replyFits(_ n: Int) -> Bool {
        if output.count + n <= settings.outputLimit {
            droppedInRow = 0
            return true
        }
        counters.repliesDropped += 1
        droppedInRow += 1
        if droppedInRow >= settings.maxDroppedReplies {
            fail(.protocolError("the server does not read: \(droppedInRow) replies dropped in a row, \(output.count) bytes waiting"))
        }
        return false
    }
}
