// Address text as configs, SOCKS5 domain names and state files carry it: IPAddress, Endpoint and
// IPPrefix from text, and Socks5.destination(name:). What parses prints back to text that parses
// to the same value.
import LoftCore
import LoftInputs

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let a = IPAddress(text) {
        guard IPAddress(a.description) == a, !text.contains("\0") else { fatalError("address \(text) -> \(a)") }
    }
    if let e = Endpoint(text) {
        guard Endpoint(e.description) == e, !text.contains("\0") else { fatalError("endpoint \(text) -> \(e)") }
    }
    if let p = IPPrefix(text) {
        guard IPPrefix(p.description) == p, !text.contains("\0") else { fatalError("prefix \(text) -> \(p)") }
        _ = p.contains(p.address)
    }
    if case .ip(let e) = Socks5.destination(name: text, port: 1), text.contains("\0") { fatalError("destination \(text) -> \(e)") }
    return 0
}
