import LoftCore
import LoftIO
import LoftTLS
import XCTest
@testable import LoftCarriers

/// A member whose holding the test sets.
final class BudgetProbe: ReadBudgetMember {
    var held = 0
    var paused = false
    var calls: [Bool] = []
    func budgetHeld() -> Int { held }
    func budgetPause(_ p: Bool) { paused = p; calls.append(p) }
}

/// The read budget's rule: nothing stops under the limit; over it, a member that holds at
/// least its share stops when it reads, a smaller one goes on; stopped members read again
/// once the sum is under the limit and they are under their share (the recheck timer).
final class ReadBudgetTests: XCTestCase {
    func testStopsTheLargestOverTheLimitAndResumesWhenTaken() throws {
        let loop = try EventLoop()
        let b = ReadBudget(loop: loop, limit: 1000)
        let m = (0..<4).map { _ in BudgetProbe() }
        let e = m.map { b.join($0) }
        // Under the limit: no stop, however one member holds.
        m[0].held = 900
        b.update(e[0])
        XCTAssertEqual(b.held, 900)
        XCTAssertFalse(m[0].paused)
        // Over: the reader holding at least its share (1000 / 4) stops; a small one goes on.
        m[1].held = 300
        b.update(e[1])
        XCTAssertEqual(b.held, 1200)
        XCTAssertTrue(m[1].paused)
        m[2].held = 100
        b.update(e[2])
        XCTAssertFalse(m[2].paused, "under its share: a new flow still gets its first bytes")
        XCTAssertEqual(b.pausedCount, 1)
        // The apps take bytes: after a recheck the sum is under the limit, the stopped member
        // (now under its share) reads again.
        m[0].held = 100
        m[1].held = 50
        var stop = false
        _ = loop.schedule(after: 200) { stop = true }
        while !stop { loop.runOnce(timeoutMs: 50) }
        XCTAssertEqual(b.held, 250)
        XCTAssertEqual(m[1].calls, [true, false])
        XCTAssertEqual(b.pausedCount, 0)
        // Leaving takes a member's holding (and its stop) out of the sum.
        m[3].held = 2000
        b.update(e[3])
        XCTAssertTrue(m[3].paused)
        b.leave(e[3])
        XCTAssertEqual(b.held, 250)
        XCTAssertEqual(b.pausedCount, 0)
        XCTAssertEqual(b.members, 3)
        for x in e { b.leave(x) }
        XCTAssertEqual(b.held, 0)
        XCTAssertEqual(b.members, 0)
    }

    /// Flows that never read keep the sum over the limit: a stopped flow whose app takes its
    /// bytes still reads again (under half its share), while the unread ones stay stopped.
    func testAReaderResumesWhileUnreadFlowsKeepTheSumOver() throws {
        let loop = try EventLoop()
        let b = ReadBudget(loop: loop, limit: 1000)
        let unread = (0..<3).map { _ in BudgetProbe() }
        let reader = BudgetProbe()
        let e = unread.map { b.join($0) }
        let r = b.join(reader)
        for (m, x) in zip(unread, e) { m.held = 500; b.update(x) }
        XCTAssertEqual(unread.map(\.paused), [false, false, true], "the third passes the limit holding over its share")
        reader.held = 300
        b.update(r)
        XCTAssertTrue(reader.paused)
        reader.held = 200              // its app read, not enough: still at least half its share
        b.update(r)
        XCTAssertTrue(reader.paused)
        reader.held = 100              // under half its share (250 / 2): an update resumes it at once
        b.update(r)
        XCTAssertFalse(reader.paused)
        reader.held = 300
        b.update(r)
        XCTAssertTrue(reader.paused, "stopped again")
        reader.held = 100              // this time the recheck finds it
        var stop = false
        _ = loop.schedule(after: 200) { stop = true }
        while !stop { loop.runOnce(timeoutMs: 50) }
        XCTAssertGreaterThan(b.held, 1000)
        XCTAssertFalse(reader.paused, "it holds little: not one of the flows that hold the most")
        XCTAssertTrue(unread[2].paused)
        XCTAssertEqual(b.pausedCount, 1)
        for x in e + [r] { b.leave(x) }
    }
}
