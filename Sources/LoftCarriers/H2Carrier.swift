import Glibc
import LoftCore
import LoftHTTP
import LoftIO
import LoftTLS

extension TLSConnection: H2Output {
    package var h2Free: Int { outCap - pending }
    package func h2Append(_ bytes: UnsafeRawPointer, _ count: Int) {
        if outTail < count { compactOutput() }
        (output + outEnd).copyMemory(from: bytes, byteCount: count)
        outEnd += count
    }
}

/// The `h2` carrier: one loft session on one HTTP/2 stream (an extended CONNECT, RFC 8441,
/// `:protocol loft`) over TLS with ALPN `h2`. The HTTP/2 machinery is `H2Engine` (nghttp2);
/// this type joins it to a TLSConnection and to the carrier contract. One TLS connection carries
/// one session; the front refuses a second CONNECT on it (429).
final class H2Carrier: CoreCarrier, TLSConnectionOwner, H2EngineOwner {
    enum State: DialState { case resolving, connecting, settings, requesting, awaitingRequest, open, closing, closed }

    let kind = CarrierKind.h2
    weak var delegate: CarrierDelegate?
    let core: CarrierCore<State>
    private var runtime: CarrierRuntime { core.runtime }
    private let client: CarrierClient?
    private weak var listener: CarrierListener?
    private var conn: TLSConnection?
    private var engine: H2Engine?
    private(set) var request: CarrierRequest?
    private var peerAddress: Endpoint?

    private var isServer: Bool { core.isServer }
    var peer: Endpoint? { peerAddress ?? conn?.peer }
    var tlsDescription: String { describeTLS(conn) }
    var multipath: [Multipath] { [conn?.multipath].compactMap { $0 } }

    init(client: CarrierClient, delegate: CarrierDelegate) {
        core = CarrierCore(.client, runtime: client.runtime, state: .resolving)
        self.client = client
        self.delegate = delegate
        bindCore()
    }

    /// Server side: `conn` finished TLS with ALPN h2; the carrier waits for the CONNECT and
    /// hands itself to the listener once it accepted one.
    init?(server conn: TLSConnection, listener: CarrierListener) {
        core = CarrierCore(.server, runtime: conn.runtime, state: .awaitingRequest)
        client = nil
        self.listener = listener
        self.conn = conn
        peerAddress = conn.peer
        bindCore()
        guard let e = H2Engine(server: true, path: listener.options.path, output: conn) else { return nil }
        engine = e
        e.owner = self
        conn.owner = self
        e.pump()
        core.flushSoon.schedule()
        core.processSoon.schedule()
    }

    private func bindCore() {
        core.bind(flush: { [weak self] in self?.flushNow() }, process: { [weak self] in self?.processInput() })
    }

    deinit {
        if !core.isEnding { conn?.abort() }
    }

    // MARK: client handshake

    func start() {
        guard let client else { return }
        core.dial(client, "h2 session stream", handshaking: { [.resolving, .connecting, .settings, .requesting].contains($0) },
                  fail: { [weak self] in self?.fail($0) }) { [weak self] endpoints in
            guard let self else { return }
            self.conn = client.dialTLS(endpoints, owner: self)
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
            core.flushSoon.schedule()
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
            core.flushSoon.schedule()
            listener?.acceptedH2(self)
        case .data(let bytes):
            guard state == .open else { return }
            delegate?.carrier(self, received: bytes)
            if core.readingPaused { engine.paused = true }
        case .windowOpened:
            core.flushSoon.schedule()
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
        guard !core.readingPaused, let c = conn, let e = engine, state != .closed else { return }
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
        core.flushSoon.schedule()
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
        core.wrote(n, of: bytes.count)
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

    /// The output's half free and HTTP/2's send window open.
    private func afterFlush() {
        if let c = conn, let e = engine,
           core.writableAgain(c.h2Free - H2Engine.controlReserve, of: c.outCap - H2Engine.controlReserve, and: e.sendWindow > 0) {
            delegate?.carrierWritable(self)
        }
    }

    func setReading(_ on: Bool) {
        if !on { engine?.paused = true }
        core.setReading(on, conn)
    }

    // MARK: closing

    func close() {
        delegate = nil
        switch state {
        case .open:
            guard let e = engine else { state = .closed; return }
            core.beginClosing(self, expire: { [weak self] in self?.dropConnection() })
            conn?.setReading(true)
            core.processSoon.schedule()
            e.finish()
            flush()
            maybeFinishClose()
        case .resolving, .connecting, .settings, .requesting, .awaitingRequest:
            state = .closed
            dropConnection()
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
        dropConnection()
    }

    private func fail(_ reason: CarrierCloseReason) {
        if core.fail(cutting: dropConnection) { notifyClosed(reason) }
    }

    /// The engine and the connection cut at once.
    private func dropConnection() {
        engine?.close()
        engine = nil
        conn?.abort()
        conn = nil
    }
}
