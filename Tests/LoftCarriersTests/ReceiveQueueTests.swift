@testable import LoftCarriers
import LoftQUIC
import XCTest

final class ReceiveQueueTests: XCTestCase {
    /// Random appends, in-place reads with partial consumes and drains, against
    /// a plain array: the bytes come out in order, whatever the growth and compaction.
    func testBytesComeOutInOrderThroughGrowthAndCompaction() {
        var q = ReceiveQueue()
        defer { q.release() }
        var model: [UInt8] = []
        var next: UInt8 = 0
        var out: [UInt8] = []
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<3000 {
            let n = Int.random(in: 0..<9000, using: &rng)
            var chunk = [UInt8](repeating: 0, count: n)
            for i in 0..<n { chunk[i] = next; next &+= 1 }
            chunk.withUnsafeBufferPointer { if n > 0 { q.append($0.baseAddress!, n) } }
            model += chunk
            XCTAssertEqual(q.available, model.count - out.count)
            switch Int.random(in: 0..<2, using: &rng) {
            case 0:
                let r = q.readable
                XCTAssertEqual(r.count, q.available)
                let take = Int.random(in: 0...r.count, using: &rng)
                out += r.prefix(take)
                q.consume(take)
            default:
                _ = q.drain(upTo: Int.random(in: 0..<20000, using: &rng)) { out += $0 }
            }
        }
        out += q.readable
        q.consume(q.available)
        XCTAssertEqual(q.available, 0)
        XCTAssertEqual(out, model)
        XCTAssertEqual(q.readable.count, 0)
    }

    func testEmptyQueueShowsNothingAndConsumeIsBounded() {
        var q = ReceiveQueue()
        XCTAssertEqual(q.readable.count, 0)
        q.consume(10)
        XCTAssertEqual(q.available, 0)
        let bytes: [UInt8] = [1, 2, 3]
        bytes.withUnsafeBufferPointer { q.append($0.baseAddress!, 3) }
        q.consume(100)
        XCTAssertEqual(q.available, 0, "consume takes at most what is there")
        bytes.withUnsafeBufferPointer { q.append($0.baseAddress!, 3) }
        XCTAssertEqual(Array(q.readable), bytes)
        q.release()
        XCTAssertEqual(q.available, 0)
    }
}
