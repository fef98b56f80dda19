import XCTest
@testable import LoftCore

final class TokenBucketTests: XCTestCase {
    func testBurstThenRefillAtTheRate() {
        var b = TokenBucket(perSecond: 1000, burst: 50)
        var taken = 0
        for _ in 0..<200 where b.take(now: 10_000) { taken += 1 }
        XCTAssertEqual(taken, 50, "the burst, at one instant")
        XCTAssertEqual(b.msUntilNext(now: 10_000), 1)
        XCTAssertFalse(b.take(now: 10_000))
        // 10 ms later: 10 more.
        taken = 0
        for _ in 0..<200 where b.take(now: 10_010) { taken += 1 }
        XCTAssertEqual(taken, 10)
        // Never more than the burst, however long the pause.
        taken = 0
        for _ in 0..<200 where b.take(now: 99_000_000) { taken += 1 }
        XCTAssertEqual(taken, 50)
    }

    func testSlowRateWaitsWholeIntervals() {
        var b = TokenBucket(perSecond: 4, burst: 1)
        XCTAssertTrue(b.take(now: 0))
        XCTAssertFalse(b.take(now: 100))
        XCTAssertEqual(b.msUntilNext(now: 100), 150)
        XCTAssertTrue(b.take(now: 250))
    }
}
