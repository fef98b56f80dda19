import XCTest
@testable import LoftIO
import LoftTestSupport

final class TimerTests: XCTestCase {
    /// Runs the loop until it is stopped or 10 s pass (a failsafe timer that records the timeout).
    private func run(_ loop: EventLoop) -> Bool { loop.runUntilStopped(seconds: 10) }

    func testDeadlineOrderAndTiesInSchedulingOrder() throws {
        let loop = try EventLoop()
        let base = loop.now
        var ran: [String] = []
        loop.schedule(at: base + 20) { ran.append("c") }
        loop.schedule(at: base + 5) { ran.append("a1") }
        loop.schedule(at: base + 10) { ran.append("b") }
        loop.schedule(at: base + 5) { ran.append("a2") }
        loop.schedule(at: base + 5) { ran.append("a3") }
        loop.schedule(at: base) { ran.append("now") }
        loop.schedule(at: base + 20) { ran.append("d"); loop.stop() }
        XCTAssertTrue(run(loop))
        XCTAssertEqual(ran, ["now", "a1", "a2", "a3", "b", "c", "d"])
        XCTAssertEqual(loop.pendingTimers, 0)
    }

    func testCancelledTimerNeverRuns() throws {
        let loop = try EventLoop()
        var ran: [Int] = []
        let one = loop.schedule(after: 1) { ran.append(1) }
        loop.schedule(after: 2) { ran.append(2) }
        let three = loop.schedule(after: 3) { ran.append(3) }
        loop.cancel(one)
        loop.cancel(three)
        loop.cancel(three)  // twice: nothing
        loop.schedule(after: 20) { loop.stop() }
        XCTAssertTrue(run(loop))
        XCTAssertEqual(ran, [2])
        loop.cancel(one)  // after the others ran: nothing
        XCTAssertEqual(loop.pendingTimers, 0)
    }

    /// All four are due in the same drain; the first cancels the third, which must not run,
    /// and a timer cancelling itself while it runs changes nothing.
    func testCancelFromInsideAnotherTimersAction() throws {
        let loop = try EventLoop()
        let deadline = loop.now + 5
        var ran: [Int] = []
        var third: TimerHandle?
        var second: TimerHandle?
        loop.schedule(at: deadline) { ran.append(1); loop.cancel(third!) }
        second = loop.schedule(at: deadline) { ran.append(2); loop.cancel(second!) }
        third = loop.schedule(at: deadline) { ran.append(3) }
        loop.schedule(at: deadline) { ran.append(4); loop.stop() }
        XCTAssertTrue(run(loop))
        XCTAssertEqual(ran, [1, 2, 4])
    }

    /// A timer that schedules another for now (and so on) does not keep the drain going: each
    /// runs on a later turn, and I/O between them is served.
    func testTimerScheduledForNowRunsOnALaterTurn() throws {
        let loop = try EventLoop()
        var turns = 0
        var afterHooks = 0
        loop.addAfterEvents { afterHooks += 1 }
        func again() {
            turns += 1
            if turns == 5 { loop.stop(); return }
            let before = afterHooks
            loop.schedule(at: loop.now) {
                XCTAssertGreaterThan(afterHooks, before, "ran in the same drain")
                again()
            }
        }
        loop.schedule(after: 0) { again() }
        XCTAssertTrue(run(loop))
        XCTAssertEqual(turns, 5)
    }

    /// 100k timers with random deadlines (some in the past) all run, in non-decreasing deadline
    /// order, ties in scheduling order.
    func testManyRandomTimersRunInOrder() throws {
        let loop = try EventLoop()
        let base = loop.now
        let total = 100_000
        var generator = SystemRandomNumberGenerator()
        var lastDeadline: UInt64 = 0
        var lastIndex = -1
        var count = 0
        var outOfOrder = 0
        for i in 0..<total {
            let deadline = base &- 20 &+ UInt64.random(in: 0..<80, using: &generator)
            loop.schedule(at: deadline) {
                if deadline < lastDeadline || (deadline == lastDeadline && i < lastIndex) { outOfOrder += 1 }
                lastDeadline = deadline
                lastIndex = i
                count += 1
                if count == total { loop.stop() }
            }
        }
        XCTAssertEqual(loop.pendingTimers, total)
        XCTAssertTrue(run(loop))
        XCTAssertEqual(count, total)
        XCTAssertEqual(outOfOrder, 0)
        XCTAssertEqual(loop.pendingTimers, 0)
    }

    /// Scheduling and cancelling, over and over, reuses the same entries.
    func testScheduleAndCancelDoNotGrow() throws {
        let loop = try EventLoop()
        for i in 0..<100 { loop.schedule(after: 60_000 + UInt64(i)) {} }
        let capacity = loop.timerCapacity
        XCTAssertEqual(capacity, 100)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100_000 {
            let handles = (0..<3).map { _ in loop.schedule(after: UInt64.random(in: 0..<120_000, using: &generator)) {} }
            for h in handles.shuffled(using: &generator) { loop.cancel(h) }
        }
        XCTAssertEqual(loop.pendingTimers, 100)
        XCTAssertEqual(loop.timerCapacity, capacity + 3)
    }

    /// A stale handle (its timer cancelled, its entry reused) does not cancel the new timer.
    func testStaleHandleDoesNotCancelTheEntrysNextTimer() throws {
        let loop = try EventLoop()
        var ran = false
        let old = loop.schedule(after: 1) {}
        loop.cancel(old)
        loop.schedule(after: 1) { ran = true; loop.stop() }
        XCTAssertEqual(loop.timerCapacity, 1)
        loop.cancel(old)
        XCTAssertTrue(run(loop))
        XCTAssertTrue(ran)
    }

    /// epoll's timeout follows the earliest timer: with nothing else to wake the loop, a 30 ms
    /// timer runs after 30 ms and well before a second.
    func testLoopWakesForTheEarliestTimer() throws {
        let loop = try EventLoop()
        let start = monotonicMilliseconds()
        var firedAt: UInt64 = 0
        loop.schedule(after: 30) { firedAt = monotonicMilliseconds(); loop.stop() }
        XCTAssertTrue(run(loop))
        XCTAssertGreaterThanOrEqual(firedAt - start, 30)
        XCTAssertLessThan(firedAt - start, 500)
    }

    /// On a virtual clock, advance(by:) runs every timer due on the way, in deadline order, each
    /// at its own deadline (what it schedules is timed from there), and nothing beyond the target.
    func testVirtualClockAdvanceRunsDueTimersInOrderWithoutSleeping() throws {
        let clock = VirtualClock()
        let loop = try EventLoop(clock: clock)
        let base = loop.now
        XCTAssertEqual(base, clock.now)
        var ran: [(String, UInt64)] = []
        loop.schedule(after: 30_000) { ran.append(("30s", loop.now)) }
        loop.schedule(after: 10_000) {
            ran.append(("10s", loop.now))
            loop.schedule(after: 5_000) { ran.append(("10s+5s", loop.now)) }
        }
        loop.schedule(after: 60_000) { ran.append(("60s", loop.now)) }
        let started = monotonicMilliseconds()
        loop.advance(by: .seconds(30))
        XCTAssertLessThan(monotonicMilliseconds() - started, 1000, "no sleeping")
        XCTAssertEqual(ran.map(\.0), ["10s", "10s+5s", "30s"])
        XCTAssertEqual(ran.map(\.1), [base + 10_000, base + 15_000, base + 30_000])
        XCTAssertEqual(loop.now, base + 30_000)
        XCTAssertEqual(loop.pendingTimers, 1)
        loop.advance(by: 29_999)
        XCTAssertEqual(ran.count, 3)
        loop.advance(by: 1)
        XCTAssertEqual(ran.last?.0, "60s")
    }

    /// run() on a virtual clock with nothing to do moves the clock to the next timer instead of
    /// waiting for it.
    func testVirtualClockRunJumpsToTheNextTimer() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let base = loop.now
        var firedAt: UInt64 = 0
        loop.schedule(after: 9_000) { firedAt = loop.now; loop.stop() }
        let started = monotonicMilliseconds()
        XCTAssertTrue(run(loop))
        XCTAssertEqual(firedAt, base + 9_000)
        XCTAssertLessThan(monotonicMilliseconds() - started, 1000)
    }

    /// The loop's nanoseconds are its milliseconds' clock (`now` is them / 10^6), and a
    /// nanosecond deadline (QUIC's) runs on the heap: within the current millisecond on the
    /// next turn on the monotonic clock; on a virtual clock, which stands still, at the first
    /// whole millisecond at or after it, never before it is due.
    func testNanosecondDeadlines() throws {
        let real = try EventLoop()
        let msBefore = real.currentTime
        let ns = real.nanoseconds
        let msAfter = real.currentTime
        XCTAssertLessThanOrEqual(msBefore, ns / 1_000_000, "one clock")
        XCTAssertLessThanOrEqual(ns / 1_000_000, msAfter, "one clock")
        var soon = false
        real.schedule(atNanoseconds: real.nanoseconds + 300_000) { soon = true }
        real.runOnce(timeoutMs: 0)
        XCTAssertTrue(soon, "less than 1 ms away: the next turn")

        let clock = VirtualClock()
        let loop = try EventLoop(clock: clock)
        XCTAssertEqual(loop.nanoseconds, clock.now * 1_000_000)
        var ranAt: [UInt64] = []
        loop.schedule(atNanoseconds: loop.nanoseconds + 300_000) { ranAt.append(loop.nanoseconds) }
        loop.schedule(atNanoseconds: loop.nanoseconds + 2_000_000) { ranAt.append(loop.nanoseconds) }
        loop.schedule(atNanoseconds: loop.nanoseconds - 1) { ranAt.append(loop.nanoseconds) }
        let base = loop.nanoseconds
        loop.advance(by: 0)
        XCTAssertEqual(ranAt, [base], "a deadline passed runs at once")
        loop.advance(by: 1)
        XCTAssertEqual(ranAt, [base, base + 1_000_000], "0.3 ms away: at the next whole millisecond")
        loop.advance(by: 1)
        XCTAssertEqual(ranAt, [base, base + 1_000_000, base + 2_000_000])
    }
}
