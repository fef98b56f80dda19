import LoftCore

/// How much loft logs, from least to most verbose (`error < warn < info < debug`).
public enum LogLevel: String, Sendable, Comparable, CaseIterable {
    case error, warn, info, debug

    private var rank: Int {
        switch self {
        case .error: return 0
        case .warn: return 1
        case .info: return 2
        case .debug: return 3
        }
    }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rank < rhs.rank }

    /// The logger's threshold for this level.
    public var threshold: Log.Level {
        switch self {
        case .error: return .error
        case .warn: return .warn
        case .info: return .info
        case .debug: return .debug
        }
    }
}

/// What the TUN side does with ICMP echo requests.
public enum ICMPPolicy: String, Sendable, CaseIterable {
    case reply, drop
}

/// Whether the TUN asks the kernel for checksum and segmentation offloads (key `offload`).
public enum TunOffload: String, Sendable, CaseIterable {
    /// Asked for; when the kernel refuses, plain packets (said once in the log and in status).
    case auto
    case off
}

public struct TunSettings: Sendable, Equatable {
    /// Interface name: 1...15 characters of `[A-Za-z0-9_.-]`.
    public var name: String
    /// Network namespace to create the TUN in (created if missing); nil: the current one.
    public var netns: String?
    /// 576...65535 (at least 1280 with IPv6 on).
    public var mtu: Int
    /// The interface's IPv4 address and prefix; nil (`ipv4: off`) for none.
    public var ipv4: IPPrefix?
    /// The interface's IPv6 address and prefix; nil (`ipv6: off`) for none.
    public var ipv6: IPPrefix?
    /// Key `route-all`: default routes into the TUN; false: only the TUN's own subnets.
    public var routeAll: Bool
    /// Resolvers for the namespace's resolv.conf; empty: none is written.
    public var dns: [IPAddress]
    public var icmp: ICMPPolicy
    public var offload: TunOffload

    public static let defaultIPv4 = IPPrefix("198.18.0.1/30")!
    public static let defaultIPv6 = IPPrefix("fd00:18::1/126")!

    public init(name: String = "loft0", netns: String? = nil, mtu: Int = 1500,
                ipv4: IPPrefix? = TunSettings.defaultIPv4, ipv6: IPPrefix? = TunSettings.defaultIPv6,
                routeAll: Bool = true, dns: [IPAddress] = [], icmp: ICMPPolicy = .reply,
                offload: TunOffload = .auto) {
        self.name = name
        self.netns = netns
        self.mtu = mtu
        self.ipv4 = ipv4
        self.ipv6 = ipv6
        self.routeAll = routeAll
        self.dns = dns
        self.icmp = icmp
        self.offload = offload
    }

    public static let minimumMTU = 576
    /// IPv6 needs links of at least 1280 (RFC 8200).
    public static let minimumIPv6MTU = 1280
}

public struct Socks5Settings: Sendable, Equatable {
    /// Where the SOCKS5 server listens; always an IPv4 loopback address (127.0.0.0/8).
    public var listen: Endpoint
    /// Key `max-clients`: 128...65536.
    public var maxClients: Int

    public static let defaultListen = Endpoint(IPAddress("127.0.0.1")!, 11080)

    public init(listen: Endpoint = Socks5Settings.defaultListen, maxClients: Int = 1024) {
        self.listen = listen
        self.maxClients = maxClients
    }
}

/// The UDP packet bridge: loft binds 127.0.0.1:`extensionPort` and connects to
/// 127.0.0.1:`peerPort`, where the other process listens.
public struct BridgeSettings: Sendable, Equatable {
    public var peerPort: UInt16
    public var extensionPort: UInt16
    /// 1280...65535: the largest packet carried in one datagram.
    public var mtu: Int

    public init(peerPort: UInt16 = 9090, extensionPort: UInt16 = 9091, mtu: Int = 1500) {
        self.peerPort = peerPort
        self.extensionPort = extensionPort
        self.mtu = mtu
    }
}

public struct LimitSettings: Sendable, Equatable {
    /// Key `max-flows`: 16...1_000_000 concurrent flows; the oldest idle one is evicted.
    public var maxFlows: Int
    /// Key `connect-timeout`: 100ms...5m.
    public var connectTimeout: Duration
    /// Key `tcp-idle-timeout`: 1s...7d.
    public var tcpIdleTimeout: Duration
    /// Key `udp-idle-timeout`: 1s...1d.
    public var udpIdleTimeout: Duration

    public init(maxFlows: Int = 16384, connectTimeout: Duration = .seconds(10),
                tcpIdleTimeout: Duration = .seconds(2 * 3600), udpIdleTimeout: Duration = .seconds(60)) {
        self.maxFlows = maxFlows
        self.connectTimeout = connectTimeout
        self.tcpIdleTimeout = tcpIdleTimeout
        self.udpIdleTimeout = udpIdleTimeout
    }
}

/// Key `sniff`: names from TCP flows' first bytes (docs/sniffing.md).
public struct SniffSettings: Sendable, Equatable {
    /// `sniff: off` (or `enabled: false`): every flow routed by address at its SYN.
    public var enabled: Bool
    /// Key `wait`: 10ms...5s, how long the first bytes are waited for.
    public var wait: Duration
    /// Key `max-bytes`: 512...65536, the most first bytes looked at.
    public var maxBytes: Int
    /// Key `skip-ports`: ports routed at once (the server speaks first); nil: the default list.
    public var skipPorts: [ClosedRange<UInt16>]?
    /// Key `direct-resolve`: direct outbounds dial the sniffed name (resolved by loft) instead
    /// of the app's address.
    public var directResolve: Bool

    public init(enabled: Bool = true, wait: Duration = .milliseconds(300), maxBytes: Int = 16_384,
                skipPorts: [ClosedRange<UInt16>]? = nil, directResolve: Bool = false) {
        self.enabled = enabled
        self.wait = wait
        self.maxBytes = maxBytes
        self.skipPorts = skipPorts
        self.directResolve = directResolve
    }
}

/// Key `fake-ip`: DNS answers from a pool of addresses standing for names (docs/fakeip.md).
public struct FakeIPSettings: Sendable, Equatable {
    /// Key `ipv4`, `ipv6`: the pools (nil: off; at least one).
    public var ipv4: IPPrefix?
    public var ipv6: IPPrefix?
    /// Key `ttl`: 1s...1h, the answers' TTL.
    public var ttl: Duration
    /// Key `names`: patterns of the names given pool addresses (as rules' `domains`); empty: all.
    public var names: [String]
    /// Key `exclude`: patterns answered by the real DNS.
    public var exclude: [String]
    /// Key `file`: where the mapping is kept across restarts (resolved); nil: memory only.
    public var file: String?
    /// Key `max-entries`: 16...1000000 names at once.
    public var maxEntries: Int

    public init(ipv4: IPPrefix? = IPPrefix("198.19.0.0/16"), ipv6: IPPrefix? = IPPrefix("fd00:fa::/64"),
                ttl: Duration = .seconds(5), names: [String] = [], exclude: [String] = [], file: String? = nil,
                maxEntries: Int = 8192) {
        self.ipv4 = ipv4
        self.ipv6 = ipv6
        self.ttl = ttl
        self.names = names
        self.exclude = exclude
        self.file = file
        self.maxEntries = maxEntries
    }
}

/// How a loft outbound checks the front's certificate.
public enum TLSVerification: Sendable, Equatable {
    /// Trust the CA certificate(s) in this PEM file (path resolved against the config's folder).
    case caFile(String)
    /// Accept exactly the certificate whose SubjectPublicKeyInfo SHA-256 is this (64 lowercase hex).
    case pinSHA256(String)
    /// The system's trust store and the hostname check (key `system-ca: true`): what a link from
    /// another client means, since it carries no CA or pin.
    case systemStore
    /// No verification (testing only).
    case insecure
}

public struct OutboundSettings: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case direct
        case drop
        /// `server` is `host:port` as written; `carrier` is one of get, ws, h2, quic, h3;
        /// `serverName` is the TLS name to send and verify (nil: the server's host).
        case loft(server: String, carrier: String, token: String, tls: TLSVerification, serverName: String?)
        /// A VLESS server over TCP+TLS: `server` is `host:port` as written, `uuid` the user id
        /// (lowercase, 8-4-4-4-12), `alpn` the names offered in the handshake (empty: none).
        case vless(server: String, uuid: String, tls: TLSVerification, serverName: String?, alpn: [String])
        /// An SSTP server (MS-SSTP: PPP over TLS): `server` is `host:port` as written, `user` and
        /// `password` the PPP credentials (the password read from `password-file` when that is
        /// how it was given), `auth` the methods allowed, in order of preference.
        case sstp(server: String, user: String, password: String, tls: TLSVerification, serverName: String?,
                  auth: [SSTPAuthMethod])
    }

    public var name: String
    public var kind: Kind
    /// Type loft, key `state-file`: where the session's instance is kept, so a restarted loft
    /// resumes it (same overlay address). Resolved against the config file's folder.
    public var stateFile: String?
    /// Type loft with carrier quic or h3, key `quic-max-packet`: the largest UDP payload sent
    /// and taken (nil: 1452, found by path MTU discovery).
    public var quicMaxPacket: Int?
    /// Type loft, key `resume-streams`: offer the front stream replay, so flows pause instead
    /// of resetting when the carrier is lost (docs/protocol.md §8.1; default true).
    public var resumeStreams = true
    /// Type loft, key `resume-buffer`: bytes the session keeps for replay (sent and not yet
    /// acknowledged, plus queued); writers stall at it (default 16 MiB).
    public var resumeBuffer = 16 << 20
    /// Types loft (carriers ws, get, h2) and vless, key `mptcp`: TCP connections to the server
    /// made as Multipath TCP, plain TCP when the server does not speak it (docs/holder.md).
    public var mptcp = false
    /// Type sstp, key `keepalive`: an SSTP Echo Request after this long without a byte from the
    /// server, the link down after twice as long (default 30 s).
    public var keepalive: Duration?
    /// Type sstp: the file the password was read from (key `password-file`); nil when the
    /// password is in the config itself.
    public var passwordFile: String?
    /// Where the outbound's entry starts in the config file.
    public var position: SourcePosition

    public init(name: String, kind: Kind, position: SourcePosition, stateFile: String? = nil) {
        self.name = name
        self.kind = kind
        self.position = position
        self.stateFile = stateFile
    }
}

/// How an sstp outbound may authenticate (the `auth` key).
public enum SSTPAuthMethod: String, Sendable, Equatable, CaseIterable {
    case mschapv2, pap
}

public enum RuleAction: Sendable, Equatable {
    case direct
    /// Discard; with `reset`, a TCP SYN is answered with an RST.
    case drop(reset: Bool)
    /// Hand the flow to the named outbound (always one of `Configuration.outbounds`).
    case via(outbound: String)
}

public struct RuleSettings: Sendable, Equatable {
    public var action: RuleAction
    /// Destination prefixes, from `to:` followed by those of `to-file:`. Empty: any address.
    public var to: [IPPrefix]
    /// Destination port ranges. Empty: any port.
    public var ports: [ClosedRange<UInt16>]
    /// "tcp" or "udp"; nil: both.
    public var network: String?
    /// Lowercased names; `*.example.org` matches every name below example.org. Empty: any.
    public var domains: [String]
    /// Where the rule's entry starts in the config file.
    public var position: SourcePosition

    public init(action: RuleAction, to: [IPPrefix] = [], ports: [ClosedRange<UInt16>] = [],
                network: String? = nil, domains: [String] = [], position: SourcePosition) {
        self.action = action
        self.to = to
        self.ports = ports
        self.network = network
        self.domains = domains
        self.position = position
    }
}

public struct Configuration: Sendable, Equatable {
    public var log: LogLevel
    /// nil: no TUN (the default).
    public var tun: TunSettings?
    /// nil: SOCKS5 off (`socks5: off`); on by default.
    public var socks5: Socks5Settings?
    /// nil: bridge off (`bridge: off`); on by default.
    public var bridge: BridgeSettings?
    /// Names are unique and never "direct" or "drop".
    public var outbounds: [OutboundSettings]
    /// First match wins.
    public var rules: [RuleSettings]
    /// Key `default`: the action when no rule matches.
    public var defaultAction: RuleAction
    /// Fail-closed while the holder's session is down.
    public var hold: Bool
    /// Path of the control socket.
    public var control: String
    public var limits: LimitSettings
    /// Key `sniff`.
    public var sniff = SniffSettings()
    /// Key `fake-ip`; nil: off (the default).
    public var fakeIP: FakeIPSettings?
    /// Loopback endpoint of the metrics listener; nil: none.
    public var metrics: Endpoint?
    /// Key `outbound-dir`, resolved: the folder whose `*.yaml` files are one outbound each
    /// (where `loft import` writes); nil: none.
    public var outboundDirectory: String?

    public static let defaultControl = "/run/loft/control.sock"

    public init(log: LogLevel = .info, tun: TunSettings? = nil,
                socks5: Socks5Settings? = Socks5Settings(), bridge: BridgeSettings? = BridgeSettings(),
                outbounds: [OutboundSettings] = [], rules: [RuleSettings] = [],
                defaultAction: RuleAction = .direct, hold: Bool = false,
                control: String = Configuration.defaultControl, limits: LimitSettings = LimitSettings(),
                metrics: Endpoint? = nil) {
        self.log = log
        self.tun = tun
        self.socks5 = socks5
        self.bridge = bridge
        self.outbounds = outbounds
        self.rules = rules
        self.defaultAction = defaultAction
        self.hold = hold
        self.control = control
        self.limits = limits
        self.metrics = metrics
    }

    /// What `loft run` uses without a file: SOCKS5 on 127.0.0.1:11080, the bridge on
    /// 127.0.0.1:9091 ⇄ 9090, everything direct, no TUN.
    public static var builtInDefault: Configuration { Configuration() }

    /// The outbound with this name, if any.
    public func outbound(named name: String) -> OutboundSettings? {
        outbounds.first { $0.name == name }
    }
}
