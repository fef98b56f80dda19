import LoftCore

/// VLESS (version 0) as bytes, sans-IO: the request header a client sends before its stream,
/// the response header a server sends before its first bytes, and the 2-byte length framing
/// of UDP datagrams. Values in, bytes out, and the reverse; nothing here does I/O.
///
/// Request:  version 0 · UUID (16) · addons length M · M addon bytes · command (1 TCP, 2 UDP)
///           · port (2, big-endian) · address type (1 IPv4, 2 domain, 3 IPv6) · address
///           (4 bytes | length + name | 16 bytes)
/// Response: version 0 · addons length M · M addon bytes
/// UDP:      every datagram, both ways, is length (2, big-endian) · payload
public enum VLESS {
    public static let version: UInt8 = 0

    public enum Command: UInt8, Sendable {
        case tcp = 1
        case udp = 2
    }

    /// The largest UDP payload one frame carries.
    public static let maxDatagram = 65535

    /// A UUID as configured: 36 characters with dashes (8-4-4-4-12) or 32 hex digits.
    public static func parseUUID(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        let hex: [UInt8]
        if chars.count == 36 {
            for (i, c) in chars.enumerated() where [8, 13, 18, 23].contains(i) != (c == UInt8(ascii: "-")) { return nil }
            hex = chars.filter { $0 != UInt8(ascii: "-") }
        } else if chars.count == 32 {
            hex = chars
        } else {
            return nil
        }
        guard hex.count == 32 else { return nil }
        var out = [UInt8](repeating: 0, count: 16)
        for i in 0..<16 {
            guard let hi = hexValue(hex[2 * i]), let lo = hexValue(hex[2 * i + 1]) else { return nil }
            out[i] = hi << 4 | lo
        }
        return out
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// One request header, as parsed (tests, the fuzz target) or to be encoded.
    public struct Request: Equatable, Sendable {
        public var uuid: [UInt8]
        public var command: Command
        public var destination: Destination
        public init(uuid: [UInt8], command: Command, destination: Destination) {
            self.uuid = uuid; self.command = command; self.destination = destination
        }
    }

    /// The request header's bytes; nil when it cannot be said in VLESS (a UUID that is not 16
    /// bytes, a name that is empty or longer than 255 bytes).
    public static func encode(_ r: Request) -> [UInt8]? {
        guard r.uuid.count == 16 else { return nil }
        var out: [UInt8] = [version]
        out.reserveCapacity(22 + 256)
        out += r.uuid
        out.append(0)                       // no addons
        out.append(r.command.rawValue)
        let port = r.destination.port
        out.append(UInt8(port >> 8)); out.append(UInt8(port & 0xff))
        switch r.destination {
        case .ip(let e):
            var bytes = [UInt8](repeating: 0, count: 16)
            let n = bytes.withUnsafeMutableBytes { e.address.write(to: $0.baseAddress!) }
            out.append(n == 4 ? 1 : 3)
            out += bytes[0..<n]
        case .domain(let name, _):
            let b = Array(name.utf8)
            guard !b.isEmpty, b.count <= 255 else { return nil }
            out.append(2)
            out.append(UInt8(b.count))
            out += b
        }
        return out
    }

    public enum Parse<T: Equatable>: Equatable {
        /// More bytes are needed (nothing is consumed).
        case needMore
        /// The value and how many bytes it took.
        case done(T, Int)
        /// Not VLESS: the reason.
        case bad(String)
    }

    /// Parses a request header at the start of `bytes` (the server's side; for tests and fuzzing).
    public static func parseRequest(_ bytes: UnsafeRawBufferPointer) -> Parse<Request> {
        var i = 0
        func need(_ n: Int) -> Bool { bytes.count - i >= n }
        guard need(1) else { return .needMore }
        guard bytes[0] == version else { return .bad("version \(bytes[0])") }
        i = 1
        guard need(17) else { return .needMore }
        let uuid = Array(bytes[1..<17])
        let addons = Int(bytes[17])
        i = 18
        guard need(addons) else { return .needMore }
        i += addons
        guard need(1) else { return .needMore }
        guard let command = Command(rawValue: bytes[i]) else { return .bad("command \(bytes[i])") }
        i += 1
        guard need(3) else { return .needMore }
        let port = UInt16(bytes[i]) << 8 | UInt16(bytes[i + 1])
        let type = bytes[i + 2]
        i += 3
        let destination: Destination
        switch type {
        case 1:
            guard need(4) else { return .needMore }
            destination = .ip(Endpoint(IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: bytes[i..<i + 4])), port))
            i += 4
        case 3:
            guard need(16) else { return .needMore }
            destination = .ip(Endpoint(IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: bytes[i..<i + 16])), port))
            i += 16
        case 2:
            guard need(1) else { return .needMore }
            let n = Int(bytes[i])
            i += 1
            guard n > 0 else { return .bad("empty domain") }
            guard need(n) else { return .needMore }
            destination = .domain(String(decoding: bytes[i..<i + n], as: UTF8.self), port)
            i += n
        default:
            return .bad("address type \(type)")
        }
        return .done(Request(uuid: uuid, command: command, destination: destination), i)
    }

    /// The response header's bytes (a server's; for tests).
    public static func encodeResponse(addons: [UInt8] = []) -> [UInt8] {
        [version, UInt8(min(addons.count, 255))] + addons.prefix(255)
    }

    /// Parses the response header at the start of `bytes`: its length (the addons are skipped;
    /// this client asked for none).
    public static func parseResponse(_ bytes: UnsafeRawBufferPointer) -> Parse<Int> {
        guard bytes.count >= 1 else { return .needMore }
        guard bytes[0] == version else { return .bad("response version \(bytes[0])") }
        guard bytes.count >= 2 else { return .needMore }
        let n = 2 + Int(bytes[1])
        guard bytes.count >= n else { return .needMore }
        return .done(n, n)
    }

    /// How many bytes of a response header are still needed after `have` (0: complete), given
    /// the first bytes; nil when they are not a VLESS response.
    public static func responseBytesNeeded(_ have: UnsafeRawBufferPointer) -> Int? {
        if have.isEmpty { return 2 }
        guard have[0] == version else { return nil }
        if have.count < 2 { return 2 - have.count }
        return max(0, 2 + Int(have[1]) - have.count)
    }

    /// A UDP frame's 2-byte length prefix; nil for a payload too long for one frame.
    public static func frameHeader(_ length: Int) -> (UInt8, UInt8)? {
        guard length >= 0, length <= maxDatagram else { return nil }
        return (UInt8(length >> 8), UInt8(length & 0xff))
    }

    /// How many bytes a UDP frame still needs after `have`, its first bytes (0: complete).
    public static func frameBytesNeeded(_ have: UnsafeRawBufferPointer) -> Int {
        if have.count < 2 { return 2 - have.count }
        return max(0, 2 + (Int(have[0]) << 8 | Int(have[1])) - have.count)
    }

    /// The first UDP frame in `bytes`: its payload's range and the bytes it takes.
    public static func parseFrame(_ bytes: UnsafeRawBufferPointer) -> Parse<Range<Int>> {
        guard bytes.count >= 2 else { return .needMore }
        let n = Int(bytes[0]) << 8 | Int(bytes[1])
        guard bytes.count >= 2 + n else { return .needMore }
        return .done(2..<2 + n, 2 + n)
    }
}

extension VLESS {
    /// The server's response header as the flow reads it (`LoftIO.PrefaceReader`): whole
    /// (version 0 and its addons, which are skipped), or not VLESS (its first byte).
    public enum ResponseHeader: Equatable {
        case ok
        case bad(firstByte: UInt8)
    }

    public struct ResponseCodec: PrefaceCodec {
        public init() {}
        public var capacity: Int { 2 + 255 }
        public func parse(_ bytes: UnsafeRawBufferPointer) -> PrefaceParse<ResponseHeader> {
            guard let need = VLESS.responseBytesNeeded(bytes) else { return .answer(.bad(firstByte: bytes.first ?? 0)) }
            return need == 0 ? .answer(.ok) : .needMore(need)
        }
    }
}
