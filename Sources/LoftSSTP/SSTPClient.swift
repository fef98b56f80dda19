// The client side of one SSTP connection, sans-IO: the HTTP request, Call Connect, PPP (LCP,
// PAP or MS-CHAPv2, IPCP), the crypto binding, keepalive and Call Disconnect. The owner feeds
// it the server's bytes (after TLS) and the loop's time, drains `output` into the TLS stream,
// and arms one loop timer at `nextDeadline`; nothing here blocks, sleeps or reads a clock.
import LoftCore
import CTLS

public protocol SSTPClientDelegate: AnyObject {
    /// Bytes were queued in `output`.
    func sstpOutputReady(_ c: SSTPClient)
    /// IPCP finished (again, when the server renegotiates): the link is up with this configuration.
    func sstpUp(_ c: SSTPClient, link: SSTPClient.Link)
    /// An IPv4 packet from the server; valid only during the call.
    func sstpPacket(_ c: SSTPClient, _ packet: UnsafeRawBufferPointer)
    /// The connection is over; no call follows. Flush `output` (a Call Disconnect or an abort may
    /// wait there), then close.
    func sstpDown(_ c: SSTPClient, _ end: SSTPClient.End)
}

public final class SSTPClient {
    public enum AuthMethod: String, Sendable, Equatable, CaseIterable { case mschapv2, pap }

    public struct Settings: Sendable {
        public var host: String
        public var user: String
        public var password: String
        /// In order of preference; the server's LCP request picks one of them.
        public var auth: [AuthMethod]
        /// The largest PPP packet loft takes (LCP MRU).
        public var mru: Int
        /// SSTP Echo after this long without a byte from the server; down after twice as long.
        public var keepaliveMilliseconds: UInt64
        /// From the first byte sent to IPCP up.
        public var handshakeMilliseconds: UInt64
        /// PPP's restart timer and its Max-Configure (RFC 1661 4.6).
        public var restartMilliseconds: UInt64
        public var maxConfigure: Int
        /// Negotiate IPV6CP when the server offers it (its Configure-Request); false: Protocol-Reject.
        public var ipv6: Bool
        /// RFC 1661's Max-Failure, for the server's answers: after this many Configure-Naks
        /// (or Rejects) of loft's requests in a row a negotiation has not converged and is
        /// given up (LCP, IPCP: the connection ends; IPV6CP: no IPv6 on this link).
        public var maxFailure: Int = 5
        /// At most this much waits in `output`: replies loft makes itself (LCP Echo-Reply,
        /// Protocol-Reject, Code-Reject, SSTP Echo Response, Neighbor Advertisements) beyond it
        /// are dropped and counted (`repliesDropped`) — a server that sends and does not read
        /// cannot make loft queue without bound.
        public var outputLimit: Int = 256 * 1024
        /// This many replies dropped in a row (the output never drained meanwhile): the server
        /// does not read, the connection ends.
        public var maxDroppedReplies: Int = 256
        /// Addresses the TUN already has: IPCP never takes one of them (`HostAddress.problem`).
        public var reservedAddresses: [IPAddress] = []

        public init(host: String, user: String, password: String, auth: [AuthMethod] = [.mschapv2, .pap],
                    mru: Int = 1500, keepaliveMilliseconds: UInt64 = 30_000, handshakeMilliseconds: UInt64 = 30_000,
                    restartMilliseconds: UInt64 = 3_000, maxConfigure: Int = 10, ipv6: Bool = true) {
            self.host = host; self.user = user; self.password = password; self.auth = auth; self.mru = mru; self.ipv6 = ipv6
            self.keepaliveMilliseconds = keepaliveMilliseconds; self.handshakeMilliseconds = handshakeMilliseconds
            self.restartMilliseconds = restartMilliseconds; self.maxConfigure = maxConfigure
        }
    }

    /// What IPCP gave.
    public struct Link: Sendable, Equatable {
        public var address: IPAddress
        public var dns: [IPAddress]
        /// The server's MRU: the largest IP packet loft may send.
        public var peerMRU: Int
        /// The largest IP packet the link carries: the server's MRU, and never more than an
        /// SSTP packet holds (4095 bytes less its 4-byte header and PPP's 4: 4087).
        public var mtu: Int { min(peerMRU, SSTP.maxPacket - 8) }
        public var auth: AuthMethod?
        /// IPV6CP opened: loft's link-local address (fe80:: and its interface identifier) and
        /// the server's; nil when the server offers no IPV6CP (or it did not converge).
        public var ipv6: IPAddress? = nil
        public var peerIPv6: IPAddress? = nil
    }

    public enum End: Sendable, Equatable, CustomStringConvertible {
        /// The server refused the credentials (its message), or authentication could not proceed.
        case authFailed(String)
        /// The server answered the HTTP request with something other than 200, or refused the call.
        case refused(String)
        /// The server sent Call Abort, Call Disconnect or LCP Terminate-Request.
        case serverEnded(String)
        /// Malformed or unexpected input from the server.
        case protocolError(String)
        /// No answer in time (the handshake, a negotiation, the keepalive).
        case timeout(String)
        /// `stop()` finished.
        case stopped

        public var description: String {
            switch self {
            case .authFailed(let s): return "authentication failed: \(s)"
            case .refused(let s): return "refused: \(s)"
            case .serverEnded(let s): return "ended by the server: \(s)"
            case .protocolError(let s): return "protocol error: \(s)"
            case .timeout(let s): return "timeout: \(s)"
            case .stopped: return "stopped"
            }
        }
    }

    public enum Phase: Sendable, Equatable { case idle, http, callConnect, lcp, auth, network, up, disconnecting, down }

    public struct Counters: Sendable, Equatable {
        public var packetsIn = 0, packetsOut = 0, bytesIn = 0, bytesOut = 0
        /// IP packets dropped: before the link was up, too large, or of a protocol not negotiated.
        public var droppedIn = 0, droppedOut = 0
        public var echoesSent = 0
        /// Neighbor Solicitations from the server's side for loft's link-local address, answered
        /// by the client itself (`NeighborDiscovery`; they never reach the TUN).
        public var neighborAdvertisements = 0
        /// Replies loft did not queue because `output` was at `outputLimit` (the server does not read).
        public var repliesDropped = 0
    }

    public weak var delegate: SSTPClientDelegate?
    public internal(set) var phase: Phase = .idle
    public internal(set) var link: Link?
    public internal(set) var counters = Counters()
    /// Bytes for the server, in order. The owner takes them (`output.removeAll(keepingCapacity:)`).
    public var output: [UInt8] = []

    let settings: Settings
    let certHash: (sha1: [UInt8], sha256: [UInt8])
    let random: (Int) -> [UInt8]

    public init(settings: Settings, certHash: (sha1: [UInt8], sha256: [UInt8]),
                random: @escaping (Int) -> [UInt8] = SSTPClient.secureRandom) {
        self.settings = settings
        self.certHash = certHash
        self.random = random
    }

    public static func secureRandom(_ n: Int) -> [UInt8] {
        var b = [UInt8](repeating: 0, count: n)
        precondition(ctls_random(&b, n) == 0, "no random bytes")
        return b
    }

    // MARK: state

    var pending: [UInt8] = []           // a packet cut by the end of the last read
    var lastHeard: UInt64 = 0
    var echoOutstanding = false
    var handshakeDeadline: UInt64 = 0
    var disconnectDeadline: UInt64?
    var bindingRequest: SSTP.BindingRequest?
    var nextID: UInt8 = 0

    struct Negotiation {
        var options: [PPP.Option] = []
        var id: UInt8 = 0
        var sent = 0                  // Configure-Requests sent for this id's options
        var deadline: UInt64?         // retransmit at
        var ours = false              // our request acked
        var theirs = false            // their request acked by us
        var naks = 0                  // Configure-Naks we sent in a row
        var failures = 0              // Configure-Naks and Rejects of our requests in a row (Max-Failure)
        var opened: Bool { ours && theirs }
    }
    var lcp = Negotiation()
    var ipcp = Negotiation()
    var ipv6cp = Negotiation()
    var ipv6cpStarted = false
    var peerIID: [UInt8]?
    var magic: UInt32 = 0
    var peerMRU = 1500
    var peerIPCPAddress: IPAddress?      // the server's own, from its IPCP request
    var refusedAddress: String?          // why the last address the server offered was not taken
    var droppedInRow = 0
    var authMethod: AuthMethod?
    var authDone = false
    var papDeadline: UInt64?
    var papSent = 0
    var papID: UInt8 = 0
    var chapResponse: (id: UInt8, packet: [UInt8], peerChallenge: [UInt8], authChallenge: [UInt8], nt: [UInt8])?
    var hlak = CryptoBinding.noKeysHLAK

    // MARK: driving

    /// Queues the HTTP request. `now` is the loop's monotonic milliseconds.
    public func start(now: UInt64) {
        guard phase == .idle else { return }
        phase = .http
        lastHeard = now
        handshakeDeadline = now + settings.handshakeMilliseconds
        let id = random(16).map { SSTP.hex($0) }
        let guid = [id[0..<4], id[4..<6], id[6..<8], id[8..<10], id[10..<16]].map { $0.joined() }.joined(separator: "-").uppercased()
        emit(SSTP.httpRequest(host: settings.host, correlationID: guid))
    }

    /// Bytes from the server, in order.
    public func receive(_ bytes: UnsafeRawBufferPointer, now: UInt64) {
        guard phase != .idle && phase != .down, bytes.count > 0 else { return }
        lastHeard = now
        echoOutstanding = false
        if pending.isEmpty {
            let used = consume(bytes, now: now)
            if used < bytes.count && phase != .down { pending.append(contentsOf: bytes[used...]) }
        } else {
            pending.append(contentsOf: bytes)
            let all = pending
            let used = all.withUnsafeBytes { consume($0, now: now) }
            if phase == .down { pending = [] } else { pending.removeFirst(used) }
        }
    }

    /// The earliest moment `tick` has work; nil when none.
    public var nextDeadline: UInt64? {
        switch phase {
        case .idle, .down: return nil
        case .disconnecting: return disconnectDeadline
        default:
            var d: [UInt64] = []
            if phase != .up { d.append(handshakeDeadline) }
            if let t = lcp.deadline { d.append(t) }
            if let t = ipcp.deadline { d.append(t) }
            if let t = ipv6cp.deadline { d.append(t) }
            if let t = papDeadline { d.append(t) }
            d.append(lastHeard + settings.keepaliveMilliseconds * (echoOutstanding ? 2 : 1))
            return d.min()
        }
    }

    /// Runs what is due at `now`.
    public func tick(now: UInt64) {
        switch phase {
        case .idle, .down: return
        case .disconnecting:
            if let d = disconnectDeadline, now >= d { finish(.stopped) }
            return
        default: break
        }
        if now >= lastHeard + 2 * settings.keepaliveMilliseconds {
            return fail(.timeout("nothing from the server for \(2 * settings.keepaliveMilliseconds / 1000) s"))
        }
        if !echoOutstanding && now >= lastHeard + settings.keepaliveMilliseconds && phase != .http {
            echoOutstanding = true
            counters.echoesSent += 1
            control(SSTP.ControlMessage(.echoRequest))
        }
        if let t = lcp.deadline, now >= t {
            if lcp.sent >= settings.maxConfigure { return fail(.timeout("LCP: no answer to \(settings.maxConfigure) Configure-Requests")) }
            sendRequest(&lcp, PPP.lcp, now: now, fresh: false)
        }
        if let t = ipcp.deadline, now >= t {
            if ipcp.sent >= settings.maxConfigure { return fail(.timeout("IPCP: no answer to \(settings.maxConfigure) Configure-Requests")) }
            sendRequest(&ipcp, PPP.ipcp, now: now, fresh: false)
        }
        if let t = ipv6cp.deadline, now >= t {
            if ipv6cp.sent >= settings.maxConfigure {
                ipv6cp.deadline = nil   // no IPv6 on this link; IPv4 carries on
            } else {
                sendRequest(&ipv6cp, PPP.ipv6cp, now: now, fresh: false)
            }
        }
        if let t = papDeadline, now >= t {
            if papSent >= settings.maxConfigure { return fail(.timeout("no answer to PAP's Authenticate-Request")) }
            sendPAP(now: now)
        }
        if phase != .up && phase != .down && now >= handshakeDeadline {
            return fail(.timeout("no link within \(settings.handshakeMilliseconds / 1000) s (stuck in \(phase))"))
        }
    }

    /// Ends the connection: Call Disconnect, then down when the server acknowledges it (or after
    /// a second). Before the HTTP answer, down at once.
    public func stop(now: UInt64) {
        switch phase {
        case .idle, .http: finish(.stopped)
        case .down, .disconnecting: return
        default:
            phase = .disconnecting
            disconnectDeadline = now + 1000
            control(SSTP.ControlMessage(.callDisconnect))
        }
    }

    /// Queues one IP packet for the server (IPv6 once IPV6CP is open); false (and counted) when
    /// the link is not up, the packet's version is not negotiated, or it is larger than the
    /// server's MRU.
    @discardableResult
    public func send(_ packet: UnsafeRawBufferPointer) -> Bool {
        let v6 = packet.count > 0 && packet[0] >> 4 == 6
        guard phase == .up, packet.count <= peerMRU, packet.count + 8 <= SSTP.maxPacket, !v6 || link?.ipv6 != nil else {
            counters.droppedOut += 1
            return false
        }
        let h = SSTP.dataHeader(payloadLength: packet.count + 4)
        let p = PPP.header(v6 ? PPP.ipv6 : PPP.ipv4)
        output.append(contentsOf: [h.0, h.1, h.2, h.3, p.0, p.1, p.2, p.3])
        output.append(contentsOf: packet)
        counters.packetsOut += 1
        counters.bytesOut += packet.count
        delegate?.sstpOutputReady(self)
        return true
    }

    // MARK: input

    /// Parses what it can; returns the bytes used.
    func consume(_ bytes: UnsafeRawBufferPointer, now: UInt64) -> Int {
        var at = 0
        if phase == .http {
            switch SSTP.parseHTTPResponse(bytes) {
            case .needMore: return 0
            case .refused(let line):
                fail(.refused("the server answered the SSTP request with \(line.isEmpty ? "nothing readable" : "'\(line)'")"))
                return bytes.count
            case .ok(let n):
                at = n
                phase = .callConnect
                control(SSTP.ControlMessage(.callConnectRequest, [SSTP.encapsulatedPPP()]))
            }
        }
        while at < bytes.count && phase != .down {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[at...])
            switch SSTP.parse(rest) {
            case .needMore: return at
            case .bad(let why):
                abort(status: 7, "not SSTP: \(why)")
                return bytes.count
            case .data(let payload, let n):
                frame(UnsafeRawBufferPointer(rebasing: rest[payload]), now: now)
                at += n
            case .control(let m, let n):
                controlMessage(m, now: now)
                at += n
            }
        }
        return at
    }

    func controlMessage(_ m: SSTP.ControlMessage, now: UInt64) {
        switch m.messageType {
        case .callConnectAck where phase == .callConnect:
            guard let a = m.attribute(.cryptoBindingRequest), let req = SSTP.BindingRequest(a),
                  req.hashBitmask & (SSTP.hashSHA1 | SSTP.hashSHA256) != 0 else {
                return abort(status: 10, "Call Connect Acknowledge without a usable Crypto Binding Request")
            }
            bindingRequest = req
            phase = .lcp
            magic = random(4).reduce(0) { $0 << 8 | UInt32($1) }
            lcp = Negotiation()
            lcp.options = [.u16(PPP.LCPOption.mru, UInt16(settings.mru)), .u32(PPP.LCPOption.magicNumber, magic)]
            sendRequest(&lcp, PPP.lcp, now: now)
        case .callConnectNak:
            let why = m.attribute(.statusInfo).flatMap(SSTP.StatusInfo.init).map(\.description) ?? "no reason given"
            fail(.refused("Call Connect refused (\(why))"))
        case .callAbort:
            let why = m.attribute(.statusInfo).flatMap(SSTP.StatusInfo.init).map(\.description) ?? "no reason given"
            fail(.serverEnded("Call Abort (\(why))"))
        case .callDisconnect:
            control(SSTP.ControlMessage(.callDisconnectAck))
            fail(phase == .disconnecting ? .stopped : .serverEnded("Call Disconnect"))
        case .callDisconnectAck:
            if phase == .disconnecting { finish(.stopped) }
        case .echoRequest:
            if replyFits(8) { control(SSTP.ControlMessage(.echoResponse)) }
        default:
            break   // Echo Response (the byte itself was the news), or a message the client never gets
        }
    }

    func frame(_ f: UnsafeRawBufferPointer, now: UInt64) {
        guard let (proto, offset) = PPP.parseFrame(f) else { counters.droppedIn += 1; return }
        let info = UnsafeRawBufferPointer(rebasing: f[offset...])
        if proto == PPP.ipv4 || (proto == PPP.ipv6 && link?.ipv6 != nil) {
            guard phase == .up else { counters.droppedIn += 1; return }
            // A Neighbor Solicitation for loft's link-local address is answered here: a server
            // that bridges the link onto Ethernet (SoftEther) stops sending to an address whose
            // solicitations go unanswered, and the TUN's kernel cannot answer them.
            if proto == PPP.ipv6, let mine = link?.ipv6, let na = NeighborDiscovery.answer(info, for: mine) {
                if replyFits(na.count + 8) {
                    counters.neighborAdvertisements += 1
                    na.withUnsafeBytes { _ = send($0) }
                }
                return
            }
            counters.packetsIn += 1
            counters.bytesIn += info.count
            delegate?.sstpPacket(self, info)
            return
        }
        if phase == .disconnecting { return }
        // The control protocols this client speaks: one packet each, parsed once.
        let handler: ((PPP.Packet, UInt64) -> Void)?
        switch proto {
        case PPP.lcp: handler = lcpPacket
        case PPP.pap: handler = papPacket
        case PPP.chap: handler = chapPacket
        case PPP.ipcp: handler = ipcpPacket
        case PPP.ipv6cp where settings.ipv6:
            guard authDone else { return }   // before authentication NCPs are not negotiated
            handler = ipv6cpPacket
        default: handler = nil
        }
        if let handler {
            guard let p = PPP.Packet(info) else { counters.droppedIn += 1; return }
            handler(p, now)
            return
        }
        // IPv6, IPV6CP and anything else: Protocol-Reject (RFC 1661 5.7) once LCP is open.
        guard lcp.opened else { counters.droppedIn += 1; return }
        let keep = min(info.count, max(0, peerMRU - 6))
        guard replyFits(keep + 18) else { return }
        ppp(PPP.lcp, PPP.Packet(.protocolReject, id: takeID(),
                                data: [UInt8(proto >> 8), UInt8(proto & 0xFF)] + Array(info[0..<keep])))
    }

    // MARK: output

    func sendRequest(_ n: inout Negotiation, _ proto: UInt16, now: UInt64, fresh: Bool = true) {
        if fresh { n.id = takeID(); n.sent = 0 }
        n.sent += 1
        n.deadline = now + settings.restartMilliseconds
        ppp(proto, PPP.Packet(.configureRequest, id: n.id, data: PPP.encodeOptions(n.options) ?? []))
    }

    func set(_ options: inout [PPP.Option], _ o: PPP.Option) {
        if let i = options.firstIndex(where: { $0.type == o.type }) { options[i] = o } else { options.append(o) }
    }

    func takeID() -> UInt8 {
        nextID &+= 1
        return nextID
    }

    func ppp(_ proto: UInt16, _ p: PPP.Packet?, raw: [UInt8]? = nil) {
        guard let body = raw ?? p?.bytes, body.count + 8 <= SSTP.maxPacket else { return }
        let h = SSTP.dataHeader(payloadLength: body.count + 4)
        let ph = PPP.header(proto)
        emit([h.0, h.1, h.2, h.3, ph.0, ph.1, ph.2, ph.3] + body)
    }

    func control(_ m: SSTP.ControlMessage) {
        if let bytes = SSTP.encode(m) { emit(bytes) }
    }

    func emit(_ bytes: [UInt8]) {
        output.append(contentsOf: bytes)
        delegate?.sstpOutputReady(self)
    }

    /// Tells the server why (Call Abort with a status), then ends.
    func abort(status: UInt32, _ why: String) {
        if phase != .http && phase != .idle {
            control(SSTP.ControlMessage(.callAbort, [SSTP.StatusInfo(attributeID: 0, status: status).attribute]))
        }
        fail(.protocolError(why))
    }

    func fail(_ end: End) { finish(end) }

    func finish(_ end: End) {
        guard phase != .down else { return }
        phase = .down
        lcp.deadline = nil
        ipcp.deadline = nil
        ipv6cp.deadline = nil
        papDeadline = nil
        pending = []
        delegate?.sstpDown(self, end)
    }
}

extension PPP.Code {
    var replyCode: PPP.Code { self == .echoRequest ? .echoReply : self }
}
