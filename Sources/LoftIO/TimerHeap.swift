/// A scheduled timer, for `EventLoop.cancel(_:)`: names the timer's slot and the slot's
/// generation, so a handle of a timer that ran or was cancelled matches nothing.
public struct TimerHandle: Hashable, Sendable {
    let id: UInt64
    /// No timer (never a scheduled one's handle: its slot is past the table's limit), for a
    /// field that needs no optional's extra byte; cancelling it does nothing.
    public static let none = TimerHandle(id: .max)
}

/// The loop's timers: a binary min-heap ordered by (deadline, scheduling order) over a table of
/// entries. Each entry records its position in the heap, so cancelling removes it at once
/// (O(log n)); freed entries go on a free list and are reused, so the table is as large as the
/// most timers ever pending at one time, however many are scheduled and cancelled.
struct TimerHeap {
    private struct Entry {
        var deadline: UInt64 = 0
        var sequence: UInt64 = 0
        /// Bumped each time the entry is freed.
        var generation: UInt32 = 0
        /// Index in `heap`; -1 while the entry is free.
        var position: Int = -1
        var action: (() -> Void)?
    }

    private var entries: [Entry] = []
    /// Entry indices, heap-ordered.
    private var heap: [UInt32] = []
    private var free: [UInt32] = []
    /// The scheduling order of the next insert.
    private(set) var nextSequence: UInt64 = 0

    /// Timers pending.
    var count: Int { heap.count }
    /// Entries allocated (pending or free).
    var capacity: Int { entries.count }
    /// The earliest pending deadline.
    var earliest: UInt64? { heap.first.map { entries[Int($0)].deadline } }

    mutating func insert(at deadline: UInt64, _ action: @escaping () -> Void) -> TimerHandle {
        let slot: Int
        if let f = free.popLast() {
            slot = Int(f)
        } else {
            slot = entries.count
            precondition(slot < Int(UInt32.max), "timer table full")
            entries.append(Entry())
        }
        entries[slot].deadline = deadline
        entries[slot].sequence = nextSequence
        entries[slot].action = action
        nextSequence &+= 1
        heap.append(UInt32(slot))
        entries[slot].position = heap.count - 1
        siftUp(heap.count - 1)
        return TimerHandle(id: UInt64(entries[slot].generation) << 32 | UInt64(slot))
    }

    /// Removes the timer if it is still pending; false when it already ran or was cancelled.
    @discardableResult
    mutating func cancel(_ handle: TimerHandle) -> Bool {
        let slot = Int(truncatingIfNeeded: UInt32(truncatingIfNeeded: handle.id))
        guard slot < entries.count, entries[slot].generation == UInt32(truncatingIfNeeded: handle.id >> 32),
              entries[slot].position >= 0 else { return false }
        remove(at: entries[slot].position)
        release(slot)
        return true
    }

    /// Takes out the earliest timer when its deadline is at or before `now` and it was
    /// scheduled before `sequence` (so what a drain schedules waits for the next one), and
    /// returns its action.
    mutating func popDue(now: UInt64, scheduledBefore sequence: UInt64) -> (() -> Void)? {
        guard let top = heap.first else { return nil }
        let slot = Int(top)
        guard entries[slot].deadline <= now, entries[slot].sequence < sequence else { return nil }
        let action = entries[slot].action
        remove(at: 0)
        release(slot)
        return action
    }

    private mutating func release(_ slot: Int) {
        entries[slot].action = nil
        entries[slot].position = -1
        entries[slot].generation &+= 1
        free.append(UInt32(slot))
    }

    private mutating func remove(at index: Int) {
        let last = heap.removeLast()
        guard index < heap.count else { return }
        heap[index] = last
        entries[Int(last)].position = index
        siftDown(index)
        siftUp(entries[Int(last)].position)
    }

    private func before(_ a: UInt32, _ b: UInt32) -> Bool {
        let da = entries[Int(a)].deadline, db = entries[Int(b)].deadline
        return da < db || (da == db && entries[Int(a)].sequence < entries[Int(b)].sequence)
    }

    private mutating func siftUp(_ start: Int) {
        var i = start
        let item = heap[i]
        while i > 0 {
            let parent = (i - 1) / 2
            guard before(item, heap[parent]) else { break }
            heap[i] = heap[parent]
            entries[Int(heap[i])].position = i
            i = parent
        }
        heap[i] = item
        entries[Int(item)].position = i
    }

    private mutating func siftDown(_ start: Int) {
        var i = start
        let item = heap[i]
        let n = heap.count
        while true {
            var child = 2 * i + 1
            guard child < n else { break }
            if child + 1 < n && before(heap[child + 1], heap[child]) { child += 1 }
            guard before(heap[child], item) else { break }
            heap[i] = heap[child]
            entries[Int(heap[i])].position = i
            i = child
        }
        heap[i] = item
        entries[Int(item)].position = i
    }
}
