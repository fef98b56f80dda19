import LoftCore

/// A session end's input: carrier bytes cut into frames (DATA bodies straight into their
/// stream), each frame checked and dispatched to its handler.
extension SessionEngine {
    // MARK: input

    func receive(_ bytes: UnsafeRawBufferPointer, now: UInt64?) throws(ProtocolError) {
        guard !failed, !ignoringInput, !bytes.isEmpty else { return }
        counters.bytesIn += UInt64(bytes.count)
        if countingInput { inOffset &+= UInt64(bytes.count) }
        if let now { lastHeard = now; heardSinceTick = false } else { heardSinceTick = true }
        receiveNow = now
        do {
            try consume(bytes)
        } catch {
            fail(error)
            signal()
            throw error
        }
        if replay { acknowledge(force: false) }
        signal()
    }

    /// One DGRAM frame that arrived outside the byte channel (a QUIC DATAGRAM): exactly one
    /// frame, header included; anything else is a protocol error, as in the channel.
    func receiveDatagram(_ bytes: UnsafeRawBufferPointer, now: UInt64?) throws(ProtocolError) {
        guard !failed, !ignoringInput else { return }
        counters.bytesIn += UInt64(bytes.count)
        if let now { lastHeard = now; heardSinceTick = false } else { heardSinceTick = true }
        do throws(ProtocolError) {
            let hs = LoftWire.headerSize
            guard bytes.count >= hs else { throw .truncatedBody(.dgram) }
            let h = try WireFormat.parseHeader(UnsafeRawBufferPointer(rebasing: bytes[0..<hs]))
            guard h.type == .dgram else { throw .unexpectedFrame(h.type) }
            guard h.length == bytes.count - hs else { throw .badLength(.dgram, bytes.count - hs) }
            // Datagrams are not ordered with the stream: one for an association this end does
            // not hold (not yet, or no more) crossed its OPEN or RST, and is dropped. The client
            // takes one that overtook the OPEN_OK: the front sends DGRAMs only once it accepted.
            guard let st = streams[h.stream] else {
                counters.datagramsIgnored += 1
                return
            }
            counters.framesIn += 1
            guard let host, try host.engineGate(.dgram) else { return }
            var r = BodyReader(UnsafeRawBufferPointer(rebasing: bytes[hs...]), .dgram)
            let remote = try r.destination()
            if st.network != .udp { throw .wrongNetwork(.dgram, h.stream) }
            counters.datagramsIn += 1
            host.engineDatagram(h.stream, remote, r.rest())
        } catch {
            fail(error)
            signal()
            throw error
        }
        signal()
    }

    func carrierEnded() throws(ProtocolError) {
        guard !failed && !ignoringInput else { return }
        if dataRemaining > 0 { throw .incompleteFrame(buffered: LoftWire.headerSize + dataLength - dataRemaining) }
        if partialCount > 0 { throw .incompleteFrame(buffered: partialCount) }
    }

    private var stopped: Bool { failed || ignoringInput }

    private func consume(_ input: UnsafeRawBufferPointer) throws(ProtocolError) {
        guard !input.isEmpty, !stopped else { return }
        var rest = input
        let hs = LoftWire.headerSize
        if dataRemaining > 0 {
            let gen = generation
            rest = try continueData(rest)
            if dataRemaining > 0 || rest.isEmpty || stopped || gen != generation { return }
        }
        if partialCount > 0 {
            let buf = partial!
            if partialCount < hs {
                let take = min(hs - partialCount, rest.count)
                (buf + partialCount).copyMemory(from: rest.baseAddress!, byteCount: take)
                partialCount += take
                rest = UnsafeRawBufferPointer(rebasing: rest[take...])
                if partialCount < hs { return }
            }
            let h = try WireFormat.parseHeader(UnsafeRawBufferPointer(start: buf, count: hs))
            let gen = generation
            if h.type == .data {
                // The body goes straight to the stream from here on, never through `partial`.
                partialCount = 0
                try beginData(h)
                if gen != generation || stopped { return }
                rest = try continueData(rest)
                if dataRemaining > 0 || stopped || gen != generation { return }
            } else {
                let total = hs + h.length
                let take = min(total - partialCount, rest.count)
                if take > 0 {
                    (buf + partialCount).copyMemory(from: rest.baseAddress!, byteCount: take)
                    partialCount += take
                    rest = UnsafeRawBufferPointer(rebasing: rest[take...])
                }
                if partialCount < total { return }
                partialCount = 0
                try handle(h, UnsafeRawBufferPointer(start: buf + hs, count: h.length))
                if streamStartPending { enterStream(after: rest); return try consume(rest) }
                if gen != generation || stopped { return }
            }
        }
        while rest.count >= hs {
            let h = try WireFormat.parseHeader(rest)
            let total = hs + h.length
            let gen = generation
            guard rest.count >= total else {
                if h.type == .data {
                    try beginData(h)
                    if gen != generation || stopped { return }
                    _ = try continueData(UnsafeRawBufferPointer(rebasing: rest[hs...]))
                    return
                }
                break
            }
            // Straight from the caller's bytes: DATA is copied once, into the stream's queue.
            try handle(h, UnsafeRawBufferPointer(rebasing: rest[hs..<total]))
            if streamStartPending {
                let after = UnsafeRawBufferPointer(rebasing: rest[total...])
                enterStream(after: after)
                return try consume(after)
            }
            if gen != generation || stopped { return }
            rest = UnsafeRawBufferPointer(rebasing: rest[total...])
        }
        if !rest.isEmpty {
            if partial == nil {
                partial = UnsafeMutableRawPointer.allocate(byteCount: LoftWire.maxFrameSize, alignment: 8)
            }
            partial!.copyMemory(from: rest.baseAddress!, byteCount: rest.count)
            partialCount = rest.count
        }
    }

    /// A DATA frame whose body is still arriving: checked (and its credit taken) on the header.
    private func beginData(_ h: FrameHeader) throws(ProtocolError) {
        counters.framesIn += 1
        guard let host, try host.engineGate(.data) else {
            dataStream = 0   // dropped: the body is skipped
            dataRemaining = h.length; dataLength = h.length
            return
        }
        dataStream = try admitData(h.stream, h.length)?.id ?? 0
        dataRemaining = h.length; dataLength = h.length
    }

    /// Hands the next piece of the current DATA body to its stream; returns what follows it.
    private func continueData(_ input: UnsafeRawBufferPointer) throws(ProtocolError) -> UnsafeRawBufferPointer {
        let n = min(dataRemaining, input.count)
        guard n > 0 else { return input }
        dataRemaining -= n
        // Looked up per piece: a reader may have reset the stream meanwhile (its bytes are dropped).
        if dataStream != 0, let s = streams[dataStream] {
            deliverData(s, UnsafeRawBufferPointer(rebasing: input[..<n]))
        }
        return UnsafeRawBufferPointer(rebasing: input[n...])
    }

    private func handle(_ h: FrameHeader, _ body: UnsafeRawBufferPointer) throws(ProtocolError) {
        counters.framesIn += 1
        guard let host, try host.engineGate(h.type) else { return }
        switch h.type {
        case .data:
            try onData(h.stream, body)
        case .dgram:
            var r = BodyReader(body, .dgram)
            let remote = try r.destination()
            try onDatagram(h.stream, remote, r.rest())
        default:
            let frame = try WireFormat.parseBody(h, body)
            switch frame {
            case .open(let id, let network, let destination): try onOpen(id, network, destination)
            case .openOK(let id): try onOpenOK(id)
            case .openFail(let id, let reason): try onOpenFail(id, reason)
            case .fin(let id): try onFin(id)
            case .rst(let id, let reason): try onRst(id, reason)
            case .credit(let id, let inc): try onCredit(id, inc)
            case .ping(let v): try onPing(v)
            case .pong(let v): onPong(v)
            case .ack(let v): try onAck(v)
            case .hello, .resume, .status, .goaway: try host.engineSessionFrame(frame)
            case .data, .dgram: break
            }
        }
    }

    /// The stream for a frame; nil for an id that is gone (a race), a throw for one never opened.
    private func lookup(_ type: FrameType, _ id: UInt32) throws(ProtocolError) -> StreamState? {
        if let s = streams[id] { return s }
        if id <= highestID { return nil }
        throw .unopenedStream(type, id)
    }

    private func onData(_ id: UInt32, _ body: UnsafeRawBufferPointer) throws(ProtocolError) {
        guard let s = try admitData(id, body.count) else { return }
        deliverData(s, body)
    }

    /// Every DATA rule, on the header: the stream, or nil to drop the body (a race).
    private func admitData(_ id: UInt32, _ length: Int) throws(ProtocolError) -> StreamState? {
        guard let s = try lookup(.data, id) else { return nil }
        if s.network != .tcp { throw .wrongNetwork(.data, id) }
        if role == .client && s.phase == .opening { throw .unexpectedFrame(.data) }
        if s.remoteFin { throw .afterFin(.data, id) }
        if length > Int(s.recvAllowance) { throw .creditExceeded(id) }
        if bufferedTotal + length > maxBuffered { throw .bufferLimit(maxBuffered) }
        s.recvAllowance -= UInt32(length)
        counters.dataBytesIn += UInt64(length)
        return s
    }

    private func deliverData(_ s: StreamState, _ bytes: UnsafeRawBufferPointer) {
        s.recv.append(bytes)
        s.recvTouched = true
        bufferedTotal += bytes.count
        host?.engineReadable(s.id)
    }

    private func onFin(_ id: UInt32) throws(ProtocolError) {
        guard let s = try lookup(.fin, id) else { return }
        if s.network != .tcp { throw .wrongNetwork(.fin, id) }
        if role == .client && s.phase == .opening { throw .unexpectedFrame(.fin) }
        if s.remoteFin { throw .afterFin(.fin, id) }
        s.remoteFin = true
        settle(s)
        host?.engineReadable(id)
    }

    private func onRst(_ id: UInt32, _ reason: RstReason) throws(ProtocolError) {
        guard let s = try lookup(.rst, id) else { return }
        remove(s)
        counters.streamsReset += 1
        host?.engineReset(id, reason)
    }

    private func onCredit(_ id: UInt32, _ inc: UInt32) throws(ProtocolError) {
        guard let s = try lookup(.credit, id) else { return }
        if s.network != .tcp { throw .wrongNetwork(.credit, id) }
        let credit = s.sendCredit + UInt64(inc)
        if credit > UInt64(UInt32.max) { throw .creditOverflow(id) }
        s.sendCredit = credit
        if !s.localFin { host?.engineWritable(id) }
    }

    private func onDatagram(_ id: UInt32, _ remote: Destination, _ payload: UnsafeRawBufferPointer) throws(ProtocolError) {
        guard let s = try lookup(.dgram, id) else { return }
        if s.network != .udp { throw .wrongNetwork(.dgram, id) }
        if role == .client && s.phase == .opening { throw .unexpectedFrame(.dgram) }
        counters.datagramsIn += 1
        host?.engineDatagram(id, remote, payload)
    }

    private func onOpen(_ id: UInt32, _ network: FlowNetwork, _ destination: Destination) throws(ProtocolError) {
        if role == .client { throw .unexpectedFrame(.open) }
        if id & 1 == 0 || id <= highestID { throw .badNewStreamID(id) }
        if liveCount >= maxStreamsAllowed { throw .streamLimit(UInt32(clamping: maxStreamsAllowed)) }
        let s = StreamState(id: id, network: network)
        streams[id] = s
        highestID = id
        liveCount += 1
        counters.streamsOpened += 1
        host?.engineStreamRequested(id, network, destination)
    }

    private func onOpenOK(_ id: UInt32) throws(ProtocolError) {
        if role == .front { throw .unexpectedFrame(.openOK) }
        guard let s = try lookup(.openOK, id) else { return }
        if s.phase != .opening { throw .unexpectedFrame(.openOK) }
        s.phase = .open
        host?.engineStreamOpened(id)
    }

    private func onOpenFail(_ id: UInt32, _ reason: OpenFailReason) throws(ProtocolError) {
        if role == .front { throw .unexpectedFrame(.openFail) }
        guard let s = try lookup(.openFail, id) else { return }
        if s.phase != .opening { throw .unexpectedFrame(.openFail) }
        remove(s)
        host?.engineStreamOpenFailed(id, reason)
    }

    private func onPing(_ v: UInt64) throws(ProtocolError) {
        queueControl(.pong(v))
        // A peer that pings without reading the answers would grow our output forever.
        let unsent = output.count - sentCount
        if unsent > limits.maxOutputBytes + Self.controlSlack { throw .outputOverflow(unsent) }
    }

    private func onPong(_ v: UInt64) {
        counters.pongsReceived += 1
        guard let p = pingOutstanding, p.value == v else { return }
        if let now = receiveNow {
            rttMs = now >= p.at ? now - p.at : 0
            pingOutstanding = nil
        } else {
            pongUnresolved = true   // timed at the next tick
        }
    }
}
