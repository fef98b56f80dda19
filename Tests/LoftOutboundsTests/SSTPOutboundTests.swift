import LoftCarriers
import LoftCore
import LoftIO
import LoftSSTP
import LoftTLS
import LoftTestSupport
import XCTest
@testable import LoftDirect
@testable import LoftOutbounds

/// The sstp outbound while its link is down (the server's port is closed, so every dial is
/// refused): with `hold` nothing goes anywhere else and every refusal is counted `hold-drops`;
/// without it new flows go to the fallback (`fallback-flows`). The link's own path is tested
/// end to end (Tests/integration/sstp.test.sh) and the protocol in LoftSSTPTests.
final class SSTPOutboundTests: XCTestCase {
    func outbound(_ sc: Scenario, hold: Bool, fallback: Outbound) throws -> SSTPOutbound {
        var options = SSTPOptions(host: "127.0.0.1", port: closedPort(),
                                  tls: TLSClientOptions(serverName: "sstp.test", caFile: TestPKI.shared.dir + "/ca.pem"),
                                  user: "u", password: "p", auth: [.mschapv2], hold: hold, connectTimeoutMs: 2000)
        options.minBackoffMs = 5000   // one refused dial, then waiting for the whole test
        return try SSTPOutbound(name: "corp", loop: sc.loop, runtime: sc.runtime, options: options, fallback: fallback)
    }

    /// An IPv4 UDP packet as a TUN would hand it over (the checksum is not looked at here).
    let packet: [UInt8] = [0x45, 0, 0, 29, 0, 0, 0, 0, 64, 17, 0, 0, 198, 19, 1, 2, 198, 19, 1, 1,
                           0x9C, 0x40, 0x23, 0x8C, 0, 9, 0, 0, 7]

    func testHoldRefusesEverythingWhileDown() throws {
        let sc = try Scenario()
        let echo = TCPEchoServer(loop: sc.loop)
        let fallback = TestOutbound(name: "counting-direct", type: "counting", forwardingTo: DirectOutbound(loop: sc.loop))
        let sstp = try outbound(sc, hold: true, fallback: fallback)
        sstp.start()
        let p = StreamProbe()
        p.toSend = pattern(100)
        var assoc: DatagramAssociation?
        var takes = false, sent = true
        let ok = sc.run([
            { sstp.status.state == "held" },
            {
                takes = sstp.takesNewFlows
                sent = self.packet.withUnsafeBytes { sstp.sendPacket($0) }
                p.conn = sstp.openStream(to: .ip(echo.endpoint), events: p)
                assoc = sstp.openAssociation(events: DatagramProbe())
                return true
            },
            { p.failure != nil || p.connected },
        ])
        let st = sstp.status
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(st)")
        XCTAssertTrue(takes, "with hold a TUN flow stays the outbound's (and is dropped), never lwIP's")
        XCTAssertFalse(sent)
        XCTAssertEqual(p.failure, .networkUnreachable)
        XCTAssertNil(assoc)
        XCTAssertEqual(st.counter(OutboundStatus.holdDrops), 3, "a packet, a stream and an association")
        XCTAssertEqual(st.counter("fallback-flows"), 0)
        XCTAssertEqual(st.counter("dials"), 1)
        XCTAssertTrue(st.detail.contains("last error connect"), st.detail)
        XCTAssertEqual(fallback.streamsOpened + fallback.associationsOpened, 0, "nothing goes another way")
        XCTAssertEqual(echo.accepted, 0)
        sstp.stop()
    }

    func testWithoutHoldNewFlowsGoToTheFallbackWhileDown() throws {
        let sc = try Scenario()
        let echo = TCPEchoServer(loop: sc.loop)
        let udp = UDPEchoServer(loop: sc.loop)
        let fallback = TestOutbound(name: "counting-direct", type: "counting", forwardingTo: DirectOutbound(loop: sc.loop))
        let sstp = try outbound(sc, hold: false, fallback: fallback)
        sstp.start()
        let p = StreamProbe()
        p.toSend = pattern(20_000)
        let d = DatagramProbe()
        var assoc: DatagramAssociation?
        var takes = true
        let ok = sc.run([
            { sstp.status.state == "down" },
            {
                takes = sstp.takesNewFlows
                p.conn = sstp.openStream(to: .ip(echo.endpoint), events: p)
                assoc = sstp.openAssociation(events: d)
                _ = ([4, 5] as [UInt8]).withUnsafeBytes { assoc?.send($0, to: .ip(udp.endpoint)) }
                return true
            },
            { (p.received.count == 20_000 && d.received.count == 1) || p.failure != nil },
        ])
        let st = sstp.status
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1): \(st) received \(p.received.count)")
        XCTAssertFalse(takes, "a new TUN flow goes through lwIP to the fallback")
        XCTAssertNil(p.failure)
        XCTAssertTrue(p.received == p.toSend)
        XCTAssertEqual(d.received.first?.payload, [4, 5])
        XCTAssertEqual(st.counter("fallback-flows"), 2)
        XCTAssertEqual(st.counter("down-drops"), 0)
        XCTAssertNil(st.counter(OutboundStatus.holdDrops))
        XCTAssertEqual(fallback.streamsOpened, 1)
        XCTAssertEqual(fallback.associationsOpened, 1)
        assoc?.close()
        sstp.stop()
    }
}
