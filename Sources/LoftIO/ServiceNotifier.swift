import Glibc
import LoftCore

/// systemd's readiness protocol (sd_notify(3)), the few lines of it loft uses: one datagram per
/// message on the AF_UNIX socket $NOTIFY_SOCKET names (a path, or `@name` in the abstract
/// namespace), `READY=1`, `STATUS=…`, `STOPPING=1`, `WATCHDOG=1`. Without $NOTIFY_SOCKET (not
/// run by systemd) every call does nothing. The watchdog pings are a timer on the loop's heap at
/// half of $WATCHDOG_USEC, so a loop that stops turning stops them and systemd restarts loft.
public final class ServiceNotifier {
    private var fd: Int32 = -1
    /// $NOTIFY_SOCKET's address (a sockaddr_un).
    private var target = SocketAddress()
    private var lastStatus = ""
    private var watchdogTimer: TimerHandle?
    /// Messages sent (for tests and the log).
    public private(set) var sent: UInt64 = 0
    /// The watchdog ping interval in milliseconds (nil: systemd asked for none).
    public let watchdogIntervalMs: UInt64?

    public init(environment: (String) -> String? = { Syscall.environment($0) }) {
        // WATCHDOG_PID, when set, names the process the watchdog is meant for.
        let usec = environment("WATCHDOG_USEC").flatMap { UInt64($0) }
        let pidOK = environment("WATCHDOG_PID").flatMap { Int32($0) }.map { $0 == Syscall.processID } ?? true
        watchdogIntervalMs = usec.flatMap { $0 >= 2000 && pidOK ? $0 / 2000 : nil }
        var address = sockaddr_un()
        guard let path = environment("NOTIFY_SOCKET"), !path.isEmpty,
              path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else { return }
        guard path.hasPrefix("/") || path.hasPrefix("@") else { return }
        guard case .success(let s) = Syscall.socket(family: AF_UNIX, type: Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
        else { return }
        fd = s
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }  // abstract: a leading NUL, no terminator
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        withUnsafeBytes(of: &address) { a in withUnsafeMutableBytes(of: &target.storage) { $0.copyMemory(from: a) } }
        target.length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes[0] == 0 ? 0 : 1))
    }

    deinit { if fd >= 0 { _ = Syscall.close(fd) } }

    /// Whether a service manager listens ($NOTIFY_SOCKET was usable).
    public var isActive: Bool { fd >= 0 }

    /// Sends one message (newline-separated assignments). Never blocks: a full socket drops it.
    public func send(_ message: String) {
        guard fd >= 0 else { return }
        let bytes = Array(message.utf8)
        switch bytes.withUnsafeBytes({ Syscall.sendto(fd, $0.baseAddress!, $0.count, flags: Int32(MSG_DONTWAIT | MSG_NOSIGNAL), to: target) }) {
        case .success: sent += 1
        case .failure(let e): Log.debug("notify.failed", ["error": e.description])
        }
    }

    public func ready(status: String) {
        lastStatus = status
        send("READY=1\nSTATUS=\(status)")
    }

    /// STATUS=, only when it changed since the last one sent.
    public func status(_ text: String) {
        guard text != lastStatus else { return }
        lastStatus = text
        send("STATUS=\(text)")
    }

    public func stopping() {
        if let t = watchdogTimer, let loop = watchdogLoop { loop.cancel(t) }
        watchdogTimer = nil
        send("STOPPING=1\nSTATUS=stopping")
    }

    private weak var watchdogLoop: EventLoop?

    /// WATCHDOG=1 every `watchdogIntervalMs` from the loop's timer heap, while the loop runs;
    /// `tick` runs before each ping (to refresh STATUS=).
    public func startWatchdog(on loop: EventLoop, tick: @escaping () -> Void = {}) {
        guard isActive, let interval = watchdogIntervalMs else { return }
        watchdogLoop = loop
        func arm() {
            watchdogTimer = loop.schedule(after: interval) { [weak self] in
                guard let self else { return }
                tick()
                self.send("WATCHDOG=1")
                arm()
            }
        }
        arm()
    }
}
