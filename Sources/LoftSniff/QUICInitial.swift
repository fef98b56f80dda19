import CTLS

/// A QUIC client's Initial packets (RFC 9000 §17.2.2), opened with the keys every Initial is
/// protected with (RFC 9001 §5: derived from the packet's Destination Connection ID; QUIC v1,
/// and v2 of RFC 9369 with its own salt, labels and packet type), and the CRYPTO frames inside:
/// the TLS ClientHello, whose SNI names the host.
public enum QUICInitial {
    public static let version1: UInt32 = 0x0000_0001
    public static let version2: UInt32 = 0x6b33_43cf

    static let salt1: [UInt8] = [0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17,
                                 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a]
    static let salt2: [UInt8] = [0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93,
                                 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9]

    /// A client's Initial packet keys (AES-128-GCM, header protection AES-128).
    public struct Keys: Equatable {
        public var key = [UInt8](repeating: 0, count: 16)
        public var iv = [UInt8](repeating: 0, count: 12)
        public var hp = [UInt8](repeating: 0, count: 16)

        /// The client's keys for an Initial to `dcid` (nil: an unknown version, or OpenSSL failed).
        public init?(dcid: UnsafeRawBufferPointer, version: UInt32) {
            let v2 = version == QUICInitial.version2
            guard v2 || version == QUICInitial.version1 else { return nil }
            let salt = v2 ? QUICInitial.salt2 : QUICInitial.salt1
            var initial = [UInt8](repeating: 0, count: 32), client = [UInt8](repeating: 0, count: 32)
            guard salt.withUnsafeBytes({ s in
                ctls_hkdf_extract(s.baseAddress, s.count, dcid.baseAddress, dcid.count, &initial) }) == 0,
                  ctls_hkdf_expand_label(initial, "client in", &client, 32) == 0,
                  ctls_hkdf_expand_label(client, v2 ? "quicv2 key" : "quic key", &key, 16) == 0,
                  ctls_hkdf_expand_label(client, v2 ? "quicv2 iv" : "quic iv", &iv, 12) == 0,
                  ctls_hkdf_expand_label(client, v2 ? "quicv2 hp" : "quic hp", &hp, 16) == 0 else { return nil }
        }
    }

    /// One opened Initial: its version, Destination Connection ID and CRYPTO frames.
    public struct Packet {
        public var version: UInt32
        public var dcid: [UInt8]
        public var crypto: [(offset: Int, data: [UInt8])] = []
    }

    /// Every client Initial in a UDP datagram (coalesced packets: the Initials, in order, until a
    /// packet of another type). nil: the datagram does not start with a client Initial of v1 or
    /// v2 that opens (not QUIC, another version, a changed byte, a frame an Initial may not carry).
    public static func open(_ datagram: UnsafeRawBufferPointer) -> [Packet]? {
        var packets: [Packet] = []
        var at = 0
        while at < datagram.count {
            guard let (packet, end) = openOne(UnsafeRawBufferPointer(rebasing: datagram[at...])) else { break }
            if let first = packets.first, first.dcid != packet.dcid { break }
            packets.append(packet)
            at += end
        }
        return packets.isEmpty ? nil : packets
    }

    /// The Initial at the start of `b` and its length.
    static func openOne(_ b: UnsafeRawBufferPointer) -> (Packet, Int)? {
        var r = Reader(b)
        guard let first = r.u8(), first & 0xC0 == 0xC0, r.remaining >= 4 else { return nil }
        let version = UInt32(b[1]) << 24 | UInt32(b[2]) << 16 | UInt32(b[3]) << 8 | UInt32(b[4])
        r.at = 5
        // The long packet type of an Initial: 0 in v1, 1 in v2.
        let type = (first >> 4) & 3
        guard version == version1 && type == 0 || version == version2 && type == 1 else { return nil }
        guard let dcidLength = r.u8(), dcidLength <= 20, let dcid = r.bytes(Int(dcidLength)),
              let scidLength = r.u8(), scidLength <= 20, r.skip(Int(scidLength)),
              let tokenLength = r.varint(), tokenLength <= UInt64(b.count), r.skip(Int(tokenLength)),
              let length = r.varint(), length <= UInt64(r.remaining), length >= 20 else { return nil }
        let pnOffset = r.at
        let end = pnOffset + Int(length)
        guard let keys = Keys(dcid: dcid, version: version) else { return nil }
        // Header protection (RFC 9001 §5.4): the mask from the sample 4 bytes past the packet
        // number's start.
        var mask = [UInt8](repeating: 0, count: 16)
        guard ctls_aes128_ecb(keys.hp, b.baseAddress! + pnOffset + 4, &mask) == 0 else { return nil }
        var header = Array(b[0..<pnOffset])
        header[0] ^= mask[0] & 0x0F
        let pnLength = Int(header[0] & 3) + 1
        var pn: UInt64 = 0
        for i in 0..<pnLength {
            let byte = b[pnOffset + i] ^ mask[1 + i]
            header.append(byte)
            pn = pn << 8 | UInt64(byte)
        }
        // Reserved bits must be 0 once unprotected.
        guard header[0] & 0x0C == 0 else { return nil }
        var nonce = keys.iv
        for i in 0..<8 { nonce[11 - i] ^= UInt8(truncatingIfNeeded: pn >> (8 * UInt64(i))) }
        let cipherStart = pnOffset + pnLength
        let cipherLength = end - cipherStart
        guard cipherLength >= 16 + 1 else { return nil }
        var plain = [UInt8](repeating: 0, count: cipherLength - 16)
        let opened = header.withUnsafeBytes { aad in
            plain.withUnsafeMutableBytes { out in
                ctls_aes128gcm_open(keys.key, nonce, aad.baseAddress, aad.count, b.baseAddress! + cipherStart,
                                    cipherLength, out.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        guard opened == 0 else { return nil }
        var packet = Packet(version: version, dcid: Array(dcid))
        guard plain.withUnsafeBytes({ frames(UnsafeRawBufferPointer($0), into: &packet) }) else { return nil }
        return (packet, end)
    }

    /// The frames of an Initial's payload (RFC 9000 §17.2.2: PADDING, PING, ACK, CRYPTO,
    /// CONNECTION_CLOSE); false for any other.
    static func frames(_ p: UnsafeRawBufferPointer, into packet: inout Packet) -> Bool {
        var r = Reader(p)
        while !r.isAtEnd {
            guard let type = r.varint() else { return false }
            switch type {
            case 0x00, 0x01:
                continue
            case 0x02, 0x03:
                guard r.varint() != nil, r.varint() != nil, let ranges = r.varint(), r.varint() != nil,
                      ranges <= UInt64(r.remaining) else { return false }
                for _ in 0..<ranges { guard r.varint() != nil, r.varint() != nil else { return false } }
                if type == 0x03 { for _ in 0..<3 { guard r.varint() != nil else { return false } } }
            case 0x06:
                guard let offset = r.varint(), let length = r.varint(), offset <= UInt64(1 << 20),
                      let data = r.bytes(Int(clamping: length)) else { return false }
                packet.crypto.append((Int(offset), Array(data)))
            case 0x1c:
                guard r.varint() != nil, r.varint() != nil, let n = r.varint(), r.skip(Int(clamping: n)) else { return false }
                return true
            default:
                return false
            }
        }
        return true
    }
}

/// The server name from a QUIC client's first Initials, fed one datagram at a time: CRYPTO data
/// joined by offset across packets and datagrams (a ClientHello larger than one Initial), for
/// one Destination Connection ID. `.needMore` while the hello is not whole; `.none` once the
/// datagrams are not Initials that open, or past `TLSClientHello.maxHandshake`.
public struct QUICSniffer {
    private var dcid: [UInt8]?
    /// CRYPTO bytes from offset 0 on, and pieces that arrived ahead of them.
    private var hello: [UInt8] = []
    private var ahead: [(offset: Int, data: [UInt8])] = []
    public private(set) var datagrams = 0

    public init() {}

    public mutating func take(_ datagram: UnsafeRawBufferPointer) -> SniffResult {
        datagrams += 1
        guard let packets = QUICInitial.open(datagram) else { return .none }
        if dcid == nil { dcid = packets[0].dcid }
        guard packets[0].dcid == dcid else { return .none }
        let limit = TLSClientHello.maxHandshake + 4
        for p in packets {
            for (offset, data) in p.crypto {
                guard offset + data.count <= limit else { return .none }
                ahead.append((offset, data))
            }
        }
        // Whatever now continues the hello joins it.
        var moved = true
        while moved {
            moved = false
            for (i, piece) in ahead.enumerated() where piece.offset <= hello.count {
                let skip = hello.count - piece.offset
                if skip < piece.data.count { hello += piece.data[skip...] }
                ahead.remove(at: i)
                moved = true
                break
            }
        }
        guard ahead.reduce(0, { $0 + $1.data.count }) <= limit else { return .none }
        return hello.withUnsafeBytes { TLSClientHello.serverName(handshake: $0) }
    }
}
