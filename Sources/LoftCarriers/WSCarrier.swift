import LoftCore
import LoftHTTP
import LoftIO
import LoftTLS

/// The `ws` carrier: one WebSocket (RFC 6455) over TLS; session bytes travel in binary frames
/// (client frames masked, server frames not). Ping is answered with Pong; the close handshake
/// is done both ways; any violation ends the connection with the matching close code.
final class WSCarrier: FramedCarrier, TLSConnectionOwner {
    enum State: DialState { case resolving, connecting, upgrading, open, closing, closed }

    let kind = CarrierKind.ws
    weak var delegate: CarrierDelegate?
    let core: CarrierCore<State>
    private var runtime: CarrierRuntime { core.runtime }
    private let client: CarrierClient?
    private var conn: TLSConnection?
    private var key = ""
    private var decoder: WSDecoder
    var out: FrameWriter
    private(set) var request: CarrierRequest?
    private var peerAddress: Endpoint?

    var peer: Endpoint? { peerAddress ?? conn?.peer }
    var tlsDescription: String { describeTLS(conn) }
    var multipath: [Multipath] { [conn?.multipath].compactMap { $0 } }

    init(client: CarrierClient, delegate: CarrierDelegate) {
        core = CarrierCore(.client, runtime: client.runtime, state: .resolving)
        self.client = client
        self.delegate = delegate
        decoder = WSDecoder(role: .client)
        out = FrameWriter(.ws(masked: true))
        setUp()
    }

    /// Server side: `conn` carried a valid upgrade request; the 101 goes out now.
    init(server conn: TLSConnection, request: CarrierRequest, key: String) {
        core = CarrierCore(.server, runtime: conn.runtime, state: .open)
        client = nil
        self.conn = conn
        self.request = request
        peerAddress = conn.peer
        decoder = WSDecoder(role: .server)
        out = FrameWriter(.ws(masked: false))
        setUp()
        conn.owner = self
        _ = conn.append(WSHandshake.response(accept: WSHandshake.accept(forKey: key)))
        core.flushSoon.schedule()
        // Frames that came with the request are processed once the embedder has the carrier.
        core.processSoon.schedule()
    }

    private func setUp() {
        core.bind(flush: { [weak self] in self?.flushNow() }, process: { [weak self] in self?.processInput() })
        let rt = runtime
        out.keySource = { [unowned rt] in rt.maskKey() }
    }

    deinit {
        // Dropped without close(): end at once. After close() the connection finishes alone.
        if !core.isEnding { conn?.abort() }
    }

    // MARK: client handshake

    func start() {
        guard let client else { return }
        core.dial(client, "ws connection", handshaking: { $0 == .resolving || $0 == .connecting || $0 == .upgrading },
                  fail: { [weak self] in self?.fail($0) }) { [weak self] endpoints in
            guard let self else { return }
            self.conn = client.dialTLS(endpoints, owner: self)
        }
    }

    func tlsReady(_ c: TLSConnection) {
        guard side == .client, state == .connecting, let client else { return }
        state = .upgrading
        peerAddress = c.peer
        key = WSHandshake.makeKey()
        _ = c.append(WSHandshake.request(host: client.options.hostHeader, path: client.options.path, key: key))
        c.flush()
    }

    private func readUpgradeResponse(_ c: TLSConnection) {
        let avail = UnsafeRawBufferPointer(start: c.input + c.inStart, count: c.inEnd - c.inStart)
        switch HTTPParser.parseResponse(avail) {
        case .incomplete:
            return
        case .failure(let e):
            fail(.rejected(status: 0, e.message))
        case .complete(let head, let consumed):
            if let why = WSHandshake.validate(response: head, key: key) {
                fail(.rejected(status: head.status == 101 ? 0 : head.status, why))
                return
            }
            c.inStart += consumed
            state = .open
            Log.debug("carrier.ws.open", ["peer": c.peer.map { "\($0)" } ?? "", "tls": describeTLS(c)])
            delegate?.carrierConnected(self)
            processInput()
        }
    }

    // MARK: TLS events

    func tlsReceived(_ c: TLSConnection) {
        switch state {
        case .upgrading: readUpgradeResponse(c)
        case .open, .closing: processInput()
        default: break
        }
    }

    func tlsFlushed(_ c: TLSConnection) { afterFlush() }

    func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?) {
        guard c === conn else { return }
        conn = nil
        switch state {
        case .closing, .closed:
            state = .closed
        case .open:
            fail(reason ?? .io("connection closed without a Close frame"))
        case .resolving, .connecting, .upgrading:
            fail(reason ?? .io("connection closed during the handshake"))
        }
    }

    // MARK: receiving

    private func processInput() {
        while !core.readingPaused, state == .open || state == .closing, let c = conn {
            var pos = c.inStart
            let ev = decoder.next(UnsafeMutableRawBufferPointer(start: c.input, count: c.inEnd), &pos)
            c.inStart = pos
            switch ev {
            case .needMore:
                return
            case .data(let r):
                if state == .open { deliver(c, r) }
            case .ping(let payload):
                if state == .open { sendControl(WSOpcode.pong, payload) }
            case .pong:
                continue
            case .close(let code, let reason):
                peerClosed(code, reason)
                return
            case .failure(let code, let why):
                protocolFailure(code, why)
                return
            }
        }
    }

    private func peerClosed(_ code: UInt16?, _ reason: String) {
        guard let c = conn else { return }
        if state == .closing {
            // The answer to our Close.
            state = .closed
            conn = nil
            c.close()
            return
        }
        out.finalize(c)
        var payload: [UInt8] = []
        if let code { payload = [UInt8(code >> 8), UInt8(code & 0xFF)] }
        sendControl(WSOpcode.close, payload)
        state = .closed
        conn = nil
        c.flush()
        c.close()
        let r: CarrierCloseReason = code == nil || code == WSCloseCode.normal || code == WSCloseCode.goingAway
            ? .closed : .peerClosed(code: code!, reason: reason)
        notifyClosed(r)
    }

    private func protocolFailure(_ code: UInt16, _ why: String) {
        Log.warn("carrier.ws.protocol_error", ["peer": peer.map { "\($0)" } ?? "", "code": code, "reason": why])
        if let c = conn {
            out.finalize(c)
            if state == .open { sendClose(code, why) }
            conn = nil
            c.flush()
            c.close(lingerMs: 1000)
        }
        let wasOpen = state == .open
        state = .closed
        if wasOpen { notifyClosed(.protocolError(why)) }
    }

    private func sendClose(_ code: UInt16, _ reason: String) {
        var payload = [UInt8(code >> 8), UInt8(code & 0xFF)]
        payload += Array(reason.utf8.prefix(120))
        sendControl(WSOpcode.close, payload)
    }

    /// Appends a control frame after everything already buffered (uses the reserved space).
    private func sendControl(_ opcode: UInt8, _ payload: [UInt8]) {
        guard let c = conn else { return }
        out.finalize(c)
        let key = side == .client ? runtime.maskKey() : nil
        let h = WSFrameHeader(opcode: opcode, maskKey: key, payloadLength: UInt64(payload.count))
        var frame = h.encoded() + payload
        if let key, !payload.isEmpty {
            frame.withUnsafeMutableBytes { wsMask($0.baseAddress! + h.size, payload.count, key, phase: 0) }
        }
        let ok = frame.withUnsafeBytes { c.append($0) }
        if !ok { Log.warn("carrier.ws.control_dropped", ["opcode": opcode]) }
        core.flushSoon.schedule()
    }

    // MARK: sending

    var outputLeg: TLSConnection? { conn }
    var canSend: Bool { state == .open }

    func flush() {
        guard let c = conn, state == .open || state == .closing else { return }
        out.flush(c)
    }

    private func flushNow() {
        flush()
        afterFlush()
    }

    func setReading(_ on: Bool) { core.setReading(on, conn) }

    // MARK: closing

    func close() {
        delegate = nil
        switch state {
        case .open:
            guard let c = conn else { state = .closed; return }
            core.beginClosing(self, expire: { [weak self, weak c] in
                self?.conn = nil
                c?.abort()
            }, otherwise: { [weak c] in c?.abort() })
            sendClose(WSCloseCode.normal, "")
            c.setReading(true)
            flush()
        case .resolving, .connecting, .upgrading:
            state = .closed
            conn?.abort()
            conn = nil
        case .closing, .closed:
            break
        }
    }

    func abort() {
        delegate = nil
        state = .closed
        conn?.abort()
        conn = nil
    }

    private func fail(_ reason: CarrierCloseReason) {
        if core.fail(cutting: { conn?.abort(); conn = nil }) { notifyClosed(reason) }
    }
}
