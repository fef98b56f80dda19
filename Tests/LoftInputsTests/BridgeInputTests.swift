import Glibc
import LoftCore
import LoftIO
import LoftNetstack
import LoftTestSupport
import XCTest
@testable import LoftInputs

/// The UDP bridge through its public API: a peer socket on loopback sends raw IP packets to it,
/// the netstack behind it hands the UDP flow to the fake outbound, and the reply comes back to
/// the peer as one datagram.
final class BridgeInputTests: XCTestCase {
    private let app = Endpoint(IPAddress("10.0.0.2")!, 5353)
    private let dns = Endpoint(IPAddress("198.18.1.3")!, 53)

    /// A free UDP port on 127.0.0.1 (bound, noted, closed).
    private func freePort() -> UInt16 {
        let s = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        defer { Glibc.close(s) }
        _ = SocketAddress(Endpoint(.v4(0x7F00_0001), 0)).withSockaddr { bind(s, $0, $1) }
        return Sockets.localEndpoint(s)!.port
    }

    /// An IPv4 UDP packet with valid checksums.
    private func udpPacket(from source: Endpoint, to destination: Endpoint, payload: [UInt8]) -> [UInt8] {
        var u = [UInt8](repeating: 0, count: 8) + payload
        func put16(_ i: Int, _ v: UInt16) { u[i] = UInt8(v >> 8); u[i + 1] = UInt8(v & 0xFF) }
        put16(0, source.port)
        put16(2, destination.port)
        put16(4, UInt16(u.count))
        let sum = u.withUnsafeBytes {
            InternetChecksum.transport(source: source.address, destination: destination.address, proto: IPProtocol.udp, segment: $0)
        }
        put16(6, sum == 0 ? 0xFFFF : sum)
        return PacketBuilder.ipPacket(source: source.address, destination: destination.address, proto: IPProtocol.udp, payload: u)
    }

    func testAPacketFromThePeerReachesTheOutboundAndTheReplyComesBack() throws {
        Log.threshold = .warn
        let loop = try EventLoop()
        let out = TestOutbound()
        let netstack = netstack(on: loop, to: out)
        defer { netstack.shutdown() }
        let settings = BridgeInput.Options(peerPort: freePort(), extensionPort: freePort(), mtu: 1500)
        let peer = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        defer { Glibc.close(peer) }
        _ = SocketAddress(Endpoint(.v4(0x7F00_0001), settings.peerPort)).withSockaddr { bind(peer, $0, $1) }
        let bridge = BridgeInput(settings: settings, loop: loop, netstack: netstack)
        try bridge.start()
        defer { bridge.stop() }
        let bridgeAddress = SocketAddress(Endpoint(.v4(0x7F00_0001), settings.extensionPort))
        func peerSend(_ bytes: [UInt8]) {
            _ = bridgeAddress.withSockaddr { to, len in bytes.withUnsafeBytes { sendto(peer, $0.baseAddress, $0.count, 0, to, len) } }
        }
        var back: [UInt8] = []
        let failed = loop.run(steps: [
            {
                peerSend(self.udpPacket(from: self.app, to: self.dns, payload: [1, 2, 3]))
                peerSend([UInt8](repeating: 0x45, count: 1600))    // over the bridge's MTU
                return true
            },
            { out.associations.first?.sent.count == 1 },
            { out.associations[0].reply([4, 5], from: self.dns); return true },
            { back = receiveDatagram(peer) ?? []; return !back.isEmpty },
        ], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(out.associations.first?.sent.first?.payload, [1, 2, 3])
        XCTAssertEqual(out.associations.first?.sent.first?.to, .ip(dns))
        XCTAssertEqual(back.count, 20 + 8 + 2, "one whole IP packet per datagram")
        let summary = back.withUnsafeBytes { p -> (Endpoint, Endpoint, Bool)? in
            guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535), s.proto == IPProtocol.udp else { return nil }
            return (Endpoint(s.source, s.sourcePort), Endpoint(s.destination, s.destinationPort), s.transportChecksumIsValid(p))
        }
        XCTAssertEqual(summary?.0, dns)
        XCTAssertEqual(summary?.1, app)
        XCTAssertEqual(summary?.2, true, "valid checksums")
        XCTAssertEqual(Array(back.suffix(2)), [4, 5])
        let c = bridge.counters
        XCTAssertEqual(c.datagramsIn, 2)
        XCTAssertEqual(c.oversize, 1)
        XCTAssertEqual(c.datagramsOut, 1)
    }
}
