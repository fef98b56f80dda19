import LoftCore
import XCTest
@testable import LoftIO

/// DNSWire: the query c-ares builds, and its parsers on answers built by hand (the same bytes as
/// fuzz/corpus/dns_answer's seeds).
final class DNSWireTests: XCTestCase {
    func name(_ n: String) -> [UInt8] { n.split(separator: ".").flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) } + [0] }
    func header(_ id: UInt16, flags: UInt16, answers: UInt16) -> [UInt8] {
        [UInt8(id >> 8), UInt8(id & 0xFF), UInt8(flags >> 8), UInt8(flags & 0xFF), 0, 1, 0, UInt8(answers), 0, 0, 0, 0]
    }
    func record(type: UInt8, ttl: UInt8, _ data: [UInt8]) -> [UInt8] {
        [0xC0, 0x0C, 0, type, 0, 1, 0, 0, 0, ttl, 0, UInt8(data.count)] + data
    }

    func testQuery() {
        let q = DNSWire.query("svc.loft.test", type: .a, id: 0x1234)
        XCTAssertEqual(q, header(0x1234, flags: 0x0100, answers: 0) + name("svc.loft.test") + [0, 1, 0, 1])
        XCTAssertEqual(DNSWire.query("svc.loft.test", type: .aaaa, id: 7)?.suffix(4), [0, 28, 0, 1])
        XCTAssertNil(DNSWire.query(String(repeating: "a", count: 64) + ".test", type: .a, id: 1), "a label over 63 bytes")
    }

    func testAnswers() {
        let qa = name("svc.loft.test") + [0, 1, 0, 1]
        let a = header(0x1234, flags: 0x8180, answers: 2) + qa + record(type: 1, ttl: 200, [198, 19, 1, 1])
            + record(type: 1, ttl: 100, [198, 19, 1, 2])
        a.withUnsafeBytes {
            XCTAssertEqual(DNSWire.answer($0, type: .a, id: 0x1234),
                           .addresses([IPAddress("198.19.1.1")!, IPAddress("198.19.1.2")!], ttl: 100))
            XCTAssertEqual(DNSWire.answer($0, type: .a, id: 0x1235), .malformed, "another id")
            XCTAssertEqual(DNSWire.answer(UnsafeRawBufferPointer(rebasing: $0[0..<40]), type: .a, id: 0x1234), .malformed, "cut")
        }
        let query = header(0x1234, flags: 0x0100, answers: 0) + qa
        query.withUnsafeBytes { XCTAssertEqual(DNSWire.answer($0, type: .a, id: 0x1234), .malformed, "a query, not an answer") }
        let nx = header(9, flags: 0x8183, answers: 0) + qa
        nx.withUnsafeBytes { XCTAssertEqual(DNSWire.answer($0, type: .a, id: 9), .notFound) }
        let qaaaa = name("svc.loft.test") + [0, 28, 0, 1]
        let six = header(5, flags: 0x8180, answers: 1) + qaaaa + record(type: 28, ttl: 60, [0xFD, 0, 0, 1] + [UInt8](repeating: 0, count: 11) + [1])
        six.withUnsafeBytes {
            XCTAssertEqual(DNSWire.answer($0, type: .aaaa, id: 5), .addresses([IPAddress("fd00:1::1")!], ttl: 60))
        }
    }
}
