import CLinux
import Glibc
import LoftCore

/// A scheduled timer, for `EventLoop.cancel(_:)`.
public struct TimerHandle: Hashable, Sendable {
    let id: UInt64
}

/// Receives readiness for one file descriptor.
public protocol IOHandler: AnyObject {
    func handleIO(_ events: UInt32)
}

public enum IOEvents {
    public static let readable = UInt32(CLINUX_EPOLLIN)
    public static let writable = UInt32(CLINUX_EPOLLOUT)
    public static let error = UInt32(CLINUX_EPOLLERR)
    public static let hangup = UInt32(CLINUX_EPOLLHUP)
}

public struct SystemError: Error, CustomStringConvertible {
    public var operation: String
    public var code: Int32
    public init(_ operation: String, _ code: Int32) { self.operation = operation; self.code = code }
    public var description: String { "\(operation): \(String(cString: strerror(code)))" }
}

/// The one event loop: epoll over every descriptor loft owns, level-triggered, handlers kept
/// in an array indexed by fd (O(1), no per-event allocation), plus timer hooks.
public final class EventLoop {
    private let epfd: Int32
    private var handlers: [IOHandler?] = []
    private var tokens = [UInt64](repeating: 0, count: 256)
    private var events = [UInt32](repeating: 0, count: 256)
    private var periodic: [(interval: UInt64, next: UInt64, action: () -> Void)] = []
    private var stopRequested = false

    /// Called every iteration; returns milliseconds until it wants to run again (lwIP timers).
    public var timerHook: (() -> UInt32)?
    /// Called after each batch of I/O events, in the order added (deferred work: flushing
    /// queued bytes, batched packet writes, closing flows).
    private var afterEventHooks: [() -> Void] = []
    public func addAfterEvents(_ hook: @escaping () -> Void) { afterEventHooks.append(hook) }
    private func afterEvents() { for h in afterEventHooks { h() } }
    /// Milliseconds, cached once per iteration.
    public private(set) var now: UInt64 = monotonicMilliseconds()

    public init() throws {
        let fd = clinux_epoll_create()
        guard fd >= 0 else { throw SystemError("epoll_create", -fd) }
        epfd = fd
    }

    deinit { Glibc.close(epfd) }

    public func register(_ fd: Int32, _ mask: UInt32, _ handler: IOHandler) {
        let i = Int(fd)
        if i >= handlers.count { handlers.append(contentsOf: repeatElement(nil, count: max(i + 1 - handlers.count, handlers.count))) }
        handlers[i] = handler
        let r = clinux_epoll_ctl(epfd, Int32(CLINUX_EPOLL_CTL_ADD), fd, mask, UInt64(fd))
        if r != 0 { Log.error("epoll.add", ["fd": fd, "error": String(cString: strerror(-r))]) }
    }

    public func modify(_ fd: Int32, _ mask: UInt32) {
        _ = clinux_epoll_ctl(epfd, Int32(CLINUX_EPOLL_CTL_MOD), fd, mask, UInt64(fd))
    }

    /// Call before closing fd.
    public func unregister(_ fd: Int32) {
        _ = clinux_epoll_ctl(epfd, Int32(CLINUX_EPOLL_CTL_DEL), fd, 0, 0)
        if Int(fd) < handlers.count { handlers[Int(fd)] = nil }
    }

    /// Runs `action` every `intervalMs` (coarse: housekeeping such as idle sweeps).
    public func every(_ intervalMs: UInt64, _ action: @escaping () -> Void) {
        periodic.append((intervalMs, monotonicMilliseconds() + intervalMs, action))
    }

    private var deferred: [() -> Void] = []

    /// Runs `action` after the current batch of events: for results that must not be delivered
    /// from inside the call that caused them (a connect that failed synchronously, say).
    public func soon(_ action: @escaping () -> Void) { deferred.append(action) }

    private func runDeferred() {
        while !deferred.isEmpty {
            let batch = deferred
            deferred.removeAll(keepingCapacity: true)
            for a in batch { a() }
        }
    }

    public func stop() { stopRequested = true }

    // MARK: timers (interim: replaced by the timer heap)

    private var timers: [(at: UInt64, id: UInt64, action: () -> Void)] = []
    private var nextTimerID: UInt64 = 1

    /// Runs `action` on the loop `ms` milliseconds from now. Cancel with `cancel(_:)`.
    @discardableResult
    public func schedule(after ms: UInt64, _ action: @escaping () -> Void) -> TimerHandle {
        schedule(at: now &+ ms, action)
    }

    /// Runs `action` on the loop at `deadline` (loop milliseconds, as `now`).
    @discardableResult
    public func schedule(at deadline: UInt64, _ action: @escaping () -> Void) -> TimerHandle {
        let id = nextTimerID
        nextTimerID += 1
        timers.append((deadline, id, action))
        return TimerHandle(id: id)
    }

    /// A timer that has not run yet never runs. Cancelling one that ran (or twice) does nothing.
    public func cancel(_ timer: TimerHandle) {
        timers.removeAll { $0.id == timer.id }
    }

    private func runTimers() -> Int32 {
        var due: [() -> Void] = []
        timers.removeAll { t in if t.at <= now { due.append(t.action); return true }; return false }
        for a in due { a() }
        guard let next = timers.map(\.at).min() else { return 1000 }
        return Int32(clamping: next > now ? next - now : 0)
    }

    public func run() {
        while !stopRequested {
            now = monotonicMilliseconds()
            // lwIP timers first; what they queued (data to flush, flows to close) runs before
            // the loop sleeps.
            var timeout = Int32(1000)
            if let hook = timerHook { timeout = min(timeout, Int32(hook())) }
            runDeferred()
            afterEvents()
            for p in periodic { timeout = min(timeout, Int32(clamping: p.next > now ? p.next - now : 0)) }
            timeout = min(timeout, runTimers())
            runDeferred()
            afterEvents()
            let n = tokens.withUnsafeMutableBufferPointer { t in
                events.withUnsafeMutableBufferPointer { e in
                    clinux_epoll_wait(epfd, t.baseAddress, e.baseAddress, Int32(t.count), timeout)
                }
            }
            now = monotonicMilliseconds()
            if n < 0 {
                if -n == EINTR { continue }
                Log.error("epoll.wait", ["error": String(cString: strerror(-n))])
                return
            }
            for i in 0..<Int(n) {
                let fd = Int(tokens[i])
                // A handler earlier in this batch may have closed this fd.
                if fd < handlers.count, let h = handlers[fd] { h.handleIO(events[i]) }
            }
            runDeferred()
            afterEvents()
            for i in periodic.indices where periodic[i].next <= now {
                periodic[i].next = now + periodic[i].interval
                periodic[i].action()
            }
            runDeferred()
            afterEvents()
        }
    }
}
