// The holder's state file (an outbound's state-file): read with StateFile.read's size cap, as
// HolderOutbound does, and decoded by HolderOutbound.decodeState; an id that decodes is written
// back in the same form and decodes equal.
import Glibc
import LoftCore
@testable import LoftOutbounds

let path = "/tmp/loft-fuzz-holder-state.\(getpid())"

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { fatalError("cannot write \(path)") }
    if size > 0 { _ = write(fd, data, size) }
    close(fd)
    let bytes: [UInt8]
    let result = StateFile.read(path, maxBytes: 4096)
    unlink(path)
    switch result {
    case .bytes(let b): bytes = b
    case .missing: fatalError("\(path) vanished")
    case .failed: guard size > 4096 else { fatalError("a file of \(size) bytes refused") }; return 0
    }
    guard bytes.count == size else { fatalError("read \(bytes.count) of \(size) bytes") }
    guard let id = HolderOutbound.decodeState(bytes) else { return 0 }
    guard HolderOutbound.decodeState(Array("\(HolderOutbound.stateHeader)\n\(id)\n".utf8)) == id else {
        fatalError("instance \(id) does not survive a write")
    }
    return 0
}
