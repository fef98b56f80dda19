/// The Internet checksum (RFC 1071), accumulated in 32 bits and folded at the end.
public struct InternetChecksum {
    public private(set) var sum: UInt32 = 0
    public init() {}

    public mutating func add(_ bytes: UnsafeRawBufferPointer) {
        var i = 0
        let n = bytes.count
        var s = UInt64(sum)
        while i + 1 < n {
            s += UInt64(bytes[i]) << 8 | UInt64(bytes[i + 1])
            i += 2
        }
        if i < n { s += UInt64(bytes[i]) << 8 }
        while s > 0xFFFF_FFFF { s = (s & 0xFFFF_FFFF) + (s >> 32) }
        sum = UInt32(s)
    }

    public mutating func add(_ word: UInt16) {
        let s = UInt64(sum) + UInt64(word)
        sum = UInt32((s & 0xFFFF_FFFF) + (s >> 32))
    }

    public mutating func add(_ address: IPAddress) {
        switch address {
        case .v4(let a):
            add(UInt16(a >> 16)); add(UInt16(a & 0xFFFF))
        case .v6(let hi, let lo):
            for shift in stride(from: 48, through: 0, by: -16) { add(UInt16(truncatingIfNeeded: hi >> UInt64(shift))) }
            for shift in stride(from: 48, through: 0, by: -16) { add(UInt16(truncatingIfNeeded: lo >> UInt64(shift))) }
        }
    }

    /// The one's-complement of the folded sum, as written into a header.
    public var value: UInt16 {
        var s = sum
        while s > 0xFFFF { s = (s & 0xFFFF) + (s >> 16) }
        return ~UInt16(s)
    }

    public static func of(_ bytes: UnsafeRawBufferPointer) -> UInt16 {
        var c = InternetChecksum()
        c.add(bytes)
        return c.value
    }

    /// The checksum of a TCP/UDP/ICMPv6 segment including its pseudo-header.
    public static func transport(source: IPAddress, destination: IPAddress, proto: UInt8,
                                 segment: UnsafeRawBufferPointer) -> UInt16 {
        var c = InternetChecksum()
        c.add(source)
        c.add(destination)
        let len = UInt32(segment.count)
        if source.isIPv4 {
            c.add(UInt16(proto))
            c.add(UInt16(truncatingIfNeeded: len))
        } else {
            c.add(UInt16(len >> 16)); c.add(UInt16(truncatingIfNeeded: len))
            c.add(UInt16(proto))
        }
        c.add(segment)
        return c.value
    }
}
