import LoftCore
import LoftIO

/// Packet mode (docs/sstp.md): flows of one input (the TUN) that the router sends to a
/// `PacketOutbound` pass through as IP packets, never through lwIP. The router is asked on a
/// flow's first packet (a TCP SYN, a UDP datagram of a conversation lwIP does not have, an
/// echo request); its later packets find it in `flows`. Each flow is forgotten at its own idle
/// deadline (UDP: the UDP idle timeout; TCP: the TCP idle timeout, or 10 s once it saw a FIN
/// or RST): one activity list per timeout, one timer per list on the loop's heap armed for its
/// oldest entry, as the flow table does for lwIP's flows.
final class PacketPath {
    unowned let stack: Netstack
    private let loop: EventLoop
    private let settings: Netstack.Settings

    /// Where a large segment is cut for a packet outbound (made on first use).
    private var segmentScratch: UnsafeMutableRawBufferPointer?
    private(set) var flows: [PacketFlowKey: PacketFlow] = [:]
    /// Fragmented datagrams whose first fragment went to a packet flow: their later fragments
    /// (no ports to look up) follow it, not lwIP. Bounded; forgotten after `fragmentLifetimeMs`.
    private var fragments: [FragmentKey: (flow: PacketFlow, at: UInt64)] = [:]
    static let maxFragmentedDatagrams = 1024
    static let fragmentLifetimeMs: UInt64 = 30_000
    /// A TCP flow that saw a FIN or RST is forgotten after this long idle.
    static let closingIdleMs: UInt64 = 10_000
    /// Source ports of the UDP packet flows (with how many flows use each), so that a UDP
    /// association over a link never takes a port an app uses (`NetstackLink`).
    private var udpSourcePorts: [UInt16: Int] = [:]

    private var udpIdle: IdleList
    private var tcpIdle: IdleList
    private var closingIdle: IdleList
    private var fragmentTimer: TimerHandle?

    init(stack: Netstack, loop: EventLoop, settings: Netstack.Settings) {
        self.stack = stack
        self.loop = loop
        self.settings = settings
        udpIdle = IdleList(timeoutMs: settings.udpIdleTimeoutMs)
        tcpIdle = IdleList(timeoutMs: settings.tcpIdleTimeoutMs)
        closingIdle = IdleList(timeoutMs: Self.closingIdleMs)
    }

    deinit { segmentScratch?.deallocate() }

    var count: Int { flows.count }

    func hasUDPSourcePort(_ port: UInt16) -> Bool { udpSourcePorts[port] != nil }

    func flow(_ key: PacketFlowKey) -> PacketFlow? { flows[key] }

    enum Verdict { case handled, lwip(RouteMatch?) }

    /// A packet of the packet-mode input: forwarded if its flow is (or becomes) a packet flow;
    /// everything else goes on to lwIP, with the router's answer when it was asked.
    func route(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, netif: Int) -> Verdict {
        if s.isLaterFragment {
            // A later fragment follows its datagram's first one (it went to a packet flow);
            // the others are lwIP's, which reassembles its own flows' datagrams.
            guard let id = s.fragmentID(packet),
                  let e = fragments[FragmentKey(netif: netif, proto: s.proto, source: s.source, destination: s.destination, id: id)],
                  loop.now - e.at < Self.fragmentLifetimeMs else { return .lwip(nil) }
            seen(e.flow)
            forward(packet, s, e.flow, netif: netif)
            return .handled
        }
        let network: FlowNetwork
        switch s.proto {
        case IPProtocol.tcp: network = .tcp
        case IPProtocol.udp: network = .udp
        default:
            guard s.isEchoRequest else { return .lwip(nil) }
            network = .icmp
        }
        let key = PacketFlowKey(netif: netif, proto: s.proto, source: Endpoint(s.source, s.sourcePort),
                                destination: Endpoint(s.destination, s.destinationPort))
        if let f = flows[key] {
            seen(f)
            if network == .tcp && !f.closing && s.tcpFlags & (PacketSummary.tcpRST | PacketSummary.tcpFIN) != 0 { startClosing(f) }
            noteFirstFragment(packet, s, f, netif: netif)
            forward(packet, s, f, netif: netif)
            return .handled
        }
        switch network {
        case .tcp:
            guard s.isTCPOpen, stack.flows.tcp[FlowKey(netif: netif, source: key.source, destination: key.destination)] == nil else { return .lwip(nil) }
        case .udp:
            if stack.flows.conversations[UDPConversation(netif: netif, source: key.source, destination: key.destination)] != nil { return .lwip(nil) }
        default:
            break
        }
        let match = stack.router.route(FlowRequest(network: network, source: key.source, destination: .ip(key.destination)))
        guard case .outbound(let o) = match.decision, let po = o as? PacketOutbound, po.takesNewFlows else { return .lwip(match) }
        stack.flows.countRule(match.rule)
        let f = PacketFlow(key: key, outbound: po, rule: match.rule, now: loop.now)
        if network != .icmp {
            guard flows.count < settings.maxFlows else { stack.drop(.flowCap, netif); return .handled }
            flows[key] = f
            if network == .udp { udpSourcePorts[key.source.port, default: 0] += 1 }
            add(f)
        }
        noteFirstFragment(packet, s, f, netif: netif)
        forward(packet, s, f, netif: netif)
        return .handled
    }

    /// The first fragment of a datagram (it carries the ports) went to `f`: its later
    /// fragments are found by the datagram's id. Past the bound, expired entries go first;
    /// a table still full leaves the datagram's later fragments to lwIP (as before).
    private func noteFirstFragment(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, _ f: PacketFlow, netif: Int) {
        guard let id = s.fragmentID(packet) else { return }
        let now = loop.now
        if fragments.count >= Self.maxFragmentedDatagrams {
            fragments = fragments.filter { now - $0.value.at < Self.fragmentLifetimeMs }
            guard fragments.count < Self.maxFragmentedDatagrams else { return }
        }
        fragments[FragmentKey(netif: netif, proto: s.proto, source: s.source, destination: s.destination, id: id)] = (f, now)
        armFragments(at: now &+ Self.fragmentLifetimeMs)
    }

    /// A SYN the outbound does not take (its link is down, or it carries no IPv6) is answered
    /// with an RST, so the app fails at once instead of retrying into nothing.
    private func forward(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, _ f: PacketFlow, netif: Int) {
        // What the link carries: the input's MTU (which the link's MRU set), or less where the
        // TUN keeps IPv6's minimum of 1280 above a smaller link.
        let mtu = stack.inputs[netif].mtu
        let limit = min(mtu, f.outbound.linkMTU)
        let tcp = s.proto == IPProtocol.tcp && !s.isLaterFragment
        if tcp && s.tcpFlags & PacketSummary.tcpSYN != 0 && limit < mtu,
           let mss = TCPOptions.mss(inTCPHeader: UnsafeRawBufferPointer(rebasing: packet[s.transportOffset...])),
           Int(mss) > limit - (s.version == 4 ? 40 : 60) {
            // The SYN's MSS is what the server sends: lowered to what the link carries.
            var copy = [UInt8](packet)
            copy.withUnsafeMutableBytes {
                _ = TCPOptions.lowerMSS(in: $0, transportOffset: s.transportOffset, to: UInt16(limit - (s.version == 4 ? 40 : 60)))
            }
            return copy.withUnsafeBytes { forward($0, s, f, netif: netif) }
        }
        if packet.count > limit && segmentScratch == nil { segmentScratch = .allocate(byteCount: 65536, alignment: 16) }
        // A TCP segment the TUN's offload handed over whole (up to 64 KiB), or one larger than
        // the link, leaves in pieces the link carries.
        if tcp && packet.count > limit {
            var refused = false
            let cut = TCPSegmentation.split(packet, transportOffset: s.transportOffset, maxPacket: limit,
                                            scratch: segmentScratch!) { piece in
                if f.outbound.sendPacket(piece) { f.bytesUp &+= UInt64(piece.count) } else { refused = true }
            }
            if cut {
                if refused { stack.drop(.linkDown, netif) }
                return
            }
        }
        // Another IPv4 datagram larger than the link: fragmented, or with DF the app learns
        // the link's MTU (ICMP fragmentation-needed, RFC 1191).
        if packet.count > limit && s.version == 4 {
            if packet[6] & 0x40 != 0 {
                stack.drop(.tooLarge, netif)
                stack.send(PacketBuilder.fragmentationNeeded(packet, summary: s, mtu: limit), netif: netif)
                return
            }
            var refused = false
            if IPv4Fragmentation.split(packet, maxPacket: limit, scratch: segmentScratch!, { piece in
                if f.outbound.sendPacket(piece) { f.bytesUp &+= UInt64(piece.count) } else { refused = true }
            }) {
                if refused { stack.drop(.linkDown, netif) }
                return
            }
        }
        if f.outbound.sendPacket(packet) {
            f.bytesUp &+= UInt64(packet.count)
        } else {
            stack.drop(.linkDown, netif)
            if s.isTCPOpen { stack.send(PacketBuilder.resetForSYN(packet, summary: s), netif: netif) }
        }
    }

    // MARK: idle deadlines

    /// Flows of one idle timeout in the order of their last packet, and the one timer armed
    /// for the oldest's deadline.
    private struct IdleList {
        var flows = ActivityList<PacketFlow>()
        var timer: TimerHandle?
        let timeoutMs: UInt64
    }

    private enum List { case udp, tcp, closing }

    /// The list of kind `l`, in place (the one place that maps a kind to its list).
    private subscript(l: List) -> IdleList {
        @inline(__always) get {
            switch l {
            case .udp: udpIdle
            case .tcp: tcpIdle
            case .closing: closingIdle
            }
        }
        @inline(__always) _modify {
            switch l {
            case .udp: yield &udpIdle
            case .tcp: yield &tcpIdle
            case .closing: yield &closingIdle
            }
        }
    }

    /// A packet of `f`: it becomes the newest of its list (an ICMP echo's flow is in none).
    private func seen(_ f: PacketFlow) {
        f.lastSeen = loop.now
        guard f.listed else { return }
        self[listOf(f)].flows.touch(f)
    }

    private func listOf(_ f: PacketFlow) -> List {
        f.key.proto == IPProtocol.tcp ? (f.closing ? .closing : .tcp) : .udp
    }

    private func add(_ f: PacketFlow) {
        f.listed = true
        let l = listOf(f)
        self[l].flows.append(f)
        arm(l)
    }

    private func startClosing(_ f: PacketFlow) {
        tcpIdle.flows.remove(f)
        f.closing = true
        closingIdle.flows.append(f)
        arm(.closing)
    }

    /// The list's timer, for its oldest flow's deadline (unless one is armed: it re-arms).
    private func arm(_ l: List) {
        guard self[l].timer == nil, let first = self[l].flows.oldest else { return }
        let limit = self[l].timeoutMs
        self[l].timer = loop.schedule(at: first.lastSeen &+ limit) { [weak self] in
            guard let self else { return }
            self[l].timer = nil
            let now = self.loop.now
            while let f = self[l].flows.oldest, now &- f.lastSeen >= limit { self.forget(f, l) }
            self.arm(l)
        }
    }

    private func forget(_ f: PacketFlow, _ l: List) {
        self[l].flows.remove(f)
        f.listed = false
        flows[f.key] = nil
        if l == .udp, let n = udpSourcePorts[f.key.source.port] {
            udpSourcePorts[f.key.source.port] = n > 1 ? n - 1 : nil
        }
    }

    /// Fragment entries go at their lifetime's end: one deadline for the earliest.
    private func armFragments(at t: UInt64) {
        guard fragmentTimer == nil else { return }
        fragmentTimer = loop.schedule(at: t) { [weak self] in
            guard let self else { return }
            self.fragmentTimer = nil
            let now = self.loop.now
            self.fragments = self.fragments.filter { now - $0.value.at < Self.fragmentLifetimeMs }
            if let first = self.fragments.values.map(\.at).min() { self.armFragments(at: first &+ Self.fragmentLifetimeMs) }
        }
    }
}

/// One fragmented datagram (RFC 791: source, destination, protocol and identification).
struct FragmentKey: Hashable {
    var netif: Int
    var proto: UInt8
    var source: IPAddress
    var destination: IPAddress
    var id: UInt32
}

struct PacketFlowKey: Hashable {
    var netif: Int
    var proto: UInt8
    var source: Endpoint
    var destination: Endpoint
}

/// A flow that a packet-mode outbound carries as IP packets.
final class PacketFlow: ActivityListed {
    let key: PacketFlowKey
    let outbound: PacketOutbound
    let rule: Int
    var lastSeen: UInt64
    var closing = false
    /// In `flows` and an activity list (an echo request's flow never is; a forgotten flow that
    /// a fragment entry still names no longer is).
    var listed = false
    var bytesUp: UInt64 = 0
    /// Neighbours in the packet path's activity list for its timeout.
    unowned(unsafe) var older: PacketFlow?
    unowned(unsafe) var newer: PacketFlow?
    init(key: PacketFlowKey, outbound: PacketOutbound, rule: Int, now: UInt64) {
        self.key = key
        self.outbound = outbound
        self.rule = rule
        lastSeen = now
    }
}
