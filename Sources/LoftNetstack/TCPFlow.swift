import CLwIP
import Glibc
import LoftCore

/// One TCP connection from an app, terminated in lwIP, joined to one outbound stream.
///
/// Flow control, both ways:
/// - app → remote: lwIP's pbufs stay queued here until the outbound has taken them; only then
///   `tcp_recved` opens the app's window again, so a slow outbound closes the window.
/// - remote → app: the outbound is read only while lwIP's send buffer has room; reads pause
///   (outbound read interest off) and resume when lwIP reports acknowledged bytes.
final class TCPFlow: ByteStreamEvents {
    enum State { case connecting, handshaking, open, closed }

    unowned let stack: Netstack
    let key: FlowKey
    var state = State.connecting
    var connection: ByteStream?
    var outboundName = ""
    var ruleIndex = -1
    /// The app's SYN, held until the outbound connects (so a refusal can be an RST to the SYN).
    private var heldSYN: [UInt8]
    private let synSummary: PacketSummary
    private var pcb: OpaquePointer?
    /// App → remote bytes lwIP delivered that the outbound has not taken yet.
    private var pending: [OpaquePointer] = []
    /// Remote → app bytes lwIP refused (queue full); sent before anything else.
    private var stash: [UInt8] = []
    private var appFinished = false        // FIN from the app seen
    private var appFinForwarded = false    // … and passed on (shutdownWrite)
    private var remoteFinished = false     // EOF from the outbound seen and FIN queued in lwIP
    private var closeQueued = false
    var isHalfClosed: Bool { appFinished || remoteFinished }
    let createdAt: UInt64
    var lastActivity: UInt64
    var bytesUp: UInt64 = 0
    var bytesDown: UInt64 = 0

    init(stack: Netstack, key: FlowKey, syn: [UInt8], summary: PacketSummary, now: UInt64) {
        self.stack = stack
        self.key = key
        self.heldSYN = syn
        self.synSummary = summary
        self.createdAt = now
        self.lastActivity = now
    }

    // MARK: outbound events

    func streamConnected() {
        guard state == .connecting else { return }
        // Remote data waits until lwIP has accepted the app's side.
        connection?.setReadInterest(false)
        state = .handshaking
        let syn = heldSYN
        heldSYN = []
        stack.inject(syn, netif: key.netif, port: key.destination.port)
    }

    func streamFailed(_ failure: FlowFailure) {
        guard state == .connecting || state == .handshaking else { return }
        stack.counters.tcpFlowsFailed &+= 1
        Log.debug("flow.failed", ["src": key.source, "dst": key.destination, "reason": failure])
        if state == .connecting { answerSYN(failure) } else { abort() }
        finish()
    }

    /// Tells the app why its connect failed, the way a kernel would.
    private func answerSYN(_ failure: FlowFailure) {
        heldSYN.withUnsafeBytes { syn in
            let reply: [UInt8]
            switch failure {
            case .hostUnreachable:
                reply = PacketBuilder.unreachable(syn, summary: synSummary, kind: .host)
            case .networkUnreachable:
                reply = PacketBuilder.unreachable(syn, summary: synSummary, kind: .network)
            default:
                reply = PacketBuilder.resetForSYN(syn, summary: synSummary)
            }
            stack.send(reply, netif: key.netif)
        }
        heldSYN = []
    }

    func connectTimedOut() {
        if state == .connecting {
            stack.counters.tcpFlowsFailed &+= 1
            answerSYN(.timedOut)
            connection?.reset()
            finish()
        } else {
            abort()
        }
    }

    func streamReadable() {
        guard state == .open, let pcb, !remoteFinished else {
            connection?.setReadInterest(false)
            return
        }
        if !stash.isEmpty { flushStash(); if !stash.isEmpty { pauseReads(); return } }
        var wrote = false
        // A few reads per wake-up: enough to fill the send buffer, bounded for fairness.
        for _ in 0..<4 {
            let room = Int(clwip_tcp_sndbuf(pcb))
            if room == 0 {
                pauseReads()
                break
            }
            let want = min(room, stack.scratch.count, 0xFFFF)
            guard let conn = connection else { return }
            let r = conn.read(into: UnsafeMutableRawBufferPointer(rebasing: stack.scratch[0..<want]))
            switch r {
            case .data(let n):
                lastActivity = stack.loop.now
                bytesDown &+= UInt64(n)
                stack.counters.tcpBytesDown &+= UInt64(n)
                if clwip_tcp_write(pcb, stack.scratch.baseAddress, UInt32(n)) != 0 {
                    stash.append(contentsOf: UnsafeRawBufferPointer(rebasing: stack.scratch[0..<n]))
                    pauseReads()
                    clwip_tcp_output(pcb)
                    return
                }
                wrote = true
                // Read again even after a short read: when the remote sent its last bytes and
                // FIN together, the EOF is there now, and the FIN must leave with the data.
                // An app that closes as soon as it has its answer would otherwise close first
                // and keep the TIME_WAIT (its ports run out under Connection: close load).
                continue
            case .wouldBlock:
                // Drained: from now on the loop says when the outbound has more.
                readsPaused = false
                connection?.setReadInterest(true)
            case .eof:
                remoteFinished = true
                connection?.setReadInterest(false)
                _ = clwip_tcp_shutdown_write(pcb)
                clwip_tcp_output(pcb)
                finishIfDone()
                return
            case .failed:
                // The remote reset or broke: reset the app's side too.
                abort()
                return
            }
            break
        }
        if wrote { clwip_tcp_output(pcb) }
    }

    /// lwIP's send buffer is full: stop the loop reporting the outbound readable. The flow
    /// reads again itself once acknowledged bytes make room (`sent`), so a bulk download whose
    /// outbound always has data never touches the loop's interest set.
    private var readsPaused = false

    private func pauseReads() {
        readsPaused = true
        connection?.setReadInterest(false)
    }

    /// After a batch of packets (Netstack.afterEvents): ACKs made room, read the outbound.
    private var readQueued = false

    func readAfterAcks() {
        readQueued = false
        guard readsPaused else { return }
        streamReadable()
    }

    private func flushStash() {
        guard let pcb else { return }
        let room = Int(clwip_tcp_sndbuf(pcb))
        let n = min(room, stash.count)
        guard n > 0 else { return }
        let ok = stash.withUnsafeBytes { clwip_tcp_write(pcb, $0.baseAddress, UInt32(n)) == 0 }
        if ok {
            stash.removeFirst(n)
            clwip_tcp_output(pcb)
        }
    }

    func streamWritable() {
        flushPending()
        if pending.isEmpty && appFinished && !appFinForwarded {
            appFinForwarded = true
            connection?.shutdownWrite()
            finishIfDone()
        }
    }

    // MARK: lwIP events

    func accepted(_ pcb: OpaquePointer) {
        self.pcb = pcb
        state = .open
        lastActivity = stack.loop.now
        connection?.setReadInterest(true)
    }

    /// Returns true when the pcb was aborted inside this callback.
    func received(_ p: OpaquePointer?) -> Bool {
        lastActivity = stack.loop.now
        guard let p else {
            appFinished = true
            markDirty()
            return false
        }
        let len = UInt64(clwip_pbuf_total(p))
        bytesUp &+= len
        stack.counters.tcpBytesUp &+= len
        pending.append(p)
        // Written after the current batch of packets: one writev for many segments.
        markDirty()
        return false
    }

    private var dirty = false

    private func markDirty() {
        if !dirty {
            dirty = true
            stack.dirtyFlows.append(self)
        }
    }

    /// After a batch: hands queued app bytes to the outbound, then a pending FIN.
    func drainToOutbound() {
        dirty = false
        guard state == .open else { return }
        if flushPending() { return }
        if pending.isEmpty && appFinished && !appFinForwarded {
            appFinForwarded = true
            connection?.shutdownWrite()
            finishIfDone()
        }
    }

    /// Writes queued app bytes to the outbound; returns true if the flow had to be aborted.
    @discardableResult
    private func flushPending() -> Bool {
        guard let conn = connection, let pcb else { return false }
        while !pending.isEmpty {
            var iov = (iovec(), iovec(), iovec(), iovec(), iovec(), iovec(), iovec(), iovec(),
                       iovec(), iovec(), iovec(), iovec(), iovec(), iovec(), iovec(), iovec())
            let written: Int = withUnsafeMutableBytes(of: &iov) { raw in
                let base = raw.baseAddress!.assumingMemoryBound(to: iovec.self)
                let n = pending.withUnsafeBufferPointer { chains in
                    clwip_pbuf_iovecs(chains.baseAddress!.withMemoryRebound(to: OpaquePointer?.self, capacity: chains.count) { $0 },
                                      Int32(chains.count), base, 16)
                }
                return conn.write(base, count: Int(n))
            }
            if written < 0 {
                abort()
                return true
            }
            if written == 0 { return false }
            var left = written
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
            clwip_tcp_recved(pcb, UInt32(written))
        }
        return false
    }

    func sent(_ len: Int) {
        lastActivity = stack.loop.now
        // Once per batch of ACKs, after it: one read fills the room they all made.
        if readsPaused && !readQueued && !remoteFinished && state == .open {
            readQueued = true
            stack.readableFlows.append(self)
        }
    }

    func lwipFailed(_ err: Int32) {
        // The pcb is already freed by lwIP.
        pcb = nil
        releasePending()
        if err == -15 /* ERR_CLSD: our FIN exchange completed */ && remoteFinished {
            if !appFinForwarded { connection?.shutdownWrite() }
            connection?.close()
        } else {
            connection?.reset()
        }
        connection = nil
        finish()
    }

    // MARK: ending

    private func finishIfDone() {
        if appFinForwarded && remoteFinished && !closeQueued {
            closeQueued = true
            stack.finishing.append(self)
        }
    }

    /// Outside lwIP callbacks: hand the pcb to lwIP to finish the FIN exchange, close the outbound.
    func completeClose() {
        if let pcb {
            clwip_tcp_close(pcb)
            self.pcb = nil
        }
        connection?.close()
        connection = nil
        finish()
    }

    /// Resets both sides. Safe inside callbacks (the caller returns ERR_ABRT).
    func abort() {
        if let pcb {
            self.pcb = nil
            clwip_tcp_abort(pcb)
        }
        releasePending()
        connection?.reset()
        connection = nil
        finish()
    }

    private func releasePending() {
        for p in pending { clwip_pbuf_free(p) }
        pending.removeAll()
    }

    private func finish() {
        state = .closed
        stack.remove(self)
    }
}
