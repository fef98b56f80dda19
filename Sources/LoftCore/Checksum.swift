/// The Internet checksum (RFC 1071), accumulated in 32 bits and folded at the end.
public struct InternetChecksum {
    public private(set) var sum: UInt32 = 0
    public init() {}

    /// Adds `bytes` as big-endian 16-bit words (an odd last byte is the high half of a word).
    /// Eight bytes per step in two accumulators with end-around carry: the one's-complement sum
    /// of the words read in the machine's own order is the byte-swapped sum of the big-endian
    /// words (RFC 1071, section 2(B)).
    public mutating func add(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        @inline(__always) func plus(_ x: UInt64, _ y: UInt64) -> UInt64 {
            let (s, carry) = x.addingReportingOverflow(y)
            return s &+ (carry ? 1 : 0)
        }
        let n = bytes.count
        var a: UInt64 = 0, b: UInt64 = 0
        var i = 0
        while i + 32 <= n {
            a = plus(a, base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            b = plus(b, base.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self))
            a = plus(a, base.loadUnaligned(fromByteOffset: i + 16, as: UInt64.self))
            b = plus(b, base.loadUnaligned(fromByteOffset: i + 24, as: UInt64.self))
            i += 32
        }
        a = plus(a, b)
        while i + 8 <= n {
            a = plus(a, base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            i += 8
        }
        if i < n {
            // The last 1...7 bytes, zero-padded, in memory order.
            var tail: UInt64 = 0
            withUnsafeMutableBytes(of: &tail) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[i..<n])) }
            a = plus(a, tail)
        }
        a = (a & 0xFFFF_FFFF) &+ (a >> 32)
        a = (a & 0xFFFF_FFFF) &+ (a >> 32)
        a = (a & 0xFFFF) &+ (a >> 16)
        a = (a & 0xFFFF) &+ (a >> 16)
        add(UInt16(bigEndian: UInt16(truncatingIfNeeded: a)))
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
        var c = pseudoHeader(source: source, destination: destination, proto: proto, length: segment.count)
        c.add(segment)
        return c.value
    }

    /// The sum of a transport segment's pseudo-header (RFC 768/793, RFC 8200 section 8.1).
    public static func pseudoHeader(source: IPAddress, destination: IPAddress, proto: UInt8, length: Int) -> InternetChecksum {
        var c = InternetChecksum()
        c.add(source)
        c.add(destination)
        let len = UInt32(length)
        if source.isIPv4 {
            c.add(UInt16(proto))
            c.add(UInt16(truncatingIfNeeded: len))
        } else {
            c.add(UInt16(len >> 16)); c.add(UInt16(truncatingIfNeeded: len))
            c.add(UInt16(proto))
        }
        return c
    }
}
