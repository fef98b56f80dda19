// UDP datagrams of a new conversation as a QUIC client sends them through the TUN: QUICSniffer
// (LoftSniff) opens v1 and v2 Initials (RFC 9001 §5, with OpenSSL through CTLS) and joins their
// CRYPTO frames into a ClientHello. The input's first byte picks: even, the rest is datagrams
// (each a 2-byte length and its bytes) fed in order; odd, the rest is an Initial's decrypted
// payload, whose frames are read (QUICInitial.frames) and their CRYPTO data parsed as a hello.
// A name is a valid host name; CRYPTO data stays within its frame.
@testable import LoftSniff

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    guard let mode = p.first else { return 0 }
    if mode & 1 == 0 {
        var s = QUICSniffer()
        var at = 1
        while at + 2 <= size {
            let n = min(Int(p[at]) << 8 | Int(p[at + 1]), size - at - 2)
            at += 2
            let r = s.take(UnsafeRawBufferPointer(rebasing: p[at..<(at + n)]))
            at += n
            if case .name(let name) = r {
                guard Array(name.utf8).withUnsafeBytes({ HostName.validate($0) }) == name else { fatalError("bad name \(name)") }
            }
        }
        return 0
    }
    var packet = QUICInitial.Packet(version: QUICInitial.version1, dcid: [])
    let payload = UnsafeRawBufferPointer(rebasing: p[1...])
    guard QUICInitial.frames(payload, into: &packet) else { return 0 }
    var total = 0
    for c in packet.crypto {
        total += c.data.count
        guard total <= payload.count else { fatalError("CRYPTO data past the payload") }
        _ = c.data.withUnsafeBytes { TLSClientHello.serverName(handshake: $0) }
    }
    return 0
}
