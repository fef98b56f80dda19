import Glibc

/// An IPv4 or IPv6 address as a value. IPv4 is kept in host byte order so that prefix
/// arithmetic is plain integer math; IPv6 as two host-order 64-bit halves.
public enum IPAddress: Hashable, Sendable, CustomStringConvertible {
    case v4(UInt32)
    case v6(UInt64, UInt64)

    public var isIPv4: Bool { if case .v4 = self { return true } else { return false } }

    /// Parses dotted-quad IPv4 or any RFC 4291 text form of IPv6 (brackets not accepted).
    public init?(_ text: String) {
        // inet_pton reads a C string: a NUL would end the text early ("::\0junk" is "::").
        if text.utf8.contains(0) { return nil }
        if text.contains(":") {
            var storage = in6_addr()
            guard inet_pton(AF_INET6, text, &storage) == 1 else { return nil }
            self = withUnsafeBytes(of: &storage) { IPAddress(ipv6Bytes: UnsafeRawBufferPointer($0)) }
        } else {
            var storage = in_addr()
            guard inet_pton(AF_INET, text, &storage) == 1 else { return nil }
            self = .v4(UInt32(bigEndian: storage.s_addr))
        }
    }

    /// Reads 4 bytes of network-order IPv4 address.
    @inline(__always)
    public init(ipv4Bytes p: UnsafeRawBufferPointer) {
        self = .v4(UInt32(p[0]) << 24 | UInt32(p[1]) << 16 | UInt32(p[2]) << 8 | UInt32(p[3]))
    }

    /// Reads 16 bytes of network-order IPv6 address.
    @inline(__always)
    public init(ipv6Bytes p: UnsafeRawBufferPointer) {
        var hi: UInt64 = 0, lo: UInt64 = 0
        for i in 0..<8 { hi = hi << 8 | UInt64(p[i]) }
        for i in 8..<16 { lo = lo << 8 | UInt64(p[i]) }
        self = .v6(hi, lo)
    }

    /// Writes the address in network order; returns the number of bytes written (4 or 16).
    @discardableResult
    public func write(to p: UnsafeMutableRawPointer) -> Int {
        switch self {
        case .v4(let a):
            p.storeBytes(of: a.bigEndian, as: UInt32.self)
            return 4
        case .v6(let hi, let lo):
            p.storeBytes(of: hi.bigEndian, as: UInt64.self)
            (p + 8).storeBytes(of: lo.bigEndian, as: UInt64.self)
            return 16
        }
    }

    public var description: String {
        switch self {
        case .v4(let a):
            return "\(a >> 24).\(a >> 16 & 0xff).\(a >> 8 & 0xff).\(a & 0xff)"
        case .v6:
            var storage = in6_addr()
            withUnsafeMutableBytes(of: &storage) { _ = write(to: $0.baseAddress!) }
            var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            inet_ntop(AF_INET6, &storage, &buf, socklen_t(buf.count))
            return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    public var isLoopback: Bool {
        switch self {
        case .v4(let a): return a >> 24 == 127
        case .v6(let hi, let lo): return hi == 0 && lo == 1
        }
    }

    public var isUnspecified: Bool {
        switch self {
        case .v4(let a): return a == 0
        case .v6(let hi, let lo): return hi == 0 && lo == 0
        }
    }

    public var isMulticast: Bool {
        switch self {
        case .v4(let a): return a >> 28 == 0xE
        case .v6(let hi, _): return hi >> 56 == 0xFF
        }
    }
}

/// An address and a port.
public struct Endpoint: Hashable, Sendable, CustomStringConvertible {
    public var address: IPAddress
    public var port: UInt16
    public init(_ address: IPAddress, _ port: UInt16) { self.address = address; self.port = port }

    /// `1.2.3.4:80` or `[::1]:80`.
    public init?(_ text: String) {
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"),
                  text.index(after: close) < text.endIndex, text[text.index(after: close)] == ":",
                  let addr = IPAddress(String(text[text.index(after: text.startIndex)..<close])),
                  let port = UInt16(text[text.index(close, offsetBy: 2)...]) else { return nil }
            self.init(addr, port)
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":"),
                  let addr = IPAddress(String(text[..<colon])),
                  let port = UInt16(text[text.index(after: colon)...]) else { return nil }
            self.init(addr, port)
        }
    }

    public var description: String {
        address.isIPv4 ? "\(address):\(port)" : "[\(address)]:\(port)"
    }
}

/// An address with a prefix length, as in `198.18.0.1/30` (the host bits are kept: it names an
/// interface address as well as a network).
public struct IPPrefix: Hashable, Sendable, CustomStringConvertible {
    public var address: IPAddress
    public var length: Int
    public init?(_ address: IPAddress, _ length: Int) {
        guard length >= 0, length <= (address.isIPv4 ? 32 : 128) else { return nil }
        self.address = address; self.length = length
    }
    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, let addr = IPAddress(String(parts[0])) else { return nil }
        let max = addr.isIPv4 ? 32 : 128
        if parts.count == 2 {
            guard let len = Int(parts[1]), String(len) == parts[1] else { return nil }
            self.init(addr, len)
        } else {
            self.init(addr, max)
        }
        _ = max
    }

    public var description: String { "\(address)/\(length)" }

    /// The prefix with its host bits cleared (what the kernel keeps for a route or a rule).
    public var masked: IPPrefix {
        switch address {
        case .v4(let a):
            let mask: UInt32 = length == 0 ? 0 : ~UInt32(0) << UInt32(32 - length)
            return IPPrefix(.v4(a & mask), length)!
        case .v6(let hi, let lo):
            let mh: UInt64 = length == 0 ? 0 : length >= 64 ? ~0 : ~UInt64(0) << UInt64(64 - length)
            let ml: UInt64 = length <= 64 ? 0 : length == 128 ? ~0 : ~UInt64(0) << UInt64(128 - length)
            return IPPrefix(.v6(hi & mh, lo & ml), length)!
        }
    }

    /// The masked prefix as text, as `ip` writes it.
    public var network: String { masked.description }

    /// Whether `other` lies inside this prefix (same family only).
    public func contains(_ other: IPAddress) -> Bool {
        switch (address, other) {
        case (.v4(let a), .v4(let b)):
            if length == 0 { return true }
            let mask: UInt32 = length == 32 ? ~0 : ~(UInt32.max >> UInt32(length))
            return a & mask == b & mask
        case (.v6(let ah, let al), .v6(let bh, let bl)):
            if length == 0 { return true }
            if length <= 64 {
                let mask: UInt64 = length == 64 ? ~0 : ~(UInt64.max >> UInt64(length))
                return ah & mask == bh & mask
            }
            let l = length - 64
            let mask: UInt64 = l == 64 ? ~0 : ~(UInt64.max >> UInt64(l))
            return ah == bh && al & mask == bl & mask
        default:
            return false
        }
    }
}
