import CLwIP
import LoftCore
import LoftSniff

/// A TCP flow's start: the app's SYN (held by a new flow until its outbound connects, then
/// given to lwIP), and the app's reset of a handshake lwIP has not handed over.
extension Netstack {
    func openTCP(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, netif: Int, decided: RouteMatch? = nil) {
        let key = FlowKey(netif: netif, source: Endpoint(s.source, s.sourcePort),
                          destination: Endpoint(s.destination, s.destinationPort))
        if let existing = flows.tcp[key] {
            // A retransmitted SYN: held ones wait for the outbound; lwIP answers the others.
            if existing.state != .connecting {
                _ = clwip_input(lwip, Int32(netif), packet.baseAddress!.assumingMemoryBound(to: UInt8.self), packet.count,
                                Int32(s.destinationPort), -1, 0, -1)
            }
            return
        }
        var request = FlowRequest(network: .tcp, source: key.source, destination: .ip(key.destination))
        // Fake-IP: a pool address is dialled by its name; one that stands for none is refused.
        if let found = fakeIP?.lookup(key.destination.address) {
            guard let name = found else { return send(PacketBuilder.resetForSYN(packet, summary: s), netif: netif) }
            request.name = name
        }
        // Sniffed (docs/sniffing.md) where a name can matter: routed after the app's first bytes
        // when a name could change the route, or dialled by name when its outbound takes names.
        // Otherwise routed and held at the SYN as always.
        let sniff = settings.sniff.enabled && request.name == nil && !settings.sniff.skipPorts.contains(s.destinationPort)
        if sniff && decided == nil && router.nameMayDecide(request) {
            return openSniffed(packet, s, key: key, routed: nil)
        }
        // Not sniffed: a name from a DNS answer that passed through loft routes it (DNSNames).
        var learned = false
        if request.name == nil, let n = dnsNames?.name(for: key.destination.address, now: loop.now) {
            request.name = n
            learned = true
        }
        let match = decided ?? router.route(request)
        flows.countRule(match.rule)
        switch match.decision {
        case .drop(let reset):
            drop(.rule, netif)
            if reset { send(PacketBuilder.resetForSYN(packet, summary: s), netif: netif) }
        case .outbound(let outbound):
            if sniff && outbound.dialsSniffedNames {
                openSniffed(packet, s, key: key, routed: outbound)
                flows.tcp[key]?.ruleIndex = match.rule
                return
            }
            guard flows.makeRoom() else {
                drop(.flowCap, netif)
                send(PacketBuilder.resetForSYN(packet, summary: s), netif: netif)
                return
            }
            let flow = TCPFlow(table: flows, key: key, syn: packet, hold: true, summary: s, now: loop.now)
            flows.insert(flow)
            tally.tcpFlowsOpened &+= 1
            flow.outboundName = outbound.name
            flow.ruleIndex = match.rule
            if let name = request.name {
                flow.name = name
                flow.nameSource = learned ? .dns : .fakeIP
            }
            if let name = request.name, !learned {
                flow.splice.dial(outbound, to: .domain(name, key.destination.port))
            } else {
                flow.splice.dial(outbound, to: .ip(key.destination))
            }
        }
    }

    /// A flow routed after its first bytes: lwIP answers its SYN now.
    private func openSniffed(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, key: FlowKey, routed: Outbound?) {
        guard flows.makeRoom() else {
            drop(.flowCap, key.netif)
            send(PacketBuilder.resetForSYN(packet, summary: s), netif: key.netif)
            return
        }
        let flow = TCPFlow(table: flows, key: key, syn: packet, hold: false, summary: s, now: loop.now)
        flows.insert(flow)
        tally.tcpFlowsOpened &+= 1
        flow.state = .handshaking
        flow.startSniffing(routed: routed)
        if let routed { flow.outboundName = routed.name }
        if clwip_input(lwip, Int32(key.netif), packet.baseAddress!.assumingMemoryBound(to: UInt8.self), packet.count,
                       Int32(s.destinationPort), -1, 0, -1) != 0 {
            drop(.stackMemory, key.netif)
            flow.abort()
        }
    }

    /// The app reset a connection lwIP has not handed over yet (its answer to lwIP's SYN-ACK:
    /// a SYN scan, or a SYN its kernel never sent). lwIP has just dropped its half-open
    /// connection without telling anyone; the flow and its outbound connection go too.
    func appReset(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, netif: Int) {
        let key = FlowKey(netif: netif, source: Endpoint(s.source, s.sourcePort),
                          destination: Endpoint(s.destination, s.destinationPort))
        guard let flow = flows.tcp[key], flow.state == .handshaking else { return }
        // lwIP takes an RST in SYN_RCVD only at exactly the next sequence number it expects.
        guard s.tcpSequence(packet) == flow.synSequence &+ 1 else { return }
        tally.handshakesReset &+= 1
        flow.abort()
    }

    /// Hands a held SYN to lwIP once the outbound is connected.
    func inject(_ packet: [UInt8], netif: Int, port: UInt16) {
        packet.withUnsafeBufferPointer { b in
            if clwip_input(lwip, Int32(netif), b.baseAddress!, b.count, Int32(port), -1, 0, -1) != 0 { drop(.stackMemory, netif) }
        }
    }
}
