import CLinux
import Glibc
import LoftCore
import LoftIO
import LoftTestSupport
import XCTest
@testable import LoftControl

/// One request on the control socket, nonblocking, driven by the test's steps.
private final class ControlConnection {
    let fd: Int32
    var received: [UInt8] = []
    private(set) var closed = false

    init(_ path: String) {
        fd = clinux_unix_connect(path)
        XCTAssertGreaterThanOrEqual(fd, 0, "connect \(path)")
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    func send(_ bytes: [UInt8]) {
        XCTAssertEqual(bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }, bytes.count)
    }

    func send(_ line: String) { send(Array(line.utf8)) }

    /// Reads what has arrived; true once the server closed.
    func done() -> Bool {
        var buf = [UInt8](repeating: 0, count: 4096)
        while !closed {
            let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n > 0 { received += buf[0..<n]; continue }
            if n == 0 || errno != EAGAIN { closed = true }
            break
        }
        return closed
    }

    var text: String { String(decoding: received, as: UTF8.self) }
}

/// The control socket through its public API: a real Unix socket, the loop on virtual time where
/// a deadline or the render cache's age is the subject.
final class ControlServerTests: XCTestCase {
    private var path = ""
    private var asked: [String] = []

    override func setUp() {
        path = "/tmp/loft-control-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        asked = []
    }

    override func tearDown() { unlink(path) }

    private func server(_ loop: EventLoop) throws -> ControlServer {
        try ControlServer(path: path, loop: loop) { [unowned self] line in
            asked.append(line)
            if line == "fail" { return .failure(ControlServer.ControlError("it failed")) }
            return .success("answer to \(line)\n")
        }
    }

    func testARequestIsAnsweredOkThenClosed() throws {
        let loop = try EventLoop()
        let s = try server(loop)
        defer { s.stop() }
        let c = ControlConnection(path)
        let failed = loop.run(steps: [{ c.send("status\n"); return true }, c.done], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(c.text, "ok\nanswer to status\n")
        XCTAssertEqual(asked, ["status"])
        XCTAssertEqual(s.badRequests, 0)
    }

    func testAFailureIsAnsweredAsAnError() throws {
        let loop = try EventLoop()
        let s = try server(loop)
        defer { s.stop() }
        let c = ControlConnection(path)
        let failed = loop.run(steps: [{ c.send("fail\r\n"); return true }, c.done], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(c.text, "error it failed\n")
        XCTAssertEqual(asked, ["fail"], "a CR before the LF is not part of the line")
        XCTAssertEqual(s.badRequests, 1)
    }

    func testBytesThatAreNotTextAndOverlongRequestsAreRefused() throws {
        let loop = try EventLoop()
        let s = try server(loop)
        defer { s.stop() }
        let binary = ControlConnection(path)
        let long = ControlConnection(path)
        let failed = loop.run(steps: [
            { binary.send([0xFF, 0xFE, 10]); long.send([UInt8](repeating: 0x61, count: 1100)); return true },
            { binary.done() && long.done() },
        ], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(binary.text, "error request is not UTF-8 text\n")
        XCTAssertEqual(long.text, "error request too long\n")
        XCTAssertTrue(asked.isEmpty, "the handler saw neither")
        XCTAssertEqual(s.badRequests, 1)
    }

    /// On virtual time: a client that never finishes its line is closed 2 s after it connected.
    func testASilentClientIsClosedAtItsDeadline() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let s = try server(loop)
        defer { s.stop() }
        let start = loop.currentTime
        let c = ControlConnection(path)
        let failed = loop.run(steps: [{ c.send("sta"); return true }, c.done], seconds: 10)
        XCTAssertNil(failed)
        XCTAssertTrue(c.received.isEmpty)
        XCTAssertGreaterThanOrEqual(loop.currentTime - start, ControlServer.deadlineMs)
        XCTAssertTrue(asked.isEmpty)
    }

    /// On virtual time: read-only requests less than 100 ms apart get the cached answer (at most
    /// 200 ms old); after a quiet 150 ms the handler runs again; path-changed always runs.
    func testReadOnlyRequestsInAStormAreAnsweredFromTheCache() throws {
        let loop = try EventLoop(clock: VirtualClock())
        let s = try server(loop)
        defer { s.stop() }
        var answers: [String] = []
        func ask(_ line: String) -> [() -> Bool] {
            var c: ControlConnection?
            return [
                { c = ControlConnection(self.path); c!.send(line + "\n"); return true },
                { if c!.done() { answers.append(c!.text); return true }; return false },
            ]
        }
        var quietUntil: UInt64 = 0
        let failed = loop.run(steps: ask("status") + ask("status")
                              + [{ quietUntil = loop.currentTime + 150; return true }, { loop.currentTime >= quietUntil }]
                              + ask("status") + ask("path-changed") + ask("path-changed"), seconds: 10)
        XCTAssertNil(failed)
        XCTAssertEqual(answers, ["ok\nanswer to status\n", "ok\nanswer to status\n", "ok\nanswer to status\n",
                                 "ok\nanswer to path-changed\n", "ok\nanswer to path-changed\n"])
        XCTAssertEqual(asked, ["status", "status", "path-changed", "path-changed"])
        XCTAssertEqual(s.cachedAnswers, 1)
    }

    func testASecondServerOnTheSamePathIsRefused() throws {
        let loop = try EventLoop()
        let s = try server(loop)
        defer { s.stop() }
        XCTAssertThrowsError(try server(loop)) { e in
            XCTAssertTrue("\(e)".contains("in use by another loft"), "\(e)")
        }
    }
}
