// /proc/self/status as loft reads it for its capability check: Privileges.effective finds the
// CapEff line in any text (or nothing), and Privileges.missing names exactly the capabilities
// that set lacks.
import LoftCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let set = Privileges.effective(statusText: text)
    if set != nil && !text.contains("CapEff:") { fatalError("a set without a CapEff line") }
    let all = Capability.allCases.map { ($0, "fuzz") }
    let said = Privileges.missing(all, program: "loft", effective: set)
    for c in Capability.allCases where (said?.contains(c.name) ?? false) == Privileges.has(c, in: set) {
        fatalError("\(c.name): said missing \(said ?? "-") but has \(Privileges.has(c, in: set))")
    }
    return 0
}
