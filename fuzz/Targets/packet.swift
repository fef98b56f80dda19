import LoftCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    if case .success(let s) = PacketSummary.parse(p, maxLength: 65535) {
        _ = s.transportChecksumIsValid(p)
    }
    return 0
}
