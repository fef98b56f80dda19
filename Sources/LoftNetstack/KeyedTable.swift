/// An entry of a `KeyedTable`: it carries its own key.
protocol TableKeyed: AnyObject {
    associatedtype Key: Hashable
    var key: Key { get }
}

/// The netstack's TCP flows and UDP associations by their key: an open-addressing table (linear probing, removal by
/// backward shift, no tombstones) of references only, each flow's key being its own. A slot is
/// 8 bytes and the table at most 3/4 full: ~13 bytes per flow at 10k flows, where a
/// `[FlowKey: TCPFlow]` kept a 56-byte copy of the key beside each reference (~105). It grows
/// at 3/4 and shrinks to half when under 1/8 full, so a flood's table does not stay. Hashing
/// is Swift's per-process seeded SipHash: an app cannot choose ports that collide.
struct KeyedTable<Element: TableKeyed>: Sequence {
    private var slots: [Element?] = []
    private(set) var count = 0

    static var smallest: Int { 16 }

    var isEmpty: Bool { count == 0 }
    var capacity: Int { slots.count }

    private func home(_ key: Element.Key) -> Int { key.hashValue & (slots.count - 1) }

    subscript(key: Element.Key) -> Element? {
        guard count > 0 else { return nil }
        let mask = slots.count - 1
        var i = home(key)
        while let f = slots[i] {
            if f.key == key { return f }
            i = (i + 1) & mask
        }
        return nil
    }

    /// Adds `flow`, whose key is not in the table.
    mutating func insert(_ flow: Element) {
        if (count + 1) * 4 > slots.count * 3 { resize(Swift.max(Self.smallest, slots.count * 2)) }
        place(flow)
        count += 1
    }

    /// Removes `flow` itself (not another entry with its key); false when it is not here.
    @discardableResult
    mutating func remove(_ flow: Element) -> Bool {
        guard count > 0 else { return false }
        let mask = slots.count - 1
        var i = home(flow.key)
        while let f = slots[i], f !== flow { i = (i + 1) & mask }
        guard slots[i] != nil else { return false }
        // Backward shift: each later entry of the run moves into the hole unless its home lies
        // cyclically after the hole (then it is already as close to home as it can be).
        var j = i
        while true {
            j = (j + 1) & mask
            guard let f = slots[j] else { break }
            let k = home(f.key)
            let stays = i <= j ? (i < k && k <= j) : (i < k || k <= j)
            if !stays {
                slots[i] = f
                i = j
            }
        }
        slots[i] = nil
        count -= 1
        if slots.count > Self.smallest && count * 8 < slots.count { resize(slots.count / 2) }
        return true
    }

    mutating func removeAll() {
        slots = []
        count = 0
    }

    /// The flows now (a copy: the table may change while they are visited).
    var all: [Element] { slots.compactMap { $0 } }

    struct Iterator: IteratorProtocol {
        fileprivate var slots: IndexingIterator<[Element?]>
        mutating func next() -> Element? {
            while let s = slots.next() { if let f = s { return f } }
            return nil
        }
    }

    func makeIterator() -> Iterator { Iterator(slots: slots.makeIterator()) }

    private mutating func place(_ flow: Element) {
        let mask = slots.count - 1
        var i = home(flow.key)
        while slots[i] != nil { i = (i + 1) & mask }
        slots[i] = flow
    }

    private mutating func resize(_ n: Int) {
        let old = slots
        slots = [Element?](repeating: nil, count: n)
        for case let f? in old { place(f) }
    }
}
