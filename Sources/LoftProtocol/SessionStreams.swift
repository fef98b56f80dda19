import LoftCore

final class StreamState {
    enum Phase { case opening, open }
    let id: UInt32
    let network: FlowNetwork
    /// Client: OPEN sent, no answer yet. Front: OPEN received, not yet accepted.
    var phase: Phase = .opening
    var recv = ByteQueue()
    /// Bytes the peer may still send before it needs more CREDIT.
    var recvAllowance: UInt32 = LoftWire.initialStreamWindow
    /// Read since the last CREDIT this side sent.
    var consumedSinceGrant: UInt32 = 0
    var sendCredit: UInt64 = UInt64(LoftWire.initialStreamWindow)
    var localFin = false
    var remoteFin = false
    /// Counts toward maxStreams.
    var live = true
    /// A write or writableBytes was cut short by the output bound.
    var outputBlocked = false
    /// Bytes arrived since the last tick; a stream quiet for a whole tick gives its receive
    /// storage back, so idle flows hold no buffer however much they carried before.
    var recvTouched = false

    init(id: UInt32, network: FlowNetwork) { self.id = id; self.network = network }
}

/// The stream table and flow control: opening, answering, writing within credit and the
/// output bound, reading and granting CREDIT, FIN, RST, and the associations' DGRAMs.
extension SessionEngine {
    // MARK: stream bookkeeping

    func settle(_ s: StreamState) {
        if s.live && s.localFin && s.remoteFin { s.live = false; liveCount -= 1 }
        if !s.live && s.recv.isEmpty { streams[s.id] = nil }
    }

    func remove(_ s: StreamState) {
        streams[s.id] = nil
        if s.live { s.live = false; liveCount -= 1 }
        bufferedTotal -= s.recv.count
        s.recv.removeAll()
    }

    /// Client: a new stream or association.
    func open(network: FlowNetwork, destination: Destination) -> UInt32? {
        guard !failed, liveCount < maxStreamsAllowed, nextID < UInt32.max else { return nil }
        let id = nextID
        do { try queue(.open(stream: id, network: network, destination: destination)) } catch { return nil }
        nextID += 2
        highestID = id
        let s = StreamState(id: id, network: network)
        streams[id] = s
        liveCount += 1
        counters.streamsOpened += 1
        if network == .tcp { grantExtraWindow(s) }
        signal()
        return id
    }

    /// A window above the initial one is granted as soon as the stream exists for the peer.
    private func grantExtraWindow(_ s: StreamState) {
        if window > LoftWire.initialStreamWindow {
            let extra = window - LoftWire.initialStreamWindow
            queueControl(.credit(stream: s.id, increment: extra))
            s.recvAllowance += extra
        }
    }

    /// Front: answer to OPEN.
    func accept(_ id: UInt32) {
        guard !failed, let s = streams[id], s.phase == .opening else { return }
        queueControl(.openOK(stream: id))
        s.phase = .open
        if s.network == .tcp { grantExtraWindow(s) }
        signal()
    }

    func refuse(_ id: UInt32, _ reason: OpenFailReason) {
        guard !failed, let s = streams[id], s.phase == .opening else { return }
        queueControl(.openFail(stream: id, reason: reason.rawValue == 0 ? .generalFailure : reason))
        remove(s)
        signal()
    }

    /// Front streams take DATA only after accept; client streams from the OPEN on.
    private func sendable(_ s: StreamState) -> Bool {
        !failed && !s.localFin && (role == .client || s.phase == .open)
    }

    /// Payload bytes that fit in `room` output bytes as DATA frames.
    private static func payloadRoom(_ room: Int) -> Int {
        guard room > LoftWire.headerSize else { return 0 }
        let frame = LoftWire.maxFrameSize
        return room / frame * LoftWire.maxBodySize + max(0, room % frame - LoftWire.headerSize)
    }

    func write(_ id: UInt32, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard !bytes.isEmpty, let s = streams[id], s.network == .tcp, sendable(s) else { return 0 }
        let want = Int(min(UInt64(bytes.count), s.sendCredit))
        var written = 0
        while written < want && !parked {
            let room = outputRoom - LoftWire.headerSize
            if room <= 0 { break }
            let n = min(want - written, LoftWire.maxBodySize, room)
            FrameEncoder.encodeData(stream: id, UnsafeRawBufferPointer(rebasing: bytes[written..<written + n]), into: &output)
            counters.framesOut += 1
            written += n
        }
        if written < want { s.outputBlocked = true; anyOutputBlocked = true }
        if written > 0 {
            s.sendCredit -= UInt64(written)
            counters.dataBytesOut += UInt64(written)
            queuedSinceSignal = true
            signal()
        }
        return written
    }

    func writableBytes(_ id: UInt32) -> Int {
        guard let s = streams[id], s.network == .tcp, sendable(s) else { return 0 }
        let room = parked ? 0 : Self.payloadRoom(outputRoom)
        let credit = Int(s.sendCredit)
        if room < credit { s.outputBlocked = true; anyOutputBlocked = true }
        return min(room, credit)
    }

    func read(_ id: UInt32, into buffer: UnsafeMutableRawBufferPointer) -> StreamRead {
        guard let s = streams[id], s.network == .tcp else { return .eof }
        if s.recv.isEmpty {
            if s.remoteFin { settle(s); return .eof }
            return .wouldBlock
        }
        if buffer.isEmpty { return .data(0) }
        let n = s.recv.read(into: buffer)
        bufferedTotal -= n
        if !s.remoteFin && !failed {
            // Half the window read: give it back in one CREDIT.
            s.consumedSinceGrant += UInt32(n)
            if s.consumedSinceGrant >= window / 2 {
                queueControl(.credit(stream: id, increment: s.consumedSinceGrant))
                s.recvAllowance += s.consumedSinceGrant
                s.consumedSinceGrant = 0
            }
        }
        settle(s)
        signal()
        return .data(n)
    }

    func readableBytes(_ id: UInt32) -> Int { streams[id]?.recv.count ?? 0 }

    func finish(_ id: UInt32) {
        guard let s = streams[id], s.network == .tcp, sendable(s) else { return }
        queueControl(.fin(stream: id))
        s.localFin = true
        s.outputBlocked = false
        settle(s)
        signal()
    }

    func resetStream(_ id: UInt32, _ reason: RstReason) {
        guard let s = streams[id] else { return }
        if !failed { queueControl(.rst(stream: id, reason: reason)) }
        remove(s)
        counters.streamsReset += 1
        signal()
    }

    /// Frees a finished stream; one not finished both ways is reset (cancel).
    func close(_ id: UInt32) {
        guard let s = streams[id] else { return }
        if s.localFin && s.remoteFin { remove(s) } else { resetStream(id, .cancel) }
    }


    func sendDatagram(_ id: UInt32, _ remote: Destination, _ payload: UnsafeRawBufferPointer) -> Bool {
        guard let s = streams[id], s.network == .udp, !failed, !parked, role == .client || s.phase == .open,
              let size = FrameEncoder.datagramSize(remote: remote, payloadCount: payload.count) else {
            counters.datagramsDropped += 1
            return false
        }
        // Only once the association is open both ways: before that a DATAGRAM could overtake
        // the OPEN (or the OPEN_OK) on the session stream, so those go in the output, in order.
        if let sink = datagramSink, s.phase == .open {
            datagramScratch.removeAll(keepingCapacity: true)
            if (try? FrameEncoder.encodeDatagram(association: id, remote: remote, payload, into: &datagramScratch)) != nil,
               datagramScratch.withUnsafeReadableBytes({ sink($0) }) {
                counters.framesOut += 1
                counters.datagramsOut += 1
                return true
            }
        }
        guard output.count - sentCount + size <= min(limits.maxDatagramQueue, limits.maxOutputBytes),
              !retaining || keptBytes + output.count + size <= maxReplay else {
            counters.datagramsDropped += 1
            return false
        }
        do {
            try FrameEncoder.encodeDatagram(association: id, remote: remote, payload, into: &output)
        } catch {
            counters.datagramsDropped += 1
            return false
        }
        counters.framesOut += 1
        counters.datagramsOut += 1
        queuedSinceSignal = true
        signal()
        return true
    }

    func closeAssociation(_ id: UInt32) {
        guard let s = streams[id], s.network == .udp else { return }
        resetStream(id, .cancel)
    }
}
