/// The release both executables report (`--version`, status, logs, the holder's client name).
public enum Release {
    public static let version = "0.1.0"
    /// The git commit of the build (scripts/install passes it; "unknown" otherwise).
    public static var commit: String { Syscall.buildCommit }
    /// What `--version` prints after the program's name.
    public static var description: String { "\(version) (commit \(commit))" }
}

/// Command-line output of the executables: one line each on stdout, errors on stderr.
public enum Terminal {
    public static func say(_ message: String, newline: Bool = true) {
        let line = Array((message + (newline ? "\n" : "")).utf8)
        _ = Syscall.write(1, line)
    }

    /// Prints the message on stderr (a note beside output that goes to stdout).
    public static func note(_ message: String) {
        let line = Array((message + "\n").utf8)
        _ = Syscall.write(2, line)
    }

    /// Prints the message on stderr and exits with `code`.
    public static func fail(_ message: String, code: Int32) -> Never {
        let line = Array((message + "\n").utf8)
        _ = Syscall.write(2, line)
        Syscall.exit(code)
    }
}
