import Foundation
@testable import LoftCarriers
import LoftCore
import LoftIO
import LoftQUIC
import LoftTLS
import LoftTestSupport
import XCTest

/// The quic carrier: client ↔ front's QUIC listener on 127.0.0.1 (UDP, the TCP listener's port
/// number), with the test PKI.
final class QuicCarrierTests: XCTestCase {
    static let mib = QuicFixture.mib

    func testTransferBothWaysWithSHA256() throws {
        let size = 16 * Self.mib
        let f = try QuicFixture(.quic, size: size)
        XCTAssertEqual(f.listener.quicEndpoint?.port, f.listener.localEndpoint.port)
        guard let (_, tls) = try f.transferBothWays(size: size) else { return }
        XCTAssertTrue(tls.hasPrefix("QUICv1 TLSv1.3 ") && tls.hasSuffix("alpn=loft"), tls)
        f.listener.close()
    }

    /// `quic-max-packet`: at 8952 on both ends every full packet is that large from the start
    /// (loopback carries it), a transfer both ways is intact, and the front receives fewer
    /// datagrams than 1452-byte packets would need for the client's bytes alone. Where one end
    /// keeps the default, it announces 1452 and takes part in no larger packet: both ends stay
    /// within 1200...1452 (path MTU discovery).
    func testMaxPacket() throws {
        let size = 8 * Self.mib
        let cases: [(front: Int?, client: Int?)] = [(8952, 8952), (nil, 8952), (8952, nil)]
        for (front, client) in cases {
            let f = try QuicFixture(.quic, size: size) { $0.quicMaxPacket = front }
            f.clientMaxPacket = client
            guard let (sizes, packets, ms) = try f.exchangeMeasuringPackets(size: size) else { continue }
            if front == 8952 && client == 8952 {
                XCTAssertEqual(sizes, [8952, 8952])
                XCTAssertLessThan(packets, size / 1452, "datagrams the front received")
            } else {
                XCTAssertTrue(sizes.allSatisfy { (1200...1452).contains($0) }, "\(sizes)")
                XCTAssertGreaterThan(packets, size / 1452, "datagrams the front received")
            }
            print("quic-max-packet front \(front.map(String.init) ?? "-") client \(client.map(String.init) ?? "-"): packets \(sizes), front received \(packets) datagrams, \(size / Self.mib) MiB each way in \(ms) ms")
        }
    }

    /// `quic-retry: always`: the front answers the client's first Initial with a Retry, loft's
    /// client (ngtcp2) comes back with the token, the connection is validated and carries a
    /// transfer intact.
    func testClientThroughRetry() throws {
        let size = 1 * Self.mib
        let f = try QuicFixture(.quic, size: size) { $0.quicRetry = .always }
        let client = try f.client()
        let (carrier, peer) = f.dialStream(client, size: size)
        let (ok, _, _) = exchangeAndClose(f.h, carrier, peer, f.acceptor, seconds: 30)
        XCTAssertTrue(ok, "timed out: client sent \(peer.sent) got \(peer.received)")
        guard let server = f.acceptor.peers.first as? StreamPeer else { return XCTFail("no carrier accepted") }
        XCTAssertEqual(peer.sentDigest, server.receivedDigest)
        XCTAssertEqual(server.sentDigest, peer.receivedDigest)
        let v = try XCTUnwrap(f.listener.quicValidation)
        XCTAssertEqual(v.retries, 1)
        XCTAssertEqual(v.validated, 1)
        XCTAssertEqual(v.badTokens, 0)

        // The front sent a NEW_TOKEN: the next connection's Initial carries it and gets in
        // without a Retry.
        let acceptor2 = Acceptor { _ in StreamPeer(total: 1000, expectReceive: 1000) }
        f.listener.delegate = acceptor2
        let (carrier2, peer2) = f.dialStream(client, size: 1000)
        let (ok2, _, _) = exchangeAndClose(f.h, carrier2, peer2, acceptor2, seconds: 30)
        XCTAssertTrue(ok2)
        let v2 = try XCTUnwrap(f.listener.quicValidation)
        XCTAssertEqual(v2.retries, 1, "no second Retry")
        XCTAssertEqual(v2.validated, 2)
        f.listener.close()
    }

    /// The front loses a connection without a word (its ids route nowhere): the client's next
    /// packet is answered with a stateless reset carrying the token the connection announced,
    /// and the client ends the carrier at once instead of after the 30 s idle timeout.
    func testForgottenConnectionIsEndedByStatelessReset() throws {
        let f = try QuicFixture(.quic)
        let (carrier, r) = f.dialRecorder(try f.client()) { [acceptor = f.acceptor] in $0.connected && !acceptor.carriers.isEmpty }
        let server = try XCTUnwrap(f.acceptor.carriers.first as? QuicCarrier)
        server.listener?.forget(try XCTUnwrap(server.entry))
        XCTAssertEqual([UInt8](repeating: 7, count: 500).withUnsafeBytes { carrier.write($0) }, 500)
        carrier.flush()
        let t0 = monotonicMilliseconds()
        XCTAssertTrue(f.h.run(seconds: 5) { r.closedReason != nil }, "the client did not notice")
        XCTAssertLessThan(monotonicMilliseconds() - t0, 5000)
        XCTAssertGreaterThanOrEqual(f.listener.quicValidation?.resets ?? 0, 1)
        XCTAssertNotEqual(r.closedReason, .closed)
        server.abort()
        f.listener.close()
    }

    func testRetryPolicy() {
        XCTAssertTrue(QuicRetryPolicy.always.wantsRetry(handshaking: 0))
        XCTAssertFalse(QuicRetryPolicy.never.wantsRetry(handshaking: 1000))
        XCTAssertFalse(QuicRetryPolicy.auto.wantsRetry(handshaking: 31))
        XCTAssertTrue(QuicRetryPolicy.auto.wantsRetry(handshaking: 32))
    }

    /// A migration to a new local socket in the middle of a transfer: the path is validated,
    /// the same connection (and session stream) carries on, every byte arrives.
    func testMigrationInTheMiddleOfATransfer() throws {
        let size = 16 * Self.mib
        try QuicFixture(.quic, size: size).migrateInTheMiddleOfATransfer(size: size, after: 4 * Self.mib)
    }

    /// The front's max-streams as QUIC's stream limit: with max-streams 4 the client can open
    /// 4 flow streams besides the session stream, then no more (it waits, nothing is reset).
    func testMaxStreamsIsTheQuicStreamLimit() throws {
        let f = try QuicFixture(.quic) { $0.quicMaxStreams = 4 }
        let (carrier, _) = f.dialRecorder(try f.client()) { $0.connected }
        var flows: [QuicFlow] = []
        while flows.count < 10, let flow = (carrier as? FlowCarrier)?.openFlow() { flows.append(flow) }
        XCTAssertEqual(flows.count, 4)
        carrier.close()
        f.listener.close()
    }

    /// Flows on streams of their own, one after the other, more than the 1024 streams the
    /// front allows at once: each is refused (reset) by a delegate that does not take flows,
    /// and the front raises the stream limit as they close, so the 1100th still opens.
    func testMoreFlowsOverTimeThanTheStreamLimit() throws {
        try QuicFixture(.quic).flowsOneAfterAnother(1100)
    }

    func testWrongCAFailsTheHandshake() throws {
        let f = try QuicFixture(.quic)
        // The server certificate's name is front.test: another name must fail verification.
        let client = try f.client(tls: TLSClientOptions(serverName: "other.test", caFile: TestPKI.shared.ca))
        let (carrier, r) = f.dialRecorder(client) { $0.closedReason != nil }
        guard case .tls(let why)? = r.closedReason else { return XCTFail("\(String(describing: r.closedReason))") }
        XCTAssertFalse(r.connected)
        XCTAssertTrue(f.acceptor.carriers.isEmpty)
        print("wrong name: \(why)")
        _ = carrier
        f.listener.close()
    }

    func testPinAndInsecure() throws {
        let f = try QuicFixture(.quic)
        let good = try XCTUnwrap(TLSClientOptions.parsePin(try TLSContext.pin(ofCertificateFile: TestPKI.shared.cert)))
        var bad = good
        bad[0] ^= 1
        for (tls, expectUp) in [(TLSClientOptions(serverName: "front.test", pinSHA256: good), true),
                                (TLSClientOptions(serverName: "front.test", pinSHA256: bad), false),
                                (TLSClientOptions(serverName: "whatever", insecure: true), true)] {
            let (carrier, r) = f.dialRecorder(try f.client(tls: tls)) { $0.connected || $0.closedReason != nil }
            XCTAssertEqual(r.connected, expectUp, "\(tls): \(String(describing: r.closedReason))")
            if tls.pinSHA256 == bad {
                // One pin policy for TCP and QUIC (CTLS's ctls_pin_check): the message names the key.
                XCTAssertTrue(String(describing: r.closedReason).contains("certificate pin mismatch: the server's key is sha256/"),
                              String(describing: r.closedReason))
            }
            carrier.abort()
        }
        f.listener.close()
    }

    func testNoServerIsAConnectFailureOrTimeout() throws {
        let h = try Harness()
        let client = try h.client(.quic, port: 9)   // nothing listens on udp/9
        let r = Recorder()
        let carrier = client.dial(delegate: r)
        XCTAssertTrue(h.run(seconds: 10) { r.closedReason != nil })
        switch r.closedReason {
        case .connectFailed?, .timeout?: break
        default: XCTFail("\(String(describing: r.closedReason))")
        }
        _ = carrier
    }
}

/// UDP batches: a GSO send of packets of one size (the last shorter) on loopback arrives as the
/// same datagrams, through a GRO read cut back by `QuicSocket.split` (or one by one where the
/// kernel does not coalesce or refuses GSO: the fallback sends each datagram).
final class QuicSocketTests: XCTestCase {
    /// recvmmsg (Syscall.recvMany): a GSO batch from one sender and a datagram from another
    /// arrive as separate reads of one call, each with its sender and GRO segment size; a call
    /// with less than the batch's slots means the socket is drained.
    func testRecvManyTakesSeveralReadsWithTheirSenders() throws {
        let rx = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        let tx1 = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        let tx2 = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        defer { close(rx); close(tx1); close(tx2) }
        let any = SocketAddress(Endpoint(IPAddress("127.0.0.1")!, 0))
        XCTAssertEqual(any.withSockaddr { bind(rx, $0, $1) }, 0)
        XCTAssertEqual(any.withSockaddr { bind(tx2, $0, $1) }, 0)
        QuicCarrier.tune(rx)
        var bound = SocketAddress()
        _ = bound.withMutableSockaddr { getsockname(rx, $0, $1) }
        let port2 = Sockets.localEndpoint(tx2)?.port
        let sizes = Array(repeating: 1200, count: 5) + [77]
        var batch = [UInt8]()
        for (i, n) in sizes.enumerated() { batch += [UInt8](repeating: UInt8(i), count: n) }
        XCTAssertEqual(batch.withUnsafeBytes { QuicSocket.send(tx1, $0, segment: 1200, to: bound) }, .sent)
        XCTAssertEqual([UInt8](repeating: 0xEE, count: 99).withUnsafeBytes { QuicSocket.send(tx2, $0, segment: 0, to: bound) }, .sent)
        usleep(20_000)
        let rb = UDPReceiveBatch(slots: 4)
        var got: [(bytes: [UInt8], port: UInt16?)] = []
        var calls = 0
        let deadline = monotonicMilliseconds() + 2000
        while got.count < sizes.count + 1 && monotonicMilliseconds() < deadline {
            guard case .success(let k) = Syscall.recvMany(rx, rb) else { usleep(1000); continue }
            calls += 1
            XCTAssertLessThan(k, rb.slots)
            for i in 0..<k {
                let r = rb.read(i)
                QuicSocket.split(r.bytes.baseAddress!, r.bytes.count, segment: r.segment) { got.append(([UInt8]($0), r.from.endpoint?.port)) }
            }
        }
        XCTAssertEqual(calls, 1, "both senders' reads in one recvmmsg")
        XCTAssertEqual(got.map(\.bytes.count), sizes + [99])
        for (i, d) in got.prefix(sizes.count).enumerated() { XCTAssertTrue(d.bytes.allSatisfy { $0 == UInt8(i) }, "datagram \(i)") }
        XCTAssertEqual(got.last?.port, port2)
        XCTAssertNotEqual(got.first?.port, port2)
        guard case .failure(let e) = Syscall.recvMany(rx, rb) else { return XCTFail("a drained socket read something") }
        XCTAssertEqual(e, .again)
    }

    func testBatchArrivesAsTheSameDatagrams() throws {
        let rx = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        let tx = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        XCTAssertGreaterThanOrEqual(rx, 0)
        XCTAssertGreaterThanOrEqual(tx, 0)
        defer { close(rx); close(tx) }
        let any = SocketAddress(Endpoint(IPAddress("127.0.0.1")!, 0))
        XCTAssertEqual(any.withSockaddr { bind(rx, $0, $1) }, 0)
        QuicCarrier.tune(rx)
        var bound = SocketAddress()
        _ = bound.withMutableSockaddr { getsockname(rx, $0, $1) }

        // 10 packets of 1 452 bytes and a last one of 300, each filled with its index.
        let sizes = Array(repeating: 1452, count: 10) + [300]
        var batch = [UInt8]()
        for (i, n) in sizes.enumerated() { batch += [UInt8](repeating: UInt8(i), count: n) }
        XCTAssertEqual(batch.withUnsafeBytes { QuicSocket.send(tx, $0, segment: 1452, to: bound) }, .sent)
        // A datagram sent on its own (segment 0).
        XCTAssertEqual([UInt8](repeating: 0xEE, count: 99).withUnsafeBytes { QuicSocket.send(tx, $0, segment: 0, to: bound) }, .sent)

        var got: [[UInt8]] = []
        let buf = UnsafeMutableRawPointer.allocate(byteCount: 65_536, alignment: 16)
        defer { buf.deallocate() }
        let deadline = monotonicMilliseconds() + 2000
        while got.count < sizes.count + 1 && monotonicMilliseconds() < deadline {
            var seg = 0
            var from = SocketAddress()
            switch Syscall.recvSegments(rx, buf, 65_536, segment: &seg, from: &from) {
            case .success(let n):
                QuicSocket.split(buf, n, segment: seg) { got.append([UInt8]($0)) }
            case .failure:
                usleep(1000)
            }
        }
        XCTAssertEqual(got.map(\.count), sizes + [99])
        for (i, d) in got.prefix(sizes.count).enumerated() { XCTAssertTrue(d.allSatisfy { $0 == UInt8(i) }, "datagram \(i)") }
    }
}
