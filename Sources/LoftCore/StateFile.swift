/// Small state files that must survive a crash: read whole, replaced atomically. Used for
/// loft-front's instance table and a holder's instance.
public enum StateFile {
    public enum ReadResult { case missing, bytes([UInt8]), failed(String) }

    /// The whole file, unless it is missing or larger than `maxBytes`.
    public static func read(_ path: String, maxBytes: Int) -> ReadResult {
        let fd: Int32
        switch Syscall.openForReading(path) {
        case .success(let f): fd = f
        case .failure(let e): return e == .noSuchFile ? .missing : .failed(e.description)
        }
        defer { _ = Syscall.close(fd) }
        switch Syscall.readAll(fd, upTo: maxBytes) {
        case .success(let bytes): return bytes.count > maxBytes ? .failed("larger than \(maxBytes) bytes") : .bytes(bytes)
        case .failure(let e): return .failed(e.description)
        }
    }

    /// Replaces `path` atomically: PATH.tmp written and fsynced, renamed over PATH, the folder
    /// fsynced (so the rename survives a power cut). Returns the error, or nil.
    public static func write(_ text: String, to path: String) -> String? {
        let tmp = path + ".tmp"
        let fd: Int32
        switch Syscall.createFile(tmp, mode: 0o600) {
        case .success(let f): fd = f
        case .failure(let e): return "\(tmp): \(e)"
        }
        // O_CREAT's mode does not apply to a leftover PATH.tmp.
        Syscall.setMode(fd, 0o600)
        var failure: String?
        if case .failure(let e) = Syscall.writeAll(fd, Array(text.utf8)) { failure = "\(tmp): \(e)" }
        if failure == nil, case .failure(let e) = Syscall.sync(fd) { failure = "\(tmp): fsync: \(e)" }
        if case .failure(let e) = Syscall.close(fd), failure == nil { failure = "\(tmp): close: \(e)" }
        if let failure {
            Syscall.unlink(tmp)
            return failure
        }
        if case .failure(let e) = Syscall.rename(tmp, to: path) {
            Syscall.unlink(tmp)
            return "rename to \(path): \(e)"
        }
        if case .success(let dfd) = Syscall.openDirectory(directory(of: path)) {
            _ = Syscall.sync(dfd)
            _ = Syscall.close(dfd)
        }
        return nil
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
