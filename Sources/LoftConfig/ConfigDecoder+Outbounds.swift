// The `outbounds` section and `outbound-dir`: each outbound by its type, with its TLS, ALPN and
// password settings.
import LoftCore

extension ConfigDecoder {
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

    func nameNode(_ item: YAMLNode) -> YAMLNode? {
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
        var resumeStreams = true
        var resumeBuffer = 16 << 20
        var mptcp: (Bool, YAMLNode)?
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
            case "resume-streams":
                resumeStreams = try v.bool(value, path: keyPath)
            case "resume-buffer":
                resumeBuffer = try v.integer(value, path: keyPath, in: (4 << 20)...(1 << 30))
            case "mptcp":
                mptcp = (try v.bool(value, path: keyPath), pair.key)
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
            var o = OutboundSettings(
                name: name,
                kind: .vless(server: server!, uuid: uuid!, tls: tls!.0, serverName: tls!.1, alpn: alpn),
                position: item.position)
            o.mptcp = mptcp?.0 ?? false
            return o
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
            o.resumeStreams = resumeStreams
            o.resumeBuffer = resumeBuffer
            if let (on, node) = mptcp, on, carrier == "quic" || carrier == "h3" {
                throw v.error(node, "\(path).mptcp is for the carriers over TCP (ws, get, h2), not \(carrier!)")
            }
            o.mptcp = mptcp?.0 ?? false
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
}
