import Glibc
import LoftCore
import LoftIO
import XCTest
@testable import LoftDirect
@testable import LoftOutbounds

/// The direct outbound against local echo servers on 127.0.0.1 and ::1.
final class DirectOutboundTests: XCTestCase {
    private func echo(_ address: IPAddress) throws {
        let sc = try Scenario()
        let server = TCPEchoServer(loop: sc.loop, address: address)
        let direct = DirectOutbound(loop: sc.loop)
        let p = StreamProbe()
        p.toSend = pattern(2 << 20, seed: 11)
        p.finishAfterSending = true
        let ok = sc.run([
            { p.conn = direct.openStream(to: .ip(server.endpoint), events: p); return true },
            { p.eof || p.failure != nil || p.readFailure != nil || p.writeBroken },
            { p.conn?.close(); return true },
            { server.open == 0 },
        ])
        XCTAssertTrue(ok, "\(address): stuck at step \(sc.failedStep ?? -1): sent \(p.sent) received \(p.received.count)")
        XCTAssertTrue(p.connected)
        XCTAssertNil(p.failure)
        XCTAssertNil(p.readFailure)
        XCTAssertFalse(p.writeBroken)
        XCTAssertEqual(p.received.count, p.toSend.count)
        XCTAssertTrue(p.received == p.toSend, "\(address): the echo is not byte-exact")
        XCTAssertEqual(p.overReads, 0)
        XCTAssertEqual(server.accepted, 1)
        XCTAssertEqual(server.bytesIn, p.toSend.count)
        XCTAssertEqual(server.eofs, 1)
        XCTAssertEqual(server.closedClean, 1)
        // Counted at the socket: every byte each way, one flow, none live once closed.
        let u = direct.usage
        XCTAssertEqual(u.flows, 1)
        XCTAssertEqual(u.liveFlows, 0)
        XCTAssertEqual(u.bytesUp, UInt64(p.toSend.count))
        XCTAssertEqual(u.bytesDown, UInt64(p.toSend.count))
    }

    func testEchoOverIPv4() throws { try echo(loopback4) }
    func testEchoOverIPv6() throws { try echo(loopback6) }

    private func refused(_ address: IPAddress) throws {
        let sc = try Scenario()
        let direct = DirectOutbound(loop: sc.loop)
        let p = StreamProbe()
        let port = closedPort(address)
        let ok = sc.run([
            { p.conn = direct.openStream(to: .ip(Endpoint(address, port)), events: p); return true },
            { p.failure != nil || p.connected },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1)")
        XCTAssertEqual(p.failure, .refused)
        XCTAssertFalse(p.connected)
        XCTAssertEqual(direct.usage.flows, 1)
        XCTAssertEqual(direct.usage.liveFlows, 0, "a refused flow is not live")
    }

    func testClosedPortIsRefusedOverIPv4() throws { try refused(loopback4) }
    func testClosedPortIsRefusedOverIPv6() throws { try refused(loopback6) }

    func testANameWithoutAResolverFails() throws {
        let sc = try Scenario()
        let direct = DirectOutbound(loop: sc.loop)
        let p = StreamProbe()
        let ok = sc.run([
            { p.conn = direct.openStream(to: .domain("localhost", 9), events: p); return true },
            { p.failure != nil || p.connected },
        ])
        XCTAssertTrue(ok)
        XCTAssertEqual(p.failure, .resolveFailed)
    }

    /// allowResolved: a name whose addresses are all refused fails a stream with notAllowed and
    /// drops a datagram; the same name resolves and connects without the filter.
    func testResolvedAddressesAreHeldToTheFilter() throws {
        let sc = try Scenario()
        let server = TCPEchoServer(loop: sc.loop)
        let udp = UDPEchoServer(loop: sc.loop)
        let resolver = try Resolver(loop: sc.loop)
        let strict = DirectOutbound(loop: sc.loop, resolver: resolver, allowResolved: { !$0.isLoopback })
        let open = DirectOutbound(loop: sc.loop, resolver: resolver)
        let refused = StreamProbe()
        let allowed = StreamProbe()
        let d = DatagramProbe()
        var assoc: DatagramAssociation?
        let ok = sc.run([
            {
                refused.conn = strict.openStream(to: .domain("localhost", server.endpoint.port), events: refused)
                allowed.conn = open.openStream(to: .domain("localhost", server.endpoint.port), events: allowed)
                assoc = strict.openAssociation(events: d)
                _ = ([7] as [UInt8]).withUnsafeBytes { assoc?.send($0, to: .domain("localhost", udp.endpoint.port)) }
                return true
            },
            { refused.failure != nil && allowed.connected },
            sc.pause(300),
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1)")
        XCTAssertEqual(refused.failure, .notAllowed)
        XCTAssertNil(allowed.failure)
        XCTAssertEqual(udp.datagrams, 0, "a datagram to a refused address is dropped")
        XCTAssertTrue(d.received.isEmpty)
        allowed.conn?.close()
        assoc?.close()
    }

    /// reset(): the destination sees ECONNRESET.
    func testResetReachesTheDestination() throws {
        let sc = try Scenario()
        let server = TCPEchoServer(loop: sc.loop)
        let direct = DirectOutbound(loop: sc.loop)
        let p = StreamProbe()
        p.toSend = pattern(100)
        let ok = sc.run([
            { p.conn = direct.openStream(to: .ip(server.endpoint), events: p); return true },
            { p.received.count == 100 },
            { p.conn?.reset(); return true },
            { server.open == 0 },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1)")
        XCTAssertEqual(server.resets, 1)
        XCTAssertEqual(server.eofs, 0)
    }

    /// One association, both families: each reply names the echo it came from.
    func testDatagramAssociationEchoesOverBothFamilies() throws {
        let sc = try Scenario()
        let v4 = UDPEchoServer(loop: sc.loop, address: loopback4)
        let v6 = UDPEchoServer(loop: sc.loop, address: loopback6)
        let direct = DirectOutbound(loop: sc.loop)
        let d = DatagramProbe()
        let assoc = try XCTUnwrap(direct.openAssociation(events: d))
        var sent: [Bool] = []
        let ok = sc.run([
            {
                sent.append(([1, 2, 3] as [UInt8]).withUnsafeBytes { assoc.send($0, to: .ip(v4.endpoint)) })
                sent.append(([6, 6] as [UInt8]).withUnsafeBytes { assoc.send($0, to: .ip(v6.endpoint)) })
                return true
            },
            { d.received.count == 2 },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(d.received)")
        XCTAssertEqual(sent, [true, true])
        let byPayload = Dictionary(uniqueKeysWithValues: d.received.map { ($0.payload, $0.from) })
        XCTAssertEqual(byPayload[[1, 2, 3]], v4.endpoint)
        XCTAssertEqual(byPayload[[6, 6]], v6.endpoint)
        XCTAssertEqual(direct.usage.flows, 1)
        XCTAssertEqual(direct.usage.liveFlows, 1)
        XCTAssertEqual(direct.usage.bytesUp, 5)
        XCTAssertEqual(direct.usage.bytesDown, 5)
        assoc.close()
        XCTAssertEqual(direct.usage.liveFlows, 0)
        XCTAssertFalse(([0] as [UInt8]).withUnsafeBytes { assoc.send($0, to: .ip(v4.endpoint)) }, "closed: nothing is sent")
    }
}
