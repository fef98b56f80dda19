import CTLS
import Dispatch
import Glibc
import LoftCore
import LoftIO

/// What every carrier on one event loop shares: the loop, a name resolver that runs
/// getaddrinfo off the loop, deadlines on the loop's timer heap (connect, handshake, close and
/// join timeouts) and a pool of random bytes for WebSocket masking keys. Make one per loop, before dialling
/// or listening. Creating it sets SIGPIPE to ignored (OpenSSL writes to sockets with write(2)).
public final class CarrierRuntime: IOHandler {
    public let loop: EventLoop
    private let readFD: Int32
    private let writeFD: Int32
    private var nextID: UInt64 = 1
    private var waiting: [UInt64: ([IPAddress]) -> Void] = [:]
    private let results = LookupResults()
    private var randomPool = [UInt8](repeating: 0, count: 4096)
    private var randomUsed = 4096

    public init(loop: EventLoop) throws {
        signal(SIGPIPE, SIG_IGN)
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

    deinit {
        loop.unregister(readFD)
        Glibc.close(readFD)
        Glibc.close(writeFD)
    }

    // MARK: deadlines

    /// Runs `action` on the loop `ms` milliseconds from now: a timer on the loop's heap
    /// (`loop.schedule(after:)`); cancel it with `loop.cancel(_:)`.
    @discardableResult
    public func after(_ ms: UInt64, _ action: @escaping () -> Void) -> TimerHandle {
        loop.schedule(after: ms, action)
    }

    // MARK: randomness

    /// Four fresh random bytes (a WebSocket masking key), from a pool refilled from OpenSSL.
    func maskKey() -> (UInt8, UInt8, UInt8, UInt8) {
        if randomUsed + 4 > randomPool.count {
            Crypto.fillRandom(&randomPool)
            randomUsed = 0
        }
        let i = randomUsed
        randomUsed += 4
        return (randomPool[i], randomPool[i + 1], randomPool[i + 2], randomPool[i + 3])
    }

    // MARK: resolving

    /// Calls `completion` on the loop thread with the addresses (IPv4 first), or none. IP
    /// literals (IPv6 with or without brackets) come back without a lookup.
    public func resolve(_ name: String, _ completion: @escaping ([IPAddress]) -> Void) {
        var n = name
        if n.hasPrefix("[") && n.hasSuffix("]") { n = String(n.dropFirst().dropLast()) }
        if let literal = IPAddress(n) {
            loop.soon { completion([literal]) }
            return
        }
        let id = nextID
        nextID += 1
        waiting[id] = completion
        let queue = results
        let wfd = writeFD
        let lookupName = n
        DispatchQueue.global().async {
            let addresses = CarrierRuntime.lookup(lookupName)
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

/// The hand-over point between resolver threads and the loop.
final class LookupResults: @unchecked Sendable {
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
