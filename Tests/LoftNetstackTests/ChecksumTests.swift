import CLwIP
import LoftCore
import XCTest

/// lwIP's checksum, replaced by clwip.c's eight-bytes-per-step one: the same value as a
/// byte-pair reference for every length and alignment, and the same as LoftCore's.
final class LwIPChecksumTests: XCTestCase {
    /// The folded one's-complement sum of 16-bit words in memory order (what lwIP's own did).
    func reference(_ b: ArraySlice<UInt8>) -> UInt16 {
        var s: UInt32 = 0
        var i = b.startIndex
        while i + 1 < b.endIndex {
            s += UInt32(UInt16(b[i]) | UInt16(b[i + 1]) << 8)   // memory order on little-endian
            i += 2
        }
        if i < b.endIndex { s += UInt32(b[i]) }
        while s > 0xFFFF { s = (s & 0xFFFF) + (s >> 16) }
        return UInt16(s)
    }

    func testMatchesReferenceAtEveryAlignmentAndLength() {
        var rng = SystemRandomNumberGenerator()
        let random = (0..<70_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let ones = [UInt8](repeating: 0xFF, count: 70_000)
        for data in [random, ones] {
            for length in Array(0...70) + [255, 1499, 1500, 32_767, 65_535, 65_536, 69_000] {
                for offset in 0..<8 {
                    let slice = data[offset ..< offset + length]
                    let got = slice.withUnsafeBytes { clwip_checksum($0.baseAddress, Int32(length)) }
                    XCTAssertEqual(got, reference(slice), "length \(length) offset \(offset)")
                    // LoftCore's checksum is the big-endian view of the same sum, complemented.
                    let core = slice.withUnsafeBytes { InternetChecksum.of($0) }
                    let folded = ~core
                    XCTAssertTrue(UInt16(bigEndian: got) == folded || (got == 0 && folded == 0xFFFF) || (got == 0xFFFF && folded == 0),
                                  "length \(length) offset \(offset): lwIP \(got) LoftCore \(core)")
                }
            }
        }
        XCTAssertEqual(clwip_checksum(nil, 0), 0)
    }
}
