import CImage
import CQRencode
import CZbar

/// QR codes of links (libqrencode) for `loft share --qr / --png`.
public enum QRCode {
    /// Quiet zone, in modules, around the code (ISO/IEC 18004 asks for 4).
    public static let quietZone = 4

    /// The modules (1 dark) of `text` with error correction M, row by row, and the width.
    public static func modules(_ text: String) -> (width: Int, dark: [UInt8])? {
        let bytes = Array(text.utf8)
        var width: Int32 = 0
        guard let p = cqrencode_encode(bytes, bytes.count, 1, &width) else { return nil }
        defer { cqrencode_free(p) }
        let w = Int(width)
        return (w, Array(UnsafeBufferPointer(start: p, count: w * w)))
    }

    /// The code in UTF-8 half blocks, two module rows per line, for a terminal with a dark
    /// background: light modules are drawn (`█ ▀ ▄`), dark ones are spaces — the convention of
    /// `qrencode -t UTF8`. Width in columns: modules + 2 × quiet zone.
    public static func terminal(_ text: String) -> String? {
        guard let (w, dark) = modules(text) else { return nil }
        let q = quietZone, size = w + 2 * q
        func isDark(_ x: Int, _ y: Int) -> Bool {
            let mx = x - q, my = y - q
            guard mx >= 0, my >= 0, mx < w, my < w else { return false }
            return dark[my * w + mx] != 0
        }
        var out = ""
        var y = 0
        while y < size {
            for x in 0..<size {
                let top = !isDark(x, y), bottom = y + 1 < size ? !isDark(x, y + 1) : false
                out += top && bottom ? "█" : top ? "▀" : bottom ? "▄" : " "
            }
            out += "\n"
            y += 2
        }
        return out
    }

    /// A grayscale PNG of the code, `scale` pixels a module, with the quiet zone.
    public static func png(_ text: String, scale: Int = 8) -> [UInt8]? {
        guard let (w, dark) = modules(text) else { return nil }
        let size = (w + 2 * quietZone) * scale
        var pixels = [UInt8](repeating: 255, count: size * size)
        for my in 0..<w {
            for mx in 0..<w where dark[my * w + mx] != 0 {
                for dy in 0..<scale {
                    let row = ((my + quietZone) * scale + dy) * size
                    for dx in 0..<scale { pixels[row + (mx + quietZone) * scale + dx] = 0 }
                }
            }
        }
        var length = 0
        guard let p = cimage_encode_png(pixels, Int32(size), Int32(size), &length) else { return nil }
        defer { cimage_free(p) }
        return Array(UnsafeBufferPointer(start: p, count: length))
    }
}

/// A problem with a picture given to `loft import`.
public struct PictureError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ d: String) { description = d }
}

/// QR codes in a PNG or JPEG picture (libpng / libjpeg to grayscale, zbar to find the codes).
public enum Picture {
    /// 64 megapixels: more than any phone photo.
    public static let maximumPixels = 64 << 20

    public static func looksLike(_ bytes: [UInt8]) -> Bool {
        bytes.starts(with: [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]) || bytes.starts(with: [0xff, 0xd8, 0xff])
    }

    /// The grayscale pixels of a PNG or JPEG.
    public static func gray(_ bytes: [UInt8]) throws(PictureError) -> (width: Int, height: Int, pixels: [UInt8]) {
        var w: Int32 = 0, h: Int32 = 0
        var err = [CChar](repeating: 0, count: 256)
        guard let p = cimage_decode_gray(bytes, bytes.count, maximumPixels, &w, &h, &err, err.count) else {
            throw PictureError(String(decoding: err.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        defer { cimage_free(p) }
        return (Int(w), Int(h), Array(UnsafeBufferPointer(start: p, count: Int(w) * Int(h))))
    }

    /// The text of every QR code in the picture, in the order zbar finds them (at least one).
    public static func codes(_ bytes: [UInt8]) throws(PictureError) -> [String] {
        let image = try gray(bytes)
        var found = try scan(image.pixels, image.width, image.height)
        // A large photo: zbar's finder does better on a smaller picture of the same code.
        var (pixels, w, h) = (image.pixels, image.width, image.height)
        while found.isEmpty && min(w, h) >= 800 {
            (pixels, w, h) = halve(pixels, w, h)
            found = try scan(pixels, w, h)
        }
        guard !found.isEmpty else { throw PictureError("no QR code found in the picture (\(image.width)x\(image.height))") }
        return try found.map { (b: [UInt8]) throws(PictureError) -> String in
            guard let s = String(validating: b, as: UTF8.self) else { throw PictureError("a QR code holds bytes that are not text") }
            return s
        }
    }

    static func scan(_ pixels: [UInt8], _ w: Int, _ h: Int) throws(PictureError) -> [[UInt8]] {
        final class Box { var items: [[UInt8]] = [] }
        let box = Box()
        let n = withExtendedLifetime(box) {
            czbar_scan(pixels, Int32(w), Int32(h), { ctx, data, len in
                let b = Unmanaged<Box>.fromOpaque(ctx!).takeUnretainedValue()
                b.items.append(Array(UnsafeBufferPointer(start: data, count: len)))
            }, Unmanaged.passUnretained(box).toOpaque())
        }
        guard n >= 0 else { throw PictureError("zbar could not scan the picture") }
        return box.items
    }

    /// Half the size, each pixel the mean of four.
    static func halve(_ p: [UInt8], _ w: Int, _ h: Int) -> ([UInt8], Int, Int) {
        let w2 = w / 2, h2 = h / 2
        var out = [UInt8](repeating: 0, count: w2 * h2)
        for y in 0..<h2 {
            for x in 0..<w2 {
                let a = Int(p[2 * y * w + 2 * x]) + Int(p[2 * y * w + 2 * x + 1]) + Int(p[(2 * y + 1) * w + 2 * x]) + Int(p[(2 * y + 1) * w + 2 * x + 1])
                out[y * w2 + x] = UInt8(a / 4)
            }
        }
        return (out, w2, h2)
    }
}
