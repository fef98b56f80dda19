import Glibc
import LoftCore
import XCTest
@testable import LoftInputs

/// RouteNetlink against the kernel: a namespace of its own with a veth pair, changed only
/// over rtnetlink and read back with `ip`. Needs root (Tests/run runs as root).
final class RouteNetlinkTests: XCTestCase {
    var ns = ""

    override func setUpWithError() throws {
        guard getuid() == 0 else { throw XCTSkip("needs root: a network namespace") }
        ns = "loft-nltest-\(getpid())"
        try Command.run(["ip", "netns", "add", ns])
        // A veth pair (the peer up, so nl0 has a carrier once it is up itself).
        try Command.run(["ip", "-n", ns, "link", "add", "nl0", "type", "veth", "peer", "name", "nl1"])
        try Command.run(["ip", "-n", ns, "link", "set", "nl1", "up"])
    }

    override func tearDown() {
        if !ns.isEmpty { _ = try? Command.run(["ip", "netns", "del", ns], allowFailure: true) }
    }

    /// stdout of a command run inside the test's namespace.
    func inNetns(_ command: String) -> String {
        guard let p = popen("ip netns exec \(ns) \(command) 2>&1", "r") else { return "" }
        defer { pclose(p) }
        var out = ""
        var buf = [CChar](repeating: 0, count: 4096)
        while fgets(&buf, Int32(buf.count), p) != nil {
            out += String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return out
    }

    func testLinkAddressesAndRoutesInANamespace() throws {
        let nl = try RouteNetlink(netns: ns)
        defer { nl.close() }
        let index = try nl.index(of: "nl0")
        XCTAssertGreaterThan(index, 1)
        XCTAssertEqual(try nl.index(of: "lo"), 1)
        // The device is not in loft's own namespace.
        XCTAssertEqual(if_nametoindex("nl0"), 0)

        try nl.setMTU(1380, index: index, name: "nl0")
        try nl.setUp(index: index, name: "nl0")
        let link = inNetns("ip link show nl0")
        XCTAssertTrue(link.contains("mtu 1380"), link)
        XCTAssertTrue(link.contains(",UP"), link)

        // Replace semantics: the same address twice is no error and one address.
        let a1 = IPPrefix("198.18.200.1/24")!, a2 = IPPrefix("198.18.200.2/24")!
        try nl.replaceAddress(a1, index: index, name: "nl0")
        try nl.replaceAddress(a1, index: index, name: "nl0")
        XCTAssertEqual(inNetns("ip -4 -o addr show dev nl0").split(separator: "\n").count, 1)
        // promote_secondaries keeps a2 (a secondary in a1's subnet) when a1 comes off.
        XCTAssertEqual(inNetns("sysctl -n net.ipv4.conf.nl0.promote_secondaries"), "0\n")
        try nl.setPromoteSecondaries(index: index, name: "nl0")
        XCTAssertEqual(inNetns("sysctl -n net.ipv4.conf.nl0.promote_secondaries"), "1\n")
        try nl.replaceAddress(a2, index: index, name: "nl0")
        try nl.deleteAddress(a1, index: index, name: "nl0")
        let v4 = inNetns("ip -4 -o addr show dev nl0")
        XCTAssertTrue(v4.contains("inet 198.18.200.2/24"), v4)
        XCTAssertFalse(v4.contains("198.18.200.1/"), v4)

        let b1 = IPPrefix("fd00:200::1/64")!, b2 = IPPrefix("fd00:200::2/64")!
        try nl.replaceAddress(b1, index: index, name: "nl0")
        try nl.replaceAddress(b2, index: index, name: "nl0")
        try nl.deleteAddress(b1, index: index, name: "nl0")
        let v6 = inNetns("ip -6 -o addr show dev nl0 scope global")
        XCTAssertTrue(v6.contains("inet6 fd00:200::2/64"), v6)
        XCTAssertFalse(v6.contains("fd00:200::1/"), v6)
        XCTAssertFalse(v6.contains("tentative"), v6)  // nodad

        // Default routes: through the device alone, then replaced by one via a gateway outside
        // the device's subnets (onlink).
        try nl.replaceDefaultRoute(ipv6: false, index: index, name: "nl0")
        try nl.replaceDefaultRoute(ipv6: true, index: index, name: "nl0")
        XCTAssertEqual(inNetns("ip -4 route show default"), "default dev nl0 scope link \n")
        XCTAssertTrue(inNetns("ip -6 route show default").hasPrefix("default dev nl0 "))
        try nl.replaceDefaultRoute(via: IPAddress("198.18.201.1")!, index: index, name: "nl0")
        try nl.replaceDefaultRoute(via: IPAddress("fd00:201::1")!, index: index, name: "nl0")
        try nl.replaceDefaultRoute(via: IPAddress("198.18.201.9")!, index: index, name: "nl0")
        XCTAssertEqual(inNetns("ip -4 route show default"), "default via 198.18.201.9 dev nl0 onlink \n")
        let r6 = inNetns("ip -6 route show default")
        XCTAssertTrue(r6.hasPrefix("default via fd00:201::1 dev nl0 ") && r6.contains("onlink"), r6)
        XCTAssertEqual(r6.split(separator: "\n").count, 1, r6)
    }

    func testKernelErrorsNameTheOperation() throws {
        let nl = try RouteNetlink(netns: ns)
        defer { nl.close() }
        XCTAssertThrowsError(try nl.index(of: "nosuch0")) { error in
            XCTAssertEqual("\(error)", "cannot find interface nosuch0 in netns \(ns): No such device")
        }
        let index = try nl.index(of: "nl0")
        XCTAssertThrowsError(try nl.deleteAddress(IPPrefix("198.18.202.1/24")!, index: index, name: "nl0")) { error in
            XCTAssertEqual("\(error)", "cannot remove address 198.18.202.1/24 from nl0 in netns \(ns): Cannot assign requested address")
        }
        XCTAssertThrowsError(try nl.setMTU(70_000_000, index: index, name: "nl0")) { error in
            XCTAssertEqual((error as? RouteNetlink.Failure)?.code, EINVAL)
        }
        XCTAssertThrowsError(try RouteNetlink(netns: "loft-nltest-missing")) { error in
            XCTAssertEqual("\(error)", "cannot open rtnetlink in netns loft-nltest-missing: No such file or directory")
        }
    }
}
