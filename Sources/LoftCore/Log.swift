/// Structured logging: one line per event on stderr, `level=… event=… key=value …`.
/// No per-packet logging above debug.
public enum Log {
    public enum Level: Int, Comparable, Sendable {
        case error = 0, warn, info, debug
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
        var name: String { switch self { case .error: "error"; case .warn: "warn"; case .info: "info"; case .debug: "debug" } }
    }

    // Set once at start-up before the loop runs; read from the loop thread only.
    nonisolated(unsafe) public static var threshold: Level = .info

    /// `text`: `ts=… level=… event=… key=value …`; under systemd's journal (JOURNAL_STREAM set)
    /// the same line without `ts=` (the journal keeps the time) after a syslog priority prefix,
    /// `<3>` error, `<4>` warn, `<6>` info, `<7>` debug, so `journalctl -p warning` selects.
    /// `json`: one JSON object a line, `{"ts":…,"level":…,"event":…,"key":"value",…}`.
    public enum Format: String, Sendable { case text, journal, json }
    nonisolated(unsafe) public static var format: Format = stderrIsJournal() ? .journal : .text

    /// Whether stderr is the journal's stream: JOURNAL_STREAM ("DEVICE:INODE", set by systemd
    /// for a service whose output goes to the journal) names the file stderr is. A process that
    /// only inherited the variable (its stderr redirected elsewhere) writes plain text.
    static func stderrIsJournal() -> Bool {
        guard let v = Syscall.environment("JOURNAL_STREAM") else { return false }
        let parts = v.split(separator: ":")
        guard parts.count == 2, let dev = UInt64(parts[0]), let ino = UInt64(parts[1]) else { return false }
        guard case .success(let stderr) = Syscall.status(2) else { return false }
        return stderr.device == dev && stderr.inode == ino
    }

    /// Chooses the format from `--log-format` (nil: text, or journal under systemd).
    public static func setFormat(_ name: String?) -> Bool {
        guard let name else { return true }
        guard let f = Format(rawValue: name), f != .journal else { return false }
        format = f
        return true
    }

    public static func error(_ event: String, _ fields: KeyValuePairs<String, Any> = [:]) { emit(.error, event, fields) }
    public static func warn(_ event: String, _ fields: KeyValuePairs<String, Any> = [:]) { emit(.warn, event, fields) }
    public static func info(_ event: String, _ fields: KeyValuePairs<String, Any> = [:]) { emit(.info, event, fields) }
    public static func debug(_ event: String, _ fields: @autoclosure () -> KeyValuePairs<String, Any> = [:]) {
        if threshold >= .debug { emit(.debug, event, fields()) }
    }

    public static func emit(_ level: Level, _ event: String, _ fields: KeyValuePairs<String, Any>) {
        emit(level, event, fields.map { ($0.key, $0.value) })
    }

    public static func emit(_ level: Level, _ event: String, _ fields: [(String, Any)]) {
        guard level <= threshold else { return }
        let us = WallClock.microseconds()
        let time = "\(us / 1_000_000).\(String(us / 1000 % 1000).leftPadded(3))"
        var line: String
        switch format {
        case .text, .journal:
            line = format == .text ? "ts=\(time) " : "<\(level.syslogPriority)>"
            line += "level=\(level.name) event=\(event)"
            for (k, v) in fields {
                let s = "\(v)"
                line += " \(k)="
                line += s.contains(" ") || s.contains("\"") || s.isEmpty ? "\"\(s.replacingAll("\"", with: "'"))\"" : s
            }
        case .json:
            line = "{\"ts\":\(time),\"level\":\"\(level.name)\",\"event\":\(jsonString(event))"
            for (k, v) in fields {
                line += ",\(jsonString(k)):"
                switch v {
                case let n as any BinaryInteger: line += "\(n)"
                case let b as Bool: line += b ? "true" : "false"
                default: line += jsonString("\(v)")
                }
            }
            line += "}"
        }
        line += "\n"
        let bytes = Array(line.utf8)
        _ = Syscall.write(2, bytes)
    }
}

/// A JSON string literal (RFC 8259: quote, backslash and control characters escaped): the
/// log's JSON lines and the control socket's JSON (LoftControl's `JSON`) write strings with it.
public func jsonQuote(_ s: String, into out: inout String) {
    out += "\""
    for u in s.unicodeScalars {
        switch u {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where u.value < 0x20:
            let hex = String(u.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: out.unicodeScalars.append(u)
        }
    }
    out += "\""
}

func jsonString(_ s: String) -> String {
    var out = ""
    jsonQuote(s, into: &out)
    return out
}

extension Log.Level {
    /// syslog(3)'s priority: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG.
    var syslogPriority: Int { switch self { case .error: 3; case .warn: 4; case .info: 6; case .debug: 7 } }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
    func replacingAll(_ a: Character, with b: String) -> String {
        var out = ""
        for c in self { if c == a { out += b } else { out.append(c) } }
        return out
    }
}
