// loft's configuration file: libyaml through the CYAML shim, then ConfigLoader's decoder and
// every value parser it uses (durations, sizes, prefixes, endpoints, rules, outbounds). Relative
// paths in the file resolve in an empty folder. A refused file must say where (line:column or
// the file name).
@testable import LoftConfig

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    do {
        _ = try ConfigLoader.parse(bytes: bytes, file: "fuzz.yaml", baseDirectory: "/var/empty/loft-fuzz")
    } catch {
        if !error.description.hasPrefix("fuzz.yaml") { fatalError("error without its file: \(error)") }
    }
    return 0
}
