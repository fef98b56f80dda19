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
}
