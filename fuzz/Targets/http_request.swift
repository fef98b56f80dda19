// What a carrier client sends loft-front before a carrier exists: the HTTP/1.1 request head
// (HTTPParser.parseRequest, from the bytes received so far, as PendingRequest parses them) and
// the checks CarrierListener makes of a head: Host, the WebSocket upgrade (WSHandshake.validate),
// the get carrier's session parameter; then the POST body's chunked coding (ChunkedDecoder).
import LoftCarriers
import LoftCore
import LoftHTTP

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    guard case .complete(let head, let consumed) = HTTPParser.parseRequest(p) else { return 0 }
    guard consumed <= size, consumed <= HTTPParser.maxHeadBytes else { fatalError("head of \(consumed) bytes") }
    _ = try? head.headers.single("host")
    _ = head.headers.contains("connection", token: "upgrade")
    _ = try? WSHandshake.validate(request: head)
    if let id = try? head.queryParameter("session") { _ = Hex.decode(id.lowercased()) }
    var chunks = ChunkedDecoder()
    var pos = consumed
    while true {
        switch chunks.next(p, &pos) {
        case .data(let r):
            guard r.lowerBound >= consumed, r.upperBound <= size else { fatalError("chunk \(r) outside the body") }
            continue
        case .needMore, .end, .failure: return 0
        }
    }
}
