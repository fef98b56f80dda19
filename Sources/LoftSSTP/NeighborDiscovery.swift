import LoftCore

/// IPv6 Neighbor Discovery (RFC 4861) as far as loft's end of a PPP link needs it: answering a
/// Neighbor Solicitation for loft's own link-local address with a Neighbor Advertisement.
///
/// Why loft answers itself: a server that bridges the PPP link onto an Ethernet segment
/// (SoftEther's virtual hub) gives hosts there a neighbour cache entry for loft's address that
/// they verify with Neighbor Solicitations (unicast probes, then the solicited-node multicast
/// address) — without an answer they stop sending to loft. The TUN's kernel cannot answer them
/// (ND has no meaning on a TUN, and the TUN input drops it), so the link answers for its own
/// address. PPP has no link-layer address: the advertisement carries no Target Link-Layer
/// Address option (RFC 4861 4.4, RFC 5072 section 5).
public enum NeighborDiscovery {
    public static let solicitationType: UInt8 = 135
    public static let advertisementType: UInt8 = 136

    /// ff02::1:ffXX:XXXX for `address` (RFC 4291 2.7.1).
    public static func solicitedNode(_ address: IPAddress) -> IPAddress {
        guard case .v6(_, let lo) = address else { return address }
        return .v6(0xFF02_0000_0000_0000, 0x0000_0001_FF00_0000 | (lo & 0x00FF_FFFF))
    }

    /// ff02::1, where an answer to a solicitation from the unspecified address goes.
    public static let allNodes = IPAddress.v6(0xFF02_0000_0000_0000, 1)

    /// A Neighbor Solicitation that passes RFC 4861 7.1.1's checks (hop limit 255, code 0,
    /// checksum, length, options of non-zero length, a unicast target; from the unspecified
    /// address only to the solicited-node address and without a Source Link-Layer Address
    /// option), sent to `address` or its solicited-node address, asking for `address`.
    public struct Solicitation: Equatable, Sendable {
        public var source: IPAddress
        public var destination: IPAddress
        public var target: IPAddress
    }

    /// The solicitation `packet` (one IPv6 packet, no extension headers) is, if it is one for
    /// `address`; nil for anything else (other packets, other targets, invalid ones).
    public static func solicitation(_ p: UnsafeRawBufferPointer, for address: IPAddress) -> Solicitation? {
        guard p.count >= 64, p[0] >> 4 == 6, p[6] == IPProtocol.icmpv6, p[7] == 255 else { return nil }
        let payload = Int(p[4]) << 8 | Int(p[5])
        guard payload + 40 == p.count else { return nil }
        guard p[40] == solicitationType, p[41] == 0 else { return nil }
        let source = IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: p[8..<24]))
        let destination = IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: p[24..<40]))
        let target = IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: p[48..<64]))
        guard target == address, destination == address || destination == solicitedNode(address) else { return nil }
        guard !source.isMulticast else { return nil }
        let icmp = UnsafeRawBufferPointer(rebasing: p[40...])
        guard InternetChecksum.transport(source: source, destination: destination, proto: IPProtocol.icmpv6, segment: icmp) == 0 else { return nil }
        var at = 64
        var sourceLinkLayer = false
        while at < p.count {
            guard at + 2 <= p.count, p[at + 1] != 0 else { return nil }
            let len = Int(p[at + 1]) * 8
            guard at + len <= p.count else { return nil }
            if p[at] == 1 { sourceLinkLayer = true }
            at += len
        }
        if source.isUnspecified && (destination != solicitedNode(address) || sourceLinkLayer) { return nil }
        return Solicitation(source: source, destination: destination, target: target)
    }

    /// The Neighbor Advertisement answering `s` (RFC 4861 7.2.4): from the target, to the
    /// solicitation's source with Solicited and Override set, or to all nodes with only Override
    /// when the source was unspecified; hop limit 255, no options.
    public static func advertisement(answering s: Solicitation) -> [UInt8] {
        let toAll = s.source.isUnspecified
        let destination = toAll ? allNodes : s.source
        var out = [UInt8](repeating: 0, count: 64)
        out.withUnsafeMutableBytes { b in
            b[0] = 0x60
            b[5] = 24
            b[6] = IPProtocol.icmpv6
            b[7] = 255
            s.target.write(to: b.baseAddress! + 8)
            destination.write(to: b.baseAddress! + 24)
            b[40] = advertisementType
            b[44] = toAll ? 0x20 : 0x60   // Router clear; Solicited unless to all nodes; Override
            s.target.write(to: b.baseAddress! + 48)
            let sum = InternetChecksum.transport(source: s.target, destination: destination, proto: IPProtocol.icmpv6,
                                                 segment: UnsafeRawBufferPointer(rebasing: b[40...]))
            b[42] = UInt8(sum >> 8)
            b[43] = UInt8(sum & 0xFF)
        }
        return out
    }

    /// The advertisement answering `packet` when it is a valid solicitation for `address`.
    public static func answer(_ packet: UnsafeRawBufferPointer, for address: IPAddress) -> [UInt8]? {
        solicitation(packet, for: address).map(advertisement(answering:))
    }
}
