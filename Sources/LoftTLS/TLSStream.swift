import Glibc
import LoftCore
import LoftIO

/// One TLS 1.3 client connection as a `ByteStream`: the name resolved with the loop's resolver,
/// a TCP connect to the first address that answers, the handshake (certificate checked as the
/// context says), then bytes both ways through the connection's two fixed buffers. An outbound
/// that speaks a protocol over TLS (vless) builds its stream end on it.
///
/// `streamConnected` comes once the handshake is done; a refused connect or a failed handshake
/// is one `streamFailed`, and `cause` says why. Reads are zero-copy (`peek` shows the decrypted
/// bytes in the input buffer); writes are copied into the output buffer and flushed at once.
/// `shutdownWrite` sends close_notify and a FIN and keeps reading; the peer's close_notify is
/// EOF (the connection is then gone both ways: later writes fail), and an EOF without it is a
/// failure (the connection was cut, the bytes may be truncated).
public final class TLSStream: ByteStream, TLSConnectionOwner {
    public weak var events: ByteStreamEvents?
    private let runtime: CarrierRuntime
    private let context: TLSContext
    private let serverName: String
    private let port: UInt16
    private let inputBytes: Int
    private let outputBytes: Int
    private var conn: TLSConnection?
    private var resolving: ResolveRequest?
    /// Handshake done: `streamConnected` was sent.
    public private(set) var isConnected = false
    /// Why it ended (nil: still open, or ended cleanly by the peer or by `close`/`reset`).
    public private(set) var cause: CarrierCloseReason?
    private var eof = false
    private var failure: FlowFailure?
    private var finished = false
    private var readInterest = true
    private var wantWritable = false
    /// The reader left bytes in the input buffer with reads still wanted: the connection stops
    /// reading until they are taken (so nothing overflows the buffer, and a clean end is read
    /// only behind the last byte).
    private var stalled = false

    /// Starts at once: resolve `host`, connect to `port`, handshake with SNI `serverName`.
    /// `multipath`: over Multipath TCP when the kernel and the server have it, else TCP.
    public init(runtime: CarrierRuntime, context: TLSContext, host: String, port: UInt16, serverName: String,
                events: ByteStreamEvents?, inputBytes: Int = 64 * 1024, outputBytes: Int = 64 * 1024,
                multipath: Bool = false) {
        self.runtime = runtime
        self.context = context
        self.serverName = serverName
        self.port = port
        self.events = events
        self.inputBytes = inputBytes
        self.outputBytes = outputBytes
        resolving = runtime.resolve(host) { [weak self] addresses in
            guard let self, !self.finished else { return }
            self.resolving = nil
            guard !addresses.isEmpty else {
                self.failNow(.connectFailed("no address for \(host)"), .resolveFailed)
                return
            }
            self.conn = TLSConnection.dial(runtime: self.runtime, context: self.context, serverName: self.serverName,
                                           addresses: addresses.map { Endpoint($0, self.port) },
                                           inputBytes: self.inputBytes, outputBytes: self.outputBytes,
                                           multipath: multipath, owner: self)
        }
    }

    deinit { conn?.abort() }

    /// The TLS version, cipher and ALPN (for a log line), once connected.
    public var tlsDetails: String { describeTLS(conn) }
    /// The SHA-1 and SHA-256 of the server certificate's DER (SSTP's crypto binding names the
    /// certificate by them), once connected.
    public var peerCertificateHashes: (sha1: [UInt8], sha256: [UInt8])? {
        guard let c = conn, let a = c.peerCertificateHash(sha256: false), let b = c.peerCertificateHash(sha256: true) else { return nil }
        return (a, b)
    }
    /// Once connected: Multipath TCP with its subflows, or plain TCP.
    public var multipath: Multipath? { conn?.multipath }
    /// The handshake resumed a session (a context with resumption on).
    public var resumed: Bool { conn?.resumed ?? false }

    private func failNow(_ reason: CarrierCloseReason, _ f: FlowFailure) {
        guard !finished else { return }
        finished = true
        cause = reason
        failure = f
        conn?.abort()
        conn = nil
        events?.streamFailed(self, f)
    }

    /// The flow failure an app is told for a carrier-level reason.
    package static func flowFailure(_ reason: CarrierCloseReason) -> FlowFailure {
        switch reason {
        case .connectFailed(let s):
            if s.contains("refused") { return .refused }
            if s.contains("No route") || s.contains("unreachable") { return .hostUnreachable }
            if s.contains("no address") { return .resolveFailed }
            return .networkUnreachable
        case .timeout: return .timedOut
        default: return .other(ECONNRESET)
        }
    }

    // MARK: TLSConnectionOwner

    package func tlsReady(_ c: TLSConnection) {
        guard !finished else { return }
        isConnected = true
        c.setReading(readInterest && !stalled)
        events?.streamConnected(self)
    }

    package func tlsReceived(_ c: TLSConnection) {
        guard readInterest, c.inStart < c.inEnd else { return }
        events?.streamReadable(self)
        if readInterest, !stalled, conn === c, c.inStart < c.inEnd {
            stalled = true
            c.setReading(false)
        }
    }

    /// Bytes were taken: a stalled connection reads again once its buffer is empty.
    private func taken(_ c: TLSConnection) {
        guard stalled, c.inStart == c.inEnd else { return }
        stalled = false
        if readInterest { c.setReading(true) }
    }

    package func tlsFlushed(_ c: TLSConnection) {
        guard wantWritable, writeRoom > 0 else { return }
        wantWritable = false
        events?.streamWritable(self)
    }

    package func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?) {
        guard !finished, c === conn else { return }
        if !isConnected {
            let r = reason ?? .tls("closed during the handshake")
            failNow(r, Self.flowFailure(r))
            return
        }
        if let reason {
            failNow(reason, .other(ECONNRESET))
            return
        }
        if !c.closeNotified {
            // EOF without close_notify: the connection was cut (the server killed, a middlebox),
            // and what came may be truncated; the app is told so with a reset, not a clean end.
            failNow(.io("connection cut: EOF without close_notify"), .other(ECONNRESET))
            return
        }
        // A clean end: EOF once what is buffered has been read (the buffers outlive the socket).
        eof = true
        if readInterest { events?.streamReadable(self) }
    }

    // MARK: ByteStream

    private var buffered: Int { conn.map { $0.inEnd - $0.inStart } ?? 0 }
    /// Decrypted bytes in the input buffer that the reader has not taken yet.
    public var bufferedInput: Int { buffered }
    /// The output buffer's bytes not yet taken by TLS.
    public var heldBytes: Int { conn?.pending ?? 0 }

    public var writeRoom: Int {
        guard let c = conn, c.isOpen, !c.writeShut else { return 1 }   // broken: write says so
        let room = c.outCap - c.pending
        if room <= 0 { wantWritable = true }
        return room
    }

    /// Takes bytes while the output buffer has room, handing a full buffer to TLS as it goes:
    /// a short write happens only when the socket is full, so the connection's next flush
    /// (on the socket's writable event) reports the room back. (Returning short while the
    /// socket had taken everything left the caller waiting for an event that never came: a
    /// 64 KiB segment from the TUN's offload is larger than the buffer.)
    public func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        guard let c = conn, isConnected, c.isOpen, !c.writeShut, !eof else { return -1 }
        if c.outTail < c.outCap - c.pending { c.compactOutput() }
        var put = 0
        var total = 0
        for i in 0..<count { total += segments[i].iov_len }
        outer: for i in 0..<count {
            guard var base = segments[i].iov_base else { continue }
            var left = segments[i].iov_len
            while left > 0 {
                if c.outTail == 0 {
                    c.flush()
                    guard c.isOpen, c.pending == 0 else { break outer }
                    c.compactOutput()
                    if c.outTail == 0 { break outer }
                }
                let take = min(left, c.outTail)
                (c.output + c.outEnd).copyMemory(from: base, byteCount: take)
                c.outEnd += take
                put += take
                left -= take
                base += take
            }
        }
        if put < total { wantWritable = true }
        if put > 0 { c.flush() }
        return put
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        if let c = conn, c.inStart < c.inEnd {
            let n = min(buffer.count, c.inEnd - c.inStart)
            buffer.baseAddress!.copyMemory(from: c.input + c.inStart, byteCount: n)
            c.inStart += n
            taken(c)
            return .data(n)
        }
        return empty()
    }

    public func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        count = 0
        if let c = conn, c.inStart < c.inEnd {
            iov[0] = iovec(iov_base: c.input + c.inStart, iov_len: c.inEnd - c.inStart)
            count = 1
            return .data(c.inEnd - c.inStart)
        }
        return empty()
    }

    public func consume(_ n: Int) {
        guard let c = conn else { return }
        c.inStart = min(c.inStart + n, c.inEnd)
        taken(c)
    }

    private func empty() -> StreamReadResult {
        if let failure { return .failed(failure) }
        if eof || finished { return .eof }
        return .wouldBlock
    }

    public func setReadInterest(_ on: Bool) {
        guard readInterest != on else { return }
        readInterest = on
        guard let c = conn, isConnected else { return }
        c.setReading(on && !stalled)
        if on && (buffered > 0 || eof) {
            // Bytes (or the EOF) already here announce no new arrival: say so on the next turn.
            runtime.loop.soon { [weak self] in
                guard let self, self.readInterest, !self.finished else { return }
                self.events?.streamReadable(self)
            }
        }
    }

    public func shutdownWrite() { conn?.shutdownWrite() }

    public func close() {
        finished = true
        resolving?.cancel()
        conn?.close()
        // The buffers stay with the connection while it lingers; this end is done.
        conn = nil
    }

    public func reset() {
        finished = true
        resolving?.cancel()
        conn?.abort()
        conn = nil
    }
}
