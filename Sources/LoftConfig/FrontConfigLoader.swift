import LoftCore

/// Reads a `loft-front` YAML configuration into validated `FrontSettings`. Fails on the first
/// problem, with the file, line and column where it is.
public enum FrontConfigLoader {
    /// Reads and parses the file at `path`; relative paths inside it (`tls`, `tokens-file`) are
    /// resolved against the file's folder.
    public static func load(path: String) throws(ConfigError) -> FrontSettings {
        let bytes: [UInt8]
        switch ConfigLoader.readFile(path) {
        case .success(let b): bytes = b
        case .failure(let message): throw ConfigError(file: path, message: "cannot read: \(message)")
        }
        return try parse(bytes: bytes, file: path, baseDirectory: ConfigLoader.directory(of: path))
    }

    /// Parses configuration text; `file` names it in errors.
    public static func parse(_ text: String, file: String, baseDirectory: String = ".",
                             checkFiles: Bool = true) throws(ConfigError) -> FrontSettings {
        try parse(bytes: Array(text.utf8), file: file, baseDirectory: baseDirectory, checkFiles: checkFiles)
    }

    static func parse(bytes: [UInt8], file: String, baseDirectory: String,
                      checkFiles: Bool = true) throws(ConfigError) -> FrontSettings {
        guard let root = try YAML.parse(bytes: bytes, file: file), !root.isNull else {
            throw ConfigError(file: file, message: "the front configuration is empty; it needs at least \(FrontConfigDecoder.required.joined(separator: ", "))")
        }
        return try FrontConfigDecoder(file: file, baseDirectory: baseDirectory, checkFiles: checkFiles).decode(root)
    }
}

struct FrontConfigDecoder {
    let file: String
    let baseDirectory: String
    /// Whether the TLS files must be readable now (tests of the grammar alone turn it off).
    let checkFiles: Bool
    let v: Values

    init(file: String, baseDirectory: String, checkFiles: Bool) {
        self.file = file
        self.baseDirectory = baseDirectory
        self.checkFiles = checkFiles
        v = Values(file: file)
    }

    static let topKeys = ["log", "listen", "path", "carriers", "tls", "tokens", "tokens-file", "pool", "mtu", "dns",
                          "keepalive", "instance-expiry", "max-sessions", "max-streams", "connect-timeout", "control",
                          "state-file", "udp-idle-timeout", "quic-retry", "quic-max-packet",
                          "resume-grace", "resume-buffer", "resume-budget", "mptcp"]
    static let required = ["listen", "tls", "tokens (or tokens-file)", "pool"]
    static let tlsKeys = ["certificate", "key"]
    static let poolKeys = ["ipv4", "ipv6"]

    static let ipv4PoolLengths = 8...30
    static let ipv6PoolLengths = 64...126
    // LoftWire.minMTU and minMTUWithIPv6 (LoftConfig does not depend on LoftProtocol).
    static let minMTU = 576
    static let minMTUWithIPv6 = 1280
    static let maxDNSServers = 16
    static let maxTokenBytes = 255
    static let keepaliveRange = Duration.seconds(1)...Duration.seconds(300)
    static let expiryRange = Duration.seconds(1)...Duration.seconds(7 * 86_400)
    static let connectTimeoutRange = Duration.milliseconds(100)...Duration.seconds(300)
    static let maxSessionsRange = 1...1_000_000
    static let maxStreamsRange = 1...65_536
    static let udpIdleRange = Duration.seconds(1)...Duration.seconds(3600)
    static let quicRetryRange = 1...1_000_000
    static let resumeGraceRange = Duration.zero...Duration.seconds(3600)
    static let resumeBufferRange = (4 << 20)...(1 << 30)
    static let resumeBudgetRange = (4 << 20)...(1 << 40)

    func decode(_ root: YAMLNode) throws(ConfigError) -> FrontSettings {
        guard case .mapping = root.value else {
            throw v.error(root, "the front configuration must be a mapping of keys (\(FrontConfigDecoder.topKeys.joined(separator: ", "))), got \(Values.describe(root))")
        }
        var log = LogLevel.info
        var listen: Endpoint?
        var path = FrontSettings.defaultPath
        var carriers: [FrontCarrier] = [.ws, .get, .h2]
        var tls: (certificate: String, key: String)?
        var tokens: [String] = []
        var tokenPositions: [String: SourcePosition] = [:]
        var tokensGiven = false
        var pool: FrontPoolSettings?
        var mtu = FrontSettings.defaultMTU
        var mtuNode: YAMLNode?
        var dns: [IPAddress] = []
        var keepalive = Duration.seconds(10)
        var expiry = Duration.seconds(600)
        var maxSessions = 1024
        var maxStreams = 16384
        var connectTimeout = Duration.seconds(10)
        var control: String?
        var stateFile: String?
        var udpIdleTimeout = Duration.seconds(60)
        var quicRetry = FrontQuicRetry.auto
        var quicMaxPacket: (Int, YAMLNode)?
        var resumeGrace = Duration.seconds(30)
        var resumeBuffer = 16 << 20
        var resumeBudget = 256 << 20
        var mptcp = false

        func addToken(_ token: String, at position: SourcePosition, path: String) throws(ConfigError) {
            guard !token.isEmpty, token.utf8.count <= FrontConfigDecoder.maxTokenBytes else {
                throw ConfigError(position: position, message: "\(path) must be 1 to \(FrontConfigDecoder.maxTokenBytes) bytes, got \(token.utf8.count)")
            }
            if let first = tokenPositions[token] {
                throw ConfigError(position: position, message: "\(path) repeats a token first given at \(first)")
            }
            tokenPositions[token] = position
            tokens.append(token)
        }

        try v.forEachField(root, path: nil, allowed: FrontConfigDecoder.topKeys) { (key, pair) throws(ConfigError) in
            let value = pair.value
            switch key {
            case "log":
                log = try v.keyword(value, path: "log", LogLevel.allCases.map { ($0.rawValue, $0) })
            case "listen":
                listen = try v.endpoint(value, path: "listen", example: "0.0.0.0:443")
            case "path":
                let p = try v.string(value, path: "path")
                guard p.hasPrefix("/"), p.utf8.count <= 255,
                      p.allSatisfy({ $0.isASCII && !$0.isWhitespace && $0 != "?" && $0 != "#" && $0 != "%" }) else {
                    throw v.error(value, "path must start with / and be at most 255 characters without spaces, ?, # or %, got \(Values.describe(value))")
                }
                path = p
            case "carriers":
                carriers = []
                let items = try v.list(value, path: "carriers")
                guard !items.isEmpty else { throw v.error(value, "carriers is empty; list at least one of ws, get, h2, quic, h3") }
                for (i, item) in items.enumerated() {
                    let c = try v.keyword(item, path: "carriers[\(i)]", FrontCarrier.allCases.map { ($0.rawValue, $0) })
                    guard !carriers.contains(c) else { throw v.error(item, "carriers[\(i)] repeats \(c.rawValue)") }
                    carriers.append(c)
                }
            case "tls":
                tls = try self.tls(value)
            case "tokens":
                tokensGiven = true
                for (i, item) in try v.list(value, path: "tokens").enumerated() {
                    guard case .scalar(let text, _) = item.value, !item.isNull else {
                        throw v.error(item, "tokens[\(i)] must be a string, got \(Values.describe(item))")
                    }
                    try addToken(text, at: item.position, path: "tokens[\(i)]")
                }
            case "tokens-file":
                tokensGiven = true
                let name = ConfigLoader.resolve(try v.string(value, path: "tokens-file"), against: baseDirectory)
                for (token, position) in try tokenFile(name, node: value) {
                    try addToken(token, at: position, path: "token")
                }
            case "pool":
                pool = try self.pool(value)
            case "mtu":
                mtu = try v.integer(value, path: "mtu", in: FrontConfigDecoder.minMTU...65535)
                mtuNode = value
            case "dns":
                let items = try v.list(value, path: "dns")
                guard items.count <= FrontConfigDecoder.maxDNSServers else {
                    throw v.error(value, "dns lists \(items.count) servers; at most \(FrontConfigDecoder.maxDNSServers) fit in STATUS")
                }
                dns = []
                for (i, item) in items.enumerated() { dns.append(try v.address(item, path: "dns[\(i)]")) }
            case "keepalive":
                keepalive = try v.duration(value, path: "keepalive", in: FrontConfigDecoder.keepaliveRange)
            case "instance-expiry":
                expiry = try v.duration(value, path: "instance-expiry", in: FrontConfigDecoder.expiryRange)
            case "max-sessions":
                maxSessions = try v.integer(value, path: "max-sessions", in: FrontConfigDecoder.maxSessionsRange)
            case "max-streams":
                maxStreams = try v.integer(value, path: "max-streams", in: FrontConfigDecoder.maxStreamsRange)
            case "connect-timeout":
                connectTimeout = try v.duration(value, path: "connect-timeout", in: FrontConfigDecoder.connectTimeoutRange)
            case "control":
                if case .scalar(let text, plain: true) = value.value, value.isNull || text == "off" || text == "false" {
                    control = nil
                    break
                }
                let p = try v.string(value, path: "control")
                guard p.utf8.count <= 107, !p.utf8.contains(0) else {
                    throw v.error(value, "control must be a socket path of at most 107 bytes, got \(p.utf8.count) bytes")
                }
                control = p
            case "state-file":
                stateFile = try v.writableFilePath(value, path: "state-file", baseDirectory: baseDirectory)
            case "udp-idle-timeout":
                udpIdleTimeout = try v.duration(value, path: "udp-idle-timeout", in: FrontConfigDecoder.udpIdleRange)
            case "quic-retry":
                if case .scalar(let text, plain: true) = value.value, let n = Values.parseInteger(text) {
                    guard FrontConfigDecoder.quicRetryRange.contains(n) else {
                        throw v.error(value, "quic-retry must be auto, always, never or a number of handshakes \(FrontConfigDecoder.quicRetryRange.lowerBound)...\(FrontConfigDecoder.quicRetryRange.upperBound), got \(n)")
                    }
                    quicRetry = .threshold(n)
                } else {
                    quicRetry = try v.keyword(value, path: "quic-retry", [("auto", FrontQuicRetry.auto), ("always", .always), ("never", .never)])
                }
            case "quic-max-packet":
                quicMaxPacket = (try v.integer(value, path: "quic-max-packet", in: ConfigDecoder.quicPacketRange), pair.key)
            case "resume-grace":
                resumeGrace = try v.duration(value, path: "resume-grace", in: FrontConfigDecoder.resumeGraceRange)
            case "resume-buffer":
                resumeBuffer = try v.integer(value, path: "resume-buffer", in: FrontConfigDecoder.resumeBufferRange)
            case "resume-budget":
                resumeBudget = try v.integer(value, path: "resume-budget", in: FrontConfigDecoder.resumeBudgetRange)
            case "mptcp":
                mptcp = try v.bool(value, path: "mptcp")
            default:
                break // forEachField only passes known keys
            }
        }

        guard let listen else { throw missing("listen", root, example: "listen: 0.0.0.0:443") }
        guard let tls else { throw missing("tls", root, example: "tls: { certificate: server.pem, key: server.key }") }
        guard tokensGiven else { throw missing("tokens", root, example: "tokens: [\"a-long-secret\"] (or tokens-file: FILE)") }
        guard !tokens.isEmpty else {
            throw ConfigError(position: root.position, message: "no tokens are given; list at least one in tokens or tokens-file")
        }
        guard let pool else { throw missing("pool", root, example: "pool: { ipv4: 198.18.64.0/24 }") }
        if pool.ipv6 != nil && mtu < FrontConfigDecoder.minMTUWithIPv6 {
            throw ConfigError(position: mtuNode?.position ?? root.position,
                              message: "mtu must be at least \(FrontConfigDecoder.minMTUWithIPv6) with an IPv6 pool, got \(mtu)")
        }
        var settings = FrontSettings(log: log, listen: listen, path: path, carriers: carriers, certificateFile: tls.certificate,
                             keyFile: tls.key, tokens: tokens, pool: pool, mtu: mtu, dns: dns, keepalive: keepalive,
                             instanceExpiry: expiry, maxSessions: maxSessions, maxStreams: maxStreams,
                             connectTimeout: connectTimeout, control: control, stateFile: stateFile,
                             udpIdleTimeout: udpIdleTimeout)
        settings.quicRetry = quicRetry
        settings.resumeGrace = resumeGrace
        settings.resumeBuffer = resumeBuffer
        settings.resumeBudget = resumeBudget
        settings.mptcp = mptcp
        if let (n, node) = quicMaxPacket {
            guard carriers.contains(.quic) || carriers.contains(.h3) else {
                throw v.error(node, "quic-max-packet is for the quic and h3 carriers; carriers lists neither")
            }
            settings.quicMaxPacket = n
        }
        return settings
    }

    private func missing(_ key: String, _ root: YAMLNode, example: String) -> ConfigError {
        v.error(root, "missing required key \"\(key)\", as in \(example)")
    }

    // MARK: tls

    func tls(_ node: YAMLNode) throws(ConfigError) -> (certificate: String, key: String) {
        guard case .mapping = node.value else {
            throw v.error(node, "tls must be a mapping with certificate and key, got \(Values.describe(node))")
        }
        var certificate: String?, key: String?
        try v.forEachField(node, path: "tls", allowed: FrontConfigDecoder.tlsKeys) { (name, pair) throws(ConfigError) in
            let path = ConfigLoader.resolve(try v.string(pair.value, path: "tls.\(name)"), against: baseDirectory)
            if checkFiles, case .failure(let e) = Syscall.checkReadable(path) {
                throw v.error(pair.value, "tls.\(name): cannot read \(Values.quote(path)): \(e)")
            }
            if name == "certificate" { certificate = path } else { key = path }
        }
        guard let certificate else { throw v.error(node, "tls is missing required key \"certificate\" (a PEM file)") }
        guard let key else { throw v.error(node, "tls is missing required key \"key\" (a PEM file)") }
        return (certificate, key)
    }

    // MARK: pool

    func pool(_ node: YAMLNode) throws(ConfigError) -> FrontPoolSettings {
        guard case .mapping = node.value else {
            throw v.error(node, "pool must be a mapping with ipv4 (and optionally ipv6), got \(Values.describe(node))")
        }
        var ipv4: IPPrefix?, ipv6: IPPrefix?
        try v.forEachField(node, path: "pool", allowed: FrontConfigDecoder.poolKeys) { (name, pair) throws(ConfigError) in
            if name == "ipv4" {
                ipv4 = try network(pair.value, path: "pool.ipv4", ipv4: true)
            } else {
                ipv6 = try network(pair.value, path: "pool.ipv6", ipv4: false)
            }
        }
        guard let ipv4 else { throw v.error(node, "pool is missing required key \"ipv4\", as in ipv4: 198.18.64.0/24") }
        return FrontPoolSettings(ipv4: ipv4, ipv6: ipv6)
    }

    /// A network address (host bits zero) with a length in the family's allowed range.
    func network(_ node: YAMLNode, path: String, ipv4: Bool) throws(ConfigError) -> IPPrefix {
        let lengths = ipv4 ? FrontConfigDecoder.ipv4PoolLengths : FrontConfigDecoder.ipv6PoolLengths
        let example = ipv4 ? "198.18.64.0/24" : "fd00:64::/64"
        let family = ipv4 ? "IPv4" : "IPv6"
        guard case .scalar(let text, _) = node.value, text.contains("/"), let prefix = IPPrefix(text),
              prefix.address.isIPv4 == ipv4 else {
            throw v.error(node, "\(path) must be an \(family) network/length, as in \(example), got \(Values.describe(node))")
        }
        guard lengths.contains(prefix.length) else {
            throw v.error(node, "\(path) must have a length from \(lengths.lowerBound) to \(lengths.upperBound), got \(Values.describe(node))")
        }
        let base = FrontConfigDecoder.networkAddress(prefix)
        guard base == prefix.address else {
            throw v.error(node, "\(path) has host bits set; did you mean \(base)/\(prefix.length)?")
        }
        return prefix
    }

    static func networkAddress(_ p: IPPrefix) -> IPAddress {
        switch p.address {
        case .v4(let a):
            let mask: UInt32 = p.length == 0 ? 0 : ~(UInt32.max >> UInt32(p.length))
            return .v4(a & mask)
        case .v6(let hi, let lo):
            if p.length <= 64 {
                let mask: UInt64 = p.length == 0 ? 0 : ~(UInt64.max >> UInt64(p.length))
                return .v6(hi & mask, 0)
            }
            let l = p.length - 64
            let mask: UInt64 = l == 64 ? ~0 : ~(UInt64.max >> UInt64(l))
            return .v6(hi, lo & mask)
        }
    }

    // MARK: tokens-file

    /// One token a line; `#` starts a comment line; blank lines are skipped; surrounding spaces
    /// are trimmed. Positions point into the tokens file.
    func tokenFile(_ path: String, node: YAMLNode) throws(ConfigError) -> [(String, SourcePosition)] {
        let bytes: [UInt8]
        switch ConfigLoader.readFile(path) {
        case .success(let b): bytes = b
        case .failure(let message): throw v.error(node, "tokens-file: cannot read \(Values.quote(path)): \(message)")
        }
        var out: [(String, SourcePosition)] = []
        var lineNumber = 0
        for raw in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            guard let line = String(validating: raw, as: UTF8.self) else {
                throw ConfigError(position: SourcePosition(file: path, line: lineNumber, column: 1),
                                  message: "token is not UTF-8 text (tokens-file of \(node.position))")
            }
            let entry = line.trimmingWhitespace()
            if entry.isEmpty || entry.hasPrefix("#") { continue }
            out.append((entry, SourcePosition(file: path, line: lineNumber, column: 1)))
        }
        return out
    }
}
