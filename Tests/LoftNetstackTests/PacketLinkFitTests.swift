import LoftCore
import LoftIO
@testable import LoftNetstack
import XCTest

/// A packet outbound whose link carries less than the TUN (sstp with a small server MRU).
final class SmallLinkOutbound: PacketOutbound {
    let name = "small"
    var status: OutboundStatus { OutboundStatus(name: name, type: "test", state: "up") }
    var packets: [[UInt8]] = []
    var linkMTU: Int
    init(mtu: Int) { linkMTU = mtu }
    func sendPacket(_ packet: UnsafeRawBufferPointer) -> Bool {
        packets.append(Array(packet))
        return true
    }
    func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream { fatalError("packet mode opens no stream") }
    func openAssociation(events: DatagramEvents) -> DatagramAssociation? { fatalError("packet mode opens no association") }
}

/// Issue 28: fragmented datagrams of a packet flow follow their first fragment over the link
/// (not into lwIP), and what leaves for a link is fitted to what it carries.
final class PacketLinkFitTests: XCTestCase {
    let app = Endpoint(IPAddress("198.19.1.2")!, 40000)
    let server = Endpoint(IPAddress("198.19.1.1")!, 9101)

    /// `packet` (IPv4, DF cleared) cut into fragments of at most `size` bytes, by hand
    /// (RFC 791: offsets in 8-byte units, MF on all but the last, the header summed again).
    func fragments(_ packet: [UInt8], size: Int, id: UInt16) -> [[UInt8]] {
        let step = (size - 20) & ~7
        var out: [[UInt8]] = []
        var at = 20
        while at < packet.count {
            let n = min(step, packet.count - at)
            var f = Array(packet[0..<20]) + Array(packet[at..<(at + n)])
            f[2] = UInt8((20 + n) >> 8); f[3] = UInt8((20 + n) & 0xFF)
            f[4] = UInt8(id >> 8); f[5] = UInt8(id & 0xFF)
            let field = (at - 20) / 8 | (at + n < packet.count ? 0x2000 : 0)
            f[6] = UInt8(field >> 8); f[7] = UInt8(field & 0xFF)
            f[10] = 0; f[11] = 0
            let sum = f[0..<20].withUnsafeBytes { InternetChecksum.of($0) }
            f[10] = UInt8(sum >> 8); f[11] = UInt8(sum & 0xFF)
            out.append(f)
            at += n
        }
        return out
    }

    func harness(_ p: PacketOutbound) -> Harness {
        let h = Harness()
        h.netstack.packetModeInput = h.input
        h.router.decision = .outbound(p)
        return h
    }

    func testLaterFragmentsFollowTheFirstOverTheLink() {
        let p = TestPacketOutbound()
        let h = harness(p)
        defer { h.shutdown() }
        // A UDP datagram of 3000 bytes at MTU 1500: three fragments, only the first has ports.
        let udp = udpPacket(from: app, to: server, payload: pattern(3000))
        let frags = fragments(udp, size: 1500, id: 0x1234)
        XCTAssertEqual(frags.count, 3)
        h.send(batch: frags)
        XCTAssertEqual(p.packets, frags, "every fragment goes to the link, in order, unchanged")
        XCTAssertEqual(h.router.calls(.udp), 1)
        XCTAssertTrue(h.takePackets().isEmpty)
        // A ping of 5000 bytes (an echo request in four fragments) the same.
        var icmp: [UInt8] = [8, 0, 0, 0, 0x12, 0x34, 0, 1] + pattern(5000, seed: 3)
        let sum = icmp.withUnsafeBytes { InternetChecksum.of($0) }
        icmp[2] = UInt8(sum >> 8); icmp[3] = UInt8(sum & 0xFF)
        let echo = PacketBuilder.ipPacket(source: app.address, destination: server.address, proto: IPProtocol.icmp, payload: icmp)
        let pings = fragments(echo, size: 1500, id: 0x99)
        p.packets = []
        h.send(batch: pings)
        XCTAssertEqual(p.packets, pings)
        // A later fragment of a datagram whose first one never came here stays lwIP's.
        p.packets = []
        let stray = fragments(udpPacket(from: app, to: server, payload: pattern(2000)), size: 1500, id: 0x4321)
        h.send(stray[1])
        XCTAssertTrue(p.packets.isEmpty)
    }

    /// IPv6: fragments carry a fragment header (RFC 8200 4.5) with a 32-bit id.
    func testIPv6LaterFragmentsFollowTheFirst() {
        let p = TestPacketOutbound()
        let h = harness(p)
        defer { h.shutdown() }
        let src = Endpoint(IPAddress("fd00:18::2")!, 40000), dst = Endpoint(IPAddress("fd00:19::1")!, 9101)
        let udp = udpPacket(from: src, to: dst, payload: pattern(3000))   // 40 + 8 + 3000
        let body = Array(udp[40...])   // the fragmentable part: the UDP header and payload
        var frags: [[UInt8]] = []
        var at = 0
        while at < body.count {
            let n = min(1448, body.count - at)
            let more = at + n < body.count
            var f = Array(udp[0..<40])
            f[4] = UInt8((8 + n) >> 8); f[5] = UInt8((8 + n) & 0xFF)
            f[6] = 44
            let off = UInt16(at / 8) << 3 | (more ? 1 : 0)
            f += [IPProtocol.udp, 0, UInt8(off >> 8), UInt8(off & 0xFF), 0xCA, 0xFE, 0x00, 0x07]
            f += body[at..<(at + n)]
            frags.append(f)
            at += n
        }
        XCTAssertEqual(frags.count, 3)
        h.send(batch: frags)
        XCTAssertEqual(p.packets, frags)
        XCTAssertTrue(h.takePackets().isEmpty)
    }

    func testWhatLeavesFitsASmallerLink() {
        let p = SmallLinkOutbound(mtu: 1000)
        let h = harness(p)
        defer { h.shutdown() }
        // The SYN's MSS is lowered to what the link carries (1000 - 40), checksum kept right.
        let syn = tcpPacket(from: app, to: server, seq: 1000, ack: 0, flags: PacketSummary.tcpSYN, window: 65535, mss: 1460)
        h.send(syn)
        XCTAssertEqual(p.packets.count, 1)
        if let out = p.packets.first {
            XCTAssertEqual(out.count, syn.count)
            out.withUnsafeBytes { b in
                XCTAssertEqual(TCPOptions.mss(inTCPHeader: UnsafeRawBufferPointer(rebasing: b[20...])), 960)
                XCTAssertEqual(InternetChecksum.transport(source: app.address, destination: server.address, proto: IPProtocol.tcp,
                                                          segment: UnsafeRawBufferPointer(rebasing: b[20...])), 0)
            }
        }
        // A segment of 1240 bytes of payload (the TUN's MTU of 1280) leaves in pieces of 1000.
        p.packets = []
        let data = tcpPacket(from: app, to: server, seq: 1001, ack: 1, flags: PacketSummary.tcpACK, window: 65535, payload: pattern(1240))
        h.send(data)
        XCTAssertEqual(p.packets.map(\.count), [1000, 320])
        XCTAssertEqual(p.packets.flatMap { Array($0[40...]) }, pattern(1240))
        // A UDP datagram of 1200 bytes without DF: IPv4 fragments of at most 1000 bytes.
        p.packets = []
        var udp = udpPacket(from: PacketLinkFitTests.otherApp, to: server, payload: pattern(1172))
        udp[6] = 0
        udp[10] = 0; udp[11] = 0
        let s = udp[0..<20].withUnsafeBytes { InternetChecksum.of($0) }
        udp[10] = UInt8(s >> 8); udp[11] = UInt8(s & 0xFF)
        h.send(udp)
        XCTAssertEqual(p.packets.map(\.count), [996, 224])
        XCTAssertEqual(p.packets.flatMap { Array($0[20...]) }, Array(udp[20...]))
        XCTAssertEqual(p.packets.map { Int($0[6] & 0x3F) << 8 | Int($0[7]) }, [0x2000, 122])
        // With DF: not sent; the app gets ICMP fragmentation-needed naming 1000.
        p.packets = []
        let df = udpPacket(from: PacketLinkFitTests.otherApp, to: server, payload: pattern(1172))
        h.send(df)
        XCTAssertTrue(p.packets.isEmpty)
        let back = h.takePackets()
        XCTAssertEqual(back.count, 1)
        if let icmp = back.first {
            XCTAssertEqual(Array(icmp[20..<22]), [3, 4])
            XCTAssertEqual(Int(icmp[26]) << 8 | Int(icmp[27]), 1000)
            XCTAssertEqual(Array(icmp[28..<48]), Array(df[0..<20]))
        }
    }

    static let otherApp = Endpoint(IPAddress("198.19.1.2")!, 40001)
}
