import LoftCore
@testable import LoftProtocol
import XCTest

/// quic: the OPEN / OPEN_OK / OPEN_FAIL at the start of a flow's own QUIC stream.
final class FlowPreambleTests: XCTestCase {
    private func open(_ b: [UInt8]) -> FlowPreamble.Open { b.withUnsafeBytes { FlowPreamble.parseOpen($0) } }
    private func answer(_ b: [UInt8]) -> FlowPreamble.Answer { b.withUnsafeBytes { FlowPreamble.parseAnswer($0) } }

    func testOpenReadPieceByPiece() throws {
        let dest = Destination.domain("example.test", 443)
        let bytes = try XCTUnwrap(FlowPreamble.open(dest))
        XCTAssertEqual(open([]), .needMore(8))
        XCTAssertEqual(open(Array(bytes[0..<5])), .needMore(3))
        XCTAssertEqual(open(Array(bytes[0..<8])), .needMore(bytes.count - 8))
        XCTAssertEqual(open(Array(bytes[0..<10])), .needMore(bytes.count - 10))
        XCTAssertEqual(open(bytes), .open(network: .tcp, destination: dest))
        XCTAssertEqual(bytes[0], 0x10)
        XCTAssertEqual(Array(bytes[2..<6]), [0, 0, 0, 1], "stream field 1")
    }

    func testOpenRefusals() throws {
        var bytes = try XCTUnwrap(FlowPreamble.open(.ip(Endpoint(IPAddress("198.18.1.2")!, 80))))
        var other = bytes
        other[5] = 3
        guard case .malformed(.badStreamID) = open(other) else { return XCTFail("stream field 3 taken") }
        guard case .malformed = open([0x13, 0, 0, 0, 0, 1, 0, 1, 9]) else { return XCTFail("DATA taken as OPEN") }
        guard case .malformed = open([0x10, 0, 0, 0, 0, 1, 0xFF, 0xFF]) else { return XCTFail("a 64 KiB OPEN not refused on its header") }
        bytes[8] = 99
        guard case .malformed = open(bytes) else { return XCTFail("network 99 taken") }
        guard case .malformed = open([0x10, 0x01, 0, 0, 0, 1, 0, 7]) else { return XCTFail("flags taken") }
    }

    func testAnswers() {
        XCTAssertEqual(answer(Array(FlowPreamble.openOK)), .accepted)
        XCTAssertEqual(answer(Array(FlowPreamble.openOK.prefix(3))), .needMore(5))
        let fail = FlowPreamble.openFail(.notAllowed)
        XCTAssertEqual(answer(Array(fail.prefix(8))), .needMore(1))
        XCTAssertEqual(answer(fail), .refused(.notAllowed))
        guard case .malformed = answer([0x12, 0, 0, 0, 0, 1, 0, 1, 0]) else { return XCTFail("reason 0 taken") }
        guard case .malformed = answer([0x11, 0, 0, 0, 0, 2, 0, 0]) else { return XCTFail("stream field 2 taken") }
        guard case .malformed = answer([0x13, 0, 0, 0, 0, 1, 0, 2]) else { return XCTFail("DATA taken as an answer") }
    }
}
