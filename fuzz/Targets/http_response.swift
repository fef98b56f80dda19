// What loft (a carrier client) reads from the front: the HTTP/1.1 response head
// (HTTPParser.parseResponse), the WebSocket 101 check (WSHandshake.validate(response:)), and a
// get carrier's chunked download (ChunkedDecoder) fed in pieces.
import LoftCarriers
import LoftHTTP

let key = "dGhlIHNhbXBsZSBub25jZQ=="

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    var body = 0
    if case .complete(let head, let consumed) = HTTPParser.parseResponse(p) {
        guard consumed <= size else { fatalError("head of \(consumed) bytes") }
        _ = WSHandshake.validate(response: head, key: key)
        body = consumed
    }
    // The body in pieces of 1, 2, 3, ... bytes: the decoder keeps its state between them.
    var chunks = ChunkedDecoder()
    var end = body
    var step = 1
    var total = 0
    var pos = body
    while end < size {
        end = min(size, end + step)
        step += 1
        let piece = UnsafeRawBufferPointer(rebasing: p[..<end])
        while pos < end {
            let before = pos
            switch chunks.next(piece, &pos) {
            case .data(let r):
                guard r.lowerBound >= before, r.upperBound == pos, pos <= end, !r.isEmpty else { fatalError("chunk range \(r)") }
                total += r.count
            case .needMore:
                guard pos == end else { fatalError("needMore with bytes left") }
            case .end, .failure:
                return 0
            }
        }
    }
    guard total <= size else { fatalError("more chunk data than bytes") }
    return 0
}
