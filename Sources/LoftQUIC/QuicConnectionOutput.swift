import CNgtcp2
import Glibc
import LoftCore
import LoftIO
import LoftTLS

/// QuicConnection's packets out: ngtcp2's packets gathered into UDP batches (one GSO send per
/// batch, paced by `QuicPacer`), the anti-amplification cut on a server, and the deadline
/// on the loop's timer heap.
extension QuicConnection {
    // MARK: packets out

    /// Packets per flush at most; then a timer for the next loop turn.
    package static let burst = 64

    package func flush() {
        guard let conn, !closed, !blockedOnSocket else { return }
        let now = loop.nanoseconds
        var to = sockaddr_storage()
        var toLen: socklen_t = 0
        let maxPkt = max(1200, cngtcp2_max_packet(conn))
        defer { _ = sendBatch() }
        let rate = cngtcp2_pacing_rate(conn)
        pacer.fill(now: now, rate: rate, packet: maxPkt)
        var budget = min(Self.burst, pacer.packets(of: maxPkt))
        // With the bucket empty only acknowledgments and control frames go (one packet).
        let paced = budget == 0
        if paced { budget = 1 }
        var more = paced && !outDatagrams.isEmpty
        // Datagrams first: they are small and time-sensitive.
        while !outDatagrams.isEmpty && budget > 0 && !paced {
            guard roomInBatch(maxPkt) else { return }
            var accepted: Int32 = 0
            let d = outDatagrams[0]
            let n = d.withUnsafeBytes { db in
                    cngtcp2_write_datagram(conn, (out + outUsed).assumingMemoryBound(to: UInt8.self), maxPkt,
                                         db.baseAddress?.assumingMemoryBound(to: UInt8.self), db.count, &accepted, &to, &toLen, now)
            }
            if n < 0 { outDatagrams.removeFirst(); pendingDatagramBytes -= d.count; datagramsDropped += 1; continue }
            if n == 0 { break }
            if accepted != 0 { outDatagrams.removeFirst(); pendingDatagramBytes -= d.count }
            budget -= 1
            pacer.spend(n)
            if !queue(n, to, toLen) { return }
        }
        var qi = 0
        while budget > 0 {
            // The next stream with something to send, round robin.
            var s: QuicStreamState?
            while qi < sendQueue.count {
                if let c = stream(sendQueue[qi]), c.hasSendWork { s = c; break }
                streams[sendQueue[qi]]?.inSendQueue = false
                sendQueue.remove(at: qi)
            }
            if paced && s != nil {
                more = true
                s = nil
            }
            var iov = (cngtcp2_vec(), cngtcp2_vec())
            var count = 0
            var fin: Int32 = 0
            if let s {
                let cap = UInt64(s.ringCap)
                let start = Int(s.sent % cap)
                let len = s.unsent
                let first = min(len, s.ringCap - start)
                if len > 0 {
                    iov.0 = cngtcp2_vec(base: UnsafePointer((s.ring! + start).assumingMemoryBound(to: UInt8.self)), len: first)
                    count = 1
                    if first < len { iov.1 = cngtcp2_vec(base: UnsafePointer(s.ring!.assumingMemoryBound(to: UInt8.self)), len: len - first); count = 2 }
                }
                fin = s.finQueued ? 1 : 0
            }
            var consumed = -1
            let sid = s?.id ?? -1
            guard roomInBatch(maxPkt) else { return }
            let dest = (out + outUsed).assumingMemoryBound(to: UInt8.self)
            let n = withUnsafePointer(to: &iov) { ip in
                ip.withMemoryRebound(to: cngtcp2_vec.self, capacity: 2) { v in
                    cngtcp2_write_stream(conn, dest, maxPkt, sid, v, count, fin, s != nil ? 1 : 0, &consumed, &to, &toLen, now)
                }
            }
            if let s, consumed >= 0 {
                s.sent += UInt64(consumed)
                if fin != 0 && s.sent == s.end { s.finSent = true }
            }
            if n == CNGTCP2_ERR_WRITE_MORE {
                // The packet has room for the next stream's bytes (or is finished with none).
                qi += 1
                continue
            }
            if n == CNGTCP2_ERR_STREAM_DATA_BLOCKED {
                s?.blocked = true
                continue
            }
            if n == CNGTCP2_ERR_STREAM_SHUT_WR || n == CNGTCP2_ERR_STREAM_NOT_FOUND {
                s?.sendClosed = true
                continue
            }
            if n < 0 {
                failed(Int32(n))
                return
            }
            if n == 0 { break }
            budget -= 1
            pacer.spend(n)
            if !queue(n, to, toLen) { return }
            if let s, s.hasSendWork { qi = (qi + 1) % max(1, sendQueue.count) } else { qi = 0 }
            if budget == 0 && sendQueue.contains(where: { streams[$0]?.hasSendWork == true }) { more = true }
        }
        if closingGracefully && streams.values.allSatisfy({ $0.acked == $0.end }) {
            guard sendBatch() else { return }
            sendCloseNow()
            return
        }
        if more {
            if pacer.packets(of: maxPkt) > 0 {
                // Yield a loop turn (epoll runs) and go on.
                loop.schedule(at: loop.now) { [weak self] in self?.flush() }
            } else {
                loop.schedule(after: pacer.waitMs(packet: maxPkt, rate: rate)) { [weak self] in self?.flush() }
            }
        }
        armTimer()
    }

    func address(_ to: sockaddr_storage, _ toLen: socklen_t) -> SocketAddress {
        if toLen == 0 { return remote }
        var addr = SocketAddress()
        addr.storage = to
        addr.length = toLen
        return addr
    }

    /// The batch has room for one more packet of `maxPkt` bytes (it is sent first if not);
    /// false when the socket is full.
    func roomInBatch(_ maxPkt: Int) -> Bool {
        if outUsed + maxPkt <= Self.batchBytes && outCount < Self.batchPackets { return true }
        return sendBatch()
    }

    /// The packet of `n` bytes just written at the end of the batch joins it: a packet for
    /// another address, or larger than the batch's segment, goes in a batch of its own; a
    /// shorter one ends the batch (only the last segment may be short).
    func queue(_ n: Int, _ to: sockaddr_storage, _ toLen: socklen_t) -> Bool {
        let addr = address(to, toLen)
        if outCount > 0 && (n > outSegment || !sameAddress(addr, outTo)) {
            let pkt = out + outUsed
            guard sendBatch() else { return false }
            out.copyMemory(from: pkt, byteCount: n)
        }
        if outCount == 0 { outSegment = n; outTo = addr }
        outUsed += n
        outCount += 1
        if n < outSegment { return sendBatch() }
        return true
    }

    func sameAddress(_ a: SocketAddress, _ b: SocketAddress) -> Bool {
        guard a.length == b.length else { return false }
        return a.withSockaddr { pa, l in b.withSockaddr { pb, _ in memcmp(pa, pb, Int(l)) == 0 } }
    }

    /// Sends the batch (false: the socket is full and the connection waits for it).
    @discardableResult
    func sendBatch() -> Bool {
        guard outCount > 0, let sink else { outUsed = 0; outCount = 0; return true }
        if !addressValidated && !withinAmplificationLimit() { return true }
        let ok = sink.sendPackets(UnsafeRawBufferPointer(start: out, count: outUsed), segment: outSegment, to: outTo, from: self)
        outUsed = 0
        outCount = 0
        if !ok { blockedOnSocket = true }
        return ok
    }

    func armTimer() {
        guard let conn, !closed else { return }
        let exp = cngtcp2_expiry(conn)
        if exp == timerAt && timer != nil { return }
        if let timer { loop.cancel(timer); self.timer = nil }
        timerAt = exp
        guard exp != .max else { return }
        // ngtcp2's deadline is in the loop's nanoseconds: one less than 1 ms away runs on the
        // loop's next turn (see `schedule(atNanoseconds:)`).
        timer = loop.schedule(atNanoseconds: exp) { [weak self] in self?.expired() }
    }

    func expired() {
        timer = nil
        timerAt = .max
        guard let conn, !closed else { return }
        let rv = cngtcp2_expire(conn, loop.nanoseconds)
        if rv != 0 { failed(rv); return }
        dispatchEvents()
        flush()
    }

    /// Cuts the batch to the packets that fit within 3x what came in (all of them once the
    /// address is validated); the rest are dropped as if lost. False: nothing is left.
    func withinAmplificationLimit() -> Bool {
        if let conn, cngtcp2_address_validated(conn) != 0 {
            addressValidated = true
            return true
        }
        let fit = amplification.send(packets: outCount, segment: outSegment, bytes: outUsed)
        if fit == outCount { return true }
        if fit == 0 {
            outUsed = 0
            outCount = 0
            return false
        }
        outUsed = fit * outSegment
        outCount = fit
        return true
    }
}
