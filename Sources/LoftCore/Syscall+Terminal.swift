import Glibc

/// A terminal's settings as they were (termios), to put back.
public struct TerminalMode {
    fileprivate var attributes: termios
}

// The terminal, for the command-line side: `loft status --watch`'s keys and a passphrase typed
// without echo.
extension Syscall {
    /// Whether `fd` is a terminal (isatty).
    public static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }

    /// The settings of the terminal on `fd`, nil when it is not one.
    public static func terminalMode(_ fd: Int32) -> TerminalMode? {
        var t = termios()
        return tcgetattr(fd, &t) == 0 ? TerminalMode(attributes: t) : nil
    }

    /// `mode` with echo off, set on `fd`. `keys`: line editing off too, each key read as it is
    /// typed (VMIN 1, VTIME 0), at once; otherwise after pending output, typed-ahead input
    /// discarded (TCSAFLUSH: nothing typed before the prompt is taken). True when set.
    @discardableResult
    public static func setQuiet(_ fd: Int32, from mode: TerminalMode, keys: Bool) -> Bool {
        var t = mode.attributes
        if keys {
            t.c_lflag &= ~tcflag_t(ICANON | ECHO)
            withUnsafeMutableBytes(of: &t.c_cc) { cc in
                cc[Int(VMIN)] = 1
                cc[Int(VTIME)] = 0
            }
            return tcsetattr(fd, TCSANOW, &t) == 0
        }
        t.c_lflag &= ~tcflag_t(ECHO)
        return tcsetattr(fd, TCSAFLUSH, &t) == 0
    }

    /// Puts `mode` back on `fd` at once.
    @discardableResult
    public static func setTerminalMode(_ fd: Int32, _ mode: TerminalMode) -> Bool {
        var t = mode.attributes
        return tcsetattr(fd, TCSANOW, &t) == 0
    }

    /// Waits up to `milliseconds` for `fd` to be readable (poll): true when it is, false on
    /// timeout; EINTR comes back as a failure.
    public static func waitReadable(_ fd: Int32, milliseconds: Int32) -> Result<Bool, Errno> {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let n = poll(&p, 1, milliseconds)
        return n < 0 ? failure() : .success(n > 0)
    }
}
