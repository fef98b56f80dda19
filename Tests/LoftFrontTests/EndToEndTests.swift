import Glibc
import LoftCarriers
import LoftConfig
import LoftCore
import LoftIO
import LoftProtocol
import LoftTestSupport
import XCTest
@testable import LoftFront

/// A real front on 127.0.0.1 and clients that write loft frames by hand, over both carriers.
final class EndToEndTests: XCTestCase {
    // Clients made by an earlier step are read when the step runs, not when the list is built.
    private func hello(_ c: @autoclosure @escaping () -> RawClient, token: String = "secret-1") -> () -> Bool {
        { c().send(.hello(Hello(token: token, clientName: "test"))); return true }
    }

    private func attached(_ c: @autoclosure @escaping () -> RawClient) -> () -> Bool {
        { c().status != nil || c().goAway != nil || c().closed != nil }
    }

    private func tcpEcho(_ kind: CarrierKind) throws {
        let h = try FrontHarness()
        let echo = TCPEchoServer(loop: h.loop)
        let c = h.dial(kind)
        let message = Array("hello through the front".utf8)
        let ok = h.run([
            { c.connected }, hello(c), attached(c),
            { c.send(.open(stream: 1, network: .tcp, destination: .ip(Endpoint(.v4(0x7F00_0001), echo.port)))); return true },
            { c.has { $0 == .openOK(stream: 1) } || c.has { if case .openFail = $0 { return true }; return false } },
            { c.send(.data(stream: 1, payload: message)); c.send(.fin(stream: 1)); return true },
            { c.has { $0 == .fin(stream: 1) } },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames)")
        let s = try XCTUnwrap(c.status)
        XCTAssertEqual(s.overlay.ipv4, IPPrefix("198.18.64.2/24"))
        XCTAssertEqual(s.overlay.gateway4, IPAddress("198.18.64.1"))
        XCTAssertEqual(s.overlay.ipv6, IPPrefix("fd00:64::2/64"))
        XCTAssertEqual(s.overlay.gateway6, IPAddress("fd00:64::1"))
        XCTAssertEqual(s.overlay.mtu, 1400)
        XCTAssertEqual(s.overlay.dns, [IPAddress("198.18.1.2")!])
        XCTAssertEqual(s.keepaliveMs, 10_000)
        XCTAssertEqual(s.maxStreams, 8)
        XCTAssertEqual(c.data[1], message)
        let stats = h.server.report()
        XCTAssertEqual(stats.sessionsOpened, 1)
        XCTAssertEqual(stats.streamsOpened, 1)
        XCTAssertEqual(stats.bytesUp, UInt64(message.count))
        XCTAssertEqual(stats.bytesDown, UInt64(message.count))
        XCTAssertEqual(stats.sessionsAttached, 1)
    }

    func testTCPEchoOverWS() throws { try tcpEcho(.ws) }
    func testTCPEchoOverGet() throws { try tcpEcho(.get) }
    func testTCPEchoOverH2() throws { try tcpEcho(.h2) }

    /// `mptcp: true` on the client (CarrierClientOptions.multipath) and on the front: the
    /// carrier's TCP connections run Multipath TCP (one subflow on loopback), the front counts
    /// the carrier and the connections; against a front without it, plain TCP, nothing counted.
    private func multipathEcho(_ kind: CarrierKind, front: Bool) throws {
        guard case .success(let probe) = Syscall.socket(family: AF_INET, type: Sockets.stream, protocol: Multipath.protocolNumber) else {
            throw XCTSkip("this kernel makes no MPTCP sockets")
        }
        _ = Syscall.close(probe)
        var settings = FrontHarness.settings()
        settings.mptcp = front
        let h = try FrontHarness(settings)
        let echo = TCPEchoServer(loop: h.loop)
        let c = h.dial(kind, multipath: true)
        let message = Array("hello over multipath".utf8)
        let ok = h.run([
            { c.connected }, hello(c), attached(c),
            { c.send(.open(stream: 1, network: .tcp, destination: .ip(Endpoint(.v4(0x7F00_0001), echo.port)))); return true },
            { c.has { $0 == .openOK(stream: 1) } },
            { c.send(.data(stream: 1, payload: message)); c.send(.fin(stream: 1)); return true },
            { c.has { $0 == .fin(stream: 1) } },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames)")
        XCTAssertEqual(c.data[1], message)
        let paths = try XCTUnwrap(c.carrier).multipath
        let legs = kind == .get ? 2 : 1
        XCTAssertEqual(paths.count, legs)
        XCTAssertEqual(paths.map(\.active), Array(repeating: front, count: legs))
        if front { XCTAssertEqual(paths.map(\.subflowCount), Array(repeating: 1, count: legs)) }
        let stats = h.server.report()
        XCTAssertEqual(stats.carriersMptcp, front ? 1 : 0)
        XCTAssertEqual(stats.mptcpAccepted, front ? UInt64(legs) : 0)
        XCTAssertEqual(stats.mptcpFallbacks, 0)
        XCTAssertTrue(stats.text.contains("carriers_mptcp \(front ? 1 : 0)\n"), stats.text)
    }

    func testMultipathOverWS() throws { try multipathEcho(.ws, front: true) }
    func testMultipathOverGet() throws { try multipathEcho(.get, front: true) }
    func testMultipathOverH2() throws { try multipathEcho(.h2, front: true) }
    func testMultipathFallsBackAgainstATCPFront() throws { try multipathEcho(.ws, front: false) }

    func testBadTokenIsRefused() throws {
        let h = try FrontHarness()
        let c = h.dial()
        let ok = h.run([{ c.connected }, hello(c, token: "wrong"), { c.goAway != nil }, { c.closed != nil }])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames)")
        XCTAssertEqual(c.goAway?.0, .badToken)
        XCTAssertNil(c.status)
        XCTAssertEqual(h.server.report().refusedBadToken, 1)
        XCTAssertEqual(h.server.report().carriersOpen, 0)
    }

    func testUnknownInstanceIsRefused() throws {
        let h = try FrontHarness()
        let c = h.dial()
        let ok = h.run([
            { c.connected },
            { c.send(.resume(Resume(instanceID: InstanceID(high: 1, low: 2), token: "secret-1"))); return true },
            { c.goAway != nil },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames)")
        XCTAssertEqual(c.goAway?.0, .unknownInstance)
    }

    /// RESUME on a second carrier gets the same addresses; the first carrier is superseded.
    /// After the carrier is lost, RESUME still works (the instance waits for expiry).
    func testResumeKeepsAddressesAndSupersedes() throws {
        let h = try FrontHarness()
        let a = h.dial()
        var b: RawClient!
        var c: RawClient!
        var other: RawClient!
        let ok = h.run([
            { a.connected }, hello(a), attached(a),
            { other = h.dial(); return true }, { other.connected }, hello(other, token: "secret-2"), attached(other),
            { b = h.dial(); return true }, { b.connected },
            { b.send(.resume(Resume(instanceID: a.status!.instanceID, token: "secret-2"))); return true },
            attached(b), { a.goAway != nil && a.closed != nil },
            // Carrier lost without a word: the instance is detached, then resumed again.
            { b.carrier?.abort(); return true },
            { h.server.report().sessionsAttached == 1 },
            { c = h.dial(.get); return true }, { c.connected },
            { c.send(.resume(Resume(instanceID: a.status!.instanceID, token: "secret-1"))); return true },
            attached(c),
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertEqual(a.goAway?.0, .superseded)
        XCTAssertEqual(b.status, a.status)
        XCTAssertEqual(c.status, a.status)
        XCTAssertEqual(other.status?.overlay.ipv4, IPPrefix("198.18.64.3/24"))
        let s = h.server.report()
        XCTAssertEqual(s.sessionsOpened, 2)
        XCTAssertEqual(s.sessionsResumed, 2)
        XCTAssertEqual(s.sessionsSuperseded, 1)
        XCTAssertEqual(s.sessionsAttached, 2)
    }

    func testPoolExhaustionIsOverloaded() throws {
        let h = try FrontHarness(FrontHarness.settings(pool: "198.18.64.0/30"))
        let a = h.dial()
        let b = h.dial()
        let ok = h.run([{ a.connected && b.connected }, hello(a), attached(a), hello(b), attached(b)])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertNotNil(a.status)
        XCTAssertEqual(b.goAway?.0, .overloaded)
    }

    func testExpiredInstanceCannotResume() throws {
        let h = try FrontHarness(FrontHarness.settings(expiry: .seconds(1)), clock: VirtualClock())
        let a = h.dial()
        var b: RawClient!
        let ok = h.run([
            { a.connected }, hello(a), attached(a),
            { a.carrier?.abort(); return true },
            { h.server.report().instancesExpired == 1 },
            { b = h.dial(); return true }, { b.connected },
            { b.send(.resume(Resume(instanceID: a.status!.instanceID, token: "secret-1"))); return true },
            { b.goAway != nil },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertEqual(b.goAway?.0, .unknownInstance)
    }

    func testGarbageGetsProtocolErrorAndTheFrontLivesOn() throws {
        let h = try FrontHarness()
        let bad = h.dial()
        var good: RawClient!
        let ok = h.run([
            { bad.connected },
            { bad.sendRaw([0x7E, 0, 0, 0, 0, 0, 0, 0]); return true },
            { bad.goAway != nil || bad.closed != nil },
            { good = h.dial(); return true }, { good.connected }, hello(good), attached(good),
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertEqual(bad.goAway?.0, .protocolError)
        XCTAssertNotNil(good.status)
        XCTAssertEqual(h.server.report().protocolErrors, 1)
    }

    func testRefusedDestinationsAndUnreachablePorts() throws {
        let h = try FrontHarness()
        let c = h.dial()
        // A port nobody listens on: bind one, note it, close it.
        let closedPort: UInt16 = {
            let fd = Sockets.make(family: AF_INET, type: Int32(SOCK_STREAM.rawValue))
            defer { close(fd) }
            let addr = SocketAddress(Endpoint(.v4(0x7F00_0001), 0))
            _ = addr.withSockaddr { bind(fd, $0, $1) }
            return Sockets.localEndpoint(fd)!.port
        }()
        let ok = h.run([
            { c.connected }, hello(c), attached(c),
            { c.send(.open(stream: 1, network: .tcp, destination: .ip(Endpoint(.v4(0x7F00_0001), closedPort)))); return true },
            { c.send(.open(stream: 3, network: .tcp, destination: .ip(Endpoint(IPAddress("198.18.64.9")!, 80)))); return true },
            { c.has { $0 == .openFail(stream: 1, reason: .refused) } && c.has { $0 == .openFail(stream: 3, reason: .notAllowed) } },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames)")
        XCTAssertEqual(h.server.report().streamsFailed, 2)
    }

    func testNamesAreResolvedByTheFront() throws {
        let h = try FrontHarness()
        let echo = TCPEchoServer(loop: h.loop)
        let c = h.dial()
        let ok = h.run([
            { c.connected }, hello(c), attached(c),
            { c.send(.open(stream: 1, network: .tcp, destination: .domain("localhost", echo.port))); return true },
            { c.send(.open(stream: 3, network: .tcp, destination: .domain("no-such-name.invalid", 80))); return true },
            { c.has { $0 == .openOK(stream: 1) } && c.has { $0 == .openFail(stream: 3, reason: .resolveFailed) } },
            { c.send(.data(stream: 1, payload: [7, 8, 9])); return true },
            { c.data[1] == [7, 8, 9] },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames)")
    }

    func testACarrierWithoutHelloIsClosed() throws {
        let h = try FrontHarness()
        h.server.helloDeadlineMs = 300
        let c = h.dial()
        let ok = h.run([{ c.connected }, { c.closed != nil }])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertEqual(c.goAway?.0, .protocolError)
        XCTAssertEqual(h.server.report().refusedNoHello, 1)
    }

    func testUDPAssociation() throws {
        let h = try FrontHarness()
        let echo = UDPEchoServer(loop: h.loop)
        let c = h.dial()
        let to = Endpoint(.v4(0x7F00_0001), echo.port)
        let ok = h.run([
            { c.connected }, hello(c), attached(c),
            { c.send(.open(stream: 1, network: .udp, destination: .ip(to))); return true },
            { c.has { $0 == .openOK(stream: 1) } },
            { c.send(.dgram(association: 1, remote: .ip(to), payload: [1, 2, 3])); return true },
            { c.has { $0 == .dgram(association: 1, remote: .ip(to), payload: [1, 2, 3]) } },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames)")
        XCTAssertEqual(h.server.report().datagramsUp, 1)
        XCTAssertEqual(h.server.report().datagramsDown, 1)
    }

    /// An association silent both ways for udp-idle-timeout is closed with RST timed-out; one
    /// that keeps sending stays.
    func testIdleUDPAssociationIsClosed() throws {
        let h = try FrontHarness(FrontHarness.settings(udpIdleTimeout: .milliseconds(300)), clock: VirtualClock())
        let echo = UDPEchoServer(loop: h.loop)
        let c = h.dial()
        let to = Endpoint(.v4(0x7F00_0001), echo.port)
        var lastSent: UInt64 = 0
        let ok = h.run([
            { c.connected }, hello(c), attached(c),
            { c.send(.open(stream: 1, network: .udp, destination: .ip(to)))
              c.send(.open(stream: 3, network: .udp, destination: .ip(to)))
              return true },
            { c.has { $0 == .openOK(stream: 1) } && c.has { $0 == .openOK(stream: 3) } },
            { c.send(.dgram(association: 1, remote: .ip(to), payload: [1])); return true },
            { c.has { $0 == .dgram(association: 1, remote: .ip(to), payload: [1]) } },
            {
                // Association 3 stays busy (a datagram every 50 ms) while 1 goes quiet.
                let now = h.loop.now
                if now - lastSent >= 50 {
                    lastSent = now
                    c.send(.dgram(association: 3, remote: .ip(to), payload: [3]))
                }
                return c.has { $0 == .rst(stream: 1, reason: .timedOut) }
            },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames.suffix(5))")
        XCTAssertFalse(c.has { $0 == .rst(stream: 3, reason: .timedOut) })
        let s = h.server.report()
        XCTAssertEqual(s.associationsTimedOut, 1)
        XCTAssertEqual(s.associationsOpen, 1)
    }

    func testShutdownSendsGoAwayToEverySession() throws {
        let h = try FrontHarness()
        let a = h.dial(.ws)
        let b = h.dial(.get)
        let c = h.dial(.h2)
        var done = false
        let ok = h.run([
            { a.connected && b.connected && c.connected }, hello(a), attached(a), hello(b), attached(b), hello(c), attached(c),
            { h.server.shutdown { done = true }; return true },
            { a.goAway != nil && b.goAway != nil && c.goAway != nil && done },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertEqual(a.goAway?.0, .shutdown)
        XCTAssertEqual(b.goAway?.0, .shutdown)
        XCTAssertEqual(c.goAway?.0, .shutdown)
    }

    /// quic and h3 sessions live on the listener's UDP socket: a shutdown that closed it first
    /// sent them nothing (and their connections wrote to a freed listener: loft-front died of
    /// SIGSEGV on SIGTERM in 7 of 15 runs). They get their GOAWAY, then the CONNECTION_CLOSE,
    /// and the socket closes with the last of them.
    func testShutdownSendsGoAwayOverQuicAndH3() throws {
        var settings = FrontHarness.settings()
        settings.carriers = [.ws, .quic, .h3]
        let h = try FrontHarness(settings)
        let a = h.dial(.quic)
        let b = h.dial(.h3)
        let c = h.dial(.ws)
        var done = false
        let ok = h.run([
            { a.connected && b.connected && c.connected }, hello(a), attached(a), hello(b), attached(b), hello(c), attached(c),
            { h.server.shutdown { done = true }; return true },
            { a.goAway != nil && b.goAway != nil && c.goAway != nil },
            { a.closed != nil && b.closed != nil && done },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): quic \(a.goAway.map { "\($0)" } ?? "-") \(a.closed.map { "\($0)" } ?? "-"), h3 \(b.goAway.map { "\($0)" } ?? "-") \(b.closed.map { "\($0)" } ?? "-")")
        XCTAssertEqual(a.goAway?.0, .shutdown)
        XCTAssertEqual(b.goAway?.0, .shutdown)
        XCTAssertEqual(c.goAway?.0, .shutdown)
        // The UDP port is free again: the socket closed with its last connection.
        let u = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { Glibc.close(u) }
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = h.port.bigEndian
        sa.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(u, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        XCTAssertEqual(rc, 0, "the quic listener's UDP port \(h.port) is still bound: errno \(errno)")
    }
}
