// Fuzz target: the SSTP codec (LoftSSTP/SSTPCodec.swift). The input is a byte stream as the
// server would send it: the HTTP response first (when the first byte is 'H'), then packets
// parsed one after another as the client reads them. Every parsed packet lies inside its bytes;
// a control message encodes back to the bytes it came from (reserved bits aside); the typed
// attributes re-encode to themselves.
import LoftSSTP

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var p = UnsafeRawBufferPointer(start: data, count: size)
    if size > 0 && p[0] == 0x48 {
        switch SSTP.parseHTTPResponse(p) {
        case .ok(let n):
            precondition(n >= 4 && n <= size && n <= 8192)
            p = UnsafeRawBufferPointer(rebasing: p[n...])
        case .refused(let line): precondition(line.utf8.count <= 200)
        case .needMore: precondition(size < 8192)
        }
    }
    var packets = 0
    while packets < 10_000 {
        switch SSTP.parse(p) {
        case .needMore, .bad: return 0
        case .data(let payload, let n):
            precondition(payload.lowerBound == 4 && payload.upperBound == n && n <= p.count)
            p = UnsafeRawBufferPointer(rebasing: p[n...])
        case .control(let m, let n):
            precondition(n >= 8 && n <= p.count)
            let again = SSTP.encode(m)!
            precondition(again.count == n, "control message length changed")
            var same = true
            for i in 0..<n where i != 1 && i != 2 && again[i] != p[i] { same = false }
            // Byte 1 holds reserved bits and C, byte 2 reserved bits and the length's top; the
            // attributes' reserved bytes may differ too.
            if !same {
                let back = again.withUnsafeBytes { SSTP.parse($0) }
                precondition(back == .control(m, length: n), "control message does not survive encode and parse")
            }
            for a in m.attributes {
                if let r = SSTP.BindingRequest(a) { precondition(SSTP.BindingRequest(r.attribute) == r) }
                if let b = SSTP.Binding(a) { precondition(SSTP.Binding(b.attribute) == b) }
                if let s = SSTP.StatusInfo(a) { precondition(SSTP.StatusInfo(s.attribute) == s) }
            }
            p = UnsafeRawBufferPointer(rebasing: p[n...])
        }
        packets += 1
    }
    return 0
}
