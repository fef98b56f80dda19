import LoftCore

// Strict HTTP/1.1 message heads (RFC 9112) and the chunked transfer coding, as value types.
// Used by the ws handshake and the get carrier; nothing here does I/O.

/// A failure that answers a request with `status` (400, 404, 405, 409, 431, 505, ...), or ends
/// a response the client cannot accept (status 0 there).
public struct HTTPError: Error, Equatable, Sendable, CustomStringConvertible {
    public var status: Int
    public var message: String
    public init(_ status: Int, _ message: String) { self.status = status; self.message = message }
    public var description: String { status > 0 ? "\(status) \(message)" : message }
}

/// Header fields in order, names lowercased.
public struct HTTPHeaders: Equatable, Sendable {
    public var fields: [(name: String, value: String)] = []
    public init() {}
    public init(_ fields: [(String, String)]) { self.fields = fields.map { ($0.0.lowercased(), $0.1) } }

    public func values(_ name: String) -> [String] {
        let n = name.lowercased()
        return fields.filter { $0.name == n }.map { $0.value }
    }

    /// The one value of `name`; nil when absent; an error when it appears more than once.
    public func single(_ name: String) throws(HTTPError) -> String? {
        let v = values(name)
        if v.count > 1 { throw HTTPError(400, "duplicate \(name) header") }
        return v.first
    }

    /// Whether a comma-separated header (Connection, Upgrade) lists `token`, case-insensitively.
    public func contains(_ name: String, token: String) -> Bool {
        let t = token.lowercased()
        for v in values(name) {
            for part in v.split(separator: ",") where part.trimmingHTTPSpace().lowercased() == t { return true }
        }
        return false
    }

    public static func == (a: HTTPHeaders, b: HTTPHeaders) -> Bool {
        a.fields.count == b.fields.count && zip(a.fields, b.fields).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }
}

public struct HTTPRequestHead: Equatable, Sendable {
    public var method: String
    /// The request-target as sent (origin-form: path and query).
    public var target: String
    public var path: String
    /// The part after `?`, nil when there is none.
    public var query: String?
    public var headers: HTTPHeaders

    /// The value of query parameter `name`; nil when absent; an error when repeated.
    public func queryParameter(_ name: String) throws(HTTPError) -> String? {
        guard let query else { return nil }
        var found: String?
        for pair in query.split(separator: "&", omittingEmptySubsequences: false) {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard kv[0] == name else { continue }
            if found != nil { throw HTTPError(400, "duplicate query parameter \(name)") }
            found = kv.count > 1 ? String(kv[1]) : ""
        }
        return found
    }
}

public struct HTTPResponseHead: Equatable, Sendable {
    public var status: Int
    public var reason: String
    public var headers: HTTPHeaders
}

public enum HTTPParseResult<Head: Sendable>: Sendable {
    case incomplete
    /// The head, and the bytes it took (the body, if any, starts there).
    case complete(Head, consumed: Int)
    case failure(HTTPError)
}

public enum HTTPParser {
    /// The most a head may take, request or status line included, and its number of fields.
    public static let maxHeadBytes = 8192
    public static let maxFields = 100

    public static func parseRequest(_ p: UnsafeRawBufferPointer) -> HTTPParseResult<HTTPRequestHead> {
        switch splitHead(p) {
        case .incomplete: return .incomplete
        case .failure(let e): return .failure(e)
        case .complete(let lines, let consumed):
            do {
                let head = try request(lines)
                return .complete(head, consumed: consumed)
            } catch {
                return .failure(error)
            }
        }
    }

    public static func parseResponse(_ p: UnsafeRawBufferPointer) -> HTTPParseResult<HTTPResponseHead> {
        switch splitHead(p) {
        case .incomplete: return .incomplete
        case .failure(let e): return .failure(HTTPError(0, "bad response: \(e.message)"))
        case .complete(let lines, let consumed):
            do {
                let head = try response(lines)
                return .complete(head, consumed: consumed)
            } catch {
                return .failure(HTTPError(0, "bad response: \(error.message)"))
            }
        }
    }

    /// Finds the end of the head (the first empty line); every line must end in CRLF.
    package static func splitHead(_ p: UnsafeRawBufferPointer) -> HTTPParseResult<[ArraySlice<UInt8>]> {
        let limit = min(p.count, maxHeadBytes)
        var lineStart = 0
        var lines: [Range<Int>] = []
        var i = 0
        while i < limit {
            let c = p[i]
            if c == 0x0A {
                guard i > lineStart, p[i - 1] == 0x0D else { return .failure(HTTPError(400, "line not ended by CRLF")) }
                if i - 1 == lineStart {
                    // Empty line: end of head.
                    guard !lines.isEmpty else { return .failure(HTTPError(400, "empty start line")) }
                    if lines.count - 1 > maxFields { return .failure(HTTPError(431, "more than \(maxFields) header fields")) }
                    let bytes = Array(p[0..<i + 1])
                    return .complete(lines.map { bytes[$0] }, consumed: i + 1)
                }
                lines.append(lineStart..<(i - 1))
                lineStart = i + 1
            } else if c == 0x0D {
                if i + 1 < limit && p[i + 1] != 0x0A { return .failure(HTTPError(400, "bare CR")) }
            } else if c == 0 {
                return .failure(HTTPError(400, "NUL in head"))
            }
            i += 1
        }
        if p.count >= maxHeadBytes { return .failure(HTTPError(431, "head larger than \(maxHeadBytes) bytes")) }
        return .incomplete
    }

    package static func request(_ lines: [ArraySlice<UInt8>]) throws(HTTPError) -> HTTPRequestHead {
        let start = lines[0]
        let parts = start.split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, parts[0].allSatisfy(isTokenChar) else {
            throw HTTPError(400, "bad request line")
        }
        let version = String(decoding: parts[2], as: UTF8.self)
        guard version.hasPrefix("HTTP/"), version.count == 8 else { throw HTTPError(400, "bad HTTP version") }
        guard version == "HTTP/1.1" else { throw HTTPError(505, "only HTTP/1.1 is served") }
        guard parts[1].first == UInt8(ascii: "/"), parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw HTTPError(400, "bad request target")
        }
        let target = String(decoding: parts[1], as: UTF8.self)
        var path = target
        var query: String?
        if let q = target.firstIndex(of: "?") {
            path = String(target[..<q])
            query = String(target[target.index(after: q)...])
        }
        return HTTPRequestHead(method: String(decoding: parts[0], as: UTF8.self), target: target, path: path,
                               query: query, headers: try fields(lines.dropFirst()))
    }

    package static func response(_ lines: [ArraySlice<UInt8>]) throws(HTTPError) -> HTTPResponseHead {
        let start = lines[0]
        let parts = start.split(separator: 0x20, maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, String(decoding: parts[0], as: UTF8.self) == "HTTP/1.1" else {
            throw HTTPError(400, "bad status line")
        }
        guard parts[1].count == 3, parts[1].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let status = Int(String(decoding: parts[1], as: UTF8.self)), status >= 100 else {
            throw HTTPError(400, "bad status code")
        }
        let reason = parts.count == 3 ? String(decoding: parts[2], as: UTF8.self) : ""
        return HTTPResponseHead(status: status, reason: reason, headers: try fields(lines.dropFirst()))
    }

    package static func fields(_ lines: ArraySlice<ArraySlice<UInt8>>) throws(HTTPError) -> HTTPHeaders {
        var h = HTTPHeaders()
        h.fields.reserveCapacity(lines.count)
        for line in lines {
            guard let first = line.first, first != 0x20, first != 0x09 else {
                throw HTTPError(400, "folded header line")
            }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { throw HTTPError(400, "header line without a colon") }
            let name = line[line.startIndex..<colon]
            guard !name.isEmpty, name.allSatisfy(isTokenChar) else { throw HTTPError(400, "bad header name") }
            var value = line[(colon + 1)...]
            while let f = value.first, f == 0x20 || f == 0x09 { value = value.dropFirst() }
            while let l = value.last, l == 0x20 || l == 0x09 { value = value.dropLast() }
            guard value.allSatisfy({ $0 == 0x09 || $0 >= 0x20 && $0 != 0x7F }) else {
                throw HTTPError(400, "control character in a header value")
            }
            h.fields.append((String(decoding: name, as: UTF8.self).lowercased(), String(decoding: value, as: UTF8.self)))
        }
        return h
    }

    package static func isTokenChar(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(c)
        }
    }

    /// Reason phrases for the statuses loft sends.
    public static func reason(_ status: Int) -> String {
        switch status {
        case 101: return "Switching Protocols"
        case 200: return "OK"
        case 400: return "Bad Request"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 426: return "Upgrade Required"
        case 431: return "Request Header Fields Too Large"
        case 503: return "Service Unavailable"
        case 505: return "HTTP Version Not Supported"
        default: return "Error"
        }
    }

    /// A complete error response that closes the connection.
    public static func errorResponse(_ status: Int, extra: String = "") -> String {
        "HTTP/1.1 \(status) \(reason(status))\r\nConnection: close\r\nContent-Length: 0\r\n\(extra)\r\n"
    }
}

/// Decodes a chunked body as a stream: chunk data is handed out as ranges of the caller's
/// buffer (no copy, no per-chunk allocation); sizes, CRLFs and trailers are checked strictly
/// (hex digits only, at most 15 of them; extensions are skipped; a size line or the trailer
/// section larger than its cap fails).
public struct ChunkedDecoder: Sendable {
    public enum Event: Equatable, Sendable {
        case needMore
        case data(Range<Int>)
        /// The last chunk and the trailer section were read; the body is complete.
        case end
        case failure(String)
    }

    package enum State: Sendable {
        case size, ext, sizeLF, data, dataCR, dataLF, trailerStart, trailer, trailerLF, lastLF, done, failed
    }

    public static let maxSizeLine = 1024
    public static let maxTrailer = 8192

    private var state = State.size
    private var size: UInt64 = 0
    private var digits = 0
    private var lineBytes = 0
    private var trailerBytes = 0
    private var remaining: UInt64 = 0

    public init() {}

    public var isDone: Bool { if case .done = state { return true } else { return false } }

    /// Reads from `p` starting at `pos`, advancing it over what was used.
    public mutating func next(_ p: UnsafeRawBufferPointer, _ pos: inout Int) -> Event {
        while pos < p.count {
            switch state {
            case .data:
                let n = Int(min(remaining, UInt64(p.count - pos)))
                let r = pos..<(pos + n)
                pos += n
                remaining -= UInt64(n)
                if remaining == 0 { state = .dataCR }
                return .data(r)
            case .done:
                return .end
            case .failed:
                return .failure("chunked body already failed")
            default:
                let c = p[pos]
                pos += 1
                if let e = step(c) { return e }
            }
        }
        if case .done = state { return .end }
        return .needMore
    }

    private mutating func fail(_ why: String) -> Event {
        state = .failed
        return .failure(why)
    }

    private mutating func step(_ c: UInt8) -> Event? {
        switch state {
        case .size:
            lineBytes += 1
            if let v = Hex.value(c) {
                digits += 1
                if digits > 15 { return fail("chunk size too large") }
                size = size << 4 | UInt64(v)
                return nil
            }
            guard digits > 0 else { return fail("bad chunk size") }
            if c == 0x0D { state = .sizeLF; return nil }
            if c == UInt8(ascii: ";") || c == 0x20 || c == 0x09 { state = .ext; return nil }
            return fail("bad chunk size")
        case .ext:
            lineBytes += 1
            if lineBytes > Self.maxSizeLine { return fail("chunk size line too long") }
            if c == 0x0D { state = .sizeLF; return nil }
            if c == 0x0A || c < 0x20 && c != 0x09 || c == 0x7F { return fail("bad chunk extension") }
            return nil
        case .sizeLF:
            guard c == 0x0A else { return fail("chunk size line not ended by CRLF") }
            lineBytes = 0
            digits = 0
            if size == 0 {
                state = .trailerStart
                return nil
            }
            remaining = size
            size = 0
            state = .data
            return nil
        case .dataCR:
            guard c == 0x0D else { return fail("chunk data not followed by CRLF") }
            state = .dataLF
            return nil
        case .dataLF:
            guard c == 0x0A else { return fail("chunk data not followed by CRLF") }
            state = .size
            return nil
        case .trailerStart:
            trailerBytes += 1
            if c == 0x0D { state = .lastLF; return nil }
            if c == 0x20 || c == 0x09 || c == UInt8(ascii: ":") || c == 0x0A { return fail("bad trailer field") }
            state = .trailer
            return nil
        case .trailer:
            trailerBytes += 1
            if trailerBytes > Self.maxTrailer { return fail("trailer section too large") }
            if c == 0x0D { state = .trailerLF; return nil }
            if c == 0x0A || c == 0 { return fail("bad trailer field") }
            return nil
        case .trailerLF:
            guard c == 0x0A else { return fail("trailer line not ended by CRLF") }
            state = .trailerStart
            return nil
        case .lastLF:
            guard c == 0x0A else { return fail("chunked body not ended by CRLF") }
            state = .done
            return .end
        case .data, .done, .failed:
            return nil
        }
    }
}

/// Chunk framing as loft writes it: the size as exactly four hex digits (leading zeros are
/// valid chunk-size syntax), so the header has a fixed length and a chunk can be built in
/// place before its size is known. Chunks carry at most 0xFFFF bytes.
public enum ChunkedEncoder {
    public static let headerBytes = 6
    public static let trailerBytes = 2
    public static let maxChunk = 0xFFFF
    /// The last chunk with an empty trailer section.
    public static let last: [UInt8] = Array("0\r\n\r\n".utf8)

    public static func writeHeader(_ length: Int, to p: UnsafeMutableRawPointer) {
        @inline(__always) func digit(_ d: Int) -> UInt8 { UInt8(truncatingIfNeeded: d < 10 ? 48 + d : 87 + d) }
        p.storeBytes(of: digit(length >> 12 & 15), toByteOffset: 0, as: UInt8.self)
        p.storeBytes(of: digit(length >> 8 & 15), toByteOffset: 1, as: UInt8.self)
        p.storeBytes(of: digit(length >> 4 & 15), toByteOffset: 2, as: UInt8.self)
        p.storeBytes(of: digit(length & 15), toByteOffset: 3, as: UInt8.self)
        p.storeBytes(of: 0x0D, toByteOffset: 4, as: UInt8.self)
        p.storeBytes(of: 0x0A, toByteOffset: 5, as: UInt8.self)
    }
}

extension Substring {
    package func trimmingHTTPSpace() -> Substring {
        var s = self
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return s
    }
}
