// Fuzz target: the VLESS codec (LoftOutbounds/VLESSCodec.swift). The first byte picks what
// the rest is fed to: 0 a request header (encode and parse again give the same request; an
// address one without addons encodes back to its bytes), 1 a response header (parse and
// responseBytesNeeded agree), 2 a run of UDP frames (every payload range inside the input,
// progress on every frame, frameBytesNeeded agrees for every frame's start and the tail), 3 a UUID text.
import LoftCore
import LoftOutbounds

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let all = UnsafeRawBufferPointer(start: data, count: size)
    let body = UnsafeRawBufferPointer(rebasing: all[1...])
    switch all[0] % 4 {
    case 0:
        if case .done(let r, let n) = VLESS.parseRequest(body) {
            precondition(n <= body.count)
            if let again = VLESS.encode(r) {
                // Encoding what was parsed and parsing that gives the same request (a name that
                // is not UTF-8 comes back with replacement characters, so bytes may differ).
                let back = again.withUnsafeBytes { VLESS.parseRequest($0) }
                precondition(back == .done(r, again.count), "request does not survive encode and parse")
                if body[17] == 0, case .ip = r.destination {
                    precondition(again == Array(body[0..<n]), "an address request does not encode back to its bytes")
                }
            }
        }
    case 1:
        let need = VLESS.responseBytesNeeded(body)
        switch VLESS.parseResponse(body) {
        case .done(let len, let n):
            precondition(len == n && n <= body.count && need == 0)
        case .needMore:
            precondition(need != nil && need! > 0)
        case .bad:
            precondition(need == nil)
        }
    case 2:
        var rest = body
        var frames = 0
        while frames < 100_000, case .done(let range, let n) = VLESS.parseFrame(rest) {
            precondition(n >= 2 && n <= rest.count && range.upperBound == n && range.lowerBound == 2)
            precondition(VLESS.frameBytesNeeded(rest) == 0, "a whole frame needs no more bytes")
            // Every prefix of the frame (its start in one read) needs exactly the rest.
            for cut in [0, 1, 2, n - 1] where cut < n {
                precondition(VLESS.frameBytesNeeded(UnsafeRawBufferPointer(rebasing: rest[0..<cut])) == (cut < 2 ? 2 - cut : n - cut))
            }
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            frames += 1
        }
        // What is left is a frame's start: needed and present make up the frame.
        if frames < 100_000, rest.count >= 2 {
            let need = VLESS.frameBytesNeeded(rest)
            precondition(need > 0 && rest.count + need == 2 + (Int(rest[0]) << 8 | Int(rest[1])))
        }
    default:
        let text = String(decoding: body, as: UTF8.self)
        if let u = VLESS.parseUUID(text) { precondition(u.count == 16) }
    }
    return 0
}
