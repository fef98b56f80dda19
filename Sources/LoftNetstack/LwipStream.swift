import CLwIP
import Glibc
import LoftCore

/// The app's side of one TCP flow, terminated in lwIP, as a `ByteStream`; or (`NetstackLink`)
/// a connection lwIP opened itself over a packet outbound's link (an active open).
///
/// - Reads are zero-copy: the pbufs lwIP delivered stay here until the other side has taken
///   their bytes (`peek` describes them as iovecs, `consume` frees them); only then does
///   `tcp_recved` open the app's window again, so a slow other side closes the window.
/// - Writes copy into lwIP's send buffer (`writeRoom` is its free space); when it is full,
///   `streamWritable` follows the ACKs that make room.
/// - Events reach the driver after the current batch of packets (queued on the stack's
///   `StreamBatch`, run by the loop's after-events hook), never from inside an lwIP callback,
///   except `streamFailed` (the pcb is gone by then).
///
/// A TUN flow's `TCPFlow` is one (one allocation per flow for its table entry, handshake and
/// lwIP end); an active open over a link is a `LinkStream`.
class LwipStream: ByteStream {
    /// The driver: a splice, or a TUN flow itself while it sniffs. Kept by each kind of end in
    /// its own way (`TCPFlow`: unowned(unsafe), since it is the flow's own splice or the flow;
    /// `LinkStream`: weak, any driver): a weak reference gives its target a side table, and
    /// then each event's load and every retain and release of the splice take the slow path.
    var events: ByteStreamEvents? {
        get { fatalError("LwipStream.events: kept by the subclass") }
        set { fatalError("LwipStream.events: kept by the subclass") }
    }
    /// Where this end queues its events for after the batch of packets (the stack's).
    unowned(unsafe) let batch: StreamBatch
    var pcb: OpaquePointer?
    /// App → remote bytes lwIP delivered that the driver has not consumed yet.
    private var pending: [OpaquePointer] = []
    /// The app's FIN arrived (after `pending`).
    private var appFinished = false
    var appHasFinished: Bool { appFinished }
    private var failure: FlowFailure?
    private var readInterest = true
    /// The driver found the send buffer full: tell it when ACKs make room.
    private var wantWritable = false
    var readableQueued = false
    var writableQueued = false
    var outputQueued = false
    /// false on an input with offload: lwIP does not sum the payload it copies (the TUN sends
    /// every segment with a partial checksum that the kernel completes).
    var payloadSummed = true
    /// An active open whose handshake has not completed (`streamConnected` follows it).
    var connecting = false
    private var connectedPending = false

    init(batch: StreamBatch, pcb: OpaquePointer?) {
        self.batch = batch
        self.pcb = pcb
    }

    deinit {
        releasePending()
        // Never left with callbacks pointing at a freed stream.
        if let pcb {
            clwip_tcp_abort(pcb)
        }
    }

    /// The stream let go of its pcb: lwIP freed it (`gone`) or finishes closing it.
    func pcbReleased(gone: Bool) {}

    // MARK: lwIP callbacks

    func received(_ p: OpaquePointer?) {
        if let p { pending.append(p) } else { appFinished = true }
        queueReadable()
    }

    func sent() {
        if wantWritable && !writableQueued {
            writableQueued = true
            batch.queueWritable(self)
        }
    }

    /// The pcb is gone (freed by lwIP). ERR_CLSD: the FIN exchange completed both ways, which
    /// the driver learns from the EOF it reads; anything else is a reset.
    func lwipFailed(_ err: Int32) {
        pcb = nil
        pcbReleased(gone: true)
        if err == -15 /* ERR_CLSD */ && !connecting { return }
        releasePending()
        // An active open: reset by the server (ERR_RST) is a refusal; lwIP giving up on its
        // SYN retransmissions (ERR_ABRT) a timeout.
        let f: FlowFailure = !connecting ? .other(ECONNRESET) : err == -14 ? .refused : err == -13 ? .timedOut : .other(ECONNRESET)
        connecting = false
        failure = f
        events?.streamFailed(self, f)
    }

    /// The active open's handshake completed (inside lwIP: reported after the batch).
    func connected() {
        guard connecting else { return }
        connecting = false
        connectedPending = true
        if !writableQueued {
            writableQueued = true
            batch.queueWritable(self)
        }
    }

    /// The link went away under an active open: its pcb is aborted, the driver told once.
    func linkLost(_ f: FlowFailure) {
        guard failure == nil else { return }
        releasePending()
        if let pcb {
            self.pcb = nil
            clwip_tcp_abort(pcb)
        }
        connecting = false
        failure = f
        events?.streamFailed(self, f)
    }

    private func queueReadable() {
        guard readInterest, !readableQueued else { return }
        readableQueued = true
        batch.queueReadable(self)
    }

    /// From the stream batch.
    func deliverReadable() {
        readableQueued = false
        if readInterest { events?.streamReadable(self) }
    }

    func deliverWritable() {
        writableQueued = false
        if connectedPending {
            connectedPending = false
            if failure == nil { events?.streamConnected(self) }
        }
        guard wantWritable else { return }
        wantWritable = false
        events?.streamWritable(self)
    }

    func flushOutput() {
        outputQueued = false
        if let pcb { clwip_tcp_output(pcb) }
    }

    private func queueOutput() {
        guard !outputQueued else { return }
        outputQueued = true
        batch.queueOutput(self)
    }

    // MARK: ByteStream

    var writeRoom: Int {
        guard let pcb else { return Int.max }  // write() reports the broken stream
        let room = Int(clwip_tcp_sndbuf(pcb))
        if room == 0 { wantWritable = true }
        return room
    }

    /// lwIP's send queue: written, not yet sent or not yet acknowledged by the app.
    var heldBytes: Int { pcb.map { Int(clwip_tcp_queued($0)) } ?? 0 }

    /// The app's next ACK (lwIP's sent callback) brings a streamWritable.
    func notifyWhenTaken() { if pcb != nil { wantWritable = true } }

    func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard let pcb, failure == nil else { return -1 }
        var total = 0
        outer: for i in 0..<count {
            var base = segments[i].iov_base
            var left = segments[i].iov_len
            while left > 0 {
                let room = Int(clwip_tcp_sndbuf(pcb))
                let n = min(left, room, 0xFFFF)
                if n == 0 || clwip_tcp_write(pcb, base, UInt32(n), payloadSummed ? 1 : 0) != 0 {
                    wantWritable = true
                    break outer
                }
                total += n
                left -= n
                base = base.map { $0 + n }
            }
        }
        if total > 0 { queueOutput() }
        return total
    }

    func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        if let failure { return .failed(failure) }
        guard !pending.isEmpty else { return appFinished ? .eof : .wouldBlock }
        count = Int(pending.withUnsafeBufferPointer { chains in
            clwip_pbuf_iovecs(chains.baseAddress!.withMemoryRebound(to: OpaquePointer?.self, capacity: chains.count) { $0 },
                              Int32(chains.count), iov, Int32(max))
        })
        var total = 0
        for i in 0..<count { total += iov[i].iov_len }
        return .data(total)
    }

    func consume(_ n: Int) {
        var left = n
        while left > 0, let head = pending.first {
            let total = Int(clwip_pbuf_total(head))
            if left >= total {
                clwip_pbuf_free(head)
                pending.removeFirst()
                left -= total
            } else {
                pending[0] = clwip_pbuf_consume(head, UInt16(left))!
                left = 0
            }
        }
        if let pcb, n > 0 { clwip_tcp_recved(pcb, UInt32(n)) }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        if let failure { return .failed(failure) }
        guard let head = pending.first else { return appFinished ? .eof : .wouldBlock }
        let n = Int(clwip_pbuf_copy(head, buffer.baseAddress, UInt16(clamping: buffer.count)))
        consume(n)
        return .data(n)
    }

    func setReadInterest(_ on: Bool) {
        readInterest = on
        if on && (!pending.isEmpty || appFinished) { queueReadable() }
    }

    func shutdownWrite() {
        guard let pcb else { return }
        _ = clwip_tcp_shutdown_write(pcb)
        queueOutput()
    }

    /// Hands the pcb to lwIP to finish the FIN exchange (never from inside its callbacks: the
    /// driver calls it from loop events and the stream batch).
    func close() {
        releasePending()
        if let pcb {
            self.pcb = nil
            clwip_tcp_close(pcb)
            // lwIP finishes the FIN exchange (a link keeps feeding it the server's segments).
            pcbReleased(gone: false)
        }
    }

    func reset() {
        releasePending()
        if let pcb {
            self.pcb = nil
            clwip_tcp_abort(pcb)
            pcbReleased(gone: true)
        }
    }

    private func releasePending() {
        for p in pending { clwip_pbuf_free(p) }
        pending.removeAll()
    }
}
