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
        let status: Int32, errText: [UInt8]
        switch Syscall.runToEnd(argv) {
        case .success(let r): (status, errText) = (r.status, r.stderr)
        case .failure(let e): throw Failure(command: argv.joined(separator: " "), status: -e.code)
        }
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
