// The link parser (docs/links.md): any text either fails with a column inside the link, or is a
// connection whose own link parses back to the same connection.
import LoftLinks

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    do {
        let c = try Link.parse(text)
        guard let again = Link.format(c.outbound, ca: c.ca) else { fatalError("no link for a parsed connection") }
        let back = try Link.parse(again)
        if back.outbound.kind != c.outbound.kind || back.ca != c.ca || back.name != c.name
            || back.outbound.quicMaxPacket != c.outbound.quicMaxPacket || back.outbound.keepalive != c.outbound.keepalive {
            fatalError("\(text) → \(again) does not round-trip")
        }
    } catch {
        if error.column < 1 || error.column > max(1, text.count) { fatalError("column \(error.column) outside \(text.count) characters") }
    }
    return 0
}
