// The text decoders behind config values and the carriers' keys: Base64.decode (strict; a
// decoded value encodes back to the same text), Hex.decode, and TLSClientOptions.parsePin.
import LoftCarriers
import LoftCore
import LoftTLS

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let bytes = Base64.decode(text), Base64.encode(bytes) != text { fatalError("base64 \(text) does not round-trip") }
    if let bytes = Hex.decode(text), Hex.encode(bytes) != text.lowercased() { fatalError("hex \(text) does not round-trip") }
    if let pin = TLSClientOptions.parsePin(text), pin.count != 32 { fatalError("a pin of \(pin.count) bytes") }
    return 0
}
