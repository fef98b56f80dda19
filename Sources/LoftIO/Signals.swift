import CLinux
import Glibc

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
        let fd = clinux_signalfd_for_shutdown()
        if fd >= 0 {
            shutdownWatch = Watch(fd) { [weak self] fd in
                let s = clinux_signalfd_read(fd)
                if s > 0, let self {
                    self.received = s
                    self.onShutdown?(s)
                }
            }
            loop.register(fd, IOEvents.readable, shutdownWatch!)
        }
        guard stats else { return }
        var fds: [Int32] = [0, 0]
        if pipe(&fds) == 0 {
            for f in fds {
                _ = fcntl(f, F_SETFL, fcntl(f, F_GETFL) | O_NONBLOCK)
                _ = fcntl(f, F_SETFD, FD_CLOEXEC)
            }
            usr1Pipe = fds[1]
            statsWatch = Watch(fds[0]) { [weak self] fd in
                var sink = [UInt8](repeating: 0, count: 64)
                while read(fd, &sink, sink.count) > 0 {}
                self?.onStats?()
            }
            loop.register(fds[0], IOEvents.readable, statsWatch!)
            signal(SIGUSR1) { _ in
                var one: UInt8 = 1
                _ = write(usr1Pipe, &one, 1)
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
