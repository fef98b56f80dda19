import CLinux
import Glibc
import LoftCore
import LoftIO

/// Watches the host's default routes (rtnetlink, main table, IPv4 and IPv6) and reports a path
/// change once the routes have been quiet for `settleMs`: a network switch rewrites several
/// routes in a burst, and the holder should redial once, on the new path.
public final class PathMonitor: IOHandler {
    let loop: EventLoop
    private var fd: Int32 = -1
    private let settleMs: UInt64
    private var changedAt: UInt64?
    /// Routes through this interface (loft's own TUN in host mode) are not a path change.
    public var ignoreInterfaceIndex: Int32 = 0
    public var onChange: (() -> Void)?
    public private(set) var changes: UInt64 = 0

    public init(loop: EventLoop, settleMs: UInt64 = 1000) {
        self.loop = loop
        self.settleMs = settleMs
    }

    public func start() {
        let r = clinux_route_monitor_open()
        guard r >= 0 else {
            Log.warn("path-monitor.unavailable", ["error": String(cString: strerror(-r))])
            return
        }
        fd = r
        loop.register(fd, IOEvents.readable, self)
        loop.every(250) { [weak self] in self?.settle() }
    }

    public func stop() {
        guard fd >= 0 else { return }
        loop.unregister(fd)
        close(fd)
        fd = -1
    }

    public func handleIO(_ events: UInt32) {
        let n = clinux_route_monitor_read(fd, ignoreInterfaceIndex)
        if n > 0 { changedAt = loop.now }
    }

    private func settle() {
        guard let t = changedAt, loop.now - t >= settleMs else { return }
        changedAt = nil
        changes += 1
        Log.info("path-monitor.changed", ["default-route": "changed"])
        onChange?()
    }
}
