import LoftCore
import LoftIO

/// A connection that reads one request (up to a terminator, bounded in size and time),
/// answers once and closes. Shared by the control socket and the metrics listener. A timer
/// closes it `deadlineMs` after it was accepted, answered or not.
final class OneShotConnection: IOHandler {
    let fd: Int32
    let loop: EventLoop
    let terminator: [UInt8]
    let limit: Int
    let respond: ([UInt8]) -> [UInt8]
    private var deadline: TimerHandle?
    var request: [UInt8] = []
    var response: [UInt8] = []
    var sent = 0
    var answered = false
    var closed = false
    var onClose: ((OneShotConnection) -> Void)?
    /// Offered the request before `respond`: true when it took the connection's descriptor
    /// (it answers and closes it from then on; this connection lets go without closing it).
    var adopt: (([UInt8], Int32) -> Bool)?
    /// When it was accepted (the oldest idle one is evicted first when the table is full).
    let acceptedAt: UInt64

    init(fd: Int32, loop: EventLoop, terminator: [UInt8], limit: Int, deadlineMs: UInt64,
         respond: @escaping ([UInt8]) -> [UInt8]) {
        self.fd = fd
        self.loop = loop
        self.terminator = terminator
        self.limit = limit
        self.respond = respond
        acceptedAt = loop.now
        loop.register(fd, IOEvents.readable, self)
        deadline = loop.schedule(after: deadlineMs) { [weak self] in self?.close() }
    }

    func handleIO(_ events: UInt32) {
        if !answered {
            var buf = [UInt8](repeating: 0, count: 4096)
            let n: Int
            switch buf.withUnsafeMutableBytes({ Syscall.read(fd, $0.baseAddress!, $0.count) }) {
            case .success(let count) where count > 0: n = count
            case .failure(let e) where e.wouldBlock: return
            case .success, .failure: close(); return
            }
            request.append(contentsOf: buf[0..<n])
            if let end = Self.find(terminator, in: request) {
                answer(Array(request[..<end]))
            } else if request.count > limit {
                answer(nil)
            }
            return
        }
        flush()
    }

    private func answer(_ req: [UInt8]?) {
        answered = true
        if let req, let adopt {
            loop.unregister(fd)
            if adopt(req, fd) {
                closed = true
                if let deadline { loop.cancel(deadline) }
                deadline = nil
                onClose?(self)
                return
            }
            loop.register(fd, IOEvents.readable, self)
        }
        response = req.map(respond) ?? Array("error request too long\n".utf8)
        loop.modify(fd, IOEvents.writable)
        flush()
    }

    private func flush() {
        while sent < response.count {
            switch response.withUnsafeBytes({ Syscall.write(fd, $0.baseAddress! + sent, response.count - sent) }) {
            case .success(let n): sent += n
            case .failure(let e) where e.wouldBlock: return
            case .failure: close(); return
            }
        }
        close()
    }

    func close() {
        guard !closed else { return }
        closed = true
        if let deadline { loop.cancel(deadline) }
        deadline = nil
        loop.unregister(fd)
        _ = Syscall.close(fd)
        onClose?(self)
    }

    /// Where the request ends: the first `needle` in `hay`.
    static func find(_ needle: [UInt8], in hay: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        for i in 0...(hay.count - needle.count) where hay[i] == needle[0] {
            if Array(hay[i..<i + needle.count]) == needle { return i }
        }
        return nil
    }
}

/// Open one-shot connections with a cap: when full, the one accepted longest ago that has not
/// sent its whole request yet makes room (an idle client never locks out a working one).
struct OneShotTable {
    let capacity: Int
    var connections: [ObjectIdentifier: OneShotConnection] = [:]
    private(set) var evictedIdle: UInt64 = 0

    init(capacity: Int) { self.capacity = capacity }

    var isFull: Bool { connections.count >= capacity }

    /// When full: the connection to close to make room (the oldest that has not sent its whole
    /// request), counted; nil if every one is being answered. The caller closes it (its
    /// onClose removes it from this table).
    mutating func evictionVictim() -> OneShotConnection? {
        guard let oldest = connections.values.filter({ !$0.answered }).min(by: { $0.acceptedAt < $1.acceptedAt }) else {
            return nil
        }
        evictedIdle &+= 1
        return oldest
    }

    mutating func add(_ c: OneShotConnection) { connections[ObjectIdentifier(c)] = c }
    mutating func remove(_ c: OneShotConnection) { connections[ObjectIdentifier(c)] = nil }
}

/// Paces a listener: at most `perSecond` accepts (with a burst); past that the listening fd
/// stops being watched until the next token, so a storm of clients waits in the kernel's
/// backlog instead of taking the loop from the data path.
final class AcceptPacer {
    private let loop: EventLoop
    private let fd: Int32
    private var bucket: TokenBucket
    private var resume: TimerHandle?
    private(set) var paused: UInt64 = 0

    init(loop: EventLoop, fd: Int32, perSecond: Double, burst: Double) {
        self.loop = loop
        self.fd = fd
        bucket = TokenBucket(perSecond: perSecond, burst: burst)
    }

    /// True if one more connection may be accepted now; otherwise pauses the listener.
    func admit() -> Bool {
        if bucket.take(now: loop.now) { return true }
        guard resume == nil else { return false }
        paused &+= 1
        loop.modify(fd, 0)
        resume = loop.schedule(after: max(1, bucket.msUntilNext(now: loop.now))) { [weak self] in
            guard let self else { return }
            self.resume = nil
            self.loop.modify(self.fd, IOEvents.readable)
        }
        return false
    }

    func stop() {
        if let r = resume { loop.cancel(r) }
        resume = nil
    }
}

/// Answers that are expensive to render (status of every flow, metrics), reused while
/// requests come faster than `quietMs` apart: a storm of requests costs one render per
/// `maxAgeMs`, not one per request, and a request after a quiet spell always gets a fresh one.
/// A class: a render may read `hits` (loft's status shows it) while `answer` runs.
final class RenderCache {
    static let maxAgeMs: UInt64 = 200
    static let quietMs: UInt64 = 100
    private var entries: [String: (at: UInt64, body: [UInt8])] = [:]
    private var lastRequest: [String: UInt64] = [:]
    private(set) var hits: UInt64 = 0

    func answer(_ key: String, now: UInt64, render: () -> [UInt8]) -> [UInt8] {
        let previous = lastRequest[key]
        lastRequest[key] = now
        if let e = entries[key], let p = previous, now &- p < Self.quietMs, now &- e.at < Self.maxAgeMs {
            hits &+= 1
            return e.body
        }
        let body = render()
        entries[key] = (now, body)
        return body
    }
}

/// The control socket: a Unix stream socket, mode 0600, that answers one line-request per
/// connection (`status`, `status json`, `flows`, `metrics`, `path-changed`, `reload`).
/// Answers start with `ok` or `error <why>` on their first line.
public final class ControlServer: IOHandler {
    public let path: String
    let loop: EventLoop
    let fd: Int32
    let handler: (String) -> Result<String, ControlError>
    var table = OneShotTable(capacity: ControlServer.maxClients)
    let cache = RenderCache()
    public private(set) var refusedPeers: UInt64 = 0
    public private(set) var refusedBusy: UInt64 = 0
    public private(set) var badRequests: UInt64 = 0
    /// Idle clients closed to make room, and answers served from the render cache.
    public var evictedIdle: UInt64 { table.evictedIdle }
    public var cachedAnswers: UInt64 { cache.hits }
    static let maxClients = 32
    /// A connection is closed this long after it was accepted.
    static let deadlineMs: UInt64 = 2000

    public struct ControlError: Error, CustomStringConvertible {
        public var description: String
        public init(_ d: String) { description = d }
    }

    public init(path: String, loop: EventLoop, handler: @escaping (String) -> Result<String, ControlError>) throws {
        self.path = path
        self.loop = loop
        self.handler = handler
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            let dir = String(path[..<slash])
            if !Syscall.exists(dir) { Syscall.makeDirectory(dir, mode: 0o755) }
        }
        switch Syscall.unixListen(path, mode: 0o600) {
        case .success(let r): fd = r
        case .failure(let e):
            throw ControlError(e == .addressInUse ? "control socket \(path) is in use by another loft"
                                                    : "control socket \(path): \(e)")
        }
        loop.register(fd, IOEvents.readable, self)
    }

    /// 200 requests a second at most (`loft status --watch` asks once a second).
    private lazy var pacer = AcceptPacer(loop: loop, fd: fd, perSecond: 200, burst: 50)
    public var rateLimited: UInt64 { pacer.paused }

    public func handleIO(_ events: UInt32) {
        while pacer.admit() {
            guard case .success(let c) = Syscall.accept(fd) else { return }
            // Only root and loft's own user; the file mode says the same, this holds for root too.
            let uid = Syscall.peerUID(c)
            if uid == nil || (uid != 0 && uid != Syscall.effectiveUserID) {
                refusedPeers &+= 1
                Self.refuse(c, "error permission denied\n")
                continue
            }
            if table.isFull, let victim = table.evictionVictim() { victim.close() }
            if table.isFull {
                refusedBusy &+= 1
                Self.refuse(c, "error busy: \(Self.maxClients) control requests in progress, try again\n")
                continue
            }
            let conn = OneShotConnection(fd: c, loop: loop, terminator: [10], limit: 1024,
                                         deadlineMs: Self.deadlineMs) { [weak self] req in
                guard let self else { return [] }
                return self.respond(req)
            }
            conn.onClose = { [weak self] c in self?.table.remove(c) }
            if captureHandler != nil {
                conn.adopt = { [weak self] req, fd in self?.adoptCapture(req, fd) ?? false }
            }
            table.add(conn)
        }
    }

    /// Takes `capture …` requests' connections: the handler answers (`ok` then the stream, or
    /// `error …`) and closes the descriptor itself. Nil: a capture request is answered by the
    /// handler like any other (an error where loft has nothing to capture).
    public var captureHandler: ((CaptureRequest, Int32) -> Void)?

    private func adoptCapture(_ raw: [UInt8], _ fd: Int32) -> Bool {
        guard let captureHandler, let line = Self.requestLine(raw), line.hasPrefix("capture"),
              case .success(.capture(let request)) = ControlRequest.parse(line) else { return false }
        captureHandler(request, fd)
        return true
    }

    /// An answer to a connection that gets nothing more (a refused peer, a capture that does
    /// not start), and the connection closed.
    public static func refuse(_ c: Int32, _ message: String) {
        let msg = Array(message.utf8)
        _ = msg.withUnsafeBytes { Syscall.write(c, $0.baseAddress!, $0.count) }
        _ = Syscall.close(c)
    }

    /// The request line of a request's bytes (its terminator gone): nil when it is not text.
    static func requestLine(_ raw: [UInt8]) -> String? {
        guard let text = String(validating: raw, as: UTF8.self), !text.contains("\0") else { return nil }
        return text.hasSuffix("\r") ? String(text.dropLast()) : text
    }

    private func respond(_ raw: [UInt8]) -> [UInt8] {
        guard let line = Self.requestLine(raw) else {
            badRequests &+= 1
            return Array("error request is not UTF-8 text\n".utf8)
        }
        let render = { [self] () -> [UInt8] in
            switch handler(line) {
            case .success(let body): return Array(("ok\n" + body).utf8)
            case .failure(let e):
                badRequests &+= 1
                return Array("error \(e.description)\n".utf8)
            }
        }
        // Requests that only read are answered from the render cache during a storm; the
        // others (path-changed, reload) always run.
        guard case .success(let request) = ControlRequest.parse(line), request.isReadOnly else { return render() }
        return cache.answer(line, now: loop.now, render: render)
    }

    public func stop() {
        for c in Array(table.connections.values) { c.close() }
        pacer.stop()
        loop.unregister(fd)
        _ = Syscall.close(fd)
        Syscall.unlink(path)
    }
}

/// Prometheus metrics over HTTP/1.1 on a loopback address: `GET /metrics`.
public final class MetricsServer: IOHandler {
    let loop: EventLoop
    let fd: Int32
    let render: () -> String
    var table = OneShotTable(capacity: 64)
    let cache = RenderCache()
    public var evictedIdle: UInt64 { table.evictedIdle }
    public var cachedAnswers: UInt64 { cache.hits }
    /// A scrape is closed this long after it was accepted.
    static let deadlineMs: UInt64 = 5000

    public init(listen: Endpoint, loop: EventLoop, render: @escaping () -> String) throws {
        self.loop = loop
        self.render = render
        let s = Sockets.make(family: Sockets.family(of: listen), type: Sockets.stream)
        guard s >= 0 else { throw ControlServer.ControlError("metrics: socket failed") }
        Sockets.reuseAddress(s)
        let bound = Syscall.bind(s, to: SocketAddress(listen)).flatMap { Syscall.listen(s, backlog: 64) }
        if case .failure(let e) = bound {
            _ = Syscall.close(s)
            throw ControlServer.ControlError("metrics: cannot listen on \(listen): \(e)")
        }
        fd = s
        loop.register(fd, IOEvents.readable, self)
    }

    /// 50 scrapes a second at most.
    private lazy var pacer = AcceptPacer(loop: loop, fd: fd, perSecond: 50, burst: 20)
    public var rateLimited: UInt64 { pacer.paused }

    public func handleIO(_ events: UInt32) {
        while pacer.admit() {
            guard case .success(let c) = Syscall.accept(fd) else { return }
            if table.isFull, let victim = table.evictionVictim() { victim.close() }
            if table.isFull {
                let busy = Array("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
                _ = busy.withUnsafeBytes { Syscall.write(c, $0.baseAddress!, $0.count) }
                _ = Syscall.close(c)
                continue
            }
            let conn = OneShotConnection(fd: c, loop: loop, terminator: Array("\r\n\r\n".utf8), limit: 8192,
                                         deadlineMs: Self.deadlineMs) { [weak self] req in
                guard let self else { return [] }
                return self.answer(req)
            }
            conn.onClose = { [weak self] c in self?.table.remove(c) }
            table.add(conn)
        }
    }

    /// What a scrape's request head asks for.
    enum Scrape: Equatable {
        /// The metrics; `headOnly` for HEAD.
        case metrics(headOnly: Bool)
        /// An error answer: status line and body.
        case refused(status: String, body: String)
    }

    /// Reads a scrape's request line: `GET /metrics` (or HEAD, or `/metrics?...`).
    static func scrape(_ req: [UInt8]) -> Scrape {
        let head = String(decoding: req.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = head.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else { return .refused(status: "400 Bad Request", body: "bad request\n") }
        guard parts[0] == "GET" || parts[0] == "HEAD" else { return .refused(status: "405 Method Not Allowed", body: "GET only\n") }
        guard parts[1] == "/metrics" || parts[1].hasPrefix("/metrics?") else { return .refused(status: "404 Not Found", body: "see /metrics\n") }
        return .metrics(headOnly: parts[0] == "HEAD")
    }

    static func reply(_ status: String, _ type: String, _ body: String) -> [UInt8] {
        let b = Array(body.utf8)
        return Array("HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(b.count)\r\nConnection: close\r\n\r\n".utf8) + b
    }

    func answer(_ req: [UInt8]) -> [UInt8] {
        switch Self.scrape(req) {
        case .refused(let status, let body):
            return Self.reply(status, "text/plain", body)
        case .metrics(let headOnly):
            let full = cache.answer("metrics", now: loop.now) {
                Self.reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", render())
            }
            if headOnly, let end = full.firstRange(of: Array("\r\n\r\n".utf8)) { return Array(full[..<end.upperBound]) }
            return full
        }
    }

    public func stop() {
        for c in Array(table.connections.values) { c.close() }
        pacer.stop()
        loop.unregister(fd)
        _ = Syscall.close(fd)
    }
}

/// The client side, for `loft status` and `loft path-changed`.
public enum ControlClient {
    /// Sends one request and returns the body, or throws the server's error.
    public static func request(_ path: String, _ line: String) throws(ControlServer.ControlError) -> String {
        let fd: Int32
        switch Syscall.unixConnect(path) {
        case .success(let c): fd = c
        case .failure(let e): throw ControlServer.ControlError("cannot reach loft at \(path): \(e)")
        }
        defer { _ = Syscall.close(fd) }
        let req = Array((line + "\n").utf8)
        _ = req.withUnsafeBytes { Syscall.write(fd, $0.baseAddress!, $0.count) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while case .success(let n) = buf.withUnsafeMutableBytes({ Syscall.read(fd, $0.baseAddress!, $0.count) }), n > 0 {
            out.append(contentsOf: buf[0..<n])
        }
        let text = String(decoding: out, as: UTF8.self)
        if text.hasPrefix("ok\n") { return String(text.dropFirst(3)) }
        if text.hasPrefix("error ") {
            throw ControlServer.ControlError(String(text.dropFirst(6).prefix { $0 != "\n" }))
        }
        throw ControlServer.ControlError("no answer from loft at \(path)")
    }
}
