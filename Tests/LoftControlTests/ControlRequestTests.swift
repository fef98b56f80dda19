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

    func testMetricsScrape() {
        XCTAssertEqual(MetricsServer.scrape(Array("GET /metrics HTTP/1.1\r\nHost: x".utf8)), .metrics(headOnly: false))
        XCTAssertEqual(MetricsServer.scrape(Array("HEAD /metrics?x=1 HTTP/1.0".utf8)), .metrics(headOnly: true))
        guard case .refused(let status, _) = MetricsServer.scrape(Array("GET /other HTTP/1.1".utf8)) else { return XCTFail() }
        XCTAssertEqual(status, "404 Not Found")
    }
}
