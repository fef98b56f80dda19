import CChecksum
import CLwIP
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
/// outbounds, packets back to the input each flow came from. This type is the lwIP glue and the
/// packets' way in and out; the flows are its `FlowTable`'s, packet mode its `PacketPath`'s.
/// Several may live in one process: each owns its own lwIP netifs (a `clwip_stack`), while lwIP
/// itself is one per process (docs/architecture.md), so all run on one event-loop thread.
public final class Netstack {
    public struct Settings: Sendable {
        public var icmpReply = true
        public var maxFlows = 16384
        public var connectTimeoutMs: UInt64 = 10_000
        public var tcpIdleTimeoutMs: UInt64 = 7_200_000
        public var udpIdleTimeoutMs: UInt64 = 60_000
        /// Names from TCP flows' first bytes (docs/sniffing.md).
        public var sniff = Sniffing()
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
        c.memoryTrims = trimmer.trims
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

    /// The TCP flows and UDP associations (tables, idle deadlines, eviction, rule usage).
    private(set) var flows: FlowTable!
    /// lwIP's events for after the batch of packets (never from inside lwIP's callbacks).
    let batch = StreamBatch()
    /// Flows routed to packet outbounds (the packet-mode input's).
    private(set) var packets: PacketPath!
    let trimmer: MemoryTrimmer
    /// Remote → app copy buffer (one loop thread).
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
    /// A sniffed flow's first bytes, copied to be parsed in one piece (one loop thread).
    let sniffScratch: UnsafeMutableRawBufferPointer
    /// A SYN-ACK whose MSS is raised on its way out (`announceLargeMSS`).
    let synAckScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 256, alignment: 16)
    /// The ICMP errors loft writes itself, rate-limited like a kernel's (`portUnreachable`).
    var icmpLimit = TokenBucket(perSecond: 1000, burst: 50)

    /// This stack's share of lwIP (its netifs); freed by `shutdown()` or deinit.
    let lwip: OpaquePointer

    public var tcpFlowCount: Int { flows.tcp.count }
    public var udpAssociationCount: Int { flows.udp.count }

    /// Creates a stack with no inputs yet. Other stacks may be live in the process (on the same
    /// loop thread: lwIP is not thread-safe).
    public init(loop: EventLoop, router: FlowRouter, settings: Settings) {
        self.loop = loop
        self.router = router
        self.settings = settings
        trimmer = MemoryTrimmer(loop: loop, meter: meter)
        sniffScratch = .allocate(byteCount: settings.sniff.enabled ? settings.sniff.maxBytes : 0, alignment: 16)
        dnsNames = settings.sniff.enabled ? DNSNames() : nil
        var cb = Netstack.lwipCallbacks
        guard let lwip = clwip_stack_new(&cb, nil) else { fatalError("out of memory for an lwIP stack") }
        self.lwip = lwip
        flows = FlowTable(stack: self, loop: loop, settings: settings, trimmer: trimmer)
        packets = PacketPath(stack: self, loop: loop, settings: settings)
        trimmer.tableCount = { [unowned(unsafe) self] in self.flows.count }
        // lwIP's callbacks for this stack's netifs find it through this (it does not own it:
        // the stack frees its lwIP part before it goes).
        clwip_stack_set_context(lwip, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Set once `shutdown()` (or deinit) has released lwIP.
    public internal(set) var isShutDown = false

    deinit {
        if !isShutDown { releaseInDeinit() }
        scratch.deallocate()
        sniffScratch.deallocate()
        synAckScratch.deallocate()
    }

    /// The input's MTU changed (a holder's STATUS set a new one on the TUN).
    public func setMTU(_ mtu: Int, input: Int) {
        guard inputs.indices.contains(input), !isShutDown else { return }
        inputs[input].mtu = mtu
        clwip_netif_set_mtu(lwip, Int32(input), UInt16(clamping: inputs[input].packetLimit))
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
        let idx = Int(clwip_netif_add(lwip, UInt16(clamping: input.packetLimit)))
        precondition(idx == inputs.count, "lwIP netif table full")
        if receiveWindow > 0 { clwip_netif_set_recv_window(lwip, Int32(idx), UInt32(clamping: receiveWindow)) }
        input.windowScale = clwip_netif_window_scale(lwip, Int32(idx))
        inputs.append(input)
        inputCounters.append(InputCounters())
        return idx
    }

    /// Runs lwIP's timers; returns ms until the next is due.
    public func runTimers() -> UInt32 { clwip_check_timeouts() }

    func drop(_ r: PacketDropReason, _ netif: Int) {
        tally.drops[r.rawValue] &+= 1
        inputCounters[netif].drops[r.rawValue] &+= 1
        if let tap = dropTap, let p = packetInHand { tap(p, r, netif) }
    }

    /// For inputs that drop before the stack sees a packet (an oversize datagram, say): the
    /// packet, when there is one, goes to `dropTap` too.
    public func countDrop(_ r: PacketDropReason, input: Int, packet: UnsafeRawBufferPointer? = nil) {
        guard let packet, dropTap != nil else { return drop(r, input) }
        packetInHand = packet
        drop(r, input)
        packetInHand = nil
    }

    /// Told of every packet dropped while an input hands it in (its bytes, why, the input):
    /// `loft capture --drops`. Nil (no cost beyond one check per drop) while nobody asks.
    public var dropTap: ((UnsafeRawBufferPointer, PacketDropReason, Int) -> Void)?
    /// The packet `input` is taking, while `dropTap` is set.
    private var packetInHand: UnsafeRawBufferPointer?

    /// Per input (index from addInput): packets and drops by reason.
    public internal(set) var inputCounters: [InputCounters] = []

    /// Where an input reads its next packet before `input` (the largest IP packet fits; nil
    /// when lwIP has no memory): a large TCP segment read there goes to lwIP without a copy.
    /// Valid until the next `input` of a packet in it.
    public func receiveBuffer() -> UnsafeMutableRawBufferPointer? {
        guard !isShutDown else { return nil }
        return clwip_rx_buffer(lwip).map { UnsafeMutableRawBufferPointer(start: $0, count: Int(CLWIP_RX_BUFFER_SIZE)) }
    }

    /// The hot path: one packet from an input. `partialChecksum`: a TCP segment with payload,
    /// not a SYN, whose checksum field holds only the pseudo-header's sum (the TUN's offload
    /// header said NEEDS_CSUM at its TCP checksum: a local app's segment, never on a wire);
    /// lwIP then takes it without summing it. Never on the packet-mode input (its packets may
    /// be forwarded as they are).
    public func input(_ packet: UnsafeRawBufferPointer, from netif: Int, partialChecksum: Bool = false) {
        guard dropTap != nil else { return take(packet, from: netif, partialChecksum: partialChecksum) }
        packetInHand = packet
        take(packet, from: netif, partialChecksum: partialChecksum)
        packetInHand = nil
    }

    private func take(_ packet: UnsafeRawBufferPointer, from netif: Int, partialChecksum: Bool) {
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
        // A fake-IP pool address is never forwarded as a packet: lwIP terminates its flow,
        // which is dialled by name (FakeIP.swift).
        if netif == packetModeInput && !(fakeIP?.covers(summary.destination) ?? false) {
            switch packets.route(packet, summary, netif: netif) {
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
        if summary.isEchoRequest && !echoAllowed(summary, netif: netif) { return }
        let transport = !summary.isLaterFragment
        let udpPort = summary.proto == IPProtocol.udp && transport ? Int32(summary.destinationPort) : -1
        let tcpOffset = summary.proto == IPProtocol.tcp && transport ? Int32(summary.transportOffset) : 0
        let answer = partialChecksum && tcpOffset > 0 ? Int32(Netstack.checksumAnswer(packet, tcpOffset: Int(tcpOffset))) : -1
        let verdict = clwip_input(lwip, Int32(netif), packet.baseAddress!.assumingMemoryBound(to: UInt8.self), packet.count,
                                  -1, udpPort, tcpOffset, answer)
        if verdict != 0 {
            drop(Netstack.dropReason(verdict), netif)
            return
        }
        if tcpOffset > 0 && summary.tcpFlags & PacketSummary.tcpRST != 0 { appReset(packet, summary, netif: netif) }
    }

    /// Why clwip_input did not give a packet to lwIP (the segment checks, segment_check.c).
    static func dropReason(_ verdict: Int32) -> PacketDropReason {
        switch verdict {
        case Int32(CLWIP_SEGMENT_BAD_ACK): return .tcpBadAck
        case Int32(CLWIP_SEGMENT_OUT_OF_WINDOW): return .tcpOutOfWindow
        case Int32(CLWIP_SEGMENT_OOSEQ_FULL): return .tcpReorderCap
        default: return .stackMemory
        }
    }

    /// The sum lwIP's TCP verification must get for a segment whose checksum field holds only
    /// the pseudo-header's sum (`input`'s `partialChecksum`), so that it verifies without its
    /// payload being summed: the one's complement of the pseudo-header's sum as lwIP adds it
    /// (addresses as 16-bit words in memory order, then the protocol and the TCP length in
    /// network order), so that the total folds to 0xFFFF.
    @inline(__always)
    static func checksumAnswer(_ packet: UnsafeRawBufferPointer, tcpOffset: Int) -> UInt16 {
        let v6 = packet[0] >> 4 == 6
        var acc = UInt32(loft_checksum_sum(packet.baseAddress! + (v6 ? 8 : 12), v6 ? 32 : 8))
        acc &+= UInt32(UInt16(IPProtocol.tcp).bigEndian)
        acc &+= UInt32(UInt16(truncatingIfNeeded: packet.count - tcpOffset).bigEndian)
        acc = (acc & 0xFFFF) &+ (acc >> 16)
        acc = (acc & 0xFFFF) &+ (acc >> 16)
        return ~UInt16(truncatingIfNeeded: acc)
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
        guard let flow = flows.tcp[key] else { return fits }
        return min(Int(flow.appMSS), fits)
    }

    /// Fake-IP DNS (FakeIP.swift; docs/fakeip.md); nil: off (no cost beyond one check per
    /// new flow and per datagram).
    public var fakeIP: FakeIP?
    /// Names from DNS answers that passed through loft (with sniffing on; DNSNames.swift).
    let dnsNames: DNSNames?
    /// Addresses learned from DNS answers so far.
    public var dnsNamesLearned: UInt64 { dnsNames?.learned ?? 0 }

    /// The input (the TUN) whose flows may be routed to a `PacketOutbound`; set only when some
    /// outbound is one. Only that input's packets look at the packet-flow table first (no cost
    /// otherwise): a packet outbound's replies go back to that input alone, and its address is
    /// the one the link gave. Other inputs' flows routed to it reach it through lwIP as streams
    /// (TCP it opens again over the link, `NetstackLink`; UDP it refuses).
    public var packetModeInput: Int?
    public var packetFlowCount: Int { packets.count }

    /// What malloc keeps of freed memory at the top of the heap (`Syscall.keepFreedMemory`,
    /// set at start-up): enough for several flows' 512 KiB windows of 64 KiB segments.
    public static let heapKept = 16 << 20

    // MARK: status

    public struct RuleUsage: Sendable {
        public var flows: UInt64 = 0
        public var bytesUp: UInt64 = 0
        public var bytesDown: UInt64 = 0
        mutating func add(up: UInt64, down: UInt64) { bytesUp &+= up; bytesDown &+= down }
    }

    /// Flows and bytes per rule index (-1: the default), live flows included. Indices refer
    /// to the rules in force when each flow started.
    public func ruleUsageSnapshot() -> [Int: RuleUsage] { flows.ruleUsageSnapshot() }

    /// The rules were replaced: forgets per-rule accounting, and the routes of UDP
    /// conversations, so their next datagram is routed by the new rules.
    public func resetRuleUsage() { flows.resetRuleUsage() }

    /// Live TCP flows by state.
    public func tcpStateCounts() -> [(String, Int)] { flows.tcpStateCounts() }

    /// Live flows for status: (network, source, destination, outbound, bytes up, bytes down,
    /// age ms). A UDP association shows the destination of its app's latest datagram.
    /// One live flow or association, as `loft status --flows` shows it.
    public struct FlowRow {
        public var id: UInt64
        public var network: FlowNetwork
        public var source: Endpoint
        public var destination: Endpoint
        public var outbound: String
        public var bytesUp: UInt64
        public var bytesDown: UInt64
        public var ageMs: UInt64
        /// The name the flow was routed by (sniffed), and where it came from.
        public var name: String? = nil
        public var nameSource: String = "-"
    }

    public func flowSnapshot() -> [FlowRow] { flows.snapshot() }

    /// The flow a packet of input `netif` belongs to (its id and outbound), for captures.
    public func flowOf(_ packet: UnsafeRawBufferPointer, netif: Int, inbound: Bool) -> (id: UInt64, outbound: String)? {
        flows.owner(of: packet, netif: netif, inbound: inbound)
    }

    /// A flow or association with this id is live.
    public func hasFlow(id: UInt64) -> Bool { flows.contains(id: id) }

    /// After each batch of events: the lwIP ends' events (bytes from apps, room from ACKs),
    /// then one tcp_output per flow that was written to.
    public func afterEvents() {
        guard !isShutDown else { return }
        batch.run()
        tally.timeWaitReaped &+= UInt64(clwip_reap_timewait(lwip))
    }
}
