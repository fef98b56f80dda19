import LoftCarriers
import LoftConfig
import LoftCore

/// A problem in a link, at a 1-based character column of it.
public struct LinkError: Error, Sendable, Equatable, CustomStringConvertible {
    public var column: Int
    public var message: String
    public init(column: Int, _ message: String) {
        self.column = column
        self.message = message
    }
    public var description: String { "column \(column): \(message)" }
}

/// One connection as a link carries it: an outbound (named from the fragment) and the CA
/// certificates the link embeds. With embedded certificates the outbound's `tls` is
/// `.caFile(Connection.caFileName(name))`, the file `loft import` writes next to the outbound.
public struct Connection: Sendable, Equatable {
    public var outbound: OutboundSettings
    /// DER certificates from `ca=` parameters, in order; empty: none embedded.
    public var ca: [[UInt8]]
    /// Whether the link named the connection (a fragment); otherwise the name is made from the
    /// type and the host.
    public var named: Bool

    public init(outbound: OutboundSettings, ca: [[UInt8]] = [], named: Bool = true) {
        self.outbound = outbound
        self.ca = ca
        self.named = named
    }

    public var name: String { outbound.name }

    /// The CA file an imported connection with embedded certificates refers to (relative to the
    /// outbound's own file).
    public static func caFileName(_ name: String) -> String { name + ".ca.pem" }

    /// The same connection under another name (the CA file follows the name).
    public func renamed(_ name: String) -> Connection {
        var c = self
        c.outbound.name = name
        c.named = true
        if !ca.isEmpty { c.outbound.setTLS(.caFile(Connection.caFileName(name))) }
        return c
    }
}

extension OutboundSettings {
    /// The `tls` verification of a loft, vless or sstp outbound.
    public var tlsVerification: TLSVerification? {
        switch kind {
        case .loft(_, _, _, let t, _), .vless(_, _, let t, _, _), .sstp(_, _, _, let t, _, _): return t
        default: return nil
        }
    }

    mutating func setTLS(_ t: TLSVerification) {
        switch kind {
        case .loft(let s, let c, let tok, _, let n): kind = .loft(server: s, carrier: c, token: tok, tls: t, serverName: n)
        case .vless(let s, let u, _, let n, let a): kind = .vless(server: s, uuid: u, tls: t, serverName: n, alpn: a)
        case .sstp(let s, let u, let p, _, let n, let a): kind = .sstp(server: s, user: u, password: p, tls: t, serverName: n, auth: a)
        default: break
        }
    }
}

/// The link formats of docs/links.md: `vless://` in the form other clients share, `loft://` and
/// `sstp://` (loft's own). `parse` takes one link; `format` writes one.
public enum Link {
    public static let schemes = ["loft", "vless", "sstp"]
    /// Longer links are refused before parsing (a link with four embedded CA certificates fits).
    public static let maximumLength = 16384

    static let loftKeys = ["carrier", "sni", "pin-sha256", "ca", "insecure", "quic-max-packet"]
    static let sstpKeys = ["sni", "pin-sha256", "ca", "insecure", "auth", "keepalive"]
    /// `fp` (a client-hello fingerprint to imitate) is taken and ignored: loft's TLS is OpenSSL's.
    /// `headerType=none` and an empty `flow` are what plain VLESS over TCP means.
    static let vlessKeys = ["encryption", "security", "type", "sni", "alpn", "fp", "headerType", "flow",
                            "allowInsecure", "pin-sha256", "ca"]

    // MARK: parse

    /// Parses one link. `column` of an error counts characters of `text` from 1 (a problem at the
    /// end, such as a missing part, is at the last character).
    public static func parse(_ text: String) throws(LinkError) -> Connection {
        let chars = Array(text)
        do {
            return try parse(chars)
        } catch {
            throw LinkError(column: max(1, min(error.column, chars.count)), error.message)
        }
    }

    static func parse(_ chars: [Character]) throws(LinkError) -> Connection {
        guard chars.count <= maximumLength else {
            throw LinkError(column: 1, "a link is at most \(maximumLength) characters, this one has \(chars.count)")
        }
        guard let sep = find(chars, "://", from: 0) else {
            throw LinkError(column: 1, "not a link: no \"://\" (expected loft://, vless:// or sstp://)")
        }
        let scheme = String(chars[0..<sep]).lowercased()
        guard schemes.contains(scheme) else {
            throw LinkError(column: 1, "unknown scheme \(quote(String(chars[0..<sep]))) (expected loft://, vless:// or sstp://)")
        }
        let hash = chars.firstIndex(of: "#") ?? chars.count
        // Some clients leave spaces in the #name unencoded; elsewhere they end the link.
        for (i, c) in chars.enumerated() where (c.isWhitespace && i < hash) || c.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) {
            throw LinkError(column: i + 1, "a link has no spaces or control characters (percent-encode them)")
        }
        for i in 0..<hash where !chars[i].isASCII {
            throw LinkError(column: i + 1, "only the #name may hold characters outside ASCII (percent-encode them)")
        }
        let question = chars[0..<hash].firstIndex(of: "?") ?? hash
        var authorityEnd = question
        if let slash = chars[(sep + 3)..<question].firstIndex(of: "/") {
            // `host:443/?…` is how some clients write it: a path of "/" only.
            guard slash == question - 1 else {
                throw LinkError(column: slash + 1, "a link has no path (only an optional \"/\" before \"?\")")
            }
            authorityEnd = slash
        }
        let authStart = sep + 3
        guard let at = chars[authStart..<authorityEnd].lastIndex(of: "@") else {
            let what = scheme == "loft" ? "the token" : scheme == "vless" ? "the UUID" : "user:password"
            throw LinkError(column: authStart + 1, "\(scheme):// needs \(what) before \"@host:port\"")
        }
        let (server, _) = try hostPort(chars, from: at + 1, to: authorityEnd)
        let params = try query(chars, from: question, to: hash)
        var name: String?
        if hash < chars.count {
            let raw = try decode(chars, from: hash + 1, to: chars.count)
            if !raw.isEmpty { name = raw }
        }
        var outbound: OutboundSettings
        var ca: [[UInt8]] = []
        let placeholder = SourcePosition(file: "link", line: 1, column: 1)
        switch scheme {
        case "loft":
            try allow(params, loftKeys, scheme)
            let token = try decode(chars, from: authStart, to: at)
            guard !token.isEmpty else { throw LinkError(column: authStart + 1, "loft:// needs the token before \"@\"") }
            guard let carrier = params.value("carrier") else {
                throw LinkError(column: question + 1, "loft:// needs carrier= (\(ConfigText.carriers.joined(separator: ", ")))")
            }
            guard ConfigText.carriers.contains(carrier.text) else {
                throw LinkError(column: carrier.column, "carrier must be one of \(ConfigText.carriers.joined(separator: ", ")), got \(quote(carrier.text))")
            }
            let (tls, sni, certs) = try self.tls(params, insecureKey: "insecure")
            ca = certs
            outbound = OutboundSettings(name: "", kind: .loft(server: server, carrier: carrier.text, token: token, tls: tls, serverName: sni), position: placeholder)
            if let q = params.value("quic-max-packet") {
                guard carrier.text == "quic" || carrier.text == "h3" else {
                    throw LinkError(column: q.column, "quic-max-packet is for carrier quic or h3, not \(carrier.text)")
                }
                guard let n = Int(q.text), q.text.allSatisfy({ $0.isASCII && $0.isNumber }), ConfigText.quicPacketRange.contains(n) else {
                    throw LinkError(column: q.column, "quic-max-packet must be \(ConfigText.quicPacketRange.lowerBound) to \(ConfigText.quicPacketRange.upperBound), got \(quote(q.text))")
                }
                outbound.quicMaxPacket = n
            }
        case "vless":
            try allow(params, vlessKeys, scheme)
            let raw = try decode(chars, from: authStart, to: at)
            guard let uuid = ConfigText.uuid(raw) else {
                throw LinkError(column: authStart + 1, "vless:// needs a UUID before \"@\" (8-4-4-4-12 hex digits), got \(quote(raw))")
            }
            try require(params, "encryption", ["none"], "loft's VLESS has no encryption of its own (TLS carries it)")
            guard let security = params.value("security") else {
                throw LinkError(column: question + 1, "vless:// needs security=tls (loft's vless outbound is VLESS over TLS)")
            }
            guard security.text == "tls" else {
                throw LinkError(column: security.column, "security must be tls (loft's vless outbound is VLESS over TLS), got \(quote(security.text))")
            }
            try require(params, "type", ["tcp"], "loft's vless outbound is VLESS over TCP")
            try require(params, "headerType", ["none"], "no header obfuscation")
            try require(params, "flow", [""], "no flow control (xtls) in loft's VLESS")
            let (tls, sni, certs) = try self.tls(params, insecureKey: "allowInsecure")
            ca = certs
            var alpn: [String] = []
            if let a = params.value("alpn") {
                alpn = a.text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
                guard (1...8).contains(alpn.count), alpn.allSatisfy({ (1...255).contains($0.utf8.count) && $0.allSatisfy { $0.isASCII && !$0.isWhitespace } }) else {
                    throw LinkError(column: a.column, "alpn must be 1 to 8 protocol names separated by commas, as in h2,http/1.1, got \(quote(a.text))")
                }
            }
            outbound = OutboundSettings(name: "", kind: .vless(server: server, uuid: uuid, tls: tls, serverName: sni, alpn: alpn), position: placeholder)
        default: // sstp
            try allow(params, sstpKeys, scheme)
            guard let colon = chars[authStart..<at].firstIndex(of: ":") else {
                throw LinkError(column: authStart + 1, "sstp:// needs user:password before \"@\"")
            }
            let user = try decode(chars, from: authStart, to: colon)
            let password = try decode(chars, from: colon + 1, to: at)
            guard (1...255).contains(user.utf8.count) else { throw LinkError(column: authStart + 1, "the user must be 1 to 255 bytes") }
            guard (1...255).contains(password.utf8.count) else { throw LinkError(column: colon + 2, "the password must be 1 to 255 bytes") }
            let (tls, sni, certs) = try self.tls(params, insecureKey: "insecure")
            ca = certs
            var auth = ConfigText.sstpDefaultAuth
            if let a = params.value("auth") {
                auth = []
                for word in a.text.split(separator: ",", omittingEmptySubsequences: false) {
                    guard let m = SSTPAuthMethod(rawValue: String(word)), !auth.contains(m) else {
                        throw LinkError(column: a.column, "auth must be mschapv2, pap or both (each once, comma-separated), got \(quote(a.text))")
                    }
                    auth.append(m)
                }
            }
            outbound = OutboundSettings(name: "", kind: .sstp(server: server, user: user, password: password, tls: tls, serverName: sni, auth: auth), position: placeholder)
            if let k = params.value("keepalive") {
                guard let d = ConfigText.parseDuration(k.text), ConfigText.sstpKeepaliveRange.contains(d) else {
                    throw LinkError(column: k.column, "keepalive must be a duration from 1s to 5m, as in 30s, got \(quote(k.text))")
                }
                outbound.keepalive = d
            }
        }
        let host = HostPort(server)!.host
        outbound.name = name.map(sanitize) ?? ""
        if outbound.name.isEmpty { outbound.name = sanitize("\(scheme)-\(host)") }
        var c = Connection(outbound: outbound, ca: ca, named: name != nil)
        c = c.renamed(outbound.name)
        c.named = name != nil
        return c
    }

    /// A fragment as an outbound name: characters outside `A-Z a-z 0-9 _ . -` become `-` (runs of
    /// them one), leading and trailing `-` go, at most 64 characters; `direct`, `drop` and names
    /// that end up empty get a `-1` after them or are `imported`.
    public static func sanitize(_ text: String) -> String {
        var out = ""
        for c in text {
            if ConfigText.isNameCharacter(c) { out.append(c) } else if out.last != "-" { out.append("-") }
        }
        while out.hasPrefix("-") { out.removeFirst() }
        while out.hasSuffix("-") { out.removeLast() }
        if out.count > 64 { out = String(out.prefix(64)) }
        while out.hasSuffix("-") { out.removeLast() }
        if out.isEmpty || out == "." || out == ".." { return "imported" }
        if out == "direct" || out == "drop" { return out + "-1" }
        return out
    }

    struct Param { var key: String; var text: String; var column: Int }

    struct Params {
        var list: [Param] = []
        func value(_ key: String) -> Param? { list.first { $0.key == key } }
        func all(_ key: String) -> [Param] { list.filter { $0.key == key } }
    }

    static func allow(_ params: Params, _ keys: [String], _ scheme: String) throws(LinkError) {
        var seen: Set<String> = []
        for p in params.list {
            guard keys.contains(p.key) else {
                throw LinkError(column: p.column, "unknown parameter \(quote(p.key)) (\(scheme):// takes \(keys.joined(separator: ", ")))")
            }
            guard p.key == "ca" || seen.insert(p.key).inserted else {
                throw LinkError(column: p.column, "parameter \(quote(p.key)) is given twice")
            }
        }
    }

    static func require(_ params: Params, _ key: String, _ allowed: [String], _ why: String) throws(LinkError) {
        if let p = params.value(key), !allowed.contains(p.text) {
            let list = allowed.map { $0.isEmpty ? "empty" : $0 }.joined(separator: " or ")
            throw LinkError(column: p.column, "\(key) must be \(list) (\(why)), got \(quote(p.text))")
        }
    }

    /// sni, pin-sha256, ca (repeatable), insecure / allowInsecure: at most one of the last three;
    /// none means the system's trust store.
    static func tls(_ params: Params, insecureKey: String) throws(LinkError) -> (TLSVerification, String?, [[UInt8]]) {
        var sni: String?
        if let s = params.value("sni"), !s.text.isEmpty {
            guard ConfigText.isHostName(s.text) else { throw LinkError(column: s.column, "sni must be a DNS name, got \(quote(s.text))") }
            sni = s.text
        }
        var chosen: [(TLSVerification, Param)] = []
        if let p = params.value("pin-sha256") {
            guard p.text.count == 64, p.text.allSatisfy({ $0.isHexDigit && $0.isASCII }) else {
                throw LinkError(column: p.column, "pin-sha256 must be 64 hex digits, got \(quote(p.text))")
            }
            chosen.append((.pinSHA256(p.text.lowercased()), p))
        }
        var certs: [[UInt8]] = []
        for p in params.all("ca") {
            guard let der = Base64URL.decode(p.text), der.count >= 16, der[0] == 0x30 else {
                throw LinkError(column: p.column, "ca must be a DER certificate in unpadded base64url")
            }
            certs.append(der)
        }
        if let first = params.all("ca").first { chosen.append((.caFile(""), first)) }
        if let p = params.value(insecureKey) {
            switch p.text {
            case "1", "true": chosen.append((.insecure, p))
            case "0", "false": break
            default: throw LinkError(column: p.column, "\(insecureKey) must be 1 or 0, got \(quote(p.text))")
            }
        }
        guard chosen.count <= 1 else {
            throw LinkError(column: chosen[1].1.column, "\(chosen[1].1.key): a link takes at most one of pin-sha256, ca, \(insecureKey)")
        }
        return (chosen.first?.0 ?? .systemStore, sni, certs)
    }

    /// `host:port` of chars[from..<to]: a DNS name, IPv4 or `[IPv6]`; returned as the config writes it.
    static func hostPort(_ chars: [Character], from: Int, to: Int) throws(LinkError) -> (String, HostPort) {
        guard let colon = chars[from..<to].lastIndex(of: ":"), colon > from else {
            throw LinkError(column: from + 1, "expected host:port after \"@\"")
        }
        let portText = String(chars[(colon + 1)..<to])
        guard !portText.isEmpty, portText.allSatisfy({ $0.isASCII && $0.isNumber }), portText.count <= 5,
              let p = Int(portText), (1...65535).contains(p) else {
            throw LinkError(column: portText.isEmpty ? colon + 1 : colon + 2, "the port must be 1 to 65535, got \(quote(portText))")
        }
        let host = String(chars[from..<colon])
        let server = host + ":" + portText
        guard let hp = HostPort(server) else {
            throw LinkError(column: from + 1, "the host must be a DNS name, an IPv4 address or [IPv6], got \(quote(host))")
        }
        return (server, hp)
    }

    static func query(_ chars: [Character], from question: Int, to end: Int) throws(LinkError) -> Params {
        var params = Params()
        guard question < end else { return params }
        var start = question + 1
        while start <= end {
            let stop = chars[start..<end].firstIndex(of: "&") ?? end
            if stop > start {
                let eq = chars[start..<stop].firstIndex(of: "=") ?? stop
                let key = try decode(chars, from: start, to: eq)
                guard !key.isEmpty else { throw LinkError(column: start + 1, "a parameter without a name") }
                let value = eq < stop ? try decode(chars, from: eq + 1, to: stop) : ""
                params.list.append(Param(key: key, text: value, column: start + 1))
            }
            start = stop + 1
        }
        return params
    }

    /// Percent-decoding of chars[from..<to] into UTF-8 text.
    static func decode(_ chars: [Character], from: Int, to: Int) throws(LinkError) -> String {
        var bytes: [UInt8] = []
        var i = from
        while i < to {
            if chars[i] == "%" {
                guard i + 3 <= to,
                      let hi = chars[i + 1].hexDigitValue, let lo = chars[i + 2].hexDigitValue,
                      chars[i + 1].isASCII, chars[i + 2].isASCII else {
                    throw LinkError(column: i + 1, "\"%\" must be followed by two hex digits")
                }
                bytes.append(UInt8(hi << 4 | lo))
                i += 3
            } else {
                bytes += Array(String(chars[i]).utf8)
                i += 1
            }
        }
        guard let s = String(validating: bytes, as: UTF8.self) else {
            throw LinkError(column: from + 1, "the percent-encoded bytes are not UTF-8")
        }
        return s
    }

    static func find(_ chars: [Character], _ what: String, from: Int) -> Int? {
        let w = Array(what)
        guard chars.count >= w.count else { return nil }
        for i in from...(chars.count - w.count) where Array(chars[i..<(i + w.count)]) == w { return i }
        return nil
    }

    public static func quote(_ s: String) -> String {
        let shown = s.count > 60 ? String(s.prefix(60)) + "…" : s
        return "\"" + shown.unicodeScalars.map { $0.value < 0x20 ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined() + "\""
    }

    // MARK: format

    /// The link of an outbound of type loft, vless or sstp. `ca` are the DER certificates of its
    /// `tls.ca` file (embedded as `ca=`); nil for the other types.
    public static func format(_ o: OutboundSettings, ca: [[UInt8]] = []) -> String? {
        var q: [(String, String)] = []
        func tls(_ t: TLSVerification, _ sni: String?, insecureKey: String) {
            if let sni { q.append(("sni", sni)) }
            switch t {
            case .pinSHA256(let hex): q.append(("pin-sha256", hex))
            case .caFile: for der in ca { q.append(("ca", Base64URL.encode(der))) }
            case .insecure: q.append((insecureKey, "1"))
            case .systemStore: break
            }
        }
        let head: String
        switch o.kind {
        case .loft(let server, let carrier, let token, let t, let sni):
            head = "loft://\(encode(token))@\(server)"
            q.append(("carrier", carrier))
            tls(t, sni, insecureKey: "insecure")
            if let n = o.quicMaxPacket { q.append(("quic-max-packet", String(n))) }
        case .vless(let server, let uuid, let t, let sni, let alpn):
            head = "vless://\(uuid)@\(server)"
            q.append(("encryption", "none"))
            q.append(("security", "tls"))
            tls(t, sni, insecureKey: "allowInsecure")
            if !alpn.isEmpty { q.append(("alpn", alpn.joined(separator: ","))) }
            q.append(("type", "tcp"))
        case .sstp(let server, let user, let password, let t, let sni, let auth):
            head = "sstp://\(encode(user)):\(encode(password))@\(server)"
            tls(t, sni, insecureKey: "insecure")
            if auth != ConfigText.sstpDefaultAuth { q.append(("auth", auth.map(\.rawValue).joined(separator: ","))) }
            if let k = o.keepalive { q.append(("keepalive", ConfigText.format(k))) }
        default:
            return nil
        }
        let query = q.isEmpty ? "" : "?" + q.map { "\($0.0)=\(encode($0.1))" }.joined(separator: "&")
        return head + query + "#" + encode(o.name)
    }

    /// Percent-encoding of everything but RFC 3986's unreserved characters.
    public static func encode(_ text: String) -> String {
        var out = ""
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                let h = Array("0123456789ABCDEF")
                out += "%\(h[Int(b >> 4)])\(h[Int(b & 15)])"
            }
        }
        return out
    }
}

/// Base64 with the URL alphabet (`-` `_`) and no padding (RFC 4648 section 5), strict.
public enum Base64URL {
    public static func encode(_ bytes: [UInt8]) -> String {
        var s = Base64.encode(bytes)
        while s.hasSuffix("=") { s.removeLast() }
        return String(s.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 })
    }

    public static func decode(_ text: String) -> [UInt8]? {
        guard !text.contains("+"), !text.contains("/"), !text.contains("="), text.count % 4 != 1 else { return nil }
        var s = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        while s.count % 4 != 0 { s += "=" }
        return Base64.decode(s)
    }
}

/// PEM certificates ⇄ DER.
public enum PEM {
    /// The DER of every CERTIFICATE block; nil when there is none or one is not base64.
    public static func certificates(_ bytes: [UInt8]) -> [[UInt8]]? {
        let text = String(decoding: bytes, as: UTF8.self)
        var out: [[UInt8]] = []
        var body: String?
        for rawLine in text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            let line = rawLine.trimmingCharacters()
            if line == "-----BEGIN CERTIFICATE-----" { body = ""; continue }
            if line == "-----END CERTIFICATE-----" {
                guard let b = body, let der = Base64.decode(b) else { return nil }
                out.append(der)
                body = nil
                continue
            }
            if body != nil { body! += line }
        }
        return out.isEmpty ? nil : out
    }

    public static func text(_ certificates: [[UInt8]]) -> String {
        var out = ""
        for der in certificates {
            out += "-----BEGIN CERTIFICATE-----\n"
            var b = Substring(Base64.encode(der))
            while !b.isEmpty { out += b.prefix(64) + "\n"; b = b.dropFirst(64) }
            out += "-----END CERTIFICATE-----\n"
        }
        return out
    }
}

extension Substring {
    func trimmingCharacters() -> String {
        var s = self
        while let f = s.first, f.isWhitespace { s.removeFirst() }
        while let l = s.last, l.isWhitespace { s.removeLast() }
        return String(s)
    }
}
