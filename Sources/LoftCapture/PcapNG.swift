/// The pcapng blocks `loft capture` writes (the pcapng format, draft-ietf-opsawg-pcapng):
/// one Section Header, an Interface Description per input, an Enhanced Packet per packet (its
/// direction in the flags word, a dropped packet's reason as its comment) and, at the end, an
/// Interface Statistics per input with the packets the capture lost. Little-endian throughout
/// (the section header's byte-order magic says so); every block and option padded to 4 bytes.
public enum PcapNG {
    /// LINKTYPE_RAW: each packet begins with its IPv4 or IPv6 header.
    public static let linkTypeRaw: UInt16 = 101

    /// Which way a packet went, from the input's point of view: inbound was read from it
    /// (the app sent it), outbound written to it (the app receives it).
    public enum Direction: UInt32, Sendable { case inbound = 1, outbound = 2 }

    static let sectionHeaderType: UInt32 = 0x0A0D_0D0A
    static let interfaceDescriptionType: UInt32 = 1
    static let interfaceStatisticsType: UInt32 = 5
    static let enhancedPacketType: UInt32 = 6
    static let byteOrderMagic: UInt32 = 0x1A2B_3C4D

    /// The bytes of a block: its type, total length, `body` (padded) and options, length again.
    static func block(_ type: UInt32, _ body: [UInt8], options: [(UInt16, [UInt8])]) -> [UInt8] {
        var b = body
        pad(&b)
        if !options.isEmpty {
            for (code, value) in options { option(&b, code, value) }
            option(&b, 0, [])
        }
        let total = UInt32(12 + b.count)
        var out: [UInt8] = []
        out.reserveCapacity(Int(total))
        le32(&out, type)
        le32(&out, total)
        out += b
        le32(&out, total)
        return out
    }

    /// The Section Header: version 1.0, section length unknown, and who wrote it.
    public static func sectionHeader(application: String, os: String? = nil) -> [UInt8] {
        var body: [UInt8] = []
        le32(&body, byteOrderMagic)
        le16(&body, 1)
        le16(&body, 0)
        body += [UInt8](repeating: 0xFF, count: 8)
        var options: [(UInt16, [UInt8])] = []
        if let os { options.append((3, Array(os.utf8))) }
        options.append((4, Array(application.utf8)))
        return block(sectionHeaderType, body, options: options)
    }

    /// An Interface Description for raw IP packets cut at `snaplen`, with its name (the TUN
    /// device's, "bridge") and a description; timestamps in microseconds (the default).
    public static func interfaceDescription(name: String, description: String, snaplen: UInt32) -> [UInt8] {
        var body: [UInt8] = []
        le16(&body, linkTypeRaw)
        le16(&body, 0)
        le32(&body, snaplen)
        return block(interfaceDescriptionType, body, options: [(2, Array(name.utf8)), (3, Array(description.utf8))])
    }

    /// An Interface Statistics block: when the capture began and ended (µs since the epoch),
    /// packets that passed the capture's filters (`accepted`) and those it lost because its
    /// reader was too slow (`lost`, isb_osdrop: dropped by loft's capture buffer, never by the
    /// data path).
    public static func interfaceStatistics(interface: UInt32, start: UInt64, end: UInt64,
                                           accepted: UInt64, lost: UInt64) -> [UInt8] {
        var body: [UInt8] = []
        le32(&body, interface)
        le32(&body, UInt32(truncatingIfNeeded: end >> 32))
        le32(&body, UInt32(truncatingIfNeeded: end))
        return block(interfaceStatisticsType, body, options: [
            (2, split64(start)), (3, split64(end)), (6, le64(accepted)), (7, le64(lost)),
        ])
    }

    /// The bytes an Enhanced Packet block of `captured` packet bytes takes, with a comment of
    /// `commentBytes` (0: none).
    public static func enhancedPacketLength(captured: Int, commentBytes: Int) -> Int {
        let options = 8 + (commentBytes > 0 ? 4 + padded(commentBytes) : 0) + 4
        return 28 + padded(captured) + options + 4
    }

    /// Writes an Enhanced Packet block (exactly `enhancedPacketLength` bytes) through `emit`,
    /// in pieces (header, the packet's bytes as they are, padding and options): the packet is
    /// copied once, into wherever `emit` puts it.
    public static func enhancedPacket(interface: UInt32, micros: UInt64, packet: UnsafeRawBufferPointer,
                                      originalLength: Int, direction: Direction, comment: [UInt8]?,
                                      _ emit: (UnsafeRawBufferPointer) -> Void) {
        let total = enhancedPacketLength(captured: packet.count, commentBytes: comment?.count ?? 0)
        withUnsafeTemporaryAllocation(byteCount: 32, alignment: 4) { h in
            store32(h, 0, enhancedPacketType)
            store32(h, 4, UInt32(total))
            store32(h, 8, interface)
            store32(h, 12, UInt32(truncatingIfNeeded: micros >> 32))
            store32(h, 16, UInt32(truncatingIfNeeded: micros))
            store32(h, 20, UInt32(packet.count))
            store32(h, 24, UInt32(originalLength))
            emit(UnsafeRawBufferPointer(rebasing: h[0..<28]))
            emit(packet)
            let pad = padded(packet.count) - packet.count
            // Padding, then epb_flags (code 2: direction in bits 0-1).
            for i in 0..<4 { h[i] = 0 }
            emit(UnsafeRawBufferPointer(rebasing: h[0..<pad]))
            store16(h, 0, 2)
            store16(h, 2, 4)
            store32(h, 4, direction.rawValue)
            emit(UnsafeRawBufferPointer(rebasing: h[0..<8]))
            if let comment, !comment.isEmpty {
                store16(h, 0, 1)
                store16(h, 2, UInt16(comment.count))
                emit(UnsafeRawBufferPointer(rebasing: h[0..<4]))
                comment.withUnsafeBytes { emit($0) }
                for i in 0..<4 { h[i] = 0 }
                emit(UnsafeRawBufferPointer(rebasing: h[0..<(padded(comment.count) - comment.count)]))
            }
            // opt_endofopt, then the total length again.
            store32(h, 0, 0)
            store32(h, 4, UInt32(total))
            emit(UnsafeRawBufferPointer(rebasing: h[0..<8]))
        }
    }

    // MARK: bytes

    @inline(__always) static func padded(_ n: Int) -> Int { (n + 3) & ~3 }

    static func pad(_ b: inout [UInt8]) {
        while b.count % 4 != 0 { b.append(0) }
    }

    static func option(_ b: inout [UInt8], _ code: UInt16, _ value: [UInt8]) {
        le16(&b, code)
        le16(&b, UInt16(value.count))
        b += value
        pad(&b)
    }

    static func le16(_ b: inout [UInt8], _ v: UInt16) { b += [UInt8(v & 0xFF), UInt8(v >> 8)] }
    static func le32(_ b: inout [UInt8], _ v: UInt32) { for i in 0..<4 { b.append(UInt8(truncatingIfNeeded: v >> (8 * i))) } }
    static func le64(_ v: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }
    /// A timestamp option: the high 32 bits, then the low, each little-endian.
    static func split64(_ v: UInt64) -> [UInt8] {
        var b: [UInt8] = []
        le32(&b, UInt32(truncatingIfNeeded: v >> 32))
        le32(&b, UInt32(truncatingIfNeeded: v))
        return b
    }

    @inline(__always) static func store16(_ p: UnsafeMutableRawBufferPointer, _ at: Int, _ v: UInt16) {
        p.storeBytes(of: v.littleEndian, toByteOffset: at, as: UInt16.self)
    }

    @inline(__always) static func store32(_ p: UnsafeMutableRawBufferPointer, _ at: Int, _ v: UInt32) {
        p.storeBytes(of: v.littleEndian, toByteOffset: at, as: UInt32.self)
    }
}
