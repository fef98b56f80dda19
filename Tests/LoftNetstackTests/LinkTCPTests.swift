import Glibc
import LoftCore
import LoftIO
@testable import LoftNetstack
import LoftTestSupport
import XCTest


/// Datagrams an association's driver was given.
final class RecordingDatagrams: DatagramEvents {
    var got: [([UInt8], Endpoint)] = []
    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) { got.append((Array(payload), from)) }
}

/// TCP (and UDP) that loft opens itself over a packet outbound's link (`NetstackLink`: SOCKS5 and bridge
/// streams routed to sstp, docs/sstp.md). The server's side is played with hand-made segments.
final class LinkTCPTests: XCTestCase {
    let linkAddress = IPAddress("198.19.1.2")!
    let server = Endpoint(IPAddress("198.19.1.1")!, 9100)

    func harness() -> (Harness, TestPacketOutbound, NetstackLink) {
        let h = Harness()
        let p = TestPacketOutbound()
        h.netstack.packetModeInput = h.input
        h.router.decision = .outbound(p)
        let link = h.netstack.addLink(for: p, mtu: 1500)!
        return (h, p, link)
    }

    func take(_ link: NetstackLink, _ packet: [UInt8]) -> Bool { packet.withUnsafeBytes { link.takePacket($0) } }

    /// The SYN lwIP sent over the link, parsed.
    func syn(_ p: TestPacketOutbound, file: StaticString = #filePath, line: UInt = #line) -> Segment? {
        guard let last = p.packets.last, let s = Segment.parse(last), s.isSYN, !s.isACK else {
            XCTFail("no SYN over the link", file: file, line: line)
            return nil
        }
        return s
    }

    func testActiveOpenCarriesBytesBothWays() throws {
        let (h, p, link) = harness()
        defer { h.shutdown() }
        let ev = RecordingStreamEvents()
        let stream = try XCTUnwrap(link.openStream(from: linkAddress, to: server, events: ev))
        let s = try XCTUnwrap(syn(p))
        XCTAssertEqual(s.source.address, linkAddress, "from the link's address")
        XCTAssertTrue(NetstackLink.ports.contains(s.source.port))
        XCTAssertEqual(s.destination, server)
        XCTAssertTrue(h.takePackets().isEmpty, "nothing goes to the TUN")
        XCTAssertEqual(link.connectionCount, 1)
        XCTAssertEqual(ev.connected, 0)

        let me = s.source
        XCTAssertTrue(take(link, tcpPacket(from: server, to: me, seq: 5000, ack: s.seq &+ 1,
                                           flags: PacketSummary.tcpSYN | PacketSummary.tcpACK, window: 65535, mss: 1460)))
        h.turn()
        XCTAssertEqual(ev.connected, 1, "streamConnected after the handshake")
        XCTAssertEqual(Segment.parse(p.packets.last!)?.ack, 5001, "lwIP ACKs the SYN-ACK over the link")

        // The server's bytes reach the stream.
        XCTAssertTrue(take(link, tcpPacket(from: server, to: me, seq: 5001, ack: s.seq &+ 1, flags: PacketSummary.tcpACK,
                                           window: 65535, payload: Array("hello".utf8))))
        h.turn()
        XCTAssertGreaterThan(ev.readable, 0)
        var buf = [UInt8](repeating: 0, count: 64)
        let r = buf.withUnsafeMutableBytes { stream.read(into: $0) }
        guard case .data(let n) = r else { return XCTFail("read: \(r)") }
        XCTAssertEqual(Array(buf[0..<n]), Array("hello".utf8))

        // The stream's bytes leave over the link.
        let out = Array("world".utf8)
        let wrote = out.withUnsafeBytes { b -> Int in
            var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: b.baseAddress!), iov_len: b.count)
            return stream.write(&iov, count: 1)
        }
        XCTAssertEqual(wrote, 5)
        h.turn()
        let data = p.packets.compactMap(Segment.parse).filter { !$0.payload.isEmpty }
        XCTAssertEqual(data.map(\.payload), [out])
        XCTAssertEqual(data.first?.seq, s.seq &+ 1)

        // A packet for the same address but no connection of the link's is the TUN's.
        XCTAssertFalse(take(link, tcpPacket(from: server, to: Endpoint(linkAddress, 40000), seq: 1, ack: 1,
                                            flags: PacketSummary.tcpACK, window: 65535)))
        XCTAssertFalse(take(link, tcpPacket(from: Endpoint(server.address, 9101), to: me, seq: 1, ack: 1,
                                            flags: PacketSummary.tcpACK, window: 65535)))

        // Closed by the driver: lwIP sends its FIN, and the server's answer still reaches lwIP.
        stream.close()
        h.turn()
        XCTAssertEqual(link.connectionCount, 0)
        let fin = try XCTUnwrap(p.packets.compactMap(Segment.parse).last(where: \.isFIN))
        XCTAssertTrue(take(link, tcpPacket(from: server, to: me, seq: 5006, ack: fin.seq &+ 1,
                                           flags: PacketSummary.tcpACK | PacketSummary.tcpFIN, window: 65535)))
        XCTAssertEqual(h.netstack.counters.linkConnectionsOpened, 1)
        XCTAssertEqual(h.netstack.counters.tcpFlowsOpened, 0, "no TUN flow was involved")
    }

    func testRefusedLinkDownAndDroppedStreams() throws {
        let (h, p, link) = harness()
        defer { h.shutdown() }
        // The server resets the SYN: refused.
        let ev = RecordingStreamEvents()
        let refused = try XCTUnwrap(link.openStream(from: linkAddress, to: server, events: ev))
        let s = try XCTUnwrap(syn(p))
        XCTAssertTrue(take(link, tcpPacket(from: server, to: s.source, seq: 0, ack: s.seq &+ 1,
                                           flags: PacketSummary.tcpRST | PacketSummary.tcpACK, window: 0)))
        h.turn()
        XCTAssertEqual(ev.failures, [.refused])
        XCTAssertEqual(ev.connected, 0)
        XCTAssertEqual(link.connectionCount, 0)
        XCTAssertFalse(take(link, tcpPacket(from: server, to: s.source, seq: 1, ack: 1, flags: PacketSummary.tcpACK, window: 1)),
                       "a refused connection is forgotten")

        // The link goes down under an open connection: it fails once, its pcb is gone.
        let ev2 = RecordingStreamEvents()
        let lost = try XCTUnwrap(link.openStream(from: linkAddress, to: server, events: ev2))
        XCTAssertEqual(link.connectionCount, 1)
        link.linkDown()
        h.turn()
        XCTAssertEqual(ev2.failures, [.networkUnreachable])
        XCTAssertEqual(link.connectionCount, 0)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 0)

        withExtendedLifetime((refused, lost)) {}
        // A stream its driver drops without closing it resets its connection (no pcb is left
        // with callbacks into a freed stream).
        _ = try XCTUnwrap(link.openStream(from: linkAddress, to: server, events: RecordingStreamEvents()))
        XCTAssertTrue(try XCTUnwrap(Segment.parse(p.packets.last!)).isRST)
        XCTAssertEqual(link.connectionCount, 0)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 0)
        // IPv6 is not carried.
        XCTAssertNil(link.openStream(from: linkAddress, to: Endpoint(IPAddress("fd00::1")!, 80), events: RecordingStreamEvents()))
    }

    func testPortsAvoidTheTunsPacketFlows() throws {
        let (h, p, link) = harness()
        defer { h.shutdown() }
        // An app on the TUN already talks to the server from the link's address and port 61000.
        let appSyn = tcpPacket(from: Endpoint(linkAddress, 61000), to: server, seq: 1, ack: 0,
                               flags: PacketSummary.tcpSYN, window: 65535, mss: 1460)
        h.send(appSyn)
        XCTAssertEqual(h.netstack.packetFlowCount, 1)
        var keep: [ByteStream] = []
        link.nextPort = 61000
        keep.append(try XCTUnwrap(link.openStream(from: linkAddress, to: server, events: RecordingStreamEvents())))
        XCTAssertEqual(try XCTUnwrap(syn(p)).source.port, 61001, "the TUN flow's 4-tuple is skipped")
        // The same port to another server is no clash.
        link.nextPort = 61000
        keep.append(try XCTUnwrap(link.openStream(from: linkAddress, to: Endpoint(server.address, 9200), events: RecordingStreamEvents())))
        XCTAssertEqual(try XCTUnwrap(syn(p)).source.port, 61000)
        // The end of the range wraps to its start.
        link.nextPort = NetstackLink.ports.upperBound
        keep.append(try XCTUnwrap(link.openStream(from: linkAddress, to: Endpoint(server.address, 9300), events: RecordingStreamEvents())))
        XCTAssertEqual(try XCTUnwrap(syn(p)).source.port, NetstackLink.ports.upperBound)
        XCTAssertEqual(link.nextPort, NetstackLink.ports.lowerBound)
        XCTAssertEqual(link.connectionCount, 3)
        // The stack shut down under open connections: they fail, and no stream is left with a
        // freed pcb (dropping them afterwards touches nothing of lwIP's).
        let events = keep.map { _ in RecordingStreamEvents() }
        for (s, e) in zip(keep, events) { (s as! LwipStream).events = e }
        h.shutdown()
        XCTAssertEqual(events.map(\.failures), Array(repeating: [FlowFailure.networkUnreachable], count: 3))
        XCTAssertTrue(keep.allSatisfy { ($0 as! LwipStream).pcb == nil })
        keep.removeAll()
    }

    func testUDPAssociationOverLink() throws {
        let (h, p, link) = harness()
        defer { h.shutdown() }
        let ev = RecordingDatagrams()
        link.nextPort = 62000
        let a = try XCTUnwrap(link.openAssociation(from: linkAddress, events: ev))
        XCTAssertTrue(Array("ping".utf8).withUnsafeBytes { a.send($0, to: .ip(server)) })
        let d = try XCTUnwrap(Datagram.parse(p.packets.last!))
        XCTAssertEqual(d.source, Endpoint(linkAddress, 62000), "from the link's address and the association's port")
        XCTAssertEqual(d.destination, server)
        XCTAssertEqual(d.payload, Array("ping".utf8))
        XCTAssertTrue(h.takePackets().isEmpty, "nothing goes to the TUN")
        // Replies from any remote (full cone) reach the driver; another port is the TUN's.
        let other = Endpoint(IPAddress("198.19.1.9")!, 53)
        XCTAssertTrue(take(link, udpPacket(from: server, to: d.source, payload: Array("pong".utf8))))
        XCTAssertTrue(take(link, udpPacket(from: other, to: d.source, payload: Array("dns".utf8))))
        XCTAssertFalse(take(link, udpPacket(from: server, to: Endpoint(linkAddress, 62001), payload: [1])))
        h.turn()
        XCTAssertEqual(ev.got.map(\.0), [Array("pong".utf8), Array("dns".utf8)])
        XCTAssertEqual(ev.got.map(\.1), [server, other])
        XCTAssertEqual(link.connectionCount, 1)
        // The port is taken while it is open; the link going down closes it.
        link.nextPort = 62000
        let b = try XCTUnwrap(link.openAssociation(from: linkAddress, events: ev))
        XCTAssertTrue([UInt8(1)].withUnsafeBytes { b.send($0, to: .ip(server)) })
        XCTAssertEqual(Datagram.parse(p.packets.last!)?.source.port, 62001)
        link.linkDown()
        XCTAssertFalse([UInt8(1)].withUnsafeBytes { a.send($0, to: .ip(server)) })
        XCTAssertFalse(take(link, udpPacket(from: server, to: d.source, payload: [2])))
        XCTAssertEqual(link.connectionCount, 0)
        XCTAssertEqual(Netstack.lwipResources().udpPCBs, 0)
        withExtendedLifetime(b) {}
    }

    /// UDP ports of the link never clash with the TUN's UDP packet flows: an association skips
    /// a port an app uses from the link's address, and an app that takes a port an association
    /// has keeps the replies from the remote it talks to.
    func testUDPAssociationPortsAvoidTheTunsPacketFlows() throws {
        let (h, p, link) = harness()
        defer { h.shutdown() }
        let ev = RecordingDatagrams()
        // An app on the TUN sends from 62000 (a UDP packet flow to the server).
        h.send(udpPacket(from: Endpoint(linkAddress, 62000), to: server, payload: [7]))
        XCTAssertEqual(p.packets.count, 1)
        link.nextPort = 62000
        let a = try XCTUnwrap(link.openAssociation(from: linkAddress, events: ev))
        XCTAssertTrue([UInt8(1)].withUnsafeBytes { a.send($0, to: .ip(server)) })
        XCTAssertEqual(Datagram.parse(p.packets.last!)?.source.port, 62001, "62000 is the app's")
        XCTAssertFalse(take(link, udpPacket(from: server, to: Endpoint(linkAddress, 62000), payload: [2])), "the app's reply")
        // Another app takes 62001 (the association's) to talk to another remote: that remote's
        // replies are the app's; the server's stay the association's.
        let other = Endpoint(IPAddress("198.19.1.9")!, 53)
        h.send(udpPacket(from: Endpoint(linkAddress, 62001), to: other, payload: [8]))
        XCTAssertFalse(take(link, udpPacket(from: other, to: Endpoint(linkAddress, 62001), payload: [3])))
        XCTAssertTrue(take(link, udpPacket(from: server, to: Endpoint(linkAddress, 62001), payload: [4])))
        h.turn()
        XCTAssertEqual(ev.got.map(\.0), [[4]])
        a.close()
    }

    /// lwIP's netif table holds eight: the harness's inputs and then packet links (one per sstp
    /// outbound) until it is full; each link opens a connection on its own netif.
    func testLinksUpToTheNetifTable() throws {
        let h = Harness()
        defer { h.shutdown() }
        var links: [NetstackLink] = []
        var outbounds: [TestPacketOutbound] = []
        let ev = RecordingStreamEvents()
        while true {
            let p = TestPacketOutbound()
            guard let l = h.netstack.addLink(for: p, mtu: 1500) else { break }
            links.append(l); outbounds.append(p)
            XCTAssertLessThanOrEqual(links.count, 8)
            if links.count > 8 { break }
        }
        XCTAssertEqual(h.netstack.inputs.count, 8)
        XCTAssertGreaterThanOrEqual(links.count, 6, "six sstp outbounds beside the TUN and the bridge")
        for (l, p) in zip(links, outbounds) {
            let s = l.openStream(from: linkAddress, to: server, events: ev)
            XCTAssertNotNil(s)
            XCTAssertEqual(p.packets.count, 1, "the SYN goes out on its own link")
            s?.reset()
        }
    }
}
