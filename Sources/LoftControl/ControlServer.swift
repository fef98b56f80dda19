import CLinux
import Glibc
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

    init(fd: Int32, loop: EventLoop, terminator: [UInt8], limit: Int, deadlineMs: UInt64,
         respond: @escaping ([UInt8]) -> [UInt8]) {
        self.fd = fd
        self.loop = loop
        self.terminator = terminator
        self.limit = limit
        self.respond = respond
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

/// The control socket: a Unix stream socket, mode 0600, that answers one line-request per
/// connection (`status`, `status json`, `flows`, `metrics`, `path-changed`, `reload`).
/// Answers start with `ok` or `error <why>` on their first line.
public final class ControlServer: IOHandler {
    public let path: String
    let loop: EventLoop
    let fd: Int32
    let handler: (String) -> Result<String, ControlError>
    var connections: [ObjectIdentifier: OneShotConnection] = [:]
    public private(set) var refusedPeers: UInt64 = 0
    public private(set) var badRequests: UInt64 = 0
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
            if access(dir, F_OK) != 0 { mkdir(dir, 0o755) }
        }
        let r = clinux_unix_listen(path, 0o600)
        guard r >= 0 else {
            throw ControlError(-r == EADDRINUSE ? "control socket \(path) is in use by another loft"
                                                 : "control socket \(path): \(String(cString: strerror(-r)))")
        }
        fd = r
        loop.register(fd, IOEvents.readable, self)
    }

    public func handleIO(_ events: UInt32) {
        while case .success(let c) = Syscall.accept(fd) {
            // Only root and loft's own user; the file mode says the same, this holds for root too.
            let uid = clinux_peer_uid(c)
            if uid < 0 || (uid != 0 && uid != Int(geteuid())) || connections.count >= Self.maxClients {
                refusedPeers &+= 1
                let msg = Array("error permission denied\n".utf8)
                _ = msg.withUnsafeBytes { Syscall.write(c, $0.baseAddress!, $0.count) }
                _ = Syscall.close(c)
                continue
            }
            let conn = OneShotConnection(fd: c, loop: loop, terminator: [10], limit: 1024,
                                         deadlineMs: Self.deadlineMs) { [weak self] req in
                guard let self else { return [] }
                return Array(self.respond(req).utf8)
            }
            conn.onClose = { [weak self] c in self?.connections[ObjectIdentifier(c)] = nil }
            connections[ObjectIdentifier(conn)] = conn
        }
    }

    /// The request line of a request's bytes (its terminator gone): nil when it is not text.
    static func requestLine(_ raw: [UInt8]) -> String? {
        guard let text = String(validating: raw, as: UTF8.self), !text.contains("\0") else { return nil }
        return text.hasSuffix("\r") ? String(text.dropLast()) : text
    }

    private func respond(_ raw: [UInt8]) -> String {
        guard let line = Self.requestLine(raw) else {
            badRequests &+= 1
            return "error request is not UTF-8 text\n"
        }
        switch handler(line) {
        case .success(let body): return "ok\n" + body
        case .failure(let e):
            badRequests &+= 1
            return "error \(e.description)\n"
        }
    }

    public func stop() {
        for c in Array(connections.values) { c.close() }
        loop.unregister(fd)
        close(fd)
        unlink(path)
    }
}

/// Prometheus metrics over HTTP/1.1 on a loopback address: `GET /metrics`.
public final class MetricsServer: IOHandler {
    let loop: EventLoop
    let fd: Int32
    let render: () -> String
    var connections: [ObjectIdentifier: OneShotConnection] = [:]
    /// A scrape is closed this long after it was accepted.
    static let deadlineMs: UInt64 = 5000

    public init(listen: Endpoint, loop: EventLoop, render: @escaping () -> String) throws {
        self.loop = loop
        self.render = render
        let s = Sockets.make(family: Sockets.family(of: listen), type: Int32(SOCK_STREAM.rawValue))
        guard s >= 0 else { throw ControlServer.ControlError("metrics: socket failed") }
        var one: Int32 = 1
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, 4)
        let addr = SocketAddress(listen)
        guard addr.withSockaddr({ bind(s, $0, $1) }) == 0, Glibc.listen(s, 64) == 0 else {
            let e = Sockets.errno
            close(s)
            throw ControlServer.ControlError("metrics: cannot listen on \(listen): \(String(cString: strerror(e)))")
        }
        fd = s
        loop.register(fd, IOEvents.readable, self)
    }

    public func handleIO(_ events: UInt32) {
        while case .success(let c) = Syscall.accept(fd) {
            if connections.count >= 64 { _ = Syscall.close(c); continue }
            let conn = OneShotConnection(fd: c, loop: loop, terminator: Array("\r\n\r\n".utf8), limit: 8192,
                                         deadlineMs: Self.deadlineMs) { [weak self] req in
                guard let self else { return [] }
                return MetricsServer.answer(req, render: self.render)
            }
            conn.onClose = { [weak self] c in self?.connections[ObjectIdentifier(c)] = nil }
            connections[ObjectIdentifier(conn)] = conn
        }
    }

    /// The answer to a scrape's request head: 200 with `render()` for `GET /metrics`.
    static func answer(_ req: [UInt8], render: () -> String) -> [UInt8] {
        let head = String(decoding: req.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = head.split(separator: " ")
        func reply(_ status: String, _ type: String, _ body: String) -> [UInt8] {
            let b = Array(body.utf8)
            return Array("HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(b.count)\r\nConnection: close\r\n\r\n".utf8) + b
        }
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else { return reply("400 Bad Request", "text/plain", "bad request\n") }
        guard parts[0] == "GET" || parts[0] == "HEAD" else { return reply("405 Method Not Allowed", "text/plain", "GET only\n") }
        guard parts[1] == "/metrics" || parts[1].hasPrefix("/metrics?") else { return reply("404 Not Found", "text/plain", "see /metrics\n") }
        return reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", render())
    }

    public func stop() {
        for c in Array(connections.values) { c.close() }
        loop.unregister(fd)
        close(fd)
    }
}

/// The client side, for `loft status` and `loft path-changed`.
public enum ControlClient {
    /// Sends one request and returns the body, or throws the server's error.
    public static func request(_ path: String, _ line: String) throws(ControlServer.ControlError) -> String {
        let fd = clinux_unix_connect(path)
        guard fd >= 0 else {
            throw ControlServer.ControlError("cannot reach loft at \(path): \(String(cString: strerror(-fd)))")
        }
        defer { close(fd) }
        var req = Array((line + "\n").utf8)
        _ = write(fd, &req, req.count)
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buf, buf.count)
            if n <= 0 { break }
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
