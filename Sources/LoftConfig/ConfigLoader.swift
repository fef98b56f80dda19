import LoftCore

/// Reads a loft YAML configuration into a validated `Configuration`. Fails on the first problem,
/// with the file, line and column where it is.
public enum ConfigLoader {
    /// Files larger than this are refused (config files and `to-file` lists alike).
    static let maximumFileSize = 64 << 20

    /// Reads and parses the file at `path`; relative paths inside it (`to-file`, `tls.ca`) are
    /// resolved against the file's folder.
    public static func load(path: String) throws(ConfigError) -> Configuration {
        let bytes: [UInt8]
        switch readFile(path) {
        case .success(let b): bytes = b
        case .failure(let message): throw ConfigError(file: path, message: "cannot read: \(message)")
        }
        return try parse(bytes: bytes, file: path, baseDirectory: directory(of: path))
    }

    /// Parses configuration text. `file` names it in errors; `baseDirectory` is where relative
    /// paths inside it are resolved.
    public static func parse(_ text: String, file: String,
                             baseDirectory: String = ".") throws(ConfigError) -> Configuration {
        try parse(bytes: Array(text.utf8), file: file, baseDirectory: baseDirectory)
    }

    static func parse(bytes: [UInt8], file: String, baseDirectory: String) throws(ConfigError) -> Configuration {
        guard let root = try YAML.parse(bytes: bytes, file: file), !root.isNull else {
            return .builtInDefault
        }
        return try ConfigDecoder(file: file, baseDirectory: baseDirectory).decode(root)
    }

    // MARK: Files

    enum ReadResult { case success([UInt8]), failure(String) }

    /// `regularOnly`: a list that `loft reload` reads again on the running loop must be a plain
    /// file (a FIFO or a device would block the loop, or never end).
    static func readFile(_ path: String, regularOnly: Bool = false) -> ReadResult {
        let fd: Int32
        switch Syscall.openForReading(path, nonblocking: regularOnly) {
        case .success(let f): fd = f
        case .failure(let e): return .failure(e.description)
        }
        defer { _ = Syscall.close(fd) }
        if regularOnly {
            switch Syscall.status(fd) {
            case .failure(let e): return .failure(e.description)
            case .success(let st): if !st.isRegularFile { return .failure("not a regular file") }
            }
        }
        switch Syscall.readAll(fd, upTo: maximumFileSize) {
        case .failure(let e): return .failure(e.description)
        case .success(let out):
            if out.count > maximumFileSize {
                return .failure("larger than \(maximumFileSize >> 20) MiB")
            }
            return .success(out)
        }
    }

    /// The names in a folder (without `.` and `..`).
    static func listDirectory(_ path: String) -> Result<[String], DirectoryError> {
        Syscall.readDirectory(path)
            .map { $0.filter { $0 != "." && $0 != ".." } }
            .mapError { DirectoryError($0.description) }
    }

    struct DirectoryError: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }

    /// The folder part of a path: "a/b.yaml" → "a", "b.yaml" → ".", "/b.yaml" → "/".
    public static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    /// `relative` against `base` unless it is absolute (or base is ".").
    public static func resolve(_ relative: String, against base: String) -> String {
        if relative.hasPrefix("/") || base == "." || base.isEmpty { return relative }
        return base.hasSuffix("/") ? base + relative : base + "/" + relative
    }
}

/// Decodes the node tree section by section, in document order.
struct ConfigDecoder {
    let file: String
    let baseDirectory: String
    let v: Values

    init(file: String, baseDirectory: String) {
        self.file = file
        self.baseDirectory = baseDirectory
        self.v = Values(file: file)
    }

    static let topKeys = ["log", "tun", "socks5", "bridge", "outbounds", "rules", "default", "hold",
                          "control", "limits", "metrics", "outbound-dir", "sniff", "fake-ip"]
    static let tunKeys = ["name", "netns", "mtu", "ipv4", "ipv6", "route-all", "dns", "icmp", "offload"]
    static let socks5Keys = ["listen", "max-clients"]
    static let bridgeKeys = ["peer-port", "extension-port", "mtu"]
    static let fakeIPKeys = ["ipv4", "ipv6", "ttl", "names", "exclude", "file", "max-entries"]
    static let fakeIPTTLRange = Duration.seconds(1)...Duration.seconds(3600)
    static let fakeIPEntriesRange = 16...1_000_000
    static let sniffKeys = ["enabled", "wait", "max-bytes", "skip-ports", "direct-resolve"]
    static let sniffWaitRange = Duration.milliseconds(10)...Duration.seconds(5)
    static let sniffBytesRange = 512...65_536
    static let limitKeys = ["max-flows", "connect-timeout", "tcp-idle-timeout", "udp-idle-timeout"]
    static let outboundKeys = ["name", "type", "server", "carrier", "token", "tls", "state-file", "quic-max-packet", "uuid", "alpn",
                               "user", "password", "password-file", "auth", "keepalive", "resume-streams", "resume-buffer", "mptcp"]
    /// The keys each outbound type takes besides name and type.
    static let typeKeys: [String: [String]] = [
        "direct": [], "drop": [],
        "loft": ["server", "carrier", "token", "tls", "state-file", "quic-max-packet", "resume-streams", "resume-buffer", "mptcp"],
        "vless": ["server", "uuid", "tls", "alpn", "mptcp"],
        "sstp": ["server", "user", "password", "password-file", "tls", "auth", "keepalive"],
    ]
    static let tlsKeys = ["server-name", "ca", "pin-sha256", "system-ca", "insecure"]
    static let ruleKeys = ["action", "outbound", "reset", "to", "to-file", "ports", "network", "domains"]
    static let carriers = ["get", "ws", "h2", "quic", "h3"]
    /// `quic-max-packet` (outbounds of type loft, and the front's): the largest UDP payload of
    /// the quic and h3 carriers. 1200 is QUIC's minimum; 16 KiB is past where a larger packet
    /// stops paying (docs/holder.md, "Packet size").
    static let quicPacketRange = 1200...16_384

    static let mtuRange = 1280...65535
    static let maxClientsRange = 128...65536
    static let maxFlowsRange = 16...1_000_000
    static let connectTimeoutRange = Duration.milliseconds(100)...Duration.seconds(300)
    static let sstpKeepaliveRange = Duration.seconds(1)...Duration.seconds(300)
    static let tcpIdleRange = Duration.seconds(1)...Duration.seconds(7 * 86_400)
    static let udpIdleRange = Duration.seconds(1)...Duration.seconds(86_400)

    func decode(_ root: YAMLNode) throws(ConfigError) -> Configuration {
        guard case .mapping = root.value else {
            let given = root.scalar.map { "the text \(Values.quote($0))" } ?? Values.describe(root)
            throw v.error(root, "the configuration must be a mapping of keys (\(ConfigDecoder.topKeys.joined(separator: ", "))), got \(given)")
        }
        var config = Configuration.builtInDefault
        var defaultNode: YAMLNode?
        var socks5Node: YAMLNode?
        var metricsNode: YAMLNode?
        var outboundDirNode: YAMLNode?
        var fakeIPNode: YAMLNode?
        var ruleOutbounds: [(rule: Int, name: String, node: YAMLNode)] = []

        try v.forEachField(root, path: nil, allowed: ConfigDecoder.topKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            switch key {
            case "log":
                config.log = try v.keyword(value, path: "log", LogLevel.allCases.map { ($0.rawValue, $0) })
            case "tun":
                config.tun = try tun(value)
            case "socks5":
                config.socks5 = try socks5(value)
                socks5Node = value
            case "bridge":
                config.bridge = try bridge(value)
            case "limits":
                config.limits = try limits(value)
            case "sniff":
                config.sniff = try sniff(value)
            case "fake-ip":
                config.fakeIP = try fakeIP(value)
                fakeIPNode = value
            case "outbounds":
                config.outbounds = try outbounds(value)
            case "rules":
                (config.rules, ruleOutbounds) = try rules(value)
            case "default":
                defaultNode = value
            case "hold":
                config.hold = try v.bool(value, path: "hold")
            case "control":
                let path = try v.string(value, path: "control")
                guard path.utf8.count <= 107, !path.utf8.contains(0) else {
                    throw v.error(value, "control must be a socket path of at most 107 bytes, got \(path.utf8.count) bytes")
                }
                config.control = path
            case "metrics":
                config.metrics = try metrics(value)
                metricsNode = value
            case "outbound-dir":
                _ = try v.string(value, path: "outbound-dir")
                outboundDirNode = value
            default:
                break // forEachField only passes known keys
            }
        }

        if let metrics = config.metrics, let socks5 = config.socks5, metrics == socks5.listen,
           let node = metricsNode ?? socks5Node {
            throw v.error(node, "metrics \(metrics) is the same endpoint as socks5.listen")
        }

        if let node = fakeIPNode, config.fakeIP != nil, let tun = config.tun, !tun.routeAll {
            throw v.error(node, "fake-ip needs tun.route-all: true (its pool and the apps' DNS must be routed into the TUN)")
        }

        if let node = outboundDirNode {
            let dir = ConfigLoader.resolve(try v.string(node, path: "outbound-dir"), against: baseDirectory)
            config.outboundDirectory = dir
            try includeOutbounds(from: dir, node: node, into: &config.outbounds)
        }

        // Names that rules and `default` refer to must exist.
        let names = config.outbounds.map(\.name)
        func known() -> String { names.isEmpty ? "no outbounds are defined" : "defined: \(names.joined(separator: ", "))" }
        for reference in ruleOutbounds {
            let action: RuleAction
            switch reference.name {
            case "direct": action = .direct
            case "drop": action = .drop(reset: false)
            default:
                guard names.contains(reference.name) else {
                    throw ConfigError(position: config.rules[reference.rule].position,
                                      message: "rules[\(reference.rule)].outbound \(Values.quote(reference.name)) is not an outbound (\(known()))")
                }
                action = .via(outbound: reference.name)
            }
            config.rules[reference.rule].action = action
        }
        if let node = defaultNode {
            guard case .scalar(let text, _) = node.value, !node.isNull else {
                throw v.error(node, "default must be direct, drop or an outbound name, got \(Values.describe(node))")
            }
            switch text {
            case "direct": config.defaultAction = .direct
            case "drop": config.defaultAction = .drop(reset: false)
            default:
                guard names.contains(text) else {
                    throw v.error(node, "default must be direct, drop or an outbound name, got \(Values.quote(text)) (\(known()))")
                }
                config.defaultAction = .via(outbound: text)
            }
        }
        return config
    }

    // MARK: tun

    func tun(_ node: YAMLNode) throws(ConfigError) -> TunSettings? {
        guard let map = try v.section(node, path: "tun") else { return nil }
        var t = TunSettings()
        var mtuNode: YAMLNode?
        try v.forEachField(map, path: "tun", allowed: ConfigDecoder.tunKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            let path = "tun.\(key)"
            switch key {
            case "name": t.name = try v.name(value, path: path, maxLength: 15)
            case "netns": t.netns = try v.name(value, path: path, maxLength: 64)
            case "mtu":
                t.mtu = try v.integer(value, path: path, in: TunSettings.minimumMTU...65535)
                mtuNode = value
            case "ipv4": t.ipv4 = try interfacePrefix(value, path: path, ipv4: true)
            case "ipv6": t.ipv6 = try interfacePrefix(value, path: path, ipv4: false)
            case "route-all": t.routeAll = try v.bool(value, path: path)
            case "dns":
                t.dns = []
                for (i, item) in try v.list(value, path: path).enumerated() {
                    t.dns.append(try v.address(item, path: "\(path)[\(i)]"))
                }
            case "icmp": t.icmp = try v.keyword(value, path: path, ICMPPolicy.allCases.map { ($0.rawValue, $0) })
            case "offload": t.offload = try v.keyword(value, path: path, TunOffload.allCases.map { ($0.rawValue, $0) })
            default: break
            }
        }
        if let mtuNode, t.ipv6 != nil, t.mtu < TunSettings.minimumIPv6MTU {
            throw v.error(mtuNode, "tun.mtu must be at least \(TunSettings.minimumIPv6MTU) with IPv6 on (tun.ipv6: off allows down to \(TunSettings.minimumMTU)), got \(t.mtu)")
        }
        return t
    }

    /// An interface address with prefix length of the right family, or `off`.
    func interfacePrefix(_ node: YAMLNode, path: String, ipv4: Bool) throws(ConfigError) -> IPPrefix? {
        let example = ipv4 ? "198.18.0.1/30" : "fd00:18::1/126"
        let family = ipv4 ? "IPv4" : "IPv6"
        guard case .scalar(let text, let plain) = node.value, !node.isNull else {
            throw v.error(node, "\(path) must be an \(family) address/length, as in \(example), or off, got \(Values.describe(node))")
        }
        if plain && (text == "off" || text == "false") { return nil }
        guard text.contains("/"), let prefix = IPPrefix(text), prefix.address.isIPv4 == ipv4 else {
            throw v.error(node, "\(path) must be an \(family) address/length, as in \(example), or off, got \(Values.describe(node))")
        }
        guard prefix.length > 0, !prefix.address.isUnspecified, !prefix.address.isMulticast else {
            throw v.error(node, "\(path) must be a unicast interface address with a prefix length above 0, got \(Values.describe(node))")
        }
        return prefix
    }

    // MARK: socks5, bridge, limits, metrics

    func socks5(_ node: YAMLNode) throws(ConfigError) -> Socks5Settings? {
        guard let map = try v.section(node, path: "socks5") else { return nil }
        var s = Socks5Settings()
        try v.forEachField(map, path: "socks5", allowed: ConfigDecoder.socks5Keys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            switch key {
            case "listen":
                let endpoint = try v.endpoint(value, path: "socks5.listen", example: "127.0.0.1:11080")
                guard case .v4 = endpoint.address, endpoint.address.isLoopback else {
                    throw v.error(value, "socks5.listen must be a loopback address (127.0.0.0/8), got \(Values.describe(value))")
                }
                s.listen = endpoint
            case "max-clients":
                s.maxClients = try v.integer(value, path: "socks5.max-clients", in: ConfigDecoder.maxClientsRange)
            default: break
            }
        }
        return s
    }

    func bridge(_ node: YAMLNode) throws(ConfigError) -> BridgeSettings? {
        guard let map = try v.section(node, path: "bridge") else { return nil }
        var b = BridgeSettings()
        var lastPortNode: YAMLNode?
        try v.forEachField(map, path: "bridge", allowed: ConfigDecoder.bridgeKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            switch key {
            case "peer-port":
                b.peerPort = try v.port(value, path: "bridge.peer-port")
                lastPortNode = value
            case "extension-port":
                b.extensionPort = try v.port(value, path: "bridge.extension-port")
                lastPortNode = value
            case "mtu":
                b.mtu = try v.integer(value, path: "bridge.mtu", in: ConfigDecoder.mtuRange)
            default: break
            }
        }
        if b.peerPort == b.extensionPort {
            throw v.error(lastPortNode ?? map, "bridge.peer-port and bridge.extension-port must differ, both are \(b.peerPort)")
        }
        return b
    }

    func limits(_ node: YAMLNode) throws(ConfigError) -> LimitSettings {
        var l = LimitSettings()
        if node.isNull { return l }
        try v.forEachField(node, path: "limits", allowed: ConfigDecoder.limitKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            let path = "limits.\(key)"
            switch key {
            case "max-flows": l.maxFlows = try v.integer(value, path: path, in: ConfigDecoder.maxFlowsRange)
            case "connect-timeout": l.connectTimeout = try v.duration(value, path: path, in: ConfigDecoder.connectTimeoutRange)
            case "tcp-idle-timeout": l.tcpIdleTimeout = try v.duration(value, path: path, in: ConfigDecoder.tcpIdleRange)
            case "udp-idle-timeout": l.udpIdleTimeout = try v.duration(value, path: path, in: ConfigDecoder.udpIdleRange)
            default: break
            }
        }
        return l
    }

    func sniff(_ node: YAMLNode) throws(ConfigError) -> SniffSettings {
        var sn = SniffSettings()
        guard let map = try v.section(node, path: "sniff") else {
            sn.enabled = false
            return sn
        }
        try v.forEachField(map, path: "sniff", allowed: ConfigDecoder.sniffKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            let path = "sniff.\(key)"
            switch key {
            case "enabled": sn.enabled = try v.bool(value, path: path)
            case "wait": sn.wait = try v.duration(value, path: path, in: ConfigDecoder.sniffWaitRange)
            case "max-bytes": sn.maxBytes = try v.integer(value, path: path, in: ConfigDecoder.sniffBytesRange)
            case "skip-ports":
                // An empty list: no port skipped.
                let items = try v.list(value, path: path)
                var ports: [ClosedRange<UInt16>] = []
                for (i, entry) in items.enumerated() { ports.append(try portRange(entry, path: "\(path)[\(i)]")) }
                sn.skipPorts = ports
            case "direct-resolve": sn.directResolve = try v.bool(value, path: path)
            default: break
            }
        }
        return sn
    }

    func fakeIP(_ node: YAMLNode) throws(ConfigError) -> FakeIPSettings? {
        guard let map = try v.section(node, path: "fake-ip") else { return nil }
        var f = FakeIPSettings()
        try v.forEachField(map, path: "fake-ip", allowed: ConfigDecoder.fakeIPKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            let path = "fake-ip.\(key)"
            switch key {
            case "ipv4", "ipv6":
                let ipv4 = key == "ipv4"
                let example = ipv4 ? "198.19.0.0/16" : "fd00:fa::/64"
                guard case .scalar(let text, let plain) = value.value, !value.isNull else {
                    throw v.error(value, "\(path) must be a prefix, as in \(example), or off, got \(Values.describe(value))")
                }
                if plain && (text == "off" || text == "false") {
                    if ipv4 { f.ipv4 = nil } else { f.ipv6 = nil }
                    return
                }
                guard text.contains("/"), let prefix = IPPrefix(text), prefix.address.isIPv4 == ipv4,
                      prefix.length >= (ipv4 ? 8 : 64), prefix.length <= (ipv4 ? 30 : 126) else {
                    throw v.error(value, "\(path) must be an \(ipv4 ? "IPv4" : "IPv6") prefix of length \(ipv4 ? "8 … 30" : "64 … 126"), as in \(example), or off, got \(Values.describe(value))")
                }
                if ipv4 { f.ipv4 = prefix.masked } else { f.ipv6 = prefix.masked }
            case "ttl": f.ttl = try v.duration(value, path: path, in: ConfigDecoder.fakeIPTTLRange)
            case "names", "exclude":
                let items = try v.list(value, path: path)
                var names: [String] = []
                for (i, entry) in items.enumerated() { names.append(try domain(entry, path: "\(path)[\(i)]")) }
                if key == "names" { f.names = names } else { f.exclude = names }
            case "file": f.file = ConfigLoader.resolve(try v.string(value, path: path), against: baseDirectory)
            case "max-entries": f.maxEntries = try v.integer(value, path: path, in: ConfigDecoder.fakeIPEntriesRange)
            default: break
            }
        }
        if f.ipv4 == nil && f.ipv6 == nil {
            throw v.error(map, "fake-ip needs a pool: ipv4 or ipv6 (or both), not both off")
        }
        return f
    }

    func metrics(_ node: YAMLNode) throws(ConfigError) -> Endpoint? {
        if node.isNull { return nil }
        if case .scalar(let text, plain: true) = node.value, text == "off" || text == "false" { return nil }
        let endpoint = try v.endpoint(node, path: "metrics", example: "127.0.0.1:9100")
        guard endpoint.address.isLoopback else {
            throw v.error(node, "metrics must be a loopback address (127.0.0.0/8 or [::1]), got \(Values.describe(node))")
        }
        return endpoint
    }
}

/// `host:port` as a loft outbound's `server` is written: a DNS name, an IPv4 address or
/// `[IPv6]`, and a port from 1 to 65535. `host` is without the brackets.
public struct HostPort: Sendable, Equatable {
    public var host: String
    public var port: UInt16

    public init?(_ text: String) {
        guard let colon = text.lastIndex(of: ":"), let p = Int(text[text.index(after: colon)...]),
              (1...65535).contains(p) else { return nil }
        let h = String(text[..<colon])
        if h.hasPrefix("[") && h.hasSuffix("]") && h.count > 2 {
            let inner = String(h.dropFirst().dropLast())
            guard let a = IPAddress(inner), !a.isIPv4 else { return nil }
            host = inner
        } else {
            guard !h.contains(":"), IPAddress(h) != nil || Values.isHostName(h) else { return nil }
            host = h
        }
        port = UInt16(p)
    }
}
