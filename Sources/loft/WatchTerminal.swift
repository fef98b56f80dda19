import Glibc

/// `loft status --watch` in a terminal: keys are read one at a time (no Enter needed, nothing
/// echoed), the cursor is hidden, and both are restored on q, Ctrl-C or SIGTERM.
enum WatchTerminal {
    nonisolated(unsafe) static var saved = termios()
    nonisolated(unsafe) static var changed = false

    nonisolated(unsafe) static var entered = false

    static func enter() {
        entered = true
        // However loft exits (the control socket gone: Terminal.fail), the terminal comes back.
        atexit { WatchTerminal.leave() }
        if isatty(0) == 1, tcgetattr(0, &saved) == 0 {
            var raw = saved
            raw.c_lflag &= ~tcflag_t(ICANON | ECHO)
            withUnsafeMutableBytes(of: &raw.c_cc) { cc in
                cc[Int(VMIN)] = 1
                cc[Int(VTIME)] = 0
            }
            changed = tcsetattr(0, TCSANOW, &raw) == 0
        }
        let restore: @convention(c) (Int32) -> Void = { _ in
            WatchTerminal.leave()
            _exit(0)
        }
        signal(SIGINT, restore)
        signal(SIGTERM, restore)
        signal(SIGHUP, restore)
        let codes = "\u{1B}[?25l\u{1B}[2J"
        _ = codes.withCString { write(1, $0, strlen($0)) }
    }

    static func leave() {
        guard entered else { return }
        entered = false
        if changed { _ = tcsetattr(0, TCSANOW, &saved) }
        let codes = "\u{1B}[?25h\n"
        _ = codes.withCString { write(1, $0, strlen($0)) }
    }

    /// Waits up to `milliseconds` for a key; true when it was q (or Q).
    static func waitForQuit(milliseconds: Int32) -> Bool {
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let end = Int64(deadline.tv_sec) * 1000 + Int64(deadline.tv_nsec) / 1_000_000 + Int64(milliseconds)
        while true {
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let left = end - (Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000)
            if left <= 0 { return false }
            var p = pollfd(fd: 0, events: Int16(POLLIN), revents: 0)
            let n = poll(&p, 1, Int32(left))
            if n <= 0 || isatty(0) != 1 {
                if n < 0 && errno == EINTR { continue }
                // No terminal on stdin (or it closed): only the timer paces the redraw.
                if n > 0 { usleep(useconds_t(left) * 1000) }
                return false
            }
            var c: UInt8 = 0
            if read(0, &c, 1) == 1 && (c == UInt8(ascii: "q") || c == UInt8(ascii: "Q")) { return true }
        }
    }
}
