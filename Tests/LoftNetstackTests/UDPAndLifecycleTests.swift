import Glibc
import LoftCore
import LoftIO
import LoftNetstack
import XCTest

final class UDPTests: XCTestCase {
    let appUDP = Endpoint(IPAddress("10.0.0.2")!, 5353)
    let dns1 = Endpoint(IPAddress("8.8.8.8")!, 53)
    let dns2 = Endpoint(IPAddress("1.1.1.1")!, 53)

    func testDatagramOpensAssociationAndReachesOutbound() {
        let h = Harness()
        defer { h.shutdown() }
        h.send(udpPacket(from: appUDP, to: dns1, payload: Array("q1".utf8)))
        XCTAssertEqual(h.router.calls(.udp), 1)
        XCTAssertEqual(h.router.requests.first?.source, appUDP)
        XCTAssertEqual(h.router.requests.first?.destination, .ip(dns1))
        XCTAssertEqual(h.outbound.associations.count, 1)
        XCTAssertEqual(h.netstack.udpAssociationCount, 1)
        let sent = h.outbound.associations.first?.sent ?? []
        XCTAssertEqual(sent.count, 1)
        XCTAssertEqual(sent.first?.payload, Array("q1".utf8))
        XCTAssertEqual(sent.first?.to, .ip(dns1))
    }

    func testSecondDatagramFromSameSourceReusesAssociation() {
        let h = Harness()
        defer { h.shutdown() }
        h.send(udpPacket(from: appUDP, to: dns1, payload: Array("q1".utf8)))
        h.send(udpPacket(from: appUDP, to: dns2, payload: Array("q2".utf8)))
        XCTAssertEqual(h.outbound.associations.count, 1)
        XCTAssertEqual(h.netstack.udpAssociationCount, 1)
        XCTAssertEqual(h.netstack.counters.udpAssociationsOpened, 1)
        let sent = h.outbound.associations.first?.sent ?? []
        XCTAssertEqual(sent.map(\.payload), [Array("q1".utf8), Array("q2".utf8)])
        XCTAssertEqual(sent.map(\.to), [.ip(dns1), .ip(dns2)])
    }

    func testSecondDatagramFromSameSourceDoesNotConsultRouter() {
        let h = Harness()
        defer { h.shutdown() }
        h.send(udpPacket(from: appUDP, to: dns1, payload: Array("q1".utf8)))
        h.send(udpPacket(from: appUDP, to: dns1, payload: Array("q2".utf8)))
        XCTAssertEqual(h.outbound.associations.count, 1)
        XCTAssertEqual(h.router.calls(.udp), 1, "the association's second datagram is routed again")
    }

    func testReplyReachesAppWithRemoteAsSource() {
        let h = Harness()
        defer { h.shutdown() }
        h.send(udpPacket(from: appUDP, to: dns1, payload: Array("q1".utf8)))
        guard let assoc = h.outbound.associations.first else { return XCTFail("no association") }
        _ = h.takePackets()
        // Full cone: a reply from any remote comes back with that remote as its source.
        assoc.reply(Array("r1".utf8), from: dns1)
        assoc.reply(Array("r2".utf8), from: dns2)
        h.turn()
        let replies = h.takePackets().compactMap(Datagram.parse)
        XCTAssertEqual(replies.count, 2)
        XCTAssertEqual(replies.map(\.source), [dns1, dns2])
        XCTAssertEqual(replies.map(\.destination), [appUDP, appUDP])
        XCTAssertEqual(replies.map(\.payload), [Array("r1".utf8), Array("r2".utf8)])
        XCTAssertEqual(h.netstack.counters.udpDatagramsDown, 2)
    }

    func testIPv6DatagramAndReply() {
        let h = Harness()
        defer { h.shutdown() }
        let app = Endpoint(IPAddress("fd00::2")!, 6000)
        let remote = Endpoint(IPAddress("2001:db8::53")!, 53)
        h.send(udpPacket(from: app, to: remote, payload: [1, 2, 3]))
        guard let assoc = h.outbound.associations.first else { return XCTFail("no association") }
        XCTAssertEqual(assoc.sent.first?.payload, [1, 2, 3])
        assoc.reply([4, 5], from: remote)
        let reply = h.takePackets().compactMap(Datagram.parse).first
        XCTAssertEqual(reply?.source, remote)
        XCTAssertEqual(reply?.destination, app)
        XCTAssertEqual(reply?.payload, [4, 5])
    }
}

final class LifecycleTests: XCTestCase {
    func testShutdownResetsLiveFlowsAndReleasesLwIP() {
        let h = Harness()
        var app1 = AppTCP(local: Endpoint(appV4.address, 41001), remote: remoteV4)
        var app2 = AppTCP(local: Endpoint(appV4.address, 41002), remote: remoteV4)
        let s1 = h.establish(&app1)
        // Bytes queued both ways: the outbound takes nothing, the app acknowledges nothing.
        s1.room = 0
        h.send(app1.data(pattern(3000)))
        s1.supply(pattern(100_000))
        h.turns(2)
        h.send(app2.syn())                    // still connecting
        let s2 = h.outbound.streams[1]
        h.send(udpPacket(from: Endpoint(appV4.address, 5000), to: Endpoint(IPAddress("8.8.4.4")!, 53), payload: [1]))
        let assoc = h.outbound.associations.first
        h.deliver(to: &app1)
        XCTAssertGreaterThan(Netstack.lwipResources().tcpActive, 0)

        h.shutdown()
        XCTAssertTrue(h.netstack.isShutDown)
        XCTAssertEqual(s1.resetCalls, 1)
        XCTAssertEqual(s2.resetCalls, 1)
        XCTAssertEqual(assoc?.closed, true)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(h.netstack.udpAssociationCount, 0)
        h.deliver(to: &app1)
        XCTAssertTrue(app1.rstReceived, "the established flow's app got an RST")
        XCTAssertTrue(Netstack.lwipResources().isEmpty, "\(Netstack.lwipResources())")
        h.shutdown()  // a second call does nothing
    }

    func testNewStackAfterShutdownWorks() {
        for round in 0..<3 {
            let h = Harness()
            defer { h.shutdown() }
            var app = AppTCP(local: appV4, remote: remoteV4, isn: UInt32(5000 + round))
            let stream = h.establish(&app)
            XCTAssertEqual(h.netstack.states["established"], 1, "round \(round)")
            h.send(app.data(pattern(100, seed: UInt8(round))))
            assertBytes(stream.written, pattern(100, seed: UInt8(round)), "round \(round)")
            stream.supply(pattern(5000))
            h.pumpToApp(&app)
            assertBytes(app.received, pattern(5000), "round \(round)")
            XCTAssertEqual(Netstack.lwipResources().netifs, 1, "round \(round)")
        }
    }

    func testDeinitWithoutShutdownReleasesLwIP() {
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream: TestStream
        let writer: TestWriter
        do {
            let h = Harness()
            stream = h.establish(&app)
            writer = h.writer
            h.releaseStack()
        }
        XCTAssertEqual(stream.resetCalls, 1, "the live flow's outbound was reset")
        let rst = writer.packets.compactMap(Segment.parse).filter { app.owns($0) && $0.isRST }
        XCTAssertEqual(rst.count, 1, "the app got an RST")
        XCTAssertEqual(Netstack.lwipResources().netifs, 0)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 0)
        XCTAssertEqual(Netstack.lwipResources().tcpListeners, 0)

        let h2 = Harness()
        defer { h2.shutdown() }
        var again = AppTCP(local: appV4, remote: remoteV4, isn: 77)
        _ = h2.establish(&again)
        XCTAssertEqual(h2.netstack.states["established"], 1)
    }
}
