/// The one check of an address a peer hands loft for its own use on a link (an SSTP server's
/// IPCP, a front's STATUS) before it goes on the TUN. A peer is trusted with the link, not with
/// the host: an address that would take over loopback, a multicast or broadcast group, the
/// peer's own end or an address the TUN already has breaks the namespace's other traffic.
/// pppd refuses the same (`bad_ip_adrs` in its auth.c: the loopback net, multicast, class E;
/// its IPCP never takes 0.0.0.0 or the peer's address as its own).
public enum HostAddress {
    /// Why `address` cannot be loft's own address on the link, nil when it can. `peer`: the
    /// other end's address (the server's IPCP address, the front's gateway); `taken`: addresses
    /// the TUN already has (its configured ones).
    public static func problem(_ address: IPAddress, peer: IPAddress? = nil, taken: [IPAddress] = []) -> String? {
        switch address {
        case .v4(let a):
            if a >> 24 == 0 { return "unspecified (0.0.0.0/8)" }
            if a >> 24 == 127 { return "loopback" }
            if a >> 28 == 0xE { return "multicast" }
            if a == 0xFFFF_FFFF { return "the limited broadcast address" }
            if a >> 28 == 0xF { return "reserved (240.0.0.0/4)" }
        case .v6(let hi, let lo):
            if address.isUnspecified { return "unspecified" }
            if address.isLoopback { return "loopback" }
            if address.isMulticast { return "multicast" }
            if hi == 0 && lo >> 32 == 0xFFFF { return "an IPv4-mapped address" }
        }
        if let peer, peer == address { return "the peer's own address" }
        if taken.contains(address) { return "an address the TUN already has" }
        return nil
    }
}
