// A TCP flow's first bytes as an app sends them through the TUN: StreamSniffer (LoftSniff) reads
// a TLS ClientHello's SNI (records, a hello over several records) or an HTTP/1.x Host. Any
// prefix of bytes that name a host must ask for more or give the same name; a name is a valid
// lowercase host name.
import LoftSniff

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    let (whole, _) = StreamSniffer.sniff(p)
    guard case .name(let name) = whole else { return 0 }
    guard !name.isEmpty, name.utf8.count <= 253, name == name.lowercased(),
          Array(name.utf8).withUnsafeBytes({ HostName.validate($0) }) == name else { fatalError("bad name \(name)") }
    for cut in [size / 2, size - 1] where cut >= 0 {
        switch StreamSniffer.sniff(UnsafeRawBufferPointer(rebasing: p[0..<cut])).0 {
        case .needMore: continue
        case .name(let n) where n == name: continue
        case let other: fatalError("prefix of \(cut) bytes gave \(other), the whole \(name)")
        }
    }
    return 0
}
