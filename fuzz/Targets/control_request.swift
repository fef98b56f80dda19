// What a local process sends loft's control socket (a line) and its metrics listener (an HTTP
// request head): the request's end (OneShotConnection.find, within the size limit), the line's
// text check (ControlServer.requestLine), the command parser (ControlRequest.parse), and the
// metrics listener's answer (MetricsServer.answer). The input's first byte picks which.
@testable import LoftControl

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let raw = Array(UnsafeBufferPointer(start: data! + 1, count: size - 1))
    if data![0] & 1 == 0 {
        guard let end = OneShotConnection.find([10], in: raw), end <= 1024 else { return 0 }
        guard end < raw.count, raw[end] == 10 else { fatalError("request end \(end) is not the newline") }
        guard let line = ControlServer.requestLine(Array(raw[..<end])) else { return 0 }
        if case .success(let r) = ControlRequest.parse(line), case .status(.textWidth(let w)) = r, w < 40 || w > 1000 {
            fatalError("width \(w)")
        }
    } else {
        let terminator = Array("\r\n\r\n".utf8)
        guard let end = OneShotConnection.find(terminator, in: raw), end <= 8192 else { return 0 }
        if case .refused(let status, _) = MetricsServer.scrape(Array(raw[..<end])), !status.hasPrefix("4") {
            fatalError("refused with \(status)")
        }
    }
    return 0
}
