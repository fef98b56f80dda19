import LoftCarriers
import LoftConfig
import LoftCore
import LoftIO
import LoftOutbounds
import LoftTLS

/// The TLS client options of a config's `tls` section.
func tlsOptions(_ verification: TLSVerification, serverName: String?) -> TLSClientOptions {
    var tls = TLSClientOptions(serverName: serverName)
    switch verification {
    case .caFile(let path): tls.caFile = path
    case .pinSHA256(let hex): tls.pinSHA256 = TLSClientOptions.parsePin(hex)
    case .insecure: tls.insecure = true
    case .systemStore: break // neither a CA file nor a pin: the system store (TLSClientOptions)
    }
    return tls
}

/// A `type: vless` outbound's settings as the outbound takes them.
func vlessOptions(server: String, uuid: String, verification: TLSVerification, serverName: String?,
                  alpn: [String], config: Configuration) throws -> VLESSOptions {
    guard let hp = HostPort(server) else { throw TLSError("server must be host:port: \(server)") }
    guard let id = VLESS.parseUUID(uuid) else { throw TLSError("not a UUID: \(uuid)") }
    return VLESSOptions(host: hp.host, port: hp.port, uuid: id, tls: tlsOptions(verification, serverName: serverName),
                        alpn: alpn, udpIdleTimeoutMs: config.limits.udpIdleTimeout.milliseconds,
                        connectTimeoutMs: config.limits.connectTimeout.milliseconds)
}

/// A `type: loft` outbound's settings as the holder takes them.
func holderOptions(server: String, carrier: String, token: String, verification: TLSVerification,
                   serverName: String?, config: Configuration) throws -> HolderOptions {
    // The loader accepted it as host:port; parsed again here only to split it.
    guard let hp = HostPort(server) else { throw TLSError("server must be host:port: \(server)") }
    let tls = tlsOptions(verification, serverName: serverName)
    let kind = CarrierKind(rawValue: carrier) ?? .ws
    let hostName = Syscall.hostName()
    return HolderOptions(
        carrier: CarrierClientOptions(kind: kind, host: hp.host, port: hp.port, tls: tls,
                                      connectTimeoutMs: config.limits.connectTimeout.milliseconds),
        token: token, clientName: "loft/\(version) \(hostName)", hold: config.hold)
}

extension Duration {
    var milliseconds: UInt64 {
        let (s, atto) = components
        return UInt64(max(0, s)) * 1000 + UInt64(max(0, atto)) / 1_000_000_000_000_000
    }
}
