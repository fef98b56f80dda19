import CLinux
import Glibc

// The process, its environment and its children, for the command-line side (`loft exec`,
// `loft try`, `loft status --watch`) and start-up. Nothing here runs on the loop after start-up.
extension Syscall {
    /// exit(3): atexit handlers run, stdio flushed.
    public static func exit(_ code: Int32) -> Never { Glibc.exit(code) }

    /// _exit(2) at once: for a signal handler.
    public static func exitNow(_ code: Int32) -> Never { _exit(code) }

    /// `handler` runs when the process exits through `exit` (atexit).
    public static func atExit(_ handler: @escaping @convention(c) () -> Void) { atexit(handler) }

    /// `handler` runs on SIGINT, SIGTERM and SIGHUP (signal(2)), in signal context.
    public static func onTerminationSignals(_ handler: @escaping @convention(c) (Int32) -> Void) {
        for s in [SIGINT, SIGTERM, SIGHUP] { signal(s, handler) }
    }

    /// `handler` runs on `signal` (signal(2)), in signal context.
    public static func onSignal(_ signal: Int32, _ handler: @escaping @convention(c) (Int32) -> Void) {
        _ = Glibc.signal(signal, handler)
    }

    /// SIGPIPE ignored (signal(2)): a write to a socket or pipe whose reader left fails with
    /// EPIPE instead of ending the process (OpenSSL writes to sockets with write(2)).
    public static func ignoreBrokenPipe() { signal(SIGPIPE, SIG_IGN) }

    /// The git commit this build was made from (CLinux's, set by scripts/install; "unknown"
    /// otherwise).
    public static var buildCommit: String { String(cString: clinux_build_commit()) }

    public static var processID: Int32 { getpid() }

    /// The real user id (getuid).
    public static var userID: UInt32 { getuid() }

    /// The effective user id (geteuid).
    public static var effectiveUserID: UInt32 { geteuid() }

    /// The host's name (gethostname), "" when it cannot be read.
    public static func hostName() -> String {
        var name = [CChar](repeating: 0, count: 256)
        gethostname(&name, name.count - 1)
        return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The index of network interface `name` in this namespace, 0 when there is none.
    public static func interfaceIndex(_ name: String) -> UInt32 { if_nametoindex(name) }

    /// An environment variable, nil when unset.
    public static func environment(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }

    public static func setEnvironment(_ name: String, _ value: String) { setenv(name, value, 1) }

    /// A user of the password database: ids and home folder (getpwnam), nil when unknown.
    public static func user(named name: String) -> (uid: UInt32, gid: UInt32, home: String)? {
        guard let pw = getpwnam(name) else { return nil }
        return (pw.pointee.pw_uid, pw.pointee.pw_gid, String(cString: pw.pointee.pw_dir))
    }

    /// Replaces this process with `argv[0]` found on PATH (execvp); returns only on failure.
    public static func execute(_ argv: [String]) -> Errno {
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) }
        cargs.append(nil)
        execvp(argv[0], cargs)
        return Errno(errno)
    }

    /// Sleeps `milliseconds` (the calling thread: never on the loop).
    public static func sleep(milliseconds: Int) {
        var ts = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var left = timespec()
        while nanosleep(&ts, &left) != 0 && errno == EINTR { ts = left }
    }

    // MARK: children

    /// A child running `argv` (found on PATH) with stdin from /dev/null and stdout and stderr
    /// appended to `log`, without the signals this process blocks; its pid, nil when it could
    /// not start.
    public static func spawn(_ argv: [String], log: String) -> Int32? {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // The children do not inherit the blocked signals.
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attr, &empty)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) }
        cargs.append(nil)
        defer { for p in cargs { free(p) } }
        var pid = pid_t()
        return posix_spawnp(&pid, argv[0], &actions, &attr, cargs, environ) == 0 ? pid : nil
    }

    /// Runs `argv` (found on PATH) to its end: stdout to /dev/null, stderr captured. Its wait
    /// status (waitpid's, EINTR retried) and what it wrote on stderr, or posix_spawn's error.
    public static func runToEnd(_ argv: [String]) -> Result<(status: Int32, stderr: [UInt8]), Errno> {
        var pid = pid_t()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var errPipe: [Int32] = [0, 0]
        _ = pipe(&errPipe)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addclose(&actions, errPipe[0])
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) }
        cargs.append(nil)
        defer { for p in cargs { free(p) } }
        let rc = posix_spawnp(&pid, argv[0], &actions, nil, cargs, environ)
        Glibc.close(errPipe[1])
        var errText = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 512)
        while true {
            let n = Glibc.read(errPipe[0], &buf, buf.count)
            if n <= 0 { break }
            errText.append(contentsOf: buf[0..<n])
        }
        Glibc.close(errPipe[0])
        guard rc == 0 else { return .failure(Errno(rc)) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return .success((status, errText))
    }

    /// Whether child `pid` still runs (waitpid WNOHANG: an exited child is reaped).
    public static func isRunning(_ pid: Int32) -> Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == 0
    }

    /// Child `pid` stopped: SIGTERM, up to 5 s, then SIGKILL; reaped.
    public static func stopChild(_ pid: Int32) {
        kill(pid, SIGTERM)
        for _ in 0..<50 {
            if !isRunning(pid) { return }
            usleep(100_000)
        }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }
}

/// SIGINT, SIGTERM and SIGHUP blocked, to be waited for synchronously (`loft try`: from its
/// start, so Ctrl-C during set-up tears down too). A signal that arrives while blocked waits for
/// `wait`.
public struct BlockedTerminationSignals {
    private var set = sigset_t()

    public init() {
        sigemptyset(&set)
        for s in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&set, s) }
        sigprocmask(SIG_BLOCK, &set, nil)
    }

    /// Waits up to `milliseconds` (sigtimedwait): true when one of them arrived.
    public mutating func wait(milliseconds: Int) -> Bool {
        var info = siginfo_t()
        var tick = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        return sigtimedwait(&set, &info, &tick) > 0
    }
}

/// For a command that streams from a socket until the user stops it (`loft capture`).
nonisolated(unsafe) private var halfClosedOnSignal: Int32 = -1

extension Syscall {
    /// SIGINT, SIGTERM and SIGHUP half-close `fd` (the peer reads its end, answers and closes)
    /// instead of ending the process; SIGPIPE is ignored (a write to a pipe whose reader left
    /// fails with EPIPE instead).
    public static func halfCloseOnSignals(_ fd: Int32) {
        halfClosedOnSignal = fd
        ignoreBrokenPipe()
        onTerminationSignals { _ in _ = Glibc.shutdown(halfClosedOnSignal, Int32(SHUT_WR)) }
    }
}
