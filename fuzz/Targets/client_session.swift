// The holder's session state machine (ClientSession) driven by the input: a sequence of
// operations, each one byte (op) and its arguments, interleaving carrier bytes from the front
// (any frames, in pieces) with what the holder does (open, read, write, finish, reset, tick,
// detach/attach, drain the output). Checked after every step: the output and the buffered
// bytes stay within the session's limits, as the embedder (HolderOutbound) relies on.
import LoftCore
@testable import LoftProtocol

final class Recorder: ClientSessionDelegate {
    var ids: [UInt32] = []
    func note(_ id: UInt32) { if !ids.contains(id) { ids.append(id); if ids.count > 64 { ids.removeFirst() } } }
    func sessionEstablished(_ s: ClientSession, status: Status, resumed: Bool) {}
    func sessionStatusChanged(_ s: ClientSession, status: Status) {}
    func sessionGoAway(_ s: ClientSession, reason: GoAwayReason, text: String) {}
    func streamOpened(_ s: ClientSession, stream: UInt32) { note(stream) }
    func streamOpenFailed(_ s: ClientSession, stream: UInt32, reason: OpenFailReason) {}
    func streamReadable(_ s: ClientSession, stream: UInt32) { note(stream) }
    func streamWritable(_ s: ClientSession, stream: UInt32) {}
    func streamReset(_ s: ClientSession, stream: UInt32, reason: RstReason) {}
    func datagramReceived(_ s: ClientSession, association: UInt32, from: Destination, payload: UnsafeRawBufferPointer) {}
    func sessionOutputReady(_ s: ClientSession) {}
}

struct Input {
    let p: UnsafeRawBufferPointer
    var at = 0
    var done: Bool { at >= p.count }
    mutating func byte() -> UInt8 { guard at < p.count else { return 0 }; defer { at += 1 }; return p[at] }
    mutating func bytes(_ n: Int) -> UnsafeRawBufferPointer {
        let k = min(n, p.count - at)
        defer { at += k }
        return UnsafeRawBufferPointer(rebasing: p[at..<at + k])
    }
    /// 1…240 bytes, or larger steps of 1 KiB for the bytes above.
    mutating func length() -> Int { let b = Int(byte()); return b < 240 ? b + 1 : (b - 239) * 4096 }
}

let destinations: [Destination] = [.ip(Endpoint(IPAddress("198.18.1.2")!, 80)), .ip(Endpoint(IPAddress("fd00:1::2")!, 53)),
                                   .domain("example.test", 443), .domain("", 1), .domain(String(repeating: "a", count: 300), 1)]
let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = Input(p: UnsafeRawBufferPointer(start: data, count: size))
    let limits = SessionLimits(maxStreams: 8, maxOutputBytes: 256 << 10, maxDatagramQueue: 64 << 10)
    let session = ClientSession(token: "tok", clientName: "fuzz", limits: limits)
    let rec = Recorder()
    session.delegate = rec
    if input.byte() & 1 == 1 { session.restore(instance: InstanceID(high: 1, low: 2)) }
    session.attach()
    var now: UInt64 = 1000
    var lastChunk = 0
    func pick(_ b: UInt8) -> UInt32 { rec.ids.isEmpty || b & 0x80 != 0 ? UInt32(b & 0x7F) : rec.ids[Int(b) % rec.ids.count] }
    while !input.done {
        let op = input.byte()
        switch op % 16 {
        case 0, 1, 2, 3, 4, 5:   // carrier bytes, as HolderOutbound feeds them: not while the output is backed up
            let chunk = input.bytes(input.length())
            lastChunk = chunk.count
            guard session.outputCount <= limits.maxOutputBytes else { break }
            do { try session.receive(chunk, now: now) } catch { session.detach(); session.attach() }
        case 6:
            if let id = session.openStream(to: destinations[Int(input.byte()) % destinations.count]) { rec.note(id) }
        case 7:
            if let id = session.openAssociation(firstDestination: destinations[Int(input.byte()) % destinations.count]) { rec.note(id) }
        case 8:
            let id = pick(input.byte())
            let n = Int(input.byte()) * 1024
            _ = session.read(stream: id, into: UnsafeMutableRawBufferPointer(rebasing: scratch[..<n]))
        case 9:
            let id = pick(input.byte())
            let n = min(session.writableBytes(stream: id) + Int(input.byte()), scratch.count)
            _ = session.write(stream: id, UnsafeRawBufferPointer(rebasing: scratch[..<n]))
        case 10:
            let id = pick(input.byte())
            switch input.byte() % 4 {
            case 0: session.finish(stream: id)
            case 1: session.reset(stream: id, reason: .cancel)
            case 2: session.close(stream: id)
            default: session.closeAssociation(id)
            }
        case 11:
            now += UInt64(input.byte()) * 500
            if !session.tick(now: now) { session.detach(); session.attach() }
        case 12:
            let keep = Int(input.byte())
            session.withOutput { max(0, $0.count - keep) }
        case 13:
            let id = pick(input.byte())
            _ = session.send(association: id, to: destinations[Int(input.byte()) % destinations.count],
                             UnsafeRawBufferPointer(rebasing: scratch[..<input.length()]))
        case 14:
            _ = try? session.carrierEnded()
            session.detach()
            if input.byte() & 1 == 0 { session.forgetInstance() }
            session.attach()
        default:
            session.goAway(.shutdown, text: "fuzz")
        }
        if session.outputCount > limits.maxOutputBytes + SessionEngine.controlSlack + 2 * lastChunk + LoftWire.maxFrameSize {
            fatalError("output grew to \(session.outputCount)")
        }
        if session.bufferedBytes > limits.maxStreams * Int(LoftWire.initialStreamWindow) || session.bufferedBytes < 0 {
            fatalError("buffered \(session.bufferedBytes)")
        }
        if session.openStreamCount < 0 || session.openStreamCount > limits.maxStreams { fatalError("open streams \(session.openStreamCount)") }
    }
    return 0
}
