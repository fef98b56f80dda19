import LoftCore
import LoftProtocol

/// One instance's overlay addresses and whether a carrier holds it now.
public struct Lease: Equatable, Sendable {
    public let instanceID: InstanceID
    /// Index of the client host in the pools: address = network + 2 + slot (network + 1 is the
    /// gateway).
    public let slot: UInt32
    public let ipv4: IPAddress
    public let ipv6: IPAddress?
    /// Monotonic ms when the instance expires (its carrier went away); nil while attached. An
    /// absolute time rather than the detach time, so a lifetime restored from the state file is
    /// kept exactly.
    public internal(set) var expiresAt: UInt64?

    public var isAttached: Bool { expiresAt == nil }
}

/// The overlay addresses of every instance, keyed by instance id. An instance keeps its slot
/// while attached and for `expiry` after its carrier is lost, so a RESUME gets the same
/// addresses; expired slots go back to the pool. Free slots are handed out round-robin so a
/// freed address is not given to someone else at once.
public final class AddressPool {
    public let ipv4Network: IPPrefix
    public let ipv6Network: IPPrefix?
    public let gateway4: IPAddress
    public let gateway6: IPAddress?
    /// Client slots: the hosts of the smaller pool, without network, gateway (and IPv4 broadcast),
    /// and at most `maxLeases`.
    public let capacity: Int
    private var leases: [InstanceID: Lease] = [:]
    private var owners: [UInt32: InstanceID] = [:]
    private var cursor: UInt32 = 0

    /// `ipv4` and `ipv6` are network addresses with their lengths (IPv4 at most /30, IPv6 at
    /// most /126, as the config loader checks).
    public init(ipv4: IPPrefix, ipv6: IPPrefix?, maxLeases: Int = Int(UInt32.max)) {
        precondition(ipv4.address.isIPv4 && ipv4.length <= 30)
        ipv4Network = ipv4
        ipv6Network = ipv6
        gateway4 = AddressPool.host(ipv4, 1)
        gateway6 = ipv6.map { AddressPool.host($0, 1) }
        var slots = (UInt64(1) << UInt64(32 - ipv4.length)) - 3
        if let v6 = ipv6 {
            precondition(!v6.address.isIPv4 && v6.length <= 126)
            let bits = 128 - v6.length
            let v6Slots: UInt64 = bits >= 33 ? UInt64(UInt32.max) : (UInt64(1) << UInt64(bits)) - 2
            slots = min(slots, v6Slots)
        }
        capacity = Int(min(slots, UInt64(max(0, maxLeases))))
    }

    public var count: Int { leases.count }
    public var attachedCount: Int { leases.values.reduce(0) { $0 + ($1.isAttached ? 1 : 0) } }
    public var isFull: Bool { leases.count >= capacity }

    public func lease(_ id: InstanceID) -> Lease? { leases[id] }

    /// Gives `id` the next free slot, attached. nil when every slot is taken.
    public func assign(_ id: InstanceID) -> Lease? {
        if let existing = leases[id] { return existing }
        guard leases.count < capacity else { return nil }
        var slot = cursor
        while owners[slot] != nil { slot = slot + 1 == UInt32(capacity) ? 0 : slot + 1 }
        cursor = slot + 1 == UInt32(capacity) ? 0 : slot + 1
        return place(id, slot: slot, expiresAt: nil)
    }

    /// Records `id` on a free `slot` inside the pools.
    private func place(_ id: InstanceID, slot: UInt32, expiresAt: UInt64?) -> Lease? {
        guard let a = addresses(ofSlot: slot) else { return nil }
        let lease = Lease(instanceID: id, slot: slot, ipv4: a.ipv4, ipv6: a.ipv6, expiresAt: expiresAt)
        leases[id] = lease
        owners[slot] = id
        return lease
    }

    /// The addresses `slot` stands for in these pools; nil when the slot is outside them.
    public func addresses(ofSlot slot: UInt32) -> (ipv4: IPAddress, ipv6: IPAddress?)? {
        guard Int(slot) < capacity else { return nil }
        return (AddressPool.host(ipv4Network, UInt64(slot) + 2), ipv6Network.map { AddressPool.host($0, UInt64(slot) + 2) })
    }

    /// Puts back an instance saved before a restart, detached until `expiresAt`, on its old slot
    /// (so its addresses are the same). nil when the slot is outside the pools or taken, or the
    /// id is known.
    @discardableResult
    public func restore(_ id: InstanceID, slot: UInt32, expiresAt: UInt64) -> Lease? {
        guard leases[id] == nil, Int(slot) < capacity, owners[slot] == nil else { return nil }
        return place(id, slot: slot, expiresAt: expiresAt)
    }

    /// Where round-robin hands out the next slot (saved with the instances, so a slot freed just
    /// before a restart is not given out at once after it).
    public var nextSlot: UInt32 {
        get { cursor }
        set { cursor = capacity == 0 ? 0 : newValue % UInt32(capacity) }
    }

    /// Every instance, in slot order.
    public var allLeases: [Lease] { leases.values.sorted { $0.slot < $1.slot } }

    /// Marks a known instance attached again (RESUME); nil when it is unknown or expired.
    public func attach(_ id: InstanceID) -> Lease? {
        guard var lease = leases[id] else { return nil }
        lease.expiresAt = nil
        leases[id] = lease
        return lease
    }

    /// The instance's carrier is gone: its addresses stay until `sweep` finds it expired, at
    /// `now + expiryMs`.
    public func detach(_ id: InstanceID, now: UInt64, expiryMs: UInt64) {
        guard var lease = leases[id], lease.isAttached else { return }
        lease.expiresAt = now &+ expiryMs
        leases[id] = lease
    }

    /// Frees the slot at once (the instance is finished).
    public func release(_ id: InstanceID) {
        guard let lease = leases.removeValue(forKey: id) else { return }
        owners.removeValue(forKey: lease.slot)
    }

    /// Frees every detached instance whose expiry has come and returns them.
    @discardableResult
    public func sweep(now: UInt64) -> [Lease] {
        var expired: [Lease] = []
        for lease in leases.values {
            if let at = lease.expiresAt, now >= at { expired.append(lease) }
        }
        for lease in expired { release(lease.instanceID) }
        return expired
    }

    /// The `index`th address of `network` (0 is the network address itself).
    static func host(_ network: IPPrefix, _ index: UInt64) -> IPAddress {
        switch network.address {
        case .v4(let a): return .v4(a &+ UInt32(truncatingIfNeeded: index))
        case .v6(let hi, let lo):
            let (sum, carry) = lo.addingReportingOverflow(index)
            return .v6(carry ? hi &+ 1 : hi, sum)
        }
    }
}
