// What a SOCKS5 client sends loft: the greeting, the request, and UDP datagrams' headers, parsed
// as Socks5Server does (from the bytes received so far); a parsed request re-encodes to itself.
import LoftCore
import LoftInputs

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    var rest = p
    if case .complete(_, let n) = Socks5.Greeting.parse(rest) {
        guard n <= rest.count else { fatalError("greeting longer than its bytes") }
        rest = UnsafeRawBufferPointer(rebasing: rest[n...])
    }
    if case .complete(let r, let n) = Socks5.Request.parse(rest) {
        guard n <= rest.count, n <= Socks5.maxRequestLength else { fatalError("request length \(n)") }
        guard case .complete(r, r.encoded.count) = Socks5.Request.parse(r.encoded) else {
            fatalError("a parsed request does not re-encode to itself: \(r)")
        }
    }
    // The server parses whatever has arrived so far: every prefix.
    for cut in stride(from: 0, to: min(size, 300), by: 7) {
        _ = Socks5.Request.parse(UnsafeRawBufferPointer(rebasing: p[..<cut]))
    }
    _ = Socks5.UDPHeader.fragmentByte(p)
    if case .complete(let h, let n) = Socks5.UDPHeader.parse(p) {
        guard n <= size, h.length == n else { fatalError("UDP header length \(n)") }
    }
    return 0
}
