import LoftCore
import LoftProtocol

/// The instance table on disk (key `state-file`), so that a front killed and started again
/// answers RESUME with the same instance and addresses. A small line format:
///
///     loft-front-state 1
///     next-slot 5
///     instance 0123456789abcdef0123456789abcdef 3 198.18.64.5 fd00:64::5 attached
///     instance fedcba9876543210fedcba9876543210 4 198.18.64.6 - detached 512000
///
/// The addresses are written next to the slot so a changed pool is noticed at load.
enum FrontState {
    static let header = "loft-front-state 1"
    static let headerPrefix = "loft-front-state "
    /// Larger files are not read (about 1.5 million instances).
    static let maxFileBytes = 128 << 20

    struct Entry: Equatable {
        var id: InstanceID
        var slot: UInt32
        var ipv4: IPAddress
        var ipv6: IPAddress?
        /// Lifetime left when written; nil: attached then.
        var remainingMs: UInt64?
    }

    struct Snapshot: Equatable {
        var nextSlot: UInt32 = 0
        var entries: [Entry] = []
    }

    struct Corrupt: Error, CustomStringConvertible {
        var description: String
    }

    // MARK: encoding

    static func snapshot(of pool: AddressPool, now: UInt64) -> Snapshot {
        Snapshot(nextSlot: pool.nextSlot, entries: pool.allLeases.map { l in
            Entry(id: l.instanceID, slot: l.slot, ipv4: l.ipv4, ipv6: l.ipv6,
                  remainingMs: l.expiresAt.map { $0 > now ? $0 - now : 0 })
        })
    }

    static func encode(_ s: Snapshot) -> String {
        var out = header + "\n# instance ID SLOT IPV4 IPV6|- attached | detached REMAINING-MS\nnext-slot \(s.nextSlot)\n"
        out.reserveCapacity(out.utf8.count + s.entries.count * 96)
        for e in s.entries {
            out += "instance \(e.id) \(e.slot) \(e.ipv4) \(e.ipv6.map { "\($0)" } ?? "-") "
            out += e.remainingMs.map { "detached \($0)\n" } ?? "attached\n"
        }
        return out
    }

    // MARK: decoding

    static func decode(_ bytes: [UInt8]) throws(Corrupt) -> Snapshot {
        guard let text = String(validating: bytes, as: UTF8.self) else { throw Corrupt(description: "not UTF-8 text") }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if lines.last == "" { lines.removeLast() }
        guard let first = lines.first, first.hasPrefix(headerPrefix) else {
            throw Corrupt(description: "not a loft-front state file (no \"\(header)\" first line)")
        }
        guard first == header else {
            throw Corrupt(description: "unsupported version \"\(first.dropFirst(headerPrefix.count))\"")
        }
        var s = Snapshot()
        var ids = Set<InstanceID>()
        var slots = Set<UInt32>()
        for (i, line) in lines.enumerated().dropFirst() {
            let n = i + 1
            if line.isEmpty || line.hasPrefix("#") { continue }
            let f = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            func bad(_ what: String) -> Corrupt { Corrupt(description: "line \(n): \(what)") }
            switch f[0] {
            case "next-slot":
                guard f.count == 2, let v = UInt32(f[1]) else { throw bad("next-slot needs one number") }
                s.nextSlot = v
            case "instance":
                guard f.count == 6 || f.count == 7 else { throw bad("instance needs 5 or 6 fields, got \(f.count - 1)") }
                guard let id = InstanceID(hex: f[1]) else { throw bad("instance id must be 32 hex digits, got \"\(f[1])\"") }
                guard let slot = UInt32(f[2]) else { throw bad("slot must be a number, got \"\(f[2])\"") }
                guard let v4 = IPAddress(f[3]), v4.isIPv4 else { throw bad("not an IPv4 address: \"\(f[3])\"") }
                var v6: IPAddress?
                if f[4] != "-" {
                    guard let a = IPAddress(f[4]), !a.isIPv4 else { throw bad("not an IPv6 address or -: \"\(f[4])\"") }
                    v6 = a
                }
                var remaining: UInt64?
                switch (f[5], f.count) {
                case ("attached", 6): remaining = nil
                case ("detached", 7):
                    guard let ms = UInt64(f[6]) else { throw bad("remaining lifetime must be milliseconds, got \"\(f[6])\"") }
                    remaining = ms
                default: throw bad("expected \"attached\" or \"detached MS\"")
                }
                guard ids.insert(id).inserted else { throw bad("instance \(id) appears twice") }
                guard slots.insert(slot).inserted else { throw bad("slot \(slot) appears twice") }
                s.entries.append(Entry(id: id, slot: slot, ipv4: v4, ipv6: v6, remainingMs: remaining))
            default:
                throw bad("unknown line \"\(f[0].prefix(40))\"")
            }
        }
        return s
    }

    /// Puts the saved instances into `pool`, all detached: a saved lifetime is kept (at most
    /// `expiryMs`), an instance attached at the crash gets a full `expiryMs`. Entries whose
    /// addresses are not what the configured pools give their slot are returned as dropped.
    static func restore(_ s: Snapshot, into pool: AddressPool, now: UInt64,
                        expiryMs: UInt64) -> (restored: Int, dropped: [(Entry, String)]) {
        var restored = 0
        var dropped: [(Entry, String)] = []
        for e in s.entries {
            guard let a = pool.addresses(ofSlot: e.slot), a.ipv4 == e.ipv4, a.ipv6 == e.ipv6 else {
                dropped.append((e, "addresses not in the configured pools"))
                continue
            }
            let life = min(e.remainingMs ?? expiryMs, expiryMs)
            if pool.restore(e.id, slot: e.slot, expiresAt: now &+ life) != nil {
                restored += 1
            } else {
                dropped.append((e, "slot or instance taken"))
            }
        }
        pool.nextSlot = s.nextSlot
        return (restored, dropped)
    }
}
