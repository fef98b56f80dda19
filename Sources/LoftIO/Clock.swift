import LoftCore

/// Monotonic milliseconds: the product's clock. Code on the loop reads the loop's `now` (or
/// schedules on its timer heap) instead, so that a test's virtual clock reaches it.
@inline(__always)
public func monotonicMilliseconds() -> UInt64 { Syscall.monotonicMilliseconds() }

/// Monotonic nanoseconds: the same clock as `monotonicMilliseconds` (that is this / 10^6), for
/// what needs finer time than the loop's milliseconds (QUIC: ngtcp2's timestamps, from which it
/// measures round trips and paces). Code on a loop reads the loop's `nanoseconds`.
@inline(__always)
public func monotonicNanoseconds() -> UInt64 { Syscall.monotonicNanoseconds() }

/// A clock that moves only when told: a test gives it to `EventLoop(clock:)` and moves time
/// with the loop's `advance(by:)`, which runs every timer due on the way, in order, without
/// sleeping. Starts far from zero so that deadlines computed as `now - x` do not wrap.
public final class VirtualClock {
    public fileprivate(set) var now: UInt64

    public init(startingAt now: UInt64 = 1_000_000_000) { self.now = now }

    /// `now` in nanoseconds (virtual time moves in whole milliseconds).
    public var nanoseconds: UInt64 { now &* 1_000_000 }

    /// Moves to `time` (never backwards).
    fileprivate func move(to time: UInt64) { if time > now { now = time } }
}

extension EventLoop {
    /// Moves the loop's virtual clock `ms` on. Each timer due on the way runs at its own
    /// deadline (the clock stands there meanwhile, so what it schedules is timed from there),
    /// in deadline order, each drain followed by one turn of the loop without waiting (deferred
    /// work, after-event hooks, descriptors already ready). Ends with one such turn at the
    /// target. Only for a loop made with a `VirtualClock`.
    public func advance(by ms: UInt64) {
        guard let clock = virtualClock else { preconditionFailure("advance(by:) needs EventLoop(clock: VirtualClock)") }
        let target = clock.now &+ ms
        while let next = nextTimerDeadline, next <= target {
            clock.move(to: next)
            runOnce(timeoutMs: 0)
        }
        clock.move(to: target)
        runOnce(timeoutMs: 0)
    }

    /// `advance(by:)` in whole milliseconds of `duration`.
    public func advance(by duration: Duration) {
        let c = duration.components
        advance(by: UInt64(c.seconds) * 1000 + UInt64(c.attoseconds / 1_000_000_000_000_000))
    }

    /// With a virtual clock, when the loop has nothing to do (no descriptor ready within a
    /// millisecond of real time, nothing deferred): the clock jumps to the earliest timer.
    /// False when there is no timer to jump to.
    func jumpToNextTimer() -> Bool {
        guard let clock = virtualClock, let next = nextTimerDeadline else { return false }
        clock.move(to: next)
        return true
    }
}
