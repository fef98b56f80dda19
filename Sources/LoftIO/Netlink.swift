import Glibc
import LoftCore

/// An rtnetlink socket in one network namespace: loft's own requests for a device's MTU, link
/// state, addresses and default routes, each one kernel round trip answered by an ACK. No
/// process is started, so these are fine on the event loop.
public final class RouteNetlink {
    /// A request the kernel refused (or could not be sent): the operation and the kernel's error.
    public struct Failure: Error, CustomStringConvertible {
        public var operation: String
        public var code: Int32
        public var description: String { "\(operation): \(String(cString: strerror(code)))" }
    }

    private var fd: Int32
    /// Where the socket lives, for error messages: " in netns NAME" or "".
    let place: String

    /// Opens the socket inside the namespace at /var/run/netns/`netns` (nil: loft's own).
    public init(netns: String?) throws {
        place = netns.map { " in netns \($0)" } ?? ""
        let path = netns.map { "/var/run/netns/\($0)" }
        switch Syscall.rtnlOpen(path) {
        case .success(let r): fd = r
        case .failure(let e): throw Failure(operation: "cannot open rtnetlink\(place)", code: e.code)
        }
    }

    deinit { close() }

    /// Closes the socket (it holds a reference to its namespace until then).
    public func close() {
        if fd >= 0 { _ = Syscall.close(fd) }
        fd = -1
    }

    @discardableResult
    private func check(_ r: Result<Int32, Errno>, _ operation: @autoclosure () -> String) throws -> Int32 {
        switch r {
        case .success(let v): return v
        case .failure(let e): throw Failure(operation: operation(), code: e.code)
        }
    }

    /// The interface index of `name` in the socket's namespace.
    public func index(of name: String) throws -> Int32 {
        try check(Syscall.rtnlInterfaceIndex(fd, name), "cannot find interface \(name)\(place)")
    }

    public func setMTU(_ mtu: Int, index: Int32, name: String) throws {
        try check(Syscall.rtnlSetLink(fd, index: index, mtu: Int32(mtu), up: -1), "cannot set MTU \(mtu) on \(name)\(place)")
    }

    public func setUp(index: Int32, name: String) throws {
        try check(Syscall.rtnlSetLink(fd, index: index, mtu: 0, up: 1), "cannot set \(name) up\(place)")
    }

    /// IPv4 promote_secondaries: a secondary address in the primary's subnet becomes primary
    /// when the primary is removed, instead of being removed with it.
    public func setPromoteSecondaries(index: Int32, name: String) throws {
        try check(Syscall.rtnlPromoteSecondaries(fd, index: index, on: true), "cannot set promote_secondaries on \(name)\(place)")
    }

    /// `ip addr replace PREFIX dev NAME` (IPv6: `nodad`).
    public func replaceAddress(_ prefix: IPPrefix, index: Int32, name: String) throws {
        let r = withAddress(prefix.address) { family, bytes in
            Syscall.rtnlAddress(fd, replace: true, index: index, family: family, bytes, prefixLength: Int32(prefix.length))
        }
        try check(r, "cannot add address \(prefix) to \(name)\(place)")
    }

    /// `ip addr del PREFIX dev NAME`.
    public func deleteAddress(_ prefix: IPPrefix, index: Int32, name: String) throws {
        let r = withAddress(prefix.address) { family, bytes in
            Syscall.rtnlAddress(fd, replace: false, index: index, family: family, bytes, prefixLength: Int32(prefix.length))
        }
        try check(r, "cannot remove address \(prefix) from \(name)\(place)")
    }

    /// `ip route replace default via GATEWAY dev NAME onlink` in the gateway's family.
    public func replaceDefaultRoute(via gateway: IPAddress, index: Int32, name: String) throws {
        let r = withAddress(gateway) { family, bytes in Syscall.rtnlDefaultRoute(fd, index: index, family: family, gateway: bytes) }
        try check(r, "cannot set the default route via \(gateway) dev \(name)\(place)")
    }

    /// `ip route replace default dev NAME` (`ip -6 …` when `ipv6`).
    public func replaceDefaultRoute(ipv6: Bool, index: Int32, name: String) throws {
        let r = Syscall.rtnlDefaultRoute(fd, index: index, family: ipv6 ? AF_INET6 : AF_INET, gateway: nil)
        try check(r, "cannot set the \(ipv6 ? "IPv6" : "IPv4") default route dev \(name)\(place)")
    }

    /// `ip route replace PREFIX dev NAME table TABLE` (PREFIX with its host bits cleared).
    public func replaceRoute(_ prefix: IPPrefix, table: UInt32, index: Int32, name: String) throws {
        let prefix = prefix.masked
        let r = withAddress(prefix.address) { family, bytes in
            Syscall.rtnlTableRoute(fd, add: true, family: family, table: table, bytes, length: Int32(prefix.length), index: index)
        }
        try check(r, "cannot add the route \(prefix.network) dev \(name) table \(table)\(place)")
    }

    /// `ip route flush table TABLE` for one family: how many routes it removed.
    @discardableResult
    public func flushTable(_ table: UInt32, ipv6: Bool) throws -> Int {
        let r = Syscall.rtnlFlushTable(fd, family: ipv6 ? AF_INET6 : AF_INET, table: table)
        return Int(try check(r, "cannot flush \(ipv6 ? "IPv6" : "IPv4") routing table \(table)\(place)"))
    }

    /// `ip rule add priority P [fwmark M] [to PREFIX] lookup TABLE` (`ipv6`: `ip -6 rule …`).
    public func addRule(priority: UInt32, ipv6: Bool, fwmark: UInt32 = 0, to prefix: IPPrefix? = nil, table: UInt32) throws {
        let r = rule(add: true, priority: priority, ipv6: ipv6, fwmark: fwmark, to: prefix, table: table)
        try check(r, "cannot add the \(ipv6 ? "IPv6" : "IPv4") rule priority \(priority)\(prefix.map { " to \($0.network)" } ?? "") lookup \(table)\(place)")
    }

    /// `ip rule del priority P [to PREFIX]`.
    public func deleteRule(priority: UInt32, ipv6: Bool, to prefix: IPPrefix? = nil) throws {
        let r = rule(add: false, priority: priority, ipv6: ipv6, fwmark: 0, to: prefix, table: 0)
        try check(r, "cannot remove the \(ipv6 ? "IPv6" : "IPv4") rule priority \(priority)\(prefix.map { " to \($0.network)" } ?? "")\(place)")
    }

    private func rule(add: Bool, priority: UInt32, ipv6: Bool, fwmark: UInt32, to prefix: IPPrefix?, table: UInt32) -> Result<Int32, Errno> {
        let family = ipv6 ? AF_INET6 : AF_INET
        guard let prefix = prefix?.masked else {
            return Syscall.rtnlRule(fd, add: add, family: family, priority: priority, fwmark: fwmark, table: table, nil, length: 0)
        }
        return withAddress(prefix.address) { _, bytes in
            Syscall.rtnlRule(fd, add: add, family: family, priority: priority, fwmark: fwmark, table: table, bytes, length: Int32(prefix.length))
        }
    }

    private func withAddress<R>(_ address: IPAddress, _ body: (Int32, UnsafePointer<UInt8>) -> R) -> R {
        var bytes: (UInt64, UInt64) = (0, 0)
        return withUnsafeMutableBytes(of: &bytes) { raw in
            let n = address.write(to: raw.baseAddress!)
            return body(n == 4 ? AF_INET : AF_INET6, raw.bindMemory(to: UInt8.self).baseAddress!)
        }
    }
}

/// Network namespaces by name under /var/run/netns, made and removed as `ip netns add` and
/// `ip netns del` do (CLinux: a shared mount point, a bind mount of a new namespace made by a
/// short-lived thread), without starting a process.
public enum NetworkNamespace {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Creates the namespace `name`; fails if it exists.
    public static func add(_ name: String) throws {
        if case .failure(let e) = Syscall.netnsAdd(name) { throw Failure(description: "cannot create network namespace \(name): \(e)") }
    }

    /// Removes the name (the namespace itself lives on while a process or socket holds it).
    public static func delete(_ name: String) throws {
        if case .failure(let e) = Syscall.netnsDelete(name) { throw Failure(description: "cannot remove network namespace \(name): \(e)") }
    }
}
