import XCTest
@testable import LoftCore

/// Privileges: the effective set read from /proc/self/status's text, and the one sentence that
/// names what is missing (nothing when all is there).
final class PrivilegesTests: XCTestCase {
    let status = "Name:\tloft\nCapInh:\t0000000000000000\nCapPrm:\t0000000000201000\nCapEff:\t0000000000201000\nCapBnd:\t0000000000201000\n"

    func testEffectiveParsed() {
        XCTAssertEqual(Privileges.effective(statusText: status), 0x201000)
        XCTAssertNil(Privileges.effective(statusText: "Name:\tx\n"))
        XCTAssertNil(Privileges.effective(statusText: "CapEff:\tzz\n"))
        XCTAssertNotNil(Privileges.effective(), "this process's own status")
    }

    func testHas() {
        let set = Privileges.effective(statusText: status)
        XCTAssertTrue(Privileges.has(.netAdmin, in: set))
        XCTAssertTrue(Privileges.has(.sysAdmin, in: set))
        XCTAssertFalse(Privileges.has(.netBindService, in: set))
    }

    func testMissingNamesOnlyWhatLacks() {
        let set = Privileges.effective(statusText: status)
        XCTAssertNil(Privileges.missing([(.netAdmin, "the TUN"), (.sysAdmin, "netns")], program: "loft", effective: set))
        let m = Privileges.missing([(.netAdmin, "the TUN"), (.netBindService, "port 443")], program: "loft", effective: set)
        XCTAssertEqual(m, "loft: missing capability CAP_NET_BIND_SERVICE (port 443): run as root, or grant it (the systemd units do: docs/service.md); nothing was started")
        let none = Privileges.missing([(.netAdmin, "the TUN"), (.sysAdmin, "netns")], program: "loft", effective: 0)
        XCTAssertEqual(none, "loft: missing capability CAP_NET_ADMIN (the TUN), CAP_SYS_ADMIN (netns): run as root, or grant it (the systemd units do: docs/service.md); nothing was started")
    }

    func testWritable() {
        XCTAssertNil(Privileges.writable("/tmp"))
        XCTAssertNil(Privileges.writable("/tmp/loft-privileges-test-absent"), "made if missing: its parent counts")
        XCTAssertNotNil(Privileges.writable("/proc/1/absent"))
    }
}
