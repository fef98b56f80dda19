import Glibc
import LoftCore
import LoftIO

extension TLSConnection: H2Output {
    var h2Free: Int { outCap - pending }
    func h2Append(_ bytes: UnsafeRawPointer, _ count: Int) {
        if outTail < count { compactOutput() }
        (output + outEnd).copyMemory(from: bytes, byteCount: count)
        outEnd += count
    }
}

/// The `h2` carrier: one loft session on one HTTP/2 stream (an extended CONNECT, RFC 8441,
/// `:protocol loft`) over TLS with ALPN `h2`. The HTTP/2 machinery is `H2Engine` (nghttp2);
/// this type joins it to a TLSConnection and to the carrier contract. One TLS connection carries
/// one session; the front refuses a second CONNECT on it (429).
final class H2Carrier: Carrier, TLSConnectionOwner, H2EngineOwner {
    enum State { case resolving, connecting, settings, requesting, awaitingRequest, open, closing, closed }

    let kind = CarrierKind.h2
    weak var delegate: CarrierDelegate?
    let isServer: Bool
    var side: CarrierSide { isServer ? .server : .client }
    private let runtime: CarrierRuntime
    private let client: CarrierClient?
    private weak var listener: CarrierListener?
    private var conn: TLSConnection?
    private var engine: H2Engine?
    private var state: State {
        didSet { if state == .closed { closingSelf = nil } }
    }
    /// Alive on its own during a graceful close (its owner has let go already).
    private var closingSelf: H2Carrier?
    private var readingPaused = false
    private var wantWritable = false
    /// Output flushed and input processed once after the batch, however often asked for.
    private lazy var flushSoon = SoonOnce(loop: runtime.loop) { [weak self] in self?.flushNow() }
    private lazy var processSoon = SoonOnce(loop: runtime.loop) { [weak self] in self?.processInput() }
    private(set) var request: CarrierRequest?
    private var peerAddress: Endpoint?

    static let closeWaitMs: UInt64 = 2000

    var isOpen: Bool { state == .open }
    var peer: Endpoint? { peerAddress ?? conn?.peer }
    var tlsDescription: String { describeTLS(conn) }

    init(client: CarrierClient, delegate: CarrierDelegate) {
        isServer = false
        runtime = client.runtime
        self.client = client
        self.delegate = delegate
        state = .resolving
    }

    /// Server side: `conn` finished TLS with ALPN h2; the carrier waits for the CONNECT and
    /// hands itself to the listener once it accepted one.
    init?(server conn: TLSConnection, listener: CarrierListener) {
        isServer = true
        runtime = conn.runtime
        client = nil
        self.listener = listener
        self.conn = conn
        peerAddress = conn.peer
        state = .awaitingRequest
        guard let e = H2Engine(server: true, path: listener.options.path, output: conn) else { return nil }
        engine = e
        e.owner = self
        conn.owner = self
        e.pump()
        flushSoon.schedule()
        processSoon.schedule()
    }

    deinit {
        if state != .closed && state != .closing { conn?.abort() }
    }

    // MARK: client handshake

    func start() {
        guard let client else { return }
        let timeout = client.options.connectTimeoutMs
        runtime.after(timeout) { [weak self] in
            guard let self, [.resolving, .connecting, .settings, .requesting].contains(self.state) else { return }
            self.fail(.timeout("no h2 session stream within \(timeout) ms"))
        }
        client.resolve({ [weak self] r in self?.fail(r) }) { [weak self] endpoints in
            guard let self, self.state == .resolving else { return }
            self.state = .connecting
            self.conn = TLSConnection.dial(runtime: self.runtime, context: client.context, serverName: client.options.verifyName,
                                           addresses: endpoints, inputBytes: 64 * 1024,
                                           outputBytes: client.options.outputBufferBytes, owner: self)
        }
    }

    func tlsReady(_ c: TLSConnection) {
        guard !isServer, state == .connecting else { return }
        peerAddress = c.peer
        guard c.alpn == "h2" else {
            fail(.rejected(status: 0, "the front did not negotiate ALPN h2 (got \(c.alpn.isEmpty ? "none" : c.alpn))"))
            return
        }
        guard let e = H2Engine(server: false, output: c) else { fail(.protocolError("cannot set up HTTP/2")); return }
        engine = e
        e.owner = self
        state = .settings
        e.pump()
        c.flush()
    }

    // MARK: engine events

    func h2Admit(_ engine: H2Engine, _ head: H2RequestHead) -> Bool {
        guard let listener else { return false }
        let r = CarrierRequest(kind: .h2, peer: peer, path: head.path, query: nil, headers: head.headers, sessionID: nil)
        return listener.admitH2(r)
    }

    func h2Event(_ engine: H2Engine, _ event: H2Event) {
        switch event {
        case .peerSettings:
            guard !isServer, state == .settings, let client else { return }
            guard engine.peerAllowsConnect else {
                fail(.rejected(status: 0, "the front does not allow extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL)"))
                return
            }
            state = .requesting
            if !engine.connect(authority: client.options.hostHeader, path: client.options.path) {
                fail(.protocolError("CONNECT not sent: \(engine.failure ?? "")"))
                return
            }
            flushSoon.schedule()
        case .response(let status):
            guard state == .requesting else { return }
            guard (200..<300).contains(status) else {
                fail(.rejected(status: status, "the front answered the CONNECT with \(status)"))
                return
            }
            state = .open
            Log.debug("carrier.h2.open", ["peer": peer.map { "\($0)" } ?? "", "tls": tlsDescription])
            delegate?.carrierConnected(self)
        case .accepted(let head):
            guard isServer, state == .awaitingRequest else { return }
            request = CarrierRequest(kind: .h2, peer: peer, path: head.path, query: nil, headers: head.headers, sessionID: nil)
            state = .open
            flushSoon.schedule()
            listener?.acceptedH2(self)
        case .data(let bytes):
            guard state == .open else { return }
            delegate?.carrier(self, received: bytes)
            if readingPaused { engine.paused = true }
        case .windowOpened:
            flushSoon.schedule()
        case .peerEnded:
            peerEnded()
        case .streamReset(let code):
            if state == .closing { finishClose(); return }
            // A connection error of ours (GOAWAY sent) closes the stream too: name the cause.
            if let f = engine.failure { endWithError(.protocolError(f)); return }
            endWithError(.io("session stream reset: RST_STREAM \(H2Engine.errorName(code))"))
        case .refused(let status, let reason):
            listener?.refused(self, status, reason, nth: engine.refusals)
        case .goAway(let code):
            if code != 0 { endWithError(.protocolError("the peer sent GOAWAY \(H2Engine.errorName(code))")) }
        }
    }

    // MARK: TLS events

    func tlsReceived(_ c: TLSConnection) { processInput() }

    func tlsFlushed(_ c: TLSConnection) {
        if engine?.wantsWrite == true { pumpEngine(); c.flush() }
        if state == .closing { maybeFinishClose() }
        afterFlush()
    }

    func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?) {
        guard c === conn else { return }
        conn = nil
        engine?.close()
        switch state {
        case .closing, .closed:
            state = .closed
        case .awaitingRequest:
            state = .closed
            listener?.h2Ended(self, reason)
        case .open:
            fail(reason ?? .io("connection closed without END_STREAM"))
        case .resolving, .connecting, .settings, .requesting:
            fail(reason ?? .io("connection closed during the handshake"))
        }
    }

    // MARK: receiving

    private func processInput() {
        guard !readingPaused, let c = conn, let e = engine, state != .closed else { return }
        guard c.inEnd > c.inStart else { return }
        let got = e.receive(UnsafeRawBufferPointer(start: c.input + c.inStart, count: c.inEnd - c.inStart))
        guard conn === c else { return }
        guard let n = got else {
            engineFailed()
            return
        }
        c.inStart += n
        if c.inStart == c.inEnd { c.inStart = 0; c.inEnd = 0 }
        pumpEngine()
        if e.isFinished && state != .closed { engineFailed(); return }
        flushSoon.schedule()
    }

    private func pumpEngine() {
        guard let e = engine else { return }
        if !e.pump() { engineFailed() }
    }

    /// nghttp2 ended the connection (a protocol error of the peer, a flood, or GOAWAY both ways).
    private func engineFailed() {
        guard let c = conn, let e = engine else { return }
        let why = e.failure ?? "the HTTP/2 connection ended"
        e.pump()
        conn = nil
        engine = nil
        e.close()
        c.flush()
        c.close(lingerMs: 1000)
        let old = state
        state = .closed
        switch old {
        case .awaitingRequest:
            Log.info("carrier.h2.protocol_error", ["peer": peer.map { "\($0)" } ?? "", "reason": why])
            listener?.h2Ended(self, .protocolError(why))
        case .closing, .closed:
            break
        default:
            Log.warn("carrier.h2.protocol_error", ["peer": peer.map { "\($0)" } ?? "", "reason": why])
            notifyClosed(.protocolError(why))
        }
    }

    /// END_STREAM from the peer: answered with ours, GOAWAY, the connection closed.
    private func peerEnded() {
        switch state {
        case .closing:
            finishClose()
        case .open:
            state = .closed
            shutDownGracefully()
            notifyClosed(.closed)
        case .requesting, .settings:
            fail(.rejected(status: 0, "the front ended the stream before answering"))
        default:
            break
        }
    }

    private func endWithError(_ reason: CarrierCloseReason) {
        guard state != .closed else { return }
        let old = state
        state = .closed
        shutDownGracefully()
        if old == .awaitingRequest { listener?.h2Ended(self, reason) }
        else if old != .closing { notifyClosed(reason) }
    }

    /// END_STREAM (if still open), GOAWAY, then TLS close after the bytes are out.
    private func shutDownGracefully() {
        guard let c = conn, let e = engine else { return }
        e.finish()
        conn = nil
        engine = nil
        e.close()
        c.flush()
        c.close(lingerMs: 1000)
    }

    // MARK: sending

    func write(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard state == .open, let e = engine else { return 0 }
        let n = e.write(bytes)
        if e.failure != nil && e.isFinished { engineFailed(); return n }
        if n < bytes.count { wantWritable = true }
        if n > 0 { flushSoon.schedule() }
        return n
    }

    var writableBytes: Int {
        guard state == .open, let e = engine else { return 0 }
        return e.writable
    }

    var bufferedBytes: Int { conn?.pending ?? 0 }

    func flush() {
        guard let c = conn, state != .closed else { return }
        engine?.pump()
        c.flush()
    }

    private func flushNow() {
        pumpEngine()
        flush()
        if state == .closing { maybeFinishClose() }
        afterFlush()
    }

    private func afterFlush() {
        guard wantWritable, state == .open, let c = conn, let e = engine else { return }
        if c.h2Free - H2Engine.controlReserve >= (c.outCap - H2Engine.controlReserve) / 2 && e.sendWindow > 0 {
            wantWritable = false
            delegate?.carrierWritable(self)
        }
    }

    func setReading(_ on: Bool) {
        readingPaused = !on
        if !on { engine?.paused = true }
        conn?.setReading(on)
        if on { processSoon.schedule() }
    }

    // MARK: closing

    func close() {
        delegate = nil
        switch state {
        case .open:
            guard let e = engine else { state = .closed; return }
            state = .closing
            closingSelf = self
            readingPaused = false
            conn?.setReading(true)
            processSoon.schedule()
            e.finish()
            flush()
            maybeFinishClose()
            runtime.after(Self.closeWaitMs) { [weak self] in
                guard let self, self.state == .closing else { return }
                self.state = .closed
                self.engine?.close()
                self.engine = nil
                self.conn?.abort()
                self.conn = nil
            }
        case .resolving, .connecting, .settings, .requesting, .awaitingRequest:
            state = .closed
            engine?.close()
            engine = nil
            conn?.abort()
            conn = nil
        case .closing, .closed:
            break
        }
    }

    /// Our END_STREAM and GOAWAY are out: wait for the peer's END_STREAM (or its close).
    private func maybeFinishClose() {
        guard state == .closing, let e = engine else { return }
        if !e.sessionStreamOpen || e.isFinished { finishClose() }
    }

    private func finishClose() {
        guard let c = conn else { state = .closed; return }
        state = .closed
        engine?.pump()
        engine?.close()
        engine = nil
        conn = nil
        c.flush()
        c.close(lingerMs: 1000)
    }

    func abort() {
        delegate = nil
        state = .closed
        engine?.close()
        engine = nil
        conn?.abort()
        conn = nil
    }

    private func fail(_ reason: CarrierCloseReason) {
        guard state != .closed else { return }
        let wasClosing = state == .closing
        state = .closed
        engine?.close()
        engine = nil
        conn?.abort()
        conn = nil
        if !wasClosing { notifyClosed(reason) }
    }
}
