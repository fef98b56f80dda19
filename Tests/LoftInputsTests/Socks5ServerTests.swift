import Glibc
import LoftCore
import LoftIO
import LoftTestSupport
import XCTest
@testable import LoftInputs

/// A SOCKS5 client on a nonblocking loopback socket, driven by the test's steps.
private final class Client {
    let fd: Int32
    var received: [UInt8] = []
    private(set) var closed = false

    init(to server: Endpoint) {
        fd = Sockets.make(family: AF_INET, type: Int32(SOCK_STREAM.rawValue))
        _ = SocketAddress(server).withSockaddr { Glibc.connect(fd, $0, $1) }
    }

    deinit { Glibc.close(fd) }

    func send(_ bytes: [UInt8]) {
        let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        XCTAssertEqual(n, bytes.count)
    }

    /// Reads what has arrived; notes EOF or a reset.
    func poll() {
        var buf = [UInt8](repeating: 0, count: 4096)
        while !closed {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 { received += buf[0..<n]; continue }
            if n == 0 || errno != EAGAIN { closed = true }
            return
        }
    }

    /// A step: true once `count` bytes have arrived.
    func has(_ count: Int) -> () -> Bool { { [self] in poll(); return received.count >= count } }
}

/// The SOCKS5 server through its public API: real sockets on loopback, the fake outbound
/// behind the router; deadlines on virtual time.
final class Socks5ServerTests: XCTestCase {
    private let connectRequest: [UInt8] = [5, 1, 0, 1, 198, 18, 1, 2, 0, 80]

    private func server(_ loop: EventLoop, _ router: FlowRouter, configure: (inout Socks5Server.Options) -> Void = { _ in })
        throws -> Socks5Server {
        var options = Socks5Server.Options(listen: Endpoint(.v4(0x7F00_0001), 0), maxClients: 8)
        configure(&options)
        // Port 0: the kernel picks the TCP port, and the UDP socket takes the same number, which
        // another UDP socket on this shared machine may hold; then another port is tried.
        for _ in 0..<50 {
            let s = Socks5Server(options: options, loop: loop, router: router)
            do {
                try s.start()
                return s
            } catch let e as Socks5Server.StartError where e.description.contains("cannot bind UDP") {
                continue
            }
        }
        throw XCTSkip("no port free for both TCP and UDP in 50 tries")
    }

    override func setUp() { Log.threshold = .warn }

    func testConnectRelaysBothWaysThroughTheOutbound() throws {
        let loop = try EventLoop()
        let out = TestOutbound()
        let router = OneWayRouter(.outbound(out))
        let s = try server(loop, router)
        defer { s.stop() }
        let c = Client(to: s.bound)
        let failed = loop.run(steps: [
            { c.send([5, 1, 0]); return true },
            c.has(2),
            { c.send(self.connectRequest); return true },
            { out.streams.count == 1 },
            { out.streams[0].connect(); return true },
            c.has(12),
            { c.send(Array("hello".utf8)); return true },
            { out.streams[0].written.count == 5 },
            { out.streams[0].feed(Array("world".utf8)); return true },
            c.has(17),
        ], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(Array(c.received.prefix(2)), [5, 0], "no authentication chosen")
        XCTAssertEqual(Array(c.received[2..<12]), Socks5.reply(.succeeded))
        XCTAssertEqual(Array(c.received[12...]), Array("world".utf8))
        XCTAssertEqual(out.streams.first?.written, Array("hello".utf8))
        XCTAssertEqual(out.streams.first?.destination, .ip(Endpoint(IPAddress("198.18.1.2")!, 80)))
        XCTAssertEqual(router.requests.first?.network, .tcp)
        XCTAssertEqual(router.requests.first?.source.address, IPAddress("127.0.0.1")!)
        let k = s.counters
        XCTAssertEqual(k.clientsAccepted, 1)
        XCTAssertEqual(k.replied(.succeeded), 1)
        XCTAssertEqual(k.tcpBytesUp, 5)
        XCTAssertEqual(k.tcpBytesDown, 5)
    }

    /// On virtual time: an outbound that never connects is answered 0x06 at connect-timeout.
    func testConnectTimeoutIsAnsweredTTLExpired() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let out = TestOutbound()
        let s = try server(loop, OneWayRouter(.outbound(out))) { $0.connectTimeoutMs = 1_000 }
        defer { s.stop() }
        let c = Client(to: s.bound)
        var asked: UInt64 = 0
        let failed = loop.run(steps: [
            { c.send([5, 1, 0]); return true },
            c.has(2),
            { c.send(self.connectRequest); asked = loop.currentTime; return true },
            c.has(12),
        ], seconds: 60)
        XCTAssertNil(failed)
        XCTAssertEqual(Array(c.received[2..<12]), Socks5.reply(.ttlExpired))
        XCTAssertGreaterThanOrEqual(loop.currentTime - asked, 1_000)
        XCTAssertEqual(s.counters.connectTimeouts, 1)
        XCTAssertEqual(out.streams.first?.resetCalls, 1, "the outbound's stream was given up")
    }

    /// On virtual time: a client that says nothing is closed at the handshake deadline.
    func testSilentClientIsClosedAtTheHandshakeDeadline() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let s = try server(loop, OneWayRouter(.drop(reset: true))) { $0.handshakeTimeoutMs = 1_000 }
        defer { s.stop() }
        let start = loop.currentTime
        let c = Client(to: s.bound)
        let failed = loop.run(steps: [{ c.poll(); return c.closed }], seconds: 60)
        XCTAssertNil(failed)
        XCTAssertTrue(c.received.isEmpty)
        XCTAssertGreaterThanOrEqual(loop.currentTime - start, 1_000)
        XCTAssertEqual(s.counters.handshakeTimeouts, 1)
        XCTAssertEqual(s.counters.openClients, 0)
    }

    func testDropRuleIsNotAllowed() throws {
        let loop = try EventLoop()
        let s = try server(loop, OneWayRouter(.drop(reset: true)))
        defer { s.stop() }
        let c = Client(to: s.bound)
        let failed = loop.run(steps: [
            { c.send([5, 1, 0] + self.connectRequest); return true },
            c.has(12),
        ], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(Array(c.received[2..<12]), Socks5.reply(.notAllowed))
        XCTAssertEqual(s.counters.replied(.notAllowed), 1)
    }

    func testGreetingWithoutNoAuthenticationIsRejected() throws {
        let loop = try EventLoop()
        let s = try server(loop, OneWayRouter(.drop(reset: true)))
        defer { s.stop() }
        let c = Client(to: s.bound)
        let failed = loop.run(steps: [{ c.send([5, 1, 2]); return true }, c.has(2)], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(c.received, [5, 0xFF])
        XCTAssertEqual(s.counters.methodRejected, 1)
    }

    func testBindIsNotSupported() throws {
        let loop = try EventLoop()
        let s = try server(loop, OneWayRouter(.drop(reset: true)))
        defer { s.stop() }
        let c = Client(to: s.bound)
        let failed = loop.run(steps: [
            { c.send([5, 1, 0, 5, 2, 0, 1, 198, 18, 1, 2, 0, 80]); return true },
            c.has(12),
        ], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(Array(c.received[2..<12]), Socks5.reply(.commandNotSupported))
    }

    /// UDP ASSOCIATE: the reply names the server's address; a datagram from the client goes to
    /// the outbound's association without its header, and a reply comes back with one.
    func testUDPAssociateCarriesDatagramsBothWays() throws {
        let loop = try EventLoop()
        let out = TestOutbound()
        let s = try server(loop, OneWayRouter(.outbound(out)))
        defer { s.stop() }
        let c = Client(to: s.bound)
        let u = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        defer { Glibc.close(u) }
        _ = SocketAddress(Endpoint(.v4(0x7F00_0001), 0)).withSockaddr { bind(u, $0, $1) }
        let dns = Endpoint(IPAddress("198.18.1.3")!, 53)
        let header: [UInt8] = [0, 0, 0, 1, 198, 18, 1, 3, 0, 53]
        var reply: [UInt8] = []
        let failed = loop.run(steps: [
            { c.send([5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0]); return true },
            c.has(12),
            {
                let d = header + [7, 8, 9]
                _ = SocketAddress(s.bound).withSockaddr { to, len in
                    d.withUnsafeBytes { sendto(u, $0.baseAddress, $0.count, 0, to, len) }
                }
                return true
            },
            { out.associations.first?.sent.count == 1 },
            { out.associations[0].reply([4, 2], from: dns); return true },
            { reply = receiveDatagram(u) ?? []; return !reply.isEmpty },
        ], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(Array(c.received[2..<12]), Socks5.reply(.succeeded, bound: s.bound))
        XCTAssertEqual(out.associations.first?.sent.first?.payload, [7, 8, 9])
        XCTAssertEqual(out.associations.first?.sent.first?.to, .ip(dns))
        XCTAssertEqual(reply, header + [4, 2])
        XCTAssertEqual(s.counters.associationsOpened, 1)
        XCTAssertEqual(s.counters.udpPacketsUp, 1)
        XCTAssertEqual(s.counters.udpPacketsDown, 1)
    }
}
