import LoftCore
import LoftIO

/// `loft status --watch` in a terminal: keys are read one at a time (no Enter needed, nothing
/// echoed), the cursor is hidden, and both are restored on q, Ctrl-C or SIGTERM.
enum WatchTerminal {
    nonisolated(unsafe) static var saved: TerminalMode?
    nonisolated(unsafe) static var changed = false

    nonisolated(unsafe) static var entered = false

    static func enter() {
        entered = true
        // However loft exits (the control socket gone: Terminal.fail), the terminal comes back.
        Syscall.atExit { WatchTerminal.leave() }
        if Syscall.isTerminal(0), let mode = Syscall.terminalMode(0) {
            saved = mode
            changed = Syscall.setQuiet(0, from: mode, keys: true)
        }
        Syscall.onTerminationSignals { _ in
            WatchTerminal.leave()
            Syscall.exitNow(0)
        }
        Terminal.say("\u{1B}[?25l\u{1B}[2J", newline: false)
    }

    static func leave() {
        guard entered else { return }
        entered = false
        if changed, let saved { Syscall.setTerminalMode(0, saved) }
        Terminal.say("\u{1B}[?25h\n", newline: false)
    }

    /// Waits up to `milliseconds` for a key; true when it was q (or Q).
    static func waitForQuit(milliseconds: Int32) -> Bool {
        let end = monotonicMilliseconds() + UInt64(milliseconds)
        while true {
            let now = monotonicMilliseconds()
            if now >= end { return false }
            let left = end - now
            let ready: Bool
            switch Syscall.waitReadable(0, milliseconds: Int32(left)) {
            case .failure(let e) where e == .interrupted: continue
            case .failure: ready = false
            case .success(let r): ready = r
            }
            if !ready || !Syscall.isTerminal(0) {
                // No terminal on stdin (or it closed): only the timer paces the redraw.
                if ready { Syscall.sleep(milliseconds: Int(left)) }
                return false
            }
            var c: UInt8 = 0
            if case .success(1) = Syscall.read(0, &c, 1), c == UInt8(ascii: "q") || c == UInt8(ascii: "Q") { return true }
        }
    }
}
