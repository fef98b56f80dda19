import CLinux
import Glibc
import LoftCore

// The rest of the funnel's socket side: the calls inputs, the control socket and the executables
// make (socket set-up, TUN, batches of datagrams, AF_UNIX, route changes, process limits).
// (rtnetlink requests are `RouteNetlink`, in LoftIO too.)
extension Syscall {
    // MARK: sockets

    public static func bind(_ fd: Int32, to address: SocketAddress) -> Result<Void, Errno> {
        check(address.withSockaddr { Glibc.bind(fd, $0, $1) })
    }

    public static func listen(_ fd: Int32, backlog: Int32) -> Result<Void, Errno> {
        check(Glibc.listen(fd, backlog))
    }

    /// setsockopt with an int value.
    public static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) -> Result<Void, Errno> {
        var v = value
        return check(setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size)))
    }

    /// TCP_NODELAY.
    @discardableResult
    public static func setNoDelay(_ fd: Int32) -> Bool { clinux_set_nodelay(fd) == 0 }

    /// SO_LINGER 0: the close that follows sends an RST.
    @discardableResult
    public static func setLingerReset(_ fd: Int32) -> Bool { clinux_set_linger_reset(fd) == 0 }

    /// recvmmsg into `count` slots of `slot` bytes at `base` (a connected UDP socket); `lens[i]`
    /// is each datagram's length, -1 when it did not fit. The count.
    public static func receiveBatch(_ fd: Int32, _ base: UnsafeMutablePointer<UInt8>, slot: Int, count: Int32,
                                    lens: UnsafeMutablePointer<Int32>) -> Result<Int, Errno> {
        shim(clinux_recv_batch(fd, base, slot, count, lens)).map(Int.init)
    }

    /// sendmmsg of `count` datagrams of `lens[i]` bytes, each at `base + i * slot`: how many went.
    public static func sendBatch(_ fd: Int32, _ base: UnsafePointer<UInt8>, slot: Int, lens: UnsafePointer<Int32>,
                                 count: Int32) -> Result<Int, Errno> {
        shim(clinux_send_batch(fd, base, slot, lens, count)).map(Int.init)
    }

    /// getsockname: the socket's own address.
    public static func localAddress(_ fd: Int32) -> Result<SocketAddress, Errno> {
        var a = SocketAddress()
        return check(a.withMutableSockaddr { getsockname(fd, $0, $1) }).map { a }
    }

    /// getpeername: the connected peer's address.
    public static func peerAddress(_ fd: Int32) -> Result<SocketAddress, Errno> {
        var a = SocketAddress()
        return check(a.withMutableSockaddr { getpeername(fd, $0, $1) }).map { a }
    }

    /// TCP_IS_MPTCP: true when the connection runs Multipath TCP, false when it is plain TCP
    /// (a TCP socket, or an MPTCP one that fell back).
    public static func multipathActive(_ fd: Int32) -> Result<Bool, Errno> {
        shim(clinux_mptcp_active(fd)).map { $0 == 1 }
    }

    /// MPTCP_SUBFLOW_ADDRS: how many subflows the connection has, and the local and remote
    /// address of each of the first `max` (at most 16).
    public static func multipathSubflows(_ fd: Int32, max: Int) -> Result<(count: Int, paths: [(SocketAddress, SocketAddress)]), Errno> {
        let most = Swift.max(0, Swift.min(max, 16))
        var raw = [sockaddr_storage](repeating: sockaddr_storage(), count: 2 * most)
        return shim(clinux_mptcp_subflows(fd, &raw, Int32(most))).map { n in
            var paths: [(SocketAddress, SocketAddress)] = []
            for i in 0..<Swift.min(Int(n), most) {
                var local = SocketAddress(), remote = SocketAddress()
                local.storage = raw[2 * i]
                remote.storage = raw[2 * i + 1]
                paths.append((local, remote))
            }
            return (Int(n), paths)
        }
    }

    /// SO_ERROR: a nonblocking connect's outcome (0: connected), or the socket's pending error.
    public static func socketError(_ fd: Int32) -> Int32 { clinux_so_error(fd) }

    /// UDP GRO: one read takes up to 64 datagrams of one size from one sender.
    @discardableResult
    public static func enableUDPReceiveOffload(_ fd: Int32) -> Bool { clinux_udp_enable_gro(fd) == 0 }

    /// IP_MTU_DISCOVER / IPV6_MTU_DISCOVER: datagrams are never fragmented (DF set).
    @discardableResult
    public static func forbidFragmentation(_ fd: Int32) -> Bool { clinux_udp_no_fragment(fd) == 0 }

    /// The path MTU the kernel knows for a connected socket, 0 or less when it does not.
    public static func pathMTU(_ fd: Int32, family: Int32) -> Int { Int(clinux_path_mtu(fd, family)) }

    /// IP_RECVERR / IPV6_RECVERR on a UDP socket: ICMP errors (a port unreachable) come back on
    /// its error queue, so an unconnected socket learns a destination refused a datagram.
    @discardableResult
    public static func receiveUDPErrors(_ fd: Int32, family: Int32) -> Bool { clinux_udp_recverr(fd, family) == 0 }

    /// One error off a UDP socket's error queue: its errno (ECONNREFUSED for a port
    /// unreachable, ...) and the original datagram's destination in `to`; 0 when the queue is
    /// empty; -1 when it held something that was not an ICMP error.
    public static func readUDPError(_ fd: Int32, to: inout SocketAddress) -> Int32 {
        to.withMutableSockaddr { p, len -> Int32 in
            var l = UInt32(len.pointee)
            defer { len.pointee = socklen_t(l) }
            return clinux_udp_read_error(fd, p, &l)
        }
    }

    /// sendmsg (EINTR retried): the bytes sent.
    public static func sendmsg(_ fd: Int32, _ message: UnsafePointer<msghdr>, flags: Int32) -> Result<Int, Errno> {
        while true {
            let n = Glibc.sendmsg(fd, message, flags)
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    // MARK: AF_UNIX

    /// A nonblocking listening stream socket at `path` with `mode`; a stale socket file is
    /// replaced, a live one is `EADDRINUSE`.
    public static func unixListen(_ path: String, mode: UInt32) -> Result<Int32, Errno> {
        shim(clinux_unix_listen(path, mode))
    }

    /// A blocking stream connection to `path`.
    public static func unixConnect(_ path: String) -> Result<Int32, Errno> {
        shim(clinux_unix_connect(path))
    }

    /// The peer's uid (SO_PEERCRED), nil when the kernel does not say.
    public static func peerUID(_ fd: Int32) -> UInt32? {
        let uid = clinux_peer_uid(fd)
        return uid >= 0 ? UInt32(uid) : nil
    }

    // MARK: TUN and routes

    /// A TUN device `name` (created inside `netnsPath` when given; the thread returns to its own
    /// namespace), with the virtio-net header when `vnetHeader`.
    public static func tunOpen(_ name: String, netnsPath: String?, vnetHeader: Bool) -> Result<Int32, Errno> {
        shim(clinux_tun_open(name, netnsPath, vnetHeader ? 1 : 0))
    }

    /// TUNSETOFFLOAD flags: checksum and TCP segmentation (TSO4, TSO6, TSO_ECN) ...
    public static let tunOffloadTCP = UInt32(CLINUX_TUN_F_CSUM | CLINUX_TUN_F_TSO4 | CLINUX_TUN_F_TSO6 | CLINUX_TUN_F_TSO_ECN)
    /// ... and UDP segmentation (USO, Linux 6.2+).
    public static let tunOffloadUDP = UInt32(CLINUX_TUN_F_USO4 | CLINUX_TUN_F_USO6)

    /// TUNSETOFFLOAD with those flags.
    public static func tunSetOffload(_ fd: Int32, _ flags: UInt32) -> Result<Void, Errno> {
        shim(clinux_tun_set_offload(fd, flags)).map { _ in () }
    }

    /// A nonblocking rtnetlink socket subscribed to route changes.
    public static func routeMonitorOpen() -> Result<Int32, Errno> { shim(clinux_route_monitor_open()) }

    /// Drains it: how many default-route changes of the main table (not through `ignoring`).
    public static func routeMonitorRead(_ fd: Int32, ignoring ifindex: Int32) -> Result<Int, Errno> {
        shim(clinux_route_monitor_read(fd, ifindex)).map(Int.init)
    }

    // MARK: the process

    /// A signalfd for SIGINT, SIGTERM and SIGHUP (blocked for every thread made after).
    public static func shutdownSignalDescriptor() -> Result<Int32, Errno> { shim(clinux_signalfd_for_shutdown()) }

    /// The signal one read of that signalfd returns; 0 or less when none was there.
    public static func readShutdownSignal(_ fd: Int32) -> Int32 { clinux_signalfd_read(fd) }

    /// RLIMIT_NOFILE's soft limit raised to its hard limit: the new soft limit.
    public static func raiseFileLimit() -> Int { Int(clinux_raise_nofile()) }

    /// Resident set size and its peak (VmRSS, VmHWM) in bytes.
    public static func memoryUsage() -> (rss: UInt64, peak: UInt64) {
        var rss: UInt64 = 0, peak: UInt64 = 0
        _ = clinux_memory(&rss, &peak)
        return (rss, peak)
    }

    /// Columns of the terminal on `fd`, 0 when it is not one.
    public static func terminalWidth(_ fd: Int32) -> Int { Int(clinux_terminal_width(fd)) }
}
