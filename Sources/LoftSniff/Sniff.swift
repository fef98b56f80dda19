/// What a sniffer made of the bytes it was shown so far.
public enum SniffResult: Equatable, Sendable {
    /// The name the app asked for (lowercase, no trailing dot, a DNS name, never an address).
    case name(String)
    /// The bytes so far are a prefix of something that may still name a host: show more.
    case needMore
    /// Not a protocol this sniffer reads, or one that names no host (no SNI, no Host, an
    /// address in it, malformed).
    case none
}

/// Where a flow's name came from (`loft status --flows`).
public enum NameSource: UInt8, Sendable, CustomStringConvertible {
    case none = 0, socks, dns, sni, host, quic, fakeIP

    public var description: String {
        switch self {
        case .none: return "-"
        case .socks: return "socks"
        case .dns: return "dns"
        case .sni: return "sni"
        case .host: return "host"
        case .quic: return "quic"
        case .fakeIP: return "fake-ip"
        }
    }
}

/// The first bytes of a TCP stream from an app: a TLS ClientHello (its SNI) or an HTTP/1.x
/// request head (its Host). Sans-IO: called again with every longer prefix of the stream.
public enum StreamSniffer {
    /// `bytes`: the stream's first bytes (all of them so far). `.needMore` never asks for more
    /// than `TLSClientHello.maxBytes` / `HTTPHost.maxBytes`: past that it is `.none`.
    public static func sniff(_ bytes: UnsafeRawBufferPointer) -> (SniffResult, NameSource) {
        guard let first = bytes.first else { return (.needMore, .none) }
        if first == 0x16 { return (TLSClientHello.serverName(bytes), .sni) }
        if first >= UInt8(ascii: "A") && first <= UInt8(ascii: "Z") { return (HTTPHost.host(bytes), .host) }
        return (.none, .none)
    }
}

/// A host name as an app sent it (SNI, Host): 1 … 253 bytes of letters, digits, `-`, `_` and
/// dots in labels of 1 … 63, not an IPv4 literal; lowercased, a trailing dot dropped.
public enum HostName {
    public static func validate(_ bytes: UnsafeRawBufferPointer) -> String? {
        var n = bytes.count
        if n > 0 && bytes[n - 1] == UInt8(ascii: ".") { n -= 1 }
        guard n >= 1, n <= 253 else { return nil }
        var label = 0
        var allNumeric = true
        for i in 0..<n {
            let c = bytes[i]
            switch c {
            case UInt8(ascii: "."):
                guard label > 0 else { return nil }
                label = 0
                continue
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                break
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"):
                allNumeric = false
            default:
                return nil
            }
            label += 1
            guard label <= 63 else { return nil }
        }
        guard label > 0, !allNumeric else { return nil }
        return String(unsafeUninitializedCapacity: n) { out in
            for i in 0..<n {
                let c = bytes[i]
                out[i] = c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z") ? c | 0x20 : c
            }
            return n
        }
    }
}
