import Glibc
import LoftCore
import XCTest
@testable import LoftInputs
import LoftIO

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

    /// Host mode's changes, made over rtnetlink and read back with `ip`: policy rules (fwmark,
    /// a prefix, a table above 255), routes in a table of their own, and each undone the way its
    /// undo line says (rule del, table flush).
    func testRulesAndTableRoutesAndTheirUndo() throws {
        let nl = try RouteNetlink(netns: ns)
        defer { nl.close() }
        let index = try nl.index(of: "nl0")
        try nl.setUp(index: index, name: "nl0")
        let table: UInt32 = 27123
        try nl.addRule(priority: 20100, ipv6: false, fwmark: 0x4C46, table: 254)
        try nl.addRule(priority: 20101, ipv6: false, to: IPPrefix("198.18.150.7/24")!, table: 254)
        try nl.addRule(priority: 20102, ipv6: false, table: table)
        try nl.addRule(priority: 20100, ipv6: true, fwmark: 0x4C46, table: 254)
        try nl.addRule(priority: 20102, ipv6: true, table: table)
        let rules4 = inNetns("ip -4 rule show")
        XCTAssertTrue(rules4.contains("20100:\tfrom all fwmark 0x4c46 lookup main"), rules4)
        XCTAssertTrue(rules4.contains("20101:\tfrom all to 198.18.150.0/24 lookup main"), rules4)
        XCTAssertTrue(rules4.contains("20102:\tfrom all lookup 27123"), rules4)
        XCTAssertTrue(inNetns("ip -6 rule show").contains("20102:\tfrom all lookup 27123"))
        // A rule added twice is an error (NLM_F_EXCL), as `ip rule add` makes it.
        XCTAssertThrowsError(try nl.addRule(priority: 20102, ipv6: false, table: table))

        try nl.replaceRoute(IPPrefix("0.0.0.0/0")!, table: table, index: index, name: "nl0")
        try nl.replaceRoute(IPPrefix("198.18.160.9/24")!, table: table, index: index, name: "nl0")
        try nl.replaceRoute(IPPrefix("::/0")!, table: table, index: index, name: "nl0")
        XCTAssertEqual(inNetns("ip -4 route show table 27123"),
                       "default dev nl0 scope link \n198.18.160.0/24 dev nl0 scope link \n")
        XCTAssertTrue(inNetns("ip -6 route show table 27123").hasPrefix("default dev nl0 "))

        // The undo lines as the state file holds them, applied in reverse.
        let undo: [HostRoutes.Undo] = [
            .rule(ipv6: false, priority: 20100, to: nil), .rule(ipv6: false, priority: 20101, to: IPPrefix("198.18.150.0/24")!),
            .rule(ipv6: false, priority: 20102, to: nil), .flush(ipv6: false, table: table),
            .rule(ipv6: true, priority: 20100, to: nil), .rule(ipv6: true, priority: 20102, to: nil), .flush(ipv6: true, table: table),
        ]
        for u in undo { XCTAssertEqual(HostRoutes.Undo(line: u.line), u, u.line) }
        for u in undo.reversed() { try u.apply(nl) }
        XCTAssertEqual(inNetns("ip -4 route show table 27123"), "")
        XCTAssertEqual(inNetns("ip -6 route show table 27123"), "")
        let after = inNetns("ip -4 rule show") + inNetns("ip -6 rule show")
        XCTAssertFalse(after.contains("2010"), after)
        // Flushing an empty table removes nothing and is no error; a rule already gone is ESRCH/ENOENT.
        XCTAssertEqual(try nl.flushTable(table, ipv6: false), 0)
        XCTAssertThrowsError(try nl.deleteRule(priority: 20100, ipv6: false))
    }

    /// A table flush removes every route, also past one dump pass's 4,096 (host mode puts one
    /// route per `via`/`drop` prefix in its table; prefix files hold many thousands).
    func testFlushEmptiesALargeTable() throws {
        let nl = try RouteNetlink(netns: ns)
        defer { nl.close() }
        let index = try nl.index(of: "nl0")
        try nl.setUp(index: index, name: "nl0")
        let table: UInt32 = 27124
        for i in 0..<5000 {
            try nl.replaceRoute(IPPrefix(.v4(0x0A00_0000 | UInt32(i) << 8), 24)!, table: table, index: index, name: "nl0")
        }
        XCTAssertEqual(inNetns("ip -4 route show table 27124 | wc -l"), "5000\n")
        XCTAssertEqual(try nl.flushTable(table, ipv6: false), 5000)
        XCTAssertEqual(inNetns("ip -4 route show table 27124"), "")
    }

    /// The undo file's lines: exactly the two forms loft writes, nothing else (the file is run
    /// as root at the next start).
    func testUndoLinesParseOnlyWhatLoftWrites() {
        XCTAssertEqual(HostRoutes.Undo(line: "ip -4 rule del priority 20004"), .rule(ipv6: false, priority: 20004, to: nil))
        XCTAssertEqual(HostRoutes.Undo(line: "ip -6 rule del priority 20005 to fd00:1::/64"),
                       .rule(ipv6: true, priority: 20005, to: IPPrefix("fd00:1::/64")!))
        XCTAssertEqual(HostRoutes.Undo(line: "ip -6 route flush table 27001"), .flush(ipv6: true, table: 27001))
        // fuzz/host_routes_undo's find: a prefix with host bits reads as its network, so the line
        // loft would write for it reads back to the same change.
        let hostBits = HostRoutes.Undo(line: "ip -6 rule del priority 20005 to fd00:1::/12")
        XCTAssertEqual(hostBits, .rule(ipv6: true, priority: 20005, to: IPPrefix("fd00::/12")!))
        XCTAssertEqual(hostBits.flatMap { HostRoutes.Undo(line: $0.line) }, hostBits)
        for bad in ["", "ip", "ip -4 rule add priority 1", "ip -4 rule del priority x", "ip -4 route flush table",
                    "ip -4 rule del priority 5 to fd00::/8", "ip -6 rule del priority 5 to 10.0.0.0/8",
                    "ip -4 rule del priority 5 from 10.0.0.0/8", "rm -rf /", "ip -4 route flush table 1 extra",
                    "ip netns del x", "ip -4 rule del priority 99999999999"] {
            XCTAssertNil(HostRoutes.Undo(line: bad), bad)
        }
    }

    /// `ip netns add|del` without `ip`: the name appears under /var/run/netns, is a namespace of
    /// its own (its loopback is down and has no routes), a taken name is refused, and delete
    /// removes the name.
    func testNetworkNamespaceAddAndDelete() throws {
        let name = "loft-nstest-\(getpid())"
        defer { try? NetworkNamespace.delete(name) }
        try NetworkNamespace.add(name)
        XCTAssertTrue(inNetns("ip netns list").contains(name))
        let nl = try RouteNetlink(netns: name)
        XCTAssertEqual(try nl.index(of: "lo"), 1)
        XCTAssertThrowsError(try nl.index(of: "nl0"))  // not the test's other namespace
        nl.close()
        var out = ""
        if let p = popen("ip -n \(name) -o link show 2>&1", "r") {
            var buf = [CChar](repeating: 0, count: 4096)
            while fgets(&buf, Int32(buf.count), p) != nil {
                out += String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
            pclose(p)
        }
        XCTAssertEqual(out.split(separator: "\n").count, 1, out)  // lo alone
        XCTAssertTrue(out.contains("lo: <LOOPBACK>"), out)
        XCTAssertThrowsError(try NetworkNamespace.add(name)) { error in
            XCTAssertEqual("\(error)", "cannot create network namespace \(name): File exists")
        }
        XCTAssertThrowsError(try NetworkNamespace.add("a/b"))
        try NetworkNamespace.delete(name)
        XCTAssertEqual(access("/var/run/netns/\(name)", F_OK), -1)
        XCTAssertThrowsError(try NetworkNamespace.delete(name))
    }
}
