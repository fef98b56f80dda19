import Glibc
import LoftCore
import LoftIO

/// A TCP listening socket on 127.0.0.1 at a free port, registered on `loop` for `handler`
/// (the tests' TLS servers accept on it).
public func loopbackListener(loop: EventLoop, backlog: Int32, handler: IOHandler) -> (fd: Int32, port: UInt16) {
    let fd = Sockets.make(family: AF_INET, type: Int32(SOCK_STREAM.rawValue))
    SocketAddress(Endpoint(IPAddress("127.0.0.1")!, 0)).withSockaddr { _ = bind(fd, $0, $1) }
    listen(fd, backlog)
    loop.register(fd, IOEvents.readable, handler)
    return (fd, Sockets.localEndpoint(fd)!.port)
}

/// Two connected AF_UNIX stream sockets, both nonblocking: a control-socket client's end and
/// the end loft's side takes (`reader`, `loftSide`); the caller closes them.
public func nonblockingSocketPair() -> (reader: Int32, loftSide: Int32) {
    var fds: [Int32] = [-1, -1]
    precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0, "socketpair: errno \(errno)")
    for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
    return (fds[0], fds[1])
}
