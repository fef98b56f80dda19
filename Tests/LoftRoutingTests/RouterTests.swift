import XCTest
import LoftConfig
import LoftCore
@testable import LoftRouting

final class StubOutbound: Outbound {
    let name: String
    init(_ name: String) { self.name = name }
    func openStream(to destination: Destination, events: StreamEvents) -> StreamConnection { fatalError("not used") }
    func openAssociation(events: DatagramEvents) -> DatagramAssociation? { nil }
}

final class RouterTests: XCTestCase {
    let pos = SourcePosition(file: "t.yaml", line: 1, column: 1)
    let direct = StubOutbound("direct")
    let home = StubOutbound("home")

    func req(_ dst: String, _ port: UInt16, _ net: FlowNetwork = .tcp) -> FlowRequest {
        FlowRequest(network: net, source: Endpoint(IPAddress("198.18.0.1")!, 40000), destination: .ip(Endpoint(IPAddress(dst)!, port)))
    }

    func name(_ d: RouteDecision) -> String {
        switch d {
        case .outbound(let o): return o.name
        case .drop(let r): return r ? "drop-reset" : "drop"
        }
    }

    func testFirstMatchWinsThenDefault() throws {
        let rules = [
            RuleSettings(action: .drop(reset: false), to: [IPPrefix("198.18.99.0/24")!], position: pos),
            RuleSettings(action: .direct, to: [IPPrefix("198.18.0.0/15")!], position: pos),
            RuleSettings(action: .via(outbound: "home"), to: [IPPrefix("0.0.0.0/0")!, IPPrefix("::/0")!], position: pos),
        ]
        let r = try Router(rules: rules, defaultAction: .drop(reset: true), outbounds: ["direct": direct, "home": home])
        XCTAssertEqual(name(r.route(req("198.18.99.7", 80))), "drop")
        XCTAssertEqual(name(r.route(req("198.18.1.2", 80))), "direct")
        XCTAssertEqual(name(r.route(req("203.0.113.9", 80))), "home")
        XCTAssertEqual(name(r.route(req("fd00::9", 80))), "home")
        XCTAssertEqual(r.rules.map(\.matches), [1, 1, 2])
        let domain = FlowRequest(network: .tcp, source: Endpoint(IPAddress("127.0.0.1")!, 1), destination: .domain("x.test", 80))
        XCTAssertEqual(name(r.route(domain)), "drop-reset")
        XCTAssertEqual(r.defaultMatches, 1)
    }

    func testPortsNetworkAndMappedAddresses() throws {
        let rules = [RuleSettings(action: .drop(reset: false), to: [IPPrefix("198.18.1.0/24")!], ports: [53...53, 8000...8100], network: "udp", position: pos)]
        let r = try Router(rules: rules, defaultAction: .direct, outbounds: ["direct": direct])
        XCTAssertEqual(name(r.route(req("198.18.1.2", 53, .udp))), "drop")
        XCTAssertEqual(name(r.route(req("198.18.1.2", 8050, .udp))), "drop")
        XCTAssertEqual(name(r.route(req("198.18.1.2", 53, .tcp))), "direct")
        XCTAssertEqual(name(r.route(req("198.18.1.2", 8101, .udp))), "direct")
        XCTAssertEqual(name(r.route(req("::ffff:198.18.1.2", 53, .udp))), "drop")
    }

    func testDomainSuffixOnLabelBoundaries() {
        XCTAssertTrue(Router.domain("example.com", matches: "Example.COM."))
        XCTAssertFalse(Router.domain("example.com", matches: "www.example.com"))
        XCTAssertTrue(Router.domain("*.example.com", matches: "example.com"))
        XCTAssertTrue(Router.domain("*.example.com", matches: "a.b.example.com"))
        XCTAssertFalse(Router.domain("*.example.com", matches: "badexample.com"))
    }

    func testUnknownOutboundIsAnError() {
        XCTAssertThrowsError(try Router(rules: [], defaultAction: .via(outbound: "nope"), outbounds: ["direct": direct]))
    }
}
