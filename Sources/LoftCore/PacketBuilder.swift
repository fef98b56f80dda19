/// Builds the few packets loft answers with itself, outside lwIP: the reply to a SYN whose
/// destination refused or could not be reached, before lwIP ever saw the connection.
public enum PacketBuilder {
    public enum Unreachable: Sendable {
        case network, host, port, prohibited
    }

    /// A RST|ACK answering the TCP SYN `syn` (a whole IP packet), so the app's connect() fails
    /// with ECONNREFUSED at once.
    public static func resetForSYN(_ syn: UnsafeRawBufferPointer, summary s: PacketSummary) -> [UInt8] {
        let seq = s.tcpSequence(syn)
        var tcp = [UInt8](repeating: 0, count: 20)
        put16(&tcp, 0, s.destinationPort)
        put16(&tcp, 2, s.sourcePort)
        // seq 0; ack = SYN's seq + 1 (the SYN occupies one sequence number)
        put32(&tcp, 8, seq &+ 1)
        tcp[12] = 5 << 4
        tcp[13] = PacketSummary.tcpRST | PacketSummary.tcpACK
        let sum = tcp.withUnsafeBytes {
            InternetChecksum.transport(source: s.destination, destination: s.source, proto: IPProtocol.tcp, segment: $0)
        }
        put16(&tcp, 16, sum)
        return ipPacket(source: s.destination, destination: s.source, proto: IPProtocol.tcp, payload: tcp)
    }

    /// An ICMP / ICMPv6 destination-unreachable quoting the start of `original`.
    public static func unreachable(_ original: UnsafeRawBufferPointer, summary s: PacketSummary,
                                   kind: Unreachable) -> [UInt8] {
        let v4 = s.version == 4
        // Quote as much as fits in the minimum MTU (576 for v4, 1280 for v6).
        let quoteLimit = v4 ? 576 - 28 : 1280 - 48
        let quote = min(original.count, quoteLimit)
        var icmp = [UInt8](repeating: 0, count: 8 + quote)
        if v4 {
            icmp[0] = 3
            switch kind {
            case .network: icmp[1] = 0
            case .host: icmp[1] = 1
            case .port: icmp[1] = 3
            case .prohibited: icmp[1] = 13
            }
        } else {
            icmp[0] = 1
            switch kind {
            case .network: icmp[1] = 0
            case .prohibited: icmp[1] = 1
            case .host: icmp[1] = 3
            case .port: icmp[1] = 4
            }
        }
        for i in 0..<quote { icmp[8 + i] = original[i] }
        let sum: UInt16 = icmp.withUnsafeBytes {
            v4 ? InternetChecksum.of($0)
               : InternetChecksum.transport(source: s.destination, destination: s.source, proto: IPProtocol.icmpv6, segment: $0)
        }
        put16(&icmp, 2, sum)
        return ipPacket(source: s.destination, destination: s.source,
                        proto: v4 ? IPProtocol.icmp : IPProtocol.icmpv6, payload: icmp)
    }

    /// ICMP "fragmentation needed and DF set" (type 3, code 4, RFC 1191) for an IPv4 packet
    /// larger than the link's `mtu`, quoting its header and first 8 bytes of payload: the app's
    /// kernel learns the path MTU and sends smaller packets.
    public static func fragmentationNeeded(_ original: UnsafeRawBufferPointer, summary s: PacketSummary, mtu: Int) -> [UInt8] {
        let quote = min(original.count, s.transportOffset + 8)
        var icmp = [UInt8](repeating: 0, count: 8 + quote)
        icmp[0] = 3
        icmp[1] = 4
        put16(&icmp, 6, UInt16(clamping: mtu))
        for i in 0..<quote { icmp[8 + i] = original[i] }
        let sum = icmp.withUnsafeBytes { InternetChecksum.of($0) }
        put16(&icmp, 2, sum)
        return ipPacket(source: s.destination, destination: s.source, proto: IPProtocol.icmp, payload: icmp)
    }

    /// Wraps a transport payload in a minimal IPv4 or IPv6 header (TTL/hop limit 64).
    public static func ipPacket(source: IPAddress, destination: IPAddress, proto: UInt8, payload: [UInt8]) -> [UInt8] {
        if source.isIPv4 {
            var h = [UInt8](repeating: 0, count: 20)
            h[0] = 0x45
            put16(&h, 2, UInt16(20 + payload.count))
            h[6] = 0x40  // don't fragment
            h[8] = 64
            h[9] = proto
            h.withUnsafeMutableBytes { b in
                source.write(to: b.baseAddress! + 12)
                destination.write(to: b.baseAddress! + 16)
            }
            let sum = h.withUnsafeBytes { InternetChecksum.of($0) }
            put16(&h, 10, sum)
            return h + payload
        } else {
            var h = [UInt8](repeating: 0, count: 40)
            h[0] = 0x60
            put16(&h, 4, UInt16(payload.count))
            h[6] = proto
            h[7] = 64
            h.withUnsafeMutableBytes { b in
                source.write(to: b.baseAddress! + 8)
                destination.write(to: b.baseAddress! + 24)
            }
            return h + payload
        }
    }

    @inline(__always) static func put16(_ b: inout [UInt8], _ i: Int, _ v: UInt16) {
        b[i] = UInt8(v >> 8); b[i + 1] = UInt8(v & 0xFF)
    }
    @inline(__always) static func put32(_ b: inout [UInt8], _ i: Int, _ v: UInt32) {
        b[i] = UInt8(v >> 24); b[i + 1] = UInt8(v >> 16 & 0xFF); b[i + 2] = UInt8(v >> 8 & 0xFF); b[i + 3] = UInt8(v & 0xFF)
    }
}
