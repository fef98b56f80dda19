import CLwIP
import Glibc
import LoftCore
import LoftIO

/// Where the stack's outgoing packets go for one input (the TUN, the bridge).
public protocol PacketWriter: AnyObject {
    /// `segmentSize` > 0 only on an input added with `offload`: `packet` is a TCP segment
    /// larger than the input's MTU, to be cut into pieces of `segmentSize` payload bytes (the
    /// app's MSS) by whoever delivers it (the kernel, told so in the TUN's offload header).
    /// On such an input lwIP does not sum the payload of the TCP segments of its flows
    /// (`LwipStream.payloadSummed`): every TCP segment with payload, of any size, leaves with
    /// a partial checksum that its receiver completes (`VirtioNetHeader.forPartialTCP`).
    func writePacket(_ packet: UnsafeRawBufferPointer, segmentSize: Int)
}

/// The lwIP stack: packets in from inputs, TCP flows and UDP associations out to the router's
/// outbounds, packets back to the input each flow came from. One instance (lwIP is global),
/// driven entirely by the event loop thread.
public final class Netstack {
    public struct Settings: Sendable {
        public var icmpReply = true
        public var maxFlows = 16384
        public var connectTimeoutMs: UInt64 = 10_000
        public var tcpIdleTimeoutMs: UInt64 = 7_200_000
        public var udpIdleTimeoutMs: UInt64 = 60_000
        public init() {}
    }

    let loop: EventLoop
    let router: FlowRouter
    public let settings: Settings
    /// Counted here; TCP bytes are counted by the flows' splices into `meter`.
    var tally = NetstackCounters()
    let meter = SpliceMeter()
    public var counters: NetstackCounters {
        var c = tally
        c.tcpBytesUp = meter.bytesUp
        c.tcpBytesDown = meter.bytesDown
        return c
    }

    struct Input {
        let writer: PacketWriter
        var mtu: Int
        let verifyChecksums: Bool
        /// TCP segments of up to 64 KiB pass whole both ways, whatever the MTU (TUN offloads).
        let offload: Bool
        /// The window scale its SYN-ACKs announce (lwIP's compiled one is 1).
        var windowScale: UInt8 = 1
        /// The longest packet the input takes or is given.
        var packetLimit: Int { offload ? 65535 : mtu }
    }
    var inputs: [Input] = []

    var tcpFlows = KeyedTable<TCPFlow>()
    /// Flows by activity (the oldest is evicted first at the cap).
    private var flowActivity = ActivityList<TCPFlow>()
    /// Associations by app endpoint and outbound, and by app endpoint and destination (so a
    /// datagram of a known conversation finds its association without asking the router).
    var udpAssociations = KeyedTable<UDPAssociation>()
    var udpConversations: [UDPConversation: UDPAssociation] = [:]
    private var associationActivity = ActivityList<UDPAssociation>()
    /// lwIP ends with events for after this batch of packets (never from inside lwIP's callbacks).
    var readableStreams: [LwipStream] = []
    var writableStreams: [LwipStream] = []
    var outputStreams: [LwipStream] = []
    private var spareStreams: [LwipStream] = []
    /// Flows whose handshake with the app completed in this batch (their splice attaches after it).
    var acceptedFlows: [TCPFlow] = []
    private var spareFlows: [TCPFlow] = []
    /// Remote → app copy buffer (one loop thread).
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
    /// A SYN-ACK whose MSS is raised on its way out (`announceLargeMSS`).
    let synAckScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 256, alignment: 16)

    public var tcpFlowCount: Int { tcpFlows.count }
    public var udpAssociationCount: Int { udpAssociations.count }

    /// Creates the stack. lwIP is one global, so only one Netstack may be live at a time; the
    /// next can be created once this one is shut down (`shutdown()` or deinit).
    public init(loop: EventLoop, router: FlowRouter, settings: Settings) {
        precondition(activeNetstack == nil, "lwIP is a single global instance: shut the previous Netstack down first")
        self.loop = loop
        self.router = router
        self.settings = settings
        activeNetstack = self
        var cb = clwip_callbacks(output: lwipOutput, accepted: lwipAccepted, received: lwipReceived,
                                 sent: lwipSent, failed: lwipError, connected: lwipConnected, udp: lwipUDP, link_udp: lwipLinkUDP)
        _ = clwip_init(&cb)
    }

    /// Set once `shutdown()` (or deinit) has released lwIP.
    public internal(set) var isShutDown = false

    deinit {
        if !isShutDown { releaseInDeinit() }
        scratch.deallocate()
        synAckScratch.deallocate()
        segmentScratch?.deallocate()
    }

    /// The input's MTU changed (a holder's STATUS set a new one on the TUN).
    public func setMTU(_ mtu: Int, input: Int) {
        guard inputs.indices.contains(input) else { return }
        inputs[input].mtu = mtu
        clwip_netif_set_mtu(Int32(input), UInt16(clamping: inputs[input].packetLimit))
    }

    /// Adds an input; returns its index, used with `input(_:from:)`. `verifyChecksums` checks
    /// transport checksums before lwIP so bad ones are counted (for inputs fed by any process;
    /// the TUN's packets come from the kernel). `receiveWindow`: bytes each TCP flow's app may
    /// send ahead, when more than lwIP's 64 KiB (at most 128 KiB: lwIP's window scale is 1).
    /// `offload`: the input takes and gives TCP segments of up to 64 KiB whatever its MTU (the
    /// TUN with TSO): lwIP's netif then never fragments, and large segments leave with the
    /// app's MSS as their `segmentSize`.
    public func addInput(mtu: Int, writer: PacketWriter, verifyChecksums: Bool = false, receiveWindow: Int = 0,
                         offload: Bool = false) -> Int {
        var input = Input(writer: writer, mtu: mtu, verifyChecksums: verifyChecksums, offload: offload)
        let idx = Int(clwip_netif_add(UInt16(clamping: input.packetLimit)))
        precondition(idx == inputs.count, "lwIP netif table full")
        if receiveWindow > 0 { clwip_netif_set_recv_window(Int32(idx), UInt32(clamping: receiveWindow)) }
        input.windowScale = clwip_netif_window_scale(Int32(idx))
        inputs.append(input)
        inputCounters.append(InputCounters())
        return idx
    }

    /// Runs lwIP's timers; returns ms until the next is due.
    public func runTimers() -> UInt32 { clwip_check_timeouts() }

    func drop(_ r: PacketDropReason, _ netif: Int) {
        tally.drops[r.rawValue] &+= 1
        inputCounters[netif].drops[r.rawValue] &+= 1
    }

    /// For inputs that drop before the stack sees a packet (an oversize datagram, say).
    public func countDrop(_ r: PacketDropReason, input: Int) { drop(r, input) }

    /// Per input (index from addInput): packets and drops by reason.
    public internal(set) var inputCounters: [InputCounters] = []

    /// Where an input reads its next packet before `input` (the largest IP packet fits; nil
    /// when lwIP has no memory): a large TCP segment read there goes to lwIP without a copy.
    /// Valid until the next `input` of a packet in it.
    public func receiveBuffer() -> UnsafeMutableRawBufferPointer? {
        clwip_rx_buffer().map { UnsafeMutableRawBufferPointer(start: $0, count: Int(CLWIP_RX_BUFFER_SIZE)) }
    }

    /// The hot path: one packet from an input. `partialChecksum`: a TCP segment with payload,
    /// not a SYN, whose checksum field holds only the pseudo-header's sum (the TUN's offload
    /// header said NEEDS_CSUM at its TCP checksum: a local app's segment, never on a wire);
    /// lwIP then takes it without summing it. Never on the packet-mode input (its packets may
    /// be forwarded as they are).
    public func input(_ packet: UnsafeRawBufferPointer, from netif: Int, partialChecksum: Bool = false) {
        tally.packetsIn &+= 1
        tally.bytesIn &+= UInt64(packet.count)
        inputCounters[netif].packetsIn &+= 1
        inputCounters[netif].bytesIn &+= UInt64(packet.count)
        let summary: PacketSummary
        switch PacketSummary.parse(packet, maxLength: inputs[netif].packetLimit, linkLocal: netif == packetModeInput) {
        case .failure(let reason):
            drop(reason, netif)
            return
        case .success(let s):
            summary = s
        }
        if inputs[netif].verifyChecksums && !partialChecksum && !summary.transportChecksumIsValid(packet) {
            drop(.badChecksum, netif)
            return
        }
        var decided: RouteMatch?
        if netif == packetModeInput {
            switch packetPath(packet, summary, netif: netif) {
            case .handled: return
            case .lwip(let match):
                // Link-local traffic only a packet link carries (sstp's IPV6CP); never lwIP.
                if summary.isLinkLocal { drop(.martian, netif); return }
                decided = match
            }
        }
        if summary.isTCPOpen {
            openTCP(packet, summary, netif: netif, decided: decided)
            return
        }
        if summary.isEchoRequest {
            if !settings.icmpReply {
                drop(.icmpPolicy, netif)
                return
            }
            // Echo is answered by lwIP itself, unless a rule drops its destination.
            let request = FlowRequest(network: .icmp, source: Endpoint(summary.source, 0),
                                      destination: .ip(Endpoint(summary.destination, 0)))
            let match = router.route(request)
            if case .drop = match.decision {
                drop(.rule, netif)
                return
            }
            ruleUsage[match.rule, default: RuleUsage()].flows &+= 1
        }
        let transport = !summary.isLaterFragment
        let udpPort = summary.proto == IPProtocol.udp && transport ? Int32(summary.destinationPort) : -1
        let tcpOffset = summary.proto == IPProtocol.tcp && transport ? Int32(summary.transportOffset) : 0
        let verdict = clwip_input(Int32(netif), packet.baseAddress!.assumingMemoryBound(to: UInt8.self), packet.count,
                                  -1, udpPort, tcpOffset, partialChecksum && tcpOffset > 0 ? 1 : 0)
        if verdict != 0 {
            drop(Netstack.dropReason(verdict), netif)
            return
        }
        if tcpOffset > 0 && summary.tcpFlags & PacketSummary.tcpRST != 0 { appReset(packet, summary, netif: netif) }
    }

    static func dropReason(_ verdict: Int32) -> PacketDropReason {
        switch verdict {
        case Int32(CLWIP_SEGMENT_BAD_ACK): return .tcpBadAck
        case Int32(CLWIP_SEGMENT_OUT_OF_WINDOW): return .tcpOutOfWindow
        case Int32(CLWIP_SEGMENT_OOSEQ_FULL): return .tcpReorderCap
        default: return .stackMemory
        }
    }

    /// The app reset a connection lwIP has not handed over yet (its answer to lwIP's SYN-ACK:
    /// a SYN scan, or a SYN its kernel never sent). lwIP has just dropped its half-open
    /// connection without telling anyone; the flow and its outbound connection go too.
    private func appReset(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, netif: Int) {
        let key = FlowKey(netif: netif, source: Endpoint(s.source, s.sourcePort),
                          destination: Endpoint(s.destination, s.destinationPort))
        guard let flow = tcpFlows[key], flow.state == .handshaking else { return }
        // lwIP takes an RST in SYN_RCVD only at exactly the next sequence number it expects.
        guard s.tcpSequence(packet) == flow.synSequence &+ 1 else { return }
        tally.handshakesReset &+= 1
        flow.abort()
    }

    /// Hands a held SYN to lwIP once the outbound is connected.
    func inject(_ packet: [UInt8], netif: Int, port: UInt16) {
        packet.withUnsafeBufferPointer { b in
            if clwip_input(Int32(netif), b.baseAddress!, b.count, Int32(port), -1, 0, 0) != 0 { drop(.stackMemory, netif) }
        }
    }

    func send(_ packet: [UInt8], netif: Int) {
        packet.withUnsafeBytes { emit($0, netif: netif) }
    }

    /// The most a TCP connection can have in flight either way (with the largest window scale
    /// an input announces; lwIP's own 1 allows 128 KiB).
    public static let maxWindow = Int(CLWIP_MAX_WINDOW)

    /// The MSS that fits the input's MTU (lwIP's own is at most 1460): what a SYN-ACK announces.
    func mtuMSS(netif: Int, ipv4: Bool) -> UInt16 {
        UInt16(clamping: min(inputs[netif].mtu, 65535) - (ipv4 ? 40 : 60))
    }

    /// The largest segment lwIP may send a TCP connection on input `netif`: what fits the MTU,
    /// or 64 KiB on an input with offload (the kernel cuts it to the app's MSS).
    func largeSegmentMSS(netif: Int, ipv4: Bool) -> UInt16 {
        UInt16(clamping: inputs[netif].packetLimit - (ipv4 ? 40 : 60))
    }

    /// lwIP's SYN-ACK announces its compiled MSS and window scale; on an input whose MTU allows
    /// more it leaves with an MSS that fits the MTU (the app then sends large segments, which
    /// lwIP takes whole), and on an input with a larger receive window with the scale that
    /// holds it (set on the connection in lwIP's accept callback).
    private func rewriteSynAck(_ p: UnsafeRawBufferPointer, netif: Int) -> Bool {
        guard p.count >= 40, p.count <= synAckScratch.count else { return false }
        let v4 = p[0] >> 4 == 4
        let t = v4 ? Int(p[0] & 0x0F) * 4 : 40
        guard (v4 ? p[9] : p[6]) == IPProtocol.tcp, p.count >= t + 20,
              p[t + 13] & (PacketSummary.tcpSYN | PacketSummary.tcpACK) == PacketSummary.tcpSYN | PacketSummary.tcpACK
        else { return false }
        let copy = UnsafeMutableRawBufferPointer(rebasing: synAckScratch[0..<p.count])
        copy.copyMemory(from: p)
        if inputs[netif].mtu > 1500 { TCPOptions.raiseMSS(in: copy, transportOffset: t, to: mtuMSS(netif: netif, ipv4: v4)) }
        TCPOptions.setWindowScale(in: copy, transportOffset: t, to: inputs[netif].windowScale)
        write(UnsafeRawBufferPointer(copy), netif: netif)
        return true
    }

    /// Every packet towards an input (lwIP's, and loft's own replies).
    func emit(_ p: UnsafeRawBufferPointer, netif: Int) {
        // Only inputs above 1500 raise lwIP's MSS, and inputs with large windows its window
        // scale (and then only in SYN-ACKs).
        let input = inputs[netif]
        if (input.mtu > 1500 || input.windowScale > 1) && rewriteSynAck(p, netif: netif) { return }
        write(p, netif: netif)
    }

    private func write(_ p: UnsafeRawBufferPointer, netif: Int) {
        tally.packetsOut &+= 1
        tally.bytesOut &+= UInt64(p.count)
        inputCounters[netif].packetsOut &+= 1
        inputCounters[netif].bytesOut &+= UInt64(p.count)
        let input = inputs[netif]
        input.writer.writePacket(p, segmentSize: input.offload && p.count > input.mtu ? segmentSize(p, netif: netif) : 0)
    }

    /// The piece size for a TCP segment larger than the input's MTU: the app's MSS (from its
    /// SYN) where the segment's flow is known, and never more than the MTU holds.
    private func segmentSize(_ p: UnsafeRawBufferPointer, netif: Int) -> Int {
        guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535), s.proto == IPProtocol.tcp else { return 0 }
        let fits = Int(mtuMSS(netif: netif, ipv4: s.version == 4))
        let key = FlowKey(netif: netif, source: Endpoint(s.destination, s.destinationPort),
                          destination: Endpoint(s.source, s.sourcePort))
        guard let flow = tcpFlows[key] else { return fits }
        return min(Int(flow.appMSS), fits)
    }

    // MARK: packet mode (docs/sstp.md)

    /// The input (the TUN) whose flows may be routed to a `PacketOutbound`; set only when some
    /// outbound is one. Only that input's packets look at the packet-flow table first (no cost
    /// otherwise): a packet outbound's replies go back to that input alone, and its address is
    /// the one the link gave. Other inputs' flows routed to it reach it through lwIP as streams
    /// (TCP it opens again over the link, `NetstackLink`; UDP it refuses).
    public var packetModeInput: Int?
    /// Where a large segment is cut for a packet outbound (made on first use).
    private var segmentScratch: UnsafeMutableRawBufferPointer?
    var packetFlows: [PacketFlowKey: PacketFlow] = [:]
    /// Fragmented datagrams whose first fragment went to a packet flow: their later fragments
    /// (no ports to look up) follow it, not lwIP. Bounded; forgotten after `fragmentLifetimeMs`.
    var packetFragments: [FragmentKey: (flow: PacketFlow, at: UInt64)] = [:]
    static let maxFragmentedDatagrams = 1024
    static let fragmentLifetimeMs: UInt64 = 30_000
    /// Source ports of the TUN's UDP packet flows, so that a UDP association over a link never
    /// takes a port an app uses (`NetstackLink`).
    var udpPacketSourcePorts: Set<UInt16> = []
    private var packetSweep: TimerHandle?
    public var packetFlowCount: Int { packetFlows.count }

    enum PacketVerdict { case handled, lwip(RouteMatch?) }

    /// A flow routed to a packet-mode outbound passes through as IP packets: the router is
    /// asked on its first packet (a TCP SYN, a UDP datagram of a conversation lwIP does not
    /// have, an echo request), and its later packets find it in `packetFlows`. Everything else
    /// goes on to lwIP, with the router's answer when it was asked.
    private func packetPath(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, netif: Int) -> PacketVerdict {
        if s.isLaterFragment {
            // A later fragment follows its datagram's first one (it went to a packet flow);
            // the others are lwIP's, which reassembles its own flows' datagrams.
            guard let id = s.fragmentID(packet),
                  let e = packetFragments[FragmentKey(netif: netif, proto: s.proto, source: s.source, destination: s.destination, id: id)],
                  loop.now - e.at < Self.fragmentLifetimeMs else { return .lwip(nil) }
            e.flow.lastSeen = loop.now
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
        if let f = packetFlows[key] {
            f.lastSeen = loop.now
            if network == .tcp && s.tcpFlags & (PacketSummary.tcpRST | PacketSummary.tcpFIN) != 0 { f.closing = true }
            noteFirstFragment(packet, s, f, netif: netif)
            forward(packet, s, f, netif: netif)
            return .handled
        }
        switch network {
        case .tcp:
            guard s.isTCPOpen, tcpFlows[FlowKey(netif: netif, source: key.source, destination: key.destination)] == nil else { return .lwip(nil) }
        case .udp:
            if udpConversations[UDPConversation(netif: netif, source: key.source, destination: key.destination)] != nil { return .lwip(nil) }
        default:
            break
        }
        let match = router.route(FlowRequest(network: network, source: key.source, destination: .ip(key.destination)))
        guard case .outbound(let o) = match.decision, let po = o as? PacketOutbound, po.takesNewFlows else { return .lwip(match) }
        ruleUsage[match.rule, default: RuleUsage()].flows &+= 1
        let f = PacketFlow(outbound: po, rule: match.rule, now: loop.now)
        if network != .icmp {
            guard packetFlows.count < settings.maxFlows else { drop(.flowCap, netif); return .handled }
            packetFlows[key] = f
            if network == .udp { udpPacketSourcePorts.insert(key.source.port) }
            armPacketSweep()
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
        if packetFragments.count >= Self.maxFragmentedDatagrams {
            packetFragments = packetFragments.filter { now - $0.value.at < Self.fragmentLifetimeMs }
            guard packetFragments.count < Self.maxFragmentedDatagrams else { return }
        }
        packetFragments[FragmentKey(netif: netif, proto: s.proto, source: s.source, destination: s.destination, id: id)] = (f, now)
        armPacketSweep()
    }

    /// A SYN the outbound does not take (its link is down, or it carries no IPv6) is answered
    /// with an RST, so the app fails at once instead of retrying into nothing.
    private func forward(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, _ f: PacketFlow, netif: Int) {
        // What the link carries: the input's MTU (which the link's MRU set), or less where the
        // TUN keeps IPv6's minimum of 1280 above a smaller link.
        let limit = min(inputs[netif].mtu, f.outbound.linkMTU)
        let tcp = s.proto == IPProtocol.tcp && !s.isLaterFragment
        if tcp && s.tcpFlags & PacketSummary.tcpSYN != 0 && limit < inputs[netif].mtu,
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
                if refused { drop(.linkDown, netif) }
                return
            }
        }
        // Another IPv4 datagram larger than the link: fragmented, or with DF the app learns
        // the link's MTU (ICMP fragmentation-needed, RFC 1191).
        if packet.count > limit && s.version == 4 {
            if packet[6] & 0x40 != 0 {
                drop(.tooLarge, netif)
                send(PacketBuilder.fragmentationNeeded(packet, summary: s, mtu: limit), netif: netif)
                return
            }
            var refused = false
            if IPv4Fragmentation.split(packet, maxPacket: limit, scratch: segmentScratch!, { piece in
                if f.outbound.sendPacket(piece) { f.bytesUp &+= UInt64(piece.count) } else { refused = true }
            }) {
                if refused { drop(.linkDown, netif) }
                return
            }
        }
        if f.outbound.sendPacket(packet) {
            f.bytesUp &+= UInt64(packet.count)
        } else {
            drop(.linkDown, netif)
            if s.isTCPOpen { send(PacketBuilder.resetForSYN(packet, summary: s), netif: netif) }
        }
    }

    /// Every 10 s while packet flows exist: UDP and ICMP flows idle for the UDP idle timeout,
    /// TCP flows that saw a FIN or RST and were idle 10 s, other TCP flows idle for the TCP idle
    /// timeout, are forgotten.
    private func armPacketSweep() {
        guard packetSweep == nil else { return }
        packetSweep = loop.schedule(after: 10_000) { [weak self] in
            guard let self else { return }
            self.packetSweep = nil
            let now = self.loop.now
            var udpPorts: Set<UInt16> = []
            self.packetFlows = self.packetFlows.filter { key, f in
                if key.proto == IPProtocol.udp {
                    let keep = now - f.lastSeen < self.settings.udpIdleTimeoutMs
                    if keep { udpPorts.insert(key.source.port) }
                    return keep
                }
                let idle = now - f.lastSeen
                if key.proto != IPProtocol.tcp { return idle < self.settings.udpIdleTimeoutMs }
                return f.closing ? idle < 10_000 : idle < self.settings.tcpIdleTimeoutMs
            }
            self.udpPacketSourcePorts = udpPorts
            self.packetFragments = self.packetFragments.filter { now - $0.value.at < Netstack.fragmentLifetimeMs }
            if !self.packetFlows.isEmpty || !self.packetFragments.isEmpty { self.armPacketSweep() }
        }
    }

    // MARK: TCP

    private func openTCP(_ packet: UnsafeRawBufferPointer, _ s: PacketSummary, netif: Int, decided: RouteMatch? = nil) {
        let key = FlowKey(netif: netif, source: Endpoint(s.source, s.sourcePort),
                          destination: Endpoint(s.destination, s.destinationPort))
        if let existing = tcpFlows[key] {
            // A retransmitted SYN: held ones wait for the outbound; lwIP answers the others.
            if existing.state != .connecting {
                _ = clwip_input(Int32(netif), packet.baseAddress!.assumingMemoryBound(to: UInt8.self), packet.count,
                                Int32(s.destinationPort), -1, 0, 0)
            }
            return
        }
        let match = decided ?? router.route(FlowRequest(network: .tcp, source: key.source, destination: .ip(key.destination)))
        ruleUsage[match.rule, default: RuleUsage()].flows &+= 1
        switch match.decision {
        case .drop(let reset):
            drop(.rule, netif)
            if reset { send(PacketBuilder.resetForSYN(packet, summary: s), netif: netif) }
        case .outbound(let outbound):
            guard makeRoom() else {
                drop(.flowCap, netif)
                send(PacketBuilder.resetForSYN(packet, summary: s), netif: netif)
                return
            }
            let flow = TCPFlow(stack: self, key: key, syn: Array(packet), summary: s, now: loop.now)
            tcpFlows.insert(flow)
            flowActivity.append(flow)
            armFlowIdle()
            tableGrew()
            tally.tcpFlowsOpened &+= 1
            flow.outboundName = outbound.name
            flow.ruleIndex = match.rule
            flow.splice.dial(outbound, to: .ip(key.destination))
        }
    }

    /// Called by a flow when it is completely done.
    func remove(_ flow: TCPFlow) {
        guard tcpFlows.remove(flow) else { return }
        flowActivity.remove(flow)
        ruleUsage[flow.ruleIndex, default: RuleUsage()].add(up: flow.bytesUp, down: flow.bytesDown)
        tableShrank()
    }

    // MARK: giving memory back

    /// The most flows + associations since memory was last given back.
    private var tablePeak = 0
    private var trimTimer: TimerHandle?
    /// Tables at least this large, shrunk to half, give their memory back.
    static let trimThreshold = 1024

    /// After a flood the freed flows' memory stays with malloc: once the table has shrunk to
    /// half of a large peak, it is handed back to the system (malloc_trim) a second later, at
    /// most once a second and never per flow.
    private func tableShrank() {
        let n = tcpFlows.count + udpAssociations.count
        guard tablePeak >= Self.trimThreshold, n <= tablePeak / 2, trimTimer == nil else { return }
        trimTimer = loop.schedule(after: 1000) { [weak self] in
            guard let self else { return }
            self.trimTimer = nil
            self.tablePeak = self.tcpFlows.count + self.udpAssociations.count
            self.giveMemoryBack()
        }
    }

    /// Freed memory back to the system (malloc_trim), counted `memory-trims`.
    private func giveMemoryBack() {
        Syscall.trimHeap()
        tally.memoryTrims &+= 1
    }

    private func tableGrew() {
        let n = tcpFlows.count + udpAssociations.count
        if n > tablePeak { tablePeak = n }
    }

    // MARK: idle deadlines

    /// Idle TCP flows and UDP associations are closed from the oldest end of their activity
    /// lists: one timer per list on the loop's heap, armed for the oldest entry's deadline, so
    /// an idle flow costs no timer of its own. A timer that finds its oldest entry active again
    /// is re-armed for the new oldest's deadline (one wake per idle period, not per byte).
    private var flowIdleTimer: TimerHandle?
    private var associationIdleTimer: TimerHandle?

    private func armFlowIdle() {
        guard flowIdleTimer == nil, settings.tcpIdleTimeoutMs > 0, let oldest = flowActivity.oldest else { return }
        sweepFlows(at: oldest.lastActivity &+ settings.tcpIdleTimeoutMs)
    }

    private func sweepFlows(at t: UInt64) {
        flowIdleTimer = loop.schedule(at: t) { [weak self] in
            guard let self else { return }
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
            tally.idleClosed &+= 1
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
        associationIdleTimer = loop.schedule(at: oldest.lastActivity &+ limit) { [weak self] in
            guard let self else { return }
            self.associationIdleTimer = nil
            let now = self.loop.now
            while let a = self.associationActivity.oldest, now &- a.lastActivity >= limit {
                self.tally.idleClosed &+= 1
                self.closeAssociation(a)
            }
            self.armAssociationIdle()
        }
    }

    /// Bytes moved on `f` (a live flow): it becomes the newest.
    func touch(_ f: TCPFlow) {
        flowActivity.touch(f)
        if calmTimer == nil { armCalmCheck() }
    }

    /// The TCP bytes moved (both ways) when memory was last given back after a burst.
    private var trimmedAtBytes: UInt64 = 0
    private var calmTimer: TimerHandle?
    /// A burst of at least this many bytes, followed by `calmMs` with less than `calmBytes`
    /// moved, gives the heap back (malloc_trim): transfers keep up to `heapKept` of freed
    /// memory with malloc (no brk shrink and regrow per segment), and a calm stack does not.
    static let burstBytes: UInt64 = 16 << 20
    static let calmMs: UInt64 = 5_000
    static let calmBytes: UInt64 = 64 << 10
    /// What malloc keeps of freed memory at the top of the heap (`Syscall.keepFreedMemory`,
    /// set at start-up): enough for several flows' 512 KiB windows of 64 KiB segments.
    public static let heapKept = 16 << 20

    /// While bytes move: a check every `calmMs`, which stops once a calm period has come
    /// (trimming first if a burst came before it); the next bytes moved arm it again.
    private func armCalmCheck() {
        let mark = meter.bytesUp &+ meter.bytesDown
        calmTimer = loop.schedule(after: Self.calmMs) { [weak self] in
            guard let self else { return }
            self.calmTimer = nil
            let moved = self.meter.bytesUp &+ self.meter.bytesDown
            guard moved &- mark < Self.calmBytes else {
                self.armCalmCheck()
                return
            }
            if moved &- self.trimmedAtBytes >= Self.burstBytes {
                self.trimmedAtBytes = moved
                self.giveMemoryBack()
            }
        }
    }

    public struct RuleUsage: Sendable {
        public var flows: UInt64 = 0
        public var bytesUp: UInt64 = 0
        public var bytesDown: UInt64 = 0
        mutating func add(up: UInt64, down: UInt64) { bytesUp &+= up; bytesDown &+= down }
    }

    /// Per rule index (-1: the default): flows it decided and bytes of finished ones.
    var ruleUsage: [Int: RuleUsage] = [:]

    /// Flows and bytes per rule index (-1: the default), live flows included. Indices refer
    /// to the rules in force when each flow started.
    public func ruleUsageSnapshot() -> [Int: RuleUsage] {
        var u = ruleUsage
        for f in tcpFlows { u[f.ruleIndex, default: RuleUsage()].add(up: f.bytesUp, down: f.bytesDown) }
        for a in udpAssociations { u[a.ruleIndex, default: RuleUsage()].add(up: a.bytesUp, down: a.bytesDown) }
        return u
    }

    /// The rules were replaced: forgets per-rule accounting, and the routes of UDP
    /// conversations, so their next datagram is routed by the new rules.
    public func resetRuleUsage() {
        ruleUsage = [:]
        for a in udpAssociations { a.conversations = [] }
        udpConversations = [:]
    }

    /// Live TCP flows by state.
    public func tcpStateCounts() -> [(String, Int)] {
        var connecting = 0, handshaking = 0, open = 0, closing = 0
        for f in tcpFlows {
            switch f.state {
            case .connecting: connecting += 1
            case .handshaking: handshaking += 1
            case .open: if f.isHalfClosed { closing += 1 } else { open += 1 }
            case .closed: closing += 1
            }
        }
        return [("connecting", connecting), ("handshaking", handshaking), ("established", open), ("closing", closing)]
    }

    /// After each batch of events: the lwIP ends' events (bytes from apps, room from ACKs),
    /// then one tcp_output per flow that was written to.
    public func afterEvents() {
        defer { tally.timeWaitReaped &+= UInt64(clwip_reap_timewait()) }
        // Each list is swapped with a spare before it runs: ends queued meanwhile run in the
        // next round, and no array storage is reallocated.
        if !acceptedFlows.isEmpty {
            swap(&acceptedFlows, &spareFlows)
            for f in spareFlows { f.attach() }
            spareFlows.removeAll(keepingCapacity: true)
        }
        while !readableStreams.isEmpty || !writableStreams.isEmpty || !outputStreams.isEmpty {
            if !readableStreams.isEmpty {
                swap(&readableStreams, &spareStreams)
                for s in spareStreams { s.deliverReadable() }
                spareStreams.removeAll(keepingCapacity: true)
            }
            if !writableStreams.isEmpty {
                swap(&writableStreams, &spareStreams)
                for s in spareStreams { s.deliverWritable() }
                spareStreams.removeAll(keepingCapacity: true)
            }
            if !outputStreams.isEmpty {
                swap(&outputStreams, &spareStreams)
                for s in spareStreams { s.flushOutput() }
                spareStreams.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Keeps the table under the cap by evicting the least recently active flow or
    /// association, whichever is older. False if nothing could go.
    private func makeRoom() -> Bool {
        if tcpFlows.count + udpAssociations.count < settings.maxFlows { return true }
        let t = flowActivity.oldest
        let u = associationActivity.oldest
        if let u, t == nil || u.lastActivity < t!.lastActivity {
            tally.flowsEvicted &+= 1
            closeAssociation(u)
            return true
        }
        if let t {
            tally.flowsEvicted &+= 1
            Log.debug("flow.evicted", ["src": t.key.source, "dst": t.key.destination])
            t.abort()
            return true
        }
        return false
    }

    // MARK: UDP

    func udpReceived(netif: Int, source: Endpoint, destination: Endpoint, pbuf: OpaquePointer) {
        let len = Int(clwip_pbuf_total(pbuf))
        _ = clwip_pbuf_copy(pbuf, scratch.baseAddress, UInt16(len))
        clwip_pbuf_free(pbuf)
        let conversation = UDPConversation(netif: netif, source: source, destination: destination)
        let assoc: UDPAssociation
        if let known = udpConversations[conversation] {
            assoc = known
        } else {
            let match = router.route(FlowRequest(network: .udp, source: source, destination: .ip(destination)))
            guard case .outbound(let outbound) = match.decision else {
                drop(.rule, netif)
                return
            }
            let key = UDPKey(netif: netif, source: source, outbound: ObjectIdentifier(outbound))
            if let existing = udpAssociations[key] {
                assoc = existing
            } else {
                guard makeRoom() else { drop(.flowCap, netif); return }
                let a = UDPAssociation(stack: self, key: key, now: loop.now)
                guard let outboundSide = outbound.openAssociation(events: a) else {
                    drop(.rule, netif)
                    return
                }
                a.outboundSide = outboundSide
                a.outboundName = outbound.name
                a.ruleIndex = match.rule
                ruleUsage[match.rule, default: RuleUsage()].flows &+= 1
                udpAssociations.insert(a)
                associationActivity.append(a)
                armAssociationIdle()
                tableGrew()
                tally.udpAssociationsOpened &+= 1
                assoc = a
            }
            udpConversations[conversation] = assoc
            assoc.conversations.append(conversation)
        }
        assoc.lastDestination = destination
        touch(assoc)
        tally.udpDatagramsUp &+= 1
        assoc.bytesUp &+= UInt64(len)
        assoc.outboundSide?.send(UnsafeRawBufferPointer(rebasing: scratch[0..<len]), to: .ip(destination))
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
    private var icmpLimit = TokenBucket(perSecond: 1000, burst: 50)

    func closeAssociation(_ a: UDPAssociation) {
        guard udpAssociations.remove(a) else { return }
        ruleUsage[a.ruleIndex, default: RuleUsage()].add(up: a.bytesUp, down: a.bytesDown)
        for c in a.conversations where udpConversations[c] === a { udpConversations[c] = nil }
        a.conversations = []
        associationActivity.remove(a)
        a.close()
        tableShrank()
    }

    /// A datagram either way on `a`: it becomes the newest.
    func touch(_ a: UDPAssociation) {
        a.lastActivity = loop.now
        if a.outboundSide != nil { associationActivity.touch(a) }
    }

    /// Live flows for status: (network, source, destination, outbound, bytes up, bytes down,
    /// age ms). A UDP association shows the destination of its app's latest datagram.
    public func flowSnapshot() -> [(FlowNetwork, Endpoint, Endpoint, String, UInt64, UInt64, UInt64)] {
        let now = loop.now
        var out: [(FlowNetwork, Endpoint, Endpoint, String, UInt64, UInt64, UInt64)] = []
        for f in tcpFlows { out.append((.tcp, f.key.source, f.key.destination, f.outboundName, f.bytesUp, f.bytesDown, now - f.createdAt)) }
        for a in udpAssociations { out.append((.udp, a.key.source, a.lastDestination, a.outboundName, a.bytesUp, a.bytesDown, now - a.createdAt)) }
        return out
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
final class PacketFlow {
    let outbound: PacketOutbound
    let rule: Int
    var lastSeen: UInt64
    var closing = false
    var bytesUp: UInt64 = 0
    init(outbound: PacketOutbound, rule: Int, now: UInt64) { self.outbound = outbound; self.rule = rule; lastSeen = now }
}

struct UDPKey: Hashable {
    var netif: Int
    var source: Endpoint
    var outbound: ObjectIdentifier
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
    var outboundSide: DatagramAssociation?
    var outboundName = ""
    var ruleIndex = -1
    var lastActivity: UInt64
    let createdAt: UInt64
    var bytesUp: UInt64 = 0
    var bytesDown: UInt64 = 0
    /// The destination of the app's latest datagram (for status).
    var lastDestination: Endpoint
    /// The conversations routed to this association (forgotten with it).
    var conversations: [UDPConversation] = []
    /// Neighbours in the netstack's activity list.
    unowned(unsafe) var older: UDPAssociation?
    unowned(unsafe) var newer: UDPAssociation?

    init(stack: Netstack, key: UDPKey, now: UInt64) {
        self.stack = stack
        self.key = key
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
        stack.touch(self)
        bytesDown &+= UInt64(payload.count)
        stack.tally.udpDatagramsDown &+= 1
        var from = clwip_endpoint(remote)
        var to = clwip_endpoint(key.source)
        if clwip_udp_send(Int32(key.netif), &from, &to, payload.baseAddress, UInt16(payload.count)) != 0 {
            stack.drop(.stackMemory, key.netif)
        }
    }
}

// MARK: - C callbacks

// lwIP is one global instance; its callbacks find the stack through this (loop thread only).
// It does not own the stack: set by init, cleared by shutdown() or deinit.
nonisolated(unsafe) unowned(unsafe) var activeNetstack: Netstack?

extension clwip_endpoint {
    init(_ e: Endpoint) {
        self.init()
        port = e.port
        is_v6 = e.address.isIPv4 ? 0 : 1
        withUnsafeMutableBytes(of: &ip) { _ = e.address.write(to: $0.baseAddress!) }
    }

    var endpoint: Endpoint {
        var copy = ip
        let addr = withUnsafeBytes(of: &copy) { is_v6 != 0 ? IPAddress(ipv6Bytes: $0) : IPAddress(ipv4Bytes: $0) }
        return Endpoint(addr, port)
    }
}

private let lwipOutput: @convention(c) (Int32, UnsafePointer<UInt8>?, Int) -> Void = { netif, data, len in
    activeNetstack?.emit(UnsafeRawBufferPointer(start: data, count: len), netif: Int(netif))
}

private let lwipAccepted: @convention(c) (OpaquePointer?, Int32, UnsafePointer<clwip_endpoint>?, UnsafePointer<clwip_endpoint>?) -> UInt = { pcb, netif, src, dst in
    guard let stack = activeNetstack, let pcb, let src, let dst else { return 0 }
    let key = FlowKey(netif: Int(netif), source: src.pointee.endpoint, destination: dst.pointee.endpoint)
    guard let flow = stack.tcpFlows[key], flow.state == .handshaking else { return 0 }
    flow.accepted(pcb)
    return UInt(bitPattern: Unmanaged.passUnretained(flow as LwipStream).toOpaque())
}

// The token is the flow's LwipStream, alive while its pcb has callbacks (close and abort
// detach them first).
@inline(__always)
private func stream(_ token: UInt) -> LwipStream {
    Unmanaged<LwipStream>.fromOpaque(UnsafeRawPointer(bitPattern: token)!).takeUnretainedValue()
}

private let lwipReceived: @convention(c) (UInt, OpaquePointer?) -> Void = { token, p in
    stream(token).received(p)
}

private let lwipSent: @convention(c) (UInt, UInt16) -> Void = { token, _ in
    stream(token).sent()
}

private let lwipError: @convention(c) (UInt, Int32) -> Void = { token, err in
    // The failure can end the flow that holds the stream: keep it alive for the call.
    let s = stream(token)
    withExtendedLifetime(s) { s.lwipFailed(err) }
}

private let lwipConnected: @convention(c) (UInt) -> Void = { token in
    stream(token).connected()
}

private let lwipLinkUDP: @convention(c) (UInt, UnsafePointer<clwip_endpoint>?, OpaquePointer?) -> Void = { token, src, p in
    guard let p else { return }
    guard let src else { clwip_pbuf_free(p); return }
    let a = Unmanaged<LinkAssociation>.fromOpaque(UnsafeRawPointer(bitPattern: token)!).takeUnretainedValue()
    withExtendedLifetime(a) { a.received(from: src.pointee.endpoint, p) }
}

private let lwipUDP: @convention(c) (Int32, UnsafePointer<clwip_endpoint>?, UnsafePointer<clwip_endpoint>?, OpaquePointer?) -> Void = { netif, src, dst, p in
    guard let p else { return }
    guard let stack = activeNetstack, let src, let dst else { clwip_pbuf_free(p); return }
    stack.udpReceived(netif: Int(netif), source: src.pointee.endpoint, destination: dst.pointee.endpoint, pbuf: p)
}
