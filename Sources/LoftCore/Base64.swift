/// Base64 (standard alphabet, padded) and lowercase hex: the text forms of keys, pins and
/// digests in configs, links and the WebSocket handshake.
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i + 3 <= bytes.count {
            let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            out += [alphabet[Int(v >> 18 & 63)], alphabet[Int(v >> 12 & 63)], alphabet[Int(v >> 6 & 63)], alphabet[Int(v & 63)]]
            i += 3
        }
        let rest = bytes.count - i
        if rest == 1 {
            let v = UInt32(bytes[i]) << 16
            out += [alphabet[Int(v >> 18 & 63)], alphabet[Int(v >> 12 & 63)], UInt8(ascii: "="), UInt8(ascii: "=")]
        } else if rest == 2 {
            let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
            out += [alphabet[Int(v >> 18 & 63)], alphabet[Int(v >> 12 & 63)], alphabet[Int(v >> 6 & 63)], UInt8(ascii: "=")]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Strict: standard alphabet, padded to a multiple of 4, no whitespace, the bits left over
    /// by padding zero (so a value has one encoding).
    public static func decode(_ text: String) -> [UInt8]? {
        let s = Array(text.utf8)
        guard s.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(s.count / 4 * 3)
        var i = 0
        while i < s.count {
            var v: UInt32 = 0
            var pad = 0
            for j in 0..<4 {
                let c = s[i + j]
                var d: UInt32
                switch c {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"): d = UInt32(c - UInt8(ascii: "A"))
                case UInt8(ascii: "a")...UInt8(ascii: "z"): d = UInt32(c - UInt8(ascii: "a")) + 26
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0")) + 52
                case UInt8(ascii: "+"): d = 62
                case UInt8(ascii: "/"): d = 63
                case UInt8(ascii: "="):
                    guard i + 4 == s.count, j >= 2 else { return nil }
                    pad += 1
                    d = 0
                default: return nil
                }
                if pad > 0 && c != UInt8(ascii: "=") { return nil }
                v = v << 6 | d
            }
            // The bits a padded group leaves over must be zero: one encoding per value.
            if pad == 1 && v & 0xff != 0 || pad == 2 && v & 0xffff != 0 { return nil }
            out.append(UInt8(v >> 16 & 0xff))
            if pad < 2 { out.append(UInt8(v >> 8 & 0xff)) }
            if pad < 1 { out.append(UInt8(v & 0xff)) }
            i += 4
        }
        return out
    }
}

public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)
    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }
    public static func decode(_ text: String) -> [UInt8]? {
        let s = Array(text.utf8)
        guard s.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(s.count / 2)
        var i = 0
        while i < s.count {
            guard let hi = value(s[i]), let lo = value(s[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
    package static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
