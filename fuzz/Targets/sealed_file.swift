// The encrypted-file reader (docs/links.md): any bytes fail cleanly or open; a file it wrote
// opens to what was sealed, and one changed byte of it never opens.
import LoftLinks

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let pass = Array("fuzz".utf8)
    _ = try? SealedFile.open(bytes, passphrase: pass)
    // Sealing costs a key derivation; do it for a few inputs only.
    if size > 0 && size < 64 && bytes[0] == 0x7f {
        let sealed = SealedFile.seal(bytes, passphrase: pass, iterations: SealedFile.iterationRange.lowerBound)
        guard (try? SealedFile.open(sealed, passphrase: pass)) == bytes else { fatalError("does not open") }
        var changed = sealed
        changed[Int(bytes[size - 1]) % sealed.count] ^= 0x80
        if (try? SealedFile.open(changed, passphrase: pass)) != nil { fatalError("a changed byte opened") }
    }
    return 0
}
