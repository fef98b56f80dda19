import CLinux
import Glibc

/// The release both executables report (`--version`, status, logs, the holder's client name).
public enum Release {
    public static let version = "0.1.0"
    /// The git commit of the build (scripts/install passes it; "unknown" otherwise).
    public static var commit: String { String(cString: clinux_build_commit()) }
    /// What `--version` prints after the program's name.
    public static var description: String { "\(version) (commit \(commit))" }
}

/// Command-line output of the executables: one line each on stdout, errors on stderr.
public enum Terminal {
    public static func say(_ message: String, newline: Bool = true) {
        var line = Array((message + (newline ? "\n" : "")).utf8)
        _ = write(1, &line, line.count)
    }

    /// Prints the message on stderr (a note beside output that goes to stdout).
    public static func note(_ message: String) {
        var line = Array((message + "\n").utf8)
        _ = write(2, &line, line.count)
    }

    /// Prints the message on stderr and exits with `code`.
    public static func fail(_ message: String, code: Int32) -> Never {
        var line = Array((message + "\n").utf8)
        _ = write(2, &line, line.count)
        exit(code)
    }
}
