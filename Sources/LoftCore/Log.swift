import Glibc

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
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var line = "ts=\(ts.tv_sec).\(String(ts.tv_nsec / 1_000_000).leftPadded(3)) level=\(level.name) event=\(event)"
        for (k, v) in fields {
            let s = "\(v)"
            line += " \(k)="
            line += s.contains(" ") || s.contains("\"") || s.isEmpty ? "\"\(s.replacingAll("\"", with: "'"))\"" : s
        }
        line += "\n"
        var bytes = Array(line.utf8)
        _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
    }
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
