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

    /// What fstat says of the file `fd` is.
    public static func status(_ fd: Int32) -> Result<FileStatus, Errno> {
        var st = stat()
        return fstat(fd, &st) == 0 ? .success(FileStatus(st)) : failure()
    }

    /// What stat says of the file at `path` (a symbolic link followed).
    public static func status(path: String) -> Result<FileStatus, Errno> {
        var st = stat()
        return stat(path, &st) == 0 ? .success(FileStatus(st)) : failure()
    }

    /// A descriptor for reading and writing `path`, created with `mode` if missing (a lock file).
    public static func openOrCreate(_ path: String, mode: UInt32) -> Result<Int32, Errno> {
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, mode)
        return fd >= 0 ? .success(fd) : failure()
    }

    /// flock without waiting: `exclusive` or shared; EWOULDBLOCK (`wouldBlock`) while another
    /// descriptor holds a lock that conflicts.
    public static func lock(_ fd: Int32, exclusive: Bool) -> Result<Void, Errno> {
        check(flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB))
    }

    /// flock LOCK_UN.
    @discardableResult
    public static func unlock(_ fd: Int32) -> Result<Void, Errno> { check(flock(fd, LOCK_UN)) }

    /// pread: up to `count` bytes from `offset`, the file position untouched (EINTR retried).
    public static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, at offset: Int) -> Result<Int, Errno> {
        while true {
            let n = pread(fd, buffer, count, offset)
            if n >= 0 { return .success(n) }
            if Glibc.errno != EINTR { return failure() }
        }
    }

    /// pwrite: `bytes` at `offset`, the file position untouched (EINTR retried): how many went.
    public static func write(_ fd: Int32, _ bytes: [UInt8], at offset: Int) -> Result<Int, Errno> {
        bytes.withUnsafeBytes { b in
            while true {
                let n = pwrite(fd, b.baseAddress, b.count, offset)
                if n >= 0 { return .success(n) }
                if Glibc.errno != EINTR { return failure() }
            }
        }
    }

    /// ftruncate: the file cut (or extended with zeros) to `length` bytes.
    @discardableResult
    public static func truncate(_ fd: Int32, to length: Int) -> Result<Void, Errno> { check(ftruncate(fd, length)) }

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

    /// pipe(2) with both ends nonblocking and close-on-exec.
    public static func nonblockingPipe() -> Result<(read: Int32, write: Int32), Errno> {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return failure() }
        for f in fds {
            _ = fcntl(f, F_SETFL, fcntl(f, F_GETFL) | O_NONBLOCK)
            _ = fcntl(f, F_SETFD, FD_CLOEXEC)
        }
        return .success((fds[0], fds[1]))
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
    public static func fileMode(_ path: String) -> UInt32? { try? status(path: path).get().mode }

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

/// What stat(2) says of a file, the fields loft reads.
public struct FileStatus: Equatable, Sendable {
    public var device: UInt64
    public var inode: UInt64
    /// Type and permission bits (st_mode).
    public var mode: UInt32
    public var size: Int64
    /// The last modification (st_mtim).
    public var modifiedSeconds: Int
    public var modifiedNanoseconds: Int

    init(_ st: stat) {
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
        mode = st.st_mode
        size = Int64(st.st_size)
        modifiedSeconds = st.st_mtim.tv_sec
        modifiedNanoseconds = st.st_mtim.tv_nsec
    }

    /// A regular file: not a FIFO, a device, a socket or a folder.
    public var isRegularFile: Bool { mode & S_IFMT == S_IFREG }
}
