import CTLS

/// Digests and randomness from OpenSSL.
public enum Crypto {
    public static func sha1(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 20)
        ctls_sha1(bytes, bytes.count, &out)
        return out
    }

    public static func sha256(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        ctls_sha256(bytes.baseAddress, bytes.count, &out)
        return out
    }

    public static func random(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        fillRandom(&out)
        return out
    }

    public static func fillRandom(_ bytes: inout [UInt8]) {
        let n = bytes.count
        bytes.withUnsafeMutableBytes { fillRandom($0.baseAddress!, n) }
    }

    public static func fillRandom(_ p: UnsafeMutableRawPointer, _ count: Int) {
        if ctls_random(p, count) != 0 { fatalError("RAND_bytes failed") }
    }
}

/// Incremental SHA-256 (for checking long transfers).
public final class SHA256Hasher {
    private var ctx: OpaquePointer?
    public init() { ctx = ctls_sha256_new() }
    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let ctx, bytes.count > 0 else { return }
        ctls_sha256_update(ctx, bytes.baseAddress, bytes.count)
    }
    public func finish() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        if let ctx { ctls_sha256_final(ctx, &out) }
        ctx = nil
        return out
    }
    deinit { if let ctx { var d = [UInt8](repeating: 0, count: 32); ctls_sha256_final(ctx, &d) } }
}
