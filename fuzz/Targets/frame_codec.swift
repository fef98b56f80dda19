// The loft frame codec: FrameDecoder fed the input in pieces (sizes from the input's last byte);
// every frame it returns must encode again (FrameEncoder) to a frame that decodes equal.
import LoftCore
@testable import LoftProtocol

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let p = UnsafeRawBufferPointer(start: data, count: size - 1)
    let piece = Int(data![size - 1]) + 1
    var d = FrameDecoder()
    var at = 0
    while at < p.count {
        let n = min(piece, p.count - at)
        d.append(UnsafeRawBufferPointer(rebasing: p[at..<at + n]))
        at += n
        while true {
            let frame: Frame?
            do { frame = try d.next() } catch { return 0 }
            guard let frame else { break }
            var q = ByteQueue()
            do { try FrameEncoder.encode(frame, into: &q) } catch { fatalError("decoded \(frame) does not encode: \(error)") }
            var again = FrameDecoder()
            again.append(q.takeAll())
            guard let f2 = try? again.next(), f2 == frame, again.bufferedCount == 0 else {
                fatalError("\(frame) does not survive encode/decode")
            }
        }
        if d.bufferedCount >= LoftWire.maxFrameSize { fatalError("decoder holds \(d.bufferedCount) bytes") }
    }
    _ = try? d.finish()
    return 0
}
