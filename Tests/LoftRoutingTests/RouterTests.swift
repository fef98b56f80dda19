import XCTest
import LoftCore
@testable import LoftRouting
import LoftTestSupport

final class RouterTests: XCTestCase {
    let direct = TestOutbound(name: "direct")
    let home = TestOutbound(name: "home")

    func req(_ dst: String, _ port: UInt16, _ net: FlowNetwork = .tcp) -> FlowRequest {
        FlowRequest(network: net, source: Endpoint(IPAddress("198.18.0.1")!, 40000), destination: .ip(Endpoint(IPAddress(dst)!, port)))
    }

    func name(_ m: RouteMatch) -> String {
        switch m.decision {
        case .outbound(let o): return o.name
        case .drop(let r): return r ? "drop-reset" : "drop"
        }
    }

    func testFirstMatchWinsThenDefault() throws {
        let rules = [
            Rule(action: .drop(reset: false), to: [IPPrefix("198.18.99.0/24")!]),
            Rule(action: .direct, to: [IPPrefix("198.18.0.0/15")!]),
            Rule(action: .via(outbound: "home"), to: [IPPrefix("0.0.0.0/0")!, IPPrefix("::/0")!]),
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

    /// A sniffed name beside the address: `domains` rules match the name, `to` rules the
    /// address; a name can decide only where a `domains` rule comes before the address's rule.
    func testSniffedNameAndAddress() throws {
        let rules = [
            Rule(action: .drop(reset: false), to: [IPPrefix("198.18.99.0/24")!]),
            Rule(action: .via(outbound: "home"), ports: [443...443], domains: ["*.example.org"]),
            Rule(action: .direct, to: [IPPrefix("198.18.0.0/15")!]),
        ]
        let r = try Router(rules: rules, defaultAction: .drop(reset: true), outbounds: ["direct": direct, "home": home])
        var q = req("198.18.1.2", 443)
        XCTAssertTrue(r.nameMayDecide(q))
        XCTAssertFalse(r.nameMayDecide(req("198.18.99.7", 443)), "the drop by address comes first")
        XCTAssertFalse(r.nameMayDecide(req("198.18.1.2", 80)), "the domains rule wants port 443")
        XCTAssertEqual(r.rules.map(\.matches), [0, 0, 0], "asking counts nothing")
        XCTAssertEqual(name(r.route(q)), "direct")
        q.name = "www.Example.org"
        XCTAssertEqual(name(r.route(q)), "home")
        q.name = "example.com"
        XCTAssertEqual(name(r.route(q)), "direct")
        let none = try Router(rules: [Rule(action: .direct, to: [IPPrefix("0.0.0.0/0")!])], defaultAction: .direct,
                              outbounds: ["direct": direct, "home": home])
        XCTAssertFalse(none.nameMayDecide(req("198.18.1.2", 443)), "no domains rule")
        try none.reload(rules: rules, defaultAction: .direct)
        XCTAssertTrue(none.nameMayDecide(req("198.18.1.2", 443)), "reloaded with one")
        try r.reload(rules: [], defaultAction: .direct)
        XCTAssertFalse(r.nameMayDecide(req("198.18.1.2", 443)), "reloaded without")
    }

    func testPortsNetworkAndMappedAddresses() throws {
        let rules = [Rule(action: .drop(reset: false), to: [IPPrefix("198.18.1.0/24")!], ports: [53...53, 8000...8100], network: "udp")]
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

final class PrefixSetTests: XCTestCase {
    func testMembershipAndMerging() {
        let set = PrefixSet(["198.18.0.0/24", "198.18.1.0/24", "198.18.0.128/25", "10.0.0.0/8", "fd00::/16", "fd00:1::/32"].map { IPPrefix($0)! })
        XCTAssertEqual(set.rangeCount, 3)  // 198.18.0.0-198.18.1.255, 10/8, fd00::/16
        XCTAssertTrue(set.contains(IPAddress("198.18.1.255")!))
        XCTAssertFalse(set.contains(IPAddress("198.18.2.0")!))
        XCTAssertTrue(set.contains(IPAddress("10.255.255.255")!))
        XCTAssertFalse(set.contains(IPAddress("11.0.0.0")!))
        XCTAssertTrue(set.contains(IPAddress("fd00:ffff::1")!))
        XCTAssertFalse(set.contains(IPAddress("fd01::")!))
        XCTAssertTrue(PrefixSet([IPPrefix("0.0.0.0/0")!]).contains(IPAddress("255.255.255.255")!))
        XCTAssertTrue(PrefixSet([IPPrefix("::/0")!]).contains(IPAddress("ffff::1")!))
        XCTAssertFalse(PrefixSet([IPPrefix("::/0")!]).contains(IPAddress("1.2.3.4")!))
    }

    func testAgreesWithLinearScanOnRandomPrefixes() {
        var rng = SystemRandomNumberGenerator()
        var prefixes: [IPPrefix] = []
        for _ in 0..<2000 {
            let a = UInt32.random(in: 0...UInt32.max, using: &rng)
            prefixes.append(IPPrefix(.v4(a), Int.random(in: 8...32, using: &rng))!)
        }
        let set = PrefixSet(prefixes)
        for _ in 0..<5000 {
            let probe = IPAddress.v4(UInt32.random(in: 0...UInt32.max, using: &rng))
            XCTAssertEqual(set.contains(probe), prefixes.contains { $0.contains(probe) }, "\(probe)")
        }
        // Probes inside known prefixes.
        for p in prefixes.prefix(500) { XCTAssertTrue(set.contains(p.address)) }
    }

    func testHundredThousandPrefixesBuildQuickly() {
        var prefixes: [IPPrefix] = []
        prefixes.reserveCapacity(100_000)
        for i in 0..<100_000 { prefixes.append(IPPrefix(.v4(UInt32(i) << 8), 24)!) }
        let set = PrefixSet(prefixes)
        XCTAssertEqual(set.rangeCount, 1)
        XCTAssertTrue(set.contains(IPAddress("0.1.134.159")!))
        XCTAssertFalse(set.contains(IPAddress("1.134.160.0")!))
    }
}

final class ShadowTests: XCTestCase {

    func testShadowedRulesAreFound() {
        let rules = [
            Rule(action: .direct, to: [IPPrefix("198.18.0.0/15")!]),
            Rule(action: .drop(reset: false), to: [IPPrefix("198.18.99.0/24")!]),       // shadowed by 0
            Rule(action: .drop(reset: false), to: [IPPrefix("198.18.99.0/24")!], network: "tcp"), // shadowed by 0
            Rule(action: .drop(reset: false), to: [IPPrefix("203.0.113.0/24")!]),       // not
            Rule(action: .direct, domains: ["*.example.com"]),
            Rule(action: .drop(reset: false), domains: ["a.example.com", "*.b.example.com"]), // by 4
            Rule(action: .drop(reset: false), domains: ["badexample.com"]),             // not
            Rule(action: .direct, ports: [80...80]),
            Rule(action: .drop(reset: false), to: [IPPrefix("192.0.2.0/24")!], ports: [80...80]), // by 7
            Rule(action: .drop(reset: false), to: [IPPrefix("192.0.2.0/24")!], ports: [80...81]), // not
        ]
        let found = Router.shadowed(rules).map { "\($0.0)<\($0.1)" }
        XCTAssertEqual(found, ["1<0", "2<0", "5<4", "8<7"])
    }

    func testIcmpMatchesOnlyRulesWithoutPorts() throws {
        let rules = [
            Rule(action: .drop(reset: false), to: [IPPrefix("198.18.1.0/24")!], ports: [0...65535]),
            Rule(action: .drop(reset: true), to: [IPPrefix("198.18.1.0/24")!]),
        ]
        let r = try Router(rules: rules, defaultAction: .direct, outbounds: ["direct": TestOutbound(name: "direct")])
        let icmp = FlowRequest(network: .icmp, source: Endpoint(IPAddress("198.18.0.1")!, 0), destination: .ip(Endpoint(IPAddress("198.18.1.2")!, 0)))
        let m = r.route(icmp)
        guard case .drop(reset: true) = m.decision else { return XCTFail("ICMP should match the port-less rule") }
        XCTAssertEqual(m.rule, 1)
    }
}
