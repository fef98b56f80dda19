/// The header before every packet on a TUN opened with IFF_VNET_HDR (struct virtio_net_hdr,
/// 10 bytes, little-endian): how the kernel's checksum and segmentation offloads describe a
/// packet. Read: a packet whose transport checksum is left partial (`needsChecksum`) and, with
/// TSO, a TCP segment of up to 64 KiB that the kernel did not cut into MTU-sized ones. Written:
/// all zeros for a plain packet, or a TCP segment larger than the MTU that the kernel cuts
/// into `gsoSize` pieces on its way to the app.
public struct VirtioNetHeader: Equatable, Sendable {
    public static let size = 10

    /// flags: the transport checksum is partial: the field at `checksumStart + checksumOffset`
    /// holds the pseudo-header's sum; the rest of the packet from `checksumStart` is not summed.
    public static let needsChecksum: UInt8 = 0x01
    /// flags: the kernel has verified the checksum.
    public static let dataValid: UInt8 = 0x02

    /// gso_type values (the 0x80 bit says the segment carries ECN's CWR).
    public static let gsoNone: UInt8 = 0, gsoTCPv4: UInt8 = 1, gsoUDP: UInt8 = 3, gsoTCPv6: UInt8 = 4,
                      gsoUDPL4: UInt8 = 5, gsoECN: UInt8 = 0x80

    public var flags: UInt8 = 0
    public var gsoType: UInt8 = 0
    /// Bytes of IP + transport header in a GSO packet.
    public var headerLength: UInt16 = 0
    /// The payload of each segment the kernel cuts a GSO packet into.
    public var gsoSize: UInt16 = 0
    public var checksumStart: UInt16 = 0
    public var checksumOffset: UInt16 = 0

    public init() {}

    public init(flags: UInt8, gsoType: UInt8, headerLength: UInt16, gsoSize: UInt16,
                checksumStart: UInt16, checksumOffset: UInt16) {
        self.flags = flags
        self.gsoType = gsoType
        self.headerLength = headerLength
        self.gsoSize = gsoSize
        self.checksumStart = checksumStart
        self.checksumOffset = checksumOffset
    }

    /// Reads the first `size` bytes of `b` (nil when shorter).
    public init?(_ b: UnsafeRawBufferPointer) {
        guard b.count >= Self.size else { return nil }
        func u16(_ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }
        self.init(flags: b[0], gsoType: b[1], headerLength: u16(2), gsoSize: u16(4),
                  checksumStart: u16(6), checksumOffset: u16(8))
    }

    /// Writes the header into the first `size` bytes of `b`.
    public func write(to b: UnsafeMutableRawBufferPointer) {
        precondition(b.count >= Self.size)
        func put(_ v: UInt16, _ i: Int) { b[i] = UInt8(truncatingIfNeeded: v); b[i + 1] = UInt8(v >> 8) }
        b[0] = flags
        b[1] = gsoType
        put(headerLength, 2); put(gsoSize, 4); put(checksumStart, 6); put(checksumOffset, 8)
    }

    /// True when this header leaves the checksum of `packet`, a TCP segment with payload and
    /// not a SYN, partial at its TCP header's checksum field (and asks no UDP segmentation):
    /// the stack can then take it unsummed (`Netstack.input(partialChecksum:)`) instead of
    /// `complete` summing it.
    public func leavesTCPChecksumPartial(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard flags & Self.needsChecksum != 0, checksumOffset == 16, packet.count >= 40 else { return false }
        switch gsoType & ~Self.gsoECN {
        case Self.gsoNone, Self.gsoTCPv4, Self.gsoTCPv6: break
        default: return false
        }
        let t: Int
        switch packet[0] >> 4 {
        case 4:
            // Not a fragment (MF clear, offset zero).
            guard packet[9] == IPProtocol.tcp, packet[6] & 0x3F == 0, packet[7] == 0 else { return false }
            t = Int(packet[0] & 0x0F) * 4
        case 6:
            guard packet[6] == IPProtocol.tcp else { return false }
            t = 40
        default:
            return false
        }
        guard t >= 20, Int(checksumStart) == t, packet.count >= t + 20 else { return false }
        let tcpHeader = Int(packet[t + 12] >> 4) * 4
        return tcpHeader >= 20 && packet.count > t + tcpHeader && packet[t + 13] & 0x02 == 0
    }

    /// Makes a packet read with this header one the stack can take as it is: a partial
    /// checksum is completed in place; a TCP GSO segment stays whole (the stack takes segments
    /// of any length within its window). A header the stack cannot honour is refused:
    /// UDP segmentation (never asked for), or a checksum position outside the packet or at an
    /// odd offset.
    public func complete(_ packet: UnsafeMutableRawBufferPointer) -> PacketDropReason? {
        switch gsoType & ~Self.gsoECN {
        case Self.gsoNone, Self.gsoTCPv4, Self.gsoTCPv6: break
        default: return .offloadHeader
        }
        guard flags & Self.needsChecksum != 0 else { return nil }
        let start = Int(checksumStart)
        let field = start + Int(checksumOffset)
        // The field is a 16-bit word of the summed region (TCP 16, UDP 6): an odd offset is
        // no checksum any kernel writes.
        guard start < packet.count, field + 2 <= packet.count, checksumOffset & 1 == 0 else { return .offloadHeader }
        var sum = InternetChecksum()
        sum.add(UnsafeRawBufferPointer(rebasing: packet[start...]))
        // 0 and 0xFFFF are the same sum; UDP reserves 0 for "no checksum".
        let value = sum.value == 0 ? 0xFFFF : sum.value
        packet[field] = UInt8(value >> 8)
        packet[field + 1] = UInt8(truncatingIfNeeded: value)
        return nil
    }

    /// For a TCP segment larger than the TUN's MTU: the header that has the kernel cut it into
    /// `segmentSize`-byte pieces, and the value its checksum field must hold meanwhile (the
    /// pseudo-header's sum, which the kernel completes per piece). nil when `packet` is not an
    /// IPv4/IPv6 TCP segment with its TCP header in the first bytes, or carries no more than
    /// `segmentSize` payload bytes.
    public static func forLargeTCP(_ packet: UnsafeRawBufferPointer, segmentSize: Int) -> (header: VirtioNetHeader, checksumSeed: UInt16)? {
        guard segmentSize > 0 && segmentSize <= 0xFFFF else { return nil }
        return forTCP(packet, segmentSize: segmentSize)
    }

    /// For a TCP segment with payload whose checksum the kernel is to complete (lwIP did not
    /// sum its payload): `NEEDS_CSUM` without segmentation, and the checksum field's value
    /// meanwhile (as `forLargeTCP`). nil when `packet` is not an IPv4/IPv6 TCP segment with a
    /// payload.
    public static func forPartialTCP(_ packet: UnsafeRawBufferPointer) -> (header: VirtioNetHeader, checksumSeed: UInt16)? {
        forTCP(packet, segmentSize: 0)
    }

    private static func forTCP(_ packet: UnsafeRawBufferPointer, segmentSize: Int) -> (header: VirtioNetHeader, checksumSeed: UInt16)? {
        guard packet.count >= 40 else { return nil }
        let v4 = packet[0] >> 4 == 4
        guard v4 || packet[0] >> 4 == 6 else { return nil }
        let t = v4 ? Int(packet[0] & 0x0F) * 4 : 40
        guard (v4 ? packet[9] : packet[6]) == IPProtocol.tcp, t >= 20, packet.count >= t + 20 else { return nil }
        let tcpHeader = Int(packet[t + 12] >> 4) * 4
        guard tcpHeader >= 20, packet.count >= t + tcpHeader, packet.count - t - tcpHeader > max(segmentSize, 0)
        else { return nil }
        let pseudo = v4
            ? InternetChecksum.pseudoHeader(source: IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: packet[12..<16])),
                                            destination: IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: packet[16..<20])),
                                            proto: IPProtocol.tcp, length: packet.count - t)
            : InternetChecksum.pseudoHeader(source: IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: packet[8..<24])),
                                            destination: IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: packet[24..<40])),
                                            proto: IPProtocol.tcp, length: packet.count - t)
        let header = VirtioNetHeader(flags: needsChecksum, gsoType: segmentSize == 0 ? gsoNone : v4 ? gsoTCPv4 : gsoTCPv6,
                                     headerLength: UInt16(t + tcpHeader), gsoSize: UInt16(segmentSize),
                                     checksumStart: UInt16(t), checksumOffset: 16)
        return (header, ~pseudo.value)
    }
}
