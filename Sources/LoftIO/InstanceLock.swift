import LoftCore

/// What one loft owns on the machine (a namespace it serves, a host-mode TUN and its routes),
/// held with an exclusive flock for as long as the process lives. A second loft that wants the
/// same thing is told which process has it and touches nothing; the kernel releases the lock
/// when the holder exits, however it exits, so a later run may adopt what a crashed one left.
public final class InstanceLock {
    public struct Busy: Error, CustomStringConvertible {
        public let what: String
        public let holder: String
        public var description: String { "\(what) is in use by another loft (\(holder)); stop it first" }
    }

    /// The lock file could not be opened at all: a matter of privilege, not of another loft.
    public struct Unopenable: Error, CustomStringConvertible {
        public let path: String
        public let reason: String
        public var description: String { "cannot open the lock \(path): \(reason) (run as root: /run/loft is root's)" }
    }

    static let directory = "/run/loft"
    private var fd: Int32

    /// Takes the lock named `key` (a file name) or throws `Busy` naming the holder. `what`
    /// says in words what the lock protects.
    public init(key: String, what: String) throws {
        Syscall.makeDirectory(Self.directory, mode: 0o755)
        let path = "\(Self.directory)/\(key).lock"
        switch Syscall.openOrCreate(path, mode: 0o644) {
        case .success(let f): fd = f
        case .failure(let e): throw Unopenable(path: path, reason: e.description)
        }
        if case .failure(let err) = Syscall.lock(fd, exclusive: true) {
            var buf = [UInt8](repeating: 0, count: 64)
            let n = (try? buf.withUnsafeMutableBytes { Syscall.read(fd, $0.baseAddress!, $0.count, at: 0) }.get()) ?? -1
            _ = Syscall.close(fd)
            fd = -1
            let pid = n > 0 ? String(decoding: buf[0..<n], as: UTF8.self).trimmingWhitespace : ""
            throw Busy(what: what, holder: err.wouldBlock ? (pid.isEmpty ? "lock \(path)" : "pid \(pid)")
                                                          : "lock \(path): \(err)")
        }
        Syscall.truncate(fd, to: 0)
        _ = Syscall.write(fd, Array("\(Syscall.processID)\n".utf8), at: 0)
    }

    /// Releases the lock (exit releases it too).
    public func release() {
        guard fd >= 0 else { return }
        Syscall.truncate(fd, to: 0)
        _ = Syscall.close(fd)
        fd = -1
    }

    deinit { release() }
}

extension InstanceLock {
    /// Whether some process holds the lock named `key` now (`loft exec`: is a loft serving the
    /// namespace?). A shared lock is tried and given back at once; a missing lock file is not held.
    public static func isHeld(key: String) -> Bool {
        guard case .success(let fd) = Syscall.openForReading("\(directory)/\(key).lock") else { return false }
        defer { _ = Syscall.close(fd) }
        switch Syscall.lock(fd, exclusive: false) {
        case .success:
            Syscall.unlock(fd)
            return false
        case .failure(let e):
            return e.wouldBlock
        }
    }
}

private extension String {
    var trimmingWhitespace: String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\n" || c == "\t" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\n" || c == "\t" { s.removeLast() }
        return String(s)
    }
}
