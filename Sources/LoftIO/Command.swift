import Glibc
import LoftCore

/// Runs a system tool synchronously (posix_spawn, then a blocking waitpid): for `loft try`'s
/// throwaway topology and for tests, never on `loft run`'s path (the device, its namespace,
/// addresses and routes, and host mode's rules are all made over rtnetlink: `RouteNetlink`,
/// `NetworkNamespace`).
public enum Command {
    public struct Failure: Error, CustomStringConvertible {
        public var command: String
        public var status: Int32
        public var description: String { "\(command) exited with status \(status)" }
    }

    /// Runs argv; throws on a nonzero exit unless `allowFailure`. stderr is captured into the
    /// log on failure.
    @discardableResult
    public static func run(_ argv: [String], allowFailure: Bool = false) throws -> Int32 {
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
        close(errPipe[1])
        var errText = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 512)
        while true {
            let n = read(errPipe[0], &buf, buf.count)
            if n <= 0 { break }
            errText.append(contentsOf: buf[0..<n])
        }
        close(errPipe[0])
        guard rc == 0 else { throw Failure(command: argv.joined(separator: " "), status: -rc) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        if code != 0 && !allowFailure {
            let text = String(decoding: errText, as: UTF8.self).trimmingNewlines()
            Log.error("command.failed", ["command": argv.joined(separator: " "), "status": code, "stderr": text])
            throw Failure(command: argv.joined(separator: " "), status: code)
        }
        return code
    }
}

extension String {
    func trimmingNewlines() -> String {
        var s = Substring(self)
        while let l = s.last, l == "\n" || l == "\r" { s = s.dropLast() }
        return String(s).split(separator: "\n").joined(separator: " | ")
    }
}
