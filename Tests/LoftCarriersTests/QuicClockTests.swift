import CNgtcp2
@testable import LoftCarriers
import LoftCore
import LoftIO
import LoftQUIC
import LoftTLS
import LoftTestSupport
import XCTest

/// QUIC on the loop's clock: ngtcp2's timestamps are the connection's loop's `nanoseconds`, so
/// on a `VirtualClock` its timers (loss detection, the handshake timeout, the idle timeout)
/// run as the test advances time, without waiting. With ngtcp2 on a clock of its own these
/// tests fail: minutes of virtual time pass in a fraction of a second of real time.
final class QuicClockTests: XCTestCase {
    /// Two connections joined in memory: every packet crosses on the loop 1 ms later, or is
    /// lost while `cut`. Counts what each end sent.
    final class Path: QuicPacketSink, QuicConnectionDelegate {
        let loop: EventLoop
        var client: QuicConnection?
        var server: QuicConnection?
        let clientCreds: OpaquePointer
        let serverCreds: OpaquePointer
        let a = SocketAddress(Endpoint(.v4(0x7F00_0001), 41001))
        let b = SocketAddress(Endpoint(.v4(0x7F00_0001), 41002))
        /// No server: the client's packets go nowhere.
        var serverless = false
        var cut = false
        var clientSent = 0
        var handshakes = 0
        var clientClosed: CarrierCloseReason?

        init(loop: EventLoop) throws {
            self.loop = loop
            var err = [CChar](repeating: 0, count: 256)
            guard let s = cngtcp2_server_creds_new(TestPKI.shared.cert, TestPKI.shared.key, &err, err.count),
                  let c = cngtcp2_client_creds_new(TestPKI.shared.ca, nil, 0, &err, err.count) else {
                throw TLSError(cText(err))
            }
            serverCreds = s
            clientCreds = c
        }
        deinit {
            client = nil
            server = nil
            cngtcp2_creds_free(serverCreds)
            cngtcp2_creds_free(clientCreds)
        }

        func dial() throws {
            client = try QuicConnection.client(loop: loop, sink: self, creds: clientCreds, serverName: "front.test",
                                               alpn: quicALPN, local: a, remote: b, limits: QuicLimits())
            client?.delegate = self
        }

        func sendPackets(_ bytes: UnsafeRawBufferPointer, segment: Int, to: SocketAddress, from conn: QuicConnection) -> Bool {
            let toServer = conn === client
            var at = 0
            while at < bytes.count {
                let n = min(segment > 0 ? segment : bytes.count, bytes.count - at)
                let pkt = Array(bytes[at..<at + n])
                at += n
                if toServer { clientSent += 1 }
                if cut || (toServer && serverless) { continue }
                _ = loop.schedule(after: 1) { [weak self] in self?.deliver(pkt, toServer: toServer) }
            }
            return true
        }

        private func deliver(_ pkt: [UInt8], toServer: Bool) {
            pkt.withUnsafeBytes { p in
                if toServer {
                    if server == nil {
                        var secret = [UInt8](repeating: 7, count: 32)
                        secret[0] = 2
                        server = QuicConnection.server(loop: loop, sink: self, creds: serverCreds, alpn: quicALPN, secret: secret,
                                                       local: b, remote: a, packet: p, limits: QuicLimits(), delegate: self)
                    }
                    server?.receive(p, from: a, at: b)
                } else {
                    client?.receive(p, from: b, at: a)
                }
            }
        }

        func quicHandshakeDone(_ c: QuicConnection) { handshakes += 1 }
        func quicReadable(_ c: QuicConnection, stream: Int64) {}
        func quicWritable(_ c: QuicConnection, stream: Int64) {}
        func quicStreamReset(_ c: QuicConnection, stream: Int64, code: UInt64) {}
        func quicDatagram(_ c: QuicConnection, _ bytes: UnsafeRawBufferPointer) {}
        func quicClosed(_ c: QuicConnection, _ reason: CarrierCloseReason) { if c === client { clientClosed = reason } }
    }

    /// Advances `loop` in steps of `step` ms until `done` or `limitMs` have passed; the
    /// virtual milliseconds it took.
    private func advance(_ loop: EventLoop, step: UInt64 = 10, limitMs: UInt64, until done: () -> Bool) -> UInt64 {
        var passed: UInt64 = 0
        while !done() && passed < limitMs {
            loop.advance(by: step)
            passed += step
        }
        return passed
    }

    /// A client with no server: its Initial is sent again at each loss-detection deadline
    /// (PTO, backing off), and the handshake timeout (10 s from the connection's start on the
    /// loop's clock) ends it, all in virtual time.
    func testHandshakeTimeoutAndRetransmitsOnVirtualTime() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let path = try Path(loop: loop)
        path.serverless = true
        let realStart = monotonicMilliseconds()
        try path.dial()
        loop.advance(by: 1)
        XCTAssertEqual(path.clientSent, 1, "the first Initial")
        loop.advance(by: QuicLimits().handshakeTimeoutMs - 100)
        XCTAssertNil(path.clientClosed, "open until the handshake timeout")
        XCTAssertGreaterThanOrEqual(path.clientSent, 3, "the Initial was sent again at the loss-detection deadlines")
        let more = advance(loop, limitMs: 1_000) { path.clientClosed != nil }
        XCTAssertNotNil(path.clientClosed, "the handshake timeout ended the connection")
        XCTAssertLessThanOrEqual(more, 200, "at the handshake timeout")
        XCTAssertLessThan(monotonicMilliseconds() - realStart, 5_000, "virtual time, not real")
    }

    /// Once the handshake is done and the path goes silent, both ends stay up until the idle
    /// timeout (30 s) and the client ends with it: 30 s of virtual time.
    func testIdleTimeoutOnVirtualTime() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let path = try Path(loop: loop)
        let realStart = monotonicMilliseconds()
        try path.dial()
        _ = advance(loop, step: 1, limitMs: 2_000) { path.handshakes == 2 }
        XCTAssertEqual(path.handshakes, 2, "handshake")
        // What the handshake's end sends (HANDSHAKE_DONE, NEW_TOKEN, acknowledgments) crosses.
        loop.advance(by: 50)
        path.cut = true
        let idle = QuicLimits().idleTimeoutMs
        loop.advance(by: idle - 1_000)
        XCTAssertNil(path.clientClosed, "open until the idle timeout")
        let more = advance(loop, limitMs: 3_000) { path.clientClosed != nil }
        guard case .timeout(let why)? = path.clientClosed else {
            return XCTFail("\(String(describing: path.clientClosed))")
        }
        XCTAssertEqual(why, "QUIC idle timeout")
        XCTAssertLessThanOrEqual(more, 1_100, "at the idle timeout")
        XCTAssertLessThan(monotonicMilliseconds() - realStart, 5_000, "virtual time, not real")
    }
}
