import CNgtcp2
import Glibc
import LoftCore
import LoftIO
import LoftTLS

/// Events of one QUIC connection, on the loop, never from inside ngtcp2.
package protocol QuicConnectionDelegate: AnyObject {
    func quicHandshakeDone(_ c: QuicConnection)
    /// Bytes (or the FIN) are waiting on `stream` (`read`).
    func quicReadable(_ c: QuicConnection, stream: Int64)
    /// A stream's send buffer has room again after a write was cut short.
    func quicWritable(_ c: QuicConnection, stream: Int64)
    /// The peer reset the stream (RESET_STREAM) or stopped reading it (STOP_SENDING).
    func quicStreamReset(_ c: QuicConnection, stream: Int64, code: UInt64)
    func quicDatagram(_ c: QuicConnection, _ bytes: UnsafeRawBufferPointer)
    /// The connection ended; nothing follows.
    func quicClosed(_ c: QuicConnection, _ reason: CarrierCloseReason)
    /// Server: a connection id to route by (add) or to forget.
    func quicConnectionID(_ c: QuicConnection, _ id: QuicCID, add: Bool)
}

extension QuicConnectionDelegate {
    package func quicConnectionID(_ c: QuicConnection, _ id: QuicCID, add: Bool) {}
}

/// One QUIC connection (client or server), driven by the event loop: packets in from the
/// socket's owner (`receive`), packets out after each batch (a SoonOnce flush), ngtcp2's
/// deadline as one timer on the loop's heap. Streams are bidirectional byte pipes with
/// bounded buffers on both sides; datagrams are sent at once or dropped.
package final class QuicConnection {
    /// Its carrier. (Stored as internal with a package getter, so that the module sees every
    /// access and the compiler drops the run-time exclusivity checks on the hot path; the same
    /// for `conn`, `closed`, `remote` and `local`.)
    package var delegate: QuicConnectionDelegate? { get { owner } set { owner = newValue } }
    weak var owner: QuicConnectionDelegate?
    package let isServer: Bool
    package let loop: EventLoop
    package var conn: OpaquePointer? { ngtcp2 }
    var ngtcp2: OpaquePointer?
    /// Held until the connection is over (`finish`): the front's listener, or the client's
    /// carrier. A listener closed or dropped by its owner lives on, with its socket, while one
    /// of its connections still sends (its CONNECTION_CLOSE at a shutdown, say); the cycle
    /// ends with the connection.
    var sink: QuicPacketSink?
    var events = cngtcp2_events()
    package let limits: QuicLimits
    var streams: [Int64: QuicStreamState] = [:]
    /// The stream last looked up by id (`stream(_:)`), while it is in `streams` (`forget`
    /// clears it): a transfer's packets, acknowledgments and sends are mostly for one stream,
    /// whose state is then at hand without hashing its id.
    var recent: QuicStreamState?
    /// Streams loft is done with (reset, by either end) whose send ring ngtcp2 may still read:
    /// until it closes the stream, ngtcp2 0.12.1 queues a lost STREAM frame again from the
    /// ring even after RESET_STREAM (its rtb does not skip reset streams; later versions do),
    /// and copies it into a packet. The ring stays until `stream_close` (or the connection
    /// goes) with only its unacknowledged bytes' pages kept (`dropUnheldPages`), and those
    /// bytes stay in `heldTotal`, so the budget bounds what retired streams hold.
    var retired: [Int64: QuicStreamState] = [:]
    /// Bytes held (written, not yet acknowledged) by budgeted streams, and the streams waiting
    /// for the budget to free up.
    var heldTotal = 0
    var budgetWaiters: [Int64] = []
    var sendQueue: [Int64] = []
    var pendingReadable: [Int64] = []
    var pendingResets: [(Int64, UInt64)] = []
    var pendingDatagrams: [[UInt8]] = []
    var handshakeReported = false
    var handshakeJustDone = false
    var timer: TimerHandle?
    var pacer: QuicPacer
    var timerAt: UInt64 = .max
    package var closed: Bool { isClosed }
    var isClosed = false
    /// Set by a graceful close: the CONNECTION_CLOSE goes out once every stream is acknowledged.
    var closingGracefully = false
    var blockedOnSocket = false
    var closePacket = [UInt8](repeating: 0, count: 1500)
    /// Packets written this flush and not yet sent: `outCount` of `outSegment` bytes (the
    /// last may be shorter) for `outTo`, sent as one batch (GSO).
    let out = UnsafeMutableRawPointer.allocate(byteCount: QuicConnection.batchBytes, alignment: 16)
    var outUsed = 0
    var outCount = 0
    var outSegment = 0
    var outTo = SocketAddress()
    package static let batchBytes = 65_000
    package static let batchPackets = 64
    lazy var flushSoon = SoonOnce(loop: loop) { [weak self] in self?.flush() }
    lazy var dispatchSoon = SoonOnce(loop: loop) { [weak self] in
        guard let self else { return }
        guard !self.closed else { return }
        self.dispatchEvents()
    }
    /// Where the connection's packets came from last (the server answers there).
    package var remote: SocketAddress { remoteAddress }
    package var local: SocketAddress { localAddress }
    var remoteAddress: SocketAddress
    var localAddress: SocketAddress
    package var datagramsDropped = 0
    package var migrations = 0

    init(isServer: Bool, loop: EventLoop, sink: QuicPacketSink, limits: QuicLimits, local: SocketAddress, remote: SocketAddress) {
        self.isServer = isServer
        addressValidated = !isServer
        self.loop = loop
        pacer = QuicPacer(now: loop.nanoseconds)
        self.sink = sink
        self.limits = limits
        self.localAddress = local
        self.remoteAddress = remote
        events.ctx = Unmanaged.passUnretained(self).toOpaque()
        events.handshake_done = { ctx in QuicConnection.from(ctx).onHandshakeDone() }
        events.stream_data = { ctx, sid, data, len, fin in QuicConnection.with(ctx) { $0.onStreamData(sid, data, len, fin != 0) } }
        events.stream_open = { ctx, sid in QuicConnection.from(ctx).onStreamOpen(sid) }
        events.stream_close = { ctx, sid, code, has in QuicConnection.from(ctx).onStreamClose(sid, code, has != 0) }
        events.stream_reset = { ctx, sid, code in QuicConnection.from(ctx).onStreamReset(sid, code) }
        events.stream_stop_sending = { ctx, sid, code in QuicConnection.from(ctx).onStopSending(sid, code) }
        events.acked = { ctx, sid, off, len in QuicConnection.with(ctx) { $0.onAcked(sid, off + len) } }
        events.stream_extended = { ctx, sid in QuicConnection.from(ctx).onStreamExtended(sid) }
        events.streams_extended = { _, _ in 0 }
        events.datagram = { ctx, data, len in QuicConnection.from(ctx).onDatagram(data, len) }
        events.cid = { ctx, data, len, add in QuicConnection.from(ctx).onCID(data, len, add != 0) }
        events.path_validated = { ctx, ok in QuicConnection.from(ctx).onPathValidated(ok != 0) }
        events.new_token = { ctx, data, len in
            let q = QuicConnection.from(ctx)
            if let data { QuicTokens.put(Array(UnsafeBufferPointer(start: data, count: len)), for: q.remote) }
            return 0
        }
    }

    static func from(_ ctx: UnsafeMutableRawPointer?) -> QuicConnection {
        Unmanaged<QuicConnection>.fromOpaque(ctx!).takeUnretainedValue()
    }

    /// Runs `body` on the connection behind a callback's context without retaining it: ngtcp2
    /// calls back only from inside a call the connection made (it is alive), once per frame.
    static func with<R>(_ ctx: UnsafeMutableRawPointer?, _ body: (QuicConnection) -> R) -> R {
        Unmanaged<QuicConnection>.fromOpaque(ctx!)._withUnsafeGuaranteedRef(body)
    }

    /// A client connection from `local` to `remote` offering `alpn`.
    package static func client(loop: EventLoop, sink: QuicPacketSink, creds: OpaquePointer, serverName: String?, alpn: String,
                       local: SocketAddress, remote: SocketAddress, limits: QuicLimits) throws -> QuicConnection {
        let q = QuicConnection(isServer: false, loop: loop, sink: sink, limits: limits, local: local, remote: remote)
        var params = limits.params
        var err = [CChar](repeating: 0, count: 256)
        // A NEW_TOKEN from the last connection to this server, used once (RFC 9000 §8.1.3).
        let token = QuicTokens.take(for: remote) ?? []
        let c = token.withUnsafeBufferPointer { t in
            params.token = t.count > 0 ? t.baseAddress : nil
            params.token_len = t.count
            return local.withSockaddr { l, ll in
                remote.withSockaddr { r, rl in
                    withUnsafePointer(to: &q.events) { ev in
                        cngtcp2_client_new(ev, creds, serverName, alpn, l, ll, r, rl, &params, loop.nanoseconds, &err, err.count)
                    }
                }
            }
        }
        guard let c else { throw TLSError(cText(err)) }
        q.ngtcp2 = c
        q.flushSoon.schedule()
        return q
    }

    /// A server connection for an Initial packet that arrived at `local` from `remote`.
    package static func server(loop: EventLoop, sink: QuicPacketSink, creds: OpaquePointer, alpn: String, secret: [UInt8],
                       local: SocketAddress, remote: SocketAddress, packet: UnsafeRawBufferPointer,
                       limits: QuicLimits, delegate: QuicConnectionDelegate) -> QuicConnection? {
        let q = QuicConnection(isServer: true, loop: loop, sink: sink, limits: limits, local: local, remote: remote)
        q.delegate = delegate
        var params = limits.params
        var err = [CChar](repeating: 0, count: 256)
        let c = local.withSockaddr { l, ll in
            remote.withSockaddr { r, rl in
                withUnsafePointer(to: &q.events) { ev in
                    cngtcp2_server_new(ev, creds, alpn, l, ll, r, rl, packet.baseAddress?.assumingMemoryBound(to: UInt8.self),
                                     packet.count, secret, &params, loop.nanoseconds, &err, err.count)
                }
            }
        }
        guard let c else {
            Log.debug("quic.accept_failed", ["peer": remote.endpoint.map { "\($0)" } ?? "", "reason": cText(err)])
            return nil
        }
        q.ngtcp2 = c
        return q
    }

    deinit {
        if let timer { loop.cancel(timer) }
        if let conn { cngtcp2_free(conn) }
        out.deallocate()
    }

    // MARK: state

    package var handshakeDone: Bool { handshakeReported }
    package var alpn: String {
        guard let conn else { return "" }
        var b = [CChar](repeating: 0, count: 64)
        cngtcp2_alpn(conn, &b, b.count)
        return cText(b)
    }
    package var tlsDescription: String {
        guard let conn else { return "" }
        var b = [CChar](repeating: 0, count: 160)
        cngtcp2_describe(conn, &b, b.count)
        return cText(b)
    }
    package var peerTakesDatagrams: Int { conn.map { Int(min(cngtcp2_peer_max_datagram($0), 65_535)) } ?? 0 }
    /// The largest packet on the path now (cngtcp2_path_max_packet).
    package var pathMaxPacket: Int { conn.map { cngtcp2_path_max_packet($0) } ?? 0 }
    /// The largest datagram that fits one packet with room to spare for the short header
    /// (1 + 20-byte id + 4-byte number), the AEAD tag (16) and the frame's type and length (4).
    package var datagramCapacity: Int {
        guard let conn else { return 0 }
        return max(0, min(peerTakesDatagrams, cngtcp2_path_max_packet(conn) - 45))
    }

    // MARK: packets in

    /// One UDP payload from `from`, received on `at`.
    package func receive(_ bytes: UnsafeRawBufferPointer, from: SocketAddress, at: SocketAddress) {
        guard let conn, !closed else { return }
        if !addressValidated { amplification.received(bytes.count) }
        remoteAddress = from
        let rv = at.withSockaddr { l, ll in
            from.withSockaddr { r, rl in
                cngtcp2_read(conn, l, ll, r, rl, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, loop.nanoseconds)
            }
        }
        if rv != 0 {
            failed(rv)
            return
        }
        // Once after the batch (a GRO read holds up to 64 packets): the delegate reads a
        // stream's bytes in one go, then the flush acknowledges them all.
        dispatchSoon.schedule()
        flushSoon.schedule()
    }

    /// The socket refused a datagram of `size` bytes as larger than the path's MTU (EMSGSIZE).
    /// Up to 1452 that is a path MTU probe QUIC expects to lose; true, once, when it is a
    /// configured larger size (quic-max-packet) the path does not carry, so every full packet
    /// would be lost: the socket's owner says so (the client ends the carrier, the front logs).
    package func packetTooBig(_ size: Int) -> Bool {
        guard limits.packetAboveDiscovery, size > Int(CNGTCP2_DEFAULT_MAX_PACKET), !tooBigReported else { return false }
        tooBigReported = true
        return true
    }
    var tooBigReported = false

    /// The socket can take packets again.
    package func socketWritable() {
        blockedOnSocket = false
        flush()
    }

    // MARK: datagrams

    /// Sends one DATAGRAM frame in the next flush; false when it cannot (too big, closed).
    @discardableResult
    package func sendDatagram(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard !closed, bytes.count <= datagramCapacity, pendingDatagramBytes + bytes.count <= 1 << 20 else {
            datagramsDropped += 1
            return false
        }
        outDatagrams.append([UInt8](bytes))
        pendingDatagramBytes += bytes.count
        flushSoon.schedule()
        return true
    }
    var outDatagrams: [[UInt8]] = []
    var pendingDatagramBytes = 0

    // MARK: closing

    /// Graceful: the CONNECTION_CLOSE (application, `code`) goes out once every stream's bytes
    /// are acknowledged, at most `waitMs` later.
    package func close(code: UInt64 = 0, waitMs: UInt64 = 2000) {
        guard !closed else { return }
        delegate = nil
        closingGracefully = true
        closeCode = code
        loop.schedule(after: waitMs) { [weak self] in self?.sendCloseNow() }
        flush()
    }
    var closeCode: UInt64 = 0

    /// Immediate: CONNECTION_CLOSE now, the connection is freed.
    package func abort(code: UInt64 = 0) {
        delegate = nil
        closeCode = code
        sendCloseNow()
    }

    func sendCloseNow(liberr: Int32 = 0) {
        guard !closed, let conn else { return }
        isClosed = true
        var to = sockaddr_storage()
        var toLen: socklen_t = 0
        if cngtcp2_is_closing(conn) == 0 {
            let n = closePacket.withUnsafeMutableBytes { p in
                cngtcp2_write_close(conn, p.baseAddress!.assumingMemoryBound(to: UInt8.self), p.count, closeCode, liberr, &to, &toLen, loop.nanoseconds)
            }
            if n > 0 {
                let addr = address(to, toLen)
                _ = closePacket.withUnsafeBytes { sink?.sendPackets(UnsafeRawBufferPointer(rebasing: $0[0..<n]), segment: n, to: addr, from: self) }
            }
        }
        finish()
    }

    /// Runs once (after the current batch) when the connection is over.
    package var onFinished: (() -> Void)?

    /// The connection is over: no timer, no streams.
    func finish() {
        isClosed = true
        if let f = onFinished {
            onFinished = nil
            loop.soon(f)
        }
        if let timer { loop.cancel(timer); self.timer = nil }
        sink = nil
        streams.removeAll()
        recent = nil
        heldTotal = 0
        budgetWaiters.removeAll()
        sendQueue.removeAll()
        outDatagrams.removeAll()
        outUsed = 0
        outCount = 0
    }

    func failed(_ rv: Int32) {
        guard !closed else { return }
        // What the batch's earlier packets brought (the last bytes, a FIN) goes first.
        dispatchEvents()
        guard !closed else { return }
        let reason: CarrierCloseReason
        if rv == CNGTCP2_ERR_DRAINING || rv == CNGTCP2_ERR_CLOSING {
            reason = peerCloseReason()
            finish()
        } else if rv == CNGTCP2_ERR_IDLE_CLOSE {
            reason = .timeout("QUIC idle timeout")
            finish()
        } else {
            let tlsErr = conn.map { String(cString: cngtcp2_last_error($0)) } ?? ""
            reason = rv == -215 ? .tls(tlsErr.isEmpty ? String(cString: cngtcp2_strerror(rv)) : tlsErr)
                                : .protocolError("QUIC: \(String(cString: cngtcp2_strerror(rv)))")
            sendCloseNow(liberr: rv)
        }
        let d = delegate
        delegate = nil
        d?.quicClosed(self, reason)
    }

    func peerCloseReason() -> CarrierCloseReason {
        guard let conn else { return .closed }
        var code: UInt64 = 0
        var isApp: Int32 = 0
        var text = [CChar](repeating: 0, count: 128)
        if cngtcp2_got_stateless_reset(conn) != 0 { return .io("the peer reset the QUIC connection (stateless reset)") }
        _ = cngtcp2_peer_close(conn, &code, &isApp, &text, text.count)
        if code == 0 { return .closed }
        let t = cText(text)
        return .io("the peer closed the QUIC connection: \(isApp != 0 ? "application" : "transport") error \(code)\(t.isEmpty ? "" : " \(t)")")
    }

    // MARK: callbacks (inside ngtcp2: record, act later)

    func onHandshakeDone() -> Int32 { handshakeJustDone = true; return 0 }

    func onStreamData(_ sid: Int64, _ data: UnsafePointer<UInt8>?, _ len: Int, _ fin: Bool) -> Int32 {
        var s = stream(sid)
        if s == nil {
            // Bytes for a stream we reset already are dropped (ngtcp2 still counts them).
            guard isPeerStream(sid), !forgottenPeerStream(sid) else { return 0 }
            let n = QuicStreamState(id: sid, ringCap: sid == 0 ? limits.sendBuffer : QuicLimits.flowSendBuffer)
            streams[sid] = n
            s = n
        }
        let st = s!
        if st.released {
            // Nobody reads it any more: the bytes are dropped, the peer's window moves on.
            if let conn, len > 0 { _ = cngtcp2_consumed(conn, sid, UInt64(len)) }
            return 0
        }
        if len > 0, let data { st.recv.append(data, len) }
        if fin { st.recvFin = true }
        if !st.inPendingReadable {
            st.inPendingReadable = true
            pendingReadable.append(sid)
        }
        return 0
    }

    func isPeerStream(_ sid: Int64) -> Bool { (sid & 1) == (isServer ? 0 : 1) }
    /// Peer streams at or below the highest one seen that are not held were ours and are done.
    var highestPeerStream: Int64 = -1
    func forgottenPeerStream(_ sid: Int64) -> Bool { sid <= highestPeerStream && streams[sid] == nil }

    func onStreamOpen(_ sid: Int64) -> Int32 {
        if isPeerStream(sid) {
            if streams[sid] == nil { streams[sid] = QuicStreamState(id: sid, ringCap: sid == 0 ? limits.sendBuffer : QuicLimits.flowSendBuffer) }
            highestPeerStream = max(highestPeerStream, sid)
        }
        return 0
    }

    func onStreamClose(_ sid: Int64, _ code: UInt64, _ has: Bool) -> Int32 {
        if let r = retired.removeValue(forKey: sid), r.budgeted, !closed {
            heldTotal -= r.held
            budgetFreed()
        }
        if let s = streams[sid] {
            s.sendClosed = true
            s.stackClosed = true
            if s.released || s.recvFinDelivered || (s.recvAvailable == 0 && !s.recvFin) { forget(sid) }
        }
        return 0
    }

    func onStreamReset(_ sid: Int64, _ code: UInt64) -> Int32 {
        if streams[sid] != nil { pendingResets.append((sid, code)) }
        return 0
    }

    func onStopSending(_ sid: Int64, _ code: UInt64) -> Int32 {
        if let s = streams[sid] {
            s.sendClosed = true
            pendingResets.append((sid, code))
        }
        return 0
    }

    func onAcked(_ sid: Int64, _ upTo: UInt64) -> Int32 {
        guard let s = stream(sid) else {
            // A retired stream's bytes acknowledged after its reset leave the budget.
            if let r = retired[sid], upTo > r.acked, !closed {
                let a = min(upTo, r.end)
                if r.budgeted { heldTotal -= Int(a - r.acked); budgetFreed() }
                r.acked = a
            }
            return 0
        }
        if upTo > s.acked {
            let a = min(upTo, s.end)
            if s.budgeted { heldTotal -= Int(a - s.acked) }
            s.acked = a
            if s.budgeted { budgetFreed() }
        }
        if s.wantWritable && s.room >= s.ringCap / 2 {
            s.wantWritable = false
            pendingWritable.append(sid)
        }
        return 0
    }
    var pendingWritable: [Int64] = []

    func onStreamExtended(_ sid: Int64) -> Int32 {
        if let s = streams[sid], s.blocked {
            s.blocked = false
            if !s.inSendQueue { s.inSendQueue = true; sendQueue.append(sid) }
        }
        return 0
    }

    func onDatagram(_ data: UnsafePointer<UInt8>?, _ len: Int) -> Int32 {
        guard let data else { return 0 }
        if pendingDatagrams.count < 4096 { pendingDatagrams.append(Array(UnsafeBufferPointer(start: data, count: len))) }
        return 0
    }

    func onCID(_ data: UnsafePointer<UInt8>?, _ len: Int, _ add: Bool) -> Int32 {
        guard let data, let id = QuicCID(UnsafeRawBufferPointer(start: data, count: len)) else { return 0 }
        // Called from cngtcp2_server_new before `conn` is set: the delegate is already there.
        delegate?.quicConnectionID(self, id, add: add)
        return 0
    }

    func onPathValidated(_ ok: Bool) -> Int32 {
        pendingValidation = ok
        return 0
    }
    var pendingValidation: Bool?
    /// Client: the outcome of a migration's path validation.
    package var onPathValidated: ((Bool) -> Void)?

    /// What the callbacks recorded, to the delegate (which may call back in).
    func dispatchEvents() {
        if let ok = pendingValidation {
            pendingValidation = nil
            if ok { migrations += 1 }
            Log.debug("quic.path_validated", ["ok": ok])
            if let f = onPathValidated { onPathValidated = nil; f(ok) }
        }
        if handshakeJustDone {
            handshakeJustDone = false
            handshakeReported = true
            delegate?.quicHandshakeDone(self)
        }
        if !pendingDatagrams.isEmpty {
            let ds = pendingDatagrams
            pendingDatagrams.removeAll()
            for d in ds { d.withUnsafeBytes { delegate?.quicDatagram(self, $0) } }
        }
        if !pendingResets.isEmpty {
            let rs = pendingResets
            pendingResets.removeAll()
            for (sid, code) in rs where streams[sid] != nil {
                forget(sid)
                // Both directions end (the flow is gone): without our RESET_STREAM ngtcp2 would
                // keep the stream, and the retired ring, open.
                if let conn { _ = cngtcp2_shutdown_stream(conn, sid, code) }
                delegate?.quicStreamReset(self, stream: sid, code: code)
            }
        }
        if !pendingReadable.isEmpty {
            let rs = pendingReadable
            pendingReadable.removeAll()
            for sid in rs {
                guard let s = streams[sid] else { continue }
                s.inPendingReadable = false
                delegate?.quicReadable(self, stream: sid)
            }
        }
        if !pendingWritable.isEmpty {
            let ws = pendingWritable
            pendingWritable.removeAll()
            for sid in ws where streams[sid] != nil { delegate?.quicWritable(self, stream: sid) }
        }
    }

    // MARK: migration (client)

    // MARK: anti-amplification (server)

    /// Until the client's address is validated the server sends at most three times the bytes
    /// it received from it (RFC 9000 §8.1). ngtcp2 0.12.1 keeps that for its first flight but
    /// not for its probe timeouts (1,200 bytes in got 7,200 out within 5 s), so the limit is
    /// kept here, on every batch, whatever ngtcp2 wrote. A client always: true.
    package internal(set) var addressValidated: Bool
    var amplification = AmplificationLimit()
    /// Packets not sent for the limit (what ngtcp2 then takes as lost).
    package var amplificationHeld: Int { amplification.held }

    /// Moves the connection to a new local address (the sink sends from its new socket now).
    package func migrate(local newLocal: SocketAddress) -> Bool {
        guard let conn, !closed, !isServer else { return false }
        let rv = newLocal.withSockaddr { l, ll in remote.withSockaddr { r, rl in cngtcp2_migrate(conn, l, ll, r, rl, loop.nanoseconds) } }
        guard rv == 0 else { return false }
        localAddress = newLocal
        flushSoon.schedule()
        return true
    }
}
