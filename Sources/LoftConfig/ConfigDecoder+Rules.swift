// The `rules` section: each rule's matchers (addresses, prefix files, ports, domains) and outbound.
import LoftCore

extension ConfigDecoder {
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
