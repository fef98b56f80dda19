// The .loft file reader (docs/links.md): errors name a line of the file; what it reads writes
// back to a file that reads the same.
import LoftLinks

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    do {
        let cs = try ConnectionFile.read(bytes)
        let again = ConnectionFile.write(cs.compactMap { Link.format($0.outbound, ca: $0.ca) })
        let back = try ConnectionFile.read(Array(again.utf8))
        if back.map(\.outbound.kind) != cs.map(\.outbound.kind) { fatalError("does not round-trip") }
    } catch let e as FileError {
        let lines = bytes.filter { $0 == 10 }.count + 1
        if e.line < 0 || e.line > lines { fatalError("line \(e.line) of \(lines)") }
    } catch {
        fatalError("unexpected \(error)")
    }
    return 0
}
