// The h3 carrier's HTTP/3 side fed arbitrary bytes: H3Streams (nghttp3 behind CNghttp3, and
// loft's own handling: header collection and limits in the shim, the CONNECT decision, request
// bodies and their bounds, stream ends) as the front's server, its QUIC streams in memory.
//
// Input: byte 0 bit 0 set: the client's control and QPACK streams and its session CONNECT are
// fed first, as a real H3Streams client wrote them (so the fuzzer reaches request frames
// sooner). Then records: one byte picks the stream (low 3 bits: request 0, 4, 8, control 2,
// QPACK 6, 10, or 14; bit 3: FIN after the bytes), one byte the length (0...255), the bytes.
// Bodies delivered to the "front" are read back and answered with as many bytes.
import CNghttp3
@testable import LoftCarriers
import LoftCore
@testable import LoftHTTP
import LoftIO
@testable import LoftQUIC
@testable import LoftTLS

private final class Memory: H3Transport {
    let loop: EventLoop
    var closed = false
    weak var layer: H3Streams?
    var nextUni: Int64
    var nextBidi: Int64
    var inbox: [Int64: [UInt8]] = [:]
    var inFin: Set<Int64> = []
    var written: [Int64: [UInt8]] = [:]
    var record = false
    init(loop: EventLoop, server: Bool) {
        self.loop = loop
        nextUni = server ? 3 : 2
        nextBidi = server ? 1 : 0
    }
    func openUniStream(ringCap: Int) -> Int64? { defer { nextUni += 4 }; return nextUni }
    func openStream(ringCap: Int?) -> Int64? { defer { nextBidi += 4 }; return nextBidi }
    func writeRoom(_ id: Int64) -> Int { 1 << 16 }
    func write(_ id: Int64, _ bytes: UnsafeRawBufferPointer) -> Int {
        if record { written[id, default: []] += bytes }
        return min(bytes.count, 1 << 16)
    }
    /// Received bytes as QUIC holds them, in one buffer per stream (what `inbox` got moves there).
    private var recv: [Int64: ReceiveQueue] = [:]
    deinit { for id in recv.keys { recv[id]!.release() } }
    private func arrive(_ id: Int64) {
        guard let b = inbox[id], !b.isEmpty else { return }
        b.withUnsafeBufferPointer { recv[id, default: ReceiveQueue()].append($0.baseAddress!, $0.count) }
        inbox[id] = []
    }
    private func finReached(_ id: Int64) -> Bool { (recv[id]?.available ?? 0) == 0 && inFin.contains(id) }
    func drain(_ id: Int64, upTo max: Int, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        arrive(id)
        _ = recv[id]?.drain(upTo: max, body)
        return finReached(id)
    }
    func received(_ id: Int64) -> (UnsafeRawBufferPointer, Bool) {
        arrive(id)
        return (recv[id]?.readable ?? UnsafeRawBufferPointer(start: nil, count: 0), inFin.contains(id))
    }
    func credit(_ id: Int64, _ n: Int) {}
    func drop(_ id: Int64, _ n: Int) -> Bool {
        recv[id]?.consume(n)
        return finReached(id)
    }
    func finish(_ id: Int64) {}
    var released: Set<Int64> = []
    func release(_ id: Int64) { released.insert(id) }
    func isLive(_ id: Int64) -> Bool { !released.contains(id) }
    func reset(_ id: Int64, code: UInt64) {}
    func unsent(_ id: Int64) -> Int { 0 }
}

private final class Front: H3StreamsDelegate {
    weak var h: H3Streams?
    var buf = [UInt8](repeating: 0, count: 4096)
    var failed = false
    func h3Readable(_ stream: Int64) {
        guard let h else { return }
        let (n, eof) = buf.withUnsafeMutableBytes { h.read(stream, into: $0) }
        if n > 0 { _ = buf.withUnsafeBytes { h.write(stream, UnsafeRawBufferPointer(rebasing: $0[0..<n])) } }
        if eof { h.finish(stream) }
    }
    func h3Writable(_ stream: Int64) {}
    func h3Reset(_ stream: Int64, code: UInt64) {}
    func h3Response(_ stream: Int64, status: Int) {}
    func h3Accepted(_ stream: Int64, session: Bool) {}
    func h3Failed(_ reason: CarrierCloseReason) { failed = true }
    func h3Refused(_ stream: Int64, status: Int, reason: String, nth: Int) {}
}

nonisolated(unsafe) private let loop = try! EventLoop()

/// What a real client writes first: its uni streams' bytes and the session's CONNECT with 5
/// body bytes.
nonisolated(unsafe) private let preamble: [Int64: [UInt8]] = {
    let m = Memory(loop: loop, server: false)
    m.record = true
    guard let c = H3Streams(quic: m, server: false, maxRequests: 0) else { return [:] }
    c.path = "/loft"
    c.authority = "front.test:443"
    _ = c.openStream(ringCap: nil)
    _ = [UInt8]([1, 2, 3, 4, 5]).withUnsafeBytes { c.write(0, $0) }
    loop.runOnce(timeoutMs: 0)
    return m.written
}()

private let streamIDs: [Int64] = [0, 4, 8, 2, 6, 10, 14, 0]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size >= 1 else { return 0 }
    let m = Memory(loop: loop, server: true)
    guard let h = H3Streams(quic: m, server: true, maxRequests: 16) else { return 0 }
    h.path = "/loft"
    m.layer = h
    let front = Front()
    front.h = h
    h.delegate = front
    if data[0] & 1 != 0 {
        for (id, bytes) in preamble.sorted(by: { $0.key > $1.key }) {
            m.inbox[id, default: []] += bytes
            h.quicReadable(id)
        }
    }
    var pos = 1
    var rounds = 0
    while pos + 2 <= size && rounds < 10_000 && !front.failed {
        rounds += 1
        let sel = data[pos]
        let n = min(Int(data[pos + 1]), size - pos - 2)
        pos += 2
        let id = streamIDs[Int(sel & 7)]
        m.inbox[id, default: []] += UnsafeBufferPointer(start: data + pos, count: n)
        pos += n
        if sel & 8 != 0 { m.inFin.insert(id) }
        h.quicReadable(id)
        loop.runOnce(timeoutMs: 0)
    }
    loop.runOnce(timeoutMs: 0)
    return 0
}
