import CTLS
import LoftCore

/// How a carrier client checks the front's certificate. Verification is on unless `insecure`
/// is set explicitly.
public struct TLSClientOptions: Sendable, Equatable {
    /// SNI and the name the certificate must match; nil: the dialled host.
    public var serverName: String?
    /// PEM file of trusted CA certificates. With neither `caFile` nor `pinSHA256`, the system
    /// trust store is used.
    public var caFile: String?
    /// SHA-256 of the server certificate's DER SubjectPublicKeyInfo (32 bytes). Without a
    /// `caFile` the chain is not checked (a pinned self-signed certificate works); with one,
    /// both must pass.
    public var pinSHA256: [UInt8]?
    /// No verification at all. Only when the configuration says `insecure: true`.
    public var insecure: Bool

    public init(serverName: String? = nil, caFile: String? = nil, pinSHA256: [UInt8]? = nil, insecure: Bool = false) {
        self.serverName = serverName
        self.caFile = caFile
        self.pinSHA256 = pinSHA256
        self.insecure = insecure
    }

    /// Parses a pin as written in a config: `sha256/BASE64` (44 characters of base64, as curl's
    /// --pinnedpubkey and `ctls` errors print it), bare base64, or 64 hex digits (colons
    /// allowed). Nil when it is not a 32-byte value.
    public static func parsePin(_ text: String) -> [UInt8]? {
        var t = Substring(text.trimmingCharacters())
        for prefix in ["sha256//", "sha256/"] where t.hasPrefix(prefix) { t = t.dropFirst(prefix.count); break }
        let hex = t.filter { $0 != ":" }
        if hex.count == 64, let bytes = Hex.decode(String(hex)) { return bytes }
        if let bytes = Base64.decode(String(t)), bytes.count == 32 { return bytes }
        return nil
    }
}

/// The front's certificate chain and key (PEM files).
public struct TLSServerOptions: Sendable, Equatable {
    public var certificateFile: String
    public var keyFile: String
    public init(certificateFile: String, keyFile: String) {
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }
}

public struct TLSError: Error, CustomStringConvertible, Equatable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// One OpenSSL context (SSL_CTX), made once and shared by every connection of a dialer or
/// listener. TLS 1.3 only (a client may accept 1.2: `allowTLS12`); ALPN `http/1.1` for the ws
/// and get carriers.
public final class TLSContext {
    package let raw: OpaquePointer
    public let isServer: Bool

    /// `allowTLS12`: for servers loft does not control (SSTP's: Windows servers before 2022
    /// speak TLS 1.2); loft's own front and carriers stay TLS 1.3 only.
    public init(client o: TLSClientOptions, alpn: [String] = ["http/1.1"], allowTLS12: Bool = false) throws {
        if let pin = o.pinSHA256, pin.count != 32 { throw TLSError("a SHA-256 pin is 32 bytes, got \(pin.count)") }
        var err = [CChar](repeating: 0, count: 512)
        let ctx: OpaquePointer? = o.pinSHA256.withOptionalBytes { pin in
            ctls_client_ctx_new(o.caFile, pin, o.insecure ? 1 : 0, allowTLS12 ? 1 : 0, &err, err.count)
        }
        guard let ctx else { throw TLSError(cString(err)) }
        raw = ctx
        isServer = false
        try setALPN(alpn)
    }

    public init(server o: TLSServerOptions, alpn: [String] = ["http/1.1"]) throws {
        var err = [CChar](repeating: 0, count: 512)
        guard let ctx = ctls_server_ctx_new(o.certificateFile, o.keyFile, &err, err.count) else {
            throw TLSError(cString(err))
        }
        raw = ctx
        isServer = true
        try setALPN(alpn)
    }

    private func setALPN(_ names: [String]) throws {
        guard !names.isEmpty else { return }
        var wire: [UInt8] = []
        for n in names {
            let b = Array(n.utf8)
            guard !b.isEmpty, b.count < 256 else { throw TLSError("bad ALPN name \(n)") }
            wire.append(UInt8(b.count))
            wire += b
        }
        guard ctls_ctx_set_alpn(raw, wire, wire.count) == 0 else { throw TLSError("cannot set ALPN") }
    }

    deinit { ctls_ctx_free(raw) }

    /// Client: resume sessions (the newest ticket the server sent), so later connections skip
    /// the certificate exchange and its verification. Only for a context whose connections all
    /// go to one server name (a vless outbound's).
    public func enableResumption() {
        _ = ctls_ctx_enable_resumption(raw)
    }

    /// The pin a client would configure for this certificate file: `sha256/BASE64` of the
    /// SHA-256 of its SubjectPublicKeyInfo.
    public static func pin(ofCertificateFile path: String) throws -> String {
        var out = [UInt8](repeating: 0, count: 32)
        var err = [CChar](repeating: 0, count: 512)
        guard ctls_spki_sha256_file(path, &out, &err, err.count) == 0 else { throw TLSError(cString(err)) }
        return "sha256/" + Base64.encode(out)
    }
}

extension Optional where Wrapped == [UInt8] {
    package func withOptionalBytes<R>(_ body: (UnsafePointer<UInt8>?) -> R) -> R {
        switch self {
        case .none: return body(nil)
        case .some(let a): return a.withUnsafeBufferPointer { body($0.baseAddress) }
        }
    }
}

extension String {
    package func trimmingCharacters() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" || f == "\r" || f == "\n" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\r" || l == "\n" { s = s.dropLast() }
        return String(s)
    }
}

/// A NUL-terminated C buffer as a String.
package func cString(_ buf: [CChar]) -> String {
    buf.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}
