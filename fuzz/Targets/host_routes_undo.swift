// Host mode's state file (/run/loft/routes-TUN.undo), read as root at the next start: each line
// parsed as HostRoutes does; only the two forms loft writes parse, and a parsed line writes back
// to the same change.
@testable import LoftInputs

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeRawBufferPointer(start: data, count: size), as: UTF8.self)
    for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
        guard let u = HostRoutes.Undo(line: String(line)) else { continue }
        guard u.line.hasPrefix("ip -4 ") || u.line.hasPrefix("ip -6 ") else { fatalError("wrote \(u.line)") }
        guard HostRoutes.Undo(line: u.line) == u else { fatalError("\(line) -> \(u) -> \(u.line) does not read back") }
    }
    return 0
}
