// The encrypted-file reader (docs/links.md): any bytes fail cleanly or open. With a fixed key in
// place of the passphrase's derivation (the same checks, thousands of inputs a second); a file
// sealed under that key opens to what was sealed, and one changed byte of it never opens.
@testable import LoftLinks

let key = [UInt8](repeating: 7, count: 32)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    _ = try? SealedFile.open(bytes) { _, _ in key }
    if size > 0 && size < 256 && bytes[0] == 0x7f {
        let sealed = SealedFile.seal(bytes, key: key, iterations: SealedFile.iterationRange.lowerBound)
        guard (try? SealedFile.open(sealed) { _, _ in key }) == bytes else { fatalError("does not open") }
        var changed = sealed
        changed[Int(bytes[size - 1]) % sealed.count] ^= 0x80
        if (try? SealedFile.open(changed) { _, _ in key }) != nil { fatalError("a changed byte opened") }
    }
    return 0
}
