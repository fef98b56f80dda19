// What a local process sends loft to start a capture (`capture …` on the control socket): the
// option parser (CaptureRequest.parse: a request it takes reads back to itself from its own
// line) and, for a filter it takes, libpcap's compiler and the compiled program run on the
// input's bytes as a packet (PacketFilter).
import LoftControl
@testable import LoftCapture

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard size > 0, size <= 1024 else { return 0 }
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    guard let line = String(validating: bytes, as: UTF8.self), !line.contains("\n"), !line.contains("\0") else { return 0 }
    guard case .success(let r) = CaptureRequest.parse("capture " + line) else { return 0 }
    guard case .success(let again) = CaptureRequest.parse(r.line), again == r else { fatalError("\(r.line) does not read back") }
    guard CaptureRequest.snaplenRange.contains(r.snaplen) else { fatalError("snaplen \(r.snaplen)") }
    if let expr = r.filter, case .success(let f) = PacketFilter.compile(expr, snaplen: r.snaplen) {
        _ = f.matches(bytes, captured: bytes.count, length: bytes.count)
    }
    return 0
}
