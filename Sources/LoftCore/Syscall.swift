import CLinux
import Glibc

/// An errno value, as a `Syscall` wrapper returns it.
public struct Errno: Error, Hashable, Sendable, CustomStringConvertible {
    public var code: Int32
    public init(_ code: Int32) { self.code = code }

    public static let again = Errno(EAGAIN)
    public static let interrupted = Errno(EINTR)
    public static let inProgress = Errno(EINPROGRESS)
    public static let exists = Errno(EEXIST)
    public static let badDescriptor = Errno(EBADF)
    public static let addressInUse = Errno(EADDRINUSE)
    public static let brokenPipe = Errno(EPIPE)
    public static let noSuchFile = Errno(ENOENT)

    /// EAGAIN or EWOULDBLOCK: a nonblocking call that would have waited.
    public var wouldBlock: Bool { code == EAGAIN || code == EWOULDBLOCK }
    /// strerror's text.
    public var description: String { String(cString: strerror(code)) }
}

/// The one syscall funnel: every libc system call and CLinux shim that loft's modules make goes
/// through a wrapper here, which calls it and reads errno right after it (the CLinux shims
/// return -errno): the result is the value or the errno, never a -1 with errno left for later.
/// The type is LoftCore's, so that LoftCore (state files, the log's sink, the terminal) and
/// LoftConfig, below LoftIO, use it too; its files are `Syscall*.swift` here (descriptors,
/// files, the process, the terminal) and in LoftIO (sockets, epoll, TUN, datagram batches,
/// AF_UNIX, the heap). Outside those files no Swift source calls libc's system calls, a
/// `clinux_` shim, or reads errno (`Tests/lint`, rule 4).
///
/// The data calls (read, write, writev, recv, send, recvfrom, sendto, accept) are retried on
/// EINTR; connect, close and shutdown are not (a connect interrupted goes on in the background,
/// and on Linux close has released the fd even when it says EINTR).
public enum Syscall {
    /// errno, read right after the call that failed, as the failure.
    @inlinable @inline(__always)
    package static func failure<T>() -> Result<T, Errno> { .failure(Errno(Glibc.errno)) }

    /// A call that returns 0 on success and -1 with errno on failure.
    @inlinable @inline(__always)
    package static func check(_ r: Int32) -> Result<Void, Errno> { r == 0 ? .success(()) : failure() }

    /// The negative-errno convention of the CLinux shims, as a result.
    @inlinable @inline(__always)
    package static func shim(_ r: Int32) -> Result<Int32, Errno> { r >= 0 ? .success(r) : .failure(Errno(-r)) }

    @inlinable
    public static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Result<Int, Errno> {
        while true {
            let n = Glibc.read(fd, buffer, count)
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    @inlinable
    public static func write(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Result<Int, Errno> {
        while true {
            let n = Glibc.write(fd, buffer, count)
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    /// One write of `bytes` (EINTR retried): how many went. The log's and the terminal's lines.
    @inlinable
    public static func write(_ fd: Int32, _ bytes: [UInt8]) -> Result<Int, Errno> {
        bytes.withUnsafeBytes { b in b.baseAddress.map { write(fd, $0, b.count) } ?? .success(0) }
    }

    @inlinable
    public static func close(_ fd: Int32) -> Result<Void, Errno> {
        Glibc.close(fd) == 0 ? .success(()) : failure()
    }

    /// CLOCK_MONOTONIC in milliseconds: LoftIO's `monotonicMilliseconds`, the product's clock.
    @inlinable @inline(__always)
    public static func monotonicMilliseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }

    /// CLOCK_MONOTONIC in nanoseconds: LoftIO's `monotonicNanoseconds` (QUIC's timestamps).
    @inlinable @inline(__always)
    public static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// The time of day (CLOCK_REALTIME) in microseconds since the Unix epoch: `WallClock`'s.
    @inline(__always)
    public static func realTimeMicroseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }
}
