// loft-front's configuration file: libyaml through the CYAML shim, then FrontConfigLoader's
// decoder (listen, tls, tokens, pools, limits, state-file, ...). TLS files are not checked for
// existence (checkFiles: false), so the fuzzer reaches the keys after them.
@testable import LoftConfig

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    do {
        _ = try FrontConfigLoader.parse(bytes: bytes, file: "front.yaml", baseDirectory: "/var/empty/loft-fuzz",
                                        checkFiles: false)
    } catch {
        if !error.description.hasPrefix("front.yaml") { fatalError("error without its file: \(error)") }
    }
    return 0
}
