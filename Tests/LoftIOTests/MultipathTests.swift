import XCTest
import Glibc
import LoftCore
import LoftIO

/// Multipath TCP as the kernel reports it (`Multipath.of`), over real loopback connections: an
/// MPTCP socket to an MPTCP listener runs MPTCP with one subflow whose addresses are the
/// connection's; to a TCP listener it falls back to TCP; a TCP socket is plain TCP.
final class MultipathTests: XCTestCase {
    private var fds: [Int32] = []

    override func setUpWithError() throws {
        guard case .success(let s) = Syscall.socket(family: AF_INET, type: Sockets.stream, protocol: Multipath.protocolNumber) else {
            throw XCTSkip("this kernel makes no MPTCP sockets (CONFIG_MPTCP off or net.mptcp.enabled=0)")
        }
        _ = Syscall.close(s)
    }

    override func tearDown() {
        for fd in fds { _ = Syscall.close(fd) }
        fds = []
    }

    private func keep(_ fd: Int32) -> Int32 { fds.append(fd); return fd }

    /// A listener on 127.0.0.1 (port picked by the kernel), a client connected to it, the
    /// accepted end.
    private func connection(serverMultipath: Bool, clientMultipath: Bool) throws -> (client: Int32, server: Int32, port: UInt16) {
        let l = keep(Sockets.makeStream(family: AF_INET, multipath: serverMultipath))
        XCTAssertGreaterThanOrEqual(l, 0)
        try Syscall.bind(l, to: SocketAddress(Endpoint(.v4(0x7F00_0001), 0))).get()
        try Syscall.listen(l, backlog: 4).get()
        let port = try XCTUnwrap(Sockets.localEndpoint(l)).port
        let c = keep(Sockets.makeStream(family: AF_INET, multipath: clientMultipath))
        if case .failure(let e) = Syscall.connect(c, to: SocketAddress(Endpoint(.v4(0x7F00_0001), port))) {
            XCTAssertEqual(e, .inProgress)
        }
        for _ in 0..<200 {
            if case .success(let s) = Syscall.accept(l) {
                for _ in 0..<200 where Syscall.socketError(c) != 0 || Syscall.peerAddress(c).map({ _ in 0 }) != .success(0) { usleep(10_000) }
                return (c, keep(s), port)
            }
            usleep(10_000)
        }
        throw XCTSkip("no loopback connection within 2 s")
    }

    func testBothEndsMultipath() throws {
        let (c, s, port) = try connection(serverMultipath: true, clientMultipath: true)
        let m = try XCTUnwrap(Multipath.of(c))
        XCTAssertTrue(m.active)
        XCTAssertEqual(m.subflowCount, 1)
        XCTAssertEqual(m.subflows.count, 1)
        XCTAssertEqual(m.subflows.first?.remote, Endpoint(.v4(0x7F00_0001), port))
        XCTAssertEqual(m.subflows.first?.local, Sockets.localEndpoint(c))
        XCTAssertTrue(m.description.hasPrefix("mptcp, 1 subflow: 127.0.0.1:"), m.description)
        XCTAssertTrue(m.description.hasSuffix("->127.0.0.1:\(port)"), m.description)
        XCTAssertEqual(Multipath.of(s)?.active, true)
    }

    func testFallbackAgainstATCPListener() throws {
        let (c, s, _) = try connection(serverMultipath: false, clientMultipath: true)
        XCTAssertEqual(Multipath.of(c), Multipath(active: false))
        XCTAssertEqual(Multipath.of(c)?.description, "tcp (mptcp fell back)")
        XCTAssertEqual(Multipath.of(s)?.active, false)
    }

    func testTCPClientOfAMultipathListener() throws {
        let (c, s, _) = try connection(serverMultipath: true, clientMultipath: false)
        XCTAssertEqual(Multipath.of(c)?.active, false)
        XCTAssertEqual(Multipath.of(s)?.active, false)
    }

    func testNotATCPSocket() throws {
        XCTAssertNil(Multipath.of(-1))
        let u = keep(Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue)))
        XCTAssertNil(Multipath.of(u))
        // The subflow list of a plain TCP socket: the kernel refuses (EOPNOTSUPP).
        let t = keep(Sockets.make(family: AF_INET, type: Sockets.stream))
        XCTAssertEqual(Syscall.multipathSubflows(t, max: 4).map { $0.count }, .failure(Errno(EOPNOTSUPP)))
    }

    /// After a path change a connection is worth keeping only while a subflow starts at an
    /// address the host still has.
    func testKeepsAPath() throws {
        let (c, _, _) = try connection(serverMultipath: true, clientMultipath: true)
        XCTAssertEqual(Multipath.of(c)?.keepsAPath, true)
        let f = Endpoint(.v4(0xC612_0002), 443)
        let gone = Endpoint(.v4(0xC613_FFFE), 40000)  // 198.19.255.254: no host here has it
        let local = try XCTUnwrap(Sockets.localEndpoint(c))
        XCTAssertFalse(Multipath(active: true, subflowCount: 1, subflows: [.init(local: gone, remote: f)]).keepsAPath)
        XCTAssertTrue(Multipath(active: true, subflowCount: 2, subflows: [.init(local: gone, remote: f), .init(local: local, remote: f)]).keepsAPath)
        XCTAssertFalse(Multipath(active: false).keepsAPath)
        XCTAssertFalse(Multipath(active: true, subflowCount: 1).keepsAPath)  // addresses unknown
    }

    func testDescriptionOfSeveralSubflows() {
        let a = Endpoint(.v4(0xC612_0001), 40000), b = Endpoint(.v4(0xC612_0011), 40001), f = Endpoint(.v4(0xC612_0002), 443)
        let m = Multipath(active: true, subflowCount: 2, subflows: [.init(local: a, remote: f), .init(local: b, remote: f)])
        XCTAssertEqual(m.description, "mptcp, 2 subflows: 198.18.0.1:40000->198.18.0.2:443 198.18.0.17:40001->198.18.0.2:443")
        XCTAssertEqual(Multipath(active: true, subflowCount: 3).description, "mptcp, 3 subflows")
    }
}
