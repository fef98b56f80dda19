// The output batch's ACK thinning: PureAck.matches and PureAck.supersedes on two packets (the
// input split at its first byte's position).
import LoftCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    _ = PureAck.matches(p)
    guard size > 1 else { return 0 }
    let cut = 1 + Int(p[0]) % size
    let a = UnsafeRawBufferPointer(rebasing: p[1..<cut]), b = UnsafeRawBufferPointer(rebasing: p[cut...])
    if PureAck.supersedes(a, b) && PureAck.supersedes(b, a) && a.elementsEqual(b) {
        fatalError("an ACK supersedes its own copy")
    }
    _ = PureAck.supersedes(b, a)
    _ = PureAck.supersedes(a, a)
    return 0
}
