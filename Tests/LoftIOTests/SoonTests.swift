import XCTest
@testable import LoftIO

/// `EventLoop.soon` and `SoonOnce`: one queue, run after the batch in the order asked for.
final class SoonTests: XCTestCase {
    func testSoonOnceRunsOnceInTheOrderFirstAskedFor() throws {
        let loop = try EventLoop()
        var ran: [String] = []
        let once = SoonOnce(loop: loop) { ran.append("once") }
        loop.soon { ran.append("a") }
        once.schedule()
        XCTAssertTrue(once.isScheduled)
        loop.soon { ran.append("b") }
        once.schedule()
        once.schedule()
        loop.runOnce()
        XCTAssertEqual(ran, ["a", "once", "b"])
        XCTAssertFalse(once.isScheduled)
        // Asked again after it ran: it runs again.
        once.schedule()
        loop.runOnce()
        XCTAssertEqual(ran, ["a", "once", "b", "once"])
    }

    func testAskedAgainWhileRunningRunsAgainInTheSameDrain() throws {
        let loop = try EventLoop()
        var runs = 0
        var once: SoonOnce!
        once = SoonOnce(loop: loop) {
            runs += 1
            if runs < 3 { once.schedule() }
        }
        once.schedule()
        loop.runOnce()
        XCTAssertEqual(runs, 3)
        XCTAssertFalse(once.isScheduled)
    }

    /// The queue holds a SoonOnce until it runs (nothing holds it weakly); its owner may go
    /// first (the action, holding the owner weakly, does nothing), and nothing is left behind.
    func testOwnerGoneBeforeTheRunAndNothingLeaks() throws {
        final class Owner {
            var count = 0
            lazy var soon = SoonOnce(loop: loop) { [weak self] in self?.count += 1 }
            let loop: EventLoop
            init(_ loop: EventLoop) { self.loop = loop }
        }
        let loop = try EventLoop()
        var owner: Owner? = Owner(loop)
        weak var ownerRef = owner
        weak var onceRef = owner!.soon
        owner!.soon.schedule()
        owner = nil
        XCTAssertNil(ownerRef)
        XCTAssertNotNil(onceRef, "the loop's queue holds the SoonOnce until it runs")
        loop.runOnce()
        XCTAssertNil(onceRef, "run and released")

        // With the owner alive the action reaches it, and dropping both leaves nothing.
        let kept = Owner(loop)
        kept.soon.schedule()
        loop.runOnce()
        XCTAssertEqual(kept.count, 1)
    }
}
