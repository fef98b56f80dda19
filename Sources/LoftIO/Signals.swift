import Glibc
import LoftCore

/// Both executables' signals. SIGINT, SIGTERM and SIGHUP (shutdown) arrive on a signalfd;
/// SIGUSR1 (print stats, loft-front only: `stats: true`) through a pipe written by a handler,
/// since Glibc does not export signalfd to Swift and the shared shim's signalfd covers only the
/// shutdown signals. Make it before any thread starts so every thread inherits the blocked mask.
public final class SignalWatcher {
    private let loop: EventLoop
    private var shutdownWatch: Watch?
    private var statsWatch: Watch?
    /// The last shutdown signal, 0 before any.
    public private(set) var received: Int32 = 0
    public var onShutdown: ((Int32) -> Void)?
    public var onStats: (() -> Void)?

    public init(loop: EventLoop, stats: Bool = false) {
        self.loop = loop
        if case .success(let fd) = Syscall.shutdownSignalDescriptor() {
            shutdownWatch = Watch(fd) { [weak self] fd in
                let s = Syscall.readShutdownSignal(fd)
                if s > 0, let self {
                    self.received = s
                    self.onShutdown?(s)
                }
            }
            loop.register(fd, IOEvents.readable, shutdownWatch!)
        }
        guard stats else { return }
        if case .success(let fds) = Syscall.nonblockingPipe() {
            usr1Pipe = fds.write
            statsWatch = Watch(fds.read) { [weak self] fd in
                var sink = [UInt8](repeating: 0, count: 64)
                while case .success(let n) = sink.withUnsafeMutableBytes({ Syscall.read(fd, $0.baseAddress!, $0.count) }), n > 0 {}
                self?.onStats?()
            }
            loop.register(fds.read, IOEvents.readable, statsWatch!)
            Syscall.onSignal(SIGUSR1) { _ in
                var one: UInt8 = 1
                _ = Syscall.write(usr1Pipe, &one, 1)
            }
        }
    }

    /// A readable descriptor and what to do about it.
    private final class Watch: IOHandler {
        let fd: Int32
        let action: (Int32) -> Void
        init(_ fd: Int32, _ action: @escaping (Int32) -> Void) { self.fd = fd; self.action = action }
        func handleIO(_ events: UInt32) { action(fd) }
    }
}

// Written once before the handler is installed, then only read (by the handler).
nonisolated(unsafe) private var usr1Pipe: Int32 = -1
