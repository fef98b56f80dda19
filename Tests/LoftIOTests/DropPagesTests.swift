import Glibc
import LoftCore
import XCTest
@testable import LoftIO

/// Syscall.dropPages: the whole pages inside the range read as zeros afterwards; the bytes
/// around them (partial pages at both ends, outside the range) keep their values, and the
/// memory stays usable (written again, freed by malloc as usual).
final class DropPagesTests: XCTestCase {
    func testWholePagesInsideTheRangeAreZeroedTheRestKept() {
        let size = 1 << 20
        let p = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        defer { p.deallocate() }
        memset(p, 0xAB, size)
        let from = 100_000, count = 700_000
        Syscall.dropPages(p + from, count)
        let page = Syscall.pageSize
        let base = Int(bitPattern: p)
        let lo = ((base + from + page - 1) & ~(page - 1)) - base
        let hi = ((base + from + count) & ~(page - 1)) - base
        XCTAssertLessThan(lo, hi)
        let b = p.assumingMemoryBound(to: UInt8.self)
        for i in stride(from: 0, to: size, by: 97) + [lo - 1, lo, hi - 1, hi] {
            XCTAssertEqual(b[i], lo <= i && i < hi ? 0 : 0xAB, "byte \(i) (dropped \(lo)..<\(hi))")
        }
        memset(p + lo, 0xCD, hi - lo)       // the dropped pages take writes again
        XCTAssertEqual(b[lo], 0xCD)
        Syscall.dropPages(p, 10)            // less than a page: nothing
        Syscall.dropPages(p, 0)
        XCTAssertEqual(b[0], 0xAB)
    }
}
