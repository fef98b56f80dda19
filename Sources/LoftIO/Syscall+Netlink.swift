import CLinux
import LoftCore

// rtnetlink requests (CLinux; each one request answered by the kernel's ACK) and named network
// namespaces: `RouteNetlink` and `NetworkNamespace` make their calls here. `address`,
// `destination` and `gateway` are 4 (AF_INET) or 16 (AF_INET6) bytes in network order.
extension Syscall {
    /// A NETLINK_ROUTE socket inside the namespace at `netnsPath` (nil: this thread's own).
    public static func rtnlOpen(_ netnsPath: String?) -> Result<Int32, Errno> { shim(clinux_rtnl_open(netnsPath)) }

    /// The index of interface `name` in the socket's namespace.
    public static func rtnlInterfaceIndex(_ fd: Int32, _ name: String) -> Result<Int32, Errno> {
        shim(clinux_rtnl_ifindex(fd, name))
    }

    /// The MTU when `mtu` > 0; up (1), down (0) or left alone (< 0).
    public static func rtnlSetLink(_ fd: Int32, index: Int32, mtu: Int32, up: Int32) -> Result<Int32, Errno> {
        shim(clinux_rtnl_set_link(fd, index, mtu, up))
    }

    public static func rtnlPromoteSecondaries(_ fd: Int32, index: Int32, on: Bool) -> Result<Int32, Errno> {
        shim(clinux_rtnl_promote_secondaries(fd, index, on ? 1 : 0))
    }

    /// `replace`: `ip addr replace`; otherwise `ip addr del`.
    public static func rtnlAddress(_ fd: Int32, replace: Bool, index: Int32, family: Int32, _ address: UnsafePointer<UInt8>,
                                   prefixLength: Int32) -> Result<Int32, Errno> {
        shim(clinux_rtnl_addr(fd, replace ? 1 : 0, index, family, address, prefixLength))
    }

    /// The default route of `family` via `gateway` (onlink), or through the device alone (nil).
    public static func rtnlDefaultRoute(_ fd: Int32, index: Int32, family: Int32, gateway: UnsafePointer<UInt8>?) -> Result<Int32, Errno> {
        shim(clinux_rtnl_default_route(fd, index, family, gateway))
    }

    /// `add`: `ip route replace DST/LEN dev D table T`; otherwise its deletion.
    public static func rtnlTableRoute(_ fd: Int32, add: Bool, family: Int32, table: UInt32, _ destination: UnsafePointer<UInt8>,
                                      length: Int32, index: Int32) -> Result<Int32, Errno> {
        shim(clinux_rtnl_table_route(fd, add ? 1 : 0, family, table, destination, length, index))
    }

    /// `ip route flush table T` for `family`: how many routes went.
    public static func rtnlFlushTable(_ fd: Int32, family: Int32, table: UInt32) -> Result<Int32, Errno> {
        shim(clinux_rtnl_flush_table(fd, family, table))
    }

    /// `ip rule add|del priority P [fwmark M] [to DST/LEN] lookup T` (fwmark 0, destination nil
    /// and table 0 leave those out).
    public static func rtnlRule(_ fd: Int32, add: Bool, family: Int32, priority: UInt32, fwmark: UInt32, table: UInt32,
                                _ destination: UnsafePointer<UInt8>?, length: Int32) -> Result<Int32, Errno> {
        shim(clinux_rtnl_rule(fd, add ? 1 : 0, family, priority, fwmark, table, destination, length))
    }

    /// `ip netns add NAME` (EEXIST when the name is taken).
    public static func netnsAdd(_ name: String) -> Result<Int32, Errno> { shim(clinux_netns_add(name)) }

    /// `ip netns del NAME`.
    public static func netnsDelete(_ name: String) -> Result<Int32, Errno> { shim(clinux_netns_del(name)) }
}
