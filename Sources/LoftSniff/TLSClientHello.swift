/// The server name (SNI, RFC 6066 §3) of a TLS ClientHello: from the first bytes of a TCP
/// stream (TLS records, the hello possibly in several records and in any number of segments),
/// or from a handshake message as QUIC's CRYPTO frames carry it.
public enum TLSClientHello {
    /// A hello longer than this is not sniffed (`.none`): 16 KiB, one record's most, holds
    /// every hello browsers send (post-quantum key shares included, about 1.8 KiB).
    public static let maxHandshake = 16_384
    /// The most stream bytes `serverName(_:)` asks for.
    public static let maxBytes = maxHandshake + 5 * 4

    /// From a stream's first bytes: TLS records of type handshake.
    public static func serverName(_ bytes: UnsafeRawBufferPointer) -> SniffResult {
        // The first record: content type 22 (handshake), version 3.x, a length.
        guard bytes.count >= 5 else { return prefixIsRecord(bytes) ? .needMore : .none }
        guard bytes[0] == 0x16, bytes[1] == 3 else { return .none }
        let first = Int(bytes[3]) << 8 | Int(bytes[4])
        guard first >= 1, first <= 16_384 + 2048 else { return .none }
        // The handshake header (type, 24-bit length) begins in the first record.
        guard bytes.count >= 5 + min(first, 4) else { return .needMore }
        if first < 4 { return gathered(bytes) }
        guard bytes[5] == 1 else { return .none }
        let length = Int(bytes[6]) << 16 | Int(bytes[7]) << 8 | Int(bytes[8])
        guard length <= maxHandshake else { return .none }
        if 4 + length <= first {
            // The whole hello in the first record (every common client): parsed in place.
            guard bytes.count >= 5 + 4 + length else { return .needMore }
            return serverName(handshake: UnsafeRawBufferPointer(rebasing: bytes[5..<(9 + length)]))
        }
        return gathered(bytes)
    }

    /// The first bytes could begin a handshake record.
    private static func prefixIsRecord(_ b: UnsafeRawBufferPointer) -> Bool {
        (b.count < 1 || b[0] == 0x16) && (b.count < 2 || b[1] == 3)
    }

    /// A hello spread over several records: their fragments joined (rare: a copy).
    private static func gathered(_ bytes: UnsafeRawBufferPointer) -> SniffResult {
        var hello: [UInt8] = []
        var at = 0
        while true {
            guard bytes.count >= at + 5 else { return .needMore }
            guard bytes[at] == 0x16, bytes[at + 1] == 3 else { return .none }
            let n = Int(bytes[at + 3]) << 8 | Int(bytes[at + 4])
            guard n >= 1, n <= 16_384 + 2048 else { return .none }
            guard bytes.count >= at + 5 + n else { return .needMore }
            hello.append(contentsOf: bytes[(at + 5)..<(at + 5 + n)])
            at += 5 + n
            if hello.count >= 4 {
                guard hello[0] == 1 else { return .none }
                let length = Int(hello[1]) << 16 | Int(hello[2]) << 8 | Int(hello[3])
                guard length <= maxHandshake else { return .none }
                if hello.count >= 4 + length {
                    return hello.withUnsafeBytes { serverName(handshake: UnsafeRawBufferPointer(rebasing: $0[0..<(4 + length)])) }
                }
            }
        }
    }

    /// From a handshake message (type, 24-bit length, body): `.needMore` while it is shorter
    /// than its length says.
    public static func serverName(handshake h: UnsafeRawBufferPointer) -> SniffResult {
        guard h.count >= 4 else { return h.isEmpty || h[0] == 1 ? .needMore : .none }
        guard h[0] == 1 else { return .none }
        let length = Int(h[1]) << 16 | Int(h[2]) << 8 | Int(h[3])
        guard length <= maxHandshake else { return .none }
        guard h.count >= 4 + length else { return .needMore }
        var r = Reader(UnsafeRawBufferPointer(rebasing: h[4..<(4 + length)]))
        // legacy_version, random, legacy_session_id, cipher_suites, legacy_compression_methods
        guard r.skip(2 + 32), r.skipVector(1), r.skipVector(2), r.skipVector(1) else { return .none }
        guard !r.isAtEnd else { return .none }  // no extensions: no SNI
        guard let extensionsLength = r.u16(), let all = r.bytes(Int(extensionsLength)) else { return .none }
        var e = Reader(all)
        while !e.isAtEnd {
            guard let type = e.u16(), let n = e.u16(), let body = e.bytes(Int(n)) else { return .none }
            guard type == 0 else { continue }  // server_name
            var s = Reader(body)
            guard let listLength = s.u16(), let list = s.bytes(Int(listLength)) else { return .none }
            var l = Reader(list)
            while !l.isAtEnd {
                guard let kind = l.u8(), let nameLength = l.u16(), let name = l.bytes(Int(nameLength)) else { return .none }
                if kind == 0 { return HostName.validate(name).map(SniffResult.name) ?? .none }
            }
            return .none
        }
        return .none
    }
}

/// Big-endian reads over a buffer; each returns nil (and moves nothing) past its end.
struct Reader {
    let b: UnsafeRawBufferPointer
    var at = 0
    init(_ b: UnsafeRawBufferPointer) { self.b = b }

    var isAtEnd: Bool { at >= b.count }
    var remaining: Int { b.count - at }

    mutating func u8() -> UInt8? {
        guard at < b.count else { return nil }
        defer { at += 1 }
        return b[at]
    }

    mutating func u16() -> UInt16? {
        guard remaining >= 2 else { return nil }
        defer { at += 2 }
        return UInt16(b[at]) << 8 | UInt16(b[at + 1])
    }

    mutating func skip(_ n: Int) -> Bool {
        guard n >= 0, remaining >= n else { return false }
        at += n
        return true
    }

    mutating func bytes(_ n: Int) -> UnsafeRawBufferPointer? {
        guard n >= 0, remaining >= n else { return nil }
        defer { at += n }
        return UnsafeRawBufferPointer(rebasing: b[at..<(at + n)])
    }

    /// Skips a vector with a length prefix of `width` bytes.
    mutating func skipVector(_ width: Int) -> Bool {
        var n = 0
        for _ in 0..<width {
            guard let x = u8() else { return false }
            n = n << 8 | Int(x)
        }
        return skip(n)
    }

    /// A QUIC variable-length integer (RFC 9000 §16).
    mutating func varint() -> UInt64? {
        guard let first = u8() else { return nil }
        let extra = (1 << Int(first >> 6)) - 1
        guard remaining >= extra else { return nil }
        var v = UInt64(first & 0x3F)
        for _ in 0..<extra { v = v << 8 | UInt64(b[at]); at += 1 }
        return v
    }
}
