import Glibc

// Files and folders: for the command-line side (`loft import / share / export`, `loft check`,
// `loft try`, `loft run`'s checks before start-up), the configuration's files, state files
// (`StateFile`) and a host-mode undo file: never on the loop's hot path.
extension Syscall {
    /// A descriptor for reading `path`; `nonblocking`: opened O_NONBLOCK (a FIFO or a device
    /// does not block the open).
    public static func openForReading(_ path: String, nonblocking: Bool = false) -> Result<Int32, Errno> {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC | (nonblocking ? O_NONBLOCK : 0))
        return fd >= 0 ? .success(fd) : failure()
    }

    /// A descriptor on the folder `path` (O_DIRECTORY), to fsync it after a rename inside it.
    public static func openDirectory(_ path: String) -> Result<Int32, Errno> {
        let fd = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        return fd >= 0 ? .success(fd) : failure()
    }

    /// Whether `fd` is a regular file (fstat), not a FIFO, a device or a folder.
    public static func isRegularFile(_ fd: Int32) -> Result<Bool, Errno> {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return failure() }
        return .success(st.st_mode & S_IFMT == S_IFREG)
    }

    /// The device and inode of the file `fd` is (fstat), nil when fstat fails.
    public static func fileIdentity(_ fd: Int32) -> (device: UInt64, inode: UInt64)? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return (UInt64(st.st_dev), UInt64(st.st_ino))
    }

    /// Reads `fd` to its end (EINTR retried), stopping once more than `limit` bytes are in: a
    /// result longer than `limit` means the source is larger than that.
    public static func readAll(_ fd: Int32, upTo limit: Int) -> Result<[UInt8], Errno> {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; return failure() }
            if n == 0 { return .success(out) }
            out += chunk[0..<n]
            if out.count > limit { return .success(out) }
        }
    }

    /// The file at `path`, as `readAll` reads it.
    public static func readFile(_ path: String, upTo limit: Int) -> Result<[UInt8], Errno> {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return failure() }
        defer { Glibc.close(fd) }
        return readAll(fd, upTo: limit)
    }

    /// A descriptor for reading and writing `path` (a terminal: /dev/tty).
    public static func openReadWrite(_ path: String) -> Result<Int32, Errno> {
        let fd = Glibc.open(path, O_RDWR | O_CLOEXEC)
        return fd >= 0 ? .success(fd) : failure()
    }

    /// A new file at `path` for writing, created with `mode`; `EEXIST` if there is one already.
    public static func createExclusive(_ path: String, mode: UInt32) -> Result<Int32, Errno> {
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        return fd >= 0 ? .success(fd) : failure()
    }

    /// Writes all of `bytes` to `fd` (EINTR retried).
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Result<Void, Errno> {
        bytes.withUnsafeBytes { writeAll(fd, $0) }
    }

    /// Writes all of `bytes` to `fd` (EINTR retried).
    public static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Result<Void, Errno> {
        var off = 0
        while off < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + off, bytes.count - off)
            if n < 0 { if errno == EINTR { continue }; return failure() }
            off += n
        }
        return .success(())
    }

    /// fchmod.
    @discardableResult
    public static func setMode(_ fd: Int32, _ mode: UInt32) -> Result<Void, Errno> { check(fchmod(fd, mode)) }

    /// chmod.
    @discardableResult
    public static func setMode(path: String, _ mode: UInt32) -> Result<Void, Errno> { check(chmod(path, mode)) }

    /// fsync.
    public static func sync(_ fd: Int32) -> Result<Void, Errno> { check(fsync(fd)) }

    /// rename: `to` replaced atomically.
    public static func rename(_ from: String, to: String) -> Result<Void, Errno> { check(Glibc.rename(from, to)) }

    /// The file's `st_mode` (type and permission bits), nil when stat fails.
    public static func fileMode(_ path: String) -> UInt32? {
        var st = stat()
        return stat(path, &st) == 0 ? st.st_mode : nil
    }

    /// Whether this process may read `path` (access R_OK), or why not.
    public static func checkReadable(_ path: String) -> Result<Void, Errno> { check(access(path, R_OK)) }

    /// Whether this process may create and remove files in folder `path` (access W_OK | X_OK),
    /// or why not.
    public static func checkWritable(_ path: String) -> Result<Void, Errno> { check(access(path, W_OK | X_OK)) }

    /// Whether `path` is a file this process may run (access X_OK).
    public static func isExecutable(_ path: String) -> Bool { access(path, X_OK) == 0 }

    /// The names in folder `path` (. and .. included), or why it cannot be opened.
    public static func readDirectory(_ path: String) -> Result<[String], Errno> {
        guard let dir = opendir(path) else { return failure() }
        defer { closedir(dir) }
        var names: [String] = []
        while let e = readdir(dir) {
            names.append(withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) })
        }
        return .success(names)
    }

    /// The names in folder `path` (. and .. included), nil when it cannot be opened.
    public static func directoryEntries(_ path: String) -> [String]? { try? readDirectory(path).get() }

    /// A new folder made from `template` (ending in XXXXXX, mkdtemp): its path.
    public static func makeTemporaryDirectory(_ template: String) -> Result<String, Errno> {
        var chars = Array(template.utf8CString)
        guard let made = mkdtemp(&chars) else { return failure() }
        return .success(String(cString: made))
    }

    /// Where the symbolic link `path` points (/proc/self/exe: this program), nil when unreadable.
    public static func readLink(_ path: String) -> String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink(path, &buf, buf.count - 1)
        return n > 0 ? String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }

    /// Opens `path` for writing, created (`mode`) or truncated.
    public static func createFile(_ path: String, mode: UInt32) -> Result<Int32, Errno> {
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        return fd >= 0 ? .success(fd) : .failure(Errno(errno))
    }

    /// Writes `bytes` to `path` (created with `mode`, truncated). A file that must survive a
    /// crash whole is `StateFile.write`'s (atomic, fsynced).
    public static func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t) -> Result<Void, Errno> {
        let f = Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard f >= 0 else { return failure() }
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(f, $0.baseAddress! + done, bytes.count - done) }
            if n < 0 {
                if errno == EINTR { continue }
                let e = Errno(errno)
                Glibc.close(f)
                return .failure(e)
            }
            done += n
        }
        Glibc.close(f)
        return .success(())
    }

    /// Creates an empty file (mode `mode`) if there is none.
    public static func touch(_ path: String, mode: mode_t) -> Result<Void, Errno> {
        let f = Glibc.open(path, O_WRONLY | O_CREAT | O_CLOEXEC, mode)
        guard f >= 0 else { return failure() }
        Glibc.close(f)
        return .success(())
    }

    @discardableResult
    public static func unlink(_ path: String) -> Result<Void, Errno> { check(Glibc.unlink(path)) }

    @discardableResult
    public static func makeDirectory(_ path: String, mode: mode_t) -> Result<Void, Errno> { check(mkdir(path, mode)) }

    @discardableResult
    public static func removeDirectory(_ path: String) -> Result<Void, Errno> { check(rmdir(path)) }

    public static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }
}
