/// A flow that reads from a server into loft's memory and can stop reading (a vless TCP
/// flow: its TLS connection).
public protocol ReadBudgetMember: AnyObject {
    /// Bytes this flow holds in loft's memory now (read from the server, not yet taken by the
    /// app).
    func budgetHeld() -> Int
    /// Stop (true) or resume (false) reading from the server. While stopped, what the server
    /// sends waits in the kernel's socket buffer and its TCP window closes: nothing is dropped.
    /// Only turns reading off or on: the reads themselves come later, never from this call.
    func budgetPause(_ paused: Bool)
}

/// The memory all flows of one loop may hold between a server and apps that do not read
/// (docs/vless.md, "Flow budget"): each flow is bounded by its own buffers, and the sum by
/// `limit`. While the sum is over it, a flow that holds at least its share
/// (`limit / members`) stops reading from its server when it next reads; flows that hold less
/// go on (so a new flow still gets its first bytes). A timer on the loop's heap asks every
/// flow again every `recheckMs` while some are stopped (and a stopped member may ask sooner
/// with `update`, when its app took bytes), and lets a stopped one read again once it holds
/// less than half its share, or once the sum is under the limit (flows ended, apps read). So the flows that hold the most wait, and what all hold
/// stays under twice the limit, plus one read (a TLS record, 16 KiB) per flow: the flows
/// over their share hold what they held when the sum passed the limit, the others less than
/// their share each.
public final class ReadBudget {
    /// One member's place: what it held when last asked, whether it is stopped.
    public final class Entry {
        package unowned let member: ReadBudgetMember
        fileprivate var index = -1
        package fileprivate(set) var held = 0
        public fileprivate(set) var paused = false
        package init(_ member: ReadBudgetMember) { self.member = member }
    }

    /// Bytes all members may hold together before the largest stop reading.
    public var limit: Int
    /// The sum of what members held when last asked.
    public private(set) var held = 0
    /// Members stopped now, and how many times a member was stopped so far.
    public private(set) var pausedCount = 0
    public private(set) var pauses: UInt64 = 0
    private var entries: [Entry] = []
    private let loop: EventLoop
    private var timer: TimerHandle?
    public static let defaultLimit = 16 << 20
    package static let recheckMs: UInt64 = 50

    public init(loop: EventLoop, limit: Int = ReadBudget.defaultLimit) {
        self.loop = loop
        self.limit = limit
    }

    deinit { if let timer { loop.cancel(timer) } }

    public var members: Int { entries.count }
    /// A member's share while the sum is over the limit.
    package var share: Int { limit / max(1, entries.count) }

    public func join(_ member: ReadBudgetMember) -> Entry {
        let e = Entry(member)
        e.index = entries.count
        entries.append(e)
        return e
    }

    public func leave(_ e: Entry) {
        guard e.index >= 0 else { return }
        held -= e.held
        if e.paused { pausedCount -= 1 }
        let last = entries.removeLast()
        if last !== e {
            entries[e.index] = last
            last.index = e.index
        }
        e.index = -1
        e.held = 0
        e.paused = false
    }

    /// The member read (or its app took bytes): asks what it holds now, and stops it when the
    /// sum is over the limit and it holds at least its share.
    public func update(_ e: Entry) {
        guard e.index >= 0 else { return }
        let now = e.member.budgetHeld()
        held += now - e.held
        e.held = now
        if e.paused {
            if held <= limit || now < share / 2 { resume(e) }
            return
        }
        guard held > limit, now >= share else { return }
        e.paused = true
        pausedCount += 1
        pauses &+= 1
        e.member.budgetPause(true)
        if timer == nil { timer = loop.schedule(after: Self.recheckMs) { [weak self] in self?.recheck() } }
    }

    private func resume(_ e: Entry) {
        e.paused = false
        pausedCount -= 1
        e.member.budgetPause(false)
    }

    /// Every member asked again (their apps may have read); stopped ones under half their
    /// share, or all once the sum is under the limit, read again.
    private func recheck() {
        timer = nil
        var sum = 0
        for e in entries {
            e.held = e.member.budgetHeld()
            sum += e.held
        }
        held = sum
        let under = held <= limit
        let half = share / 2
        // Resuming only turns reading back on (the reads come on a later turn of the loop):
        // nothing here changes `entries`.
        for e in entries where e.paused && (under || e.held < half) { resume(e) }
        if pausedCount > 0 && timer == nil {
            timer = loop.schedule(after: Self.recheckMs) { [weak self] in self?.recheck() }
        }
    }
}
