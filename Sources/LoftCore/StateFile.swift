import Glibc

/// Small state files that must survive a crash: read whole, replaced atomically. Used for
/// loft-front's instance table and a holder's instance.
public enum StateFile {
    public enum ReadResult { case missing, bytes([UInt8]), failed(String) }

    /// The whole file, unless it is missing or larger than `maxBytes`.
    public static func read(_ path: String, maxBytes: Int) -> ReadResult {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return errno == ENOENT ? .missing : .failed(String(cString: strerror(errno))) }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failed(String(cString: strerror(errno)))
            }
            if n == 0 { return .bytes(out) }
            out.append(contentsOf: chunk[0..<n])
            if out.count > maxBytes { return .failed("larger than \(maxBytes) bytes") }
        }
    }

    /// Replaces `path` atomically: PATH.tmp written and fsynced, renamed over PATH, the folder
    /// fsynced (so the rename survives a power cut). Returns the error, or nil.
    public static func write(_ text: String, to path: String) -> String? {
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return "\(tmp): \(String(cString: strerror(errno)))" }
        // O_CREAT's mode does not apply to a leftover PATH.tmp.
        _ = fchmod(fd, 0o600)
        var bytes = Array(text.utf8)
        var off = 0
        var failure: String?
        while off < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 {
                if errno == EINTR { continue }
                failure = "\(tmp): \(String(cString: strerror(errno)))"
                break
            }
            off += n
        }
        if failure == nil && fsync(fd) != 0 { failure = "\(tmp): fsync: \(String(cString: strerror(errno)))" }
        if close(fd) != 0 && failure == nil { failure = "\(tmp): close: \(String(cString: strerror(errno)))" }
        if let failure {
            unlink(tmp)
            return failure
        }
        guard rename(tmp, path) == 0 else {
            let e = String(cString: strerror(errno))
            unlink(tmp)
            return "rename to \(path): \(e)"
        }
        let dir = directory(of: path)
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 {
            _ = fsync(dfd)
            close(dfd)
        }
        return nil
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
