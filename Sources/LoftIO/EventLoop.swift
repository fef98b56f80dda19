import CLinux
import Glibc
import LoftCore

/// Receives readiness for one file descriptor.
public protocol IOHandler: AnyObject {
    func handleIO(_ events: UInt32)
}

public enum IOEvents {
    public static let readable = UInt32(CLINUX_EPOLLIN)
    public static let writable = UInt32(CLINUX_EPOLLOUT)
    public static let error = UInt32(CLINUX_EPOLLERR)
    public static let hangup = UInt32(CLINUX_EPOLLHUP)
    /// The peer shut its sending side (its FIN is in): reported with `readable`, when asked for.
    public static let readHangup = UInt32(CLINUX_EPOLLRDHUP)
    /// Asked with the others: the registration is disarmed once it reports (no event at all,
    /// errors included, until the next `modify`).
    public static let oneShot = UInt32(CLINUX_EPOLLONESHOT)
}

public struct SystemError: Error, CustomStringConvertible {
    public var operation: String
    public var code: Int32
    public init(_ operation: String, _ code: Int32) { self.operation = operation; self.code = code }
    public var description: String { "\(operation): \(String(cString: strerror(code)))" }
}

/// The one event loop: epoll over every descriptor loft owns, level-triggered, and the timer
/// heap. Handlers are kept in a table indexed by fd; each registration has a generation, and
/// epoll's token for it is the fd and that generation (32 bits each), so an event for a
/// registration that ended earlier in the same batch (fd closed, number reused) is dropped.
/// O(1) per event, no allocation per event.
public final class EventLoop {
    private let epfd: Int32
    private struct Registration {
        var handler: IOHandler?
        /// Bumped by each `register` of the fd.
        var generation: UInt32 = 0
    }
    private var registrations: [Registration] = []
    private var tokens = [UInt64](repeating: 0, count: 256)
    private var events = [UInt32](repeating: 0, count: 256)
    private var timers = TimerHeap()
    private var stopRequested = false

    /// Called every iteration; returns milliseconds until it wants to run again (lwIP timers).
    public var timerHook: (() -> UInt32)?
    /// Called after each batch of I/O events and after each drain of due timers, in the order
    /// added (deferred work: flushing queued bytes, batched packet writes, closing flows).
    private var afterEventHooks: [() -> Void] = []
    public func addAfterEvents(_ hook: @escaping () -> Void) { afterEventHooks.append(hook) }
    private func afterEvents() { for h in afterEventHooks { h() } }
    /// Milliseconds, cached once per iteration (at its start and again after epoll returns):
    /// the time every deadline on the loop is computed from.
    public private(set) var now: UInt64
    /// A test's clock; nil in the product, where the loop reads the monotonic clock (one
    /// nil check, then the direct clock_gettime call).
    let virtualClock: VirtualClock?

    /// The loop's clock now (not the cached `now`).
    @inline(__always)
    private func readClock() -> UInt64 {
        if let virtualClock { return virtualClock.now }
        return monotonicMilliseconds()
    }

    /// The loop's clock at the call (`now` is the iteration's cached reading): what a
    /// deadline computed outside the loop's turn is measured from.
    public var currentTime: UInt64 { readClock() }

    /// The loop's clock at the call in nanoseconds, on the same base as `now` (which is this
    /// / 10^6, read once per turn): for what times itself finer than the heap's milliseconds
    /// (QUIC's timestamps: ngtcp2's round trips, loss detection and pacing).
    public var nanoseconds: UInt64 {
        if let virtualClock { return virtualClock.nanoseconds }
        return monotonicNanoseconds()
    }

    /// `clock`: a virtual clock for tests (time moves by `advance(by:)`, or, while `run()` has
    /// nothing else to do, to the next timer); nil, the monotonic clock.
    public init(clock: VirtualClock? = nil) throws {
        virtualClock = clock
        now = clock?.now ?? monotonicMilliseconds()
        switch Syscall.epollCreate() {
        case .success(let fd): epfd = fd
        case .failure(let e): throw SystemError("epoll_create", e.code)
        }
    }

    deinit { _ = Syscall.close(epfd) }

    private static func token(_ fd: Int32, _ generation: UInt32) -> UInt64 {
        UInt64(generation) << 32 | UInt64(UInt32(bitPattern: fd))
    }

    /// Watches `fd` for `mask`, reporting to `handler`. Registering an fd that is still
    /// registered replaces its handler and mask.
    public func register(_ fd: Int32, _ mask: UInt32, _ handler: IOHandler) {
        precondition(fd >= 0, "register: negative fd")
        let i = Int(fd)
        if i >= registrations.count {
            registrations.append(contentsOf: repeatElement(Registration(), count: max(i + 1 - registrations.count, registrations.count)))
        }
        registrations[i].generation &+= 1
        registrations[i].handler = handler
        let token = Self.token(fd, registrations[i].generation)
        switch Syscall.epollCtl(epfd, Int32(CLINUX_EPOLL_CTL_ADD), fd, mask, token) {
        case .success:
            break
        case .failure(let e) where e == .exists:
            _ = Syscall.epollCtl(epfd, Int32(CLINUX_EPOLL_CTL_MOD), fd, mask, token)
        case .failure(let e):
            registrations[i].handler = nil
            Log.error("epoll.add", ["fd": fd, "error": e.description])
        }
    }

    public func modify(_ fd: Int32, _ mask: UInt32) {
        let generation = Int(fd) < registrations.count ? registrations[Int(fd)].generation : 0
        _ = Syscall.epollCtl(epfd, Int32(CLINUX_EPOLL_CTL_MOD), fd, mask, Self.token(fd, generation))
    }

    /// Call before closing fd. Events for it still in the current batch are dropped.
    public func unregister(_ fd: Int32) {
        _ = Syscall.epollCtl(epfd, Int32(CLINUX_EPOLL_CTL_DEL), fd, 0, 0)
        forget(fd)
    }

    /// As `unregister`, for an fd closed right after without the EPOLL_CTL_DEL: closing the
    /// last descriptor of an open file takes it out of epoll, and only an fd that is the only
    /// one of its file may be given here (loft never dups its sockets, and posix_spawn's child
    /// runs before the parent goes on). Events for it still in the current batch are dropped.
    public func forget(_ fd: Int32) {
        if fd >= 0 && Int(fd) < registrations.count { registrations[Int(fd)].handler = nil }
    }

    /// Work queued for after the current batch, in the order asked for.
    private enum Deferred {
        case action(() -> Void)
        case once(SoonOnce)
    }
    private var deferred: [Deferred] = []

    /// Runs `action` after the current batch of events: for results that must not be delivered
    /// from inside the call that caused them (a connect that failed synchronously, say).
    public func soon(_ action: @escaping () -> Void) { deferred.append(.action(action)) }

    /// `once` runs after the current batch; the queue holds it until then (so nothing holds a
    /// SoonOnce weakly, and its retains stay on Swift's fast path).
    fileprivate func soon(_ once: SoonOnce) { deferred.append(.once(once)) }

    private func runDeferred() {
        while !deferred.isEmpty {
            let batch = deferred
            deferred.removeAll(keepingCapacity: true)
            for d in batch {
                switch d {
                case .action(let a): a()
                case .once(let o): o.run()
                }
            }
        }
    }

    public func stop() { stopRequested = true }

    // MARK: timers

    /// Runs `action` on the loop `ms` milliseconds from now (from the clock at the call, not
    /// the iteration's cached `now`). Cancel with `cancel(_:)`.
    @discardableResult
    public func schedule(after ms: UInt64, _ action: @escaping () -> Void) -> TimerHandle {
        schedule(at: readClock() &+ ms, action)
    }

    /// Runs `action` on the loop at `deadline` (loop milliseconds, as `now`). Timers due at the
    /// same time run in the order they were scheduled; one scheduled while timers run (for
    /// now or earlier) runs on the loop's next turn.
    @discardableResult
    public func schedule(at deadline: UInt64, _ action: @escaping () -> Void) -> TimerHandle {
        timers.insert(at: deadline, action)
    }

    /// Runs `action` on the loop at `deadline` in the loop's nanoseconds (`nanoseconds`). The
    /// heap counts milliseconds: on the monotonic clock a deadline less than 1 ms away runs on
    /// the loop's next turn (after an epoll that does not wait: real time passes meanwhile,
    /// and ngtcp2's pacing asks for the next burst a fraction of a millisecond ahead on a fast
    /// path) instead of a whole millisecond later, and a later one after the whole
    /// milliseconds to it. A virtual clock stands still until advanced, so there a deadline in
    /// the future runs at the first whole millisecond at or after it (never before it is due).
    @discardableResult
    public func schedule(atNanoseconds deadline: UInt64, _ action: @escaping () -> Void) -> TimerHandle {
        let clock = nanoseconds
        guard deadline > clock else { return schedule(at: now, action) }
        if let virtualClock { return schedule(at: virtualClock.now &+ (deadline - clock + 999_999) / 1_000_000, action) }
        let ms = (deadline - clock) / 1_000_000
        return ms == 0 ? schedule(at: now, action) : schedule(after: ms, action)
    }

    /// A timer that has not run yet never runs. Cancelling one that ran (or twice) does nothing.
    public func cancel(_ timer: TimerHandle) {
        timers.cancel(timer)
    }

    /// Timers pending, and the entries the heap holds for them (for tests).
    var pendingTimers: Int { timers.count }
    /// The earliest pending timer's deadline.
    var nextTimerDeadline: UInt64? { timers.earliest }
    var timerCapacity: Int { timers.capacity }

    /// Runs every timer due at `now` that was scheduled before this drain began.
    private func runTimers() {
        let drainStart = timers.nextSequence
        while let action = timers.popDue(now: now, scheduledBefore: drainStart) { action() }
    }

    /// epoll's timeout: until the earliest timer, bounded by lwIP's wait; -1 (no limit) when
    /// neither waits, 0 when deferred work is queued.
    private func waitTimeout(hook: Int32?) -> Int32 {
        if !deferred.isEmpty { return 0 }
        var timeout = hook ?? -1
        if let next = timers.earliest {
            let clock = readClock()
            let wait = Int32(clamping: next > clock ? next - clock : 0)
            timeout = timeout < 0 ? wait : min(timeout, wait)
        }
        return timeout
    }

    public func run() {
        while !stopRequested {
            now = readClock()
            // lwIP's timers, then the loop's due timers; what they queued (data to flush, flows
            // to close) runs before the loop sleeps.
            let hookWait = timerHook.map { Int32(clamping: $0()) }
            runTimers()
            runDeferred()
            afterEvents()
            if stopRequested { break }
            var timeout = waitTimeout(hook: hookWait)
            // A virtual clock moves to the next timer once a millisecond of real time brought
            // no I/O.
            let virtualIdle = virtualClock != nil && timeout != 0 && timers.earliest != nil
            if virtualIdle { timeout = 1 }
            let waited = tokens.withUnsafeMutableBufferPointer { t in
                events.withUnsafeMutableBufferPointer { e in
                    Syscall.epollWait(epfd, t.baseAddress!, e.baseAddress!, Int32(t.count), timeout)
                }
            }
            if virtualIdle, case .success(0) = waited { _ = jumpToNextTimer() }
            now = readClock()
            let n: Int
            switch waited {
            case .success(let count): n = count
            case .failure(let e) where e == .interrupted: continue
            case .failure(let e):
                Log.error("epoll.wait", ["error": e.description])
                return
            }
            dispatch(n)
            runDeferred()
            afterEvents()
        }
        // A later run() runs again (tests drive one loop in several runs).
        stopRequested = false
    }

    /// Hands the first `n` events of the batch epoll returned to their handlers.
    private func dispatch(_ n: Int) {
        for i in 0..<n {
            let token = tokens[i]
            let fd = Int(UInt32(truncatingIfNeeded: token))
            guard fd < registrations.count else { continue }
            // A handler earlier in this batch may have closed this fd, and a new
            // registration may have its number: only the registration the event is for.
            let r = registrations[fd]
            if r.generation == UInt32(truncatingIfNeeded: token >> 32), let h = r.handler { h.handleIO(events[i]) }
        }
    }

    /// One turn of `run()` that waits at most `timeoutMs` for I/O (0: only what is ready now),
    /// for code that drives the loop itself (tests): lwIP's timer hook and the due timers, the
    /// deferred actions and after-event hooks, the ready handlers, then those again.
    public func runOnce(timeoutMs: Int32 = 0) {
        now = readClock()
        _ = timerHook?()
        runTimers()
        runDeferred()
        afterEvents()
        let waited = tokens.withUnsafeMutableBufferPointer { t in
            events.withUnsafeMutableBufferPointer { e in
                Syscall.epollWait(epfd, t.baseAddress!, e.baseAddress!, Int32(t.count), timeoutMs)
            }
        }
        now = readClock()
        if case .success(let n) = waited { dispatch(n) }
        runDeferred()
        afterEvents()
    }
}

/// One piece of work run after the current batch (`EventLoop.soon`), however many times it is
/// asked for before then: a carrier's "flush the output" and "process the input" are these.
public final class SoonOnce {
    private let loop: EventLoop
    private let action: () -> Void
    @usableFromInline var queued = false

    /// `action` usually holds its owner weakly (the owner holds this).
    public init(loop: EventLoop, _ action: @escaping () -> Void) {
        self.loop = loop
        self.action = action
    }

    /// Inlined where it is called: asking again before it ran (a carrier does per packet)
    /// costs one load and compare.
    @inlinable
    public func schedule() {
        if !queued { enqueue() }
    }

    @usableFromInline
    func enqueue() {
        queued = true
        loop.soon(self)
    }

    fileprivate func run() {
        queued = false
        action()
    }

    /// Whether it is asked for and has not run yet.
    public var isScheduled: Bool { queued }
}
