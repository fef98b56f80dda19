/// IP protocol numbers loft looks at.
public enum IPProtocol {
    public static let icmp: UInt8 = 1
    public static let tcp: UInt8 = 6
    public static let udp: UInt8 = 17
    public static let icmpv6: UInt8 = 58
}

/// Why a packet was dropped before it reached the stack. Every drop is counted by reason.
public enum PacketDropReason: Int, Error, CaseIterable, Sendable, CustomStringConvertible {
    case truncated          // shorter than its headers
    case badVersion         // high nibble neither 4 nor 6
    case badLength          // a length field disagrees with the packet
    case badChecksum        // IPv4 header checksum
    case tooLarge           // larger than the input's MTU
    case loopback           // 127/8 or ::1 on either side (it would abort lwIP)
    case martian            // unspecified, multicast or broadcast source, link-local v6, ...
    case sameAddress        // source == destination (lwIP would treat it as loopback)
    case multicast          // multicast / broadcast destination: nothing to terminate
    case unsupported        // a protocol the stack does not terminate (and ICMPv6 ND/MLD)
    case icmpPolicy         // echo request while `icmp: drop`
    case rule               // a drop rule
    case flowCap            // the flow table is full and nothing idle can be evicted
    case stackMemory        // lwIP could not allocate a buffer
    case tcpBadAck          // acknowledges what was never sent, or is older than any window (RFC 5961)
    case tcpOutOfWindow     // starts beyond the receive window (RFC 793)
    case tcpReorderCap      // out-of-order data beyond what one connection may hold
    case offloadHeader      // a TUN offload header the stack cannot honour (see VirtioNetHeader)
    case linkDown           // a packet-mode outbound (sstp) did not take it: its link is down or full

    public var description: String {
        switch self {
        case .truncated: return "truncated"
        case .badVersion: return "bad-version"
        case .badLength: return "bad-length"
        case .badChecksum: return "bad-checksum"
        case .tooLarge: return "too-large"
        case .loopback: return "loopback"
        case .martian: return "martian"
        case .sameAddress: return "same-address"
        case .multicast: return "multicast"
        case .unsupported: return "unsupported"
        case .icmpPolicy: return "icmp-policy"
        case .rule: return "rule"
        case .flowCap: return "flow-cap"
        case .stackMemory: return "stack-memory"
        case .tcpBadAck: return "tcp-bad-ack"
        case .tcpOutOfWindow: return "tcp-out-of-window"
        case .tcpReorderCap: return "tcp-reorder-cap"
        case .offloadHeader: return "offload-header"
        case .linkDown: return "link-down"
        }
    }
}

/// What loft needs to know about a packet before handing it to lwIP: a view computed from the
/// headers without copying or allocating.
public struct PacketSummary: Sendable {
    public var version: UInt8
    public var proto: UInt8            // transport protocol (after IPv6 extension headers)
    public var source: IPAddress
    public var destination: IPAddress
    public var transportOffset: Int    // where the TCP/UDP/ICMP header starts
    public var isLaterFragment: Bool   // a fragment other than the first: no transport header
    public var sourcePort: UInt16 = 0
    public var destinationPort: UInt16 = 0
    public var tcpFlags: UInt8 = 0
    public var icmpType: UInt8 = 0

    public static let tcpFIN: UInt8 = 0x01, tcpSYN: UInt8 = 0x02, tcpRST: UInt8 = 0x04, tcpACK: UInt8 = 0x10

    /// The sequence number of the TCP segment `packet` (the packet this summary describes).
    public func tcpSequence(_ packet: UnsafeRawBufferPointer) -> UInt32 {
        let t = transportOffset
        return UInt32(packet[t + 4]) << 24 | UInt32(packet[t + 5]) << 16 | UInt32(packet[t + 6]) << 8 | UInt32(packet[t + 7])
    }

    /// A SYN that opens a connection (no ACK).
    public var isTCPOpen: Bool {
        proto == IPProtocol.tcp && !isLaterFragment && tcpFlags & (Self.tcpSYN | Self.tcpACK | Self.tcpRST) == Self.tcpSYN
    }

    /// An IPv6 link-local destination (fe80::/10): only a packet link can carry it.
    public var isLinkLocal: Bool {
        if case .v6(let hi, _) = destination { return hi >> 54 == 0x3FA }
        return false
    }

    /// An ICMP or ICMPv6 echo request.
    public var isEchoRequest: Bool {
        (proto == IPProtocol.icmp && icmpType == 8) || (proto == IPProtocol.icmpv6 && icmpType == 128)
    }

    /// Parses and checks the headers. `maxLength` is the input's MTU. `linkLocal`: an IPv6
    /// packet from a link-local address to another is not martian (the packet-mode input, where
    /// a packet link such as sstp's IPV6CP may carry it; lwIP must still never get one).
    public static func parse(_ p: UnsafeRawBufferPointer, maxLength: Int, linkLocal: Bool = false) -> Result<PacketSummary, PacketDropReason> {
        guard p.count >= 1 else { return .failure(.truncated) }
        if p.count > maxLength { return .failure(.tooLarge) }
        let version = p[0] >> 4
        var s: PacketSummary
        switch version {
        case 4:
            guard p.count >= 20 else { return .failure(.truncated) }
            let ihl = Int(p[0] & 0x0F) * 4
            let total = Int(p[2]) << 8 | Int(p[3])
            guard ihl >= 20, total >= ihl, total == p.count else { return .failure(.badLength) }
            guard InternetChecksum.of(UnsafeRawBufferPointer(rebasing: p[0..<ihl])) == 0 else { return .failure(.badChecksum) }
            let fragField = Int(p[6]) << 8 | Int(p[7])
            let offset = fragField & 0x1FFF
            s = PacketSummary(version: 4, proto: p[9],
                              source: IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: p[12..<16])),
                              destination: IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: p[16..<20])),
                              transportOffset: ihl, isLaterFragment: offset != 0)
        case 6:
            guard p.count >= 40 else { return .failure(.truncated) }
            let payload = Int(p[4]) << 8 | Int(p[5])
            guard payload + 40 == p.count else { return .failure(.badLength) }
            var next = p[6]
            var off = 40
            var later = false
            // Walk the extension headers lwIP understands to find the transport header.
            while true {
                switch next {
                case 0, 43, 60:
                    guard off + 8 <= p.count else { return .failure(.truncated) }
                    let len = (Int(p[off + 1]) + 1) * 8
                    next = p[off]
                    off += len
                    guard off <= p.count else { return .failure(.badLength) }
                    continue
                case 44:
                    guard off + 8 <= p.count else { return .failure(.truncated) }
                    let fragOffset = (Int(p[off + 2]) << 8 | Int(p[off + 3])) >> 3
                    later = later || fragOffset != 0
                    next = p[off]
                    off += 8
                    continue
                default:
                    break
                }
                break
            }
            s = PacketSummary(version: 6, proto: next,
                              source: IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: p[8..<24])),
                              destination: IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: p[24..<40])),
                              transportOffset: off, isLaterFragment: later)
        default:
            return .failure(.badVersion)
        }
        if let reason = addressProblem(source: s.source, destination: s.destination, linkLocal: linkLocal) { return .failure(reason) }
        if !s.isLaterFragment {
            let t = s.transportOffset
            switch s.proto {
            case IPProtocol.tcp:
                guard p.count >= t + 20 else { return .failure(.truncated) }
                let dataOffset = Int(p[t + 12] >> 4) * 4
                guard dataOffset >= 20, t + dataOffset <= p.count else { return .failure(.badLength) }
                s.sourcePort = UInt16(p[t]) << 8 | UInt16(p[t + 1])
                s.destinationPort = UInt16(p[t + 2]) << 8 | UInt16(p[t + 3])
                s.tcpFlags = p[t + 13]
            case IPProtocol.udp:
                guard p.count >= t + 8 else { return .failure(.truncated) }
                s.sourcePort = UInt16(p[t]) << 8 | UInt16(p[t + 1])
                s.destinationPort = UInt16(p[t + 2]) << 8 | UInt16(p[t + 3])
                let udpLen = Int(p[t + 4]) << 8 | Int(p[t + 5])
                // A first fragment carries only part of the datagram; otherwise it must match.
                let fragmented = version == 4 ? (p[6] & 0x20) != 0 : t > 40 && hasFragmentHeader(p)
                if !fragmented && udpLen != p.count - t { return .failure(.badLength) }
                if udpLen < 8 { return .failure(.badLength) }
            case IPProtocol.icmp:
                guard version == 4, p.count >= t + 8 else { return .failure(version == 4 ? .truncated : .unsupported) }
                s.icmpType = p[t]
            case IPProtocol.icmpv6:
                guard version == 6, p.count >= t + 8 else { return .failure(version == 6 ? .truncated : .unsupported) }
                s.icmpType = p[t]
                // Neighbour discovery, router messages and MLD have no meaning on a TUN.
                if s.icmpType >= 130 && s.icmpType <= 143 { return .failure(.unsupported) }
            default:
                return .failure(.unsupported)
            }
        }
        return .success(s)
    }

    static func hasFragmentHeader(_ p: UnsafeRawBufferPointer) -> Bool {
        var next = p[6]
        var off = 40
        while off + 8 <= p.count {
            switch next {
            case 44: return true
            case 0, 43, 60:
                next = p[off]
                off += (Int(p[off + 1]) + 1) * 8
            default: return false
            }
        }
        return false
    }

    /// Addresses lwIP must never see (loopback aborts it) or that cannot be served.
    public static func addressProblem(source: IPAddress, destination: IPAddress, linkLocal: Bool = false) -> PacketDropReason? {
        if source.isLoopback || destination.isLoopback { return .loopback }
        if source == destination { return .sameAddress }
        if destination.isMulticast { return .multicast }
        switch (source, destination) {
        case (.v4(let s), .v4(let d)):
            if d == 0xFFFF_FFFF { return .multicast }
            if s == 0xFFFF_FFFF || s >> 24 == 0 || s >> 28 == 0xE || d >> 24 == 0 { return .martian }
        case (.v6(let sh, _), .v6(let dh, _)):
            if source.isUnspecified || destination.isUnspecified || sh >> 56 == 0xFF { return .martian }
            // Link-local: scoped to the namespace's own link, nothing to dial from the host.
            if sh >> 54 == 0x3FA && dh >> 54 == 0x3FA && !linkLocal { return .martian }
            if dh >> 54 == 0x3FA && sh >> 54 != 0x3FA { return .martian }
            // IPv4-mapped addresses on the wire are invalid (RFC 4291 2.5.5.2).
            if dh == 0 { return .martian }
        default:
            return .martian
        }
        return nil
    }
}

extension PacketSummary {
    /// The identification of the datagram a fragment belongs to (IPv4's 16-bit field, IPv6's
    /// fragment header's 32 bits); nil when the packet is not a fragment. Fragments of one
    /// datagram share it with their source, destination and protocol (RFC 791, RFC 8200 4.5).
    public func fragmentID(_ p: UnsafeRawBufferPointer) -> UInt32? {
        if version == 4 {
            guard p.count >= 20, isFragmented(p) else { return nil }
            return UInt32(p[4]) << 8 | UInt32(p[5])
        }
        guard p.count >= 48 else { return nil }
        var next = p[6]
        var off = 40
        while off + 8 <= p.count {
            switch next {
            case 44: return UInt32(p[off + 4]) << 24 | UInt32(p[off + 5]) << 16 | UInt32(p[off + 6]) << 8 | UInt32(p[off + 7])
            case 0, 43, 60:
                next = p[off]
                off += (Int(p[off + 1]) + 1) * 8
            default: return nil
            }
        }
        return nil
    }

    /// Whether the packet is (part of) a fragmented datagram.
    public func isFragmented(_ p: UnsafeRawBufferPointer) -> Bool {
        if isLaterFragment { return true }
        if version == 4 { return p[6] & 0x20 != 0 }
        return transportOffset > 40 && PacketSummary.hasFragmentHeader(p)
    }

    /// Verifies the TCP, UDP or ICMP checksum of an unfragmented packet (fragments are checked
    /// by the stack after reassembly). For inputs whose sender may be anyone (the bridge), so
    /// that a bad checksum is counted rather than silently discarded inside lwIP.
    public func transportChecksumIsValid(_ p: UnsafeRawBufferPointer) -> Bool {
        if isFragmented(p) { return true }
        let segment = UnsafeRawBufferPointer(rebasing: p[transportOffset...])
        switch proto {
        case IPProtocol.tcp:
            return InternetChecksum.transport(source: source, destination: destination, proto: proto, segment: segment) == 0
        case IPProtocol.udp:
            // IPv4 UDP may omit its checksum (0); IPv6 may not.
            if version == 4 && segment[6] == 0 && segment[7] == 0 { return true }
            return InternetChecksum.transport(source: source, destination: destination, proto: proto, segment: segment) == 0
        case IPProtocol.icmp:
            return InternetChecksum.of(segment) == 0
        case IPProtocol.icmpv6:
            return InternetChecksum.transport(source: source, destination: destination, proto: proto, segment: segment) == 0
        default:
            return true
        }
    }
}
