// Fuzz target: DNSWire.answer (LoftIO/DNSWire.swift: c-ares's A and AAAA answer parsers behind
// loft's shim), as sstp's lookups over the link read what the link's DNS server sends. The id is
// taken from the input, so the parsers see every input; addresses come out of the right family,
// at most 32; a query for a name from the input is built and is itself a parsable message.
import LoftCore
import LoftIO

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    guard size >= 2 else { return 0 }
    let id = UInt16(p[0]) << 8 | UInt16(p[1])
    for type in [DNSWire.RecordType.a, .aaaa] {
        if case .addresses(let a, let ttl) = DNSWire.answer(p, type: type, id: id) {
            precondition(!a.isEmpty && a.count <= 32 && ttl >= 0)
            precondition(a.allSatisfy { $0.isIPv4 == (type == .a) }, "address of the wrong family")
        }
    }
    let name = String(decoding: p.prefix(64), as: UTF8.self)
    if let q = DNSWire.query(name, type: .a, id: id) {
        precondition(q.count >= 12 && q[0] == p[0] && q[1] == p[1] && q[2] & 0x80 == 0)
    }
    return 0
}
