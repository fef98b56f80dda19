import LoftQUIC
import XCTest
@testable import LoftCarriers

final class QuicPacerTests: XCTestCase {
    private let ms: UInt64 = 1_000_000

    /// 100 Mbit/s is 0.0125 bytes per ns: 2 ms of it is 25,000 bytes, 17 packets of 1,452.
    func testBucketHoldsTwoMillisecondsOfTheRate() {
        let rate = 0.0125
        var p = QuicPacer(now: 0)
        p.fill(now: 50 * ms, rate: rate, packet: 1452)  // idle 50 ms: only the depth is kept
        XCTAssertEqual(p.tokens, 25_000, accuracy: 0.5)
        XCTAssertEqual(p.packets(of: 1452), 17)
    }

    /// Never less than 10 packets, however slow the rate.
    func testFloorOfTenPackets() {
        var p = QuicPacer(now: 0)
        p.fill(now: 1_000 * ms, rate: 0.000_1, packet: 1452)
        XCTAssertEqual(p.packets(of: 1452), 10)
    }

    /// What the sender spends comes back at the rate; it waits (whole milliseconds, at
    /// least one) for the next packet when the bucket is empty.
    func testSpendRefillAndWait() {
        let rate = 0.0125
        var p = QuicPacer(now: 0)
        p.fill(now: 10 * ms, rate: rate, packet: 1452)
        for _ in 0..<17 { p.spend(1452) }
        XCTAssertEqual(p.packets(of: 1452), 0)
        // 316 bytes left: 1,136 more take 90,880 ns: the loop's timer waits 1 ms.
        XCTAssertEqual(p.waitMs(packet: 1452, rate: rate), 1)
        p.fill(now: 10 * ms + 1 * ms, rate: rate, packet: 1452)
        XCTAssertEqual(p.tokens, 316 + 12_500, accuracy: 0.5)
        XCTAssertEqual(p.packets(of: 1452), 8)
        // At 1 Mbit/s a packet takes 11.6 ms to accrue: 12.
        var slow = QuicPacer(now: 0, minPackets: 1, packet: 1452)
        slow.spend(1452)
        XCTAssertEqual(slow.waitMs(packet: 1452, rate: 0.000_125), 12)
    }

    /// A controller without a pacing rate is not paced (the bucket never runs dry for good).
    func testNoRateNoPacing() {
        var p = QuicPacer(now: 0)
        for _ in 0..<10 { p.spend(1452) }
        p.fill(now: 1, rate: 0, packet: 1452)
        XCTAssertEqual(p.packets(of: 1452), 10)
    }

    /// Over a long run the bytes allowed never exceed the rate times the time plus the depth.
    func testAverageStaysAtTheRate() {
        let rate = 0.125  // 1 Gbit/s
        var p = QuicPacer(now: 0)
        var sent = 0
        var now: UInt64 = 0
        for step in 0..<10_000 {
            now += UInt64(37_000 + (step % 7) * 11_000)  // uneven loop turns
            p.fill(now: now, rate: rate, packet: 1452)
            let k = min(64, p.packets(of: 1452))
            for _ in 0..<k { p.spend(1452) }
            sent += k * 1452
        }
        let allowed = rate * Double(now) + 2 * Double(ms) * rate + 10 * 1452
        XCTAssertLessThanOrEqual(Double(sent), allowed)
        XCTAssertGreaterThan(Double(sent), 0.95 * rate * Double(now))
    }
}
