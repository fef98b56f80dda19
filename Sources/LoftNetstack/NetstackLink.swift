import CLwIP
import LoftCore
import LoftIO

/// One connection opened over a link: its local port and the server's endpoint (the link's
/// address is the same for all of them).
struct LinkKey: Hashable {
    var localPort: UInt16
    var remote: Endpoint
}

/// TCP connections lwIP opens itself (active open, `clwip_tcp_connect`) over a packet
/// outbound's link, for the streams routed to that outbound (SOCKS5 CONNECT, the bridge's TCP):
/// the link's own lwIP netif, whose output is the outbound's `sendPacket`, and whose input is
/// the link's packets that belong to one of these connections (`takePacket`; the rest are the
/// TUN's packet flows). Each connection's end is an `LwipStream`, spliced like any other.
///
/// Local ports come from `ports` (above Linux's default ephemeral range, 32768–60999, which the
/// TUN's apps use for the same address), round robin, skipping a port lwIP still has in use and
/// any 4-tuple the TUN's packet flows have (one dictionary lookup each).
public final class NetstackLink: PacketLinkStack, PacketWriter {
    unowned let stack: Netstack
    weak var outbound: PacketOutbound?
    var netif = -1
    public static let ports: ClosedRange<UInt16> = 61000...65535

    private struct Entry {
        /// nil once the stream has let go of its pcb (closed): lwIP may still be finishing the
        /// FIN exchange, so the server's segments keep going to lwIP until `closedAt` is old.
        weak var stream: LinkStream?
        var closedAt: UInt64?
    }
    private var entries: [LinkKey: Entry] = [:]
    /// UDP associations by local port.
    private var associations: [UInt16: Weak] = [:]
    private struct Weak { weak var a: LinkAssociation? }
    /// Where a datagram from lwIP is copied for its association (one loop thread).
    private var scratchStorage: UnsafeMutableRawBufferPointer?
    var scratch: UnsafeMutableRawBufferPointer {
        if let s = scratchStorage { return s }
        let s = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
        scratchStorage = s
        return s
    }
    private var live = 0
    var nextPort: UInt16
    private var sweep: TimerHandle?
    /// Closed connections are forgotten this long after (lwIP's FIN_WAIT timeout is 20 s).
    static let lingerMs: UInt64 = 60_000

    init(stack: Netstack, outbound: PacketOutbound) {
        self.stack = stack
        self.outbound = outbound
        nextPort = UInt16.random(in: Self.ports)
    }

    public var connectionCount: Int { live + associations.count }

    deinit { scratchStorage?.deallocate() }

    public func setMTU(_ mtu: Int) { stack.setMTU(mtu, input: netif) }

    // MARK: PacketWriter (lwIP's output for the link)

    public func writePacket(_ packet: UnsafeRawBufferPointer, segmentSize: Int) {
        if outbound?.sendPacket(packet) != true { stack.drop(.linkDown, netif) }
    }

    // MARK: PacketLinkStack

    public func openStream(from address: IPAddress, to destination: Endpoint, events: ByteStreamEvents) -> ByteStream? {
        guard address.isIPv4, destination.address.isIPv4, netif >= 0, !stack.isShutDown else { return nil }
        let s = LinkStream(batch: stack.batch, pcb: nil)
        s.events = events
        let token = UInt(bitPattern: Unmanaged.passUnretained(s).toOpaque())
        var to = clwip_endpoint(destination)
        for _ in 0..<Self.ports.count {
            let port = nextPort
            nextPort = port == Self.ports.upperBound ? Self.ports.lowerBound : port + 1
            let key = LinkKey(localPort: port, remote: destination)
            guard entries[key] == nil, !stack.hasPacketFlow(from: Endpoint(address, port), to: destination) else { continue }
            var from = clwip_endpoint(Endpoint(address, port))
            var err: Int32 = 0
            // Register first: the SYN leaves inside the call.
            s.link = self
            s.linkKey = key
            s.connecting = true
            entries[key] = Entry(stream: s)
            live += 1
            guard let pcb = clwip_tcp_connect(stack.lwip, Int32(netif), &from, &to, token, &err) else {
                entries[key] = nil
                live -= 1
                s.link = nil
                s.connecting = false
                if err == -8 /* ERR_USE */ { continue }
                return nil
            }
            s.pcb = pcb
            stack.tally.linkConnectionsOpened &+= 1
            return s
        }
        return nil
    }

    public func openAssociation(from address: IPAddress, events: DatagramEvents) -> DatagramAssociation? {
        guard address.isIPv4, netif >= 0 else { return nil }
        let a = LinkAssociation(link: self)
        a.events = events
        let token = UInt(bitPattern: Unmanaged.passUnretained(a).toOpaque())
        for _ in 0..<Self.ports.count {
            let port = nextPort
            nextPort = port == Self.ports.upperBound ? Self.ports.lowerBound : port + 1
            // A port a TUN app's UDP packet flow uses from the same address is skipped: the
            // association is full cone, so it would take that flow's replies.
            guard associations[port] == nil, !stack.hasUDPPacketFlow(fromPort: port) else { continue }
            var from = clwip_endpoint(Endpoint(address, port))
            var err: Int32 = 0
            guard let pcb = clwip_udp_open(stack.lwip, Int32(netif), &from, token, &err) else {
                if err == -8 /* ERR_USE */ { continue }
                return nil
            }
            a.pcb = pcb
            a.port = port
            associations[port] = Weak(a: a)
            return a
        }
        return nil
    }

    func releasedUDP(_ port: UInt16) { associations[port] = nil }

    public func takePacket(_ p: UnsafeRawBufferPointer) -> Bool {
        if !associations.isEmpty, p.count >= 28, p[0] >> 4 == 4, p[9] == IPProtocol.udp {
            // A TUN app that took the same port later (its own UDP packet flow to this remote)
            // keeps its replies: the association gives up that remote.
            guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535), !s.isLaterFragment,
                  associations[s.destinationPort] != nil,
                  !stack.hasUDPPacketFlow(from: Endpoint(s.destination, s.destinationPort), to: Endpoint(s.source, s.sourcePort))
            else { return false }
            stack.linkInput(p, netif: netif, tcpOffset: 0)
            return true
        }
        guard !entries.isEmpty, p.count >= 40, p[0] >> 4 == 4, p[9] == IPProtocol.tcp else { return false }
        // The TUN's parser (fuzzed in `packet`); a malformed packet is left to the TUN's path,
        // which drops it the same way. A later fragment has no ports: never one of these (lwIP
        // sends within the link's MTU and the server's MSS).
        guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535), !s.isLaterFragment,
              Self.ports.contains(s.destinationPort),
              entries[LinkKey(localPort: s.destinationPort, remote: Endpoint(s.source, s.sourcePort))] != nil
        else { return false }
        stack.linkInput(p, netif: netif, tcpOffset: s.transportOffset)
        return true
    }

    public func linkDown() {
        let assocs = associations.values.compactMap(\.a)
        associations.removeAll()
        for a in assocs { a.close() }
        let streams = entries.values.compactMap { $0.closedAt == nil ? $0.stream : nil }
        entries.removeAll()
        live = 0
        for s in streams {
            s.link = nil
            s.linkLost(.networkUnreachable)
        }
    }

    /// From the stream: its pcb is gone (reset, failed: forget the connection now) or handed
    /// to lwIP to close (keep feeding it for a while).
    func released(_ key: LinkKey, pcbGone: Bool) {
        guard var e = entries[key] else { return }
        if e.closedAt == nil { live -= 1 }
        if pcbGone {
            entries[key] = nil
            return
        }
        e.closedAt = stack.loop.now
        e.stream = nil
        entries[key] = e
        armSweep()
    }

    private func armSweep() {
        guard sweep == nil else { return }
        sweep = stack.loop.schedule(after: Self.lingerMs) { [weak self] in
            guard let self else { return }
            self.sweep = nil
            let now = self.stack.loop.now
            self.entries = self.entries.filter { _, e in e.closedAt.map { now &- $0 < Self.lingerMs } ?? true }
            if self.entries.values.contains(where: { $0.closedAt != nil }) { self.armSweep() }
        }
    }
}

/// A UDP association over a link (SOCKS5 UDP ASSOCIATE, the bridge's UDP routed to sstp): an
/// lwIP udp pcb bound to the link's address and a port, on the link's netif.
final class LinkAssociation: DatagramAssociation {
    weak var events: DatagramEvents?
    weak var link: NetstackLink?
    var pcb: OpaquePointer?
    var port: UInt16 = 0

    init(link: NetstackLink) { self.link = link }
    deinit { close() }

    func send(_ payload: UnsafeRawBufferPointer, to destination: Destination) -> Bool {
        guard let pcb, case .ip(let e) = destination, e.address.isIPv4, payload.count <= 65507 else { return false }
        var to = clwip_endpoint(e)
        return clwip_udp_sendto(pcb, &to, payload.baseAddress, UInt16(payload.count)) == 0
    }

    func close() {
        guard let pcb else { return }
        self.pcb = nil
        clwip_udp_close(pcb)
        link?.releasedUDP(port)
    }

    /// From lwIP: a datagram for this pcb (the pbuf is freed here).
    func received(from remote: Endpoint, _ p: OpaquePointer) {
        guard let link, pcb != nil else { clwip_pbuf_free(p); return }
        let n = Int(clwip_pbuf_total(p))
        _ = clwip_pbuf_copy(p, link.scratch.baseAddress, UInt16(n))
        clwip_pbuf_free(p)
        events?.datagramReceived(UnsafeRawBufferPointer(rebasing: link.scratch[0..<n]), from: remote)
    }
}

extension Netstack {
    /// Gives a packet outbound (sstp) its own lwIP netif for the TCP connections loft opens over
    /// its link (`NetstackLink`); nil when lwIP's netif table is full (the outbound then keeps
    /// refusing streams).
    public func addLink(for outbound: PacketOutbound, mtu: Int) -> NetstackLink? {
        let idx = Int(clwip_netif_add(lwip, UInt16(clamping: mtu)))
        guard idx >= 0 else { return nil }
        precondition(idx == inputs.count, "lwIP netif table out of step")
        let link = NetstackLink(stack: self, outbound: outbound)
        var input = Input(writer: link, mtu: mtu, verifyChecksums: false, offload: false)
        input.windowScale = clwip_netif_window_scale(lwip, Int32(idx))
        inputs.append(input)
        inputCounters.append(InputCounters())
        link.netif = idx
        return link
    }

    /// Whether some UDP packet flow of the TUN's is from this port (any address: the TUN's
    /// apps have the link's address once it is up).
    func hasUDPPacketFlow(fromPort port: UInt16) -> Bool { packets.hasUDPSourcePort(port) }

    /// Whether the TUN's packet flows have this UDP 2-tuple pair (from the app's side).
    func hasUDPPacketFlow(from source: Endpoint, to destination: Endpoint) -> Bool {
        guard let tun = packetModeInput, packets.hasUDPSourcePort(source.port) else { return false }
        return packets.flow(PacketFlowKey(netif: tun, proto: IPProtocol.udp, source: source, destination: destination)) != nil
    }

    /// Whether the TUN's packet flows have this 4-tuple (TCP, from the app's side).
    func hasPacketFlow(from source: Endpoint, to destination: Endpoint) -> Bool {
        guard let tun = packetModeInput else { return false }
        return packets.flow(PacketFlowKey(netif: tun, proto: IPProtocol.tcp, source: source, destination: destination)) != nil
    }

    /// A segment from the link for one of its connections: straight to lwIP (never routed).
    func linkInput(_ packet: UnsafeRawBufferPointer, netif: Int, tcpOffset: Int) {
        tally.packetsIn &+= 1
        tally.bytesIn &+= UInt64(packet.count)
        inputCounters[netif].packetsIn &+= 1
        inputCounters[netif].bytesIn &+= UInt64(packet.count)
        let verdict = clwip_input(lwip, Int32(netif), packet.baseAddress!.assumingMemoryBound(to: UInt8.self), packet.count,
                                  -1, -1, Int32(tcpOffset), -1)
        if verdict != 0 { drop(Netstack.dropReason(verdict), netif) }
    }
}

/// An active open over a link: an `LwipStream` that tells its link when it lets go of its pcb.
final class LinkStream: LwipStream {
    weak var link: NetstackLink?
    var linkKey: LinkKey?
    private weak var driver: ByteStreamEvents?
    override var events: ByteStreamEvents? {
        get { driver }
        set { driver = newValue }
    }

    deinit {
        // The pcb is aborted by LwipStream's deinit.
        if pcb != nil, let link, let linkKey { link.released(linkKey, pcbGone: true) }
    }

    override func pcbReleased(gone: Bool) {
        if let link, let linkKey { link.released(linkKey, pcbGone: gone) }
    }
}
