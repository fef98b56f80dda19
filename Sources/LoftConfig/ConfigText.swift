import LoftCore

/// The config's value rules, for code that makes outbounds from other text (links, `loft import`):
/// one definition of what a name, a host or a duration is.
public enum ConfigText {
    /// 1...64 characters of `[A-Za-z0-9_.-]`, not `.`, `..`, `direct` or `drop`.
    public static func isOutboundName(_ text: String) -> Bool {
        (1...64).contains(text.count) && text.allSatisfy(Values.isNameCharacter) && text != "." && text != ".."
            && text != "direct" && text != "drop"
    }

    public static func isNameCharacter(_ c: Character) -> Bool { Values.isNameCharacter(c) }
    public static func isHostName(_ text: String) -> Bool { Values.isHostName(text) }
    /// `30s`, `1500ms`, `5m` (a bare number is seconds).
    public static func parseDuration(_ text: String) -> Duration? { Values.parseDuration(text, plain: true) }
    /// The shortest exact form: `7d`, `2h`, `5m`, `10s`, `100ms`.
    public static func format(_ duration: Duration) -> String { Values.format(duration) }
    /// Lowercase 8-4-4-4-12, from 32 hex digits with or without dashes.
    public static func uuid(_ text: String) -> String? { ConfigDecoder.uuid(text) }

    public static let carriers = ConfigDecoder.carriers
    public static let quicPacketRange = ConfigDecoder.quicPacketRange
    public static let sstpKeepaliveRange = ConfigDecoder.sstpKeepaliveRange
    public static let sstpDefaultAuth: [SSTPAuthMethod] = [.mschapv2, .pap]

    /// Text as a YAML double-quoted scalar (every character kept, control characters escaped).
    public static func yamlQuoted(_ text: String) -> String {
        var out = "\""
        for u in text.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                if u.value < 0x20 || u.value == 0x7f || (0x80..<0xa0).contains(u.value) || u.value == 0x2028 || u.value == 0x2029 || u.value == 0xfeff {
                    let hex = String(u.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }
}

extension ConfigLoader {
    /// One outbound written as a mapping (the keys of an `outbounds` entry), as an `outbound-dir`
    /// file holds it. Relative paths inside are resolved against `baseDirectory`.
    public static func parseOutbound(_ text: String, file: String, baseDirectory: String) throws(ConfigError) -> OutboundSettings {
        guard let root = try YAML.parse(bytes: Array(text.utf8), file: file), case .mapping = root.value else {
            throw ConfigError(position: SourcePosition(file: file, line: 1, column: 1),
                              message: "an outbound file must be one mapping with name and type (the keys of an outbounds entry)")
        }
        return try ConfigDecoder(file: file, baseDirectory: baseDirectory).outbound(root, path: "outbound")
    }
}
