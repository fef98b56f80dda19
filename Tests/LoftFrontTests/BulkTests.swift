import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftTLS
import LoftTestSupport
import XCTest
@testable import LoftFront

/// Megabytes through the front with the real client session on the other end: byte-exact both
/// ways, several streams at once, and bounded while the client stops reading.
final class BulkTests: XCTestCase {
    static func pattern(_ i: Int, _ stream: UInt32) -> UInt8 { UInt8(truncatingIfNeeded: i &* 31 &+ Int(stream) &* 7 &+ i >> 9) }

    func testStreamsEchoMegabytesOverEveryCarrier() throws {
        for kind in [CarrierKind.ws, .get, .h2] {
            let h = try FrontHarness()
            let echo = TCPEchoServer(loop: h.loop)
            let c = SessionClient(h, kind)
            let size = 6 << 20
            var streams: [UInt32] = []
            let ok = h.run(seconds: 60, [
                { c.session.state == .established },
                {
                    for _ in 0..<3 {
                        let id = c.session.openStream(to: .ip(Endpoint(.v4(0x7F00_0001), echo.port)))!
                        c.streams[id] = SessionClient.Transfer(total: size)
                        streams.append(id)
                    }
                    c.flush()
                    return true
                },
                { streams.allSatisfy { c.streams[$0]!.received == size && c.streams[$0]!.eof } || c.failure != nil },
            ])
            XCTAssertTrue(ok, "\(kind): stuck at step \(h.failedStep ?? -1): \(c.streams.values.map { ($0.sent, $0.received) })")
            XCTAssertNil(c.failure, "\(kind)")
            for id in streams {
                XCTAssertEqual(c.streams[id]?.mismatches, 0, "\(kind) stream \(id)")
            }
            let s = h.server.report()
            XCTAssertEqual(s.bytesUp, UInt64(3 * size), "\(kind)")
            XCTAssertEqual(s.bytesDown, UInt64(3 * size), "\(kind)")
            XCTAssertEqual(s.streamsOpen, 0, "\(kind): relays are gone once both sides finished")
        }
    }

    /// The client reads nothing: the front stops reading the destination once the stream's
    /// window is used, so a source that offers far more is held back by TCP.
    func testAClientThatDoesNotReadHoldsTheDestinationBack() throws {
        let h = try FrontHarness()
        let source = Firehose(loop: h.loop)
        let c = SessionClient(h, .ws)
        c.reading = false
        var id: UInt32 = 0
        var waitedUntil: UInt64 = 0
        let ok = h.run(seconds: 30, [
            { c.session.state == .established },
            {
                id = c.session.openStream(to: .ip(Endpoint(.v4(0x7F00_0001), source.port)))!
                c.streams[id] = SessionClient.Transfer(total: 0)
                c.session.finish(stream: id)
                c.flush()
                return true
            },
            { source.sent > 0 },
            { waitedUntil = monotonicMilliseconds() + 1500; return true },
            { monotonicMilliseconds() > waitedUntil },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        let down = h.server.report().bytesDown
        XCTAssertLessThanOrEqual(down, UInt64(LoftWire.initialStreamWindow), "the front forwarded beyond the window")
        XCTAssertGreaterThan(down, 0)
        XCTAssertLessThan(source.sent, 32 << 20, "the source was not held back")
    }
}

/// A client ClientSession over a real carrier, sending a pattern on each stream and checking
/// what comes back.
final class SessionClient: CarrierDelegate, ClientSessionDelegate {
    struct Transfer {
        var total: Int
        var sent = 0
        var received = 0
        var mismatches = 0
        var eof = false
        var finSent = false
    }

    let session = ClientSession(token: "secret-1", clientName: "bulk")
    var carrier: Carrier?
    let dialer: CarrierClient
    var streams: [UInt32: Transfer] = [:]
    var failure: String?
    var reading = true
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    init(_ h: FrontHarness, _ kind: CarrierKind) {
        dialer = try! CarrierClient(
            CarrierClientOptions(kind: kind, host: "127.0.0.1", port: h.port, path: "/loft",
                                 tls: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.dir + "/ca.pem"),
                                 connectTimeoutMs: 5000),
            runtime: h.clientRuntime)
        session.delegate = self
        carrier = dialer.dial(delegate: self)
    }

    func flush() {
        guard let c = carrier else { return }
        while session.outputCount > 0 {
            var took = 0
            session.withOutput { took = c.write($0); return took }
            if took == 0 { break }
        }
    }

    private func pump(_ id: UInt32) {
        guard var t = streams[id] else { return }
        while t.sent < t.total {
            let room = min(session.writableBytes(stream: id), buffer.count, t.total - t.sent)
            if room <= 0 { break }
            for i in 0..<room { buffer[i] = BulkTests.pattern(t.sent + i, id) }
            let n = buffer.withUnsafeBytes { session.write(stream: id, UnsafeRawBufferPointer(rebasing: $0[0..<room])) }
            t.sent += n
            if n < room { break }
        }
        if t.sent == t.total && !t.finSent && t.total > 0 {
            t.finSent = true
            session.finish(stream: id)
        }
        streams[id] = t
        flush()
    }

    private func drain(_ id: UInt32) {
        guard reading, var t = streams[id] else { return }
        loop: while true {
            let r = buffer.withUnsafeMutableBytes { session.read(stream: id, into: $0) }
            switch r {
            case .data(let n):
                for i in 0..<n where buffer[i] != BulkTests.pattern(t.received + i, id) { t.mismatches += 1 }
                t.received += n
            case .wouldBlock: break loop
            case .eof: t.eof = true; break loop
            }
        }
        streams[id] = t
        flush()
    }

    // CarrierDelegate
    func carrierConnected(_ carrier: Carrier) { session.attach(); flush() }
    func carrier(_ carrier: Carrier, received bytes: UnsafeRawBufferPointer) {
        do throws(ProtocolError) { try session.receive(bytes) } catch { failure = "\(error)" }
        flush()
    }
    func carrierWritable(_ carrier: Carrier) { flush() }
    func carrier(_ carrier: Carrier, closed reason: CarrierCloseReason) { failure = failure ?? "carrier closed: \(reason)" }

    // ClientSessionDelegate
    func sessionEstablished(_ s: ClientSession, status: Status, resumed: Bool) {}
    func sessionStatusChanged(_ s: ClientSession, status: Status) {}
    func sessionGoAway(_ s: ClientSession, reason: GoAwayReason, text: String) { failure = "GOAWAY \(reason) \(text)" }
    func streamOpened(_ s: ClientSession, stream: UInt32) { pump(stream) }
    func streamOpenFailed(_ s: ClientSession, stream: UInt32, reason: OpenFailReason) { failure = "OPEN_FAIL \(reason)" }
    func streamReadable(_ s: ClientSession, stream: UInt32) { drain(stream) }
    func streamWritable(_ s: ClientSession, stream: UInt32) { pump(stream) }
    func streamReset(_ s: ClientSession, stream: UInt32, reason: RstReason) { failure = "RST \(stream) \(reason)" }
    func datagramReceived(_ s: ClientSession, association: UInt32, from: Destination, payload: UnsafeRawBufferPointer) {}
    func sessionOutputReady(_ s: ClientSession) { flush() }
}

/// Accepts one connection and writes to it as fast as the kernel takes bytes.
final class Firehose: IOHandler {
    let loop: EventLoop
    let fd: Int32
    let port: UInt16
    private var client: Int32 = -1
    private(set) var sent = 0
    private let chunk = [UInt8](repeating: 0x5A, count: 64 * 1024)

    init(loop: EventLoop) {
        self.loop = loop
        let s = Sockets.make(family: AF_INET, type: Int32(SOCK_STREAM.rawValue))
        let addr = SocketAddress(Endpoint(.v4(0x7F00_0001), 0))
        _ = addr.withSockaddr { bind(s, $0, $1) }
        listen(s, 4)
        fd = s
        port = Sockets.localEndpoint(s)!.port
        loop.register(fd, IOEvents.readable, self)
    }

    func handleIO(_ events: UInt32) {
        if client < 0 {
            client = accept(fd, nil, nil)
            guard client >= 0 else { return }
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
            loop.register(client, IOEvents.writable, Writer(self))
            return
        }
    }

    func write() {
        while true {
            let n = chunk.withUnsafeBytes { Glibc.write(client, $0.baseAddress, $0.count) }
            if n <= 0 { return }
            sent += n
        }
    }

    final class Writer: IOHandler {
        unowned let owner: Firehose
        init(_ o: Firehose) { owner = o }
        func handleIO(_ events: UInt32) { owner.write() }
    }
}
