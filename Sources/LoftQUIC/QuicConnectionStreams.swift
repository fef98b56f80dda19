import CNgtcp2
import Glibc
import LoftCore
import LoftIO
import LoftTLS

/// QuicConnection's streams: open, write (in place or copied), read (in place, drained or
/// copied), finish, release, reset, the send budget shared by the flow streams, and the queue of
/// streams with bytes to send.
extension QuicConnection {
    // MARK: streams

    /// Opens a bidirectional stream of ours; nil when the peer allows no more now.
    package func openStream(ringCap: Int? = nil) -> Int64? {
        guard let conn, !closed else { return nil }
        var sid: Int64 = -1
        guard cngtcp2_open_bidi(conn, &sid) == 0 else { return nil }
        streams[sid] = QuicStreamState(id: sid, ringCap: ringCap ?? limits.sendBuffer)
        return sid
    }

    /// Opens a unidirectional stream of ours (h3's control and QPACK streams).
    package func openUniStream(ringCap: Int = 64 << 10) -> Int64? {
        guard let conn, !closed else { return nil }
        var sid: Int64 = -1
        guard cngtcp2_open_uni(conn, &sid) == 0 else { return nil }
        streams[sid] = QuicStreamState(id: sid, ringCap: ringCap)
        return sid
    }

    package var streamsLeft: UInt64 { conn.map { cngtcp2_streams_bidi_left($0) } ?? 0 }

    @inline(__always)
    func stream(_ id: Int64) -> QuicStreamState? {
        if let r = recent, r.id == id { return r }
        guard let s = streams[id] else { return nil }
        recent = s
        return s
    }

    /// Whether stream `id` is open and its owner still holds it.
    package func isLive(_ id: Int64) -> Bool { streams[id].map { !$0.released } ?? false }

    /// Copies up to the stream's free send buffer; returns the bytes taken.
    package func write(_ id: Int64, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard !closed, let s = stream(id) else { return 0 }
        var n = 0
        // At most two pieces: up to the ring's end, then from its start.
        while n < bytes.count {
            let space = writeSpace(s, max: bytes.count - n)
            guard space.count > 0 else { break }
            space.baseAddress!.copyMemory(from: bytes.baseAddress! + n, byteCount: space.count)
            commitWrite(s, space.count)
            n += space.count
        }
        return n
    }

    /// The stream's free send ring from its end, up to `max` bytes and the ring's wrap (the
    /// rest comes on the next call). Short of `max` because it is full: marked for
    /// `quicWritable`.
    package func writeSpace(_ id: Int64, max: Int) -> UnsafeMutableRawBufferPointer? {
        guard !closed, let s = stream(id) else { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
        return writeSpace(s, max: max)
    }

    /// `n` bytes at the end of the stream's ring (from `writeSpace`) are written.
    package func commitWrite(_ id: Int64, _ n: Int) {
        guard n > 0, !closed, let s = stream(id) else { return }
        commitWrite(s, n)
    }

    func writeSpace(_ s: QuicStreamState, max: Int) -> UnsafeMutableRawBufferPointer {
        let r = room(s)
        if r < max { s.wantWritable = true }
        guard r > 0 else { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
        if s.ring == nil { s.ring = .allocate(byteCount: s.ringCap, alignment: 16) }
        let at = Int(s.end % UInt64(s.ringCap))
        return UnsafeMutableRawBufferPointer(start: s.ring! + at, count: min(max, r, s.ringCap - at))
    }

    func commitWrite(_ s: QuicStreamState, _ n: Int) {
        if s.budgeted { heldTotal += n }
        s.end += UInt64(n)
        queueSend(s)
    }

    /// The stream's free send buffer; 0 marks the stream, so `quicWritable` follows once half of
    /// it is acknowledged (a writer that looks before it writes is woken as one that was refused).
    package func writeRoom(_ id: Int64) -> Int {
        guard let s = stream(id) else { return 0 }
        let r = room(s)
        if r == 0 { s.wantWritable = true }
        return r
    }

    /// The stream's free send buffer within the connection's send budget; a stream the budget
    /// cuts short waits for it (woken with `quicWritable` once a quarter of it is free).
    func room(_ s: QuicStreamState) -> Int {
        let r = s.room
        guard s.budgeted else { return r }
        let b = max(0, limits.sendBudget - heldTotal)
        guard b < r else { return r }
        if !s.waitsBudget {
            s.waitsBudget = true
            budgetWaiters.append(s.id)
        }
        return b
    }

    /// Held bytes left the budget: wake its waiters once a quarter of it is free.
    func budgetFreed() {
        guard !budgetWaiters.isEmpty, limits.sendBudget - heldTotal >= limits.sendBudget / 4 else { return }
        let ws = budgetWaiters
        budgetWaiters.removeAll()
        for sid in ws {
            guard let s = streams[sid] else { continue }
            s.waitsBudget = false
            s.wantWritable = false
            pendingWritable.append(sid)
        }
        dispatchSoon.schedule()
    }

    /// The stream's state goes (its held bytes leave the budget); a ring ngtcp2 may still read
    /// is retired until the stream closes.
    func forget(_ id: Int64) {
        guard let s = streams.removeValue(forKey: id) else { return }
        if recent === s { recent = nil }
        discardReceived(s)
        if !s.stackClosed && !closed && s.ring != nil && s.acked < s.end {
            retired[id] = s
            s.dropUnheldPages()
            return
        }
        if s.budgeted {
            heldTotal -= s.held
            budgetFreed()
        }
    }

    /// Ends our direction of the stream after the bytes written.
    package func finish(_ id: Int64) {
        guard let s = stream(id), !s.finQueued, !s.sendClosed else { return }
        s.finQueued = true
        queueSend(s)
    }

    /// Its owner is done with the stream (after `finish`): unread bytes are dropped, and the
    /// state goes once ngtcp2 has closed the stream (our FIN acknowledged).
    package func release(_ id: Int64) {
        guard let s = stream(id) else { return }
        s.released = true
        discardReceived(s)
        if s.stackClosed { forget(id) }
    }

    /// Drops the bytes a stream received that nobody will read, giving their credit back: they
    /// count against the peer's connection window (RFC 9000 section 4.5) and only reading
    /// them extends it. Kept, a released or reset flow's unread bytes would shrink the window
    /// for good, and enough of them stop every stream, the session stream's PINGs too.
    /// (Bytes ngtcp2 has not handed over yet it credits itself at the reset.)
    func discardReceived(_ s: QuicStreamState) {
        let n = s.recv.available - s.recvCredited
        s.recv.release()
        s.recvCredited = 0
        guard n > 0, let conn, !closed else { return }
        _ = cngtcp2_consumed(conn, s.id, UInt64(n))
        flushSoon.schedule()
    }

    /// RESET_STREAM and STOP_SENDING with `code`; the stream is forgotten.
    package func reset(_ id: Int64, code: UInt64) {
        guard let s = stream(id) else { return }
        forget(id)
        s.sendClosed = true
        if let conn, !closed { _ = cngtcp2_shutdown_stream(conn, id, code) }
        flushSoon.schedule()
    }

    /// The stream's received bytes in place, one piece (until `consume` or the next packet), and
    /// whether its FIN has been reached (no bytes left and the FIN received).
    package func peek(_ id: Int64, _ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> (Int, Bool) {
        guard let s = stream(id) else { return (0, true) }
        let b = s.recv.readable
        if let p = b.baseAddress, b.count > 0, max > 0 {
            iov[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: p), iov_len: b.count)
            count = 1
            return (b.count, false)
        }
        return (0, finReached(s))
    }

    /// `n` bytes of what `peek` showed were taken.
    package func consume(_ id: Int64, _ n: Int) {
        guard n > 0, let s = stream(id) else { return }
        s.recv.consume(n)
        consumed(s, n)
    }

    /// Hands up to `max` received bytes to `body` (h3: what a request's body buffer has room
    /// for); true once the FIN was reached.
    package func drain(_ id: Int64, upTo max: Int, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        guard let s = stream(id) else { return true }
        let n = s.recv.drain(upTo: max, body)
        if n > 0 { consumed(s, n) }
        return finReached(s)
    }

    // MARK: received bytes parsed in place (h3)

    /// The stream's received bytes in place, from its front (valid until the next packet, `drop`
    /// or release), and whether its FIN was received (it is reached once they are all dropped).
    package func received(_ id: Int64) -> (UnsafeRawBufferPointer, Bool) {
        guard let s = stream(id) else { return (UnsafeRawBufferPointer(start: nil, count: 0), true) }
        return (s.recv.readable, s.recvFin)
    }

    /// `n` more of the received bytes (after those credited already) were taken by the layer
    /// above, which keeps them here: the peer may send that much more.
    package func credit(_ id: Int64, _ n: Int) {
        guard n > 0, let s = stream(id) else { return }
        s.recvCredited += n
        consumed(s, n)
    }

    /// `n` credited bytes leave the front; true once the FIN was reached.
    package func drop(_ id: Int64, _ n: Int) -> Bool {
        guard let s = stream(id) else { return true }
        let k = min(n, s.recvCredited)
        s.recv.consume(k)
        s.recvCredited -= k
        return finReached(s)
    }

    /// Every received byte was read and the FIN came: the reader has its EOF.
    func finReached(_ s: QuicStreamState) -> Bool {
        guard s.recvAvailable == 0 && s.recvFin else { return false }
        s.recvFinDelivered = true
        maybeForget(s)
        return true
    }

    /// `n` bytes of the stream were read: the peer may send that much more.
    func consumed(_ s: QuicStreamState, _ n: Int) {
        if let conn, !closed {
            _ = cngtcp2_consumed(conn, s.id, UInt64(n))
            flushSoon.schedule()
        }
    }

    func maybeForget(_ s: QuicStreamState) {
        if s.recvFinDelivered && (s.stackClosed || (s.finSent && s.acked == s.end)) { forget(s.id) }
    }

    func queueSend(_ s: QuicStreamState) {
        if !s.inSendQueue {
            s.inSendQueue = true
            sendQueue.append(s.id)
        }
        flushSoon.schedule()
    }
}
