import LoftCore
import LoftIO
import LoftSniff
import Glibc

/// How TCP flows from the TUN and the bridge are sniffed (docs/sniffing.md): lwIP accepts the
/// connection at once, the app's first bytes are read (not taken) for a TLS SNI or an HTTP Host,
/// and only then is the flow routed, by that name and its address, and its outbound dialled;
/// the bytes then go to the outbound as they came. Ports where the server speaks first are
/// routed by address at once (the held SYN, as with sniffing off).
extension Netstack {
    public struct Sniffing: Sendable, Equatable {
        /// Off unless set (a stack made without a config routes at the SYN); loft's config turns
        /// it on by default (`sniff`).
        public var enabled = false
        /// How long after lwIP's handshake the first bytes are waited for.
        public var waitMs: UInt64 = 300
        /// The most first bytes looked at (a longer TLS hello or HTTP head is not sniffed).
        public var maxBytes = 16_384
        /// Destination ports routed at once, unsniffed.
        public var skipPorts = PortSet(Sniffing.serverFirstPorts)

        /// Protocols whose server speaks first (the app sends nothing until it has heard it):
        /// FTP, SSH, telnet, SMTP, POP3, NNTP, IMAP, submission, MySQL, PostgreSQL (client-
        /// first, but never a name: no wait to skip), VNC.
        public static let serverFirstPorts: [UInt16] = [21, 22, 23, 25, 110, 119, 143, 587, 3306, 5432, 5900]
        public init() {}
    }

    /// A set of ports as a bitmap (one lookup per new flow).
    public struct PortSet: Sendable, Equatable {
        private var bits: [UInt64]
        public init(_ ports: [UInt16]) {
            bits = [UInt64](repeating: 0, count: 1024)
            for p in ports { bits[Int(p) >> 6] |= 1 << (UInt64(p) & 63) }
        }
        @inline(__always)
        public func contains(_ p: UInt16) -> Bool { bits[Int(p) >> 6] & (1 << (UInt64(p) & 63)) != 0 }
        public var ports: [UInt16] { (0...65535).compactMap { contains(UInt16($0)) ? UInt16($0) : nil } }
    }
}

extension TCPFlow: ByteStreamEvents {
    /// How the flow's route is decided.
    enum Sniff: UInt8 {
        /// By address, before lwIP sees the SYN (sniffing off, an excluded port).
        case off
        /// lwIP has the SYN; the outbound waits for the first bytes.
        case waiting
        /// Sniffed (or given up): the outbound is dialled; the lwIP end is attached when it connects.
        case dialled
    }

    /// A sniffed flow starts: lwIP takes the SYN now. `routed`: the outbound when no name can
    /// change the route (nil: routed once sniffed).
    func startSniffing(routed: Outbound?) {
        sniff = .waiting
        self.routed = routed
        // lwIP's handshake with the app gets the connect timeout, as a dial would.
        sniffTimer = table.loop.schedule(after: table.settings.connectTimeoutMs) { [weak self] in
            guard let self, self.state == .handshaking else { return }
            self.sniffTimer = .none
            self.table.flowFailed(self)
            self.abort()
        }
    }

    /// lwIP accepted: read the first bytes, for at most the wait.
    func beginSniffing() {
        cancelSniffTimer()
        sniffTimer = table.loop.schedule(after: table.settings.sniff.waitMs) { [weak self] in
            guard let self, self.sniff == .waiting else { return }
            self.sniffTimer = .none
            self.table.stack.tally.sniffTimedOut &+= 1
            self.conclude(name: nil, source: .none)
        }
        events = self
        setReadInterest(true)
    }

    func cancelSniffTimer() {
        if sniffTimer != .none { table.loop.cancel(sniffTimer) }
        sniffTimer = .none
    }

    /// The app's bytes so far (left in lwIP's pbufs), copied into the stack's scratch and parsed.
    private func sniffStep() {
        guard sniff == .waiting else { return }
        let scratch = table.stack.sniffScratch
        var copied = 0
        var ended = false
        withUnsafeTemporaryAllocation(of: iovec.self, capacity: 64) { iov in
            var count = 0
            switch peek(iov.baseAddress!, max: 64, count: &count) {
            case .data?:
                for i in 0..<count where copied < scratch.count {
                    let n = min(iov[i].iov_len, scratch.count - copied)
                    (scratch.baseAddress! + copied).copyMemory(from: iov[i].iov_base!, byteCount: n)
                    copied += n
                }
                ended = appHasFinished
            case .eof?: ended = true
            default: break  // a failure: streamFailed follows
            }
        }
        let (result, source) = StreamSniffer.sniff(UnsafeRawBufferPointer(rebasing: scratch[0..<copied]))
        switch result {
        case .name(let n):
            table.stack.tally.sniffed &+= 1
            conclude(name: n, source: source)
        case .needMore where !ended && copied < scratch.count:
            return
        default:
            table.stack.tally.notSniffable &+= 1
            conclude(name: nil, source: .none)
        }
    }

    /// Routes (by name and address) and dials; the lwIP end waits, its bytes unread.
    private func conclude(name: String?, source: NameSource) {
        cancelSniffTimer()
        setReadInterest(false)
        sniff = .dialled
        // Nothing sniffed: a name from a DNS answer routes it, if loft saw one (never dialled).
        if name == nil, let n = table.stack.dnsNames?.name(for: key.destination.address, now: table.loop.now) {
            self.name = n
            nameSource = .dns
        } else {
            self.name = name
            nameSource = source
        }
        let outbound: Outbound
        if let routed {
            outbound = routed
            self.routed = nil
        } else {
            let match = table.stack.router.route(FlowRequest(network: .tcp, source: key.source, destination: .ip(key.destination),
                                                             name: self.name))
            table.countRule(match.rule)
            ruleIndex = match.rule
            switch match.decision {
            case .drop:
                table.stack.drop(.rule, key.netif)
                self.abort()
                return
            case .outbound(let o):
                outbound = o
            }
        }
        outboundName = outbound.name
        if let name, outbound.dialsSniffedNames {
            splice.dial(outbound, to: .domain(name, key.destination.port))
        } else {
            splice.dial(outbound, to: .ip(key.destination))
        }
    }

    // MARK: the lwIP end's events while it waits (the splice takes them once attached)

    func streamConnected(_ stream: ByteStream) {}
    func streamWritable(_ stream: ByteStream) {}
    func streamReadable(_ stream: ByteStream) { sniffStep() }

    /// The app reset (or lwIP gave up) before the flow relays.
    func streamFailed(_ stream: ByteStream, _ failure: FlowFailure) {
        events = nil
        splice.reset()
        finish()
    }
}

/// A new UDP conversation whose first datagrams look like a QUIC client's Initials: held (copied,
/// at most `maxDatagrams`) until they name the host, show they will not, or the wait ends; then
/// routed by name and address and sent on, in order. The datagrams go to the address the app
/// used (a reply must come from it); the name routes.
final class UDPSniff {
    /// Conversations waiting at once; past it new ones are routed by address.
    static let maxWaiting = 1024
    /// Datagrams held per conversation (a ClientHello in a few Initials).
    static let maxDatagrams = 8

    unowned let stack: Netstack
    let conversation: UDPConversation
    private var held: [[UInt8]] = []
    private var sniffer = QUICSniffer()
    private var timer = TimerHandle.none

    init(stack: Netstack, conversation: UDPConversation) {
        self.stack = stack
        self.conversation = conversation
        timer = stack.loop.schedule(after: stack.settings.sniff.waitMs) { [weak self] in
            guard let self else { return }
            self.timer = .none
            self.stack.tally.sniffTimedOut &+= 1
            self.finish(name: nil)
        }
    }

    func take(_ datagram: UnsafeRawBufferPointer) {
        held.append(Array(datagram))
        switch sniffer.take(datagram) {
        case .name(let n):
            stack.tally.sniffed &+= 1
            finish(name: n)
        case .needMore where held.count < Self.maxDatagrams:
            return
        default:
            stack.tally.notSniffable &+= 1
            finish(name: nil)
        }
    }

    /// Routed: the held datagrams go out in order; the conversation is an association's now.
    func finish(name: String?) {
        if timer != .none { stack.loop.cancel(timer) }
        timer = .none
        stack.flows.udpSniffs[conversation] = nil
        guard let assoc = stack.udpAssociation(for: conversation, name: name, source: .quic) else { return }
        for d in held { d.withUnsafeBytes { stack.udpSend($0, assoc, to: conversation.destination) } }
        held = []
    }
}

extension Netstack {
    /// Starts holding a new conversation's datagrams when its first is a QUIC client Initial (v1
    /// or v2, padded to 1200 bytes as RFC 9000 §14.1 requires) and a name could route it.
    func startUDPSniff(_ conversation: UDPConversation, _ payload: UnsafeRawBufferPointer) -> Bool {
        guard payload.count >= 1200, payload[0] & 0xC0 == 0xC0,
              !settings.sniff.skipPorts.contains(conversation.destination.port),
              flows.udpSniffs.count < UDPSniff.maxWaiting else { return false }
        let version = UInt32(payload[1]) << 24 | UInt32(payload[2]) << 16 | UInt32(payload[3]) << 8 | UInt32(payload[4])
        guard version == QUICInitial.version1 || version == QUICInitial.version2,
              router.nameMayDecide(FlowRequest(network: .udp, source: conversation.source,
                                               destination: .ip(conversation.destination))) else { return false }
        let s = UDPSniff(stack: self, conversation: conversation)
        flows.udpSniffs[conversation] = s
        s.take(payload)
        return true
    }
}
