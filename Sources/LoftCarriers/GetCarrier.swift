import LoftCore
import LoftHTTP
import LoftIO
import LoftTLS

/// The `get` carrier, client side: two TLS connections to the front, joined by a session id
/// the client picks (128 random bits, hex). Downstream is one long-lived
/// `GET <path>?session=<id>` whose `200` response streams chunks; upstream is a
/// `POST <path>?session=<id>` whose chunked body streams. The front answers the GET only once
/// both requests have arrived, so that 200 means the channel is up.
final class GetClientCarrier: FramedCarrier, TLSConnectionOwner {
    enum State: DialState { case resolving, connecting, open, closing, closed }

    let kind = CarrierKind.get
    weak var delegate: CarrierDelegate?
    private let client: CarrierClient
    let core: CarrierCore<State>
    private var runtime: CarrierRuntime { core.runtime }
    let sessionID = Hex.encode(Crypto.random(16))
    private var down: TLSConnection?
    private var up: TLSConnection?
    private var downHead = false
    private var upReady = false
    private var upEnded = false
    private var chunks = ChunkedDecoder()
    var out = FrameWriter(.chunked)
    private var peerAddress: Endpoint?

    var peer: Endpoint? { peerAddress }
    var request: CarrierRequest? { nil }
    var tlsDescription: String { describeTLS(down) }
    var multipath: [Multipath] { [down?.multipath, up?.multipath].compactMap { $0 } }

    init(client: CarrierClient, delegate: CarrierDelegate) {
        self.client = client
        core = CarrierCore(.client, runtime: client.runtime, state: .resolving)
        self.delegate = delegate
        core.bind(flush: { [weak self] in self?.flush(); self?.afterFlush() }, process: { [weak self] in self?.processDown() })
    }

    deinit {
        if !core.isEnding { down?.abort(); up?.abort() }
    }

    func start() {
        core.dial(client, "get channel", handshaking: { $0 == .resolving || $0 == .connecting },
                  fail: { [weak self] in self?.fail($0) }) { [weak self] endpoints in
            guard let self else { return }
            self.down = self.client.dialTLS(endpoints, owner: self, outputBytes: 4096)
            self.up = self.client.dialTLS(endpoints, owner: self, inputBytes: 16 * 1024)
        }
    }

    private var target: String { "\(client.options.path)?session=\(sessionID)" }

    // MARK: TLS events

    func tlsReady(_ c: TLSConnection) {
        guard state == .connecting else { return }
        let host = client.options.hostHeader
        if c === down {
            peerAddress = c.peer
            _ = c.append("GET \(target) HTTP/1.1\r\nHost: \(host)\r\nAccept: application/octet-stream\r\n"
                + "Cache-Control: no-cache\r\n\r\n")
            c.flush()
        } else if c === up {
            _ = c.append("POST \(target) HTTP/1.1\r\nHost: \(host)\r\nContent-Type: application/octet-stream\r\n"
                + "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n")
            c.flush()
            upReady = true
            maybeOpen()
        }
    }

    func tlsReceived(_ c: TLSConnection) {
        if c === down {
            if !downHead { readDownHead(c) } else { processDown() }
        } else if c === up {
            readUpResponse(c)
        }
    }

    private func readDownHead(_ c: TLSConnection) {
        let avail = UnsafeRawBufferPointer(start: c.input + c.inStart, count: c.inEnd - c.inStart)
        switch HTTPParser.parseResponse(avail) {
        case .incomplete:
            return
        case .failure(let e):
            fail(.rejected(status: 0, e.message))
        case .complete(let head, let consumed):
            guard head.status == 200 else {
                fail(.rejected(status: head.status, "the front answered the GET with \(head.status) \(head.reason)"))
                return
            }
            let te = head.headers.values("transfer-encoding")
            guard te.count == 1, te[0].lowercased() == "chunked", head.headers.values("content-length").isEmpty else {
                fail(.protocolError("the GET response is not Transfer-Encoding: chunked"))
                return
            }
            c.inStart += consumed
            downHead = true
            maybeOpen()
        }
    }

    /// The front answers the POST only when the upstream ends (or to refuse it).
    private func readUpResponse(_ c: TLSConnection) {
        let avail = UnsafeRawBufferPointer(start: c.input + c.inStart, count: c.inEnd - c.inStart)
        switch HTTPParser.parseResponse(avail) {
        case .incomplete:
            if c.inEnd - c.inStart >= HTTPParser.maxHeadBytes { fail(.protocolError("oversized POST response")) }
        case .failure(let e):
            fail(.protocolError(e.message))
        case .complete(let head, _):
            c.inStart = c.inEnd
            if head.status != 200 {
                fail(.rejected(status: head.status, "the front answered the POST with \(head.status) \(head.reason)"))
            } else if state == .open {
                // The front ended the upstream: its last chunk on the GET is on its way.
                upstreamEnded()
            }
        }
    }

    private func upstreamEnded() {
        guard !upEnded else { return }
        upEnded = true
        runtime.after(2000) { [weak self] in
            guard let self, self.state == .open else { return }
            self.fail(.io("the front closed the POST connection"))
        }
    }

    private func maybeOpen() {
        guard state == .connecting, downHead, upReady else { return }
        state = .open
        Log.debug("carrier.get.open", ["peer": peer.map { "\($0)" } ?? "", "session": sessionID])
        delegate?.carrierConnected(self)
        processDown()
    }

    func tlsFlushed(_ c: TLSConnection) { if c === up { afterFlush() } }

    func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?) {
        let isDown = c === down
        guard isDown || c === up else { return }
        if isDown { down = nil } else { up = nil }
        switch state {
        case .closing:
            if down == nil { finishClose() }
        case .closed:
            break
        case .open:
            if !isDown && reason == nil {
                upstreamEnded()
            } else {
                fail(reason ?? .io("the front closed the GET connection without the last chunk"))
            }
        case .resolving, .connecting:
            fail(reason ?? .io("connection closed during the handshake"))
        }
    }

    // MARK: receiving

    private func processDown() {
        while !core.readingPaused, state == .open || state == .closing, let c = down {
            var pos = c.inStart
            let ev = chunks.next(UnsafeRawBufferPointer(start: c.input, count: c.inEnd), &pos)
            c.inStart = pos
            switch ev {
            case .needMore:
                return
            case .data(let r):
                if state == .open { deliver(c, r) }
            case .end:
                c.inStart = c.inEnd
                if state == .closing {
                    finishClose()
                } else {
                    state = .closed
                    closeLegs()
                    notifyClosed(.closed)
                }
                return
            case .failure(let why):
                Log.warn("carrier.get.protocol_error", ["peer": peer.map { "\($0)" } ?? "", "reason": why])
                fail(.protocolError(why))
                return
            }
        }
    }

    // MARK: sending

    var outputLeg: TLSConnection? { up }
    var canSend: Bool { state == .open && !upEnded }

    func flush() {
        guard let c = up else { return }
        out.flush(c)
    }

    func setReading(_ on: Bool) { core.setReading(on, down) }

    // MARK: closing

    func close() {
        delegate = nil
        switch state {
        case .open:
            core.beginClosing(self, expire: { [weak self] in self?.dropLegs() })
            if let c = up {
                out.finalize(c)
                _ = ChunkedEncoder.last.withUnsafeBytes { c.append($0) }
                c.flush()
            }
            down?.setReading(true)
        case .resolving, .connecting:
            abort()
        case .closing, .closed:
            break
        }
    }

    private func finishClose() {
        state = .closed
        closeLegs()
    }

    private func closeLegs() {
        down?.close()
        up?.close()
        down = nil
        up = nil
    }

    func abort() {
        delegate = nil
        state = .closed
        dropLegs()
    }

    private func fail(_ reason: CarrierCloseReason) {
        if core.fail(cutting: dropLegs) { notifyClosed(reason) }
    }

    /// Both connections cut at once.
    private func dropLegs() {
        down?.abort()
        up?.abort()
        down = nil
        up = nil
    }
}

/// The `get` carrier, front side: made when the first of the two requests arrives, handed to
/// the embedder when both are there (the GET is answered `200` then).
final class GetServerCarrier: FramedCarrier, TLSConnectionOwner {
    /// No graceful close of its own: the front ends both legs at once (closing is unused).
    enum State: CarrierState { case joining, open, closing, closed }

    let kind = CarrierKind.get
    weak var delegate: CarrierDelegate?
    let sessionID: String
    let core: CarrierCore<State>
    private weak var listener: CarrierListener?
    private var down: TLSConnection?
    private var up: TLSConnection?
    private var chunks = ChunkedDecoder()
    var out = FrameWriter(.chunked)
    private(set) var request: CarrierRequest?
    private var peerAddress: Endpoint?

    var isJoining: Bool { state == .joining }
    var peer: Endpoint? { peerAddress }
    var tlsDescription: String { describeTLS(down) }
    var multipath: [Multipath] { [down?.multipath, up?.multipath].compactMap { $0 } }

    init(sessionID: String, runtime: CarrierRuntime, listener: CarrierListener) {
        self.sessionID = sessionID
        core = CarrierCore(.server, runtime: runtime, state: .joining)
        self.listener = listener
        core.bind(flush: { [weak self] in self?.flush(); self?.afterFlush() }, process: { [weak self] in self?.processUp() })
    }

    deinit {
        if state != .closed { down?.abort(); up?.abort() }
    }

    /// Adds the GET (downstream) leg; false if this session already has one.
    func attachDown(_ c: TLSConnection, _ r: CarrierRequest) -> Bool {
        guard state == .joining, down == nil else { return false }
        down = c
        c.owner = self
        request = r
        peerAddress = c.peer
        return true
    }

    /// Adds the POST (upstream) leg; its body waits (reading paused) until the join.
    func attachUp(_ c: TLSConnection, _ r: CarrierRequest) -> Bool {
        guard state == .joining, up == nil else { return false }
        up = c
        c.owner = self
        c.setReading(false)
        if request == nil { request = r }
        return true
    }

    var isComplete: Bool { down != nil && up != nil }

    /// Both legs are here: answer the GET and go open.
    func join() {
        guard state == .joining, let d = down, let u = up else { return }
        state = .open
        _ = d.append("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n"
            + "Cache-Control: no-store\r\n\r\n")
        core.flushSoon.schedule()
        u.setReading(!core.readingPaused)
        core.processSoon.schedule()
    }

    /// The join deadline passed with one leg missing.
    func joinTimedOut() {
        guard state == .joining else { return }
        state = .closed
        for c in [down, up].compactMap({ $0 }) {
            _ = c.append(HTTPParser.errorResponse(408))
            c.close(lingerMs: 1000)
        }
        down = nil
        up = nil
    }

    // MARK: TLS events

    func tlsReady(_ c: TLSConnection) {}

    func tlsReceived(_ c: TLSConnection) {
        if c === up {
            if state == .open { processUp() }
        } else if c === down {
            // Nothing may follow the GET: no pipelining, no body.
            c.inStart = c.inEnd
            protocolFailure("bytes after the GET request")
        }
    }

    func tlsFlushed(_ c: TLSConnection) { if c === down { afterFlush() } }

    func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?) {
        let isDown = c === down
        guard isDown || c === up else { return }
        if isDown { down = nil } else { up = nil }
        switch state {
        case .joining:
            state = .closed
            dropLegs()
            listener?.forget(self)
        case .open:
            fail(reason ?? .io("the client closed the \(isDown ? "GET" : "POST") connection"))
        case .closing, .closed:
            break
        }
    }

    // MARK: receiving

    private func processUp() {
        while !core.readingPaused, state == .open, let c = up {
            var pos = c.inStart
            let ev = chunks.next(UnsafeRawBufferPointer(start: c.input, count: c.inEnd), &pos)
            c.inStart = pos
            switch ev {
            case .needMore:
                return
            case .data(let r):
                deliver(c, r)
            case .end:
                // The client ended its upstream: end ours and answer the POST.
                c.inStart = c.inEnd
                endBoth()
                notifyClosed(.closed)
                return
            case .failure(let why):
                protocolFailure(why)
                return
            }
        }
    }

    private func protocolFailure(_ why: String) {
        guard state == .open else { return }
        Log.warn("carrier.get.protocol_error", ["peer": peer.map { "\($0)" } ?? "", "reason": why])
        state = .closed
        if let u = up {
            _ = u.append(HTTPParser.errorResponse(400))
            u.close(lingerMs: 1000)
        }
        down?.abort()
        down = nil
        up = nil
        notifyClosed(.protocolError(why))
    }

    // MARK: sending

    var outputLeg: TLSConnection? { down }
    var canSend: Bool { state == .open }

    func flush() {
        guard let c = down else { return }
        out.flush(c)
    }

    /// Before the join the POST's body waits unread whatever is asked (`join` applies it).
    func setReading(_ on: Bool) {
        if state == .open { core.setReading(on, up) } else { core.readingPaused = !on }
    }

    // MARK: closing

    /// Last chunk on the GET, `200` to the POST, both closed after their bytes are out.
    private func endBoth() {
        state = .closed
        if let d = down {
            out.finalize(d)
            _ = ChunkedEncoder.last.withUnsafeBytes { d.append($0) }
            d.close()
        }
        if let u = up {
            _ = u.append("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            u.close()
        }
        down = nil
        up = nil
    }

    func close() {
        delegate = nil
        switch state {
        case .open: endBoth()
        case .joining: abort()
        case .closing, .closed: break
        }
    }

    func abort() {
        delegate = nil
        let wasJoining = state == .joining
        state = .closed
        dropLegs()
        if wasJoining { listener?.forget(self) }
    }

    private func fail(_ reason: CarrierCloseReason) {
        if core.fail(cutting: dropLegs) { notifyClosed(reason) }
    }

    /// Both connections cut at once.
    private func dropLegs() {
        down?.abort()
        up?.abort()
        down = nil
        up = nil
    }

    private func notifyClosed(_ reason: CarrierCloseReason) { notifyClosed(reason, logging: [("session", sessionID)]) }
}
