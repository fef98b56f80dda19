import Foundation
@testable import LoftCarriers
import LoftCore
import LoftIO
import LoftTestSupport
import XCTest

/// The h3 carrier: HTTP/3 (nghttp3) on the same QUIC engine, against the front's UDP listener
/// serving quic and h3 on one port and choosing by ALPN.
final class H3CarrierTests: XCTestCase {
    static let mib = 1 << 20

    func testTransferBothWaysWithSHA256() throws {
        let size = 8 * Self.mib
        let h = try Harness()
        let acceptor = Acceptor { _ in StreamPeer(total: size, expectReceive: size) }
        let listener = try h.listener(kinds: [.quic, .h3], delegate: acceptor)
        let client = try h.client(.h3, port: listener.localEndpoint.port)
        let peer = StreamPeer(total: size, expectReceive: size)
        let carrier = client.dial(delegate: peer)
        peer.carrier = carrier
        let (ok, elapsed, tls) = exchangeAndClose(h, carrier, peer, acceptor, seconds: 120)
        XCTAssertTrue(ok, "timed out: client sent \(peer.sent) got \(peer.received)")
        XCTAssertNil(peer.closedReason)
        guard let server = acceptor.peers.first as? StreamPeer else { return XCTFail("no carrier accepted") }
        XCTAssertEqual(server.received, size)
        XCTAssertEqual(peer.received, size)
        XCTAssertEqual(peer.sentDigest, server.receivedDigest, "client → server SHA-256")
        XCTAssertEqual(server.sentDigest, peer.receivedDigest, "server → client SHA-256")
        XCTAssertEqual(server.closedReason, .closed)
        XCTAssertTrue(tls.hasSuffix("alpn=h3"), tls)
        XCTAssertEqual(acceptor.carriers.first?.kind, .h3)
        XCTAssertEqual(carrier.maxDatagram, 0, "no HTTP datagrams: DGRAMs go on the session stream")
        print("carrier h3: \(size / Self.mib) MiB each way in \(elapsed) ms")
        listener.close()
    }

    /// A migration to a new local socket in the middle of a transfer: the same QUIC connection,
    /// its HTTP/3 streams and the session's CONNECT carry on, every byte arrives.
    func testMigrationInTheMiddleOfATransfer() throws {
        let size = 8 * Self.mib
        let h = try Harness()
        let acceptor = Acceptor { _ in StreamPeer(total: size, expectReceive: size) }
        let listener = try h.listener(kinds: [.h3], delegate: acceptor)
        let client = try h.client(.h3, port: listener.localEndpoint.port)
        let peer = StreamPeer(total: size, expectReceive: size)
        let carrier = client.dial(delegate: peer)
        peer.carrier = carrier
        var asked = false, started = false, closing = false
        var outcome: Bool?
        let ok = h.run(seconds: 60) {
            if !asked && peer.received >= 2 * Self.mib {
                asked = true
                started = carrier.migrate { outcome = $0 }
            }
            guard let server = acceptor.peers.first as? StreamPeer else { return peer.closedReason != nil }
            if !closing && outcome != nil && peer.sendDone && peer.receiveDone && server.sendDone && server.receiveDone {
                closing = true
                carrier.close()
            }
            return closing && server.closedReason != nil || peer.closedReason != nil
        }
        XCTAssertTrue(ok, "timed out: got \(peer.received), migration \(String(describing: outcome))")
        XCTAssertTrue(started)
        XCTAssertEqual(outcome, true)
        XCTAssertEqual((carrier as? QuicCarrier)?.quic?.migrations, 1)
        XCTAssertNil(peer.closedReason)
        guard let server = acceptor.peers.first as? StreamPeer else { return XCTFail("no carrier accepted") }
        XCTAssertEqual(acceptor.peers.count, 1, "one connection: the migration did not redial")
        XCTAssertEqual(peer.sentDigest, server.receivedDigest)
        XCTAssertEqual(server.sentDigest, peer.receivedDigest)
        XCTAssertEqual(server.closedReason, .closed)
        listener.close()
    }

    /// A CONNECT to another path is answered 404 and the attempt ends `rejected`.
    func testWrongPathIsRejected() throws {
        let h = try Harness()
        let acceptor = Acceptor { _ in Recorder() }
        let listener = try h.listener(kinds: [.h3], delegate: acceptor)
        let client = try h.client(.h3, port: listener.localEndpoint.port, path: "/other")
        let r = Recorder()
        let carrier = client.dial(delegate: r)
        XCTAssertTrue(h.run(seconds: 10) { r.closedReason != nil })
        guard case .rejected(let status, _)? = r.closedReason else { return XCTFail("\(String(describing: r.closedReason))") }
        XCTAssertEqual(status, 404)
        XCTAssertFalse(r.connected)
        _ = carrier
        listener.close()
    }

    /// A front that serves only quic refuses the h3 ALPN (and the other way round).
    func testALPNPicksTheCarrier() throws {
        let h = try Harness()
        for (served, dialed) in [(CarrierKind.quic, CarrierKind.h3), (.h3, .quic)] {
            let acceptor = Acceptor { _ in Recorder() }
            let listener = try h.listener(kinds: [served], delegate: acceptor)
            let client = try h.client(dialed, port: listener.localEndpoint.port)
            let r = Recorder()
            let carrier = client.dial(delegate: r)
            XCTAssertTrue(h.run(seconds: 10) { r.closedReason != nil || r.connected })
            XCTAssertFalse(r.connected, "\(dialed) against a front serving \(served)")
            carrier.abort()
            listener.close()
        }
    }

    /// Flows on request streams of their own, one after the other, more than the 1024 the
    /// front allows at once: each is refused (reset) by a delegate that takes no flows; both
    /// nghttp3's and QUIC's stream state goes as they close, so the 1100th still opens.
    func testMoreFlowsOverTimeThanTheStreamLimit() throws {
        final class Events: ByteStreamEvents {
            var failed = 0
            var next: (() -> Void)?
            func streamConnected() {}
            func streamFailed(_ failure: FlowFailure) { failed += 1; next?() }
            func streamReadable() {}
            func streamWritable() {}
        }
        let h = try Harness()
        let acceptor = Acceptor { _ in Recorder() }
        let listener = try h.listener(kinds: [.h3], delegate: acceptor)
        let client = try h.client(.h3, port: listener.localEndpoint.port)
        let r = Recorder()
        let carrier = client.dial(delegate: r)
        XCTAssertTrue(h.run(seconds: 10) { r.connected })
        let ev = Events()
        var opened = 0
        var stuck = false
        ev.next = {
            guard opened < 1100 else { return }
            h.loop.soon {
                guard let f = (carrier as? FlowCarrier)?.openFlow() else { stuck = true; return }
                f.events = ev
                var b: UInt8 = 1
                var v = iovec(iov_base: &b, iov_len: 1)
                _ = f.write(&v, count: 1)
                opened += 1
            }
        }
        ev.next?()
        let ok = h.run(seconds: 60) { stuck || ev.failed == 1100 }
        XCTAssertTrue(ok, "opened \(opened), reset \(ev.failed)")
        XCTAssertFalse(stuck, "no stream left after \(opened) flows")
        XCTAssertEqual(ev.failed, 1100)
        let server = acceptor.carriers.first as? QuicCarrier
        XCTAssertNotNil(server?.h3)
        carrier.close()
        listener.close()
    }
}
