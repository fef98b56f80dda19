import LoftCore

/// The frame types of version 1 (the first header byte).
public enum FrameType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case hello = 0x01
    case resume = 0x02
    case status = 0x03
    case open = 0x10
    case openOK = 0x11
    case openFail = 0x12
    case data = 0x13
    case fin = 0x14
    case rst = 0x15
    case credit = 0x16
    case dgram = 0x20
    case ping = 0x30
    case pong = 0x31
    /// Replay (docs/protocol.md §8.1): cumulative count of the peer's session bytes received.
    case ack = 0x32
    case goaway = 0x3F

    /// Session frames use stream 0; stream frames a nonzero stream (or association) id.
    public var isStreamFrame: Bool {
        switch self {
        case .open, .openOK, .openFail, .data, .fin, .rst, .credit, .dgram: return true
        case .hello, .resume, .status, .ping, .pong, .ack, .goaway: return false
        }
    }

    public var description: String {
        switch self {
        case .hello: return "HELLO"
        case .resume: return "RESUME"
        case .status: return "STATUS"
        case .open: return "OPEN"
        case .openOK: return "OPEN_OK"
        case .openFail: return "OPEN_FAIL"
        case .data: return "DATA"
        case .fin: return "FIN"
        case .rst: return "RST"
        case .credit: return "CREDIT"
        case .dgram: return "DGRAM"
        case .ping: return "PING"
        case .pong: return "PONG"
        case .ack: return "ACK"
        case .goaway: return "GOAWAY"
        }
    }
}

/// The front's name for one client session: 16 opaque bytes, chosen by the front at HELLO and
/// presented again in RESUME.
public struct InstanceID: Hashable, Sendable, CustomStringConvertible {
    public var high: UInt64
    public var low: UInt64
    public init(high: UInt64, low: UInt64) { self.high = high; self.low = low }

    /// Reads 16 bytes, network order.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 16 else { return nil }
        var h: UInt64 = 0, l: UInt64 = 0
        for (i, b) in bytes.enumerated() {
            if i < 8 { h = h << 8 | UInt64(b) } else { l = l << 8 | UInt64(b) }
        }
        self.init(high: h, low: l)
    }

    /// 32 hex digits, as `description` writes them.
    public init?(hex: String) {
        let u = Array(hex.utf8)
        guard u.count == 32 else { return nil }
        var bytes: [UInt8] = []
        for i in stride(from: 0, to: 32, by: 2) {
            guard let a = Self.nibble(u[i]), let b = Self.nibble(u[i + 1]) else { return nil }
            bytes.append(a << 4 | b)
        }
        self.init(bytes: bytes)
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// A fresh id from the system's random source.
    public static func random() -> InstanceID {
        var g = SystemRandomNumberGenerator()
        return InstanceID(high: g.next(), low: g.next())
    }

    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(16)
        for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: high >> UInt64(s))) }
        for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: low >> UInt64(s))) }
        return out
    }

    public var description: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }
}

/// OPEN_FAIL reasons. The values follow SOCKS5's reply codes (RFC 1928 §6) where one fits;
/// any nonzero value is valid on the wire (unknown ones read as a general failure).
public struct OpenFailReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let generalFailure = OpenFailReason(rawValue: 0x01)
    public static let notAllowed = OpenFailReason(rawValue: 0x02)
    public static let networkUnreachable = OpenFailReason(rawValue: 0x03)
    public static let hostUnreachable = OpenFailReason(rawValue: 0x04)
    public static let refused = OpenFailReason(rawValue: 0x05)
    public static let timedOut = OpenFailReason(rawValue: 0x06)
    public static let networkNotSupported = OpenFailReason(rawValue: 0x07)
    public static let addressNotSupported = OpenFailReason(rawValue: 0x08)
    public static let resolveFailed = OpenFailReason(rawValue: 0x09)

    public init(_ failure: FlowFailure) {
        switch failure {
        case .refused: self = .refused
        case .hostUnreachable: self = .hostUnreachable
        case .networkUnreachable: self = .networkUnreachable
        case .timedOut: self = .timedOut
        case .notAllowed: self = .notAllowed
        case .resolveFailed: self = .resolveFailed
        case .other: self = .generalFailure
        }
    }

    /// What the client's input is told.
    public var flowFailure: FlowFailure {
        switch self {
        case .refused: return .refused
        case .hostUnreachable: return .hostUnreachable
        case .networkUnreachable: return .networkUnreachable
        case .timedOut: return .timedOut
        case .notAllowed: return .notAllowed
        case .resolveFailed: return .resolveFailed
        default: return .other(0)
        }
    }

    public var description: String {
        switch self {
        case .generalFailure: return "general-failure"
        case .notAllowed: return "not-allowed"
        case .networkUnreachable: return "network-unreachable"
        case .hostUnreachable: return "host-unreachable"
        case .refused: return "refused"
        case .timedOut: return "timed-out"
        case .networkNotSupported: return "network-not-supported"
        case .addressNotSupported: return "address-not-supported"
        case .resolveFailed: return "resolve-failed"
        default: return "reason-\(rawValue)"
        }
    }
}

/// RST reasons. Any value is valid on the wire.
public struct RstReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// The sender no longer wants the stream: an application abort, or a UDP association
    /// closed normally.
    public static let cancel = RstReason(rawValue: 0x00)
    /// Something failed on the sender's side (a socket error, an internal limit).
    public static let error = RstReason(rawValue: 0x01)
    /// The destination (or the app) reset its TCP connection.
    public static let connectionReset = RstReason(rawValue: 0x02)
    /// An idle timeout expired.
    public static let timedOut = RstReason(rawValue: 0x03)
    /// The sender evicted the stream to make room under its flow limit.
    public static let evicted = RstReason(rawValue: 0x04)

    public var description: String {
        switch self {
        case .cancel: return "cancel"
        case .error: return "error"
        case .connectionReset: return "connection-reset"
        case .timedOut: return "timed-out"
        case .evicted: return "evicted"
        default: return "reason-\(rawValue)"
        }
    }
}

/// GOAWAY reasons. Any value is valid on the wire.
public struct GoAwayReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Orderly end: the sender is shutting down or closing the session.
    public static let shutdown = GoAwayReason(rawValue: 0x00)
    /// The token in HELLO or RESUME was not accepted.
    public static let badToken = GoAwayReason(rawValue: 0x01)
    /// The version in HELLO or RESUME is not one the front speaks.
    public static let unsupportedVersion = GoAwayReason(rawValue: 0x02)
    /// The receiver of the GOAWAY broke the protocol; the text says how.
    public static let protocolError = GoAwayReason(rawValue: 0x03)
    /// RESUME named an instance the front does not have: start over with HELLO.
    public static let unknownInstance = GoAwayReason(rawValue: 0x04)
    /// The front cannot take the session now (no addresses left, too many sessions).
    public static let overloaded = GoAwayReason(rawValue: 0x05)
    /// A RESUME for the same instance arrived on another carrier; this one is finished.
    public static let superseded = GoAwayReason(rawValue: 0x06)

    public var description: String {
        switch self {
        case .shutdown: return "shutdown"
        case .badToken: return "bad-token"
        case .unsupportedVersion: return "unsupported-version"
        case .protocolError: return "protocol-error"
        case .unknownInstance: return "unknown-instance"
        case .overloaded: return "overloaded"
        case .superseded: return "superseded"
        default: return "reason-\(rawValue)"
        }
    }
}

/// HELLO: starts a new session.
public struct Hello: Equatable, Sendable {
    public var version: UInt8
    /// Feature bits; a receiver ignores bits it does not know. Bit 0 (`Hello.replay`): the
    /// client can keep its streams across carriers (docs/protocol.md §8.1).
    public var capabilities: UInt32
    public var token: String
    public var clientName: String
    public init(version: UInt8 = LoftWire.version, capabilities: UInt32 = 0, token: String, clientName: String) {
        self.version = version; self.capabilities = capabilities; self.token = token; self.clientName = clientName
    }
}

extension Hello {
    /// Capability bit: stream replay across carriers (docs/protocol.md §8.1).
    public static let replay: UInt32 = 1
}

/// RESUME's replay fields (docs/protocol.md §8.1), sent only by a client that does replay.
public struct ResumeReplay: Equatable, Sendable {
    /// The client kept the session's streams from the last carrier: `received` is how many of
    /// the front's session bytes it has, and the front continues after them.
    public var continuing: Bool
    /// The front's session bytes the client received (0 when not continuing).
    public var received: UInt64
    public init(continuing: Bool, received: UInt64) { self.continuing = continuing; self.received = received }
}

/// RESUME: reattaches an existing session (its instance) on a new carrier.
public struct Resume: Equatable, Sendable {
    public var version: UInt8
    public var instanceID: InstanceID
    public var token: String
    /// nil: a client without replay (the body ends after the token).
    public var replay: ResumeReplay?
    public init(version: UInt8 = LoftWire.version, instanceID: InstanceID, token: String, replay: ResumeReplay? = nil) {
        self.version = version; self.instanceID = instanceID; self.token = token; self.replay = replay
    }
}

/// STATUS's replay fields (flags bit 7): the session keeps its streams across carriers.
public struct StatusReplay: Equatable, Sendable {
    /// How long the front parks the session's streams after its carrier is lost.
    public var graceMs: UInt32
    /// Answering a continuing RESUME: the streams were kept and `received` is where the client
    /// continues. false: every stream and association of the session is gone.
    public var continued: Bool
    /// The client's session bytes the front received (0 unless `continued`).
    public var received: UInt64
    public init(graceMs: UInt32, continued: Bool = false, received: UInt64 = 0) {
        self.graceMs = graceMs; self.continued = continued; self.received = received
    }
}

/// The overlay network the front gives one instance: what the client puts on its TUN.
public struct Overlay: Equatable, Sendable {
    /// The client's IPv4 address and prefix length.
    public var ipv4: IPPrefix
    /// The next hop of the client's default route into the TUN.
    public var gateway4: IPAddress
    /// The client's IPv6 address and prefix, with `gateway6`; both or neither.
    public var ipv6: IPPrefix?
    public var gateway6: IPAddress?
    public var mtu: UInt16
    public var dns: [IPAddress]
    public init(ipv4: IPPrefix, gateway4: IPAddress, ipv6: IPPrefix? = nil, gateway6: IPAddress? = nil,
                mtu: UInt16 = 1500, dns: [IPAddress] = []) {
        self.ipv4 = ipv4; self.gateway4 = gateway4; self.ipv6 = ipv6; self.gateway6 = gateway6
        self.mtu = mtu; self.dns = dns
    }
}

/// STATUS: the front's answer to HELLO and RESUME, and again whenever the overlay changes.
public struct Status: Equatable, Sendable {
    public var instanceID: InstanceID
    /// How often the peers must hear from each other; 2 intervals of silence = a dead carrier.
    public var keepaliveMs: UInt32
    /// How many streams (TCP streams and UDP associations) the client may have open at once.
    public var maxStreams: UInt32
    public var overlay: Overlay
    /// nil: no replay on this session (docs/protocol.md §8.1).
    public var replay: StatusReplay?
    public init(instanceID: InstanceID, keepaliveMs: UInt32, maxStreams: UInt32, overlay: Overlay, replay: StatusReplay? = nil) {
        self.instanceID = instanceID; self.keepaliveMs = keepaliveMs; self.maxStreams = maxStreams
        self.overlay = overlay; self.replay = replay
    }
}

/// One decoded frame. Stream frames carry their stream (or association) id; session frames
/// are on stream 0.
public enum Frame: Equatable, Sendable {
    case hello(Hello)
    case resume(Resume)
    case status(Status)
    case open(stream: UInt32, network: FlowNetwork, destination: Destination)
    case openOK(stream: UInt32)
    case openFail(stream: UInt32, reason: OpenFailReason)
    case data(stream: UInt32, payload: [UInt8])
    case fin(stream: UInt32)
    case rst(stream: UInt32, reason: RstReason)
    case credit(stream: UInt32, increment: UInt32)
    case dgram(association: UInt32, remote: Destination, payload: [UInt8])
    case ping(UInt64)
    case pong(UInt64)
    case ack(UInt64)
    case goaway(reason: GoAwayReason, text: String)

    public var type: FrameType {
        switch self {
        case .hello: return .hello
        case .resume: return .resume
        case .status: return .status
        case .open: return .open
        case .openOK: return .openOK
        case .openFail: return .openFail
        case .data: return .data
        case .fin: return .fin
        case .rst: return .rst
        case .credit: return .credit
        case .dgram: return .dgram
        case .ping: return .ping
        case .pong: return .pong
        case .ack: return .ack
        case .goaway: return .goaway
        }
    }

    /// The header's stream field.
    public var stream: UInt32 {
        switch self {
        case .open(let s, _, _), .openOK(let s), .openFail(let s, _), .data(let s, _), .fin(let s),
             .rst(let s, _), .credit(let s, _), .dgram(let s, _, _):
            return s
        case .hello, .resume, .status, .ping, .pong, .ack, .goaway:
            return 0
        }
    }
}
