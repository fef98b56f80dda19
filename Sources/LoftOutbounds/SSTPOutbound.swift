import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftSSTP
import LoftTLS

/// A `type: sstp` outbound's settings.
public struct SSTPOptions: Sendable {
    public var host: String
    public var port: UInt16
    public var tls: TLSClientOptions
    public var user: String
    public var password: String
    public var auth: [SSTPClient.AuthMethod]
    /// Fail-closed: while the link is down, its flows and packets are dropped and counted
    /// (`hold-drops`), never sent another way. Without it they go to the fallback (direct).
    public var hold: Bool
    public var connectTimeoutMs: UInt64
    public var minBackoffMs: UInt64 = 500
    public var maxBackoffMs: UInt64 = 30_000
    /// The client's timers (tests shorten them).
    public var keepaliveMs: UInt64 = 30_000
    /// A link that ends sooner than this after coming up does not reset the backoff (nor the
    /// log's once-per-reason memory): a server that renegotiates or drops every link at once
    /// is redialled ever more slowly, with one log line.
    public var stableUpMs: UInt64 = 10_000

    public init(host: String, port: UInt16, tls: TLSClientOptions, user: String, password: String,
                auth: [SSTPClient.AuthMethod], hold: Bool, connectTimeoutMs: UInt64 = 10_000) {
        self.host = host; self.port = port; self.tls = tls; self.user = user; self.password = password
        self.auth = auth; self.hold = hold; self.connectTimeoutMs = connectTimeoutMs
    }
}

/// One SSTP connection to a server (TLS, then `SSTPClient`): the link IPCP gives goes to
/// `onLink` (the TUN takes the address and DNS), IP packets go both ways (`sendPacket`,
/// `onPacket`). A lost connection is redialled with backoff (0.5 s doubling to 30 s, ±25 %).
/// TCP streams and UDP associations (SOCKS5, the bridge) are connections and lwIP udp pcbs
/// loft opens itself over the link from its address (`linkStack`); what cannot be carried is
/// counted as `stream-refused` (docs/sstp.md says what is built).
public final class SSTPOutbound: PacketOutbound, ByteStreamEvents, SSTPClientDelegate {
    public let name: String
    let loop: EventLoop
    let runtime: CarrierRuntime
    let context: TLSContext
    let options: SSTPOptions
    let serverName: String
    /// Where new flows go while the link is down and `hold` is off (nil with `hold`).
    let fallback: Outbound?

    enum State: String { case idle, dialing, handshaking, up, waiting, stopped }
    private(set) var state = State.idle
    private var stream: TLSStream?
    private var client: SSTPClient?
    private var clientTimer: TimerHandle?
    private var clientDeadline: UInt64 = 0
    private var redialTimer: TimerHandle?
    private var connectTimer: TimerHandle?
    private var generation = 0
    private var failures = 0
    private var writeBlocked = false
    /// Reasons logged since the link was last up (each logged once: a server that keeps
    /// refusing costs one line, not one per redial).
    private var logged = Set<String>()
    /// When the current link came up (the loop's ms).
    private var upSince: UInt64 = 0

    /// The link came up (first time, after a redial, or renegotiated): apply it to the TUN.
    public var onLink: ((SSTPClient.Link) -> Void)?
    /// An IPv4 packet from the server for the app (valid during the call).
    public var onPacket: ((UnsafeRawBufferPointer) -> Void)?
    public private(set) var link: SSTPClient.Link?
    /// The TUN's configured addresses: IPCP never takes one (`HostAddress.problem`).
    public var reservedAddresses: [IPAddress] = []
    /// Where streams routed here are opened (the netstack's link netif); nil: refused.
    public var linkStack: PacketLinkStack?

    struct Counts {
        var dials: UInt64 = 0, ups: UInt64 = 0, authFailures: UInt64 = 0, losses: UInt64 = 0
        var packetsUp: UInt64 = 0, packetsDown: UInt64 = 0, bytesUp: UInt64 = 0, bytesDown: UInt64 = 0
        var dropsDown: UInt64 = 0, dropsFull: UInt64 = 0, foreignDrops: UInt64 = 0, streamRefused: UInt64 = 0, pathChanges: UInt64 = 0
        var replyDrops: UInt64 = 0
        var streamsOpened: UInt64 = 0, fallbackFlows: UInt64 = 0, lookups: UInt64 = 0, lookupFailures: UInt64 = 0
        var lastError = ""
    }
    private var counts = Counts()
    /// Packets from the app are written to TLS once per loop batch, not one record each.
    private lazy var flushSoon = SoonOnce(loop: loop) { [weak self] in self?.flush() }

    /// At most this much output waits for the TLS connection; IP packets beyond it are dropped
    /// (counted `full`): TCP inside the tunnel backs off as on any full link.
    static let outputLimit = 256 * 1024

    public init(name: String, loop: EventLoop, runtime: CarrierRuntime, options: SSTPOptions, fallback: Outbound? = nil) throws {
        self.name = name
        self.fallback = options.hold ? nil : fallback
        self.loop = loop
        self.runtime = runtime
        self.options = options
        // SSTP servers are often Windows RRAS, TLS 1.2 before Server 2022: accepted here (the
        // crypto binding ties the PPP authentication to this TLS server's certificate either way).
        context = try TLSContext(client: options.tls, alpn: [], allowTLS12: true)
        var sn = options.tls.serverName ?? options.host
        if sn.hasPrefix("[") && sn.hasSuffix("]") { sn = String(sn.dropFirst().dropLast()) }
        serverName = sn
    }

    public var status: OutboundStatus {
        let st: String = switch state {
        case .waiting: options.hold ? "held" : "down"
        case .dialing, .handshaking: "dialing"
        default: state.rawValue
        }
        var s = OutboundStatus(name: name, type: "sstp", state: st)
        s.flows = UInt64(linkStack?.connectionCount ?? 0)
        s.bytesUp = counts.bytesUp
        s.bytesDown = counts.bytesDown
        let server = options.host.contains(":") ? "[\(options.host)]:\(options.port)" : "\(options.host):\(options.port)"
        var d = ["server \(server)"]
        if let l = link, state == .up {
            d.append("address \(l.address)")
            if let v6 = l.ipv6 { d.append("ipv6 \(v6)") }
            if !l.dns.isEmpty { d.append("dns " + l.dns.map(\.description).joined(separator: " ")) }
            if let a = l.auth { d.append("auth \(a.rawValue)") }
        }
        if !counts.lastError.isEmpty { d.append("last error \(counts.lastError)") }
        s.detail = d.joined(separator: ", ")
        s.extra = [("dials", counts.dials), ("ups", counts.ups), ("auth-failures", counts.authFailures),
                   ("link-losses", counts.losses), ("path-changes", counts.pathChanges),
                   ("packets-up", counts.packetsUp), ("packets-down", counts.packetsDown),
                   (options.hold ? OutboundStatus.holdDrops : "down-drops", counts.dropsDown),
                   ("fallback-flows", counts.fallbackFlows), ("full-drops", counts.dropsFull), ("foreign-drops", counts.foreignDrops), ("streams", counts.streamsOpened),
                   ("stream-refused", counts.streamRefused), ("lookups", counts.lookups), ("lookup-failures", counts.lookupFailures),
                   // This link's: Neighbor Solicitations for loft's link-local address it answered.
                   ("nd-answered", UInt64(client?.counters.neighborAdvertisements ?? 0)),
                   // Echo-Replies, Protocol- and Code-Rejects not queued: the server did not read.
                   ("reply-drops", counts.replyDrops + UInt64(client?.counters.repliesDropped ?? 0))]
        return s
    }

    // MARK: lifecycle

    public func start() {
        guard state == .idle else { return }
        dial()
    }

    public func stop() {
        guard state != .stopped else { return }
        let c = client
        state = .stopped
        for t in [redialTimer, connectTimer, clientTimer].compactMap({ $0 }) { loop.cancel(t) }
        redialTimer = nil; connectTimer = nil; clientTimer = nil
        if let c, c.phase != .down {
            c.stop(now: loop.now)
            flush()   // the Call Disconnect leaves with what is queued; loft is exiting
        }
        client?.delegate = nil
        client = nil
        stream?.close()
        stream = nil
        linkStack?.linkDown()
    }

    /// The host's path changed: drop the connection and dial again at once.
    public func pathChanged(reason: String) {
        guard state != .stopped else { return }
        counts.pathChanges += 1
        Log.info("sstp.path-changed", ["outbound": name, "reason": reason])
        failures = 0
        logged.removeAll()
        lost("path changed (\(reason))", redialIn: 0)
    }

    private func dial() {
        guard state != .stopped else { return }
        if let t = redialTimer { loop.cancel(t) }
        redialTimer = nil
        generation += 1
        state = .dialing
        counts.dials += 1
        writeBlocked = false
        stream = TLSStream(runtime: runtime, context: context, host: options.host, port: options.port,
                           serverName: serverName, events: self)
        let g = generation
        if let t = connectTimer { loop.cancel(t) }
        connectTimer = loop.schedule(after: options.connectTimeoutMs) { [weak self] in
            guard let self, self.generation == g else { return }
            self.connectTimer = nil
            if self.state == .dialing { self.lost("no TLS connection within \(self.options.connectTimeoutMs) ms") }
        }
    }

    /// The connection is gone (or given up): everything of it ends; a redial follows.
    private func lost(_ why: String, redialIn fixed: UInt64? = nil, authFailure: Bool = false) {
        guard state != .stopped else { return }
        let wasUp = state == .up
        if wasUp && loop.now >= upSince + options.stableUpMs {
            // The link held: the next down is news again and redials start from the shortest wait.
            failures = 0
            logged.removeAll()
        }
        generation += 1
        if let t = connectTimer { loop.cancel(t) }
        if let t = clientTimer { loop.cancel(t) }
        connectTimer = nil; clientTimer = nil
        counts.replyDrops &+= UInt64(client?.counters.repliesDropped ?? 0)
        client?.delegate = nil
        client = nil
        stream?.events = nil
        stream?.reset()
        stream = nil
        if wasUp { counts.losses += 1 }
        // Connections opened over the link end with it (a redial may bring another address).
        linkStack?.linkDown()
        if authFailure { counts.authFailures += 1 }
        counts.lastError = why
        state = .waiting
        let delay = fixed ?? backoff()
        if logged.insert(why).inserted {
            Log.warn("sstp.down", ["outbound": name, "reason": why, "redial-ms": delay, "hold": options.hold])
        }
        let g = generation
        redialTimer = loop.schedule(after: max(delay, 1)) { [weak self] in
            guard let self, self.generation == g, self.state == .waiting else { return }
            self.redialTimer = nil
            self.dial()
        }
    }

    private func backoff() -> UInt64 {
        failures += 1
        let exp = min(failures - 1, 16)
        let base = min(options.maxBackoffMs, options.minBackoffMs << UInt64(exp))
        return max(100, UInt64(Double(base) * Double.random(in: 0.75...1.25)))
    }

    // MARK: the client's timer and output

    private func armClientTimer() {
        guard let c = client, let d = c.nextDeadline else { return }
        if clientTimer != nil && d == clientDeadline { return }
        if let t = clientTimer { loop.cancel(t) }
        clientDeadline = d
        let g = generation
        clientTimer = loop.schedule(at: d) { [weak self] in
            guard let self, self.generation == g, let c = self.client else { return }
            self.clientTimer = nil
            c.tick(now: self.loop.now)
            self.afterClient()
        }
    }

    /// After the client ran: send what it queued, arm its next deadline.
    private func afterClient() {
        flush()
        armClientTimer()
    }

    /// Moves the client's output into the TLS stream as far as its room allows (a write flushes
    /// at once, so room comes back within the loop); when it is full, `streamWritable` follows.
    private func flush() {
        guard let c = client, let s = stream, !writeBlocked else { return }
        var at = 0
        while at < c.output.count {
            let room = s.writeRoom
            guard room > 0 else { writeBlocked = true; break }
            let n = c.output.withUnsafeBytes { b -> Int in
                var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: b.baseAddress! + at), iov_len: min(room, b.count - at))
                return s.write(&iov, count: 1)
            }
            guard n > 0 else { writeBlocked = n == 0; break }
            at += n
        }
        if at > 0 { c.output.removeFirst(at) }
    }

    // MARK: ByteStreamEvents (the TLS connection)

    public func streamConnected(_: ByteStream) {
        guard state == .dialing, let s = stream else { return }
        if let t = connectTimer { loop.cancel(t) }
        connectTimer = nil
        guard let hashes = s.peerCertificateHashes else { return lost("the server sent no certificate") }
        state = .handshaking
        var settings = SSTPClient.Settings(host: serverName, user: options.user, password: options.password,
                                           auth: options.auth, keepaliveMilliseconds: options.keepaliveMs)
        settings.outputLimit = Self.outputLimit
        settings.reservedAddresses = reservedAddresses
        let c = SSTPClient(settings: settings, certHash: hashes)
        c.delegate = self
        client = c
        c.start(now: loop.now)
        afterClient()
    }

    public func streamFailed(_: ByteStream, _ failure: FlowFailure) {
        let cause = stream?.cause.map { "\($0)" } ?? "\(failure)"
        lost(state == .dialing ? "connect: \(cause)" : "connection lost: \(cause)")
    }

    public func streamReadable(_: ByteStream) {
        guard let s = stream, let c = client else { return }
        var buf = [UInt8](repeating: 0, count: 0)
        var iov = iovec()
        var count = 0
        while client === c {
            if let r = s.peek(&iov, max: 1, count: &count) {
                switch r {
                case .data:
                    let n = iov.iov_len
                    c.receive(UnsafeRawBufferPointer(start: iov.iov_base, count: n), now: loop.now)
                    if stream === s { s.consume(n) }
                    continue
                case .eof: return lost("the server closed the connection")
                case .failed(let f): return lost("connection lost: \(f)")
                case .wouldBlock: break
                }
            } else {
                if buf.isEmpty { buf = [UInt8](repeating: 0, count: 16384) }
                let r = buf.withUnsafeMutableBytes { s.read(into: $0) }
                switch r {
                case .data(let n):
                    buf.withUnsafeBytes { c.receive(UnsafeRawBufferPointer(rebasing: $0[0..<n]), now: loop.now) }
                    continue
                case .eof: return lost("the server closed the connection")
                case .failed(let f): return lost("connection lost: \(f)")
                case .wouldBlock: break
                }
            }
            break
        }
        if client === c { afterClient() }
    }

    public func streamWritable(_: ByteStream) {
        writeBlocked = false
        flush()
    }

    // MARK: SSTPClientDelegate

    public func sstpOutputReady(_ c: SSTPClient) {}

    public func sstpUp(_ c: SSTPClient, link l: SSTPClient.Link) {
        if state == .up, let old = link, old.address == l.address {
            // The same connection's link changed (IPV6CP opened or closed, IPCP again with the
            // same address): applied again, not a new link.
            link = l
            Log.info("sstp.link-updated", ["outbound": name, "address": l.address, "ipv6": l.ipv6?.description ?? "-",
                                           "peer-ipv6": l.peerIPv6?.description ?? "-"])
            onLink?(l)
            return
        }
        state = .up
        upSince = loop.now
        counts.ups += 1
        counts.lastError = ""
        if let old = link, old.address != l.address { linkStack?.linkDown() }
        link = l
        linkStack?.setMTU(max(576, min(l.mtu, 1500)))
        Log.info("sstp.up", ["outbound": name, "address": l.address, "ipv6": l.ipv6?.description ?? "-",
                             "peer-ipv6": l.peerIPv6?.description ?? "-",
                             "dns": l.dns.map(\.description).joined(separator: ","),
                             "auth": l.auth?.rawValue ?? "none", "mru": l.peerMRU, "tls": stream?.tlsDetails ?? ""])
        onLink?(l)
    }

    public func sstpPacket(_ c: SSTPClient, _ packet: UnsafeRawBufferPointer) {
        // Only packets for the address IPCP gave (or the link-local one IPV6CP made) reach the TUN.
        guard let l = link else { counts.foreignDrops &+= 1; return }
        if packet.count >= 40, packet[0] >> 4 == 6 {
            guard let v6 = l.ipv6, IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: packet[24..<40])) == v6 else {
                counts.foreignDrops &+= 1
                return
            }
            counts.packetsDown &+= 1
            counts.bytesDown &+= UInt64(packet.count)
            onPacket?(packet)
            return
        }
        guard packet.count >= 20, packet[0] >> 4 == 4,
              IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: packet[16..<20])) == l.address else {
            counts.foreignDrops &+= 1
            return
        }
        counts.packetsDown &+= 1
        counts.bytesDown &+= UInt64(packet.count)
        // A segment of a connection loft opened over the link goes to lwIP; the rest is the TUN's.
        if let ls = linkStack, ls.takePacket(packet) { return }
        onPacket?(packet)
    }

    public func sstpDown(_ c: SSTPClient, _ end: SSTPClient.End) {
        flush()   // a Call Abort or Disconnect Ack may be queued
        if case .authFailed = end {
            lost(end.description, authFailure: true)
        } else {
            lost(end.description)
        }
    }

    // MARK: Outbound

    /// Up: new TUN flows pass as packets. Down without `hold`: they go through lwIP to
    /// `openStream`/`openAssociation`, which hand them to the fallback. Down with `hold`: their
    /// packets are refused by `sendPacket` (`hold-drops`).
    public var takesNewFlows: Bool { state == .up || fallback == nil }

    /// What the link carries: the server's MRU, at most what an SSTP packet holds (4087).
    public var linkMTU: Int { link?.mtu ?? 65535 }

    /// While the link is down: the fallback when there is one (counted `fallback-flows`), else
    /// nil and the refusal counted in `hold-drops` (`down-drops` without `hold` and without a
    /// fallback, as in unit tests).
    private func whileDown() -> Outbound? {
        if let fallback { counts.fallbackFlows &+= 1; return fallback }
        counts.dropsDown &+= 1
        return nil
    }

    public func sendPacket(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard packet.count >= 20, packet[0] >> 4 == 4 || packet[0] >> 4 == 6 else { counts.dropsFull &+= 1; return false }
        guard state == .up, let c = client else {
            counts.dropsDown &+= 1
            return false
        }
        // IPv6 only once IPV6CP has opened (docs/sstp.md).
        guard packet[0] >> 4 == 4 || link?.ipv6 != nil else { counts.dropsFull &+= 1; return false }
        guard c.output.count < Self.outputLimit else {
            counts.dropsFull &+= 1
            return false
        }
        guard c.send(packet) else { counts.dropsFull &+= 1; return false }
        counts.packetsUp &+= 1
        counts.bytesUp &+= UInt64(packet.count)
        flushSoon.schedule()
        return true
    }

    /// A TCP connection from the link's address, opened by lwIP over the link (an IPv4
    /// address; a name that is an address literal counts). While the link is down: the
    /// fallback's, or refused (`hold-drops`); IPv6 and names are refused (`stream-refused`).
    public func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream {
        if state != .up {
            if let fb = whileDown() { return fb.openStream(to: destination, events: events) }
            let s = SocketStream(loop: loop, events: events, meter: nil)
            s.failSoon(.networkUnreachable)
            return s
        }
        switch destination {
        case .ip(let e):
            if let s = openLinkStream(to: e, events: events) { return s }
        case .domain(let name, let port):
            if let a = IPAddress(name) {
                if let s = openLinkStream(to: Endpoint(a, port), events: events) { return s }
            } else if let s = lookUpAndOpen(name, port: port, events: events) {
                return s
            }
        }
        counts.streamRefused &+= 1
        let s = SocketStream(loop: loop, events: events, meter: nil)
        s.failSoon(.networkUnreachable)
        return s
    }

    /// A name: looked up through the link's DNS servers over the link (`LinkLookup`), then
    /// opened over the link to its first IPv4 address. nil (refused) without DNS servers or a
    /// name DNS cannot carry. A name that does not resolve fails the stream `hostUnreachable`,
    /// no answer within 4 s `timedOut` (both `lookup-failures`).
    ///
    /// The SOCKS5 CONNECT gets a preface end at once that waits on the lookup (no preamble, no
    /// answer: `NoAnswer`): nothing passes until the connection over the link is attached; from
    /// then on every call goes to it, and its events come through unchanged. A failed lookup is
    /// one `streamFailed`; closing the end first cancels the lookup.
    private func lookUpAndOpen(_ name: String, port: UInt16, events: ByteStreamEvents) -> ByteStream? {
        guard state == .up, let l = link, let ls = linkStack, !l.dns.isEmpty else { return nil }
        let pending = PrefaceStream(codec: NoAnswer(), events: events)
        // The association's events until `LinkLookup` takes them over.
        let nothing = NoDatagrams()
        guard let assoc = ls.openAssociation(from: l.address, events: nothing) else { return nil }
        guard let lookup = LinkLookup(loop: loop, name: name, servers: l.dns, association: assoc, completion: { [weak self, weak pending] answer in
                  guard let self, let pending else { return }
                  guard case .addresses(let all, _) = answer, let a = all.first(where: \.isIPv4) else {
                      self.counts.lookupFailures &+= 1
                      Log.info("sstp.lookup-failed", ["outbound": self.name, "name": name,
                                                      "answer": answer.map { "\($0)" } ?? "none in time"])
                      pending.fail(answer == nil ? .timedOut : .hostUnreachable)
                      return
                  }
                  if let s = self.openLinkStream(to: Endpoint(a, port), events: pending) {
                      pending.attach(s, connected: false)
                  } else {
                      self.counts.streamRefused &+= 1
                      pending.fail(.networkUnreachable)
                  }
              }) else {
            assoc.close()
            return nil
        }
        pending.waitingOn = lookup
        guard lookup.start() else { lookup.cancel(); return nil }
        counts.lookups &+= 1
        return pending
    }

    private func openLinkStream(to e: Endpoint, events: ByteStreamEvents) -> ByteStream? {
        guard state == .up, let l = link, let ls = linkStack,
              let s = ls.openStream(from: l.address, to: e, events: events) else { return nil }
        counts.streamsOpened &+= 1
        return s
    }

    /// A UDP association from the link's address (lwIP udp pcb over the link); while the link
    /// is down the fallback's, or refused (`hold-drops`). Datagrams to names or IPv6 are dropped.
    public func openAssociation(events: DatagramEvents) -> DatagramAssociation? {
        if state != .up { return whileDown()?.openAssociation(events: events) }
        guard state == .up, let l = link, let ls = linkStack, let a = ls.openAssociation(from: l.address, events: events) else {
            counts.streamRefused &+= 1
            return nil
        }
        counts.streamsOpened &+= 1
        return a
    }
}
