import Foundation
import Glibc
import LoftCore
import XCTest
@testable import LoftInputs

/// Host-mode policy routes through HostRoutes' public API, installed and removed for real, in
/// a network namespace of the test's own (the host's routing is shared; a thread that unshares
/// its namespace, and the `ip` processes it spawns, see only theirs). NEEDS ROOT
/// (CAP_SYS_ADMIN, CAP_NET_ADMIN): skipped, with the reason, otherwise.
final class HostRoutesTests: XCTestCase {
    /// Runs `body` on a thread of its own in a new, empty network namespace (gone with it).
    /// unshare(2) by its symbol: Swift's Glibc module does not declare it.
    private func inPrivateNamespace(_ body: @escaping () -> Void) throws {
        typealias Unshare = @convention(c) (Int32) -> Int32
        guard let symbol = dlsym(nil, "unshare") else { throw XCTSkip("no unshare in libc") }
        let unshare = unsafeBitCast(symbol, to: Unshare.self)
        let newNetworkNamespace: Int32 = 0x4000_0000   // CLONE_NEWNET
        /// The body and its outcome, handed to the thread (which the caller waits for).
        final class Job: @unchecked Sendable {
            let body: () -> Void
            var failure: Int32 = 0
            init(_ body: @escaping () -> Void) { self.body = body }
        }
        let job = Job(body)
        let done = DispatchSemaphore(value: 0)
        let t = Thread {
            if unshare(newNetworkNamespace) != 0 { job.failure = errno } else { job.body() }
            done.signal()
        }
        t.start()
        done.wait()
        if job.failure != 0 { throw XCTSkip("unshare(CLONE_NEWNET): \(String(cString: strerror(job.failure)))") }
    }

    /// A command's output, run from the calling thread (popen: its namespace; Foundation's
    /// Process waits on a run loop the namespace's thread does not turn).
    private func output(_ args: [String]) -> String {
        guard let f = popen(args.joined(separator: " ") + " 2>&1", "r") else { return "" }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&buf, 1, buf.count, f)
            if n == 0 { break }
            out += buf[0..<n]
        }
        pclose(f)
        return String(decoding: out, as: UTF8.self)
    }

    func testThePlanIsInstalledAndRemovedWholly() throws {
        try XCTSkipUnless(geteuid() == 0, "needs root: changes routing rules (in a namespace of its own)")
        Log.threshold = .warn
        let plan = HostRoutes.Plan(tun: "loftut1", routeAll: true, intoTun: [IPPrefix("198.18.5.7/24")!],
                                   offTun: [IPPrefix("192.0.2.0/24")!, IPPrefix("2001:db8::/32")!])
        let routes = HostRoutes(plan: plan)
        var rules4 = "", rules6 = "", table4 = "", table6 = "", after4 = "", after6 = "", afterTable = ""
        var installError: Error?
        var installed = -1
        try inPrivateNamespace { [self] in
            _ = output(["ip", "tuntap", "add", "dev", "loftut1", "mode", "tun"])
            _ = output(["ip", "link", "set", "loftut1", "up"])
            do { try routes.install() } catch { installError = error }
            installed = routes.installed
            rules4 = output(["ip", "-4", "rule", "show"])
            rules6 = output(["ip", "-6", "rule", "show"])
            table4 = output(["ip", "-4", "route", "show", "table", "\(routes.table)"])
            table6 = output(["ip", "-6", "route", "show", "table", "\(routes.table)"])
            routes.remove()
            after4 = output(["ip", "-4", "rule", "show"])
            after6 = output(["ip", "-6", "rule", "show"])
            afterTable = output(["ip", "-4", "route", "show", "table", "\(routes.table)"])
        }
        XCTAssertNil(installError)
        // Per family: the mark rule, the off-TUN rules, the table rule and its routes.
        XCTAssertEqual(installed, 5 + 4)
        let p = routes.priority
        XCTAssertTrue(rules4.contains("\(p):\tfrom all fwmark 0x4c46 lookup main"), rules4)
        XCTAssertTrue(rules4.contains("\(p + 1):\tfrom all to 192.0.2.0/24 lookup main"), rules4)
        XCTAssertTrue(rules4.contains("\(p + 2):\tfrom all lookup \(routes.table)"), rules4)
        XCTAssertTrue(rules6.contains("\(p):\tfrom all fwmark 0x4c46 lookup main"), rules6)
        XCTAssertTrue(rules6.contains("\(p + 1):\tfrom all to 2001:db8::/32 lookup main"), rules6)
        XCTAssertTrue(rules6.contains("\(p + 2):\tfrom all lookup \(routes.table)"), rules6)
        XCTAssertTrue(table4.contains("default dev loftut1"), table4)
        XCTAssertTrue(table4.contains("198.18.5.0/24 dev loftut1"), table4)
        XCTAssertTrue(table6.contains("default dev loftut1"), table6)
        for text in [after4, after6] {
            XCTAssertFalse(text.contains("\(p):") || text.contains("\(p + 1):") || text.contains("\(p + 2):"), text)
        }
        XCTAssertFalse(afterTable.contains("loftut1"), afterTable)
        XCTAssertEqual(routes.installed, 0)
        XCTAssertNotEqual(access(routes.statePath, F_OK), 0, "the undo file went with the routes")
    }

    func testUndoFileLines() {
        // Each line to its first NUL; empty lines (a trailing newline, a blank line) left out.
        XCTAssertEqual(HostRoutes.undoLines(Array("rule 4 a\n\nroute b\n".utf8)), ["rule 4 a", "route b"])
        XCTAssertEqual(HostRoutes.undoLines(Array("last without newline".utf8)), ["last without newline"])
        XCTAssertEqual(HostRoutes.undoLines([0x61, 0, 0x62, 10, 0, 10]), ["a"])
        XCTAssertEqual(HostRoutes.undoLines([]), [])
    }
}
