import LoftCore
/// A minimal JSON value and writer for status output (no Foundation: keeps loft's idle
/// memory small). Objects keep their key order.
public indirect enum JSON: Equatable, Sendable {
    case object([(String, JSON)])
    case array([JSON])
    case string(String)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case bool(Bool)
    case null

    public static func == (a: JSON, b: JSON) -> Bool { a.serialized == b.serialized }

    public var serialized: String {
        var out = ""
        write(to: &out)
        return out
    }

    public func write(to out: inout String) {
        switch self {
        case .object(let members):
            out += "{"
            for (i, (k, v)) in members.enumerated() {
                if i > 0 { out += "," }
                JSON.quote(k, into: &out)
                out += ":"
                v.write(to: &out)
            }
            out += "}"
        case .array(let items):
            out += "["
            for (i, v) in items.enumerated() {
                if i > 0 { out += "," }
                v.write(to: &out)
            }
            out += "]"
        case .string(let s): JSON.quote(s, into: &out)
        case .int(let v): out += String(v)
        case .uint(let v): out += String(v)
        case .double(let v): out += v.isFinite ? String(v) : "null"
        case .bool(let b): out += b ? "true" : "false"
        case .null: out += "null"
        }
    }

    static func quote(_ s: String, into out: inout String) { jsonQuote(s, into: &out) }
}
