// MS-CHAPv2 (RFC 2759) and its MPPE master keys (RFC 3079 3), the client's side. MD4 and DES
// come from OpenSSL's legacy provider (CTLS), SHA-1 and HMAC from OpenSSL's default one.
import CTLS

public enum SSTPCryptoError: Error, Equatable, CustomStringConvertible {
    case unavailable(String)
    public var description: String {
        switch self { case .unavailable(let why): return why }
    }
}

/// A NUL-terminated C message buffer as text.
func text(_ buf: [CChar]) -> String {
    String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

enum Crypto {
    static func md4(_ data: [UInt8]) throws(SSTPCryptoError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        var err = [CChar](repeating: 0, count: 256)
        let r = data.withUnsafeBytes { ctls_md4($0.baseAddress, $0.count, &out, &err, err.count) }
        guard r == 0 else { throw .unavailable(text(err)) }
        return out
    }

    static func desECB(key: [UInt8], block: [UInt8]) throws(SSTPCryptoError) -> [UInt8] {
        precondition(key.count == 8 && block.count == 8)
        var out = [UInt8](repeating: 0, count: 8)
        var err = [CChar](repeating: 0, count: 256)
        guard ctls_des_ecb(key, block, &out, &err, err.count) == 0 else { throw .unavailable(text(err)) }
        return out
    }

    static func sha1(_ parts: [UInt8]...) -> [UInt8] {
        let all = Array(parts.joined())
        var out = [UInt8](repeating: 0, count: 20)
        all.withUnsafeBytes { ctls_sha1($0.baseAddress, $0.count, &out) }
        return out
    }

    static func hmac(sha256: Bool, key: [UInt8], data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: sha256 ? 32 : 20)
        let r = data.withUnsafeBytes { d in
            key.withUnsafeBytes { k in ctls_hmac(sha256 ? 1 : 0, k.baseAddress, k.count, d.baseAddress, d.count, &out) }
        }
        precondition(r == 0, "HMAC failed")
        return out
    }
}

/// The client's computations of MS-CHAPv2.
public enum MSCHAPv2 {
    /// The password as UTF-16 little-endian (RFC 2759 uses "Unicode" passwords), at most 256 characters.
    static func unicode(_ password: String) -> [UInt8] {
        Array(password.utf16.prefix(256).flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] })
    }

    /// NtPasswordHash: MD4 of the Unicode password.
    public static func passwordHash(_ password: String) throws(SSTPCryptoError) -> [UInt8] {
        try Crypto.md4(unicode(password))
    }

    /// HashNtPasswordHash.
    public static func passwordHashHash(_ hash: [UInt8]) throws(SSTPCryptoError) -> [UInt8] { try Crypto.md4(hash) }

    /// ChallengeHash: the first 8 bytes of SHA-1(peer challenge, authenticator challenge, user name).
    public static func challengeHash(peer: [UInt8], authenticator: [UInt8], user: [UInt8]) -> [UInt8] {
        Array(Crypto.sha1(peer, authenticator, user).prefix(8))
    }

    /// The 7 bytes of a DES key spread over 8, each with its parity bit (ignored by DES) clear.
    static func desKey(_ seven: ArraySlice<UInt8>) -> [UInt8] {
        let k = Array(seven)
        return [k[0] & 0xFE,
                (k[0] << 7 | k[1] >> 1) & 0xFE,
                (k[1] << 6 | k[2] >> 2) & 0xFE,
                (k[2] << 5 | k[3] >> 3) & 0xFE,
                (k[3] << 4 | k[4] >> 4) & 0xFE,
                (k[4] << 3 | k[5] >> 5) & 0xFE,
                (k[5] << 2 | k[6] >> 6) & 0xFE,
                k[6] << 1]
    }

    /// ChallengeResponse: the 8-byte challenge DES-encrypted under three keys cut from the
    /// password hash padded to 21 bytes.
    public static func challengeResponse(challenge: [UInt8], passwordHash: [UInt8]) throws(SSTPCryptoError) -> [UInt8] {
        let z = passwordHash + [UInt8](repeating: 0, count: 5)
        var out: [UInt8] = []
        for i in 0..<3 { out += try Crypto.desECB(key: desKey(z[(i * 7)..<(i * 7 + 7)]), block: challenge) }
        return out
    }

    /// GenerateNTResponse.
    public static func ntResponse(authenticatorChallenge: [UInt8], peerChallenge: [UInt8], user: [UInt8],
                                  password: String) throws(SSTPCryptoError) -> [UInt8] {
        let c = challengeHash(peer: peerChallenge, authenticator: authenticatorChallenge, user: user)
        return try challengeResponse(challenge: c, passwordHash: passwordHash(password))
    }

    static let magic1 = Array("Magic server to client signing constant".utf8)
    static let magic2 = Array("Pad to make it do more than one iteration".utf8)

    /// GenerateAuthenticatorResponse: "S=" and 40 upper-case hex digits.
    public static func authenticatorResponse(password: String, ntResponse: [UInt8], peerChallenge: [UInt8],
                                             authenticatorChallenge: [UInt8], user: [UInt8]) throws(SSTPCryptoError) -> String {
        let hh = try passwordHashHash(passwordHash(password))
        let digest = Crypto.sha1(hh, ntResponse, magic1)
        let c = challengeHash(peer: peerChallenge, authenticator: authenticatorChallenge, user: user)
        let d = Crypto.sha1(digest, c, magic2)
        return "S=" + d.map { hexUpper($0) }.joined()
    }

    static func hexUpper(_ b: UInt8) -> String {
        let d = Array("0123456789ABCDEF")
        return String([d[Int(b >> 4)], d[Int(b & 15)]])
    }

    // MARK: RFC 3079 3: the MPPE master keys

    static let masterMagic = Array("This is the MPPE Master Key".utf8)
    static let sendMagicClient = Array("On the client side, this is the send key; on the server side, it is the receive key.".utf8)
    static let receiveMagicClient = Array("On the client side, this is the receive key; on the server side, it is the send key.".utf8)
    static let shsPad1 = [UInt8](repeating: 0x00, count: 40)
    static let shsPad2 = [UInt8](repeating: 0xF2, count: 40)

    /// GetMasterKey.
    public static func masterKey(passwordHashHash: [UInt8], ntResponse: [UInt8]) -> [UInt8] {
        Array(Crypto.sha1(passwordHashHash, ntResponse, masterMagic).prefix(16))
    }

    /// The client's 16-byte MasterSendKey and MasterReceiveKey (GetAsymmetricStartKey, IsServer false).
    public static func clientMasterKeys(password: String, ntResponse: [UInt8]) throws(SSTPCryptoError) -> (send: [UInt8], receive: [UInt8]) {
        let mk = masterKey(passwordHashHash: try passwordHashHash(passwordHash(password)), ntResponse: ntResponse)
        let send = Array(Crypto.sha1(mk, shsPad1, sendMagicClient, shsPad2).prefix(16))
        let receive = Array(Crypto.sha1(mk, shsPad1, receiveMagicClient, shsPad2).prefix(16))
        return (send, receive)
    }

    /// The Value of the client's Response (49 bytes): peer challenge, 8 zero bytes, NT-Response, flags 0.
    public static func responseValue(peerChallenge: [UInt8], ntResponse: [UInt8]) -> [UInt8] {
        peerChallenge + [UInt8](repeating: 0, count: 8) + ntResponse + [0]
    }

    /// The fields of a Failure message ("E=691 R=0 C=… V=3 M=…"): the error number and the text after M=.
    public static func failureReason(_ message: String) -> String {
        var error: String?
        var text: String?
        let fields = message.split(separator: " ", omittingEmptySubsequences: false)
        for (i, field) in fields.enumerated() {
            if field.hasPrefix("E="), error == nil { error = String(field.dropFirst(2)) }
            if field.hasPrefix("M=") {
                text = String(field.dropFirst(2)) + fields[(i + 1)...].map { " " + $0 }.joined()
                break
            }
        }
        let known = ["646": "restricted logon hours", "647": "account disabled", "648": "password expired",
                     "649": "no dial-in permission", "691": "authentication failure", "709": "changing the password failed"]
        var parts: [String] = []
        if let error { parts.append("E=\(error)" + (known[error].map { " (\($0))" } ?? "")) }
        if let text, !text.isEmpty { parts.append(text) }
        return parts.isEmpty ? message : parts.joined(separator: ": ")
    }
}

/// SSTP's crypto binding (MS-SSTP 3.2.5.2): the Compound MAC over the Call Connected message.
public enum CryptoBinding {
    static let cmkSeed = Array("SSTP inner method derived CMK".utf8)

    /// The client's HLAK: MasterSendKey | MasterReceiveKey for MS-CHAPv2, 32 zero bytes when the
    /// authentication gave no keys (PAP).
    public static func clientHLAK(send: [UInt8], receive: [UInt8]) -> [UInt8] {
        Array((send + receive + [UInt8](repeating: 0, count: 32)).prefix(32))
    }
    public static let noKeysHLAK = [UInt8](repeating: 0, count: 32)

    /// CMK = HMAC(HLAK, seed | output length as 2 bytes little-endian | 0x01): T1 of the PRF.
    public static func cmk(hlak: [UInt8], sha256: Bool) -> [UInt8] {
        let len = sha256 ? 32 : 20
        return Crypto.hmac(sha256: sha256, key: hlak, data: cmkSeed + [UInt8(len), 0, 1])
    }

    /// The Call Connected message with its binding: `certHash` is the server certificate's digest
    /// (SHA-256, or SHA-1 when only that is offered), the MAC is HMAC(CMK, the message with a
    /// zero MAC).
    public static func callConnected(request: SSTP.BindingRequest, certHash: [UInt8], hlak: [UInt8]) -> [UInt8] {
        let sha256 = request.hashBitmask & SSTP.hashSHA256 != 0
        var binding = SSTP.Binding(hashProtocol: sha256 ? SSTP.hashSHA256 : SSTP.hashSHA1, nonce: request.nonce,
                                   certHash: certHash, compoundMAC: [])
        let zeroed = SSTP.encode(SSTP.ControlMessage(.callConnected, [binding.attribute]))!
        binding = SSTP.Binding(hashProtocol: binding.hashProtocol, nonce: request.nonce, certHash: certHash,
                               compoundMAC: Crypto.hmac(sha256: sha256, key: cmk(hlak: hlak, sha256: sha256), data: zeroed))
        return SSTP.encode(SSTP.ControlMessage(.callConnected, [binding.attribute]))!
    }
}
