import Glibc
import LoftCore

/// Multipath TCP (RFC 8684) as the kernel runs it: a stream socket made with IPPROTO_MPTCP
/// spreads one connection over subflows, one per path the path manager (`ip mptcp endpoint`)
/// offers, and falls back to plain TCP by itself when the peer or a middlebox does not speak
/// it. `Multipath.of` reads which one a connection got and its subflows. No per-byte cost: the
/// socket is read and written as any TCP socket.
public struct Multipath: Sendable, Equatable {
    /// IPPROTO_MPTCP.
    public static let protocolNumber: Int32 = 262

    /// One subflow: the path's two ends.
    public struct Subflow: Sendable, Equatable {
        public var local: Endpoint
        public var remote: Endpoint
        public init(local: Endpoint, remote: Endpoint) { self.local = local; self.remote = remote }
    }

    /// True: the connection runs MPTCP; false: it fell back to plain TCP (the peer did not
    /// answer MP_CAPABLE, or the kernel refused MPTCP sockets).
    public var active: Bool
    /// The kernel's count of subflows (0 when fell back).
    public var subflowCount: Int
    /// The first 16 subflows' addresses.
    public var subflows: [Subflow]

    public init(active: Bool, subflowCount: Int = 0, subflows: [Subflow] = []) {
        self.active = active
        self.subflowCount = subflowCount
        self.subflows = subflows
    }

    nonisolated(unsafe) private static var refusalLogged = false

    /// A nonblocking MPTCP stream socket for `family`; when the kernel refuses one (no
    /// CONFIG_MPTCP, or `net.mptcp.enabled=0`) a TCP one, said once in the log. The connection
    /// reports which it got through `of`.
    public static func open(family: Int32) -> Result<Int32, Errno> {
        let made = Sockets.open(family: family, type: Sockets.stream, protocol: protocolNumber)
        guard case .failure(let e) = made,
              e.code == EPROTONOSUPPORT || e.code == ENOPROTOOPT || e.code == EINVAL || e.code == EAFNOSUPPORT else { return made }
        if !refusalLogged {
            refusalLogged = true
            Log.warn("mptcp.unavailable", ["reason": e.description, "using": "tcp"])
        }
        return Sockets.open(family: family, type: Sockets.stream)
    }

    /// What the kernel says of `fd`'s connection: MPTCP with its subflows, or plain TCP; nil when
    /// it cannot tell (not a TCP socket, closed).
    public static func of(_ fd: Int32) -> Multipath? {
        guard fd >= 0, case .success(let on) = Syscall.multipathActive(fd) else { return nil }
        guard on else { return Multipath(active: false) }
        guard case .success(let got) = Syscall.multipathSubflows(fd, max: 16) else { return Multipath(active: true) }
        let paths = got.paths.compactMap { l, r -> Subflow? in
            guard let a = l.endpoint, let b = r.endpoint else { return nil }
            return Subflow(local: a, remote: b)
        }
        return Multipath(active: true, subflowCount: got.count, subflows: paths)
    }

    /// After a path change: the connection runs MPTCP and one of its subflows still starts at an
    /// address the host has (a socket can be bound to it), so the kernel can carry on there.
    /// False when every subflow's address went with the old path (no `ip mptcp endpoint` for the
    /// new one): the connection would only hang until it timed out.
    public var keepsAPath: Bool {
        active && subflows.contains { Multipath.isLocalAddress($0.local.address) }
    }

    /// Whether `address` is one of the host's (a UDP socket binds to it; nothing is sent).
    static func isLocalAddress(_ address: IPAddress) -> Bool {
        let e = Endpoint(address, 0)
        let s = Sockets.make(family: Sockets.family(of: e), type: Int32(SOCK_DGRAM.rawValue))
        guard s >= 0 else { return false }
        defer { _ = Syscall.close(s) }
        return (try? Syscall.bind(s, to: SocketAddress(e)).get()) != nil
    }

    /// "mptcp, 2 subflows: 198.18.0.1:40000->198.18.1.1:443, ..." or "tcp (mptcp fell back)".
    public var description: String {
        guard active else { return "tcp (mptcp fell back)" }
        var s = "mptcp, \(subflowCount) subflow\(subflowCount == 1 ? "" : "s")"
        if !subflows.isEmpty { s += ": " + subflows.map { "\($0.local)->\($0.remote)" }.joined(separator: " ") }
        return s
    }
}
