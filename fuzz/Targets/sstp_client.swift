// Fuzz target: the SSTP client state machine (LoftSSTP/SSTPClient.swift) fed a server's bytes
// in pieces, with time moving between them. The first byte picks the allowed authentication
// methods; then each piece is one length byte, one time-step byte (× 100 ms) and that many
// bytes. A run that starts with "HTTP" goes through the HTTP answer like a real server's.
// The client must not crash, report down at most once, and stay quiet after it.
import LoftSSTP

final class Sink: SSTPClientDelegate {
    var downs = 0
    var afterDown = 0
    func sstpOutputReady(_ c: SSTPClient) { if downs > 0 { afterDown += 1 } }
    func sstpUp(_ c: SSTPClient, link: SSTPClient.Link) { if downs > 0 { afterDown += 1 } }
    func sstpPacket(_ c: SSTPClient, _ packet: UnsafeRawBufferPointer) { if downs > 0 { afterDown += 1 } }
    func sstpDown(_ c: SSTPClient, _ end: SSTPClient.End) { downs += 1 }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let all = UnsafeRawBufferPointer(start: data, count: size)
    let auth: [SSTPClient.AuthMethod] = [[.mschapv2, .pap], [.pap], [.mschapv2], [.pap, .mschapv2]][Int(all[0] % 4)]
    var seed: UInt8 = 0
    let client = SSTPClient(settings: .init(host: "h", user: "User", password: "clientPass", auth: auth),
                            certHash: ([UInt8](repeating: 1, count: 20), [UInt8](repeating: 2, count: 32)),
                            random: { n in (0..<n).map { _ in seed &+= 37; return seed } })
    let sink = Sink()
    client.delegate = sink
    var now: UInt64 = 1_000
    client.start(now: now)
    var at = 1
    while at + 2 <= size {
        let n = Int(all[at])
        now += UInt64(all[at + 1]) * 100
        at += 2
        let piece = UnsafeRawBufferPointer(rebasing: all[at..<min(size, at + n)])
        at += piece.count
        client.receive(piece, now: now)
        if let d = client.nextDeadline, d <= now { client.tick(now: now) }
        client.tick(now: now)
        if client.output.count > 1 << 20 { client.output.removeAll() }
        precondition(sink.downs <= 1 && sink.afterDown == 0, "events after down")
    }
    client.stop(now: now)
    client.tick(now: now + 2_000)
    precondition(sink.downs == 1, "stop did not end the connection")
    return 0
}
