import Dispatch
import Glibc
import LoftCore
import LoftIO

/// Resolves names with getaddrinfo on Dispatch worker threads, never on the loop: results come
/// back through a pipe the loop watches and completions run on the loop thread.
public final class Resolver: IOHandler {
    private let loop: EventLoop
    private let readFD: Int32
    private let writeFD: Int32
    private var nextID: UInt64 = 1
    private var waiting: [UInt64: ([IPAddress]) -> Void] = [:]
    private let results = ResultQueue()

    public init(loop: EventLoop) throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw SystemError("pipe", Sockets.errno) }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        readFD = fds[0]
        writeFD = fds[1]
        self.loop = loop
        loop.register(readFD, IOEvents.readable, self)
    }

    /// Calls `completion` on the loop thread with the addresses (IPv4 first), or none.
    public func resolve(_ name: String, _ completion: @escaping ([IPAddress]) -> Void) {
        if let literal = IPAddress(name) {
            loop.soon { completion([literal]) }
            return
        }
        let id = nextID
        nextID += 1
        waiting[id] = completion
        let queue = results
        let wfd = writeFD
        DispatchQueue.global().async {
            let addresses = Resolver.lookup(name)
            queue.push(id, addresses)
            var one: UInt8 = 1
            _ = Glibc.write(wfd, &one, 1)
        }
    }

    static func lookup(_ name: String) -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(name, nil, &hints, &res) == 0 else { return [] }
        defer { freeaddrinfo(res) }
        var v4: [IPAddress] = [], v6: [IPAddress] = []
        var p = res
        while let ai = p {
            var sa = SocketAddress()
            memcpy(&sa.storage, ai.pointee.ai_addr, Int(ai.pointee.ai_addrlen))
            sa.length = ai.pointee.ai_addrlen
            if let e = sa.endpoint, !(e.address.isIPv4 ? v4 : v6).contains(e.address) {
                if e.address.isIPv4 { v4.append(e.address) } else { v6.append(e.address) }
            }
            p = ai.pointee.ai_next
        }
        return v4 + v6
    }

    public func handleIO(_ events: UInt32) {
        var sink = [UInt8](repeating: 0, count: 256)
        while Glibc.read(readFD, &sink, sink.count) > 0 {}
        for (id, addresses) in results.drain() {
            if let c = waiting.removeValue(forKey: id) { c(addresses) }
        }
    }
}

/// The hand-over point between worker threads and the loop.
final class ResultQueue: @unchecked Sendable {
    private var lock = pthread_mutex_t()
    private var items: [(UInt64, [IPAddress])] = []
    init() { pthread_mutex_init(&lock, nil) }
    func push(_ id: UInt64, _ a: [IPAddress]) {
        pthread_mutex_lock(&lock); items.append((id, a)); pthread_mutex_unlock(&lock)
    }
    func drain() -> [(UInt64, [IPAddress])] {
        pthread_mutex_lock(&lock); defer { pthread_mutex_unlock(&lock) }
        let out = items
        items.removeAll()
        return out
    }
}
