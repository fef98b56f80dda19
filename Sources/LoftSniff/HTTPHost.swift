/// The Host header of an HTTP/1.x request head (RFC 9112 §3.2), from a stream's first bytes.
public enum HTTPHost {
    /// A head longer than this is not sniffed.
    public static let maxBytes = 8192

    private static let methods: [[UInt8]] = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE"]
        .map { Array($0.utf8) + [UInt8(ascii: " ")] }

    public static func host(_ b: UnsafeRawBufferPointer) -> SniffResult {
        // A method this sniffer knows, then a space.
        var known = false
        for m in methods {
            let n = min(m.count, b.count)
            if b.prefix(n).elementsEqual(m.prefix(n)) {
                if b.count < m.count { return .needMore }
                known = true
                break
            }
        }
        guard known else { return .none }
        // The request line, ending with HTTP/1.x.
        guard let lineEnd = find(b, from: 0, byte: UInt8(ascii: "\n")) else { return b.count >= maxBytes ? .none : .needMore }
        var e = lineEnd
        if e > 0 && b[e - 1] == UInt8(ascii: "\r") { e -= 1 }
        let version = Array("HTTP/1.".utf8)
        guard e >= version.count + 1 + 1,
              b[(e - version.count - 1)..<(e - 1)].elementsEqual(version) else { return .none }
        // Header lines up to the empty line.
        var at = lineEnd + 1
        while true {
            guard let end = find(b, from: at, byte: UInt8(ascii: "\n")) else { return b.count >= maxBytes ? .none : .needMore }
            var lineStop = end
            if lineStop > at && b[lineStop - 1] == UInt8(ascii: "\r") { lineStop -= 1 }
            if lineStop == at { return .none }  // the head ended without a Host
            if lineStop - at >= 5, isHost(b, at) {
                var s = at + 5, t = lineStop
                while s < t && (b[s] == 0x20 || b[s] == 0x09) { s += 1 }
                while t > s && (b[t - 1] == 0x20 || b[t - 1] == 0x09) { t -= 1 }
                return authority(UnsafeRawBufferPointer(rebasing: b[s..<t]))
            }
            at = end + 1
            if at >= maxBytes { return .none }
        }
    }

    private static func isHost(_ b: UnsafeRawBufferPointer, _ at: Int) -> Bool {
        (b[at] | 0x20) == UInt8(ascii: "h") && (b[at + 1] | 0x20) == UInt8(ascii: "o")
            && (b[at + 2] | 0x20) == UInt8(ascii: "s") && (b[at + 3] | 0x20) == UInt8(ascii: "t") && b[at + 4] == UInt8(ascii: ":")
    }

    /// `name` or `name:port`; an address (`[v6]`, IPv4) names no host.
    private static func authority(_ a: UnsafeRawBufferPointer) -> SniffResult {
        guard let first = a.first, first != UInt8(ascii: "[") else { return .none }
        var n = a.count
        if let colon = a.firstIndex(of: UInt8(ascii: ":")) {
            guard colon + 1 < a.count, a[(colon + 1)...].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return .none }
            n = colon
        }
        return HostName.validate(UnsafeRawBufferPointer(rebasing: a[0..<n])).map(SniffResult.name) ?? .none
    }

    private static func find(_ b: UnsafeRawBufferPointer, from: Int, byte: UInt8) -> Int? {
        var i = from
        while i < b.count {
            if b[i] == byte { return i }
            i += 1
        }
        return nil
    }
}
