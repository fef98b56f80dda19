import LoftConfig
import LoftCore
import LoftIO

/// Runs a front from validated settings until SIGINT/SIGTERM; returns the exit code.
public enum FrontApp {
    public static func run(_ settings: FrontSettings, version: String) -> Int32 {
        Log.threshold = settings.log.threshold
        let nofile = Syscall.raiseFileLimit()
        let loop: EventLoop
        Syscall.keepFreedMemory(upTo: 2 << 20)
        do { loop = try EventLoop() } catch { Log.error("start-failed", ["error": error]); return 1 }
        // Before any thread exists, so that every thread keeps the signals blocked.
        let signals = SignalWatcher(loop: loop, stats: true)
        let server: FrontServer
        do {
            server = try FrontServer(settings: settings, loop: loop)
            try server.start()
        } catch {
            Log.error("start-failed", ["error": error])
            return 1
        }
        // Under systemd (Type=notify): READY=1 once listening, WATCHDOG=1 from the loop.
        let notifier = ServiceNotifier()
        var received: Int32 = 0
        signals.onShutdown = { [unowned server] signal in
            if received != 0 {
                loop.stop() // a second signal: do not wait for the carriers
                return
            }
            received = signal
            notifier.stopping()
            Log.info("stopping", ["signal": signal])
            server.shutdown { loop.stop() }
        }
        signals.onStats = { [unowned server] in server.logStats() }
        Log.info("ready", ["listen": server.localEndpoint.map { "\($0)" } ?? "\(settings.listen)", "path": settings.path,
                           "carriers": settings.carriers.map(\.rawValue).joined(separator: ","),
                           "pool4": settings.pool.ipv4, "pool6": settings.pool.ipv6.map { "\($0)" } ?? "-",
                           "control": settings.control ?? "-", "state_file": settings.stateFile ?? "-", "version": version, "pid": Syscall.processID, "nofile": nofile])
        let listening = "listening on \(server.localEndpoint.map { "\($0)" } ?? "\(settings.listen)") (\(settings.carriers.map(\.rawValue).joined(separator: ",")))"
        notifier.ready(status: listening)
        notifier.startWatchdog(on: loop)
        loop.run()
        // A clean exit leaves the table on disk as it is now (every instance detached).
        server.saveState(final: true)
        server.logStats("stopped")
        return 0
    }
}
