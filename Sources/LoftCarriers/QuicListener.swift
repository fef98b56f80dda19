import CNgtcp2
import Glibc
import LoftCore
import LoftHTTP
import LoftIO
import LoftQUIC
import LoftTLS

/// The front's QUIC side: one UDP socket on the listener's port. Packets are routed to their
/// connection by destination connection id; an Initial for an unknown id makes a new
/// connection, at most `maxPendingHandshakes` in their handshake at once and
/// `maxPendingPerSource` per address (further Initials are dropped, not queued).
final class QuicListener: IOHandler, QuicPacketSink {
    let runtime: CarrierRuntime
    private weak var owner: CarrierListener?
    private let creds: OpaquePointer
    private var fd: Int32
    let localEndpoint: Endpoint
    private let localAddress: SocketAddress
    private var routes: [QuicCID: QuicServerConnection] = [:] { didSet { routesChanged &+= 1 } }
    /// Bumped by every change of `routes` (a `LastRoute` is good while it stays the same).
    private var routesChanged = 0
    private var handshaking: [ObjectIdentifier: QuicServerConnection] = [:]
    private var handshakesPerSource: [IPAddress: Int] = [:]
    /// The same, oldest first (at most maxPendingHandshakes).
    private var handshakeOrder: [QuicServerConnection] = []
    private var secret = [UInt8](repeating: 0, count: 32)
    private var wantsWrite = false
    private var blocked: [QuicConnection] = []
    nonisolated(unsafe) private static let batch = UDPReceiveBatch(slots: 8)
    /// A packet's connection id (first 32 bytes), then a Retry or reset being written.
    nonisolated(unsafe) private static let scratch = UnsafeMutableRawPointer.allocate(byteCount: 32 + 256, alignment: 16)
    let retry: QuicRetryPolicy
    /// Every accepted connection's limits.
    private(set) var limits: QuicLimits
    /// Stateless resets: 100 a second, bursts of 100.
    private var resetBucket = TokenBucket(perSecond: 100, burst: 100)
    var stats = QuicListenerStats()
    let maxPendingHandshakes: Int
    let maxPendingPerSource: Int
    /// The ALPNs served ("loft", "h3" or both, comma-separated) and h3's session path (nil: no h3).
    private let alpns: String
    let h3Path: String?

    init(listen: Endpoint, tls: TLSServerOptions, runtime: CarrierRuntime, owner: CarrierListener,
         maxPendingHandshakes: Int, maxPendingPerSource: Int, retry: QuicRetryPolicy = .auto,
         maxStreams: Int? = nil, maxPacket: Int? = nil, quic: Bool = true, h3Path: String? = nil) throws {
        alpns = ((quic ? [quicALPN] : []) + (h3Path != nil ? [H3Streams.alpn] : [])).joined(separator: ",")
        self.h3Path = h3Path
        // h3's control and QPACK streams need unidirectional streams (refused on quic's ALPN).
        limits = h3Path != nil ? QuicLimits.h3 : QuicLimits()
        var err = [CChar](repeating: 0, count: 256)
        guard let c = cngtcp2_server_creds_new(tls.certificateFile, tls.keyFile, &err, err.count) else {
            throw TLSError("quic: \(cText(err))")
        }
        creds = c
        self.runtime = runtime
        self.owner = owner
        self.maxPendingHandshakes = maxPendingHandshakes
        self.maxPendingPerSource = maxPendingPerSource
        self.retry = retry
        // The session's max-streams as QUIC's own stream limit: the client cannot have more
        // flow streams open at once than the session allows (plus the session stream), so it
        // waits for MAX_STREAMS instead of having extra streams reset.
        if let maxStreams { limits.maxStreamsBidi = UInt64(min(1024, maxStreams + 1)) }
        limits.maxPacket = maxPacket ?? 0
        // One key per process start: it derives the Retry tokens' key and the stateless reset
        // tokens (ngtcp2's HKDF with a different label for each).
        Crypto.fillRandom(&secret)
        let s = Sockets.make(family: Sockets.family(of: listen), type: Int32(SOCK_DGRAM.rawValue))
        guard s >= 0 else { cngtcp2_creds_free(c); throw SystemError("socket", Sockets.errno) }
        if case .failure(let e) = Syscall.bind(s, to: SocketAddress(listen)) {
            _ = Syscall.close(s)
            cngtcp2_creds_free(c)
            throw SystemError("bind udp \(listen)", e.code)
        }
        QuicCarrierBase.tune(s)
        fd = s
        localEndpoint = Sockets.localEndpoint(s) ?? listen
        localAddress = SocketAddress(localEndpoint)
        runtime.loop.register(s, IOEvents.readable, self)
    }

    deinit {
        close()
        cngtcp2_creds_free(creds)
    }

    /// Closes the socket: no packet in or out any more, for any connection.
    func close() {
        accepting = false
        guard fd >= 0 else { return }
        runtime.loop.unregister(fd)
        _ = Syscall.close(fd)
        fd = -1
        abortHandshakes()
    }

    /// New connections are refused (their Initials dropped) and those in their handshake go;
    /// the connections already handed out keep the socket, which closes with the last of them.
    /// A front that stops sends its sessions their GOAWAY and CONNECTION_CLOSE through it.
    func stopAccepting() {
        guard accepting else { return }
        accepting = false
        abortHandshakes()
        closeIfUnused()
    }

    /// Whether new connections are let in (until `stopAccepting` or `close`).
    private(set) var accepting = true

    private func abortHandshakes() {
        let open = handshakeOrder
        handshaking.removeAll()
        handshakeOrder.removeAll()
        handshakesPerSource.removeAll()
        for c in open { c.abort() }
    }

    private func closeIfUnused() {
        if !accepting && routes.isEmpty && handshaking.isEmpty { close() }
    }

    func handleIO(_ events: UInt32) {
        if events & IOEvents.writable != 0 && wantsWrite {
            wantsWrite = false
            runtime.loop.modify(fd, IOEvents.readable)
            let b = blocked
            blocked.removeAll()
            for q in b { q.socketWritable() }
        }
        guard events & (IOEvents.readable | IOEvents.error) != 0 else { return }
        // The route of the wakeup's last packet, held here (a GRO batch is one connection's
        // packets): the next packet for it costs a compare, not a lookup and a retain.
        var last = LastRoute()
        // At most 256 reads (each a datagram or a GRO batch) per wakeup, 8 per recvmmsg; a
        // short recvmmsg means the socket is drained.
        for _ in 0..<32 {
            guard fd >= 0, case .success(let k) = Syscall.recvMany(fd, Self.batch) else { return }
            for i in 0..<k {
                let r = Self.batch.read(i)
                QuicSocket.split(r.bytes.baseAddress ?? UnsafeRawPointer(Self.scratch), r.bytes.count, segment: r.segment) { p in
                    stats.packets += 1
                    packet(p, from: r.from, &last)
                }
            }
            if k < Self.batch.slots { return }
        }
    }

    /// A destination connection id and the connection `routes` gave it, while `routes` is as
    /// it was (`changed`). `connection` keeps it alive for the wakeup, so `unretained` may
    /// call it without a retain and release per packet (slow ones: a connection is held
    /// weakly elsewhere, so its count lives in a side table).
    private struct LastRoute {
        var key = QuicCID(UnsafeRawBufferPointer(start: nil, count: 0))!
        var connection: QuicConnection?
        var unretained: Unmanaged<QuicConnection>?
        var changed = -1

        init() {}
        init(key: QuicCID, connection: QuicConnection?, changed: Int) {
            self.key = key
            self.connection = connection
            unretained = connection.map { Unmanaged.passUnretained($0) }
            self.changed = changed
        }
    }

    private func packet(_ p: UnsafeRawBufferPointer, from: SocketAddress, _ last: inout LastRoute) {
        // Nothing here allocates until an Initial is let in: the id goes to a scratch buffer.
        let dcid = Self.scratch.assumingMemoryBound(to: UInt8.self)
        var len = 0
        let base = p.baseAddress!.assumingMemoryBound(to: UInt8.self)
        guard cngtcp2_packet_dcid(base, p.count, 18, dcid, &len) == 0 else { stats.dropped += 1; return }
        if let key = QuicCID(UnsafeRawBufferPointer(start: dcid, count: len)) {
            if last.changed == routesChanged, key == last.key, let q = last.unretained {
                q._withUnsafeGuaranteedRef { $0.receive(p, from: from, at: localAddress) }
                return
            }
            if let c = routes[key] {
                last = LastRoute(key: key, connection: c.quic, changed: routesChanged)
                c.quic?.receive(p, from: from, at: localAddress)
                return
            }
        }
        guard cngtcp2_peek_initial(base, p.count, dcid, &len) == 1 else {
            stats.dropped += 1
            if p.count > 0 && base[0] & 0x80 == 0 { statelessReset(p, to: from) }
            return
        }
        guard accepting else { stats.dropped += 1; return }
        guard let validated = admit(p, from: from) else { return }
        let source = from.endpoint?.address
        makeRoom(for: source)
        let entry = QuicServerConnection(listener: self, peer: from.endpoint, addressValidated: validated)
        guard let q = QuicConnection.server(loop: runtime.loop, sink: self, creds: creds, alpn: alpns, secret: secret,
                                            local: localAddress, remote: from, packet: p, limits: limits,
                                            delegate: entry) else {
            stats.dropped += 1
            for id in entry.cids { routes[id] = nil }
            return
        }
        entry.attach(q)
        stats.accepted += 1
        handshaking[ObjectIdentifier(entry)] = entry
        handshakeOrder.append(entry)
        if let source { handshakesPerSource[source, default: 0] += 1 }
        q.receive(p, from: from, at: localAddress)
    }

    /// Address validation (docs/front.md, "Retry"): nil keeps the Initial from making a
    /// connection; true lets it in with its address validated, false without.
    /// An Initial with a Retry token or a NEW_TOKEN token of ours that verifies always gets in; one whose Retry token
    /// does not verify (forged, expired, from another address) is dropped; one without is
    /// answered with a Retry (no state kept) when the policy says so, else let in.
    private func admit(_ p: UnsafeRawBufferPointer, from: SocketAddress) -> Bool? {
        let base = p.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let now = runtime.loop.nanoseconds
        let token = from.withSockaddr { a, l in cngtcp2_initial_token(base, p.count, secret, a, UInt32(l), now) }
        switch token {
        case CNGTCP2_TOKEN_RETRY, CNGTCP2_TOKEN_REGULAR:
            stats.validated += 1
            return true
        case CNGTCP2_TOKEN_NONE:
            guard retry.wantsRetry(handshaking: handshaking.count) else { return false }
            let out = Self.scratch + 32
            let n = from.withSockaddr { a, l in
                cngtcp2_write_retry(out.assumingMemoryBound(to: UInt8.self), 256, base, p.count, secret, a, UInt32(l), now)
            }
            guard n > 0 else { stats.dropped += 1; return nil }
            stats.retries += 1
            _ = QuicSocket.send(fd, UnsafeRawBufferPointer(start: out, count: n), segment: 0, to: from)
            return nil
        default:
            stats.badTokens += 1
            return nil
        }
    }

    /// A short-header packet for no connection: a stateless reset (RFC 9000 §10.3), so a
    /// client whose connection the front no longer has learns it at once. Smaller than the
    /// packet, never for one of 21 bytes or less, at most `resetBucket` a second.
    private func statelessReset(_ p: UnsafeRawBufferPointer, to: SocketAddress) {
        guard resetBucket.take(now: runtime.loop.nanoseconds / 1_000_000) else { return }
        let out = Self.scratch + 32
        let n = cngtcp2_write_reset(out.assumingMemoryBound(to: UInt8.self), 64, p.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                  p.count, 18, secret)
        guard n > 0 else { return }
        stats.resets += 1
        _ = QuicSocket.send(fd, UnsafeRawBufferPointer(start: out, count: n), segment: 0, to: to)
    }

    func sendPackets(_ bytes: UnsafeRawBufferPointer, segment: Int, to: SocketAddress, from conn: QuicConnection) -> Bool {
        guard fd >= 0 else { return true }
        switch QuicSocket.send(fd, bytes, segment: segment, to: to) {
        case .sent: return true
        case .tooBig:
            let size = segment > 0 ? segment : bytes.count
            if conn.packetTooBig(size) {
                Log.warn("quic.packet_too_big", ["peer": "\(to)", "size": size, "quic-max-packet": conn.limits.maxPacket])
            }
            return true
        case .full:
            blocked.append(conn)
            if !wantsWrite {
                wantsWrite = true
                runtime.loop.modify(fd, IOEvents.readable | IOEvents.writable)
            }
            return false
        }
    }

    // MARK: from carriers

    func route(_ id: QuicCID, to c: QuicServerConnection, add: Bool) {
        if add {
            routes[id] = c
            c.cids.append(id)
        } else if routes[id] === c {
            routes[id] = nil
        }
    }

    /// As the TCP listener does: a new Initial always gets in. Past its address's share it
    /// takes the place of that address's oldest handshake, with every slot taken of the oldest
    /// of all (`evicted`); established connections never compete with handshakes.
    private func makeRoom(for source: IPAddress?) {
        // Handshakes whose address is not validated go first (a spoofed flood cannot push
        // out a client that came back with a token).
        var victim: QuicServerConnection?
        if let source, (handshakesPerSource[source] ?? 0) >= maxPendingPerSource {
            victim = handshakeOrder.first { $0.peer?.address == source && !$0.addressValidated }
                ?? handshakeOrder.first { $0.peer?.address == source }
        } else if handshaking.count >= maxPendingHandshakes {
            victim = handshakeOrder.first { !$0.addressValidated } ?? handshakeOrder.first
        }
        guard let v = victim, leaveHandshake(v) else { return }
        stats.evicted += 1
        v.abort()
    }

    private func leaveHandshake(_ c: QuicServerConnection) -> Bool {
        guard handshaking.removeValue(forKey: ObjectIdentifier(c)) != nil else { return false }
        if let i = handshakeOrder.firstIndex(where: { $0 === c }) { handshakeOrder.remove(at: i) }
        if let a = c.peer?.address {
            let n = (handshakesPerSource[a] ?? 1) - 1
            handshakesPerSource[a] = n > 0 ? n : nil
        }
        return true
    }

    /// The QUIC handshake chose the ALPN: the connection goes to the carrier it names.
    func handshakeDone(_ c: QuicServerConnection, _ q: QuicConnection) {
        let carrier: QuicCarrierBase = q.alpn == H3Carrier.alpn ? H3Carrier(server: c, listener: self, connection: q)
                                                               : QuicCarrier(server: c, listener: self, connection: q)
        c.carrier = carrier
        carrier.connectionReady(q)
    }

    /// The carrier's session is open (h3: its CONNECT accepted): it goes to the front.
    func accepted(_ c: QuicServerConnection) {
        guard leaveHandshake(c), let carrier = c.carrier else { return }
        owner?.acceptedQuic(carrier)
    }

    func handshakeEnded(_ c: QuicServerConnection, _ reason: CarrierCloseReason) {
        guard leaveHandshake(c) else { return }
        stats.handshakeFailed += 1
        Log.debug("carrier.handshake_failed", ["peer": c.peer.map { "\($0)" } ?? "", "carrier": "quic", "reason": reason])
    }

    func refusedH3(_ c: H3Carrier, status: Int, reason: String, nth: Int) { owner?.refused(c, status, reason, nth: nth) }

    /// The connection is gone: its ids route nowhere.
    func forget(_ c: QuicServerConnection) {
        _ = leaveHandshake(c)
        stats.amplificationHeld += c.quic?.amplificationHeld ?? 0
        for id in c.cids where routes[id] === c { routes[id] = nil }
        c.cids.removeAll()
        closeIfUnused()
    }
}

/// The listener's record of one connection of the front's, from its first Initial until it is
/// gone: its connection ids (routed to it), its address and whether it was validated (the
/// handshake caps), and the carrier its ALPN picked. Until the QUIC handshake is done it is the
/// connection's delegate; then `QuicListener.handshakeDone` makes the carrier (`QuicCarrier` for
/// `loft`, `H3Carrier` for `h3`), which takes the connection's events from there. Held by the
/// listener's routes (as the carrier is, by this) until the connection is over.
final class QuicServerConnection: QuicConnectionDelegate {
    private weak var listener: QuicListener?
    let peer: Endpoint?
    /// The Initial carried a token of the front's that verified (a handshake to evict last).
    let addressValidated: Bool
    /// The server's ids of this connection (for the listener's table).
    var cids: [QuicCID] = []
    private(set) var quic: QuicConnection?
    /// The carrier, once the handshake chose it.
    var carrier: QuicCarrierBase?

    init(listener: QuicListener, peer: Endpoint?, addressValidated: Bool) {
        self.listener = listener
        self.peer = peer
        self.addressValidated = addressValidated
    }

    /// The connection made for the Initial; over before its handshake, it is forgotten.
    func attach(_ q: QuicConnection) {
        quic = q
        q.onFinished = { [weak self] in
            guard let self else { return }
            self.listener?.forget(self)
        }
    }

    /// Evicted, or the listener closes: the carrier goes, or the connection in its handshake.
    func abort() {
        if let carrier { carrier.abort() } else { quic?.abort() }
    }

    // MARK: QuicConnectionDelegate, in the handshake

    func quicHandshakeDone(_ c: QuicConnection) { listener?.handshakeDone(self, c) }
    /// A stream before the handshake is done (0-RTT): the session stream waits, any other is
    /// refused.
    func quicReadable(_ c: QuicConnection, stream: Int64) {
        if stream != 0 { c.reset(stream, code: 0x101) }
    }
    func quicWritable(_ c: QuicConnection, stream: Int64) {}
    func quicStreamReset(_ c: QuicConnection, stream: Int64, code: UInt64) {
        if stream == 0 { c.abort() }
    }
    func quicDatagram(_ c: QuicConnection, _ bytes: UnsafeRawBufferPointer) {}
    func quicClosed(_ c: QuicConnection, _ reason: CarrierCloseReason) { listener?.handshakeEnded(self, reason) }
    func quicConnectionID(_ c: QuicConnection, _ id: QuicCID, add: Bool) { listener?.route(id, to: self, add: add) }
}

struct QuicListenerStats {
    var packets = 0
    var dropped = 0
    /// Retry packets sent; Initials let in with a Retry or NEW_TOKEN token that verified; Initials dropped
    /// for a Retry token that did not; stateless resets sent.
    var retries = 0
    var validated = 0
    var badTokens = 0
    var resets = 0
    /// Packets not sent for the anti-amplification limit (QuicConnection.amplificationHeld).
    var amplificationHeld = 0
    var accepted = 0
    var evicted = 0
    var handshakeFailed = 0
}

/// When the front answers an Initial without a token with a Retry (address validation,
/// RFC 9000 §8.1) instead of making a connection: config key `quic-retry`.
public enum QuicRetryPolicy: Sendable, Equatable {
    /// Every Initial without a valid token.
    case always
    /// Never (a spoofed Initial costs a handshake slot until it is evicted or times out).
    case never
    /// Once `threshold` connections are in their handshake at once.
    case under(threshold: Int)

    /// The default: Retry once 32 handshakes are in progress (an eighth of the 256 slots).
    public static let auto = QuicRetryPolicy.under(threshold: 32)

    func wantsRetry(handshaking: Int) -> Bool {
        switch self {
        case .always: return true
        case .never: return false
        case .under(let t): return handshaking >= t
        }
    }
}
