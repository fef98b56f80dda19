import CTLS
import LoftCarriers
import LoftConfig
import LoftTLS

/// A problem in a `.loft` file or an encrypted file, at a line and column (1-based; 0 when the
/// problem is the file as a whole).
public struct FileError: Error, Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var column: Int
    public var message: String
    public init(line: Int, column: Int, _ message: String) {
        self.line = line
        self.column = column
        self.message = message
    }
    public var description: String { line == 0 ? message : "\(line):\(column): \(message)" }
}

/// The `.loft` file (docs/links.md): a first line `loft-connections 1`, one link a line, and a
/// last line `end N` with the number of links, so that a file cut short is an error rather than
/// fewer connections. Blank lines and lines starting with `#` are skipped.
public enum ConnectionFile {
    public static let header = "loft-connections 1"
    public static let maximumSize = 4 << 20

    public static func write(_ links: [String]) -> String {
        header + "\n" + links.map { $0 + "\n" }.joined() + "end \(links.count)\n"
    }

    /// Whether bytes look like a `.loft` file (its first line).
    public static func looksLike(_ bytes: [UInt8]) -> Bool {
        bytes.starts(with: Array("loft-connections ".utf8))
    }

    public static func read(_ bytes: [UInt8]) throws(FileError) -> [Connection] {
        guard bytes.count <= maximumSize else { throw FileError(line: 0, column: 0, "larger than \(maximumSize >> 20) MiB") }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw FileError(line: 1, column: 1, "not UTF-8 text")
        }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { $0.hasSuffix("\r") ? $0.dropLast() : $0 }
        let endsWithNewline = lines.last == ""
        if endsWithNewline { lines.removeLast() }
        guard let first = lines.first, first.hasPrefix("loft-connections ") else {
            throw FileError(line: 1, column: 1, "not a .loft file: the first line must be \"\(header)\"")
        }
        guard first == header else {
            throw FileError(line: 1, column: 18, "version \(Link.quote(String(first.dropFirst(17)))) of the .loft format is not known (this loft reads 1)")
        }
        var out: [Connection] = []
        var ended = false
        for (i, line) in lines.enumerated().dropFirst() {
            let n = i + 1
            if ended {
                guard line.isEmpty || line.hasPrefix("#") else { throw FileError(line: n, column: 1, "text after the end line") }
                continue
            }
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("end") {
                guard line.hasPrefix("end "), let count = Int(line.dropFirst(4)), line.dropFirst(4).allSatisfy({ $0.isASCII && $0.isNumber }) else {
                    throw FileError(line: n, column: 1, "the end line must be \"end N\", got \(Link.quote(String(line)))")
                }
                guard count == out.count else {
                    throw FileError(line: n, column: 5, "the end line counts \(count) connections, the file holds \(out.count)")
                }
                ended = true
                continue
            }
            do {
                out.append(try Link.parse(String(line)))
            } catch {
                throw FileError(line: n, column: error.column, error.message)
            }
        }
        guard ended, endsWithNewline else {
            throw FileError(line: lines.count, column: 1, "truncated: the file does not end with its \"end N\" line")
        }
        guard !out.isEmpty else { throw FileError(line: lines.count, column: 1, "the file holds no connections") }
        return out
    }
}

/// The encrypted file (docs/links.md): a 45-byte header, then AES-256-GCM of the `.loft` text
/// with its 16-byte tag. The header is the GCM associated data, so a changed byte anywhere fails.
///
///     0   8  magic "LOFTSEAL"
///     8   1  version 1
///     9   4  PBKDF2 iterations, big-endian
///     13 16  salt (random per file)
///     29 12  nonce (random per file)
///     41  4  plaintext length, big-endian
///     45  …  ciphertext, then the tag
///
/// The key is PBKDF2-HMAC-SHA256(passphrase as UTF-8, salt, iterations, 32 bytes).
public enum SealedFile {
    public static let magic = Array("LOFTSEAL".utf8)
    public static let version: UInt8 = 1
    public static let headerSize = 45
    /// What `loft export` writes: OWASP's 2023 figure for PBKDF2-HMAC-SHA256.
    public static let defaultIterations: UInt32 = 600_000
    /// What a reader accepts: fewer is too weak to have been written by loft, more could stall it.
    public static let iterationRange: ClosedRange<UInt32> = 100_000...10_000_000

    public static func looksLike(_ bytes: [UInt8]) -> Bool { bytes.starts(with: magic) }

    public static func seal(_ plain: [UInt8], passphrase: [UInt8], iterations: UInt32 = defaultIterations,
                            salt: [UInt8] = Crypto.random(16), nonce: [UInt8] = Crypto.random(12)) -> [UInt8] {
        seal(plain, key: derive(passphrase, salt, iterations), iterations: iterations, salt: salt, nonce: nonce)
    }

    static func seal(_ plain: [UInt8], key: [UInt8], iterations: UInt32,
                     salt: [UInt8] = Crypto.random(16), nonce: [UInt8] = Crypto.random(12)) -> [UInt8] {
        precondition(salt.count == 16 && nonce.count == 12)
        var header = magic + [version]
        header += bigEndian(iterations)
        header += salt + nonce
        header += bigEndian(UInt32(plain.count))
        var out = [UInt8](repeating: 0, count: plain.count + 16)
        let rc = ctls_aes256gcm_seal(key, nonce, header, header.count, plain, plain.count, &out)
        precondition(rc == 0, "AES-256-GCM failed")
        return header + out
    }

    public static func open(_ bytes: [UInt8], passphrase: [UInt8]) throws(FileError) -> [UInt8] {
        try open(bytes) { salt, iterations in derive(passphrase, salt, iterations) }
    }

    /// `open` with the key from `key(salt, iterations)` (the fuzz target's fixed key: the checks
    /// are the same, without a derivation per input).
    static func open(_ bytes: [UInt8], key makeKey: ([UInt8], UInt32) -> [UInt8]) throws(FileError) -> [UInt8] {
        guard bytes.count >= magic.count, bytes.starts(with: magic) else {
            throw FileError(line: 0, column: 0, "not an encrypted loft file (no LOFTSEAL header)")
        }
        guard bytes.count >= headerSize + 16 else {
            throw FileError(line: 0, column: 0, "truncated: \(bytes.count) bytes, an encrypted loft file has at least \(headerSize + 16)")
        }
        guard bytes[8] == version else {
            throw FileError(line: 0, column: 0, "version \(bytes[8]) of the encrypted format is not known (this loft reads 1)")
        }
        let iterations = readBE(bytes, 9)
        guard iterationRange.contains(iterations) else {
            throw FileError(line: 0, column: 0, "byte 9: \(iterations) PBKDF2 iterations is outside \(iterationRange.lowerBound)...\(iterationRange.upperBound) (a damaged file)")
        }
        let length = Int(readBE(bytes, 41))
        guard bytes.count == headerSize + length + 16 else {
            throw FileError(line: 0, column: 0, "truncated or damaged: the header says \(length) bytes of content, the file has \(bytes.count - headerSize - 16)")
        }
        let salt = Array(bytes[13..<29]), nonce = Array(bytes[29..<41])
        let key = makeKey(salt, iterations)
        var out = [UInt8](repeating: 0, count: length)
        let body = Array(bytes[headerSize...])
        let header = Array(bytes[0..<headerSize])
        guard ctls_aes256gcm_open(key, nonce, header, header.count, body, body.count, &out) == 0 else {
            throw FileError(line: 0, column: 0, "wrong passphrase, or the file was changed (its authentication tag does not match)")
        }
        return out
    }

    static func derive(_ passphrase: [UInt8], _ salt: [UInt8], _ iterations: UInt32) -> [UInt8] {
        var key = [UInt8](repeating: 0, count: 32)
        let rc = ctls_pbkdf2_sha256(passphrase, passphrase.count, salt, salt.count, iterations, &key, 32)
        precondition(rc == 0, "PBKDF2 failed")
        return key
    }

    static func bigEndian(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)] }
    static func readBE(_ b: [UInt8], _ at: Int) -> UInt32 {
        UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3])
    }
}

/// An outbound as the YAML of an `outbound-dir` file (the keys of an `outbounds` entry).
public enum OutboundYAML {
    public static func text(_ o: OutboundSettings, comment: String? = nil) -> String {
        var out = comment.map { "# \($0)\n" } ?? ""
        let q = ConfigText.yamlQuoted
        out += "name: \(q(o.name))\n"
        func tls(_ t: TLSVerification, _ sni: String?) {
            out += "tls:\n"
            if let sni { out += "  server-name: \(q(sni))\n" }
            switch t {
            case .caFile(let f): out += "  ca: \(q(f))\n"
            case .pinSHA256(let h): out += "  pin-sha256: \(q(h))\n"
            case .systemStore: out += "  system-ca: true\n"
            case .insecure: out += "  insecure: true\n"
            }
        }
        switch o.kind {
        case .loft(let server, let carrier, let token, let t, let sni):
            out += "type: loft\nserver: \(q(server))\ncarrier: \(carrier)\ntoken: \(q(token))\n"
            tls(t, sni)
            if let n = o.quicMaxPacket { out += "quic-max-packet: \(n)\n" }
        case .vless(let server, let uuid, let t, let sni, let alpn):
            out += "type: vless\nserver: \(q(server))\nuuid: \(q(uuid))\n"
            tls(t, sni)
            if !alpn.isEmpty { out += "alpn: [\(alpn.map(q).joined(separator: ", "))]\n" }
        case .sstp(let server, let user, let password, let t, let sni, let auth):
            out += "type: sstp\nserver: \(q(server))\nuser: \(q(user))\npassword: \(q(password))\n"
            tls(t, sni)
            out += "auth: [\(auth.map(\.rawValue).joined(separator: ", "))]\n"
            if let k = o.keepalive { out += "keepalive: \(ConfigText.format(k))\n" }
        case .direct: out += "type: direct\n"
        case .drop: out += "type: drop\n"
        }
        return out
    }
}
