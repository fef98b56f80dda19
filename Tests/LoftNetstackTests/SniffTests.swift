import LoftCore
import LoftIO
@testable import LoftNetstack
import XCTest

/// Routes by name when a flow has one (as a `domains` rule would): `named` for the name
/// `match`, `other` for everything else; a name may decide every flow.
final class NameRouter: FlowRouter {
    let named: Outbound, other: Outbound, match: String
    var requests: [FlowRequest] = []
    init(named: Outbound, other: Outbound, match: String) { self.named = named; self.other = other; self.match = match }
    func route(_ request: FlowRequest) -> RouteMatch {
        requests.append(request)
        return request.name == match ? RouteMatch(.outbound(named), rule: 0) : RouteMatch(.outbound(other), rule: -1)
    }
    func nameMayDecide(_ request: FlowRequest) -> Bool { true }
}

/// Sniffing (docs/sniffing.md): lwIP accepts at once, the outbound is chosen and dialled after
/// the app's first bytes, which then reach it intact.
final class SniffTests: XCTestCase {
    /// curl's ClientHello for www.example.org (LoftSniffTests has the same capture).
    static let hello: [UInt8] = {
        let s = "1603010200010001fc030330e29fe4b40827995423f46bfecc859a498b2ea5506a92ae92fa274b9730f773207d2b48edd240e81b0647a3d887aa25b33cd4333befb98d07795f2d0443501284003e130213031301c02cc030009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d003c0035002f00ff0100017500000014001200000f7777772e6578616d706c652e6f7267000b000403000102000a00160014001d0017001e00190018010001010102010301040010000e000c02683208687474702f312e31001600000017000000310000000d002a0028040305030603080708080809080a080b080408050806040105010601030303010302040205020602002b0009080304030303020301002d00020101003300260024001d00206e3dfa9a35eee19f2d7e5efc5a6c13af864c396ccb2b12f1e13cb5dd91316265001500ae000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
        var out: [UInt8] = []
        var i = s.startIndex
        while i < s.endIndex { let j = s.index(i, offsetBy: 2); out.append(UInt8(s[i..<j], radix: 16)!); i = j }
        return out
    }()
    let tls = Endpoint(IPAddress("93.184.216.34")!, 443)

    func sniffing(waitMs: UInt64 = 300) -> Netstack.Settings {
        var s = Netstack.Settings()
        s.sniff.enabled = true
        s.sniff.waitMs = waitMs
        return s
    }

    /// SYN and ACK: lwIP's handshake completes with no outbound opened.
    func handshake(_ h: Harness, _ app: inout AppTCP, file: StaticString = #filePath, line: UInt = #line) {
        h.send(app.syn())
        h.deliver(to: &app)
        XCTAssertTrue(app.synAckSeen, "lwIP answers the SYN at once", file: file, line: line)
        XCTAssertEqual(h.outbound.streams.count, 0, "no outbound before the first bytes", file: file, line: line)
        h.send(app.ackPacket())
    }

    func testHelloInTwoSegmentsIsDialledByName() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: tls)
        handshake(h, &app)
        h.send(app.data(Array(Self.hello[0..<100])))
        XCTAssertEqual(h.outbound.streams.count, 0, "a part of the hello: still waiting")
        h.send(app.data(Array(Self.hello[100...])))
        XCTAssertEqual(h.outbound.streams.count, 1)
        guard let stream = h.outbound.streams.first else { return }
        XCTAssertEqual(stream.destination, .domain("www.example.org", 443))
        XCTAssertEqual(h.netstack.counters.sniffed, 1)
        let row = h.netstack.flowSnapshot().first
        XCTAssertEqual(row?.name, "www.example.org")
        XCTAssertEqual(row?.nameSource, "sni")
        // Connected: the hello goes out whole, and the answer comes back.
        stream.connect()
        h.turns(3)
        assertBytes(stream.written, Self.hello)
        stream.supply(pattern(3000))
        h.pumpToApp(&app)
        assertBytes(app.received, pattern(3000))
    }

    /// Where no name can matter (no rule by name, an outbound that dials addresses) the flow
    /// is not sniffed: the SYN is held until the outbound connects, as without sniffing.
    func testNotSniffedWhereNoNameMatters() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: tls)
        h.send(app.syn())
        XCTAssertEqual(h.outbound.streams.count, 1, "dialled at the SYN")
        h.deliver(to: &app)
        XCTAssertFalse(app.synAckSeen)
        XCTAssertEqual(h.outbound.streams.first?.destination, .ip(tls))
    }

    func testNameDecidesTheRoute() {
        let named = TestOutbound(), other = TestOutbound()
        named.dialsSniffedNames = true
        let router = NameRouter(named: named, other: other, match: "www.example.org")
        defer { XCTAssertEqual(router.requests.count, 2) }
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        let ns = Netstack(loop: h.loop, router: router, settings: sniffing())
        let writer = TestWriter()
        let input = ns.addInput(mtu: 1500, writer: writer)
        func pump() {
            for t in named.streams + other.streams { t.deliverReadiness() }
            ns.afterEvents(); h.loop.runOnce(timeoutMs: 0); ns.afterEvents()
        }
        func feed(_ p: [UInt8]) { p.withUnsafeBytes { ns.input($0, from: input) }; pump() }
        var app = AppTCP(local: appV4, remote: tls)
        feed(app.syn())
        for p in writer.packets { if let s = Segment.parse(p) { app.receive(s) } }
        writer.packets = []
        feed(app.ackPacket())
        feed(app.data(Self.hello))
        XCTAssertEqual(router.requests.count, 1, "routed once, after the bytes")
        XCTAssertEqual(router.requests.first?.name, "www.example.org")
        XCTAssertEqual(router.requests.first?.destination, .ip(tls))
        XCTAssertEqual(named.streams.first?.destination, .domain("www.example.org", 443))
        XCTAssertEqual(other.streams.count, 0)
        // Another name (HTTP Host) goes to the outbound that takes none: the address is kept.
        var app2 = AppTCP(local: Endpoint(IPAddress("10.0.0.2")!, 40001), remote: remoteV4)
        feed(app2.syn())
        for p in writer.packets { if let s = Segment.parse(p), app2.owns(s) { app2.receive(s) } }
        writer.packets = []
        feed(app2.ackPacket())
        let head = Array("GET / HTTP/1.1\r\nHost: Example.ORG\r\n\r\n".utf8)
        feed(app2.data(head))
        XCTAssertEqual(other.streams.first?.destination, .ip(remoteV4))
        let row = ns.flowSnapshot().first { $0.source == app2.local }
        XCTAssertEqual(row?.name, "example.org")
        XCTAssertEqual(row?.nameSource, "host")
        other.streams.first?.connect()
        for _ in 0..<3 { pump() }
        assertBytes(other.streams.first?.written ?? [], head)
        ns.shutdown()
    }

    func testServerFirstRoutesByAddressAfterTheWait() {
        let h = Harness(settings: sniffing(waitMs: 300), clock: VirtualClock())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: Endpoint(IPAddress("93.184.216.34")!, 2222))
        handshake(h, &app)
        h.loop.advance(by: .milliseconds(200))
        h.turn()
        XCTAssertEqual(h.outbound.streams.count, 0, "still within the wait")
        h.loop.advance(by: .milliseconds(150))
        h.turn()
        XCTAssertEqual(h.outbound.streams.count, 1)
        XCTAssertEqual(h.outbound.streams.first?.destination, .ip(app.remote))
        XCTAssertEqual(h.netstack.counters.sniffTimedOut, 1)
        guard let stream = h.outbound.streams.first else { return }
        stream.connect()
        stream.supply(Array("SSH-2.0-x\r\n".utf8))
        h.pumpToApp(&app)
        XCTAssertEqual(app.received, Array("SSH-2.0-x\r\n".utf8))
    }

    func testSkippedPortHoldsTheSYNAsBefore() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: Endpoint(IPAddress("93.184.216.34")!, 22))
        h.send(app.syn())
        XCTAssertEqual(h.outbound.streams.count, 1, "port 22: dialled at the SYN")
        h.deliver(to: &app)
        XCTAssertFalse(app.synAckSeen, "the SYN is held until the outbound connects")
        XCTAssertEqual(h.outbound.streams.first?.destination, .ip(app.remote))
    }

    func testOtherBytesAreNotSniffableAndGoAtOnce() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: remoteV4)
        handshake(h, &app)
        h.send(app.data([0, 0, 0, 8, 4, 0xD2, 0x16, 0x2F]))
        XCTAssertEqual(h.outbound.streams.count, 1)
        XCTAssertEqual(h.netstack.counters.notSniffable, 1)
        XCTAssertNil(h.netstack.flowSnapshot().first?.name)
    }

    func testAppResetWhileWaitingEndsTheFlow() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: tls)
        handshake(h, &app)
        h.send(app.data(Array(Self.hello[0..<50])))
        XCTAssertEqual(h.netstack.tcpFlowCount, 1)
        h.send(app.rst())
        h.turns(2)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(h.outbound.streams.count, 0)
    }

    func testRefusedAfterSniffingResetsTheApp() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: tls)
        handshake(h, &app)
        h.send(app.data(Self.hello))
        guard let stream = h.outbound.streams.first else { return XCTFail("no outbound") }
        stream.fail(.refused)
        h.turns(2)
        h.deliver(to: &app)
        XCTAssertTrue(app.rstReceived)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
    }
}
