import Foundation
import LoftCarriers
import LoftCore
import LoftIO
import LoftTLS
import LoftTestSupport
import XCTest

/// Client ↔ server over each carrier on 127.0.0.1, with the test PKI.
final class LoopbackTests: XCTestCase {
    static let mib = 1 << 20
    /// The carriers over TLS on TCP (quic has its own tests: QuicCarrierTests).
    static let tlsKinds: [CarrierKind] = [.ws, .get, .h2]

    // MARK: transfers

    /// Moves `size` bytes each way at once, checks SHA-256 both ways and a clean close.
    private func transfer(_ kind: CarrierKind, size: Int) throws {
        let h = try Harness()
        let acceptor = Acceptor { _ in StreamPeer(total: size, expectReceive: size) }
        let listener = try h.listener(delegate: acceptor)
        let client = try h.client(kind, port: listener.localEndpoint.port)
        let peer = StreamPeer(total: size, expectReceive: size)
        let carrier = client.dial(delegate: peer)
        peer.carrier = carrier
        let (ok, elapsed, tlsDescription) = exchangeAndClose(h, carrier, peer, acceptor, seconds: 180)
        XCTAssertTrue(ok, "timed out: client sent \(peer.sent) got \(peer.received)")
        XCTAssertNil(peer.closedReason)
        guard let server = acceptor.peers.first as? StreamPeer else { return XCTFail("no carrier accepted") }
        XCTAssertEqual(peer.sent, size)
        XCTAssertEqual(server.received, size)
        XCTAssertEqual(server.sent, size)
        XCTAssertEqual(peer.received, size)
        XCTAssertEqual(peer.sentDigest, server.receivedDigest, "client → server SHA-256")
        XCTAssertEqual(server.sentDigest, peer.receivedDigest, "server → client SHA-256")
        XCTAssertEqual(server.closedReason, .closed)
        XCTAssertTrue(tlsDescription.hasPrefix("TLSv1.3 ") && tlsDescription.hasSuffix(kind == .h2 ? "alpn=h2" : "alpn=http/1.1"), tlsDescription)
        if kind == .get { XCTAssertEqual(acceptor.carriers.first?.request?.sessionID?.count, 32) }
        let mbps = Double(size * 2) / Double(max(elapsed, 1)) / 1000
        print("carrier \(kind.rawValue): \(size / Self.mib) MiB each way in \(elapsed) ms, \(String(format: "%.0f", mbps)) MB/s both ways together")
        listener.close()
    }

    func testWS50MiBBothWays() throws { try transfer(.ws, size: 50 * Self.mib) }
    func testGet50MiBBothWays() throws { try transfer(.get, size: 50 * Self.mib) }
    func testH250MiBBothWays() throws { try transfer(.h2, size: 50 * Self.mib) }

    // MARK: backpressure

    /// The server sends as fast as it can to a client that stops reading: the server's buffer
    /// stays bounded and it stops being able to write; when the client reads again, everything
    /// arrives intact.
    private func backpressure(_ kind: CarrierKind) throws {
        let size = 48 * Self.mib
        let output = 128 * 1024
        let h = try Harness()
        let acceptor = Acceptor { _ in StreamPeer(total: size, expectReceive: 0) }
        let listener = try h.listener(output: output, delegate: acceptor)
        let client = try h.client(kind, port: listener.localEndpoint.port)
        let peer = StreamPeer(total: 0, expectReceive: size)
        let carrier = client.dial(delegate: peer)
        peer.carrier = carrier
        var pausedOnce = false
        peer.onReceive = { p in
            if !pausedOnce && p.received >= 1 * Self.mib {
                pausedOnce = true
                p.carrier?.setReading(false)
            }
        }
        var stalledAt = -1
        var receivedWhilePaused = -1
        var resumed = false
        var rssDuring: UInt64 = 0
        let rssBefore = residentBytes()
        var checkScheduled = false
        let ok = h.run(seconds: 120) {
            guard let server = acceptor.peers.first as? StreamPeer else { return peer.closedReason != nil }
            if pausedOnce && !checkScheduled {
                checkScheduled = true
                // Give the server a second to fill every buffer on the way, then look.
                h.after(1000) {
                    let a = server.sent
                    receivedWhilePaused = peer.received
                    h.after(500) {
                        stalledAt = a == server.sent ? a : -1
                        rssDuring = residentBytes()
                        resumed = true
                        peer.carrier?.setReading(true)
                    }
                }
            }
            return resumed && peer.receiveDone || peer.closedReason != nil
        }
        XCTAssertTrue(ok, "timed out: got \(peer.received) of \(size)")
        guard let server = acceptor.peers.first as? StreamPeer else { return XCTFail("no carrier") }
        XCTAssertGreaterThan(stalledAt, 0, "the server kept sending while the client was paused")
        XCTAssertLessThan(stalledAt, 24 * Self.mib, "too much in flight for a paused reader")
        XCTAssertLessThanOrEqual(server.maxBuffered, output, "carrier output buffer over its bound")
        XCTAssertGreaterThan(server.writesRefused, 0)
        XCTAssertLessThan(receivedWhilePaused - Self.mib, 256 * 1024, "deliveries went on after setReading(false)")
        XCTAssertLessThan(rssDuring, rssBefore + 64 * UInt64(Self.mib), "memory grew while the reader was paused")
        XCTAssertEqual(peer.received, size)
        XCTAssertEqual(server.sentDigest, peer.receivedDigest)
        carrier.close()
        listener.close()
    }

    func testWSBackpressureBoundsMemory() throws { try backpressure(.ws) }
    func testGetBackpressureBoundsMemory() throws { try backpressure(.get) }
    func testH2BackpressureBoundsMemory() throws { try backpressure(.h2) }

    // MARK: certificate checks

    /// Dials with `tls` and returns the client's close reason, or nil if it connected.
    private func dialOutcome(_ kind: CarrierKind, tls: TLSClientOptions, path: String = "/loft", refuse: Bool = false,
                             host: String = "127.0.0.1") throws -> (connected: Bool, reason: CarrierCloseReason?, listener: CarrierListenerStats) {
        let h = try Harness()
        let acceptor = Acceptor { c in EchoPeer(c) }
        acceptor.refuse = refuse
        let listener = try h.listener(delegate: acceptor)
        let client = try h.client(kind, port: listener.localEndpoint.port, path: path, tls: tls, host: host)
        let rec = Recorder()
        let carrier = client.dial(delegate: rec)
        h.run(seconds: 10) { rec.connected || rec.closedReason != nil }
        carrier.abort()
        return (rec.connected, rec.closedReason, listener.stats)
    }

    private func tlsFailure(_ r: CarrierCloseReason?) -> String? {
        if case .tls(let m) = r { return m }
        return nil
    }

    func testCAVerificationSucceedsWithTheRightCA() throws {
        for kind in Self.tlsKinds {
            let r = try dialOutcome(kind, tls: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.ca))
            XCTAssertTrue(r.connected, "\(kind): \(String(describing: r.reason))")
            // The IP address in the certificate's SAN works as a name too.
            let ip = try dialOutcome(kind, tls: TLSClientOptions(caFile: TestPKI.shared.ca))
            XCTAssertTrue(ip.connected, "\(kind) by IP: \(String(describing: ip.reason))")
        }
    }

    func testWrongCAFails() throws {
        for kind in Self.tlsKinds {
            let r = try dialOutcome(kind, tls: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.otherCA))
            XCTAssertFalse(r.connected)
            XCTAssertTrue(tlsFailure(r.reason)?.contains("certificate verify failed") ?? false, "\(String(describing: r.reason))")
        }
    }

    func testHostnameMismatchFails() throws {
        let r = try dialOutcome(.ws, tls: TLSClientOptions(serverName: "other.test", caFile: TestPKI.shared.ca))
        XCTAssertFalse(r.connected)
        XCTAssertTrue(tlsFailure(r.reason)?.contains("hostname mismatch") ?? false, "\(String(describing: r.reason))")
    }

    func testPinMatchAndMismatch() throws {
        let pinText = try TLSContext.pin(ofCertificateFile: TestPKI.shared.cert)
        let pin = try XCTUnwrap(TLSClientOptions.parsePin(pinText))
        for kind in Self.tlsKinds {
            let good = try dialOutcome(kind, tls: TLSClientOptions(serverName: "front.test", pinSHA256: pin))
            XCTAssertTrue(good.connected, "\(kind): \(String(describing: good.reason))")
            var wrong = pin
            wrong[0] ^= 1
            let bad = try dialOutcome(kind, tls: TLSClientOptions(serverName: "front.test", pinSHA256: wrong))
            XCTAssertFalse(bad.connected)
            XCTAssertTrue(tlsFailure(bad.reason)?.contains("pin mismatch") ?? false, "\(String(describing: bad.reason))")
            XCTAssertTrue(tlsFailure(bad.reason)?.contains(pinText) ?? false, "the error names the server's pin")
        }
        // A pin and a CA: both must hold.
        let both = try dialOutcome(.ws, tls: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.otherCA, pinSHA256: pin))
        XCTAssertFalse(both.connected)
    }

    func testInsecureOnlyWhenAsked() throws {
        // No CA and no pin: the system store, which does not know the test CA.
        let strict = try dialOutcome(.ws, tls: TLSClientOptions(serverName: "front.test"))
        XCTAssertFalse(strict.connected)
        XCTAssertNotNil(tlsFailure(strict.reason))
        for kind in Self.tlsKinds {
            let lax = try dialOutcome(kind, tls: TLSClientOptions(serverName: "front.test", insecure: true))
            XCTAssertTrue(lax.connected, "\(kind): \(String(describing: lax.reason))")
        }
    }

    func testBadCAFileIsAnErrorAtSetUp() throws {
        let h = try Harness()
        XCTAssertThrowsError(try h.client(.ws, port: 1, tls: TLSClientOptions(caFile: "/nonexistent/ca.pem")))
        XCTAssertThrowsError(try CarrierListener(CarrierServerOptions(listen: Endpoint(.v4(0x7F00_0001), 0),
                                                                      tls: TLSServerOptions(certificateFile: TestPKI.shared.cert,
                                                                                            keyFile: TestPKI.shared.ca)),
                                                 runtime: h.runtime, delegate: Acceptor { EchoPeer($0) }))
    }

    // MARK: refusals

    func testWrongPathGets404() throws {
        for kind in Self.tlsKinds {
            let r = try dialOutcome(kind, tls: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.ca), path: "/other")
            XCTAssertFalse(r.connected)
            guard case .rejected(let status, _) = r.reason else { return XCTFail("\(kind): \(String(describing: r.reason))") }
            XCTAssertEqual(status, 404)
            XCTAssertGreaterThanOrEqual(r.listener.rejected, 1)
        }
    }

    func testAdmitHookRefusalGets403() throws {
        for kind in Self.tlsKinds {
            let r = try dialOutcome(kind, tls: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.ca), refuse: true)
            guard case .rejected(let status, _) = r.reason else { return XCTFail("\(kind): \(String(describing: r.reason))") }
            XCTAssertEqual(status, 403)
        }
    }

    func testConnectionRefused() throws {
        let h = try Harness()
        // A port nobody listens on: bind one and close it.
        let probe = try h.listener(delegate: Acceptor { EchoPeer($0) })
        let port = probe.localEndpoint.port
        probe.close()
        let client = try h.client(.ws, port: port)
        let rec = Recorder()
        let c = client.dial(delegate: rec)
        h.run(seconds: 5) { rec.closedReason != nil }
        guard case .connectFailed = rec.closedReason else { return XCTFail("\(String(describing: rec.closedReason))") }
        c.abort()
    }

    func testResolvesNames() throws {
        // "localhost" goes through the loop's resolver (/etc/hosts); the certificate names it too.
        let r = try dialOutcome(.ws, tls: TLSClientOptions(caFile: TestPKI.shared.ca), host: "localhost")
        XCTAssertTrue(r.connected, "\(String(describing: r.reason))")
    }

    func testServerCloseReachesTheClient() throws {
        for kind in Self.tlsKinds {
            let h = try Harness()
            let acceptor = Acceptor { c in EchoPeer(c) }
            let listener = try h.listener(delegate: acceptor)
            let client = try h.client(kind, port: listener.localEndpoint.port)
            let rec = Recorder()
            let carrier = client.dial(delegate: rec)
            var closedServer = false
            h.run(seconds: 10) {
                if rec.connected, !closedServer, let s = acceptor.carriers.first {
                    closedServer = true
                    s.close()
                }
                return rec.closedReason != nil
            }
            XCTAssertEqual(rec.closedReason, .closed, "\(kind)")
            XCTAssertFalse(carrier.isOpen)
            listener.close()
        }
    }

    /// On virtual time: the handshake deadline is a loop timer.
    func testHandshakeTimeoutDropsSilentClients() throws {
        let h = try Harness(clock: VirtualClock())
        let listener = try CarrierListener(CarrierServerOptions(listen: Endpoint(.v4(0x7F00_0001), 0), tls: TestPKI.shared.server,
                                                                handshakeTimeoutMs: 300),
                                           runtime: h.runtime, delegate: Acceptor { EchoPeer($0) })
        let s = Sockets.make(family: AF_INET, type: Int32(SOCK_STREAM.rawValue))
        defer { Glibc.close(s) }
        _ = SocketAddress(listener.localEndpoint).withSockaddr { Glibc.connect(s, $0, $1) }
        h.run(seconds: 5) { listener.stats.handshakeFailed > 0 }
        XCTAssertEqual(listener.stats.accepted, 1)
        XCTAssertEqual(listener.stats.handshakeFailed, 1)
    }
}

/// VmRSS of this process.
func residentBytes() -> UInt64 {
    guard let s = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in s.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kb = line.split(separator: " ").compactMap { UInt64($0) }.first ?? 0
        return kb * 1024
    }
    return 0
}
