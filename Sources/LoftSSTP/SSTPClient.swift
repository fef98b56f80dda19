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
    public private(set) var phase: Phase = .idle
    public private(set) var link: Link?
    public private(set) var counters = Counters()
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

    private var pending: [UInt8] = []           // a packet cut by the end of the last read
    private var lastHeard: UInt64 = 0
    private var echoOutstanding = false
    private var handshakeDeadline: UInt64 = 0
    private var disconnectDeadline: UInt64?
    private var bindingRequest: SSTP.BindingRequest?
    private var nextID: UInt8 = 0

    private struct Negotiation {
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
    private var lcp = Negotiation()
    private var ipcp = Negotiation()
    private var ipv6cp = Negotiation()
    private var ipv6cpStarted = false
    private var peerIID: [UInt8]?
    private var magic: UInt32 = 0
    private var peerMRU = 1500
    private var peerIPCPAddress: IPAddress?      // the server's own, from its IPCP request
    private var refusedAddress: String?          // why the last address the server offered was not taken
    private var droppedInRow = 0
    private var authMethod: AuthMethod?
    private var authDone = false
    private var papDeadline: UInt64?
    private var papSent = 0
    private var papID: UInt8 = 0
    private var chapResponse: (id: UInt8, packet: [UInt8], peerChallenge: [UInt8], authChallenge: [UInt8], nt: [UInt8])?
    private var hlak = CryptoBinding.noKeysHLAK

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
    private func consume(_ bytes: UnsafeRawBufferPointer, now: UInt64) -> Int {
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

    private func controlMessage(_ m: SSTP.ControlMessage, now: UInt64) {
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

    private func frame(_ f: UnsafeRawBufferPointer, now: UInt64) {
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

    // MARK: LCP

    private func lcpPacket(_ p: PPP.Packet, now: UInt64) {
        switch PPP.Code(rawValue: p.code) {
        case .configureRequest:
            guard let options = PPP.parseOptions(p.data) else { counters.droppedIn += 1; return }
            if lcp.opened && phase != .lcp {
                return fail(.protocolError("the server restarted LCP after the link was open"))
            }
            var (code, reply, accepted) = SSTPClient.evaluateLCP(options, auth: settings.auth, magic: magic)
            if code == .configureNak && lcp.naks >= settings.maxFailure && !accepted.authRefused {
                // Max-Failure (RFC 1661 4.6): Naks that did not converge become a Reject of
                // the options (MRU, Magic-Number); the authentication protocol cannot be, below.
                let naked = Set(reply.map(\.type))
                code = .configureReject
                reply = options.filter { naked.contains($0.type) }
            }
            ppp(PPP.lcp, PPP.Packet(code: code.rawValue, id: p.id, data: PPP.encodeOptions(reply) ?? []))
            if code == .configureAck {
                lcp.theirs = true
                lcp.naks = 0
                peerMRU = accepted.mru
                authMethod = accepted.auth
            } else {
                lcp.naks += 1
                if lcp.naks > settings.maxConfigure {
                    let offered = options.first { $0.type == PPP.LCPOption.authProtocol }.map(SSTPClient.describeAuth) ?? "?"
                    return fail(code == .configureNak && accepted.authRefused
                        ? .authFailed("the server asks for \(offered), and auth allows only \(settings.auth.map(\.rawValue).joined(separator: ", "))")
                        : .protocolError("LCP did not converge after \(settings.maxConfigure) Configure-Naks"))
                }
            }
            lcpMaybeOpened(now: now)
        case .configureAck:
            guard p.id == lcp.id, lcp.deadline != nil, p.data == PPP.encodeOptions(lcp.options) else { return }
            lcp.ours = true
            lcp.failures = 0
            lcp.deadline = nil
            lcpMaybeOpened(now: now)
        case .configureNak:
            guard p.id == lcp.id, lcp.deadline != nil, let nak = PPP.parseOptions(p.data) else { return }
            lcp.failures += 1
            if gaveUp(lcp.failures, "LCP") { return }
            for o in nak {
                switch o.type {
                case PPP.LCPOption.mru:
                    if let v = o.u16, v >= 576, v <= UInt16(settings.mru) { set(&lcp.options, .u16(o.type, v)) }
                case PPP.LCPOption.magicNumber:
                    magic = random(4).reduce(0) { $0 << 8 | UInt32($1) }
                    set(&lcp.options, .u32(o.type, magic))
                default:
                    break   // a hint for an option loft does not ask for: ignored (RFC 1661 5.3)
                }
            }
            sendRequest(&lcp, PPP.lcp, now: now, fresh: true)
        case .configureReject:
            guard p.id == lcp.id, lcp.deadline != nil, let rej = PPP.parseOptions(p.data) else { return }
            lcp.failures += 1
            if gaveUp(lcp.failures, "LCP") { return }
            lcp.options.removeAll { o in rej.contains { $0.type == o.type } }
            if rej.contains(where: { $0.type == PPP.LCPOption.magicNumber }) { magic = 0 }
            sendRequest(&lcp, PPP.lcp, now: now, fresh: true)
        case .terminateRequest:
            ppp(PPP.lcp, PPP.Packet(.terminateAck, id: p.id))
            fail(phase == .disconnecting ? .stopped : .serverEnded("LCP Terminate-Request"))
        case .echoRequest:
            guard replyFits(p.data.count + 12) else { return }
            let m = magic
            ppp(PPP.lcp, PPP.Packet(.echoRequest.replyCode, id: p.id,
                                    data: [UInt8(m >> 24), UInt8((m >> 16) & 0xFF), UInt8((m >> 8) & 0xFF), UInt8(m & 0xFF)] + p.data.dropFirst(4)))
        case .protocolReject:
            if p.data.count >= 2, UInt16(p.data[0]) << 8 | UInt16(p.data[1]) == PPP.ipcp {
                fail(.protocolError("the server rejects IPCP (no IPv4 over this link)"))
            } else if p.data.count >= 2, UInt16(p.data[0]) << 8 | UInt16(p.data[1]) == PPP.ipv6cp {
                ipv6cp.deadline = nil   // no IPv6 on this link; nothing more is asked
            }
        case .terminateAck, .echoReply, .discardRequest, .codeReject:
            break
        case nil:
            guard replyFits(min(p.data.count + 4, peerMRU) + 12) else { return }
            ppp(PPP.lcp, PPP.Packet(.codeReject, id: takeID(), data: Array((p.bytes ?? []).prefix(max(0, peerMRU - 4)))))
        }
    }

    private func lcpMaybeOpened(now: UInt64) {
        guard lcp.opened, phase == .lcp else { return }
        phase = .auth
        switch authMethod {
        case .pap?: sendPAP(now: now)
        case .mschapv2?: break   // the server's Challenge comes
        case nil: authSucceeded(now: now)
        }
    }

    /// The answer to the server's LCP Configure-Request (RFC 1661 5.1-5.4): Reject the options
    /// loft does not know, else Nak the values it cannot take, else Ack. MRU, the
    /// authentication protocol, Magic-Number, PFC and ACFC are known; ACCM is Acked (no HDLC
    /// here, it means nothing).
    public static func evaluateLCP(_ options: [PPP.Option], auth: [AuthMethod], magic: UInt32)
        -> (code: PPP.Code, reply: [PPP.Option], accepted: (mru: Int, auth: AuthMethod?, authRefused: Bool)) {
        var reject: [PPP.Option] = []
        var nak: [PPP.Option] = []
        var mru = 1500
        var method: AuthMethod?
        var authRefused = false
        for o in options {
            switch o.type {
            case PPP.LCPOption.mru:
                guard let v = o.u16 else { reject.append(o); continue }
                if v < 576 { nak.append(.u16(o.type, 576)) } else { mru = Int(v) }
            case PPP.LCPOption.accm:
                if o.data.count != 4 { reject.append(o) }
            case PPP.LCPOption.authProtocol:
                if o.data == [0xC2, 0x23, PPP.chapMSCHAPv2], auth.contains(.mschapv2) {
                    method = .mschapv2
                } else if o.data == [0xC0, 0x23], auth.contains(.pap) {
                    method = .pap
                } else if let first = auth.first {
                    authRefused = true
                    nak.append(PPP.Option(type: o.type, data: first == .mschapv2 ? [0xC2, 0x23, PPP.chapMSCHAPv2] : [0xC0, 0x23]))
                } else {
                    reject.append(o)
                }
            case PPP.LCPOption.magicNumber:
                guard let v = o.u32 else { reject.append(o); continue }
                // Equal to ours, or zero: a looped-back link or an invalid number (RFC 1661 6.4).
                if v == 0 || (v == magic && magic != 0) { nak.append(.u32(o.type, ~magic &+ 0x5A5A5A5A)) }
            case PPP.LCPOption.pfc, PPP.LCPOption.acfc:
                if !o.data.isEmpty { reject.append(o) }
            default:
                reject.append(o)
            }
        }
        if !reject.isEmpty { return (.configureReject, reject, (mru, method, authRefused)) }
        if !nak.isEmpty { return (.configureNak, nak, (mru, method, authRefused)) }
        return (.configureAck, options, (mru, method, false))
    }

    static func describeAuth(_ o: PPP.Option) -> String {
        switch o.data {
        case [0xC2, 0x23, PPP.chapMSCHAPv2]: return "MS-CHAPv2"
        case [0xC2, 0x23, 0x05]: return "CHAP-MD5"
        case [0xC2, 0x23, 0x80]: return "MS-CHAPv1"
        case [0xC0, 0x23]: return "PAP"
        case [0xC2, 0x27]: return "EAP"
        default: return "protocol " + o.data.map { SSTP.hex($0) }.joined()
        }
    }

    // MARK: authentication

    private func sendPAP(now: UInt64) {
        if papSent == 0 { papID = takeID() }
        papSent += 1
        papDeadline = now + settings.restartMilliseconds
        guard let p = PAP.request(id: papID, user: Array(settings.user.utf8), password: Array(settings.password.utf8)) else {
            return fail(.authFailed("the user or password is longer than PAP's 255 bytes"))
        }
        ppp(PPP.pap, p)
    }

    private func papPacket(_ p: PPP.Packet, now: UInt64) {
        guard phase == .auth, authMethod == .pap, p.id == papID, let reply = PAP.reply(p) else { return }
        papDeadline = nil
        switch reply {
        case .ack: authSucceeded(now: now)
        case .nak(let message): fail(.authFailed("PAP: the server refused the user or password" + (message.isEmpty ? "" : " (\(message))")))
        }
    }

    private func chapPacket(_ p: PPP.Packet, now: UInt64) {
        guard authMethod == .mschapv2, phase == .auth else { return }
        switch p.code {
        case CHAP.challenge:
            guard let (value, _) = CHAP.parseChallenge(p), value.count == 16 else {
                return fail(.protocolError("MS-CHAPv2 challenge of the wrong size"))
            }
            if let r = chapResponse, r.id == p.id, r.authChallenge == value {
                ppp(PPP.chap, nil, raw: r.packet)   // the server repeated its challenge: the same answer
                return
            }
            let user = Array(settings.user.utf8)
            let peer = random(16)
            do {
                let nt = try MSCHAPv2.ntResponse(authenticatorChallenge: value, peerChallenge: peer, user: user,
                                                 password: settings.password)
                guard let r = CHAP.response(id: p.id, value: MSCHAPv2.responseValue(peerChallenge: peer, ntResponse: nt),
                                            name: user), let bytes = r.bytes else {
                    return fail(.authFailed("the user name is too long for MS-CHAPv2"))
                }
                chapResponse = (p.id, bytes, peer, value, nt)
                ppp(PPP.chap, nil, raw: bytes)
            } catch {
                fail(.authFailed("MS-CHAPv2 cannot run: \(error)"))
            }
        case CHAP.success:
            guard let r = chapResponse, p.id == r.id else { return }
            let message = CHAP.message(p)
            do {
                let expected = try MSCHAPv2.authenticatorResponse(password: settings.password, ntResponse: r.nt,
                                                                  peerChallenge: r.peerChallenge,
                                                                  authenticatorChallenge: r.authChallenge,
                                                                  user: Array(settings.user.utf8))
                guard message.hasPrefix(expected) else {
                    return fail(.authFailed("MS-CHAPv2: the server's authenticator response is wrong (it does not know the password)"))
                }
                let keys = try MSCHAPv2.clientMasterKeys(password: settings.password, ntResponse: r.nt)
                hlak = CryptoBinding.clientHLAK(send: keys.send, receive: keys.receive)
            } catch {
                return fail(.authFailed("MS-CHAPv2 cannot run: \(error)"))
            }
            authSucceeded(now: now)
        case CHAP.failure:
            guard let r = chapResponse, p.id == r.id else { return }
            fail(.authFailed("MS-CHAPv2: " + MSCHAPv2.failureReason(CHAP.message(p))))
        default:
            break
        }
    }

    private func authSucceeded(now: UInt64) {
        guard !authDone, let req = bindingRequest else { return }
        authDone = true
        phase = .network
        let sha256 = req.hashBitmask & SSTP.hashSHA256 != 0
        emit(CryptoBinding.callConnected(request: req, certHash: sha256 ? certHash.sha256 : certHash.sha1, hlak: hlak))
        ipcp = Negotiation()
        ipcp.options = [.u32(PPP.IPCPOption.address, 0), .u32(PPP.IPCPOption.primaryDNS, 0), .u32(PPP.IPCPOption.secondaryDNS, 0)]
        sendRequest(&ipcp, PPP.ipcp, now: now)
        // IPV6CP is asked for too (servers such as SoftEther only answer a client's request); a
        // server without it Protocol-Rejects it or stays silent, and IPv4 carries on.
        if settings.ipv6 { startIPV6CP(now: now) }
    }

    // MARK: IPCP

    private func ipcpPacket(_ p: PPP.Packet, now: UInt64) {
        guard authDone else { return }   // before authentication NCPs are not negotiated (RFC 1661 3.5)
        switch PPP.Code(rawValue: p.code) {
        case .configureRequest:
            guard let options = PPP.parseOptions(p.data) else { counters.droppedIn += 1; return }
            if phase == .up {
                // The server renegotiates: this layer restarts (RFC 1661 4.3) and reports up again.
                phase = .network
                ipcp.ours = false
                ipcp.theirs = false
                ipcp.failures = 0
                sendRequest(&ipcp, PPP.ipcp, now: now, fresh: true)
            }
            let ours = ipcp.options.first { $0.type == PPP.IPCPOption.address }?.u32 ?? 0
            // The server's own address: one that cannot be a host's on this link (or is the
            // one loft asks for) is refused; loft does not need it (no gateway on the TUN).
            let reject = options.filter { o in
                guard o.type == PPP.IPCPOption.address, let v = o.u32 else { return true }
                return v != 0 && HostAddress.problem(.v4(v), peer: ours == 0 ? nil : .v4(ours)) != nil
            }
            if reject.isEmpty {
                peerIPCPAddress = options.first.flatMap { $0.u32 }.flatMap { $0 == 0 ? nil : IPAddress.v4($0) }
                ppp(PPP.ipcp, PPP.Packet(.configureAck, id: p.id, data: p.data))
                ipcp.theirs = true
            } else {
                ppp(PPP.ipcp, PPP.Packet(.configureReject, id: p.id, data: PPP.encodeOptions(reject) ?? []))
            }
            ipcpMaybeOpened()
        case .configureAck:
            guard p.id == ipcp.id, ipcp.deadline != nil, p.data == PPP.encodeOptions(ipcp.options) else { return }
            guard let a = ipcp.options.first(where: { $0.type == PPP.IPCPOption.address })?.u32, a != 0 else {
                return fail(.protocolError("IPCP: the server acknowledged address 0.0.0.0"
                                           + (refusedAddress.map { " after offering \($0), which loft does not take" } ?? "")))
            }
            if let why = addressProblem(a) {
                return fail(.protocolError("IPCP: the server acknowledged \(IPAddress.v4(a)) as loft's address: \(why)"))
            }
            ipcp.ours = true
            ipcp.failures = 0
            ipcp.deadline = nil
            ipcpMaybeOpened()
        case .configureNak:
            guard p.id == ipcp.id, ipcp.deadline != nil, let nak = PPP.parseOptions(p.data) else { return }
            ipcp.failures += 1
            if gaveUp(ipcp.failures, "IPCP") { return }
            for o in nak where o.data.count == 4 && ipcp.options.contains(where: { $0.type == o.type }) {
                if o.type == PPP.IPCPOption.address, let why = addressProblem(o.u32 ?? 0) {
                    // Not taken: loft asks for an address again (0.0.0.0), as pppd does with an
                    // address it will not use; Max-Failure ends it.
                    refusedAddress = "\(IPAddress.v4(o.u32 ?? 0)) (\(why))"
                    set(&ipcp.options, .u32(PPP.IPCPOption.address, 0))
                    continue
                }
                set(&ipcp.options, o)
            }
            sendRequest(&ipcp, PPP.ipcp, now: now, fresh: true)
        case .configureReject:
            guard p.id == ipcp.id, ipcp.deadline != nil, let rej = PPP.parseOptions(p.data) else { return }
            ipcp.failures += 1
            if gaveUp(ipcp.failures, "IPCP") { return }
            if rej.contains(where: { $0.type == PPP.IPCPOption.address }) {
                return fail(.protocolError("IPCP: the server will not give an address (it rejects IP-Address)"))
            }
            ipcp.options.removeAll { o in rej.contains { $0.type == o.type } }
            sendRequest(&ipcp, PPP.ipcp, now: now, fresh: true)
        case .terminateRequest:
            ppp(PPP.ipcp, PPP.Packet(.terminateAck, id: p.id))
            fail(.serverEnded("IPCP Terminate-Request"))
        case .codeReject, .terminateAck:
            break
        default:
            guard replyFits(min(p.data.count + 4, peerMRU) + 12) else { return }
            ppp(PPP.ipcp, PPP.Packet(.codeReject, id: takeID(), data: Array((p.bytes ?? []).prefix(max(0, peerMRU - 4)))))
        }
    }

    private func ipcpMaybeOpened() {
        guard ipcp.opened, phase == .network else { return }
        func address(_ type: UInt8) -> IPAddress? {
            guard let o = ipcp.options.first(where: { $0.type == type }), o.data.count == 4, o.u32 != 0 else { return nil }
            return IPAddress.v4(o.u32!)
        }
        guard let a = address(PPP.IPCPOption.address) else { return }
        if let why = HostAddress.problem(a, peer: peerIPCPAddress, taken: settings.reservedAddresses) {
            return fail(.protocolError("IPCP: \(a) cannot be loft's address on this link: \(why)"))
        }
        phase = .up
        // A DNS server that is unspecified, multicast or broadcast is no server.
        let dns = [address(PPP.IPCPOption.primaryDNS), address(PPP.IPCPOption.secondaryDNS)].compactMap { $0 }
            .filter { d in HostAddress.problem(d).map { $0 == "loopback" } ?? true }
        var l = Link(address: a, dns: dns,
                     peerMRU: peerMRU, auth: authMethod)
        if ipv6cp.opened, let ours = ipv6cp.options.first?.data, let theirs = peerIID {
            l.ipv6 = Self.linkLocal(ours)
            l.peerIPv6 = Self.linkLocal(theirs)
        }
        link = l
        delegate?.sstpUp(self, link: l)
    }

    // MARK: IPV6CP (RFC 5072)

    /// fe80:: with an interface identifier.
    public static func linkLocal(_ iid: [UInt8]) -> IPAddress {
        let lo = iid.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return .v6(0xFE80_0000_0000_0000, lo)
    }

    /// The answer to the server's IPV6CP Configure-Request: options other than an 8-byte
    /// Interface-Identifier are Rejected; an identifier of zero or equal to loft's is Nak'ed
    /// with `suggestion`; else Ack, and the server's identifier.
    public static func evaluateIPV6CP(_ options: [PPP.Option], ours: [UInt8], suggestion: [UInt8])
        -> (code: PPP.Code, reply: [PPP.Option], peer: [UInt8]?) {
        let reject = options.filter { $0.type != PPP.IPV6CPOption.interfaceID || $0.data.count != 8 }
        if !reject.isEmpty { return (.configureReject, reject, nil) }
        guard let iid = options.first?.data else { return (.configureAck, options, nil) }
        if iid.allSatisfy({ $0 == 0 }) || iid == ours {
            return (.configureNak, [PPP.Option(type: PPP.IPV6CPOption.interfaceID, data: suggestion)], nil)
        }
        return (.configureAck, options, iid)
    }

    /// A random interface identifier, never zero, never `avoid`.
    private func newIID(avoid: [UInt8]?) -> [UInt8] {
        var iid = random(8)
        iid[0] &= 0xFD   // the universal/local bit clear: a locally made identifier (RFC 4291 2.5.1)
        if iid.allSatisfy({ $0 == 0 }) || iid == avoid { iid[7] = iid[7] &+ 1 }
        if iid.allSatisfy({ $0 == 0 }) { iid[7] = 1 }
        return iid
    }

    private func startIPV6CP(now: UInt64) {
        ipv6cpStarted = true
        ipv6cp = Negotiation()
        ipv6cp.options = [PPP.Option(type: PPP.IPV6CPOption.interfaceID, data: newIID(avoid: peerIID))]
        sendRequest(&ipv6cp, PPP.ipv6cp, now: now)
    }

    private func ipv6cpPacket(_ p: PPP.Packet, now: UInt64) {
        switch PPP.Code(rawValue: p.code) {
        case .configureRequest:
            guard let options = PPP.parseOptions(p.data) else { counters.droppedIn += 1; return }
            if !ipv6cpStarted || ipv6cp.opened {
                // The server starts IPV6CP (again): loft asks for its identifier anew.
                startIPV6CP(now: now)
            }
            let ours = ipv6cp.options.first?.data ?? []
            let (code, reply, peer) = Self.evaluateIPV6CP(options, ours: ours, suggestion: newIID(avoid: ours))
            ppp(PPP.ipv6cp, PPP.Packet(code: code.rawValue, id: p.id, data: PPP.encodeOptions(reply) ?? []))
            if code == .configureAck {
                ipv6cp.theirs = true
                ipv6cp.naks = 0
                peerIID = peer
            } else {
                ipv6cp.naks += 1
                if ipv6cp.naks > settings.maxConfigure { ipv6cp.deadline = nil; ipv6cpStarted = true }
            }
            ipv6cpMaybeOpened()
        case .configureAck:
            guard p.id == ipv6cp.id, ipv6cp.deadline != nil, p.data == PPP.encodeOptions(ipv6cp.options) else { return }
            ipv6cp.ours = true
            ipv6cp.deadline = nil
            ipv6cpMaybeOpened()
        case .configureNak:
            guard p.id == ipv6cp.id, ipv6cp.deadline != nil, let nak = PPP.parseOptions(p.data) else { return }
            ipv6cp.failures += 1
            if ipv6cp.failures >= settings.maxFailure { ipv6cp.deadline = nil; return }   // no IPv6 here; IPv4 carries on
            if let o = nak.first(where: { $0.type == PPP.IPV6CPOption.interfaceID }) {
                // The server's suggestion, unless it is zero or its own: then another random one.
                let usable = o.data.count == 8 && !o.data.allSatisfy { $0 == 0 } && o.data != peerIID
                ipv6cp.options = [PPP.Option(type: PPP.IPV6CPOption.interfaceID, data: usable ? o.data : newIID(avoid: peerIID))]
            }
            sendRequest(&ipv6cp, PPP.ipv6cp, now: now, fresh: true)
        case .configureReject:
            guard p.id == ipv6cp.id, ipv6cp.deadline != nil else { return }
            // Without an interface identifier loft has no link-local address: no IPv6 here.
            ipv6cp.deadline = nil
        case .terminateRequest:
            ppp(PPP.ipv6cp, PPP.Packet(.terminateAck, id: p.id))
            ipv6cp = Negotiation()
            ipv6cpStarted = false
            if var l = link, l.ipv6 != nil {
                l.ipv6 = nil
                l.peerIPv6 = nil
                link = l
                if phase == .up { delegate?.sstpUp(self, link: l) }
            }
        case .codeReject, .terminateAck:
            break
        default:
            guard replyFits(min(p.data.count + 4, peerMRU) + 12) else { return }
            ppp(PPP.ipv6cp, PPP.Packet(.codeReject, id: takeID(), data: Array((p.bytes ?? []).prefix(max(0, peerMRU - 4)))))
        }
    }

    /// Both sides acked: the link's IPv6 addresses are known. After IPCP is up, the link is
    /// reported again with them.
    private func ipv6cpMaybeOpened() {
        guard ipv6cp.opened, let ours = ipv6cp.options.first?.data, let theirs = peerIID else { return }
        guard phase == .up, var l = link else { return }   // IPCP's opening reports them
        let (a, b) = (Self.linkLocal(ours), Self.linkLocal(theirs))
        guard l.ipv6 != a || l.peerIPv6 != b else { return }
        l.ipv6 = a
        l.peerIPv6 = b
        link = l
        delegate?.sstpUp(self, link: l)
    }

    /// `failures` Configure-Naks or Rejects of loft's request in a row: at Max-Failure the
    /// negotiation is not converging (RFC 1661 4.6) and the connection ends (true).
    private func gaveUp(_ failures: Int, _ name: String) -> Bool {
        guard failures >= settings.maxFailure else { return false }
        let offered = name == "IPCP" ? refusedAddress.map { "; it offered \($0) as loft's address, which loft does not take" } ?? "" : ""
        fail(.protocolError("\(name) did not converge: the server refused \(failures) Configure-Requests in a row\(offered)"))
        return true
    }

    /// Why an IPv4 address the server offers cannot be loft's on this link (the check the
    /// holder's STATUS gets too), nil when it can.
    private func addressProblem(_ a: UInt32) -> String? {
        HostAddress.problem(.v4(a), peer: peerIPCPAddress, taken: settings.reservedAddresses)
    }

    /// A reply loft makes itself fits below `outputLimit`: true, else dropped and counted;
    /// `maxDroppedReplies` in a row end the connection.
    private func replyFits(_ n: Int) -> Bool {
        if output.count + n <= settings.outputLimit {
            droppedInRow = 0
            return true
        }
        counters.repliesDropped += 1
        droppedInRow += 1
        if droppedInRow >= settings.maxDroppedReplies {
            fail(.protocolError("the server does not read: \(droppedInRow) replies dropped in a row, \(output.count) bytes waiting"))
        }
        return false
    }

    // MARK: output

    private func sendRequest(_ n: inout Negotiation, _ proto: UInt16, now: UInt64, fresh: Bool = true) {
        if fresh { n.id = takeID(); n.sent = 0 }
        n.sent += 1
        n.deadline = now + settings.restartMilliseconds
        ppp(proto, PPP.Packet(.configureRequest, id: n.id, data: PPP.encodeOptions(n.options) ?? []))
    }

    private func set(_ options: inout [PPP.Option], _ o: PPP.Option) {
        if let i = options.firstIndex(where: { $0.type == o.type }) { options[i] = o } else { options.append(o) }
    }

    private func takeID() -> UInt8 {
        nextID &+= 1
        return nextID
    }

    private func ppp(_ proto: UInt16, _ p: PPP.Packet?, raw: [UInt8]? = nil) {
        guard let body = raw ?? p?.bytes, body.count + 8 <= SSTP.maxPacket else { return }
        let h = SSTP.dataHeader(payloadLength: body.count + 4)
        let ph = PPP.header(proto)
        emit([h.0, h.1, h.2, h.3, ph.0, ph.1, ph.2, ph.3] + body)
    }

    private func control(_ m: SSTP.ControlMessage) {
        if let bytes = SSTP.encode(m) { emit(bytes) }
    }

    private func emit(_ bytes: [UInt8]) {
        output.append(contentsOf: bytes)
        delegate?.sstpOutputReady(self)
    }

    /// Tells the server why (Call Abort with a status), then ends.
    private func abort(status: UInt32, _ why: String) {
        if phase != .http && phase != .idle {
            control(SSTP.ControlMessage(.callAbort, [SSTP.StatusInfo(attributeID: 0, status: status).attribute]))
        }
        fail(.protocolError(why))
    }

    private func fail(_ end: End) { finish(end) }

    private func finish(_ end: End) {
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
