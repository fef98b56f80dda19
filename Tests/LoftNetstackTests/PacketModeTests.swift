import LoftCore
import LoftIO
@testable import LoftNetstack
import XCTest

/// A packet-mode outbound (as sstp is): collects the packets it is given, or refuses them.
final class TestPacketOutbound: PacketOutbound {
    let name = "pkt"
    var status: OutboundStatus { OutboundStatus(name: name, type: "test", state: "up") }
    var packets: [[UInt8]] = []
    var accepting = true
    var takes = true
    var takesNewFlows: Bool { takes }
    func sendPacket(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard accepting else { return false }
        packets.append(Array(packet))
        return true
    }
    func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream { fatalError("packet mode opens no stream") }
    func openAssociation(events: DatagramEvents) -> DatagramAssociation? { fatalError("packet mode opens no association") }
}

/// Flows routed to a `PacketOutbound` pass through as IP packets, not through lwIP
/// (docs/sstp.md, "The data path: packet mode").
final class PacketModeTests: XCTestCase {
    let app = Endpoint(IPAddress("198.19.1.2")!, 40000)
    let server = Endpoint(IPAddress("198.19.1.1")!, 9100)

    func harness() -> (Harness, TestPacketOutbound) {
        let h = Harness()
        let p = TestPacketOutbound()
        h.netstack.packetModeInput = h.input
        h.router.decision = .outbound(p)
        return (h, p)
    }

    func testTCPFlowPassesAsPackets() {
        let (h, p) = harness()
        defer { h.shutdown() }
        let syn = tcpPacket(from: app, to: server, seq: 1000, ack: 0, flags: PacketSummary.tcpSYN, window: 65535, mss: 1460)
        let ack = tcpPacket(from: app, to: server, seq: 1001, ack: 5001, flags: PacketSummary.tcpACK, window: 65535)
        let data = tcpPacket(from: app, to: server, seq: 1001, ack: 5001, flags: PacketSummary.tcpACK, window: 65535,
                             payload: Array("hello".utf8))
        h.send(syn, ack, data)
        XCTAssertEqual(p.packets, [syn, ack, data], "the packets pass as they are")
        XCTAssertEqual(h.router.calls(.tcp), 1, "the router is asked on the first packet only")
        XCTAssertEqual(h.netstack.counters.tcpFlowsOpened, 0, "lwIP terminates nothing")
        XCTAssertTrue(h.takePackets().isEmpty, "lwIP answers nothing")
        XCTAssertEqual(h.netstack.packetFlowCount, 1)
    }

    func testUDPAndEchoPassAsPackets() {
        let (h, p) = harness()
        defer { h.shutdown() }
        let d1 = udpPacket(from: app, to: server, payload: Array("a".utf8))
        let d2 = udpPacket(from: app, to: server, payload: Array("b".utf8))
        h.send(d1, d2)
        XCTAssertEqual(p.packets, [d1, d2])
        XCTAssertEqual(h.router.calls(.udp), 1)
        XCTAssertEqual(h.netstack.udpAssociationCount, 0)
        // An echo request goes to the outbound (a real ping), lwIP does not answer it.
        var icmp: [UInt8] = [8, 0, 0, 0, 0x12, 0x34, 0, 1] + Array("ping".utf8)
        let sum = icmp.withUnsafeBytes { InternetChecksum.of($0) }
        icmp[2] = UInt8(sum >> 8); icmp[3] = UInt8(sum & 0xFF)
        let echo = PacketBuilder.ipPacket(source: app.address, destination: server.address, proto: IPProtocol.icmp, payload: icmp)
        h.send(echo)
        XCTAssertEqual(p.packets.last, echo)
        XCTAssertTrue(h.takePackets().isEmpty)
    }

    func testOtherFlowsStillGoThroughLwIP() {
        let (h, p) = harness()
        defer { h.shutdown() }
        h.router.decision = .outbound(h.outbound)
        let syn = tcpPacket(from: app, to: server, seq: 1000, ack: 0, flags: PacketSummary.tcpSYN, window: 65535, mss: 1460)
        h.send(syn)
        XCTAssertTrue(p.packets.isEmpty)
        XCTAssertEqual(h.router.calls(.tcp), 1, "asked once: its answer goes on to the TCP path")
        XCTAssertEqual(h.netstack.counters.tcpFlowsOpened, 1)
        XCTAssertEqual(h.outbound.streams.count, 1)
        XCTAssertEqual(h.netstack.packetFlowCount, 0)
        // A drop rule still drops (with its RST).
        h.router.decision = .drop(reset: true)
        let other = Endpoint(IPAddress("198.19.1.9")!, 80)
        h.send(tcpPacket(from: app, to: other, seq: 1, ack: 0, flags: PacketSummary.tcpSYN, window: 65535))
        XCTAssertEqual(h.takePackets().compactMap(Segment.parse).filter { $0.flags & PacketSummary.tcpRST != 0 }.count, 1)
    }

    func testOnlyThePacketModeInput() {
        let (h, p) = harness()
        defer { h.shutdown() }
        h.netstack.packetModeInput = h.input + 1   // another input (the bridge, say) is the TUN
        h.router.decision = .outbound(h.outbound)
        h.send(udpPacket(from: app, to: server, payload: [1]))
        XCTAssertTrue(p.packets.isEmpty)
        XCTAssertEqual(h.netstack.udpAssociationCount, 1, "through lwIP as before")
    }

    /// IPv6 link-local packets (sstp's IPV6CP link) pass to a packet outbound on the packet-mode
    /// input; anywhere else, or when the outbound does not take new flows, they are martian
    /// (lwIP never sees them).
    func testLinkLocalIPv6OnlyToAPacketLink() {
        let (h, p) = harness()
        defer { h.shutdown() }
        let ll = Endpoint(IPAddress("fe80::2")!, 40000), peer = Endpoint(IPAddress("fe80::1")!, 9104)
        let d = udpPacket(from: ll, to: peer, payload: [1])
        h.send(d)
        XCTAssertEqual(p.packets, [d])
        XCTAssertEqual(h.netstack.counters.dropped(.martian), 0)
        p.takes = false
        let other = Endpoint(IPAddress("fe80::1")!, 9105)
        h.send(udpPacket(from: ll, to: other, payload: [2]))
        XCTAssertEqual(p.packets.count, 1)
        XCTAssertEqual(h.netstack.counters.dropped(.martian), 1)
        XCTAssertEqual(h.netstack.udpAssociationCount, 0)
        h.netstack.packetModeInput = h.input + 1
        p.takes = true
        h.send(udpPacket(from: ll, to: Endpoint(IPAddress("fe80::1")!, 9106), payload: [3]))
        XCTAssertEqual(p.packets.count, 1)
        XCTAssertEqual(h.netstack.counters.dropped(.martian), 2)
        XCTAssertTrue(h.takePackets().isEmpty)
    }

    func testRefusedPacketsAreCountedDrops() {
        let (h, p) = harness()
        defer { h.shutdown() }
        p.accepting = false
        h.send(udpPacket(from: app, to: server, payload: [1]), udpPacket(from: app, to: server, payload: [2]))
        XCTAssertEqual(h.netstack.counters.dropped(.linkDown), 2)
        XCTAssertTrue(h.takePackets().isEmpty)
        // A SYN that is not taken gets an RST: the app's connect fails at once.
        h.send(tcpPacket(from: app, to: server, seq: 1000, ack: 0, flags: PacketSummary.tcpSYN, window: 65535))
        let rst = h.takePackets().compactMap(Segment.parse)
        XCTAssertEqual(rst.count, 1)
        XCTAssertEqual(rst.first.map { $0.flags & PacketSummary.tcpRST != 0 }, true)
        XCTAssertEqual(h.netstack.counters.dropped(.linkDown), 3)
    }
}
