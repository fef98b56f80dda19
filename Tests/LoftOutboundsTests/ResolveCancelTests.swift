import Glibc
import LoftCore
import LoftIO
import XCTest
@testable import LoftDirect
@testable import LoftOutbounds

/// A flow closed while its name resolves cancels the resolution.
final class ResolveCancelTests: XCTestCase {
    func testClosingAFlowCancelsItsResolution() throws {
        let sc = try Scenario()
        // A DNS server that never answers: a bound UDP socket nobody reads.
        let silent = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        defer { close(silent) }
        XCTAssertEqual(SocketAddress(Endpoint(loopback4, 0)).withSockaddr { bind(silent, $0, $1) }, 0)
        let port = try XCTUnwrap(Sockets.localEndpoint(silent)).port
        // Gives up after 100 ms: the flows are closed long before, and hear nothing of it.
        let resolver = try Resolver(loop: sc.loop, servers: ["127.0.0.1:\(port)"], timeoutMs: 100, tries: 1)
        let direct = DirectOutbound(loop: sc.loop, resolver: resolver)
        let p = StreamProbe()
        let d = DatagramProbe()
        var stream: SocketStream?
        var association: DirectAssociation?
        var pendingBeforeClose = false
        var pendingAfterClose = true
        let ok = sc.run([
            {
                stream = direct.openStream(to: .domain("pending.loft.test", 80), events: p) as? SocketStream
                p.conn = stream
                association = direct.openAssociation(events: d) as? DirectAssociation
                _ = ([1] as [UInt8]).withUnsafeBytes { association?.send($0, to: .domain("pending.loft.test", 53)) }
                pendingBeforeClose = stream?.resolving?.isPending == true && association?.resolving.first?.isPending == true
                let requests = [stream?.resolving, association?.resolving.first].compactMap { $0 }
                stream?.close()
                association?.close()
                pendingAfterClose = requests.count != 2 || requests.contains { $0.isPending }
                return true
            },
            sc.pause(400),
        ])
        XCTAssertTrue(ok)
        XCTAssertTrue(pendingBeforeClose)
        XCTAssertFalse(pendingAfterClose, "closing cancelled both resolutions at once")
        XCTAssertEqual(association?.resolving.isEmpty, true)
        XCTAssertNil(p.failure, "a closed stream hears nothing of its name")
        XCTAssertFalse(p.connected)
    }
}
