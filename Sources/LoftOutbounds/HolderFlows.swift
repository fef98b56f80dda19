import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftSessionStream

/// The holder's flows: TCP flows as streams of the session (or of their own QUIC stream), the
/// stream table, and UDP associations.
extension HolderOutbound {
    // MARK: Outbound

    public func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream {
        switch link {
        case .up:
            // quic: the flow on a QUIC stream of its own (docs/protocol.md §1.2).
            // The OPEN is encoded first: a QUIC stream is opened only for a flow that can use it.
            if let fc = carrier as? FlowCarrier, let open = FlowPreamble.open(destination), let flow = fc.openFlow() {
                if let s = openFlowStream(flow, open: open, events: events) {
                    counts.flowsOpened += 1
                    counts.flowStreams += 1
                    return s
                }
            }
            let s = newStream(to: destination, events: events)
            openOnSession(s)
            return s
        case .dialing, .handshaking, .idle, .waiting, .stopped:
            // The first dial, or a redial right after a path change, is likely to succeed soon:
            // the flow waits for it. Down, or redialling after failures: no flow waits for a
            // front that keeps failing.
            if failures == 0 && (link == .dialing || link == .handshaking || link == .idle) {
                let s = newStream(to: destination, events: events)
                pendingStreams.append(s)
                return s
            }
            if let fallback {
                counts.fallbackFlows += 1
                return fallback.openStream(to: destination, events: events)
            }
            counts.holdDrops += 1
            let s = newStream(to: destination, events: events)
            s.failSoon(.networkUnreachable)
            return s
        }
    }

    /// A flow's end: a stream of the session, which it writes and reads itself.
    private func newStream(to destination: Destination, events: ByteStreamEvents) -> SessionStream {
        SessionStream(side: .client, session: session, id: nil, destination: destination, loop: loop,
                      events: events, owner: self, meter: streamMeter)
    }

    public func openAssociation(events: DatagramEvents) -> DatagramAssociation? {
        HolderAssociation(holder: self, events: events)
    }

    // MARK: flows on QUIC streams

    /// quic: a flow on a QUIC stream of its own (docs/protocol.md §1.2), a preface end over the
    /// carrier's `QuicFlow`: the OPEN out, the front's OPEN_OK or OPEN_FAIL in, then the flow's
    /// bytes raw both ways (counted in `flowStreamMeter`). Nil when the OPEN (`open`, encoded
    /// before the stream was opened) does not fit the stream at once (then it is reset).
    private func openFlowStream(_ flow: QuicFlow, open: [UInt8], events: ByteStreamEvents) -> ByteStream? {
        let s = PrefaceStream(codec: FlowPreamble.AnswerCodec(), events: events, meter: flowStreamMeter) { outcome in
            switch outcome {
            case .answered(.accepted): return nil
            case .answered(.refused(let reason)): return reason.flowFailure
            case .answered(.malformed(let e)):
                Log.warn("holder.flow-protocol-error", ["error": e.description])
                return .other(EPROTO)
            case .answered(.needMore): return .other(EPROTO)   // the codec never answers this
            case .cut(let f): return f
            }
        }
        guard open.withUnsafeBytes({ s.attach(flow, connected: true, preamble: $0) }) else { return nil }
        return s
    }

    // MARK: streams

    func openOnSession(_ s: SessionStream) {
        guard let id = session.openStream(to: s.destination) else {
            // The front's max_streams (STATUS) is reached: the flow is refused, counted, and
            // said once per second at most.
            counts.streamLimitRefusals += 1
            if loop.now - lastLimitLog >= 1000 {
                lastLimitLog = loop.now
                Log.warn("holder.stream-limit", ["outbound": name, "open": session.openStreamCount,
                                                 "max": session.status?.maxStreams ?? 0, "refused": counts.streamLimitRefusals])
            }
            s.fail(.networkUnreachable)
            return
        }
        s.id = id
        streams[id] = s
        counts.flowsOpened += 1
        armTickForStreams()
        scheduleFlush()
    }

    /// A stream closed or reset by its flow: forgotten here (the stream told the session).
    public func sessionStreamEnded(_ s: SessionStream) {
        if let i = pendingStreams.firstIndex(where: { $0 === s }) { pendingStreams.remove(at: i) }
        if let id = s.id { streams.removeValue(forKey: id) }
    }

    // MARK: datagrams

    func associationSend(_ a: HolderAssociation, _ payload: UnsafeRawBufferPointer, to: Destination) -> Bool {
        guard link == .up else {
            if options.hold {
                counts.holdDrops += 1
                return false
            }
            return a.sendFallback(payload, to: to, via: fallback)
        }
        if a.id == nil {
            guard let id = session.openAssociation(firstDestination: to) else { return false }
            a.id = id
            associations[id] = a
            counts.flowsOpened += 1
            armTickForStreams()
        }
        let ok = session.send(association: a.id!, to: to, payload)
        if ok { counts.bytesUp &+= UInt64(payload.count) }
        scheduleFlush()
        return ok
    }

    func associationClose(_ a: HolderAssociation) {
        guard let id = a.id else { return }
        a.id = nil
        associations.removeValue(forKey: id)
        if link == .up {
            session.closeAssociation(id)
            scheduleFlush()
        }
    }
}

// MARK: - one UDP association

final class HolderAssociation: DatagramAssociation, DatagramEvents {
    weak var events: DatagramEvents?
    unowned let holder: HolderOutbound
    var id: UInt32?
    /// Without hold, datagrams sent while the session is down go direct on this.
    private var fallbackAssociation: DatagramAssociation?

    init(holder: HolderOutbound, events: DatagramEvents) {
        self.holder = holder
        self.events = events
    }

    func send(_ payload: UnsafeRawBufferPointer, to: Destination) -> Bool {
        holder.associationSend(self, payload, to: to)
    }

    /// The session's attachment ended: the next datagram opens the association again.
    func detached() { id = nil }

    func sendFallback(_ payload: UnsafeRawBufferPointer, to: Destination, via fallback: Outbound?) -> Bool {
        if fallbackAssociation == nil { fallbackAssociation = fallback?.openAssociation(events: self) }
        return fallbackAssociation?.send(payload, to: to) ?? false
    }

    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {
        events?.datagramReceived(payload, from: from)
    }

    func close() {
        fallbackAssociation?.close()
        fallbackAssociation = nil
        holder.associationClose(self)
    }
}
