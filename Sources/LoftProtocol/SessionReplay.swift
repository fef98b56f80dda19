import LoftCore

/// Replay (docs/protocol.md §8.1): each end numbers the bytes of its session byte stream (every
/// frame after the handshake), keeps what it sent until the peer acknowledges it (ACK, or the
/// count in RESUME / STATUS), and after a RESUME sends again only what the peer has not got.
/// The kept bytes stay in `output` where they were queued: nothing is copied aside.
extension SessionEngine {
    /// ACK at most once per this many received bytes (and at a tick for the rest).
    static let ackEvery: UInt64 = 256 << 10
    /// Emptied pieces kept for the next writes, so a steady stream reuses a few pieces instead
    /// of allocating (and growing) one per segment.
    static let maxSpares = 2

    /// The output is sent in full: it is kept as it is, a fresh queue takes the next writes.
    func keepSentOutput() {
        kept.append(output)
        keptBytes += output.count
        if let s = spares.popLast() {
            output = s
        } else {
            // A fresh piece holds a whole segment and the frame that ends it without growing
            // (growing an array copies what it holds).
            output = ByteQueue()
            output.reserveCapacity(segmentBytes + LoftWire.maxFrameSize)
        }
        sentCount = 0
    }

    /// Forgets every replay position: a session that starts over.
    func resetReplay() {
        retaining = false; replay = false
        sentCount = 0; outBase = 0
        kept.removeAll(); keptBytes = 0
        inOffset = 0; ackSent = 0; lastAck = 0; ackOnlySince = 0
        countingInput = false; streamStartPending = false
        preamble.removeAll()
        outputHeld = false; parked = false
        stash = nil
    }

    /// A handshake frame, sent before the session's byte stream and not counted in it.
    func queuePreamble(_ frame: Frame) throws(ProtocolError) {
        try FrameEncoder.encode(frame, into: &preamble)
        counters.framesOut += 1
        queuedSinceSignal = true
    }

    /// The handshake frame being handled ends the handshake: input after it counts.
    func startStreamInput() { streamStartPending = true }

    /// Called by the input loop right after the handshake frame: the bytes after it in this
    /// piece are the first of the stream; a parser state stashed at a continuing attach goes on.
    func enterStream(after rest: UnsafeRawBufferPointer) {
        streamStartPending = false
        countingInput = true
        inOffset &+= UInt64(rest.count)
        if let s = stash {
            stash = nil
            if !s.partial.isEmpty {
                if partial == nil { partial = UnsafeMutableRawPointer.allocate(byteCount: LoftWire.maxFrameSize, alignment: 8) }
                s.partial.withUnsafeBytes { partial!.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            }
            partialCount = s.partial.count
            dataStream = s.stream; dataRemaining = s.remaining; dataLength = s.length
        }
    }

    /// The carrier is gone, the streams stay: per-carrier state is dropped, writes stop.
    func park() {
        parked = true
        outputHeld = true
        countingInput = false
        streamStartPending = false
        preamble.removeAll()
        resetKeepalive()
        queuedSinceSignal = false
    }

    /// A continuing attach (client): the parser's state in the middle of the peer's stream is
    /// put aside while the handshake is parsed from a clean start.
    func stashParser() {
        // A handshake that broke before its STATUS leaves the first stash as it was: what the
        // parser holds then is a piece of that STATUS, not of the stream.
        if stash == nil {
            let bytes = partialCount > 0 ? Array(UnsafeRawBufferPointer(start: partial!, count: partialCount)) : []
            stash = (bytes, dataStream, dataRemaining, dataLength)
        }
        partialCount = 0; dataRemaining = 0; dataLength = 0; dataStream = 0
    }

    /// The peer has `received` of our session bytes: they are released. It cannot have fewer
    /// than it acknowledged before, nor more than were sent.
    func release(to received: UInt64) throws(ProtocolError) {
        let sent = outBase &+ UInt64(keptBytes + sentCount)
        guard received >= outBase && received <= sent else {
            throw .replayOffset(claimed: received, acked: outBase, sent: sent)
        }
        var n = Int(received - outBase)
        guard n > 0 else { return }
        outBase = received
        while n > 0, !kept.isEmpty {
            let k = min(n, kept[0].count)
            kept[0].consume(k)
            keptBytes -= k
            n -= k
            if kept[0].isEmpty {
                var s = kept.removeFirst()
                s.removeAll(keepingCapacity: true)
                if spares.count < Self.maxSpares { spares.append(s) }
            }
        }
        if n > 0 {
            output.consume(n)
            sentCount -= n
        }
        unblockStreams()
    }

    /// A new carrier continues the session: what the peer has is released, the rest of what was
    /// sent goes again (counted in `replayedBytes`), and writes may go on.
    func resumeOutput(peerReceived: UInt64) throws(ProtocolError) {
        try release(to: peerReceived)
        counters.replayedBytes &+= UInt64(keptBytes + sentCount)
        counters.streamsContinued += 1
        if !kept.isEmpty {
            // Rare (a resume): the kept pieces and the output become one queue again.
            var q = ByteQueue()
            for s in kept { s.withUnsafeReadableBytes { q.append($0) } }
            output.withUnsafeReadableBytes { q.append($0) }
            output = q
            kept.removeAll()
            keptBytes = 0
        }
        sentCount = 0
        parked = false
        outputHeld = false
        ackSent = inOffset
        ackOnlySince = 0
        // Everything that waited while parked may write again.
        for s in streams.values where s.network == .tcp && !s.localFin { s.outputBlocked = true; anyOutputBlocked = true }
        unblockStreams()
        queuedSinceSignal = true
    }

    /// Received ACK. ACKs are monotonic among themselves; one not above what a later count
    /// (RESUME / STATUS) already released is stale: the peer sent it before that count and it
    /// is part of what was sent again.
    func onAck(_ received: UInt64) throws(ProtocolError) {
        guard replay else { throw .unexpectedFrame(.ack) }
        ackOnlySince &+= UInt64(LoftWire.headerSize + 8)
        if received < lastAck { throw .replayOffset(claimed: received, acked: lastAck, sent: outBase &+ UInt64(keptBytes + sentCount)) }
        lastAck = received
        if received < outBase { return }
        try release(to: received)
    }

    /// ACK what came in: `force` at a tick (whatever is unacknowledged), else once
    /// `ackEvery` bytes arrived since the last.
    func acknowledge(force: Bool) {
        guard replay, !parked, !failed, !ignoringInput, ackOwed else { return }
        if !force && inOffset &- ackSent < Self.ackEvery { return }
        queueControl(.ack(inOffset))
        ackSent = inOffset
        ackOnlySince = 0
        counters.acksSent += 1
    }

    /// Something other than ACKs arrived since the last ACK sent.
    var ackOwed: Bool { inOffset &- ackSent > ackOnlySince }

}
