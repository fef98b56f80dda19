import CLwIP
import LoftCore
import LoftIO
import LoftSniff

extension Netstack {
    /// A datagram lwIP took for an app: to the association of its conversation (routed on the
    /// conversation's first datagram).
    func udpReceived(netif: Int, source: Endpoint, destination: Endpoint, pbuf: OpaquePointer) {
        let len = Int(clwip_pbuf_total(pbuf))
        _ = clwip_pbuf_copy(pbuf, scratch.baseAddress, UInt16(len))
        clwip_pbuf_free(pbuf)
        let payload = UnsafeRawBufferPointer(rebasing: scratch[0..<len])
        let conversation = UDPConversation(netif: netif, source: source, destination: destination)
        var fakeName: String?
        if let fake = fakeIP {
            // Fake-IP (FakeIP.swift): a query for a selected name is answered here; a datagram
            // to a pool address goes by its name, or is refused when it stands for none.
            if destination.port == 53, let reply = fake.answer(payload) {
                return answerDNS(reply, from: destination, to: source, netif: netif)
            }
            if let found = fake.lookup(destination.address) {
                guard let name = found else { return portUnreachable(from: destination, to: source, netif: netif) }
                fakeName = name
            }
        }
        if let known = flows.conversations[conversation] { return udpSend(payload, known, to: destination) }
        if let fakeName {
            guard let assoc = udpAssociation(for: conversation, name: fakeName, source: .fakeIP, pinned: true) else { return }
            return udpSend(payload, assoc, to: destination)
        }
        // A new conversation: a QUIC client's first Initials may name the host (Sniffing.swift).
        if settings.sniff.enabled {
            if let waiting = flows.udpSniffs[conversation] { return waiting.take(payload) }
            if startUDPSniff(conversation, payload) { return }
        }
        guard let assoc = udpAssociation(for: conversation, name: nil, source: .none) else { return }
        udpSend(payload, assoc, to: destination)
    }

    /// Routes a new conversation (by its sniffed name too) and joins it to its association.
    /// nil: dropped (counted).
    /// `pinned`: the conversation has an association of its own, its datagrams dialled to the
    /// name and the replies given the conversation's destination as their source (fake-IP).
    func udpAssociation(for conversation: UDPConversation, name sniffed: String?, source sniffedSource: NameSource,
                        pinned: Bool = false) -> UDPAssociation? {
        let (netif, source, destination) = (conversation.netif, conversation.source, conversation.destination)
        // No name given: one from a DNS answer that passed through loft routes it (DNSNames).
        var name = sniffed, nameSource = sniffedSource
        if name == nil, let n = dnsNames?.name(for: destination.address, now: loop.now) {
            name = n
            nameSource = .dns
        }
        let match = router.route(FlowRequest(network: .udp, source: source, destination: .ip(destination), name: name))
        guard case .outbound(let outbound) = match.decision else {
            drop(.rule, netif)
            return nil
        }
        let assoc: UDPAssociation
        let key = UDPKey(netif: netif, source: source, outbound: ObjectIdentifier(outbound), pinned: pinned ? destination : nil)
        if let existing = flows.udp[key] {
            assoc = existing
        } else {
            guard flows.makeRoom() else { drop(.flowCap, netif); return nil }
            let a = UDPAssociation(stack: self, key: key, id: flows.nextID(), now: loop.now)
            guard let outboundSide = outbound.openAssociation(events: a) else {
                drop(.rule, netif)
                return nil
            }
            a.outboundSide = outboundSide
            a.outboundName = outbound.name
            if pinned { a.dialName = name }
            a.ruleIndex = match.rule
            flows.countRule(match.rule)
            flows.insert(a)
            tally.udpAssociationsOpened &+= 1
            assoc = a
        }
        if let name {
            assoc.name = name
            assoc.nameSource = nameSource
        }
        flows.conversations[conversation] = assoc
        assoc.conversations.append(conversation)
        return assoc
    }

    /// One datagram of the app's out through its association.
    func udpSend(_ payload: UnsafeRawBufferPointer, _ assoc: UDPAssociation, to destination: Endpoint) {
        assoc.lastDestination = destination
        flows.touch(assoc)
        tally.udpDatagramsUp &+= 1
        assoc.bytesUp &+= UInt64(payload.count)
        if let name = assoc.dialName {
            assoc.outboundSide?.send(payload, to: .domain(name, destination.port))
        } else {
            assoc.outboundSide?.send(payload, to: .ip(destination))
        }
    }
}

struct UDPKey: Hashable {
    var netif: Int
    var source: Endpoint
    var outbound: ObjectIdentifier
    /// A fake-IP conversation's own association: its destination (replies come from it).
    var pinned: Endpoint?
}

/// One app endpoint talking to one destination: routed once, then found by this.
struct UDPConversation: Hashable {
    var netif: Int
    var source: Endpoint
    var destination: Endpoint
}

/// One app source endpoint's UDP traffic through one outbound (full-cone: replies from any
/// remote return to the app with that remote as their source).
final class UDPAssociation: DatagramEvents, ActivityListed, TableKeyed {
    unowned let stack: Netstack
    let key: UDPKey
    /// The association's id in `loft status --flows` (and `loft capture --flow`).
    let id: UInt32
    var outboundSide: DatagramAssociation?
    var outboundName = ""
    var ruleIndex = -1
    var lastActivity: UInt64
    let createdAt: UInt64
    var bytesUp: UInt64 = 0
    var bytesDown: UInt64 = 0
    /// The destination of the app's latest datagram (for status).
    var lastDestination: Endpoint
    /// The name a conversation of it was routed by (a QUIC Initial's SNI), for status.
    var name: String?
    var nameSource = NameSource.none
    /// A fake-IP association's name: datagrams go to it, not to the pool address.
    var dialName: String?
    /// The conversations routed to this association (forgotten with it).
    var conversations: [UDPConversation] = []
    /// Neighbours in the netstack's activity list.
    unowned(unsafe) var older: UDPAssociation?
    unowned(unsafe) var newer: UDPAssociation?

    init(stack: Netstack, key: UDPKey, id: UInt32, now: UInt64) {
        self.stack = stack
        self.key = key
        self.id = id
        self.lastActivity = now
        self.createdAt = now
        self.lastDestination = key.source
    }

    func close() {
        outboundSide?.close()
        outboundSide = nil
    }

    func datagramRefused(by remote: Endpoint) {
        guard remote.address.isIPv4 == key.source.address.isIPv4 else { return }
        stack.portUnreachable(from: remote, to: key.source, netif: key.netif)
    }

    func datagramReceived(_ payload: UnsafeRawBufferPointer, from remote: Endpoint) {
        // An IPv4 reply cannot go to an IPv6 app endpoint or the reverse.
        guard remote.address.isIPv4 == key.source.address.isIPv4, payload.count <= 65507 else { return }
        if remote.port == 53, let names = stack.dnsNames { names.learn(payload, now: stack.loop.now) }
        stack.flows.touch(self)
        bytesDown &+= UInt64(payload.count)
        stack.tally.udpDatagramsDown &+= 1
        var from = clwip_endpoint(key.pinned ?? remote)
        var to = clwip_endpoint(key.source)
        if clwip_udp_send(stack.lwip, Int32(key.netif), &from, &to, payload.baseAddress, UInt16(payload.count)) != 0 {
            stack.drop(.stackMemory, key.netif)
        }
    }
}