import Foundation
@testable import LoftCarriers
import LoftCore
import LoftIO
import LoftTLS
import LoftTestSupport
import XCTest

/// The one set-up of the carrier tests over QUIC (QuicCarrierTests, H3CarrierTests): the front's
/// UDP listener on 127.0.0.1 with the test PKI, serving `serving` (default: the dialed kind), an
/// acceptor that gives each accepted carrier a StreamPeer sending and expecting `size` bytes (a
/// Recorder where `size` is nil), and clients dialing it as `kind`. The checks the two carriers
/// share (a transfer, a migration in its middle, flows past the stream limit) are its methods.
final class QuicFixture {
    static let mib = 1 << 20
    let h: Harness
    let kind: CarrierKind
    let acceptor: Acceptor
    let listener: CarrierListener

    /// `configure` adjusts the listener's options (quic-retry, max-streams) before it starts.
    init(_ kind: CarrierKind, serving: Set<CarrierKind>? = nil, size: Int? = nil, harness: Harness? = nil,
         configure: (inout CarrierServerOptions) -> Void = { _ in }) throws {
        h = try harness ?? Harness()
        self.kind = kind
        if let size {
            acceptor = Acceptor { _ in StreamPeer(total: size, expectReceive: size) }
        } else {
            acceptor = Acceptor { _ in Recorder() }
        }
        var options = CarrierServerOptions(listen: Endpoint(.v4(0x7F00_0001), 0), kinds: serving ?? [kind],
                                           tls: TestPKI.shared.server)
        configure(&options)
        listener = try CarrierListener(options, runtime: h.runtime, delegate: acceptor)
    }

    /// The clients' `quic-max-packet` (nil: the default).
    var clientMaxPacket: Int?

    /// A client of the listener (TLS: front.test verified against the test CA unless `tls`).
    func client(path: String = "/loft", tls: TLSClientOptions? = nil) throws -> CarrierClient {
        try h.client(kind, port: listener.localEndpoint.port, path: path, tls: tls, quicMaxPacket: clientMaxPacket)
    }

    /// Dials `client` with a StreamPeer that sends and expects `size` bytes.
    func dialStream(_ client: CarrierClient, size: Int) -> (carrier: Carrier, peer: StreamPeer) {
        let peer = StreamPeer(total: size, expectReceive: size)
        let carrier = client.dial(delegate: peer)
        peer.carrier = carrier
        return (carrier, peer)
    }

    /// Dials `client` with a Recorder and runs the loop until `done` holds for it (asserted, 10 s).
    func dialRecorder(_ client: CarrierClient, until done: @escaping (Recorder) -> Bool) -> (carrier: Carrier, recorder: Recorder) {
        let r = Recorder()
        let carrier = client.dial(delegate: r)
        XCTAssertTrue(h.run(seconds: 10) { done(r) })
        return (carrier, r)
    }

    /// `size` bytes each way at once over one carrier (the fixture's `size`): SHA-256 both ways
    /// and a clean close. Returns the client's carrier and TLS description for the kind's own
    /// checks (nil where no carrier was accepted); the listener stays open.
    func transferBothWays(size: Int) throws -> (carrier: Carrier, tls: String)? {
        let (carrier, peer) = dialStream(try client(), size: size)
        let (ok, elapsed, tls) = exchangeAndClose(h, carrier, peer, acceptor, seconds: 120)
        XCTAssertTrue(ok, "timed out: client sent \(peer.sent) got \(peer.received)")
        XCTAssertNil(peer.closedReason)
        guard let server = acceptor.peers.first as? StreamPeer else { XCTFail("no carrier accepted"); return nil }
        XCTAssertEqual(server.received, size)
        XCTAssertEqual(peer.received, size)
        XCTAssertEqual(peer.sentDigest, server.receivedDigest, "client → server SHA-256")
        XCTAssertEqual(server.sentDigest, peer.receivedDigest, "server → client SHA-256")
        XCTAssertEqual(server.closedReason, .closed)
        XCTAssertEqual(acceptor.carriers.first?.kind, kind)
        print("carrier \(kind.rawValue): \(size / Self.mib) MiB each way in \(elapsed) ms")
        return (carrier, tls)
    }

    /// `size` bytes each way over one carrier of a client with `clientMaxPacket`, with SHA-256
    /// both ways: the largest packet on the path at each end once both are open (client, front)
    /// and the datagrams the front's listener received. Closes the listener; nil where no
    /// carrier was accepted.
    func exchangeMeasuringPackets(size: Int) throws -> (sizes: [Int], packets: Int, ms: UInt64)? {
        defer { listener.close() }
        let (carrier, peer) = dialStream(try client(), size: size)
        XCTAssertTrue(h.run(seconds: 10) { [acceptor] in carrier.maxPacket > 0 && (acceptor.carriers.first?.maxPacket ?? 0) > 0 })
        let sizes = [carrier.maxPacket, acceptor.carriers.first?.maxPacket ?? 0]
        let (ok, ms, _) = exchangeAndClose(h, carrier, peer, acceptor, seconds: 60)
        XCTAssertTrue(ok, "client quic-max-packet \(String(describing: clientMaxPacket)): got \(peer.received)")
        guard let server = acceptor.peers.first as? StreamPeer else { XCTFail("no carrier accepted"); return nil }
        XCTAssertEqual(peer.sentDigest, server.receivedDigest)
        XCTAssertEqual(server.sentDigest, peer.receivedDigest)
        return (sizes, listener.quicPackets, ms)
    }

    /// A migration to a new local socket once `after` bytes have arrived, in the middle of a
    /// transfer of `size` bytes each way (the fixture's `size`): the path is validated, the same
    /// connection (and session stream) carries on, every byte arrives. Closes the listener.
    func migrateInTheMiddleOfATransfer(size: Int, after: Int) throws {
        let (carrier, peer) = dialStream(try client(), size: size)
        var asked = false, started = false, closing = false
        var outcome: Bool?
        let ok = h.run(seconds: 60) { [acceptor] in
            if !asked && peer.received >= after {
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
        XCTAssertEqual((carrier as? QuicCarrierBase)?.quic?.migrations, 1)
        XCTAssertNil(peer.closedReason)
        guard let server = acceptor.peers.first as? StreamPeer else { return XCTFail("no carrier accepted") }
        XCTAssertEqual(acceptor.peers.count, 1, "one connection: the migration did not redial")
        XCTAssertEqual(peer.sentDigest, server.receivedDigest)
        XCTAssertEqual(server.sentDigest, peer.receivedDigest)
        XCTAssertEqual(server.closedReason, .closed)
        listener.close()
    }

    /// `count` flows on streams of their own, one after the other, against an acceptor that takes
    /// no flows (the fixture without `size`): each is refused (reset), and the front's stream
    /// state goes as they close, so the last still opens. `beforeClose` runs before the client's
    /// carrier and the listener are closed.
    func flowsOneAfterAnother(_ count: Int, beforeClose: () -> Void = {}) throws {
        let (carrier, _) = dialRecorder(try client()) { $0.connected }
        let ev = ResetCounter()
        var opened = 0
        var stuck = false
        // The next flow opens as the last one is reset (from the loop, not the check's polling).
        ev.next = { [h] in
            guard opened < count else { return }
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
        let ok = h.run(seconds: 60) { stuck || ev.failed == count }
        XCTAssertTrue(ok, "opened \(opened), reset \(ev.failed)")
        XCTAssertFalse(stuck, "no stream left after \(opened) flows")
        XCTAssertEqual(ev.failed, count)
        beforeClose()
        carrier.close()
        listener.close()
    }
}

/// A flow's events that count its failures and call `next` on each.
private final class ResetCounter: ByteStreamEvents {
    var failed = 0
    var next: (() -> Void)?
    func streamConnected(_: ByteStream) {}
    func streamFailed(_: ByteStream, _ failure: FlowFailure) { failed += 1; next?() }
    func streamReadable(_: ByteStream) {}
    func streamWritable(_: ByteStream) {}
}
