import Glibc
import LoftCapture
import LoftCore
import LoftIO
import LoftNetstack

/// The TUN device: created (inside `tun.netns` when set), addressed, routed, read into the
/// netstack, and removed again on exit together with everything loft created for it.
/// The device's MTU, link state, addresses and default routes are set over rtnetlink (at
/// start-up and for a holder's STATUS alike); only `ip netns add`/`del` run as processes.
public final class TunInput: IOHandler, PacketWriter {
    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    /// The device as it is to be made: the runtime form of the config's `tun` section.
    public struct Options: Sendable, Equatable {
        /// Interface name: 1...15 characters of `[A-Za-z0-9_.-]`.
        public var name: String
        /// Network namespace to create the TUN in (created if missing); nil: the current one.
        public var netns: String?
        public var mtu: Int
        /// The interface's addresses; nil for none.
        public var ipv4: IPPrefix?
        public var ipv6: IPPrefix?
        /// Default routes into the TUN; false: only the TUN's own subnets.
        public var routeAll: Bool
        /// Resolvers for the namespace's resolv.conf; empty: none is written.
        public var dns: [IPAddress]
        /// Ask the kernel for checksum and segmentation offloads (config `offload: auto`).
        public var offload: Bool

        public init(name: String, netns: String?, mtu: Int, ipv4: IPPrefix?, ipv6: IPPrefix?,
                    routeAll: Bool, dns: [IPAddress], offload: Bool) {
            self.name = name
            self.netns = netns
            self.mtu = mtu
            self.ipv4 = ipv4
            self.ipv6 = ipv6
            self.routeAll = routeAll
            self.dns = dns
            self.offload = offload
        }
    }

    let settings: Options
    let loop: EventLoop
    unowned(unsafe) let netstack: Netstack
    private var fd: Int32 = -1
    private var netif = 0
    /// rtnetlink inside the device's namespace, and the device's index there.
    private var rtnl: RouteNetlink?
    private var ifindex: Int32 = 0
    public var inputIndex: Int { netif }
    /// Live captures (`loft capture`): asked once per packet whether one runs.
    public var capture: CaptureHub?
    /// The device's name.
    public var name: String { settings.name }
    private var createdNetns = false
    /// Held from the first step of start-up until `stop` has undone everything.
    private var lock: InstanceLock?
    private var wroteResolvConf = false
    private var createdNetnsDir = false
    /// What is on the device now: the configured addresses until a holder's STATUS replaces them.
    public private(set) var currentIPv4: IPPrefix?
    private var currentIPv6: IPPrefix?
    public private(set) var currentMTU = 0
    private var currentDNS: [IPAddress] = []
    /// Where packets are read when lwIP has no memory for its receive buffer.
    private let buffer: UnsafeMutableRawBufferPointer
    /// The offload header of the packet read.
    private let vnetHeader = UnsafeMutableRawBufferPointer.allocate(byteCount: VirtioNetHeader.size, alignment: 16)
    /// What the kernel agreed to: with offload every packet read or written carries a
    /// VirtioNetHeader, TCP segments of up to 64 KiB pass whole and checksums may be partial.
    public private(set) var offload = OffloadState.off(reason: "config")
    /// A large segment's IP and TCP headers, copied so its checksum field can hold what the
    /// kernel expects without writing into lwIP's segment (which it may send again).
    private let segmentHeaders = UnsafeMutableRawBufferPointer.allocate(byteCount: VirtioNetHeader.size + 120, alignment: 16)
    private let plainHeader = UnsafeMutableRawBufferPointer.allocate(byteCount: VirtioNetHeader.size, alignment: 16)
    public private(set) var largeSegmentsWritten: UInt64 = 0
    public private(set) var largeSegmentsRead: UInt64 = 0
    /// UDP super-datagrams read (USO) and cut into the app's datagrams.
    public private(set) var largeDatagramsRead: UInt64 = 0
    /// Where a UDP super-datagram's pieces are built, one at a time.
    private let segmentScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_535, alignment: 16)
    public private(set) var writeDrops: UInt64 = 0
    public private(set) var packetsRead: UInt64 = 0
    public private(set) var packetsWritten: UInt64 = 0
    /// Bare ACKs not written because a later ACK of the same connection replaced them.
    public var acksCoalesced: UInt64 { acks.coalesced }
    /// Bare ACKs held back until the end of the batch of events, one per connection: an upload
    /// makes the stack ACK every second segment, and of one connection's ACKs in a batch only
    /// the last is needed. One write(2) saved per ACK replaced.
    private let acks = AckCoalescer { _ in }

    static let stateDir = "/run/loft"
    private var isUp = false

    /// Host mode only: the policy routes for the rules (nil in namespace mode).
    let hostRoutes: HostRoutes?

    public init(settings: Options, loop: EventLoop, netstack: Netstack, hostPlan: HostRoutes.Plan? = nil) {
        self.settings = settings
        self.hostRoutes = settings.netns == nil ? hostPlan.map(HostRoutes.init) : nil
        self.loop = loop
        self.netstack = netstack
        // Room for the largest IP packet (the largest MTU a STATUS may set later, a 64 KiB
        // segment), as in lwIP's receive buffer.
        buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_535, alignment: 16)
        plainHeader.initializeMemory(as: UInt8.self, repeating: 0)
        currentIPv4 = settings.ipv4
        currentIPv6 = settings.ipv6
        currentMTU = settings.mtu
        currentDNS = settings.dns
        // The input's own coalescer: it calls back only while the input lives.
        acks.emit = { [unowned(unsafe) self] in self.writeNow($0) }
    }

    deinit {
        buffer.deallocate()
        vnetHeader.deallocate()
        segmentScratch.deallocate()
        segmentHeaders.deallocate()
        plainHeader.deallocate()
    }

    var netnsPath: String? { settings.netns.map { "/var/run/netns/\($0)" } }
    var markerPath: String? { settings.netns.map { "\(Self.stateDir)/netns-\($0).created" } }

    /// Creates and configures the device. On failure everything done so far is undone.
    public func start() throws {
        // Before anything is touched: another loft serving the same namespace (or host-mode
        // TUN and its routes) keeps it, and this one stops here without undoing anything.
        lock = try settings.netns.map { try InstanceLock(key: "netns-\($0)", what: "tun.netns \"\($0)\"") }
            ?? InstanceLock(key: "tun-\(settings.name)", what: "tun \"\(settings.name)\" in the host namespace")
        do {
            try setUp()
        } catch {
            stop()
            throw error
        }
        // Above 1500, or with offload, segments grow past 1460: the app may then have the most
        // window scale 1 allows in flight (two 64 KiB segments), not lwIP's 64 KiB default.
        let large = settings.mtu > 1500 || offload.isOn
        netif = netstack.addInput(mtu: settings.mtu, writer: self,
                                  receiveWindow: large ? Netstack.maxWindow : 0, offload: offload.isOn)
        loop.register(fd, IOEvents.readable, self)
        // The coalescer, not the input, is held weakly: a weak reference gives its object a side
        // table, and every reference count operation on it (the input: one per loop turn with
        // packets) the slow kind.
        loop.addAfterEvents { [weak acks] in acks?.flush() }
        isUp = true
        Log.info("tun.up", ["name": settings.name, "netns": settings.netns ?? "-", "mtu": settings.mtu,
                            "ipv4": settings.ipv4?.description ?? "-", "ipv6": settings.ipv6?.description ?? "-",
                            "route-all": settings.routeAll, "offload": offload.description])
    }

    private func setUp() throws {
        var newNetns = false
        if let ns = settings.netns, let marker = markerPath {
            Syscall.makeDirectory(Self.stateDir, mode: 0o755)
            if !Syscall.exists("/var/run/netns/\(ns)") {
                try NetworkNamespace.add(ns)
                createdNetns = true
                newNetns = true
                _ = Syscall.touch(marker, mode: 0o644)
            } else if Syscall.exists(marker) {
                // Left by an earlier run of loft that did not exit cleanly: it is ours to remove.
                createdNetns = true
                Log.warn("tun.netns.adopted", ["netns": ns, "reason": "left by an earlier run"])
            }
        }
        fd = try openDevice()
        let nl = try RouteNetlink(netns: settings.netns)
        rtnl = nl
        if newNetns { try nl.setUp(index: try nl.index(of: "lo"), name: "lo") }
        let dev = settings.name
        ifindex = try nl.index(of: dev)
        try nl.setMTU(settings.mtu, index: ifindex, name: dev)
        if let v4 = settings.ipv4 { try nl.replaceAddress(v4, index: ifindex, name: dev) }
        if let v6 = settings.ipv6 { try nl.replaceAddress(v6, index: ifindex, name: dev) }
        try nl.setUp(index: ifindex, name: dev)
        if let hostRoutes {
            try hostRoutes.install()
        } else if settings.routeAll {
            if settings.ipv4 != nil { try nl.replaceDefaultRoute(ipv6: false, index: ifindex, name: dev) }
            if settings.ipv6 != nil { try nl.replaceDefaultRoute(ipv6: true, index: ifindex, name: dev) }
        }
        if !currentDNS.isEmpty { try publishDNS() }
    }

    /// Opens the device, with offloads when the config allows and the kernel agrees; when it
    /// does not, the device is opened again without them and the reason said once.
    private func openDevice() throws -> Int32 {
        func open(_ vnet: Bool) throws -> Int32 {
            switch Syscall.tunOpen(settings.name, netnsPath: netnsPath, vnetHeader: vnet) {
            case .success(let fd):
                return fd
            case .failure(let e):
                if e.code == ENOENT || e.code == ENODEV, !Syscall.exists("/dev/net/tun") {
                    throw StartError(description: "cannot create TUN \(settings.name): /dev/net/tun does not exist (the kernel's tun module: modprobe tun; in a container, pass the device /dev/net/tun in)")
                }
                throw StartError(description: "cannot create TUN \(settings.name)\(settings.netns.map { " in netns \($0)" } ?? ""): \(e)")
            }
        }
        guard settings.offload else {
            offload = .off(reason: "config")
            return try open(false)
        }
        let fd = try open(true)
        let tcp = Syscall.tunOffloadTCP
        // UDP segmentation (USO, Linux 6.2+) where the kernel has it; TCP's alone otherwise.
        if case .success = Syscall.tunSetOffload(fd, tcp | Syscall.tunOffloadUDP) {
            offload = .on(udp: true)
            return fd
        }
        let refused: Errno
        switch Syscall.tunSetOffload(fd, tcp) {
        case .success:
            offload = .on(udp: false)
            return fd
        case .failure(let e):
            refused = e
        }
        // The device goes with its only fd; the plain one takes its name.
        _ = Syscall.close(fd)
        offload = .off(reason: "kernel refused TUNSETOFFLOAD: \(refused)")
        Log.warn("tun.offload.unavailable", ["name": settings.name, "reason": offload.description,
                                              "effect": "plain packets of at most the MTU"])
        return try open(false)
    }

    /// A holder's STATUS: the overlay's addresses, MTU, default routes via its gateways and its
    /// DNS servers replace what the config set. Applying the same overlay again changes nothing.
    /// Runs on the loop: rtnetlink requests only, no process.
    /// `gateway4` nil: the default route goes to the device itself (a point-to-point link, as
    /// an SSTP outbound's IPCP address is).
    public func applyOverlay(ipv4: IPPrefix, gateway4: IPAddress?, ipv6: IPPrefix?, gateway6: IPAddress?,
                             mtu: Int, dns: [IPAddress]) {
        guard fd >= 0, let nl = rtnl else { return }
        let dev = settings.name
        let index = ifindex
        do {
            if mtu != currentMTU {
                try nl.setMTU(mtu, index: index, name: dev)
                netstack.setMTU(mtu, input: netif)
                currentMTU = mtu
            }
            // The new address goes on before the old one comes off: a device left without an
            // IPv4 address loses every IPv4 route through it (host mode's policy tables too).
            // promote_secondaries keeps a new address in the old one's subnet when the old
            // primary is removed (by default the kernel removes such secondaries with it).
            if ipv4 != currentIPv4 {
                do {
                    try nl.setPromoteSecondaries(index: index, name: dev)
                } catch {
                    Log.warn("tun.promote-secondaries.failed", ["name": dev, "error": "\(error)"])
                }
                try nl.replaceAddress(ipv4, index: index, name: dev)
                // The old address may be gone already (removed with a primary): nothing to do then.
                if let old = currentIPv4 { try? nl.deleteAddress(old, index: index, name: dev) }
                currentIPv4 = ipv4
            }
            if let v6 = ipv6, v6 != currentIPv6 {
                try nl.replaceAddress(v6, index: index, name: dev)
                if let old = currentIPv6 { try? nl.deleteAddress(old, index: index, name: dev) }
                currentIPv6 = v6
            }
            if hostRoutes == nil && settings.routeAll {
                if let gateway4 {
                    try nl.replaceDefaultRoute(via: gateway4, index: index, name: dev)
                } else {
                    try nl.replaceDefaultRoute(ipv6: false, index: index, name: dev)
                }
                if ipv6 != nil, let g6 = gateway6 {
                    try nl.replaceDefaultRoute(via: g6, index: index, name: dev)
                }
            }
            if !dns.isEmpty && dns != currentDNS {
                currentDNS = dns
                try publishDNS()
            }
            Log.info("tun.overlay", ["name": dev, "ipv4": ipv4.description, "gateway": gateway4?.description ?? "-",
                                     "ipv6": ipv6?.description ?? "-", "mtu": mtu,
                                     "dns": dns.map(\.description).joined(separator: ",")])
        } catch {
            Log.error("tun.overlay.failed", ["name": dev, "error": "\(error)"])
        }
    }

    private var currentLinkLocal: IPPrefix?

    /// A link-local address a packet link negotiated (sstp's IPV6CP), as fe80::IID/64 beside the
    /// device's other addresses (the configured or overlay IPv6 stays); nil takes it off again.
    public func setLinkLocal(_ address: IPAddress?) {
        guard fd >= 0, let nl = rtnl else { return }
        let prefix = address.flatMap { IPPrefix($0, 64) }
        guard prefix != currentLinkLocal else { return }
        do {
            if let p = prefix { try nl.replaceAddress(p, index: ifindex, name: settings.name) }
            if let old = currentLinkLocal { try? nl.deleteAddress(old, index: ifindex, name: settings.name) }
            currentLinkLocal = prefix
            Log.info("tun.link-local", ["name": settings.name, "address": address?.description ?? "-"])
        } catch {
            Log.error("tun.link-local.failed", ["name": settings.name, "error": "\(error)"])
        }
    }

    /// The namespace's resolv.conf gets `currentDNS`; in host mode it is only logged (loft does
    /// not rewrite the host's resolver configuration).
    private func publishDNS() throws {
        if let ns = settings.netns { try writeResolvConf(ns); return }
        Log.info("tun.dns", ["servers": currentDNS.map(\.description).joined(separator: ","),
                             "note": "host mode: resolv.conf left alone"])
    }

    private func writeResolvConf(_ ns: String) throws {
        let dir = "/etc/netns/\(ns)"
        if !Syscall.exists("/etc/netns") { Syscall.makeDirectory("/etc/netns", mode: 0o755) }
        if !Syscall.exists(dir) {
            if case .failure(let e) = Syscall.makeDirectory(dir, mode: 0o755) { throw StartError(description: "cannot create \(dir): \(e)") }
            createdNetnsDir = true
        }
        let path = dir + "/resolv.conf"
        var text = "# written by loft for its TUN in netns \(ns); removed when loft exits\n"
        for s in currentDNS { text += "nameserver \(s)\n" }
        if case .failure(let e) = Syscall.writeFile(path, Array(text.utf8), mode: 0o644) {
            throw StartError(description: "cannot write \(path): \(e)")
        }
        wroteResolvConf = true
    }

    /// Removes the device, routes, resolv.conf and the namespace if loft created it.
    public func stop() {
        hostRoutes?.remove()
        if fd >= 0 {
            writeHeldAck()
            loop.unregister(fd)
            _ = Syscall.close(fd)  // the device (and its addresses and routes) goes with the last fd
            fd = -1
        }
        // The socket holds its namespace: closed before the namespace is deleted.
        rtnl?.close()
        rtnl = nil
        if let ns = settings.netns {
            if wroteResolvConf {
                Syscall.unlink("/etc/netns/\(ns)/resolv.conf")
                if createdNetnsDir { Syscall.removeDirectory("/etc/netns/\(ns)") }
                wroteResolvConf = false
            }
            if createdNetns {
                try? NetworkNamespace.delete(ns)
                if let m = markerPath { Syscall.unlink(m) }
                createdNetns = false
            }
        }
        lock?.release()
        lock = nil
        // Only a device that came up goes down (a failed start logs start.failed alone).
        if isUp { Log.info("tun.down", ["name": settings.name]) }
        isUp = false
    }

    // MARK: I/O

    public func handleIO(_ events: UInt32) {
        let vnet = offload.isOn
        // Bounded batch per wake-up so other descriptors get their turn.
        for _ in 0..<64 {
            // The packet is read where lwIP can take it without a copy (into loft's own buffer
            // when lwIP has no memory); the offload header apart.
            let rx = netstack.receiveBuffer() ?? buffer
            var iov = (iovec(iov_base: vnetHeader.baseAddress, iov_len: vnetHeader.count),
                       iovec(iov_base: rx.baseAddress, iov_len: rx.count))
            let r = withUnsafeMutablePointer(to: &iov) {
                $0.withMemoryRebound(to: iovec.self, capacity: 2) { v in
                    vnet ? Syscall.readv(fd, v, 2) : Syscall.readv(fd, v + 1, 1)
                }
            }
            guard case .success(let n) = r, n > 0 else { return }
            packetsRead &+= 1
            guard vnet else {
                let packet = UnsafeRawBufferPointer(rebasing: rx[0..<n])
                if let c = capture, c.isActive { c.packet(packet, netif: netif, .inbound) }
                netstack.input(packet, from: netif)
                continue
            }
            guard n > VirtioNetHeader.size, let header = VirtioNetHeader(UnsafeRawBufferPointer(vnetHeader)) else {
                netstack.countDrop(.truncated, input: netif, packet: UnsafeRawBufferPointer(rebasing: rx[0..<max(0, n - VirtioNetHeader.size)]))
                continue
            }
            let packet = UnsafeMutableRawBufferPointer(rebasing: rx[0..<(n - VirtioNetHeader.size)])
            if let c = capture, c.isActive { c.packet(UnsafeRawBufferPointer(packet), netif: netif, .inbound) }
            if header.gsoType & ~VirtioNetHeader.gsoECN == VirtioNetHeader.gsoUDPL4 {
                splitDatagrams(UnsafeRawBufferPointer(packet), segmentSize: Int(header.gsoSize))
                continue
            }
            // A local app's TCP segment with its checksum left partial: lwIP takes it as it is
            // (nothing sums its payload), unless packet mode may forward it; any other partial
            // checksum is completed here.
            let partial = netif != netstack.packetModeInput && header.leavesTCPChecksumPartial(UnsafeRawBufferPointer(packet))
            if !partial, let reason = header.complete(packet) {
                netstack.countDrop(reason, input: netif, packet: UnsafeRawBufferPointer(packet))
                continue
            }
            if header.gsoType != VirtioNetHeader.gsoNone { largeSegmentsRead &+= 1 }
            netstack.input(UnsafeRawBufferPointer(packet), from: netif, partialChecksum: partial)
        }
    }

    /// A UDP super-datagram (USO): the app's datagrams, each to the stack on its own with a
    /// full checksum; one that cannot be cut is dropped and counted.
    private func splitDatagrams(_ packet: UnsafeRawBufferPointer, segmentSize: Int) {
        let t = packet.count > 0 && packet[0] >> 4 == 4 ? Int(packet[0] & 0x0F) * 4 : 40
        let cut = UDPSegmentation.split(packet, transportOffset: t, segmentSize: segmentSize, scratch: segmentScratch) { piece in
            netstack.input(piece, from: netif)
        }
        if cut { largeDatagramsRead &+= 1 } else { netstack.countDrop(.offloadHeader, input: netif, packet: packet) }
    }

    public func writePacket(_ packet: UnsafeRawBufferPointer, segmentSize: Int) {
        guard fd >= 0 else { return }
        if segmentSize > 0 {
            acks.release(before: packet)
            writeTCP(packet, VirtioNetHeader.forLargeTCP(packet, segmentSize: segmentSize))
            return
        }
        if acks.pass(packet) { return }
        // With offload lwIP left the payload unsummed (see PacketWriter): the kernel sums it.
        if offload.isOn, let partial = VirtioNetHeader.forPartialTCP(packet) {
            writeTCP(packet, partial)
            return
        }
        writeNow(packet)
    }

    /// A packet that did not come from lwIP (a packet outbound's, with its sender's checksums),
    /// written as it is.
    public func writeForwarded(_ packet: UnsafeRawBufferPointer) {
        guard fd >= 0 else { return }
        writeNow(packet)
    }

    /// After each batch of events: the ACKs held back.
    func writeHeldAck() { acks.flush() }

    private func writeNow(_ packet: UnsafeRawBufferPointer) {
        guard fd >= 0 else { return }
        if let c = capture, c.isActive { c.packet(packet, netif: netif, .outbound) }
        send(offload.isOn ? UnsafeRawBufferPointer(plainHeader) : UnsafeRawBufferPointer(start: nil, count: 0), packet)
    }

    /// One packet to the device from two pieces (an offload header or copied headers, then the
    /// rest; `head` may be empty), in one system call; counted, a failure dropped.
    @discardableResult
    private func send(_ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> Bool {
        var iov = (iovec(iov_base: UnsafeMutableRawPointer(mutating: head.baseAddress), iov_len: head.count),
                   iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress), iov_len: body.count))
        let r = withUnsafeMutablePointer(to: &iov) {
            $0.withMemoryRebound(to: iovec.self, capacity: 2) { v in
                head.isEmpty ? Syscall.writev(fd, v + 1, 1) : Syscall.writev(fd, v, 2)
            }
        }
        guard case .success = r else {
            writeDrops &+= 1
            return false
        }
        packetsWritten &+= 1
        return true
    }

    /// A TCP segment whose checksum the kernel completes (and, when the header says so, that
    /// it cuts into pieces): its headers go from a copy whose checksum field holds the
    /// pseudo-header's sum; the payload goes from lwIP's segment as it is.
    private func writeTCP(_ packet: UnsafeRawBufferPointer, _ offload: (header: VirtioNetHeader, checksumSeed: UInt16)?) {
        if let c = capture, c.isActive { c.packet(packet, netif: netif, .outbound) }
        guard let (header, seed) = offload,
              Int(header.headerLength) + VirtioNetHeader.size <= segmentHeaders.count
        else {
            writeDrops &+= 1
            return
        }
        let h = Int(header.headerLength)
        header.write(to: segmentHeaders)
        let copy = UnsafeMutableRawBufferPointer(rebasing: segmentHeaders[VirtioNetHeader.size ..< VirtioNetHeader.size + h])
        copy.copyMemory(from: UnsafeRawBufferPointer(rebasing: packet[0..<h]))
        let field = Int(header.checksumStart) + Int(header.checksumOffset)
        copy[field] = UInt8(seed >> 8)
        copy[field + 1] = UInt8(truncatingIfNeeded: seed)
        if send(UnsafeRawBufferPointer(rebasing: segmentHeaders[0 ..< VirtioNetHeader.size + h]),
                UnsafeRawBufferPointer(rebasing: packet[h...])), header.gsoType != VirtioNetHeader.gsoNone {
            largeSegmentsWritten &+= 1
        }
    }
}

/// The TUN's offloads: on (with UDP segmentation where the kernel has it), or off and why
/// (the config, or the kernel's refusal).
public enum OffloadState: Equatable, CustomStringConvertible {
    case on(udp: Bool)
    case off(reason: String)

    public var isOn: Bool { if case .on = self { return true } else { return false } }
    public var description: String {
        switch self {
        case .on(let udp): return udp ? "on (csum, tso4, tso6, uso4, uso6)" : "on (csum, tso4, tso6)"
        case .off(let reason): return "off (\(reason))"
        }
    }
}
