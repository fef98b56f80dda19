import XCTest
@testable import LoftControl

final class ControlRequestTests: XCTestCase {
    func testCommands() throws {
        XCTAssertEqual(try ControlRequest.parse("status").get(), .status(.text))
        XCTAssertEqual(try ControlRequest.parse("status json").get(), .status(.json))
        XCTAssertEqual(try ControlRequest.parse("status text=120").get(), .status(.textWidth(120)))
        XCTAssertEqual(try ControlRequest.parse("flows").get(), .flows(json: false, order: .bytes))
        XCTAssertEqual(try ControlRequest.parse("flows json sort=age").get(), .flows(json: true, order: .age))
        XCTAssertEqual(try ControlRequest.parse("metrics").get(), .metrics)
        XCTAssertEqual(try ControlRequest.parse("path-changed").get(), .pathChanged)
        XCTAssertEqual(try ControlRequest.parse("reload").get(), .reload)
    }

    func testRefusals() {
        for line in ["", "status text=39", "status text=1001", "status json extra", "flows sort=name", "flows x", "stop"] {
            guard case .failure = ControlRequest.parse(line) else { return XCTFail("accepted \"\(line)\"") }
        }
        XCTAssertNil(ControlServer.requestLine([0x73, 0x00]))
        XCTAssertNil(ControlServer.requestLine([0xff]))
        XCTAssertEqual(ControlServer.requestLine(Array("status\r".utf8)), "status")
    }

    func testMetricsAnswer() {
        let ok = MetricsServer.answer(Array("GET /metrics HTTP/1.1\r\nHost: x".utf8)) { "loft_up 1\n" }
        XCTAssertTrue(String(decoding: ok, as: UTF8.self).hasPrefix("HTTP/1.1 200 OK\r\n"))
        let bad = MetricsServer.answer(Array("GET /other HTTP/1.1".utf8)) { "" }
        XCTAssertTrue(String(decoding: bad, as: UTF8.self).hasPrefix("HTTP/1.1 404"))
    }
}
