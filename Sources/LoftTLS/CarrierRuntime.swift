import CTLS
import LoftCore
import LoftIO

/// What every carrier on one event loop shares: the loop, the loop's name resolver,
/// deadlines on the loop's timer heap (connect, handshake, close and join timeouts) and a pool
/// of random bytes for WebSocket masking keys. Make one per loop, before dialling or listening.
/// Creating it sets SIGPIPE to ignored (OpenSSL writes to sockets with write(2)).
public final class CarrierRuntime {
    public let loop: EventLoop
    /// The loop's one resolver: the one given, or one made here.
    public let resolver: Resolver
    /// What flows reading from servers may hold in memory together (ReadBudget).
    public private(set) lazy var readBudget = ReadBudget(loop: loop)
    private var randomPool = [UInt8](repeating: 0, count: 4096)
    private var randomUsed = 4096

    public init(loop: EventLoop, resolver: Resolver? = nil) throws {
        Syscall.ignoreBrokenPipe()
        self.resolver = try resolver ?? Resolver(loop: loop)
        self.loop = loop
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
    package func maskKey() -> (UInt8, UInt8, UInt8, UInt8) {
        if randomUsed + 4 > randomPool.count {
            Crypto.fillRandom(&randomPool)
            randomUsed = 0
        }
        let i = randomUsed
        randomUsed += 4
        return (randomPool[i], randomPool[i + 1], randomPool[i + 2], randomPool[i + 3])
    }

    // MARK: resolving

    /// Resolves with the loop's resolver: `completion` runs on the loop with the addresses
    /// (IPv4 first), or none; IP literals (IPv6 with or without brackets) without a lookup.
    @discardableResult
    public func resolve(_ name: String, _ completion: @escaping ([IPAddress]) -> Void) -> ResolveRequest {
        resolver.resolve(name, completion)
    }
}
