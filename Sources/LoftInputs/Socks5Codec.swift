import LoftCore

/// RFC 1928 messages as values: parsing from bytes received so far, and encoding into a
/// caller's buffer. No I/O and no state beyond one message; the server's state machine
/// (Socks5Server) decides what to do with each result.
public enum Socks5 {
    public static let version: UInt8 = 0x05
    public static let methodNoAuthentication: UInt8 = 0x00
    public static let methodNoAcceptable: UInt8 = 0xFF

    /// The longest greeting (VER NMETHODS + 255 methods) and request (VER CMD RSV ATYP + a
    /// 255-byte name + port): the handshake never needs to hold more than this.
    public static let maxGreetingLength = 2 + 255
    public static let maxRequestLength = 4 + 1 + 255 + 2
    /// The longest reply or UDP header: an IPv6 address.
    public static let maxReplyLength = 4 + 16 + 2
    public static let maxUDPHeaderLength = 4 + 1 + 255 + 2

    public enum Command: UInt8, Sendable {
        case connect = 0x01, bind = 0x02, udpAssociate = 0x03
    }

    public enum AddressType: UInt8, Sendable {
        case ipv4 = 0x01, domain = 0x03, ipv6 = 0x04
    }

    /// The REP field of a reply.
    public enum ReplyCode: UInt8, Sendable, CaseIterable {
        case succeeded = 0x00
        case generalFailure = 0x01
        case notAllowed = 0x02
        case networkUnreachable = 0x03
        case hostUnreachable = 0x04
        case connectionRefused = 0x05
        case ttlExpired = 0x06
        case commandNotSupported = 0x07
        case addressTypeNotSupported = 0x08

        /// What a CONNECT whose outbound failed is told.
        public init(_ failure: FlowFailure) {
            switch failure {
            case .refused: self = .connectionRefused
            case .hostUnreachable: self = .hostUnreachable
            case .networkUnreachable: self = .networkUnreachable
            case .timedOut: self = .ttlExpired
            case .notAllowed: self = .notAllowed
            case .resolveFailed: self = .hostUnreachable
            case .other: self = .generalFailure
            }
        }
    }

    /// Why bytes are not a valid message, and what the server answers.
    public enum Malformed: Error, Sendable, Equatable {
        /// VER is not 5: closed without a reply.
        case version(UInt8)
        /// CMD is not CONNECT or UDP ASSOCIATE (BIND included): reply 0x07.
        case command(UInt8)
        /// ATYP is not 1, 3 or 4: reply 0x08.
        case addressType(UInt8)
        /// A domain name that is empty or has bytes outside printable ASCII: reply 0x01.
        case domainName
        /// A UDP datagram shorter than its header says.
        case truncated

        /// The reply code sent before closing, or nil: close without a reply.
        public var reply: ReplyCode? {
            switch self {
            case .version: return nil
            case .command: return .commandNotSupported
            case .addressType: return .addressTypeNotSupported
            case .domainName: return .generalFailure
            case .truncated: return .generalFailure
            }
        }
    }

    /// The result of parsing the bytes received so far.
    public enum Parsed<Message> {
        /// More bytes are needed.
        case incomplete
        /// A whole message, `length` bytes long; bytes after it belong to what follows.
        case complete(Message, length: Int)
        case malformed(Malformed)
    }

    // MARK: greeting (client → server)

    public struct Greeting: Sendable, Equatable {
        public var methodCount: Int
        public var offersNoAuthentication: Bool

        /// VER NMETHODS METHODS…. NMETHODS = 0 is a complete greeting that offers nothing.
        public static func parse(_ p: UnsafeRawBufferPointer) -> Parsed<Greeting> {
            guard p.count >= 1 else { return .incomplete }
            guard p[0] == Socks5.version else { return .malformed(.version(p[0])) }
            guard p.count >= 2 else { return .incomplete }
            let n = Int(p[1])
            guard p.count >= 2 + n else { return .incomplete }
            var noAuth = false
            for i in 0..<n where p[2 + i] == Socks5.methodNoAuthentication { noAuth = true }
            return .complete(Greeting(methodCount: n, offersNoAuthentication: noAuth), length: 2 + n)
        }

        public static func parse(_ bytes: [UInt8]) -> Parsed<Greeting> {
            bytes.withUnsafeBytes { parse($0) }
        }
    }

    /// The server's method selection: VER METHOD.
    public static func methodSelection(_ method: UInt8) -> [UInt8] { [version, method] }

    // MARK: addresses (shared by requests, replies and UDP headers)

    /// ATYP + address + port at `p[0...]`: the destination and the bytes used.
    static func parseAddress(_ p: UnsafeRawBufferPointer, at start: Int) -> Parsed<Destination> {
        guard p.count > start else { return .incomplete }
        let atyp = p[start]
        let body = start + 1
        switch AddressType(rawValue: atyp) {
        case .ipv4:
            guard p.count >= body + 4 + 2 else { return .incomplete }
            let a = IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: p[body..<body + 4]))
            let port = UInt16(p[body + 4]) << 8 | UInt16(p[body + 5])
            return .complete(.ip(Endpoint(a, port)), length: 1 + 4 + 2)
        case .ipv6:
            guard p.count >= body + 16 + 2 else { return .incomplete }
            let a = IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: p[body..<body + 16]))
            let port = UInt16(p[body + 16]) << 8 | UInt16(p[body + 17])
            return .complete(.ip(Endpoint(a, port)), length: 1 + 16 + 2)
        case .domain:
            guard p.count > body else { return .incomplete }
            let n = Int(p[body])
            guard p.count >= body + 1 + n + 2 else { return .incomplete }
            guard n > 0 else { return .malformed(.domainName) }
            let nameBytes = UnsafeRawBufferPointer(rebasing: p[(body + 1)..<(body + 1 + n)])
            for b in nameBytes where b < 0x21 || b > 0x7E { return .malformed(.domainName) }
            let name = String(decoding: nameBytes, as: UTF8.self)
            let port = UInt16(p[body + 1 + n]) << 8 | UInt16(p[body + 2 + n])
            return .complete(destination(name: name, port: port), length: 1 + 1 + n + 2)
        case nil:
            return .malformed(.addressType(atyp))
        }
    }

    /// A name that is an address literal (`198.18.1.2`, `fd00::1`, `[fd00::1]`) is that
    /// address: rules on CIDRs apply to it and nothing resolves it.
    public static func destination(name: String, port: UInt16) -> Destination {
        var text = Substring(name)
        if text.hasPrefix("[") && text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        if let a = IPAddress(String(text)) { return .ip(Endpoint(a, port)) }
        return .domain(name, port)
    }

    /// Writes ATYP + address + port; returns the bytes written (at most 1 + 255 + 2).
    @discardableResult
    static func writeAddress(_ d: Destination, to p: UnsafeMutableRawPointer) -> Int {
        switch d {
        case .ip(let e):
            p.storeBytes(of: e.address.isIPv4 ? AddressType.ipv4.rawValue : AddressType.ipv6.rawValue, as: UInt8.self)
            let n = e.address.write(to: p + 1)
            (p + 1 + n).storeBytes(of: UInt8(e.port >> 8), as: UInt8.self)
            (p + 2 + n).storeBytes(of: UInt8(e.port & 0xFF), as: UInt8.self)
            return 1 + n + 2
        case .domain(let name, let port):
            let utf8 = Array(name.utf8.prefix(255))
            p.storeBytes(of: AddressType.domain.rawValue, as: UInt8.self)
            (p + 1).storeBytes(of: UInt8(utf8.count), as: UInt8.self)
            if !utf8.isEmpty { utf8.withUnsafeBytes { (p + 2).copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
            let n = utf8.count
            (p + 2 + n).storeBytes(of: UInt8(port >> 8), as: UInt8.self)
            (p + 3 + n).storeBytes(of: UInt8(port & 0xFF), as: UInt8.self)
            return 1 + 1 + n + 2
        }
    }

    // MARK: request (client → server)

    public struct Request: Sendable, Equatable {
        public var command: Command
        public var destination: Destination

        public init(command: Command, destination: Destination) {
            self.command = command
            self.destination = destination
        }

        /// VER CMD RSV ATYP DST.ADDR DST.PORT. Checked in that order: a bad VER first (close),
        /// then ATYP (0x08, at once: the length is unknowable), then the whole request is
        /// read before CMD is judged (0x07), so the reply follows a fully consumed request.
        /// RSV is not checked.
        public static func parse(_ p: UnsafeRawBufferPointer) -> Parsed<Request> {
            guard p.count >= 1 else { return .incomplete }
            guard p[0] == Socks5.version else { return .malformed(.version(p[0])) }
            guard p.count >= 4 else { return .incomplete }
            switch parseAddress(p, at: 3) {
            case .incomplete: return .incomplete
            case .malformed(let m): return .malformed(m)
            case .complete(let d, let n):
                guard let c = Command(rawValue: p[1]), c != .bind else { return .malformed(.command(p[1])) }
                return .complete(Request(command: c, destination: d), length: 3 + n)
            }
        }

        public static func parse(_ bytes: [UInt8]) -> Parsed<Request> {
            bytes.withUnsafeBytes { parse($0) }
        }

        /// The request as a client sends it (tests, tools).
        public var encoded: [UInt8] {
            var out = [UInt8](repeating: 0, count: 3 + 1 + 1 + 255 + 2)
            let n = out.withUnsafeMutableBytes { raw -> Int in
                raw[0] = Socks5.version
                raw[1] = command.rawValue
                raw[2] = 0
                return 3 + Socks5.writeAddress(destination, to: raw.baseAddress! + 3)
            }
            out.removeLast(out.count - n)
            return out
        }
    }

    // MARK: reply (server → client)

    /// VER REP RSV ATYP BND.ADDR BND.PORT into `p` (room for maxReplyLength); returns the length.
    @discardableResult
    public static func writeReply(_ code: ReplyCode, bound: Endpoint, to p: UnsafeMutableRawPointer) -> Int {
        p.storeBytes(of: version, as: UInt8.self)
        (p + 1).storeBytes(of: code.rawValue, as: UInt8.self)
        (p + 2).storeBytes(of: 0, as: UInt8.self)
        return 3 + writeAddress(.ip(bound), to: p + 3)
    }

    public static let unspecifiedBound = Endpoint(.v4(0), 0)

    public static func reply(_ code: ReplyCode, bound: Endpoint = unspecifiedBound) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: maxReplyLength)
        let n = out.withUnsafeMutableBytes { writeReply(code, bound: bound, to: $0.baseAddress!) }
        out.removeLast(out.count - n)
        return out
    }

    /// A reply as a client reads it (tests, tools): the code and the bound address.
    public static func parseReply(_ p: UnsafeRawBufferPointer) -> Parsed<(code: UInt8, bound: Destination)> {
        guard p.count >= 1 else { return .incomplete }
        guard p[0] == version else { return .malformed(.version(p[0])) }
        guard p.count >= 4 else { return .incomplete }
        switch parseAddress(p, at: 3) {
        case .incomplete: return .incomplete
        case .malformed(let m): return .malformed(m)
        case .complete(let d, let n): return .complete((p[1], d), length: 3 + n)
        }
    }

    // MARK: UDP request header (both directions)

    public struct UDPHeader: Sendable, Equatable {
        /// FRAG: 0 for a whole datagram; anything else is a fragment (dropped by the server).
        public var fragment: UInt8
        public var destination: Destination
        /// Header bytes; the payload starts here.
        public var length: Int

        /// RSV RSV FRAG ATYP DST.ADDR DST.PORT DATA. FRAG is read first, so a fragment is
        /// recognised whatever its address. RSV is not checked.
        public static func parse(_ p: UnsafeRawBufferPointer) -> Parsed<UDPHeader> {
            guard p.count >= 4 else { return .malformed(.truncated) }
            switch parseAddress(p, at: 3) {
            case .incomplete: return .malformed(.truncated)
            case .malformed(let m): return .malformed(m)
            case .complete(let d, let n): return .complete(UDPHeader(fragment: p[2], destination: d, length: 3 + n), length: 3 + n)
            }
        }

        public static func parse(_ bytes: [UInt8]) -> Parsed<UDPHeader> {
            bytes.withUnsafeBytes { parse($0) }
        }

        /// The FRAG byte, or nil when the datagram is shorter than a header's fixed part.
        public static func fragmentByte(_ p: UnsafeRawBufferPointer) -> UInt8? {
            p.count >= 4 ? p[2] : nil
        }

        public static func fragmentByte(_ bytes: [UInt8]) -> UInt8? {
            bytes.withUnsafeBytes { fragmentByte($0) }
        }

        /// The header of a datagram to the client: RSV RSV 0 + `source` (room for
        /// maxUDPHeaderLength); returns its length.
        @discardableResult
        public static func write(source: Destination, to p: UnsafeMutableRawPointer) -> Int {
            p.storeBytes(of: 0, as: UInt8.self)
            (p + 1).storeBytes(of: 0, as: UInt8.self)
            (p + 2).storeBytes(of: 0, as: UInt8.self)
            return 3 + writeAddress(source, to: p + 3)
        }

        public static func encode(_ destination: Destination, payload: [UInt8] = []) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: maxUDPHeaderLength)
            let n = out.withUnsafeMutableBytes { write(source: destination, to: $0.baseAddress!) }
            out.removeLast(out.count - n)
            return out + payload
        }
    }
}

extension Socks5.Parsed: Equatable where Message: Equatable {
    public static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case (.incomplete, .incomplete): return true
        case (.complete(let x, let m), .complete(let y, let n)): return x == y && m == n
        case (.malformed(let x), .malformed(let y)): return x == y
        default: return false
        }
    }
}
