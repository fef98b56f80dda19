// The client side of SOCKS5 (loft's tests and tools read a server's reply; the UDP relay's
// datagrams to the client): parseReply and the UDP header, and re-encoding what parsed.
import LoftCore
import LoftInputs

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    if case .complete(let r, let n) = Socks5.parseReply(p) {
        guard n <= size else { fatalError("reply longer than its bytes") }
        if case .ip(let e) = r.bound, let code = Socks5.ReplyCode(rawValue: r.code) {
            let again = Socks5.reply(code, bound: e)
            // An address literal sent as a name (ATYP 3) is read as that address: written back as one.
            guard again.elementsEqual(p[..<n]) || p[2] != 0 || p[3] == 3 else { fatalError("reply does not re-encode") }
        }
    }
    if case .complete(let h, _) = Socks5.UDPHeader.parse(p) {
        let out = Socks5.UDPHeader.encode(h.destination, payload: Array(p[h.length...]))
        guard case .complete(let h2, _) = Socks5.UDPHeader.parse(out), h2.destination == h.destination else {
            fatalError("UDP header does not re-encode: \(h)")
        }
    }
    return 0
}
