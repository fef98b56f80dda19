import Glibc
import LoftCore
import XCTest
@testable import LoftIO

/// ServiceNotifier: sd_notify's datagrams arrive at a path and an abstract socket as written,
/// the watchdog interval is half WATCHDOG_USEC (none for another process's WATCHDOG_PID), and
/// the pings come from the loop's timers.
final class ServiceNotifierTests: XCTestCase {
    /// A bound AF_UNIX datagram socket at `path` (a leading "@": abstract).
    func listener(_ path: String) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        var a = sockaddr_un()
        a.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 } else { unlink(path) }
        withUnsafeMutableBytes(of: &a.sun_path) { for (i, b) in bytes.enumerated() { $0[i] = b } }
        let len = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes[0] == 0 ? 0 : 1))
        let r = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        XCTAssertEqual(r, 0, String(cString: strerror(errno)))
        return fd
    }

    func messages(_ fd: Int32) -> [String] {
        var out: [String] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { return out }
            out.append(String(decoding: buf[0..<n], as: UTF8.self))
        }
    }

    func testPathSocket() {
        let path = "/tmp/loft-notify-test-\(getpid()).sock"
        let fd = listener(path)
        defer { close(fd); unlink(path) }
        let n = ServiceNotifier(environment: env(["NOTIFY_SOCKET": path]))
        XCTAssertTrue(n.isActive)
        n.ready(status: "tun up")
        n.status("tun up")        // unchanged: not sent again
        n.status("2 tcp flows")
        n.stopping()
        XCTAssertEqual(messages(fd), ["READY=1\nSTATUS=tun up", "STATUS=2 tcp flows", "STOPPING=1\nSTATUS=stopping"])
    }

    func testAbstractSocket() {
        let name = "@loft-notify-test-\(getpid())"
        let fd = listener(name)
        defer { close(fd) }
        ServiceNotifier(environment: env(["NOTIFY_SOCKET": name])).send("READY=1")
        XCTAssertEqual(messages(fd), ["READY=1"])
    }

    func testInactiveWithoutSocket() {
        let n = ServiceNotifier(environment: env([:]))
        XCTAssertFalse(n.isActive)
        n.send("READY=1")
        XCTAssertEqual(n.sent, 0)
        XCTAssertFalse(ServiceNotifier(environment: env(["NOTIFY_SOCKET": "relative/path"])).isActive)
    }

    func testWatchdogInterval() {
        XCTAssertEqual(ServiceNotifier(environment: env(["WATCHDOG_USEC": "20000000"])).watchdogIntervalMs, 10_000)
        XCTAssertEqual(ServiceNotifier(environment: env(["WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "\(getpid())"])).watchdogIntervalMs, 10_000)
        XCTAssertNil(ServiceNotifier(environment: env(["WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "1"])).watchdogIntervalMs)
        XCTAssertNil(ServiceNotifier(environment: env(["WATCHDOG_USEC": "junk"])).watchdogIntervalMs)
        XCTAssertNil(ServiceNotifier(environment: env([:])).watchdogIntervalMs)
    }

    /// On virtual time: the watchdog is a loop timer.
    func testWatchdogFromTheLoop() throws {
        let path = "/tmp/loft-notify-wd-\(getpid()).sock"
        let fd = listener(path)
        defer { close(fd); unlink(path) }
        let loop = try EventLoop(clock: VirtualClock())
        let n = ServiceNotifier(environment: env(["NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"]))
        var ticks = 0
        n.startWatchdog(on: loop) { ticks += 1 }
        loop.schedule(after: 280) { loop.stop() }
        loop.run()
        // Every 50 ms for 280 ms: 5 pings (the 6th would be at 300).
        XCTAssertEqual(messages(fd), Array(repeating: "WATCHDOG=1", count: 5))
        XCTAssertEqual(ticks, 5)
        n.stopping()   // cancels the timer: no ping after it
        loop.schedule(after: 120) { loop.stop() }
        loop.run()
        XCTAssertEqual(messages(fd), ["STOPPING=1\nSTATUS=stopping"])
    }
}

private func env(_ d: [String: String]) -> (String) -> String? { { d[$0] } }
