import LoftCore
import XCTest
@testable import LoftDirect
@testable import LoftOutbounds

/// Each outbound type's `loft status` row, read through the `Outbound` protocol only, after
/// real flows went through it.
final class OutboundStatusTests: XCTestCase {
    func testDirectRowCountsAFlowThroughIt() throws {
        let sc = try Scenario()
        let server = TCPEchoServer(loop: sc.loop)
        let direct: Outbound = DirectOutbound(name: "lan", loop: sc.loop)
        let p = StreamProbe()
        p.toSend = pattern(3000, seed: 5)
        var whileOpen: OutboundStatus?
        let ok = sc.run([
            { p.conn = direct.openStream(to: .ip(server.endpoint), events: p); return true },
            { p.received.count == p.toSend.count || p.failure != nil },
            { whileOpen = direct.status; p.conn?.close(); return true },
            { server.open == 0 },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): received \(p.received.count)")
        XCTAssertNil(p.failure)
        let open = try XCTUnwrap(whileOpen)
        XCTAssertEqual(open.name, "lan")
        XCTAssertEqual(open.type, "direct")
        XCTAssertEqual(open.state, "ready")
        XCTAssertEqual(open.flows, 1)
        XCTAssertEqual(open.liveFlows, 1)
        let s = direct.status
        XCTAssertEqual(s.flows, 1)
        XCTAssertEqual(s.liveFlows, 0, "closed: no longer live")
        XCTAssertEqual(s.bytesUp, 3000)
        XCTAssertEqual(s.bytesDown, 3000)
        XCTAssertEqual(s.detail, "")
        XCTAssertEqual(s.extra.map(\.0), ["udp-port-unreachable"])
        XCTAssertEqual(s.counter("udp-port-unreachable"), 0)
        XCTAssertNil(s.counter(OutboundStatus.holdDrops), "only a holder keeps hold drops")
    }

    func testDropRowCountsARefusedFlow() throws {
        let sc = try Scenario()
        let drop: Outbound = DropOutbound(name: "sink", loop: sc.loop)
        let p = StreamProbe()
        XCTAssertEqual(drop.status.flows, 0)
        let ok = sc.run([
            { p.conn = drop.openStream(to: .ip(Endpoint(loopback4, 9)), events: p); return true },
            { p.failure != nil || p.connected },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1)")
        XCTAssertEqual(p.failure, .notAllowed)
        XCTAssertNil(drop.openAssociation(events: DatagramProbe()), "UDP is refused before it exists")
        let s = drop.status
        XCTAssertEqual(s.name, "sink")
        XCTAssertEqual(s.type, "drop")
        XCTAssertEqual(s.state, "ready")
        XCTAssertEqual(s.flows, 1, "the refused flow")
        XCTAssertEqual(s.liveFlows, 0)
        XCTAssertEqual(s.bytesUp, 0)
        XCTAssertEqual(s.bytesDown, 0)
        XCTAssertTrue(s.extra.isEmpty)
    }

    /// A holder whose front cannot be reached, with hold: held, and the flow it refused is a
    /// hold drop in its row's counters.
    func testHeldHolderRowCarriesItsHoldDrops() throws {
        let sc = try Scenario()
        let holder = try sc.holder(port: closedPort(), hold: true, minBackoffMs: 60_000, maxBackoffMs: 60_000)
        let o: Outbound = holder
        XCTAssertEqual(o.status.state, "idle")
        holder.start()
        let p = StreamProbe()
        let ok = sc.run([
            { o.status.state == "held" },
            { p.conn = o.openStream(to: .ip(Endpoint(loopback4, 9)), events: p); return true },
            { p.failure != nil || p.connected },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(holder.stats)")
        XCTAssertEqual(p.failure, .networkUnreachable)
        let s = o.status
        XCTAssertEqual(s.name, "home")
        XCTAssertEqual(s.type, "loft")
        XCTAssertEqual(s.state, "held")
        XCTAssertEqual(s.flows, 0, "nothing was opened on a session")
        XCTAssertEqual(s.liveFlows, 0)
        XCTAssertTrue(s.detail.contains("last error: "), s.detail)
        XCTAssertEqual(s.extra.map(\.0), ["dials", "sessions", "resumes", "carrier-losses", "path-changes", "migrations",
                                          "flow-streams", "datagram-frames-out", "datagram-frames-in",
                                          "hold-drops", "fallback-flows", "streams-reset", "stream-limit-refusals",
                                          "sessions-parked", "resumes-with-streams", "replayed-bytes", "streams-lost"])
        XCTAssertEqual(s.counter("dials"), 1)
        XCTAssertEqual(s.counter(OutboundStatus.holdDrops), 1)
        XCTAssertEqual(s.counter("fallback-flows"), 0)
        holder.stop()
    }
}
