import Glibc
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
        let fd = open(path, O_RDONLY | O_CLOEXEC | (regularOnly ? O_NONBLOCK : 0))
        guard fd >= 0 else { return .failure(String(cString: strerror(errno))) }
        defer { close(fd) }
        if regularOnly {
            var st = stat()
            guard fstat(fd, &st) == 0 else { return .failure(String(cString: strerror(errno))) }
            guard st.st_mode & S_IFMT == S_IFREG else { return .failure("not a regular file") }
        }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(String(cString: strerror(errno)))
            }
            if n == 0 { break }
            out.append(contentsOf: chunk[0..<n])
            if out.count > maximumFileSize {
                return .failure("larger than \(maximumFileSize >> 20) MiB")
            }
        }
        return .success(out)
    }

    /// The names in a folder (without `.` and `..`).
    static func listDirectory(_ path: String) -> Result<[String], DirectoryError> {
        guard let d = opendir(path) else { return .failure(DirectoryError(String(cString: strerror(errno)))) }
        defer { closedir(d) }
        var names: [String] = []
        while let entry = readdir(d) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return .success(names)
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
                          "control", "limits", "metrics", "outbound-dir"]
    static let tunKeys = ["name", "netns", "mtu", "ipv4", "ipv6", "route-all", "dns", "icmp", "offload"]
    static let socks5Keys = ["listen", "max-clients"]
    static let bridgeKeys = ["peer-port", "extension-port", "mtu"]
    static let limitKeys = ["max-flows", "connect-timeout", "tcp-idle-timeout", "udp-idle-timeout"]
    static let outboundKeys = ["name", "type", "server", "carrier", "token", "tls", "state-file", "quic-max-packet", "uuid", "alpn",
                               "user", "password", "password-file", "auth", "keepalive"]
    /// The keys each outbound type takes besides name and type.
    static let typeKeys: [String: [String]] = [
        "direct": [], "drop": [],
        "loft": ["server", "carrier", "token", "tls", "state-file", "quic-max-packet"],
        "vless": ["server", "uuid", "tls", "alpn"],
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

    func metrics(_ node: YAMLNode) throws(ConfigError) -> Endpoint? {
        if node.isNull { return nil }
        if case .scalar(let text, plain: true) = node.value, text == "off" || text == "false" { return nil }
        let endpoint = try v.endpoint(node, path: "metrics", example: "127.0.0.1:9100")
        guard endpoint.address.isLoopback else {
            throw v.error(node, "metrics must be a loopback address (127.0.0.0/8 or [::1]), got \(Values.describe(node))")
        }
        return endpoint
    }

    // MARK: outbounds

    /// `outbound-dir`: every `*.yaml` file in the folder (in byte order of the names; others are
    /// skipped) is one outbound, a mapping with the keys of an `outbounds` entry. Errors are at
    /// that file's line and column; relative paths inside it are resolved against the folder.
    func includeOutbounds(from dir: String, node: YAMLNode, into outbounds: inout [OutboundSettings]) throws(ConfigError) {
        let names: [String]
        switch ConfigLoader.listDirectory(dir) {
        case .success(let n): names = n.filter { $0.hasSuffix(".yaml") && !$0.hasPrefix(".") }.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        case .failure(let message): throw v.error(node, "outbound-dir: cannot read \(Values.quote(dir)): \(message)")
        }
        for name in names {
            let file = ConfigLoader.resolve(name, against: dir)
            let bytes: [UInt8]
            switch ConfigLoader.readFile(file, regularOnly: true) {
            case .success(let b): bytes = b
            case .failure(let message): throw v.error(node, "outbound-dir: cannot read \(Values.quote(file)): \(message)")
            }
            let decoder = ConfigDecoder(file: file, baseDirectory: dir)
            guard let root = try YAML.parse(bytes: bytes, file: file), case .mapping = root.value else {
                throw ConfigError(position: SourcePosition(file: file, line: 1, column: 1),
                                  message: "an outbound file must be one mapping with name and type (the keys of an outbounds entry)")
            }
            let outbound = try decoder.outbound(root, path: "outbound")
            if let first = outbounds.first(where: { $0.name == outbound.name }) {
                throw decoder.v.error(nameNode(root) ?? root, "outbound.name \(Values.quote(outbound.name)) is already used at \(first.position)")
            }
            outbounds.append(outbound)
        }
    }

    func outbounds(_ node: YAMLNode) throws(ConfigError) -> [OutboundSettings] {
        var result: [OutboundSettings] = []
        var firstByName: [String: Int] = [:]
        for (index, item) in try v.list(node, path: "outbounds").enumerated() {
            let path = "outbounds[\(index)]"
            guard case .mapping = item.value else {
                throw v.error(item, "\(path) must be a mapping with name and type, got \(Values.describe(item))")
            }
            let outbound = try outbound(item, path: path)
            if let first = firstByName[outbound.name] {
                let at = result[first].position
                throw v.error(nameNode(item) ?? item, "\(path).name \(Values.quote(outbound.name)) is already used by outbounds[\(first)] (line \(at.line), column \(at.column))")
            }
            firstByName[outbound.name] = index
            result.append(outbound)
        }
        return result
    }

    private func nameNode(_ item: YAMLNode) -> YAMLNode? {
        guard case .mapping(let pairs) = item.value else { return nil }
        return pairs.first { $0.key.scalar == "name" }?.value
    }

    func outbound(_ item: YAMLNode, path: String) throws(ConfigError) -> OutboundSettings {
        var name: String?
        var type: String?
        var server: String?, carrier: String?, token: String?, uuid: String?
        var alpn: [String] = []
        var tls: (TLSVerification, String?)?
        var stateFile: String?
        var quicMaxPacket: (Int, YAMLNode)?
        var user: String?
        var password: (String, YAMLNode)?
        var passwordFileName: String?
        var auth: [SSTPAuthMethod] = [.mschapv2, .pap]
        var keepalive: Duration?
        var typedKeys: [(String, YAMLNode)] = []
        try v.forEachField(item, path: path, allowed: ConfigDecoder.outboundKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            let keyPath = "\(path).\(key)"
            if key != "name" && key != "type" { typedKeys.append((key, pair.key)) }
            switch key {
            case "name":
                let n = try v.name(value, path: keyPath, maxLength: 64)
                guard n != "direct" && n != "drop" else {
                    throw v.error(value, "\(keyPath) \(Values.quote(n)) is reserved: direct and drop are built in")
                }
                name = n
            case "type":
                type = try v.keyword(value, path: keyPath, [("loft", "loft"), ("vless", "vless"), ("sstp", "sstp"), ("direct", "direct"), ("drop", "drop")])
            case "server":
                server = try hostPort(value, path: keyPath)
            case "carrier":
                carrier = try v.keyword(value, path: keyPath, ConfigDecoder.carriers.map { ($0, $0) })
            case "token":
                token = try v.string(value, path: keyPath)
            case "uuid":
                guard case .scalar(let text, _) = value.value, let u = ConfigDecoder.uuid(text) else {
                    throw v.error(value, "\(keyPath) must be a UUID as in 27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b (32 hex digits, dashes optional), got \(Values.describe(value))")
                }
                uuid = u
            case "alpn":
                alpn = try self.alpn(value, path: keyPath)
            case "tls":
                tls = try self.tls(value, path: keyPath)
            case "state-file":
                stateFile = try v.writableFilePath(value, path: keyPath, baseDirectory: baseDirectory)
            case "quic-max-packet":
                quicMaxPacket = (try v.integer(value, path: keyPath, in: ConfigDecoder.quicPacketRange), pair.key)
            case "user":
                let u = try v.string(value, path: keyPath)
                guard u.utf8.count <= 255 else { throw v.error(value, "\(keyPath) must be at most 255 bytes (PPP's limit), got \(u.utf8.count)") }
                user = u
            case "password", "password-file":
                if let (_, first) = password {
                    throw v.error(pair.key, "\(path) takes one of password and password-file; \(key) is a second one (the first at line \(first.position.line), column \(first.position.column))")
                }
                let text = key == "password" ? try v.string(value, path: keyPath) : try passwordFile(value, path: keyPath)
                if key == "password-file" { passwordFileName = ConfigLoader.resolve(try v.string(value, path: keyPath), against: baseDirectory) }
                guard text.utf8.count <= 255 else {
                    throw v.error(value, "\(keyPath): the password must be at most 255 bytes (PPP's limit), got \(text.utf8.count)")
                }
                password = (text, pair.key)
            case "auth":
                auth = try sstpAuth(value, path: keyPath)
            case "keepalive":
                keepalive = try v.duration(value, path: keyPath, in: ConfigDecoder.sstpKeepaliveRange)
            default: break
            }
        }
        guard let name else { throw v.error(item, "\(path) is missing required key \"name\"") }
        guard let type else {
            throw v.error(item, "\(path) (\(name)) is missing required key \"type\" (loft, vless, sstp, direct or drop)")
        }
        let takes = ConfigDecoder.typeKeys[type] ?? []
        if let (key, node) = typedKeys.first(where: { !takes.contains($0.0) }) {
            let which = takes.isEmpty ? "takes only name and type" : "takes name, type, \(takes.joined(separator: ", "))"
            throw v.error(node, "key \(Values.quote(key)) in \(path) is not for type \(type); type \(type) \(which)")
        }
        func require(_ keys: [(String, Bool)]) throws(ConfigError) {
            for (key, present) in keys where !present {
                throw v.error(item, "\(path) (\(name), type \(type)) is missing required key \"\(key)\"")
            }
        }
        switch type {
        case "direct", "drop":
            return OutboundSettings(name: name, kind: type == "direct" ? .direct : .drop, position: item.position)
        case "vless":
            try require([("server", server != nil), ("uuid", uuid != nil), ("tls", tls != nil)])
            return OutboundSettings(
                name: name,
                kind: .vless(server: server!, uuid: uuid!, tls: tls!.0, serverName: tls!.1, alpn: alpn),
                position: item.position)
        case "sstp":
            try require([("server", server != nil), ("user", user != nil), ("password (or password-file)", password != nil),
                         ("tls", tls != nil)])
            var o = OutboundSettings(
                name: name,
                kind: .sstp(server: server!, user: user!, password: password!.0, tls: tls!.0, serverName: tls!.1, auth: auth),
                position: item.position)
            o.keepalive = keepalive
            o.passwordFile = passwordFileName
            return o
        default:
            try require([("server", server != nil), ("carrier", carrier != nil), ("token", token != nil), ("tls", tls != nil)])
            if let (_, node) = quicMaxPacket, carrier != "quic" && carrier != "h3" {
                throw v.error(node, "\(path).quic-max-packet is for carrier quic or h3, not \(carrier!)")
            }
            var o = OutboundSettings(
                name: name,
                kind: .loft(server: server!, carrier: carrier!, token: token!, tls: tls!.0, serverName: tls!.1),
                position: item.position, stateFile: stateFile)
            o.quicMaxPacket = quicMaxPacket?.0
            return o
        }
    }

    /// `password-file`: the password is the file's first line (a trailing `\r` dropped); the path is
    /// resolved against the config file's folder. Read now, so `loft check` finds a missing file.
    func passwordFile(_ node: YAMLNode, path: String) throws(ConfigError) -> String {
        let file = ConfigLoader.resolve(try v.string(node, path: path), against: baseDirectory)
        let bytes: [UInt8]
        switch ConfigLoader.readFile(file, regularOnly: true) {
        case .success(let b): bytes = b
        case .failure(let message): throw v.error(node, "\(path): cannot read \(Values.quote(file)): \(message)")
        }
        var line = bytes.prefix { $0 != UInt8(ascii: "\n") }
        if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
        guard let text = String(validating: line, as: UTF8.self), !text.isEmpty else {
            throw v.error(node, "\(path): the first line of \(Values.quote(file)) must be the password (UTF-8 text, not empty)")
        }
        return text
    }

    /// `auth`: one method or a list, each once, in order of preference.
    func sstpAuth(_ node: YAMLNode, path: String) throws(ConfigError) -> [SSTPAuthMethod] {
        let items: [YAMLNode]
        if case .scalar = node.value { items = [node] } else { items = try v.list(node, path: path) }
        guard !items.isEmpty else { throw v.error(node, "\(path) must name at least one of mschapv2, pap") }
        var out: [SSTPAuthMethod] = []
        for (i, item) in items.enumerated() {
            let m = try v.keyword(item, path: "\(path)[\(i)]", SSTPAuthMethod.allCases.map { ($0.rawValue, $0) })
            guard !out.contains(m) else { throw v.error(item, "\(path)[\(i)]: \(m.rawValue) is already in the list") }
            out.append(m)
        }
        return out
    }

    /// A UUID as 8-4-4-4-12 hex digits or 32 without dashes; returned lowercase with dashes.
    static func uuid(_ text: String) -> String? {
        let t = Array(text.lowercased())
        let hex: [Character]
        if t.count == 36 {
            for (i, c) in t.enumerated() where [8, 13, 18, 23].contains(i) != (c == "-") { return nil }
            hex = t.filter { $0 != "-" }
        } else {
            hex = t
        }
        guard hex.count == 32, hex.allSatisfy({ $0.isHexDigit && $0.isASCII }) else { return nil }
        let s = String(hex)
        let i = s.startIndex
        func part(_ a: Int, _ b: Int) -> Substring { s[s.index(i, offsetBy: a)..<s.index(i, offsetBy: b)] }
        return [part(0, 8), part(8, 12), part(12, 16), part(16, 20), part(20, 32)].joined(separator: "-")
    }

    /// `alpn`: one protocol name or a list of them (1 to 255 bytes each, at most 8).
    func alpn(_ node: YAMLNode, path: String) throws(ConfigError) -> [String] {
        let items: [YAMLNode]
        if case .scalar = node.value { items = [node] } else { items = try v.list(node, path: path) }
        guard items.count <= 8 else { throw v.error(node, "\(path) takes at most 8 protocol names, got \(items.count)") }
        var out: [String] = []
        for item in items {
            guard case .scalar(let text, _) = item.value, (1...255).contains(text.utf8.count),
                  text.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
                throw v.error(item, "\(path) must be protocol names as in h2 or http/1.1 (1 to 255 characters, no spaces), got \(Values.describe(item))")
            }
            out.append(text)
        }
        return out
    }

    /// `host:port` (see `HostPort`), kept as written.
    func hostPort(_ node: YAMLNode, path: String) throws(ConfigError) -> String {
        if case .scalar(let text, _) = node.value, HostPort(text) != nil { return text }
        throw v.error(node, "\(path) must be host:port with a port from 1 to 65535, as in front.example:443, 198.18.0.7:443 or [fd00::7]:443, got \(Values.describe(node))")
    }

    func tls(_ node: YAMLNode, path: String) throws(ConfigError) -> (TLSVerification, String?) {
        guard case .mapping = node.value else {
            throw v.error(node, "\(path) must be a mapping with server-name and one of ca, pin-sha256, system-ca: true, insecure: true, got \(Values.describe(node))")
        }
        var serverName: String?
        var chosen: TLSVerification?
        try v.forEachField(node, path: path, allowed: ConfigDecoder.tlsKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            let keyPath = "\(path).\(key)"
            var choice: TLSVerification?
            switch key {
            case "server-name":
                guard case .scalar(let text, _) = value.value, Values.isHostName(text) else {
                    throw v.error(value, "\(keyPath) must be a DNS name, as in front.example, got \(Values.describe(value))")
                }
                serverName = text
            case "ca":
                let file = try v.string(value, path: keyPath)
                choice = .caFile(ConfigLoader.resolve(file, against: baseDirectory))
            case "pin-sha256":
                guard case .scalar(let text, _) = value.value, text.count == 64,
                      text.allSatisfy({ $0.isHexDigit && $0.isASCII }) else {
                    throw v.error(value, "\(keyPath) must be 64 hex digits (the SHA-256 of the certificate's public key), got \(Values.describe(value))")
                }
                choice = .pinSHA256(text.lowercased())
            case "insecure":
                if try v.bool(value, path: keyPath) { choice = .insecure }
            case "system-ca":
                if try v.bool(value, path: keyPath) { choice = .systemStore }
            default: break
            }
            if let choice {
                guard chosen == nil else {
                    throw v.error(pair.key, "\(path) takes exactly one of ca, pin-sha256, system-ca: true, insecure: true; \(key) is a second one")
                }
                chosen = choice
            }
        }
        guard let chosen else {
            throw v.error(node, "\(path) needs exactly one of ca, pin-sha256, system-ca: true, insecure: true")
        }
        return (chosen, serverName)
    }

    // MARK: rules

    func rules(_ node: YAMLNode) throws(ConfigError) -> ([RuleSettings], [(rule: Int, name: String, node: YAMLNode)]) {
        var result: [RuleSettings] = []
        var references: [(rule: Int, name: String, node: YAMLNode)] = []
        for (index, item) in try v.list(node, path: "rules").enumerated() {
            let path = "rules[\(index)]"
            guard case .mapping = item.value else {
                throw v.error(item, "\(path) must be a mapping with an action, got \(Values.describe(item))")
            }
            let (rule, outbound) = try rule(item, path: path)
            if let outbound { references.append((index, outbound.0, outbound.1)) }
            result.append(rule)
        }
        return (result, references)
    }

    /// One rule; for `action: via`, also the outbound name to check once all outbounds are known.
    func rule(_ item: YAMLNode, path: String) throws(ConfigError) -> (RuleSettings, (String, YAMLNode)?) {
        var action: String?
        var outbound: (String, YAMLNode)?
        var outboundKey: YAMLNode?
        var reset: Bool?
        var resetKey: YAMLNode?
        var rule = RuleSettings(action: .direct, position: item.position)
        var toGiven: YAMLNode?
        var fromFile: [IPPrefix] = []
        var toFileNode: YAMLNode?
        try v.forEachField(item, path: path, allowed: ConfigDecoder.ruleKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            let keyPath = "\(path).\(key)"
            switch key {
            case "action":
                action = try v.keyword(value, path: keyPath, [("direct", "direct"), ("drop", "drop"), ("via", "via")])
            case "outbound":
                outbound = (try v.string(value, path: keyPath), value)
                outboundKey = pair.key
            case "reset":
                reset = try v.bool(value, path: keyPath)
                resetKey = pair.key
            case "to":
                let items = try v.list(value, path: keyPath)
                guard !items.isEmpty else {
                    throw v.error(value, "\(keyPath) is empty; leave it out to match any address")
                }
                for (i, entry) in items.enumerated() {
                    guard case .scalar(let text, _) = entry.value, let prefix = Values.parsePrefix(text) else {
                        throw v.error(entry, "\(keyPath)[\(i)] must be an address or address/length, as in 198.18.0.0/15 or \"::/0\", got \(Values.describe(entry))")
                    }
                    rule.to.append(prefix)
                }
                toGiven = value
            case "to-file":
                let name = try v.string(value, path: keyPath)
                fromFile = try prefixFile(ConfigLoader.resolve(name, against: baseDirectory), node: value, path: keyPath)
                toFileNode = value
            case "ports":
                let items = try v.list(value, path: keyPath)
                guard !items.isEmpty else {
                    throw v.error(value, "\(keyPath) is empty; leave it out to match any port")
                }
                for (i, entry) in items.enumerated() {
                    rule.ports.append(try portRange(entry, path: "\(keyPath)[\(i)]"))
                }
            case "network":
                rule.network = try v.keyword(value, path: keyPath, [("tcp", "tcp"), ("udp", "udp")])
            case "domains":
                let items = try v.list(value, path: keyPath)
                guard !items.isEmpty else {
                    throw v.error(value, "\(keyPath) is empty; leave it out to match any name")
                }
                for (i, entry) in items.enumerated() {
                    rule.domains.append(try domain(entry, path: "\(keyPath)[\(i)]"))
                }
            default: break
            }
        }
        if toGiven != nil || toFileNode != nil {
            rule.to += fromFile
            if rule.to.isEmpty, let node = toFileNode {
                throw v.error(node, "\(path).to-file lists no prefixes; a rule without destinations would match any address")
            }
        }
        guard let action else {
            throw v.error(item, "\(path) is missing required key \"action\" (direct, drop or via)")
        }
        if action != "drop", let resetKey {
            throw v.error(resetKey, "\(path).reset is only for action drop")
        }
        switch action {
        case "direct":
            if let outboundKey { throw v.error(outboundKey, "\(path).outbound is only for action via") }
            rule.action = .direct
            return (rule, nil)
        case "drop":
            if let outboundKey { throw v.error(outboundKey, "\(path).outbound is only for action via") }
            rule.action = .drop(reset: reset ?? false)
            return (rule, nil)
        default:
            guard let outbound else {
                throw v.error(item, "\(path) has action via but no outbound")
            }
            rule.action = .via(outbound: outbound.0)
            return (rule, outbound)
        }
    }

    /// `443` or `"8000-8100"` (also `"443"`).
    func portRange(_ node: YAMLNode, path: String) throws(ConfigError) -> ClosedRange<UInt16> {
        if case .scalar(let text, _) = node.value {
            let parts = text.split(separator: "-", omittingEmptySubsequences: false)
            let numbers = parts.compactMap { part -> UInt16? in
                let t = part.trimmingWhitespace()
                guard !t.isEmpty, t.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(t),
                      (1...65535).contains(n) else { return nil }
                return UInt16(n)
            }
            if parts.count == 1, numbers.count == 1 { return numbers[0]...numbers[0] }
            if parts.count == 2, numbers.count == 2, numbers[0] <= numbers[1] { return numbers[0]...numbers[1] }
        }
        throw v.error(node, "\(path) must be a port from 1 to 65535 or a range \"low-high\", as in \"8000-8100\", got \(Values.describe(node))")
    }

    /// A lowercased DNS name, or `*.name` for every name below it.
    func domain(_ node: YAMLNode, path: String) throws(ConfigError) -> String {
        if case .scalar(let text, _) = node.value {
            var name = text.lowercased()
            if name.hasSuffix(".") { name.removeLast() }
            let bare = name.hasPrefix("*.") ? String(name.dropFirst(2)) : name
            if !bare.contains("*"), Values.isHostName(bare) { return name }
        }
        throw v.error(node, "\(path) must be a domain name, as in example.com, or \"*.example.com\" for the names below it, got \(Values.describe(node))")
    }

    /// A list file: one prefix a line; `#` starts a comment; blank lines are skipped. A bad line is
    /// reported at that file's line, column 1.
    func prefixFile(_ path: String, node: YAMLNode, path keyPath: String) throws(ConfigError) -> [IPPrefix] {
        let bytes: [UInt8]
        switch ConfigLoader.readFile(path, regularOnly: true) {
        case .success(let b): bytes = b
        case .failure(let message):
            throw v.error(node, "\(keyPath): cannot read \(Values.quote(path)): \(message)")
        }
        var result: [IPPrefix] = []
        var lineNumber = 0
        for rawLine in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            var line = String(decoding: rawLine, as: UTF8.self)
            if let hash = line.firstIndex(of: "#") { line = String(line[..<hash]) }
            let entry = line.trimmingWhitespace()
            if entry.isEmpty { continue }
            guard let prefix = Values.parsePrefix(entry) else {
                throw ConfigError(position: SourcePosition(file: path, line: lineNumber, column: 1),
                                  message: "bad prefix \(Values.quote(entry)) (expected an address or address/length, as in 198.18.0.0/15), in the list of \(keyPath) at \(node.position)")
            }
            result.append(prefix)
        }
        return result
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
