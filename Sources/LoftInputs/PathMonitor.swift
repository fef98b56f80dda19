import LoftCore
import LoftIO

/// Watches the host's default routes (rtnetlink, main table, IPv4 and IPv6) and reports a path
/// change once the routes have been quiet for `settleMs`: a network switch rewrites several
/// routes in a burst, and the holder should redial once, on the new path. Each change re-arms
/// one settle timer.
public final class PathMonitor: IOHandler {
    let loop: EventLoop
    private var fd: Int32 = -1
    private let settleMs: UInt64
    private var settleTimer: TimerHandle?
    /// Routes through this interface (loft's own TUN in host mode) are not a path change.
    public var ignoreInterfaceIndex: Int32 = 0
    public var onChange: (() -> Void)?
    public private(set) var changes: UInt64 = 0

    public init(loop: EventLoop, settleMs: UInt64 = 1000) {
        self.loop = loop
        self.settleMs = settleMs
    }

    public func start() {
        switch Syscall.routeMonitorOpen() {
        case .success(let r): fd = r
        case .failure(let e):
            Log.warn("path-monitor.unavailable", ["error": e.description])
            return
        }
        loop.register(fd, IOEvents.readable, self)
    }

    public func stop() {
        guard fd >= 0 else { return }
        if let t = settleTimer { loop.cancel(t) }
        settleTimer = nil
        loop.unregister(fd)
        _ = Syscall.close(fd)
        fd = -1
    }

    public func handleIO(_ events: UInt32) {
        guard case .success(let n) = Syscall.routeMonitorRead(fd, ignoring: ignoreInterfaceIndex), n > 0 else { return }
        if let t = settleTimer { loop.cancel(t) }
        settleTimer = loop.schedule(after: settleMs) { [weak self] in self?.settle() }
    }

    private func settle() {
        settleTimer = nil
        changes += 1
        Log.info("path-monitor.changed", ["default-route": "changed"])
        onChange?()
    }
}
