import Glibc
import LoftCore

/// A sockaddr_in/sockaddr_in6 as a value, convertible to and from Endpoint.
public struct SocketAddress {
    public var storage = sockaddr_storage()
    public var length: socklen_t = 0

    public init() {}

    public init(_ e: Endpoint) {
        switch e.address {
        case .v4(let a):
            withUnsafeMutableBytes(of: &storage) { raw in
                let sin = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
                sin.pointee.sin_family = sa_family_t(AF_INET)
                sin.pointee.sin_port = e.port.bigEndian
                sin.pointee.sin_addr.s_addr = a.bigEndian
            }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
        case .v6:
            withUnsafeMutableBytes(of: &storage) { raw in
                let sin6 = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self)
                sin6.pointee.sin6_family = sa_family_t(AF_INET6)
                sin6.pointee.sin6_port = e.port.bigEndian
                withUnsafeMutableBytes(of: &sin6.pointee.sin6_addr) { _ = e.address.write(to: $0.baseAddress!) }
            }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        }
    }

    public var family: Int32 { Int32(storage.ss_family) }

    /// The endpoint, with IPv4-mapped IPv6 addresses turned back into IPv4.
    public var endpoint: Endpoint? {
        var s = storage
        return withUnsafeBytes(of: &s) { raw -> Endpoint? in
            switch Int32(storage.ss_family) {
            case AF_INET:
                let sin = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self).pointee
                return Endpoint(.v4(UInt32(bigEndian: sin.sin_addr.s_addr)), UInt16(bigEndian: sin.sin_port))
            case AF_INET6:
                let sin6 = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self).pointee
                var a = sin6.sin6_addr
                let addr = withUnsafeBytes(of: &a) { IPAddress(ipv6Bytes: $0) }
                if case .v6(0, let lo) = addr, lo >> 32 == 0xFFFF {
                    return Endpoint(.v4(UInt32(truncatingIfNeeded: lo)), UInt16(bigEndian: sin6.sin6_port))
                }
                return Endpoint(addr, UInt16(bigEndian: sin6.sin6_port))
            default:
                return nil
            }
        }
    }

    @inlinable
    public func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var s = storage
        return withUnsafeBytes(of: &s) { body($0.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) }
    }

    @inlinable
    public mutating func withMutableSockaddr<R>(_ body: (UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> R) -> R {
        length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        return withUnsafeMutableBytes(of: &storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), &length)
        }
    }
}

public enum Sockets {
    /// Set once at start-up in host mode: every socket loft makes carries this SO_MARK, so
    /// policy routing keeps loft's own traffic out of its TUN. 0: no mark.
    nonisolated(unsafe) public static var outboundMark: UInt32 = 0

    /// A nonblocking, close-on-exec socket (with `outboundMark`), or the errno. `protocol`
    /// `Multipath.protocolNumber` asks for Multipath TCP (see `Multipath.open`).
    public static func open(family: Int32, type: Int32, protocol: Int32 = 0) -> Result<Int32, Errno> {
        let made = Syscall.socket(family: family, type: type | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
                                  protocol: `protocol`)
        if case .success(let fd) = made, outboundMark != 0 {
            _ = Syscall.setOption(fd, SOL_SOCKET, SO_MARK, Int32(bitPattern: outboundMark))
        }
        return made
    }

    /// As `open`, as an fd or -1 with `errno` holding the reason.
    public static func make(family: Int32, type: Int32) -> Int32 {
        fd(open(family: family, type: type))
    }

    /// A stream socket as `make`; with `multipath` a Multipath TCP one when the kernel has it
    /// (`Multipath.open`).
    public static func makeStream(family: Int32, multipath: Bool) -> Int32 {
        multipath ? fd(Multipath.open(family: family)) : make(family: family, type: stream)
    }

    private static func fd(_ made: Result<Int32, Errno>) -> Int32 {
        switch made {
        case .success(let fd): return fd
        case .failure(let e):
            Syscall.setErrno(e)
            return -1
        }
    }

    public static func family(of e: Endpoint) -> Int32 { e.address.isIPv4 ? AF_INET : AF_INET6 }

    /// SOCK_STREAM, the `type` of a TCP socket for `open` and `make`.
    public static let stream = Int32(SOCK_STREAM.rawValue)

    /// SO_REUSEADDR on: a listener binds its port again while connections of an earlier one linger.
    @discardableResult
    public static func reuseAddress(_ fd: Int32) -> Result<Void, Errno> { Syscall.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1) }

    public static var errno: Int32 { Syscall.lastErrno }

    public static func localEndpoint(_ fd: Int32) -> Endpoint? {
        guard case .success(let a) = Syscall.localAddress(fd) else { return nil }
        return a.endpoint
    }
}
