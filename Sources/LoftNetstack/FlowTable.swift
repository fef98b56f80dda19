import CLwIP
import LoftCore
import LoftIO

/// The netstack's TCP flows and UDP associations: the tables they are found in, their activity
/// lists with the idle deadlines, eviction at the cap and per-rule usage. Flows report here
/// (moved bytes, finished, connected, failed), never into the stack's own state; what they ask
/// of lwIP (the held SYN, a reply to the app) the table passes to the stack.
final class FlowTable {
    unowned(unsafe) let stack: Netstack
    let loop: EventLoop
    let settings: Netstack.Settings
    let trimmer: MemoryTrimmer

    var tcp = KeyedTable<TCPFlow>()
    /// Flows by activity (the oldest is evicted first at the cap).
    private var flowActivity = ActivityList<TCPFlow>()
    /// Associations by app endpoint and outbound, and by app endpoint and destination (so a
    /// datagram of a known conversation finds its association without asking the router).
    var udp = KeyedTable<UDPAssociation>()
    var conversations: [UDPConversation: UDPAssociation] = [:]
    /// New conversations whose first datagrams wait to be sniffed (QUIC Initials), at most
    /// `UDPSniff.maxWaiting`.
    var udpSniffs: [UDPConversation: UDPSniff] = [:]
    private var associationActivity = ActivityList<UDPAssociation>()

    /// Per rule index (-1: the default): flows it decided and bytes of finished ones.
    var ruleUsage: [Int: Netstack.RuleUsage] = [:]

    init(stack: Netstack, loop: EventLoop, settings: Netstack.Settings, trimmer: MemoryTrimmer) {
        self.stack = stack
        self.loop = loop
        self.settings = settings
        self.trimmer = trimmer
    }

    var count: Int { tcp.count + udp.count }

    /// Ids for flows and associations, from 1 (wrapping past 2^32 - 1 to 1 again).
    private var lastID: UInt32 = 0
    func nextID() -> UInt32 {
        lastID = lastID == UInt32.max ? 1 : lastID + 1
        return lastID
    }

    /// The flow or association a packet of input `netif` belongs to (`inbound`: read from the
    /// input, so its source is the app's end): its id and outbound. For captures.
    func owner(of packet: UnsafeRawBufferPointer, netif: Int, inbound: Bool) -> (id: UInt64, outbound: String)? {
        // The addresses and ports only: a segment loft writes with offloads is not a whole
        // packet by PacketSummary's checks (its lengths and checksums are the kernel's to finish).
        let p = packet
        guard p.count >= 20 else { return nil }
        let proto: UInt8, t: Int, src: IPAddress, dst: IPAddress
        switch p[0] >> 4 {
        case 4:
            t = Int(p[0] & 0x0F) * 4
            guard t >= 20, (Int(p[6] & 0x1F) << 8 | Int(p[7])) == 0 else { return nil }
            proto = p[9]
            src = IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: p[12..<16]))
            dst = IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: p[16..<20]))
        case 6:
            guard p.count >= 40 else { return nil }
            t = 40
            proto = p[6]
            src = IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: p[8..<24]))
            dst = IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: p[24..<40]))
        default:
            return nil
        }
        guard p.count >= t + 4 else { return nil }
        let a = Endpoint(src, UInt16(p[t]) << 8 | UInt16(p[t + 1])), b = Endpoint(dst, UInt16(p[t + 2]) << 8 | UInt16(p[t + 3]))
        let (app, remote) = inbound ? (a, b) : (b, a)
        switch proto {
        case IPProtocol.tcp:
            guard let f = tcp[FlowKey(netif: netif, source: app, destination: remote)] else { return nil }
            return (UInt64(f.id), f.outboundName)
        case IPProtocol.udp:
            guard let u = conversations[UDPConversation(netif: netif, source: app, destination: remote)] else { return nil }
            return (UInt64(u.id), u.outboundName)
        default:
            return nil
        }
    }

    /// A flow or association with this id is live.
    func contains(id: UInt64) -> Bool {
        tcp.contains { UInt64($0.id) == id } || udp.contains { UInt64($0.id) == id }
    }

    func countRule(_ rule: Int) { ruleUsage[rule, default: Netstack.RuleUsage()].flows &+= 1 }

    // MARK: TCP flows

    func insert(_ flow: TCPFlow) {
        tcp.insert(flow)
        flowActivity.append(flow)
        armFlowIdle()
        trimmer.tableGrew(to: count)
    }

    /// A flow is completely done.
    func remove(_ flow: TCPFlow) {
        guard tcp.remove(flow) else { return }
        flowActivity.remove(flow)
        ruleUsage[flow.ruleIndex, default: Netstack.RuleUsage()].add(up: flow.bytesUp, down: flow.bytesDown)
        trimmer.tableShrank(to: count)
    }

    /// Bytes moved on `f` (a live flow): it becomes the newest.
    func touch(_ f: TCPFlow) {
        flowActivity.touch(f)
        trimmer.bytesMoved()
    }

    /// The outbound connected: the held SYN goes to lwIP.
    func flowConnected(_ f: TCPFlow, syn: [UInt8]) { stack.inject(syn, netif: f.key.netif, port: f.key.destination.port) }

    func flowFailed(_ f: TCPFlow) { stack.tally.tcpFlowsFailed &+= 1 }

    /// A packet for the app of flow `f` (the answer to its held SYN).
    func reply(_ packet: [UInt8], for f: TCPFlow) { stack.send(packet, netif: f.key.netif) }

    /// The MSS lwIP may use towards the app of `f`, and whether its input offloads.
    func segmentLimit(for f: TCPFlow) -> (mss: UInt16, offload: Bool) {
        (stack.largeSegmentMSS(netif: f.key.netif, ipv4: f.key.source.address.isIPv4), stack.inputs[f.key.netif].offload)
    }

    // MARK: UDP associations

    func insert(_ a: UDPAssociation) {
        udp.insert(a)
        associationActivity.append(a)
        armAssociationIdle()
        trimmer.tableGrew(to: count)
    }

    func closeAssociation(_ a: UDPAssociation) {
        guard udp.remove(a) else { return }
        ruleUsage[a.ruleIndex, default: Netstack.RuleUsage()].add(up: a.bytesUp, down: a.bytesDown)
        for c in a.conversations where conversations[c] === a { conversations[c] = nil }
        a.conversations = []
        associationActivity.remove(a)
        a.close()
        trimmer.tableShrank(to: count)
    }

    /// A datagram either way on `a`: it becomes the newest.
    func touch(_ a: UDPAssociation) {
        a.lastActivity = loop.now
        if a.outboundSide != nil { associationActivity.touch(a) }
    }

    // MARK: the cap

    /// Keeps the table under the cap by evicting the least recently active flow or
    /// association, whichever is older. False if nothing could go.
    func makeRoom() -> Bool {
        if count < settings.maxFlows { return true }
        let t = flowActivity.oldest
        let u = associationActivity.oldest
        if let u, t == nil || u.lastActivity < t!.lastActivity {
            stack.tally.flowsEvicted &+= 1
            closeAssociation(u)
            return true
        }
        if let t {
            stack.tally.flowsEvicted &+= 1
            Log.debug("flow.evicted", ["src": t.key.source, "dst": t.key.destination])
            t.abort()
            return true
        }
        return false
    }

    // MARK: idle deadlines

    /// Idle TCP flows and UDP associations are closed from the oldest end of their activity
    /// lists: one timer per list on the loop's heap, armed for the oldest entry's deadline, so
    /// an idle flow costs no timer of its own. A timer that finds its oldest entry active again
    /// is re-armed for the new oldest's deadline (one wake per idle period, not per byte).
    private var flowIdleTimer: TimerHandle?
    private var associationIdleTimer: TimerHandle?

    // The timers' actions hold the table unowned (no weak reference, whose side table would
    // make every reference count operation on the table, one per flow event, the slow kind):
    // none may run after this.
    deinit {
        if let t = flowIdleTimer { loop.cancel(t) }
        if let t = associationIdleTimer { loop.cancel(t) }
    }

    private func armFlowIdle() {
        guard flowIdleTimer == nil, settings.tcpIdleTimeoutMs > 0, let oldest = flowActivity.oldest else { return }
        sweepFlows(at: oldest.lastActivity &+ settings.tcpIdleTimeoutMs)
    }

    private func sweepFlows(at t: UInt64) {
        flowIdleTimer = loop.schedule(at: t) { [unowned(unsafe) self] in
            self.flowIdleTimer = nil
            self.sweepIdleFlows()
        }
    }

    /// Resets the flows idle for the timeout, oldest first. A flow still connecting is left to
    /// its splice's connect deadline (its idle time runs from its dial until it relays).
    private func sweepIdleFlows() {
        let limit = settings.tcpIdleTimeoutMs, now = loop.now
        var f = flowActivity.oldest
        while let x = f, now &- x.lastActivity >= limit {
            f = x.newer
            guard x.isRelaying else { continue }
            stack.tally.idleClosed &+= 1
            x.abort()
        }
        if let f {
            sweepFlows(at: f.lastActivity &+ limit)
        } else if flowActivity.oldest != nil {
            // Only connecting flows past the idle time: they connect or fail within the
            // connect timeout; look again in a second.
            sweepFlows(at: now &+ 1000)
        }
    }

    private func armAssociationIdle() {
        let limit = settings.udpIdleTimeoutMs
        guard associationIdleTimer == nil, limit > 0, let oldest = associationActivity.oldest else { return }
        associationIdleTimer = loop.schedule(at: oldest.lastActivity &+ limit) { [unowned(unsafe) self] in
            self.associationIdleTimer = nil
            let now = self.loop.now
            while let a = self.associationActivity.oldest, now &- a.lastActivity >= limit {
                self.stack.tally.idleClosed &+= 1
                self.closeAssociation(a)
            }
            self.armAssociationIdle()
        }
    }

    // MARK: status

    /// Flows and bytes per rule index, live flows included.
    func ruleUsageSnapshot() -> [Int: Netstack.RuleUsage] {
        var u = ruleUsage
        for f in tcp { u[f.ruleIndex, default: Netstack.RuleUsage()].add(up: f.bytesUp, down: f.bytesDown) }
        for a in udp { u[a.ruleIndex, default: Netstack.RuleUsage()].add(up: a.bytesUp, down: a.bytesDown) }
        return u
    }

    /// Forgets per-rule accounting, and the routes of UDP conversations.
    func resetRuleUsage() {
        ruleUsage = [:]
        for a in udp { a.conversations = [] }
        conversations = [:]
    }

    func tcpStateCounts() -> [(String, Int)] {
        var connecting = 0, handshaking = 0, open = 0, closing = 0
        for f in tcp {
            switch f.state {
            case .connecting: connecting += 1
            case .handshaking: handshaking += 1
            case .open: if f.isHalfClosed { closing += 1 } else { open += 1 }
            case .closed: closing += 1
            }
        }
        return [("connecting", connecting), ("handshaking", handshaking), ("established", open), ("closing", closing)]
    }

    func snapshot() -> [Netstack.FlowRow] {
        let now = loop.now
        var out: [Netstack.FlowRow] = []
        for f in tcp {
            out.append(.init(id: UInt64(f.id), network: .tcp, source: f.key.source, destination: f.key.destination,
                             outbound: f.outboundName, bytesUp: f.bytesUp, bytesDown: f.bytesDown, ageMs: now - f.createdAt,
                             name: f.name, nameSource: f.nameSource.description))
        }
        for a in udp {
            out.append(.init(id: UInt64(a.id), network: .udp, source: a.key.source, destination: a.lastDestination,
                             outbound: a.outboundName, bytesUp: a.bytesUp, bytesDown: a.bytesDown, ageMs: now - a.createdAt,
                             name: a.name, nameSource: a.nameSource.description))
        }
        return out
    }
}
