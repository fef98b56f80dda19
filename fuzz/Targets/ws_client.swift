// WebSocket frames the front sends loft (WSDecoder, client role: unmasked frames), fed in
// pieces whose sizes come from the input's first byte, as the ws carrier reads them.
import LoftCarriers
import LoftHTTP

let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard size > 1, size - 1 <= buffer.count else { return 0 }
    let piece = Int(data![0]) + 1
    buffer.copyMemory(from: UnsafeRawBufferPointer(start: data! + 1, count: size - 1))
    var decoder = WSDecoder(role: .client)
    var end = 0
    var pos = 0
    while end < size - 1 {
        end = min(size - 1, end + piece)
        let avail = UnsafeMutableRawBufferPointer(rebasing: buffer[..<end])
        loop: while true {
            let before = pos
            switch decoder.next(avail, &pos) {
            case .needMore:
                // The carrier keeps the unread bytes of an unfinished header and reads more.
                break loop
            case .data(let r):
                guard r.lowerBound >= before, r.upperBound <= end, pos == r.upperBound else { fatalError("data range \(r)") }
            case .ping(let b), .pong(let b):
                guard b.count <= 125 else { fatalError("control payload of \(b.count)") }
            case .close, .failure:
                return 0
            }
            guard pos <= end else { fatalError("position \(pos) past \(end)") }
        }
    }
    return 0
}
