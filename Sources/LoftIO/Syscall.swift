import CLinux
import Glibc
import LoftCore

// The funnel's socket side (`Syscall` is LoftCore's, with the descriptor, file, process and
// terminal calls): sockets, epoll, datagram batches and the heap. The data calls are retried
// on EINTR; connect and shutdown are not (a connect interrupted goes on in the background).
extension Syscall {
    /// Hands malloc's free memory back to the system; true if any was released.
    @discardableResult
    public static func trimHeap() -> Bool { clinux_malloc_trim() == 1 }

    /// At start-up: malloc keeps up to `bytes` of freed memory instead of handing it back at
    /// every free. Bulk transfers allocate and free 64 KiB segment buffers at line rate; with
    /// glibc's defaults each round trip shrank and regrew the heap (brk) and faulted its pages
    /// in again, a quarter of loft's CPU in a one-stream upload (perf, docs/netstack.md).
    /// `trimHeap` still gives everything back after a flood.
    public static func keepFreedMemory(upTo bytes: Int) { clinux_malloc_keep(bytes) }

    /// Bytes of malloc's heap in use now.
    public static func heapInUse() -> Int { Int(clinux_heap_in_use()) }

    public static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Gives back the whole pages inside [p, p + count) (madvise MADV_DONTNEED): they read as
    /// zeros afterwards and hold no memory until written again. Only pages wholly inside the
    /// range are touched, so memory from malloc stays valid (its headers are outside).
    public static func dropPages(_ p: UnsafeMutableRawPointer, _ count: Int) {
        guard count > 0 else { return }
        let start = (Int(bitPattern: p) + pageSize - 1) & ~(pageSize - 1)
        let end = (Int(bitPattern: p) + count) & ~(pageSize - 1)
        guard end > start else { return }
        _ = madvise(UnsafeMutableRawPointer(bitPattern: start), end - start, MADV_DONTNEED)
    }

    /// errno now: for `Sockets.make`'s callers, which get -1 and read the reason after (CLinux's,
    /// as Swift sees it; the wrappers here read `Glibc.errno` right after their call).
    public static var lastErrno: Int32 { clinux_errno() }

    /// Sets errno: `Sockets.make` returns -1 with its reason there.
    public static func setErrno(_ e: Errno) { Glibc.errno = e.code }

    public static func socket(family: Int32, type: Int32, protocol: Int32 = 0) -> Result<Int32, Errno> {
        let fd = Glibc.socket(family, type, `protocol`)
        return fd >= 0 ? .success(fd) : failure()
    }

    public static func readv(_ fd: Int32, _ vectors: UnsafePointer<iovec>, _ count: Int32) -> Result<Int, Errno> {
        while true {
            let n = Glibc.readv(fd, vectors, count)
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    public static func writev(_ fd: Int32, _ vectors: UnsafePointer<iovec>, _ count: Int32) -> Result<Int, Errno> {
        while true {
            let n = Glibc.writev(fd, vectors, count)
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    public static func recv(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, flags: Int32 = 0) -> Result<Int, Errno> {
        while true {
            let n = Glibc.recv(fd, buffer, count, flags)
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    public static func send(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, flags: Int32 = 0) -> Result<Int, Errno> {
        while true {
            let n = Glibc.send(fd, buffer, count, flags)
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    /// One datagram into `buffer`; `from` gets the sender's address.
    public static func recvfrom(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, flags: Int32 = 0,
                                from: inout SocketAddress) -> Result<Int, Errno> {
        while true {
            let n = from.withMutableSockaddr { Glibc.recvfrom(fd, buffer, count, flags, $0, $1) }
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    public static func sendto(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, flags: Int32 = 0,
                              to: SocketAddress) -> Result<Int, Errno> {
        while true {
            let n = to.withSockaddr { Glibc.sendto(fd, buffer, count, flags, $0, $1) }
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    /// One sendmsg that the kernel cuts into datagrams of `segment` bytes (UDP GSO, through
    /// CLinux; `segment` 0: one datagram); `to` nil on a connected socket.
    public static func sendSegments(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, segment: Int,
                                    to: SocketAddress?) -> Result<Int, Errno> {
        let p = buffer.assumingMemoryBound(to: UInt8.self)
        let n: Int
        if let to {
            n = to.withSockaddr { clinux_udp_send_segments(fd, p, count, Int32(segment), $0, $1) }
        } else {
            n = clinux_udp_send_segments(fd, p, count, Int32(segment), nil, 0)
        }
        return n >= 0 ? .success(n) : .failure(Errno(Int32(-n)))
    }

    /// One recvmsg that may hold several datagrams coalesced by UDP GRO: `segment` gets their
    /// size (0: one datagram), `from` the sender.
    public static func recvSegments(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, segment: inout Int,
                                    from: inout SocketAddress) -> Result<Int, Errno> {
        var seg: Int32 = 0
        let p = buffer.assumingMemoryBound(to: UInt8.self)
        let n = from.withMutableSockaddr { a, l in clinux_udp_recv_segments(fd, p, count, &seg, UnsafeMutableRawPointer(a), l) }
        segment = Int(seg)
        return n >= 0 ? .success(n) : .failure(Errno(Int32(-n)))
    }

    /// One recvmmsg of up to `batch.slots` reads (each a datagram or a UDP GRO batch) into
    /// `batch`: how many arrived. Fewer than `batch.slots` means the socket is drained (no
    /// further call to learn EAGAIN).
    public static func recvMany(_ fd: Int32, _ batch: UDPReceiveBatch) -> Result<Int, Errno> {
        let k = clinux_udp_recv_many(fd, batch.buffer.assumingMemoryBound(to: UInt8.self), batch.slotBytes, UInt32(batch.slots),
                                     batch.lens, batch.segments, batch.addresses, batch.addressLengths)
        return k >= 0 ? .success(Int(k)) : .failure(Errno(Int32(-k)))
    }

    /// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC (through CLinux): the new fd.
    public static func accept(_ fd: Int32) -> Result<Int32, Errno> {
        while true {
            let c = clinux_accept(fd)
            if c >= 0 { return .success(c) }
            if c != -EINTR { return .failure(Errno(-c)) }
        }
    }

    /// As `accept(_:)`; `peer` gets the peer's address.
    public static func accept(_ fd: Int32, peer: inout SocketAddress) -> Result<Int32, Errno> {
        while true {
            let c = peer.withMutableSockaddr { clinux_accept_from(fd, $0, $1) }
            if c >= 0 { return .success(c) }
            if c != -EINTR { return .failure(Errno(-c)) }
        }
    }

    /// On a nonblocking socket, `.failure(.inProgress)` means the connect goes on.
    public static func connect(_ fd: Int32, to address: SocketAddress) -> Result<Void, Errno> {
        address.withSockaddr { Glibc.connect(fd, $0, $1) } == 0 ? .success(()) : failure()
    }

    public static func shutdown(_ fd: Int32, _ how: Int32) -> Result<Void, Errno> {
        Glibc.shutdown(fd, how) == 0 ? .success(()) : failure()
    }

    // epoll, through CLinux (struct epoll_event is packed); those shims return -errno.

    public static func epollCreate() -> Result<Int32, Errno> {
        let fd = clinux_epoll_create()
        return fd >= 0 ? .success(fd) : .failure(Errno(-fd))
    }

    /// `op` is CLINUX_EPOLL_CTL_ADD, _MOD or _DEL; `token` comes back with the fd's events.
    public static func epollCtl(_ epfd: Int32, _ op: Int32, _ fd: Int32, _ events: UInt32, _ token: UInt64) -> Result<Void, Errno> {
        let r = clinux_epoll_ctl(epfd, op, fd, events, token)
        return r == 0 ? .success(()) : .failure(Errno(-r))
    }

    /// Waits up to `timeoutMs` (-1: no limit) for up to `max` events (at most 256); fills
    /// `tokens` and `events` and returns the count. EINTR comes back as a failure.
    public static func epollWait(_ epfd: Int32, _ tokens: UnsafeMutablePointer<UInt64>, _ events: UnsafeMutablePointer<UInt32>,
                                 _ max: Int32, _ timeoutMs: Int32) -> Result<Int, Errno> {
        let n = clinux_epoll_wait(epfd, tokens, events, max, timeoutMs)
        return n >= 0 ? .success(Int(n)) : .failure(Errno(-n))
    }
}

/// Where one recvmmsg lands: `slots` buffers of `slotBytes` (64 KiB holds a GRO batch), with
/// each read's size, GRO segment size and sender. Allocated once; reused for every call.
public final class UDPReceiveBatch {
    public let slots: Int
    public let slotBytes: Int
    let buffer: UnsafeMutableRawPointer
    let lens: UnsafeMutablePointer<Int32>
    let segments: UnsafeMutablePointer<Int32>
    let addresses: UnsafeMutablePointer<sockaddr_storage>
    let addressLengths: UnsafeMutablePointer<UInt32>

    public init(slots: Int, slotBytes: Int = 65_536) {
        self.slots = min(64, max(1, slots))
        self.slotBytes = slotBytes
        buffer = UnsafeMutableRawPointer.allocate(byteCount: self.slots * slotBytes, alignment: 16)
        lens = .allocate(capacity: self.slots)
        segments = .allocate(capacity: self.slots)
        addresses = .allocate(capacity: self.slots)
        addressLengths = .allocate(capacity: self.slots)
    }

    deinit {
        buffer.deallocate()
        lens.deallocate()
        segments.deallocate()
        addresses.deallocate()
        addressLengths.deallocate()
    }

    /// Read `i` of the last call: its bytes, the GRO segment size (0: one datagram), the sender.
    public func read(_ i: Int) -> (bytes: UnsafeRawBufferPointer, segment: Int, from: SocketAddress) {
        var from = SocketAddress()
        from.storage = addresses[i]
        from.length = socklen_t(addressLengths[i])
        return (UnsafeRawBufferPointer(start: buffer + i * slotBytes, count: Int(lens[i])), Int(segments[i]), from)
    }
}
