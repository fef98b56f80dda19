import CLwIP
import LoftCore
import LoftIO
import LoftSniff

/// One TCP connection from an app: the SYN held until the outbound connects, then lwIP's side
/// (this object is that `LwipStream` too, once lwIP accepts) spliced to the outbound stream.
/// The bytes, backpressure, half-close and resets are the splice's, the idle deadline the flow
/// table's (its activity list); this is the flow's table entry, its handshake and its lwIP
/// end, in one allocation. It reports to its `FlowTable` (bytes moved, connected, failed,
/// finished) and queues its lwIP events on the stack's `StreamBatch`: nothing else of the stack.
final class TCPFlow: LwipStream, SpliceOwner, ActivityListed, TableKeyed {
    enum State: UInt8 { case connecting, handshaking, open, closed }

    let key: FlowKey
    /// The rule that decided the flow (-1: the default). Small fields together, after the key:
    /// the object is one allocation per flow, and padding counts at 10k flows.
    private var rule: Int32 = -1
    var ruleIndex: Int {
        get { Int(rule) }
        set { rule = Int32(clamping: newValue) }
    }
    /// The flow's id in `loft status --flows` (and `loft capture --flow`).
    let id: UInt32
    /// The app's initial sequence number.
    let synSequence: UInt32
    /// The MSS the app announced (RFC 9293's default when it announced none).
    let appMSS: UInt16
    var state = State.connecting
    /// How the route is decided (sniffing, Sniffing.swift).
    var sniff = Sniff.off
    /// Where the name came from, and the name (nil: none).
    var nameSource = NameSource.none
    var name: String?
    /// A sniffed flow's outbound, when decided before its bytes (no name could change it).
    var routed: Outbound?
    /// A sniffed flow's deadline: lwIP's handshake, then the wait for the first bytes.
    var sniffTimer = TimerHandle.none
    var outboundName = ""
    private(set) var splice: Splice!
    /// LwipStream's driver: this flow's own splice (which it holds for its whole life), or the
    /// flow itself while it sniffs.
    private unowned(unsafe) var driver: ByteStreamEvents?
    override var events: ByteStreamEvents? {
        get { driver }
        set { driver = newValue }
    }
    /// The app's SYN, held until the outbound connects (so a refusal can be an RST to the SYN).
    private var heldSYN: [UInt8]
    let createdAt: UInt64
    /// Neighbours in the netstack's activity list (least recently active first).
    unowned(unsafe) var older: TCPFlow?
    unowned(unsafe) var newer: TCPFlow?

    var lastActivity: UInt64 { splice.lastActivity }
    var bytesUp: UInt64 { splice.bytesUp }
    var bytesDown: UInt64 { splice.bytesDown }
    var isHalfClosed: Bool { splice.isHalfClosed }
    var isRelaying: Bool { splice.isRelaying }

    /// Where the flow reports (not owned: the table owns the flow).
    unowned(unsafe) let table: FlowTable

    /// `hold`: the SYN waits for the outbound (not sniffed); otherwise lwIP takes it now.
    init(table: FlowTable, key: FlowKey, syn: UnsafeRawBufferPointer, hold: Bool, summary: PacketSummary, now: UInt64) {
        self.table = table
        self.key = key
        self.id = table.nextID()
        self.heldSYN = hold ? Array(syn) : []
        synSequence = summary.tcpSequence(syn)
        appMSS = TCPOptions.mss(inTCPHeader: UnsafeRawBufferPointer(rebasing: syn[summary.transportOffset...]))
            ?? (summary.version == 4 ? 536 : 1220)
        self.createdAt = now
        super.init(batch: table.stack.batch, pcb: nil)
        splice = Splice(loop: table.loop, owner: self, meter: table.stack.meter,
                        connectTimeoutMs: table.settings.connectTimeoutMs)
    }

    // MARK: the splice

    func spliceConnected(_ splice: Splice) {
        if sniff == .dialled {
            // Sniffed: lwIP's end is open, its first bytes still unread.
            guard state == .open else { return }
            splice.attach(self)
            return
        }
        guard state == .connecting else { return }
        state = .handshaking
        let syn = heldSYN
        heldSYN = []
        table.flowConnected(self, syn: syn)
    }

    func spliceFailed(_ splice: Splice, _ failure: FlowFailure) {
        table.flowFailed(self)
        Log.debug("flow.failed", ["src": key.source, "dst": key.destination, "reason": failure])
        // Still connecting: the app hears why, the way a kernel would tell it. Handshaking
        // (the connect deadline passed before the app completed lwIP's handshake): lwIP gives
        // up on its half-open connection by itself.
        if state == .connecting { answerSYN(failure) }
        reset()
        finish()
    }

    func spliceEnded(_ splice: Splice, _ ending: Splice.Ending) {
        finish()
    }

    func spliceMoved(_ splice: Splice) { if state != .closed { table.touch(self) } }

    /// Tells the app why its connect failed.
    private func answerSYN(_ failure: FlowFailure) {
        heldSYN.withUnsafeBytes { syn in
            // Parsed again (it parsed when it came): no summary kept per flow for this rare path.
            guard case .success(let synSummary) = PacketSummary.parse(syn, maxLength: 65535) else { return }
            let reply: [UInt8]
            switch failure {
            case .hostUnreachable:
                reply = PacketBuilder.unreachable(syn, summary: synSummary, kind: .host)
            case .networkUnreachable:
                reply = PacketBuilder.unreachable(syn, summary: synSummary, kind: .network)
            default:
                reply = PacketBuilder.resetForSYN(syn, summary: synSummary)
            }
            table.reply(reply, for: self)
        }
        heldSYN = []
    }

    // MARK: lwIP

    /// lwIP completed the handshake with the app: this flow is now its end of `pcb`.
    /// Bytes start moving after the batch of packets (`attach`), outside lwIP's accept
    /// callback, where the pcb must not be aborted.
    func accepted(_ pcb: OpaquePointer) {
        // Segments as large as the input's MTU and the app allow (lwIP alone stops at 1460);
        // on an input with offload 64 KiB ones, which the kernel cuts to the app's MSS.
        let (limit, offload) = table.segmentLimit(for: self)
        let mss = offload ? limit : min(appMSS, limit)
        if mss > 1460 { clwip_tcp_raise_mss(pcb, mss) }
        self.pcb = pcb
        payloadSummed = !offload
        state = .open
        batch.queueAccepted(self)
    }

    /// From the stream batch: the splice takes the lwIP end (holding it until the relay
    /// ends, as the flow holds the splice).
    func attach() {
        guard state == .open else { return }
        if sniff == .waiting { return beginSniffing() }
        splice.attach(self)
    }

    // MARK: ending

    /// Resets both sides (eviction, shutdown). Safe inside lwIP callbacks of other pcbs.
    func abort() {
        splice.reset()
        reset()
        finish()
    }

    func finish() {
        if sniff != .off { cancelSniffTimer() }
        guard state != .closed else { return }
        state = .closed
        table.remove(self)
    }
}
