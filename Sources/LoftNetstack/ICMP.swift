import LoftCore

/// ICMP the stack writes itself, and the echo policy (lwIP answers echo requests it is given).
extension Netstack {
    /// An echo request from an app: false when it is dropped (replies are off, or a rule drops
    /// its destination); counted against its rule when lwIP is to answer it.
    func echoAllowed(_ s: PacketSummary, netif: Int) -> Bool {
        if !settings.icmpReply {
            drop(.icmpPolicy, netif)
            return false
        }
        // Echo is answered by lwIP itself, unless a rule drops its destination.
        let request = FlowRequest(network: .icmp, source: Endpoint(s.source, 0), destination: .ip(Endpoint(s.destination, 0)))
        let match = router.route(request)
        if case .drop = match.decision {
            drop(.rule, netif)
            return false
        }
        flows.countRule(match.rule)
        return true
    }

    /// Tells the app that `remote` refused its datagram, as the remote's kernel did: ICMP or
    /// ICMPv6 port unreachable quoting the datagram's headers (the app's kernel matches the
    /// quote to its socket: a connected socket gets ECONNREFUSED). Rate-limited like a
    /// kernel's ICMP (icmp_msgs_per_sec 1000, burst 50).
    func portUnreachable(from remote: Endpoint, to app: Endpoint, netif: Int) {
        guard icmpLimit.take(now: loop.now) else { tally.icmpRateLimited &+= 1; return }
        // The quote: the datagram's IP header and UDP header (its payload is not kept).
        var udp = [UInt8](repeating: 0, count: 8)
        udp[0] = UInt8(app.port >> 8); udp[1] = UInt8(app.port & 0xFF)
        udp[2] = UInt8(remote.port >> 8); udp[3] = UInt8(remote.port & 0xFF)
        udp[5] = 8
        let quoted = PacketBuilder.ipPacket(source: app.address, destination: remote.address, proto: IPProtocol.udp, payload: udp)
        quoted.withUnsafeBytes { q in
            guard case .success(let s) = PacketSummary.parse(q, maxLength: 65535) else { return }
            tally.portUnreachableSent &+= 1
            send(PacketBuilder.unreachable(q, summary: s, kind: .port), netif: netif)
        }
    }
}
