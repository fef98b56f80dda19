import Foundation
@testable import LoftCarriers
import LoftCore
import LoftIO
import LoftTestSupport
import XCTest

/// The h3 carrier: HTTP/3 (nghttp3) on the same QUIC engine, against the front's UDP listener
/// serving quic and h3 on one port and choosing by ALPN.
final class H3CarrierTests: XCTestCase {
    static let mib = QuicFixture.mib

    func testTransferBothWaysWithSHA256() throws {
        let size = 8 * Self.mib
        let f = try QuicFixture(.h3, serving: [.quic, .h3], size: size)
        guard let (carrier, tls) = try f.transferBothWays(size: size) else { return }
        XCTAssertTrue(tls.hasSuffix("alpn=h3"), tls)
        XCTAssertEqual(carrier.maxDatagram, 0, "no HTTP datagrams: DGRAMs go on the session stream")
        f.listener.close()
    }

    /// `quic-max-packet` 8952 at both ends holds for h3 as for quic: the packets on the path are
    /// that large at both ends, and a transfer both ways is intact.
    func testMaxPacket() throws {
        let size = 8 * Self.mib
        let f = try QuicFixture(.h3, size: size) { $0.quicMaxPacket = 8952 }
        f.clientMaxPacket = 8952
        guard let (sizes, packets, _) = try f.exchangeMeasuringPackets(size: size) else { return }
        XCTAssertEqual(sizes, [8952, 8952])
        XCTAssertLessThan(packets, size / 1452, "datagrams the front received")
    }

    /// A migration to a new local socket in the middle of a transfer: the same QUIC connection,
    /// its HTTP/3 streams and the session's CONNECT carry on, every byte arrives.
    func testMigrationInTheMiddleOfATransfer() throws {
        let size = 8 * Self.mib
        try QuicFixture(.h3, size: size).migrateInTheMiddleOfATransfer(size: size, after: 2 * Self.mib)
    }

    /// A CONNECT to another path is answered 404 and the attempt ends `rejected`.
    func testWrongPathIsRejected() throws {
        let f = try QuicFixture(.h3)
        let (carrier, r) = f.dialRecorder(try f.client(path: "/other")) { $0.closedReason != nil }
        guard case .rejected(let status, _)? = r.closedReason else { return XCTFail("\(String(describing: r.closedReason))") }
        XCTAssertEqual(status, 404)
        XCTAssertFalse(r.connected)
        _ = carrier
        f.listener.close()
    }

    /// A front that serves only quic refuses the h3 ALPN (and the other way round).
    func testALPNPicksTheCarrier() throws {
        let h = try Harness()
        for (served, dialed) in [(CarrierKind.quic, CarrierKind.h3), (.h3, .quic)] {
            let f = try QuicFixture(dialed, serving: [served], harness: h)
            let (carrier, r) = f.dialRecorder(try f.client()) { $0.closedReason != nil || $0.connected }
            XCTAssertFalse(r.connected, "\(dialed) against a front serving \(served)")
            carrier.abort()
            f.listener.close()
        }
    }

    /// Flows on request streams of their own, one after the other, more than the 1024 the
    /// front allows at once: each is refused (reset) by a delegate that takes no flows; both
    /// nghttp3's and QUIC's stream state goes as they close, so the 1100th still opens.
    func testMoreFlowsOverTimeThanTheStreamLimit() throws {
        let f = try QuicFixture(.h3)
        try f.flowsOneAfterAnother(1100) {
            let server = f.acceptor.carriers.first as? H3Carrier
            XCTAssertNotNil(server?.h3)
        }
    }
}
