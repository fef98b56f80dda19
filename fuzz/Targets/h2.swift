// The h2 carrier's HTTP/2 side fed arbitrary bytes: H2Engine (nghttp2 behind CNghttp2, and
// loft's own request handling: header collection and limits, the CONNECT decision, the session
// stream's events, writes back on it) as the front's server, or as a client after its CONNECT.
//
// Input: byte 0 picks the role and framing (bit 0: client; bit 1: the server's input starts
// with a valid client preface and SETTINGS, so the fuzzer reaches frames sooner); byte 1 sets
// the size of the pieces the rest is fed in (1...256, partial frames included); then the wire.
@testable import LoftCarriers
@testable import LoftHTTP

private final class FuzzOutput: H2Output {
    var used = 0
    let capacity = 64 * 1024
    var h2Free: Int { capacity - used }
    func h2Append(_ bytes: UnsafeRawPointer, _ count: Int) { used += count }
}

private final class FuzzOwner: H2EngineOwner {
    var received = 0
    let reply = [UInt8](repeating: 0x42, count: 300)
    func h2Admit(_ engine: H2Engine, _ head: H2RequestHead) -> Bool { head.headers.fields.count % 7 != 3 }
    func h2Event(_ engine: H2Engine, _ event: H2Event) {
        switch event {
        case .peerSettings:
            if !engine.isServer { _ = engine.connect(authority: "front.test:443", path: "/loft") }
        case .data(let b):
            received += b.count
            if received > 100_000 { engine.paused = true }
            _ = reply.withUnsafeBytes { engine.write(UnsafeRawBufferPointer(rebasing: $0.prefix(b.count % 300 + 1))) }
        case .peerEnded:
            engine.finish()
        default:
            break
        }
    }
}

private let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + [0, 0, 0, 4, 0, 0, 0, 0, 0]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size >= 2 else { return 0 }
    let client = data[0] & 1 != 0
    let piece = Int(data[1]) + 1
    var wire: [UInt8] = []
    if !client && data[0] & 2 != 0 { wire = preface }
    wire += UnsafeBufferPointer(start: data + 2, count: size - 2)
    let out = FuzzOutput()
    let owner = FuzzOwner()
    guard let engine = H2Engine(server: !client, path: "/loft", output: out) else { return 0 }
    engine.owner = owner
    engine.pump()
    var pos = 0
    var rounds = 0
    wire.withUnsafeBytes { all in
        while pos < all.count && rounds < 100_000 {
            rounds += 1
            out.used = 0
            let end = min(all.count, pos + piece)
            guard let n = engine.receive(UnsafeRawBufferPointer(rebasing: all[pos..<end])) else { break }
            if n == 0 { owner.received = 0 }
            pos += n
            if !engine.pump() || engine.isFinished { break }
            _ = engine.writable
        }
    }
    engine.close()
    return 0
}
