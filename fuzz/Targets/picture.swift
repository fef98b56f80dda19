// Pictures given to `loft import` (docs/links.md): PNG and JPEG bytes to grayscale (libpng,
// libjpeg through CImage) and QR codes in them (zbar through CZbar). Any bytes fail cleanly or
// give codes; a QR PNG loft draws of the input's text reads back to that text.
import LoftLinks

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if Picture.looksLike(bytes) { _ = try? Picture.codes(bytes) }
    if size > 1 && size < 200 && bytes[0] == 0x21 {
        let text = String(decoding: bytes.dropFirst(), as: UTF8.self)
        guard let png = QRCode.png(text, scale: 2) else { fatalError("no QR code for \(size - 1) bytes") }
        guard let back = try? Picture.codes(png), back == [text] else { fatalError("\(text) does not read back") }
    }
    return 0
}
