import LoftCore

/// Scalar and container helpers shared by the section decoders. Every failure is a ConfigError at
/// the offending node, naming the key path, what is allowed and what was given.
struct Values {
    let file: String

    func error(_ node: YAMLNode, _ message: String) -> ConfigError {
        ConfigError(position: node.position, message: message)
    }

    // MARK: Describing what was given

    /// How a node reads in a message: plain text as written, quoted text in quotes, or its kind.
    static func describe(_ node: YAMLNode) -> String {
        switch node.value {
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .scalar(let text, let plain):
            if node.isNull { return "an empty value" }
            if plain && text.count <= 80 && !text.contains(where: { $0.isNewline }) { return text }
            return quote(text)
        }
    }

    static func quote(_ text: String) -> String {
        var out = "\""
        var count = 0
        for scalar in text.unicodeScalars {
            if count == 80 { out += "…"; break }
            count += 1
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    out += "\\u{\(String(scalar.value, radix: 16))}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    // MARK: Mappings

    /// Walks a mapping's pairs in document order. Each key must be a scalar, appear once and be one
    /// of `allowed`; then `body` decodes its value. `path` is nil for the top level.
    func forEachField(_ node: YAMLNode, path: String?, allowed: [String],
                      _ body: (String, YAMLPair) throws(ConfigError) -> Void) throws(ConfigError) {
        guard case .mapping(let pairs) = node.value else {
            throw error(node, "\(path ?? "the configuration") must be a mapping, got \(Values.describe(node))")
        }
        let place = path.map { "in \($0)" } ?? "at the top level"
        var seen: [String: SourcePosition] = [:]
        for pair in pairs {
            guard case .scalar(let key, _) = pair.key.value else {
                throw error(pair.key, "keys must be names, got \(Values.describe(pair.key)) as a key \(place)")
            }
            if let first = seen[key] {
                throw error(pair.key, "duplicate key \(Values.quote(key)) \(place) (first at line \(first.line), column \(first.column))")
            }
            seen[key] = pair.key.position
            guard allowed.contains(key) else {
                var hint = ""
                if let near = Values.nearest(key, in: allowed) { hint = "did you mean \"\(near)\"? " }
                throw error(pair.key, "unknown key \(Values.quote(key)) \(place) (\(hint)expected one of: \(allowed.joined(separator: ", ")))")
            }
            try body(key, pair)
        }
    }

    /// The closest allowed key within edit distance 2, for "did you mean".
    static func nearest(_ key: String, in allowed: [String]) -> String? {
        var best: (String, Int)?
        for candidate in allowed {
            let d = distance(Array(key.lowercased().unicodeScalars), Array(candidate.unicodeScalars))
            if d <= 2, d < (best?.1 ?? Int.max) { best = (candidate, d) }
        }
        return best?.0
    }

    private static func distance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1,
                                 previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }

    /// A section that is a mapping, `off`/`false` (nil), or `on`/`true`/empty (all defaults).
    func section(_ node: YAMLNode, path: String) throws(ConfigError) -> YAMLNode? {
        switch node.value {
        case .mapping:
            return node
        case .scalar(let text, plain: true):
            if node.isNull { return YAMLNode(.mapping([]), at: node.position) }
            switch text {
            case "off", "false": return nil
            case "on", "true": return YAMLNode(.mapping([]), at: node.position)
            default: break
            }
        default:
            break
        }
        throw error(node, "\(path) must be a mapping, off or on, got \(Values.describe(node))")
    }

    // MARK: Lists

    /// A list's items. A single scalar counts as a list of one; an empty value as an empty list.
    func list(_ node: YAMLNode, path: String) throws(ConfigError) -> [YAMLNode] {
        switch node.value {
        case .sequence(let items): return items
        case .scalar:
            return node.isNull ? [] : [node]
        case .mapping:
            throw error(node, "\(path) must be a list, got a mapping")
        }
    }

    // MARK: Scalars

    /// Any non-empty scalar's text.
    func string(_ node: YAMLNode, path: String) throws(ConfigError) -> String {
        guard case .scalar(let text, _) = node.value, !node.isNull, !text.isEmpty else {
            throw error(node, "\(path) must be a non-empty string, got \(Values.describe(node))")
        }
        return text
    }

    /// A path to a file loft writes (a state file), resolved against `baseDirectory`. PATH.tmp
    /// must fit a path too, and NUL cannot be passed to open(2).
    func writableFilePath(_ node: YAMLNode, path: String, baseDirectory: String) throws(ConfigError) -> String {
        let p = try string(node, path: path)
        guard !p.hasSuffix("/"), p.utf8.count <= 4000, !p.utf8.contains(0) else {
            throw error(node, "\(path) must be a file path, got \(Values.describe(node))")
        }
        return ConfigLoader.resolve(p, against: baseDirectory)
    }

    /// A plain decimal integer (underscores between digits allowed) within `range`.
    func integer(_ node: YAMLNode, path: String, in range: ClosedRange<Int>) throws(ConfigError) -> Int {
        if case .scalar(let text, plain: true) = node.value, let value = Values.parseInteger(text),
           range.contains(value) {
            return value
        }
        throw error(node, "\(path) must be an integer from \(range.lowerBound) to \(range.upperBound), got \(Values.describe(node))")
    }

    static func parseInteger(_ text: String) -> Int? {
        var digits = Substring(text)
        var negative = false
        if digits.first == "+" || digits.first == "-" {
            negative = digits.first == "-"
            digits = digits.dropFirst()
        }
        guard let first = digits.first, let last = digits.last, first.isASCII, first.isNumber,
              last.isASCII, last.isNumber else { return nil }
        var value = 0
        var previousUnderscore = false
        for c in digits {
            if c == "_" {
                if previousUnderscore { return nil }
                previousUnderscore = true
                continue
            }
            previousUnderscore = false
            guard let d = c.wholeNumberValue, c.isASCII else { return nil }
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.addingReportingOverflow(d)
            if o1 || o2 { return nil }
            value = s
        }
        return negative ? -value : value
    }

    func port(_ node: YAMLNode, path: String) throws(ConfigError) -> UInt16 {
        UInt16(try integer(node, path: path, in: 1...65535))
    }

    /// `true`/`false` (also `yes`/`no`, `on`/`off`), unquoted.
    func bool(_ node: YAMLNode, path: String) throws(ConfigError) -> Bool {
        if case .scalar(let text, plain: true) = node.value {
            switch text.lowercased() {
            case "true", "yes", "on": return true
            case "false", "no", "off": return false
            default: break
            }
        }
        throw error(node, "\(path) must be true or false, got \(Values.describe(node))")
    }

    /// One of a fixed set of words.
    func keyword<T>(_ node: YAMLNode, path: String, _ choices: [(String, T)]) throws(ConfigError) -> T {
        if case .scalar(let text, _) = node.value, let hit = choices.first(where: { $0.0 == text }) {
            return hit.1
        }
        let names = choices.map(\.0)
        let allowed = names.count == 2 ? "\(names[0]) or \(names[1])"
            : names.dropLast().joined(separator: ", ") + " or " + names.last!
        throw error(node, "\(path) must be \(allowed), got \(Values.describe(node))")
    }

    // MARK: Durations

    /// Integer seconds (`30`) or an integer with a unit: `500ms`, `10s`, `5m`, `2h`, `7d`.
    func duration(_ node: YAMLNode, path: String, in range: ClosedRange<Duration>) throws(ConfigError) -> Duration {
        if case .scalar(let text, let plain) = node.value,
           let value = Values.parseDuration(text, plain: plain), range.contains(value) {
            return value
        }
        throw error(node, "\(path) must be a duration from \(Values.format(range.lowerBound)) to \(Values.format(range.upperBound)) (seconds, or a number with ms, s, m, h or d), got \(Values.describe(node))")
    }

    static func parseDuration(_ text: String, plain: Bool) -> Duration? {
        if plain, let seconds = parseInteger(text) {
            return seconds < 0 ? nil : Duration.seconds(seconds)
        }
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        for (unit, milliseconds) in units where text.hasSuffix(unit) {
            let number = text.dropLast(unit.count)
            // "5ms" also ends in "s": only accept when the rest is all digits.
            guard !number.isEmpty, number.allSatisfy({ $0.isASCII && $0.isNumber }),
                  let n = Int64(number) else { continue }
            let (total, overflow) = n.multipliedReportingOverflow(by: milliseconds)
            if overflow { return nil }
            return .milliseconds(total)
        }
        return nil
    }

    /// The shortest exact form: `7d`, `2h`, `5m`, `10s`, `100ms`.
    static func format(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        if attoseconds == 0 {
            for (unit, size) in [("d", Int64(86_400)), ("h", 3_600), ("m", 60)] where seconds != 0 && seconds % size == 0 {
                return "\(seconds / size)\(unit)"
            }
            return "\(seconds)s"
        }
        let ms = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return "\(ms)ms"
    }

    // MARK: Names

    static func isNameCharacter(_ c: Character) -> Bool {
        c.isASCII && (c.isLetter || c.isNumber || c == "_" || c == "." || c == "-")
    }

    /// 1...maxLength characters of `[A-Za-z0-9_.-]`, not `.` or `..`.
    func name(_ node: YAMLNode, path: String, maxLength: Int) throws(ConfigError) -> String {
        if case .scalar(let text, _) = node.value, !node.isNull, (1...maxLength).contains(text.count),
           text.allSatisfy(Values.isNameCharacter), text != ".", text != ".." {
            return text
        }
        throw error(node, "\(path) must be 1 to \(maxLength) characters of A-Z a-z 0-9 _ . - (not . or ..), got \(Values.describe(node))")
    }

    /// A DNS host name: dot-separated labels of letters, digits, `-` and `_`, at most 253 characters.
    static func isHostName(_ text: String) -> Bool {
        var name = Substring(text)
        if name.hasSuffix(".") { name = name.dropLast() }
        guard !name.isEmpty, name.count <= 253 else { return false }
        for label in name.split(separator: ".", omittingEmptySubsequences: false) {
            guard (1...63).contains(label.count),
                  label.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }),
                  label.first != "-", label.last != "-" else { return false }
        }
        return true
    }

    // MARK: Addresses

    func address(_ node: YAMLNode, path: String) throws(ConfigError) -> IPAddress {
        if case .scalar(let text, _) = node.value, let address = IPAddress(text) { return address }
        throw error(node, "\(path) must be an IPv4 or IPv6 address, got \(Values.describe(node))")
    }

    /// `address:port` or `[v6]:port` with a port from 1 to 65535.
    func endpoint(_ node: YAMLNode, path: String, example: String) throws(ConfigError) -> Endpoint {
        if case .scalar(let text, _) = node.value, let endpoint = Endpoint(text) {
            guard endpoint.port != 0 else {
                throw error(node, "\(path) needs a port from 1 to 65535, got \(Values.describe(node))")
            }
            return endpoint
        }
        throw error(node, "\(path) must be address:port, as in \(example), got \(Values.describe(node))")
    }

    /// A prefix for `to:` lists: `address/length` or a bare address (a host).
    static func parsePrefix(_ text: String) -> IPPrefix? {
        let trimmed = text.trimmingWhitespace()
        guard !trimmed.isEmpty, !trimmed.hasPrefix("[") else { return nil }
        return IPPrefix(trimmed)
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" || f == "\r" || f == "\u{FEFF}" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\r" { s = s.dropLast() }
        return String(s)
    }
}
