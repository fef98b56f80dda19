import LoftCore
import LoftSniff

/// Fake-IP's mapping (docs/fakeip.md): each name asked for gets one address from each pool
/// (IPv4, IPv6), kept both ways; at most `capacity` names, the least recently used one giving
/// its addresses to a new name when full. A value type: the netstack's `FakeIP` owns one.
public struct FakeIPPool: Equatable, Sendable {
    public let ipv4: IPPrefix?
    public let ipv6: IPPrefix?
    /// Names held at most: `max-entries`, and no more than either pool has addresses.
    public let capacity: Int

    struct Entry: Equatable, Sendable {
        var offset: UInt64
        var used: UInt64
    }
    private var byName: [String: Entry] = [:]
    private var byOffset: [UInt64: String] = [:]
    private var nextOffset: UInt64 = 1
    private var tick: UInt64 = 0

    /// nil pools are off; at least one must be given. Offsets 1 … size-2 of each are used (not
    /// the prefix's first and last address).
    public init?(ipv4: IPPrefix?, ipv6: IPPrefix?, maxEntries: Int) {
        guard ipv4 != nil || ipv6 != nil, maxEntries >= 1 else { return nil }
        if let p = ipv4, !p.address.isIPv4 || p.length > 30 { return nil }
        if let p = ipv6, p.address.isIPv4 || p.length > 126 { return nil }
        self.ipv4 = ipv4?.masked
        self.ipv6 = ipv6?.masked
        func size(_ p: IPPrefix?, _ bits: Int) -> UInt64 {
            guard let p else { return UInt64.max }
            let host = bits - p.length
            return host >= 63 ? UInt64.max : (UInt64(1) << UInt64(host)) - 2
        }
        capacity = Int(min(UInt64(maxEntries), size(ipv4, 32), size(ipv6, 128)))
    }

    public var count: Int { byName.count }
    /// Whether `name` has addresses now.
    public func knows(_ name: String) -> Bool { byName[name] != nil }

    /// The addresses of `name` (given now if it had none), marked as just used.
    public mutating func addresses(for name: String) -> [IPAddress] {
        tick &+= 1
        if var e = byName[name] {
            e.used = tick
            byName[name] = e
            return addresses(at: e.offset)
        }
        let offset: UInt64
        if byName.count < capacity {
            offset = nextOffset
            nextOffset += 1
        } else {
            // The least recently used name gives up its addresses.
            let (old, e) = byName.min { $0.value.used < $1.value.used }!
            byName[old] = nil
            offset = e.offset
        }
        byName[name] = Entry(offset: offset, used: tick)
        byOffset[offset] = name
        return addresses(at: offset)
    }

    /// The name an address of the pool stands for; nil when it stands for none now.
    public func name(for address: IPAddress) -> String? {
        guard let offset = offset(of: address) else { return nil }
        return byOffset[offset]
    }

    /// Whether `address` lies in one of the pools (known or not).
    public func contains(_ address: IPAddress) -> Bool {
        (ipv4?.contains(address) ?? false) || (ipv6?.contains(address) ?? false)
    }

    private func addresses(at offset: UInt64) -> [IPAddress] {
        var out: [IPAddress] = []
        if let p = ipv4, case .v4(let base) = p.address { out.append(.v4(base &+ UInt32(truncatingIfNeeded: offset))) }
        if let p = ipv6, case .v6(let hi, let lo) = p.address {
            let (sum, carry) = lo.addingReportingOverflow(offset)
            out.append(.v6(hi &+ (carry ? 1 : 0), sum))
        }
        return out
    }

    private func offset(of address: IPAddress) -> UInt64? {
        let o: UInt64
        switch address {
        case .v4(let a):
            guard let p = ipv4, p.contains(address), case .v4(let base) = p.address else { return nil }
            o = UInt64(a &- base)
        case .v6(let hi, let lo):
            guard let p = ipv6, p.contains(address), case .v6(let bhi, let blo) = p.address else { return nil }
            guard hi == bhi || hi == bhi &+ 1 else { return nil }
            o = lo &- blo
        }
        return o >= 1 && o < nextOffset ? o : nil
    }

    // MARK: the file

    /// The mapping as text: a first line `loft-fake-ip 1 POOL4 POOL6` (`-` for a pool that is
    /// off), then one `OFFSET NAME` line per name, least recently used first.
    public func encoded() -> String {
        var out = "loft-fake-ip 1 \(ipv4?.description ?? "-") \(ipv6?.description ?? "-")\n"
        for (name, e) in byName.sorted(by: { $0.value.used < $1.value.used }) { out += "\(e.offset) \(name)\n" }
        return out
    }

    /// Takes back a mapping `encoded()` wrote with the same pools: the names keep their
    /// addresses (apps' cached answers stay valid). A file of other pools, or a line that does
    /// not read, is an error (nothing taken); entries past the capacity keep the newest.
    public mutating func restore(_ text: String) -> String? {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: true)
        guard let head = lines.first else { return "empty file" }
        let want = "loft-fake-ip 1 \(ipv4?.description ?? "-") \(ipv6?.description ?? "-")"
        guard head == want else { return "the file is for other pools (\(head.prefix(80)))" }
        lines.removeFirst()
        var restored: [(String, UInt64)] = []
        for (i, line) in lines.enumerated() {
            let parts = line.split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 2, let offset = UInt64(parts[0]), offset >= 1, offset <= UInt64(capacity),
                  let name = Array(parts[1].utf8).withUnsafeBytes({ HostName.validate($0) }), name == parts[1] else {
                return "line \(i + 2) does not read"
            }
            restored.append((name, offset))
        }
        var fresh = self
        fresh.byName = [:]
        fresh.byOffset = [:]
        fresh.nextOffset = 1
        for (name, offset) in restored.suffix(capacity) {
            if let old = fresh.byOffset[offset] { fresh.byName[old] = nil }
            if let e = fresh.byName[name] { fresh.byOffset[e.offset] = nil }
            fresh.tick &+= 1
            fresh.byName[name] = Entry(offset: offset, used: fresh.tick)
            fresh.byOffset[offset] = name
            fresh.nextOffset = max(fresh.nextOffset, offset + 1)
        }
        self = fresh
        return nil
    }
}
