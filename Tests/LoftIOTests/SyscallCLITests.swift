import XCTest
import LoftCore
import LoftIO

/// The funnel's calls for the command-line side (Syscall+Files, Syscall+Process), each against
/// the real system.
final class SyscallCLITests: XCTestCase {
    var dir = ""

    override func setUpWithError() throws {
        dir = try Syscall.makeTemporaryDirectory("/tmp/loft-syscall-tests.XXXXXX").get()
    }

    override func tearDown() {
        for name in Syscall.directoryEntries(dir) ?? [] where name != "." && name != ".." { Syscall.unlink(dir + "/" + name) }
        Syscall.removeDirectory(dir)
    }

    func testWriteThenReadWholeFile() throws {
        XCTAssertEqual(Syscall.fileMode(dir).map { $0 & 0o777 }, 0o700)  // mkdtemp's
        let path = dir + "/a"
        let fd = try Syscall.createExclusive(path, mode: 0o600).get()
        let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        XCTAssertNoThrow(try Syscall.writeAll(fd, bytes).get())
        XCTAssertNoThrow(try Syscall.sync(fd).get())
        XCTAssertNoThrow(try Syscall.close(fd).get())
        XCTAssertEqual(try Syscall.readFile(path, upTo: 1 << 20).get(), bytes)
        // Over the limit: reading stops past it, so a caller sees more than it allows.
        let capped = try Syscall.readFile(path, upTo: 1000).get()
        XCTAssertGreaterThan(capped.count, 1000)
        XCTAssertLessThan(capped.count, bytes.count)

        XCTAssertEqual(Syscall.createExclusive(path, mode: 0o600).map { _ in 0 }, .failure(.exists))
        XCTAssertEqual(Syscall.readFile(dir + "/missing", upTo: 10).map(\.count), .failure(Errno(2)))  // ENOENT
        XCTAssertEqual(Syscall.checkReadable(dir + "/missing").map { _ in 0 }, .failure(Errno(2)))
        XCTAssertNoThrow(try Syscall.checkReadable(path).get())
    }

    func testModesRenameAndEntries() throws {
        let a = dir + "/a", b = dir + "/b"
        XCTAssertNoThrow(try Syscall.writeFile(a, [1, 2, 3], mode: 0o600).get())
        XCTAssertEqual(Syscall.fileMode(a).map { $0 & 0o7777 }, 0o600)
        XCTAssertNoThrow(try Syscall.setMode(path: a, 0o640).get())
        XCTAssertEqual(Syscall.fileMode(a).map { $0 & 0o7777 }, 0o640)
        XCTAssertFalse(Syscall.isExecutable(a))
        XCTAssertNoThrow(try Syscall.setMode(path: a, 0o750).get())
        XCTAssertTrue(Syscall.isExecutable(a))
        XCTAssertNoThrow(try Syscall.rename(a, to: b).get())
        XCTAssertEqual(Syscall.directoryEntries(dir)?.sorted(), [".", "..", "b"])
        XCTAssertNil(Syscall.directoryEntries(dir + "/missing"))
        XCTAssertNil(Syscall.fileMode(a))
        XCTAssertTrue(Syscall.readLink("/proc/self/exe")?.hasPrefix("/") ?? false)
        XCTAssertNil(Syscall.readLink(b))
    }

    func testEnvironmentAndChildren() throws {
        XCTAssertNil(Syscall.environment("LOFT_SYSCALL_TEST_UNSET"))
        Syscall.setEnvironment("LOFT_SYSCALL_TEST", "v=1")
        XCTAssertEqual(Syscall.environment("LOFT_SYSCALL_TEST"), "v=1")
        XCTAssertFalse(Syscall.hostName().isEmpty)
        XCTAssertEqual(Syscall.interfaceIndex("lo"), 1)
        XCTAssertEqual(Syscall.interfaceIndex("no-such-if0"), 0)

        // A child writes to its log and runs until stopped; a finished one is reaped.
        let log = dir + "/child.log"
        let pid = try XCTUnwrap(Syscall.spawn(["sh", "-c", "echo started; exec sleep 30"], log: log))
        for _ in 0..<500 where (try? Syscall.readFile(log, upTo: 100).get())?.isEmpty ?? true { Syscall.sleep(milliseconds: 10) }
        XCTAssertEqual(try Syscall.readFile(log, upTo: 100).get(), Array("started\n".utf8))
        XCTAssertTrue(Syscall.isRunning(pid))
        Syscall.stopChild(pid)
        XCTAssertFalse(Syscall.isRunning(pid))
        XCTAssertNil(Syscall.spawn(["/nonexistent/loft-test-tool"], log: log))
    }

    func testInstanceLockIsSeenHeld() throws {
        try XCTSkipUnless(Syscall.effectiveUserID == 0, "needs root: the locks are in /run/loft, root's")
        let key = "syscall-test-\(Syscall.processID)"
        defer { Syscall.unlink("/run/loft/\(key).lock") }
        XCTAssertFalse(InstanceLock.isHeld(key: key))  // no lock file
        let lock = try InstanceLock(key: key, what: "a test")
        XCTAssertTrue(InstanceLock.isHeld(key: key))
        lock.release()
        XCTAssertFalse(InstanceLock.isHeld(key: key))
    }

    func testStatusDirectoryErrorsAndPositionalIO() throws {
        let path = dir + "/p"
        XCTAssertNoThrow(try Syscall.writeFile(path, Array("hello".utf8), mode: 0o600).get())
        let st = try Syscall.status(path: path).get()
        XCTAssertTrue(st.isRegularFile)
        XCTAssertEqual(st.size, 5)
        XCTAssertEqual(st.mode & 0o7777, 0o600)
        XCTAssertFalse(try Syscall.status(path: dir).get().isRegularFile)
        XCTAssertEqual(Syscall.status(path: dir + "/missing").map(\.size), .failure(.noSuchFile))
        XCTAssertEqual(Syscall.readDirectory(dir + "/missing").map(\.count), .failure(.noSuchFile))
        XCTAssertEqual(Syscall.openForReading(dir + "/missing").map { _ in 0 }, .failure(.noSuchFile))

        // The descriptor's status is the path's; pread and pwrite leave the position alone.
        let fd = try Syscall.openOrCreate(path, mode: 0o600).get()
        defer { _ = Syscall.close(fd) }
        XCTAssertEqual(try Syscall.status(fd).get(), st)
        XCTAssertEqual(try Syscall.write(fd, Array("J".utf8), at: 0).get(), 1)
        var buf = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(try buf.withUnsafeMutableBytes { Syscall.read(fd, $0.baseAddress!, $0.count, at: 3) }.get(), 2)
        XCTAssertEqual(Array(buf[0..<2]), Array("lo".utf8))
        XCTAssertEqual(try buf.withUnsafeMutableBytes { Syscall.read(fd, $0.baseAddress!, $0.count) }.get(), 5)
        XCTAssertEqual(Array(buf[0..<5]), Array("Jello".utf8))
        XCTAssertNoThrow(try Syscall.truncate(fd, to: 2).get())
        XCTAssertEqual(try Syscall.readFile(path, upTo: 100).get(), Array("Je".utf8))
        XCTAssertEqual(try Syscall.status(fd).get().size, 2)

        // flock: a second descriptor on the file is refused while the first holds it.
        let other = try Syscall.openForReading(path).get()
        defer { _ = Syscall.close(other) }
        XCTAssertNoThrow(try Syscall.lock(fd, exclusive: true).get())
        guard case .failure(let busy) = Syscall.lock(other, exclusive: false) else { return XCTFail("locked twice") }
        XCTAssertTrue(busy.wouldBlock)
        XCTAssertNoThrow(try Syscall.unlock(fd).get())
        XCTAssertNoThrow(try Syscall.lock(other, exclusive: false).get())
        XCTAssertNoThrow(try Syscall.unlock(other).get())
    }

    func testPipeAndOneWrite() throws {
        let p = try Syscall.nonblockingPipe().get()
        defer { _ = Syscall.close(p.read); _ = Syscall.close(p.write) }
        var buf = [UInt8](repeating: 0, count: 8)
        // Nonblocking: an empty pipe says so instead of waiting.
        XCTAssertEqual(buf.withUnsafeMutableBytes { Syscall.read(p.read, $0.baseAddress!, $0.count) }.map { _ in 0 }, .failure(.again))
        XCTAssertEqual(try Syscall.write(p.write, Array("abc".utf8)).get(), 3)
        XCTAssertEqual(try Syscall.write(p.write, []).get(), 0)
        XCTAssertEqual(try buf.withUnsafeMutableBytes { Syscall.read(p.read, $0.baseAddress!, $0.count) }.get(), 3)
        XCTAssertEqual(Array(buf[0..<3]), Array("abc".utf8))
        XCTAssertEqual(Syscall.write(-1, Array("x".utf8)).map { _ in 0 }, .failure(.badDescriptor))
    }

    func testRunToEnd() throws {
        let r = try Syscall.runToEnd(["sh", "-c", "echo out; echo err >&2; exit 3"]).get()
        XCTAssertEqual((r.status >> 8) & 0xff, 3)
        XCTAssertEqual(r.stderr, Array("err\n".utf8))  // stdout went to /dev/null
        XCTAssertEqual(Syscall.runToEnd(["/nonexistent/loft-test-tool"]).map { _ in 0 }, .failure(.noSuchFile))
    }

    func testASecondInstanceLockNamesTheHolder() throws {
        try XCTSkipUnless(Syscall.effectiveUserID == 0, "needs root: the locks are in /run/loft, root's")
        let key = "syscall-test-busy-\(Syscall.processID)"
        defer { Syscall.unlink("/run/loft/\(key).lock") }
        let lock = try InstanceLock(key: key, what: "a test")
        XCTAssertEqual(try Syscall.readFile("/run/loft/\(key).lock", upTo: 100).get(), Array("\(Syscall.processID)\n".utf8))
        XCTAssertThrowsError(try InstanceLock(key: key, what: "a test")) { error in
            XCTAssertEqual("\(error)", "a test is in use by another loft (pid \(Syscall.processID)); stop it first")
        }
        lock.release()
    }
}
