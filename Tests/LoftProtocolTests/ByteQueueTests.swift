import XCTest
@testable import LoftProtocol

final class ByteQueueTests: XCTestCase {
    /// A FIFO through many appends and partial consumes (the storage compacted on the way):
    /// every byte comes out once, in order; `count` always says what is in it.
    func testFIFOAcrossCompactions() {
        var q = ByteQueue()
        q.reserveCapacity(4096)
        var next: UInt8 = 0      // the next byte appended
        var want: UInt8 = 0      // the next byte expected out
        var live = 0
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let n = Int.random(in: 0...700, using: &rng)
            if live + n <= 3000 {
                let chunk = (0..<n).map { i in next &+ UInt8(truncatingIfNeeded: i) }
                next &+= UInt8(truncatingIfNeeded: n)
                chunk.withUnsafeBytes { q.append($0) }
                live += n
            }
            let m = Int.random(in: 0...live, using: &rng)
            var out = [UInt8](repeating: 0, count: m)
            let got = out.withUnsafeMutableBytes { q.read(into: $0) }
            XCTAssertEqual(got, m)
            for b in out {
                XCTAssertEqual(b, want)
                if b != want { return }
                want &+= 1
            }
            live -= m
            XCTAssertEqual(q.count, live)
        }
    }

    /// While what is held stays under the capacity reserved, the storage never grows: the live
    /// bytes move to the front instead (before an append that would not fit).
    func testNoGrowthWhileSmall() {
        var q = ByteQueue()
        q.reserveCapacity(1 << 16)
        let cap = q.capacity
        let chunk = [UInt8](repeating: 7, count: 1000)
        for _ in 0..<5_000 {
            chunk.withUnsafeBytes { q.append($0) }
            q.consume(q.count > 20_000 ? 1500 : 500)
        }
        XCTAssertEqual(q.capacity, cap, "grew while holding at most ~21 KB of a \(cap)-byte storage")
        XCTAssertLessThanOrEqual(q.count, 21_000)
        // Kept bytes read back as they were queued: the peek shows exactly `count` bytes.
        q.withUnsafeReadableBytes { XCTAssertEqual($0.count, q.count); XCTAssertTrue($0.allSatisfy { $0 == 7 }) }
    }
}
