import LoftCore

/// A set of IPv4 and IPv6 prefixes as sorted, merged, disjoint ranges: membership is a binary
/// search (100,000 prefixes: ~17 comparisons), building is one sort.
public struct PrefixSet: Sendable {
    /// Inclusive ranges, sorted by start, non-overlapping and non-adjacent.
    private(set) var v4: [ClosedRange<UInt32>] = []
    private(set) var v6: [(lo: UInt128Value, hi: UInt128Value)] = []

    public var isEmpty: Bool { v4.isEmpty && v6.isEmpty }
    public var rangeCount: Int { v4.count + v6.count }

    public init(_ prefixes: [IPPrefix]) {
        var r4: [ClosedRange<UInt32>] = []
        var r6: [(lo: UInt128Value, hi: UInt128Value)] = []
        r4.reserveCapacity(prefixes.count)
        for p in prefixes {
            switch p.address {
            case .v4(let a):
                let mask: UInt32 = p.length == 0 ? 0 : ~UInt32(0) << UInt32(32 - p.length)
                let lo = a & mask
                r4.append(lo...(lo | ~mask))
            case .v6(let hi, let lo):
                let v = UInt128Value(hi: hi, lo: lo)
                let m = UInt128Value.mask(p.length)
                let start = v & m
                r6.append((start, start | ~m))
            }
        }
        r4.sort { $0.lowerBound < $1.lowerBound }
        for r in r4 {
            if let last = v4.last, r.lowerBound <= last.upperBound || (last.upperBound != .max && r.lowerBound == last.upperBound + 1) {
                v4[v4.count - 1] = last.lowerBound...max(last.upperBound, r.upperBound)
            } else {
                v4.append(r)
            }
        }
        r6.sort { $0.lo < $1.lo }
        for r in r6 {
            if let last = v6.last, r.lo <= last.hi || (last.hi != .max && r.lo == last.hi.successor) {
                v6[v6.count - 1] = (last.lo, max(last.hi, r.hi))
            } else {
                v6.append(r)
            }
        }
    }

    public func contains(_ address: IPAddress) -> Bool {
        switch address {
        case .v4(let a):
            var lo = 0, hi = v4.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if v4[mid].upperBound < a { lo = mid + 1 } else { hi = mid }
            }
            return lo < v4.count && v4[lo].lowerBound <= a
        case .v6(let h, let l):
            let a = UInt128Value(hi: h, lo: l)
            var lo = 0, hi = v6.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if v6[mid].hi < a { lo = mid + 1 } else { hi = mid }
            }
            return lo < v6.count && v6[lo].lo <= a
        }
    }

    /// Whether every address of `other` is in this set (for shadowed-rule detection).
    public func covers(_ other: PrefixSet) -> Bool {
        for r in other.v4 {
            guard let i = v4.firstIndex(where: { $0.upperBound >= r.lowerBound }), v4[i].lowerBound <= r.lowerBound,
                  v4[i].upperBound >= r.upperBound else { return false }
        }
        for r in other.v6 {
            guard let i = v6.firstIndex(where: { $0.hi >= r.lo }), v6[i].lo <= r.lo, v6[i].hi >= r.hi else { return false }
        }
        return true
    }
}

/// A 128-bit unsigned value as two halves (IPv6 arithmetic without needing UInt128).
public struct UInt128Value: Comparable, Hashable, Sendable {
    public var hi: UInt64
    public var lo: UInt64
    public init(hi: UInt64, lo: UInt64) { self.hi = hi; self.lo = lo }
    public static let max = UInt128Value(hi: .max, lo: .max)
    public static func < (a: Self, b: Self) -> Bool { a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo }
    public static func & (a: Self, b: Self) -> Self { Self(hi: a.hi & b.hi, lo: a.lo & b.lo) }
    public static func | (a: Self, b: Self) -> Self { Self(hi: a.hi | b.hi, lo: a.lo | b.lo) }
    public static prefix func ~ (a: Self) -> Self { Self(hi: ~a.hi, lo: ~a.lo) }
    public var successor: Self { lo == .max ? Self(hi: hi &+ 1, lo: 0) : Self(hi: hi, lo: lo + 1) }
    /// The netmask of a prefix length 0…128.
    public static func mask(_ length: Int) -> Self {
        if length == 0 { return Self(hi: 0, lo: 0) }
        if length <= 64 { return Self(hi: ~UInt64(0) << UInt64(64 - length), lo: 0) }
        if length == 128 { return .max }
        return Self(hi: .max, lo: ~UInt64(0) << UInt64(128 - length))
    }
}
