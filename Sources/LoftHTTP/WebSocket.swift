import CTLS
import LoftCore
import LoftTLS

// RFC 6455 framing and handshake as value types: no I/O here.

public enum WSOpcode {
    public static let continuation: UInt8 = 0x0
    public static let text: UInt8 = 0x1
    public static let binary: UInt8 = 0x2
    public static let close: UInt8 = 0x8
    public static let ping: UInt8 = 0x9
    public static let pong: UInt8 = 0xA

    package static func isControl(_ op: UInt8) -> Bool { op & 0x8 != 0 }
}

public enum WSCloseCode {
    public static let normal: UInt16 = 1000
    public static let goingAway: UInt16 = 1001
    public static let protocolError: UInt16 = 1002
    public static let unsupportedData: UInt16 = 1003
    public static let noStatus: UInt16 = 1005      // never on the wire
    public static let abnormal: UInt16 = 1006      // never on the wire
    public static let invalidPayload: UInt16 = 1007
    public static let policyViolation: UInt16 = 1008
    public static let tooBig: UInt16 = 1009
    public static let internalError: UInt16 = 1011

    /// Codes a peer may send in a Close frame (RFC 6455 7.4, and the registry's 1012–1014).
    public static func isValidOnWire(_ c: UInt16) -> Bool {
        switch c {
        case 1000...1003, 1007...1014, 3000...4999: return true
        default: return false
        }
    }
}

/// Which end a codec sits at: a server receives masked frames and sends unmasked ones; a
/// client the other way round.
public enum WSRole: Sendable { case client, server }

public struct WSFrameHeader: Equatable, Sendable {
    public var fin: Bool
    public var rsv: UInt8            // the three reserved bits, as bits 6..4 of the first byte
    public var opcode: UInt8
    public var maskKey: (UInt8, UInt8, UInt8, UInt8)?
    public var payloadLength: UInt64

    public init(fin: Bool = true, rsv: UInt8 = 0, opcode: UInt8, maskKey: (UInt8, UInt8, UInt8, UInt8)? = nil, payloadLength: UInt64) {
        self.fin = fin
        self.rsv = rsv
        self.opcode = opcode
        self.maskKey = maskKey
        self.payloadLength = payloadLength
    }

    public static func == (a: WSFrameHeader, b: WSFrameHeader) -> Bool {
        a.fin == b.fin && a.rsv == b.rsv && a.opcode == b.opcode && a.payloadLength == b.payloadLength
            && a.maskKey.map { [$0.0, $0.1, $0.2, $0.3] } == b.maskKey.map { [$0.0, $0.1, $0.2, $0.3] }
    }

    /// The size of a header for `length` payload bytes (minimal length encoding).
    public static func size(payloadLength length: UInt64, masked: Bool) -> Int {
        (length < 126 ? 2 : length <= 0xFFFF ? 4 : 10) + (masked ? 4 : 0)
    }

    public var size: Int { Self.size(payloadLength: payloadLength, masked: maskKey != nil) }

    /// Writes the header (size bytes); the payload is not touched (mask it separately).
    @discardableResult
    public func encode(to p: UnsafeMutableRawPointer) -> Int {
        p.storeBytes(of: (fin ? 0x80 : 0) | (rsv & 0x7) << 4 | opcode & 0xF, toByteOffset: 0, as: UInt8.self)
        let m: UInt8 = maskKey != nil ? 0x80 : 0
        var n: Int
        if payloadLength < 126 {
            p.storeBytes(of: m | UInt8(payloadLength), toByteOffset: 1, as: UInt8.self)
            n = 2
        } else if payloadLength <= 0xFFFF {
            p.storeBytes(of: m | 126, toByteOffset: 1, as: UInt8.self)
            p.storeBytes(of: UInt8(payloadLength >> 8), toByteOffset: 2, as: UInt8.self)
            p.storeBytes(of: UInt8(payloadLength & 0xFF), toByteOffset: 3, as: UInt8.self)
            n = 4
        } else {
            p.storeBytes(of: m | 127, toByteOffset: 1, as: UInt8.self)
            for i in 0..<8 {
                p.storeBytes(of: UInt8(truncatingIfNeeded: payloadLength >> (56 - 8 * UInt64(i))), toByteOffset: 2 + i, as: UInt8.self)
            }
            n = 10
        }
        if let k = maskKey {
            p.storeBytes(of: k.0, toByteOffset: n, as: UInt8.self)
            p.storeBytes(of: k.1, toByteOffset: n + 1, as: UInt8.self)
            p.storeBytes(of: k.2, toByteOffset: n + 2, as: UInt8.self)
            p.storeBytes(of: k.3, toByteOffset: n + 3, as: UInt8.self)
            n += 4
        }
        return n
    }

    public func encoded() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: size)
        out.withUnsafeMutableBytes { _ = encode(to: $0.baseAddress!) }
        return out
    }

    public enum ParseResult: Equatable, Sendable {
        case needMore
        case header(WSFrameHeader, size: Int)
        /// The frame breaks RFC 6455: close the connection with `code`.
        case failure(code: UInt16, String)
    }

    /// Parses a header at the start of `p`, checking everything the header alone can show:
    /// reserved bits (no extensions are negotiated), known opcodes, control frames unfragmented
    /// and at most 125 bytes, masking as `role` receives it, minimal length encoding and a
    /// 63-bit length.
    public static func parse(_ p: UnsafeRawBufferPointer, receivedBy role: WSRole) -> ParseResult {
        guard p.count >= 2 else { return .needMore }
        let b0 = p[0], b1 = p[1]
        let fin = b0 & 0x80 != 0
        let rsv = b0 >> 4 & 0x7
        let opcode = b0 & 0xF
        let masked = b1 & 0x80 != 0
        let len7 = b1 & 0x7F
        if rsv != 0 { return .failure(code: WSCloseCode.protocolError, "reserved bits set") }
        switch opcode {
        case WSOpcode.continuation, WSOpcode.text, WSOpcode.binary, WSOpcode.close, WSOpcode.ping, WSOpcode.pong: break
        default: return .failure(code: WSCloseCode.protocolError, "unknown opcode \(opcode)")
        }
        if WSOpcode.isControl(opcode) {
            if !fin { return .failure(code: WSCloseCode.protocolError, "fragmented control frame") }
            if len7 > 125 { return .failure(code: WSCloseCode.protocolError, "control frame longer than 125 bytes") }
        }
        switch (role, masked) {
        case (.server, false): return .failure(code: WSCloseCode.protocolError, "unmasked frame from the client")
        case (.client, true): return .failure(code: WSCloseCode.protocolError, "masked frame from the server")
        default: break
        }
        var n = 2
        var length = UInt64(len7)
        if len7 == 126 {
            guard p.count >= 4 else { return .needMore }
            length = UInt64(p[2]) << 8 | UInt64(p[3])
            if length < 126 { return .failure(code: WSCloseCode.protocolError, "length not minimally encoded") }
            n = 4
        } else if len7 == 127 {
            guard p.count >= 10 else { return .needMore }
            length = 0
            for i in 2..<10 { length = length << 8 | UInt64(p[i]) }
            if length >> 63 != 0 { return .failure(code: WSCloseCode.protocolError, "length over 2^63") }
            if length <= 0xFFFF { return .failure(code: WSCloseCode.protocolError, "length not minimally encoded") }
            n = 10
        }
        var key: (UInt8, UInt8, UInt8, UInt8)?
        if masked {
            guard p.count >= n + 4 else { return .needMore }
            key = (p[n], p[n + 1], p[n + 2], p[n + 3])
            n += 4
        }
        return .header(WSFrameHeader(fin: fin, rsv: rsv, opcode: opcode, maskKey: key, payloadLength: length), size: n)
    }
}

/// XORs `count` bytes at `p` with the masking key, starting `phase` bytes into the payload.
@inline(__always)
package func wsMask(_ p: UnsafeMutableRawPointer, _ count: Int, _ key: (UInt8, UInt8, UInt8, UInt8), phase: Int) {
    var k = key
    withUnsafeBytes(of: &k) { kp in
        ctls_ws_mask(p.assumingMemoryBound(to: UInt8.self), count, kp.baseAddress!.assumingMemoryBound(to: UInt8.self), phase)
    }
}

/// Copies `count` bytes from `src` to `dst` (not overlapping), masking them on the way: one pass
/// where a copy and then `wsMask` would be two.
@inline(__always)
package func wsMaskCopy(_ dst: UnsafeMutableRawPointer, _ src: UnsafeRawPointer, _ count: Int,
                        _ key: (UInt8, UInt8, UInt8, UInt8), phase: Int) {
    var k = key
    withUnsafeBytes(of: &k) { kp in
        ctls_ws_mask_copy(dst.assumingMemoryBound(to: UInt8.self), src.assumingMemoryBound(to: UInt8.self), count,
                          kp.baseAddress!.assumingMemoryBound(to: UInt8.self), phase)
    }
}

/// A streaming frame decoder. Data-frame payload is handed out as ranges of the caller's
/// buffer as soon as it arrives (unmasked in place), so frames of any size need no buffering;
/// control frames (at most 125 bytes) are collected and returned whole. Binary messages may
/// be fragmented; text messages are refused (1003); a continuation with no message started, or
/// a new message inside a fragmented one, is a protocol error (1002). After a failure or a
/// Close the decoder returns that again.
public struct WSDecoder: Sendable {
    public enum Event: Equatable, Sendable {
        case needMore
        case data(Range<Int>)
        case ping([UInt8])
        case pong([UInt8])
        /// A Close frame: its code (nil when the payload was empty) and reason.
        case close(code: UInt16?, reason: String)
        case failure(code: UInt16, String)
    }

    package enum State: Sendable {
        case header
        case data
        case control
        case finished(Event)
    }

    public let role: WSRole
    private var state = State.header
    private var inMessage = false
    private var header = WSFrameHeader(opcode: 0, payloadLength: 0)
    private var remaining: UInt64 = 0
    private var control: [UInt8] = []

    public init(role: WSRole) {
        self.role = role
        control.reserveCapacity(125)
    }

    /// Reads from `p` at `pos`, advancing it over what was used.
    public mutating func next(_ p: UnsafeMutableRawBufferPointer, _ pos: inout Int) -> Event {
        while true {
            switch state {
            case .finished(let e):
                return e
            case .header:
                let avail = UnsafeRawBufferPointer(rebasing: p[pos...])
                switch WSFrameHeader.parse(avail, receivedBy: role) {
                case .needMore:
                    return .needMore
                case .failure(let code, let why):
                    return finish(.failure(code: code, why))
                case .header(let h, let size):
                    pos += size
                    header = h
                    remaining = h.payloadLength
                    switch h.opcode {
                    case WSOpcode.text:
                        return finish(.failure(code: WSCloseCode.unsupportedData, "text frames are not accepted"))
                    case WSOpcode.binary:
                        if inMessage { return finish(.failure(code: WSCloseCode.protocolError, "new message inside a fragmented one")) }
                        inMessage = !h.fin
                        state = .data
                    case WSOpcode.continuation:
                        if !inMessage { return finish(.failure(code: WSCloseCode.protocolError, "continuation without a message")) }
                        inMessage = !h.fin
                        state = .data
                    default:
                        control.removeAll(keepingCapacity: true)
                        state = .control
                    }
                }
            case .data:
                if remaining == 0 { state = .header; continue }
                let n = Int(min(remaining, UInt64(p.count - pos)))
                if n == 0 { return .needMore }
                let start = pos
                if let k = header.maskKey {
                    wsMask(p.baseAddress! + pos, n, k, phase: Int((header.payloadLength - remaining) & 3))
                }
                pos += n
                remaining -= UInt64(n)
                if remaining == 0 { state = .header }
                return .data(start..<(start + n))
            case .control:
                let n = Int(min(remaining, UInt64(p.count - pos)))
                if n > 0 {
                    let phase = Int(header.payloadLength - remaining)
                    for i in 0..<n {
                        var b = p[pos + i]
                        if let k = header.maskKey {
                            switch (phase + i) & 3 { case 0: b ^= k.0; case 1: b ^= k.1; case 2: b ^= k.2; default: b ^= k.3 }
                        }
                        control.append(b)
                    }
                    pos += n
                    remaining -= UInt64(n)
                }
                if remaining > 0 { return .needMore }
                state = .header
                switch header.opcode {
                case WSOpcode.ping: return .ping(control)
                case WSOpcode.pong: return .pong(control)
                default: return finish(closeEvent())
                }
            }
        }
    }

    private mutating func finish(_ e: Event) -> Event {
        state = .finished(e)
        return e
    }

    private func closeEvent() -> Event {
        if control.isEmpty { return .close(code: nil, reason: "") }
        if control.count == 1 { return .failure(code: WSCloseCode.protocolError, "close frame with a 1-byte payload") }
        let code = UInt16(control[0]) << 8 | UInt16(control[1])
        if !WSCloseCode.isValidOnWire(code) { return .failure(code: WSCloseCode.protocolError, "invalid close code \(code)") }
        guard let reason = String(validating: control[2...], as: UTF8.self) else {
            return .failure(code: WSCloseCode.invalidPayload, "close reason is not UTF-8")
        }
        return .close(code: code, reason: reason)
    }
}

/// The opening handshake (RFC 6455 4).
public enum WSHandshake {
    package static let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Sec-WebSocket-Accept for a Sec-WebSocket-Key.
    public static func accept(forKey key: String) -> String {
        Base64.encode(Crypto.sha1(Array((key + guid).utf8)))
    }

    /// A fresh Sec-WebSocket-Key: 16 random bytes, base64.
    public static func makeKey() -> String { Base64.encode(Crypto.random(16)) }

    public static func request(host: String, path: String, key: String) -> String {
        "GET \(path) HTTP/1.1\r\nHost: \(host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n\r\n"
    }

    public static func response(accept: String) -> String {
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Accept: \(accept)\r\n\r\n"
    }

    /// Checks an upgrade request (method, path and Host are checked by the listener) and
    /// returns its key. 426 carries `Sec-WebSocket-Version: 13` in the answer.
    public static func validate(request r: HTTPRequestHead) throws(HTTPError) -> String {
        guard r.method == "GET" else { throw HTTPError(405, "a WebSocket upgrade is a GET") }
        guard r.headers.values("upgrade").count == 1, r.headers.contains("upgrade", token: "websocket") else {
            throw HTTPError(400, "Upgrade: websocket missing")
        }
        guard r.headers.contains("connection", token: "upgrade") else { throw HTTPError(400, "Connection: Upgrade missing") }
        guard let version = try r.headers.single("sec-websocket-version") else {
            throw HTTPError(426, "Sec-WebSocket-Version missing")
        }
        guard version == "13" else { throw HTTPError(426, "unsupported Sec-WebSocket-Version \(version)") }
        guard let key = try r.headers.single("sec-websocket-key") else { throw HTTPError(400, "Sec-WebSocket-Key missing") }
        guard let raw = Base64.decode(key), raw.count == 16 else { throw HTTPError(400, "Sec-WebSocket-Key is not 16 bytes of base64") }
        if r.headers.values("content-length").contains(where: { $0 != "0" }) || !r.headers.values("transfer-encoding").isEmpty {
            throw HTTPError(400, "an upgrade request has no body")
        }
        return key
    }

    /// Checks the server's answer to our key; nil when it accepted, else why not.
    public static func validate(response r: HTTPResponseHead, key: String) -> String? {
        guard r.status == 101 else { return "the server answered \(r.status) \(r.reason)" }
        guard r.headers.contains("upgrade", token: "websocket") else { return "101 without Upgrade: websocket" }
        guard r.headers.contains("connection", token: "upgrade") else { return "101 without Connection: Upgrade" }
        let accepts = r.headers.values("sec-websocket-accept")
        guard accepts.count == 1 else { return accepts.isEmpty ? "101 without Sec-WebSocket-Accept" : "duplicate Sec-WebSocket-Accept" }
        guard accepts[0] == accept(forKey: key) else { return "wrong Sec-WebSocket-Accept" }
        if !r.headers.values("sec-websocket-extensions").isEmpty { return "the server chose an extension loft did not offer" }
        if !r.headers.values("sec-websocket-protocol").isEmpty { return "the server chose a subprotocol loft did not offer" }
        return nil
    }
}
