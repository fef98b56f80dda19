import Glibc
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
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw Unopenable(path: path, reason: String(cString: strerror(errno))) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let err = errno
            var buf = [UInt8](repeating: 0, count: 64)
            let n = pread(fd, &buf, buf.count, 0)
            close(fd)
            fd = -1
            let pid = n > 0 ? String(decoding: buf[0..<n], as: UTF8.self).trimmingWhitespace : ""
            throw Busy(what: what, holder: err == EWOULDBLOCK ? (pid.isEmpty ? "lock \(path)" : "pid \(pid)")
                                                                : "lock \(path): \(String(cString: strerror(err)))")
        }
        let me = "\(getpid())\n"
        _ = ftruncate(fd, 0)
        _ = me.withCString { pwrite(fd, $0, strlen($0), 0) }
    }

    /// Releases the lock (exit releases it too).
    public func release() {
        guard fd >= 0 else { return }
        _ = ftruncate(fd, 0)
        close(fd)
        fd = -1
    }

    deinit { release() }
}

extension InstanceLock {
    /// Whether some process holds the lock named `key` now (`loft exec`: is a loft serving the
    /// namespace?). A shared lock is tried and given back at once; a missing lock file is not held.
    public static func isHeld(key: String) -> Bool {
        let fd = open("\(directory)/\(key).lock", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
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
