import LoftCore

/// The carriers a front can serve (the names match LoftCarriers' CarrierKind, which this module
/// does not depend on).
public enum FrontCarrier: String, Sendable, CaseIterable {
    case ws, get, h2, quic, h3
}

/// The overlay networks a front hands out. In each, the first host is the gateway and clients get
/// the following hosts, one per instance.
public struct FrontPoolSettings: Sendable, Equatable {
    /// A network address with its length, 8...30 (so at least one client fits).
    public var ipv4: IPPrefix
    /// A network address with its length, 64...126; nil: no IPv6 overlay.
    public var ipv6: IPPrefix?

    public init(ipv4: IPPrefix, ipv6: IPPrefix? = nil) {
        self.ipv4 = ipv4
        self.ipv6 = ipv6
    }
}

/// A validated `loft-front` configuration (docs/front.md).
public struct FrontSettings: Sendable, Equatable {
    public var log: LogLevel
    /// The one listener loft allows off loopback: every carrier on it must authenticate.
    public var listen: Endpoint
    /// The session path, as in `/loft`.
    public var path: String
    /// Which carriers the listener serves; never empty, no duplicates.
    public var carriers: [FrontCarrier]
    /// PEM files, resolved against the config file's folder.
    public var certificateFile: String
    public var keyFile: String
    /// Tokens accepted in HELLO and RESUME (from `tokens:` then `tokens-file:`); never empty.
    public var tokens: [String]
    public var pool: FrontPoolSettings
    /// Sent in STATUS: 576...65535, 1280 or more with an IPv6 pool.
    public var mtu: Int
    /// Resolvers sent in STATUS, at most 16.
    public var dns: [IPAddress]
    /// How often each side must hear from the other: 1s...5m.
    public var keepalive: Duration
    /// Key `instance-expiry`: how long a detached instance keeps its addresses for RESUME.
    public var instanceExpiry: Duration
    /// Key `max-sessions`: attached and detached instances together.
    public var maxSessions: Int
    /// Key `max-streams`: per session (TCP streams and UDP associations), sent in STATUS.
    public var maxStreams: Int
    /// Key `connect-timeout`: how long dialing a TCP destination may take.
    public var connectTimeout: Duration
    /// Path of the control socket; nil: none (stats still go to the log on SIGUSR1 and at exit).
    public var control: String?
    /// Key `state-file`: where the instance table is kept across restarts (resolved against the
    /// config file's folder); nil: in memory only.
    public var stateFile: String?
    /// Key `udp-idle-timeout`: a UDP association with no datagram either way this long is closed.
    public var udpIdleTimeout: Duration

    /// Key `quic-retry`: when the quic listener answers an Initial with a Retry (docs/front.md).
    public var quicRetry: FrontQuicRetry = .auto
    /// Key `quic-max-packet`: the largest UDP payload of the quic and h3 carriers, sent and
    /// taken (nil: 1452, found by path MTU discovery; docs/front.md).
    public var quicMaxPacket: Int?
    /// Key `resume-grace`: how long a session whose carrier was lost keeps its streams parked
    /// for a RESUME (docs/protocol.md §8.1); 0: off, streams end with the carrier (default 30 s).
    public var resumeGrace: Duration = .seconds(30)
    /// Key `resume-buffer`: bytes one session keeps for replay (sent, not yet acknowledged,
    /// plus queued); writers stall at it (default 16 MiB).
    public var resumeBuffer: Int = 16 << 20
    /// Key `resume-budget`: bytes all parked sessions together may hold; past it the longest
    /// parked one ends (default 256 MiB).
    public var resumeBudget: Int = 256 << 20
    /// Key `mptcp`: the TCP listener takes Multipath TCP (IPPROTO_MPTCP); clients without it
    /// connect over plain TCP as before (docs/front.md).
    public var mptcp = false

    public static let defaultPath = "/loft"
    public static let defaultMTU = 1400

    public init(log: LogLevel = .info, listen: Endpoint, path: String = FrontSettings.defaultPath,
                carriers: [FrontCarrier] = [.ws, .get, .h2], certificateFile: String, keyFile: String,
                tokens: [String], pool: FrontPoolSettings, mtu: Int = FrontSettings.defaultMTU,
                dns: [IPAddress] = [], keepalive: Duration = .seconds(10), instanceExpiry: Duration = .seconds(600),
                maxSessions: Int = 1024, maxStreams: Int = 16384, connectTimeout: Duration = .seconds(10),
                control: String? = nil, stateFile: String? = nil, udpIdleTimeout: Duration = .seconds(60)) {
        self.log = log
        self.listen = listen
        self.path = path
        self.carriers = carriers
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.tokens = tokens
        self.pool = pool
        self.mtu = mtu
        self.dns = dns
        self.keepalive = keepalive
        self.instanceExpiry = instanceExpiry
        self.maxSessions = maxSessions
        self.maxStreams = maxStreams
        self.connectTimeout = connectTimeout
        self.control = control
        self.stateFile = stateFile
        self.udpIdleTimeout = udpIdleTimeout
    }
}

/// Key `quic-retry`: `auto` (the QUIC listener's default threshold, docs/front.md), `always`,
/// `never`, or the number of handshakes in progress from which Initials get a Retry.
public enum FrontQuicRetry: Sendable, Equatable {
    case auto, always, never
    case threshold(Int)
}

extension Duration {
    /// Whole milliseconds (durations in settings are never negative).
    public var wholeMilliseconds: UInt64 {
        let (s, atto) = components
        return UInt64(max(0, s)) * 1000 + UInt64(max(0, atto)) / 1_000_000_000_000_000
    }
}
