// loft-front's session state machine (FrontSession) driven by the input: a sequence of
// operations, each one byte (op) and its arguments, interleaving carrier bytes from a client
// (any frames, in pieces) with what the front does (accept or refuse OPENs now or later, read,
// write, finish, reset, new STATUS, tick, drain the output). Checked after every step: the
// output and the buffered bytes stay within the session's limits, as FrontConnection relies on.
import LoftCore
@testable import LoftProtocol

let overlay = Overlay(ipv4: IPPrefix("198.18.64.2/24")!, gateway4: IPAddress("198.18.64.1")!,
                      ipv6: IPPrefix("fd00:64::2/64")!, gateway6: IPAddress("fd00:64::1")!,
                      mtu: 1400, dns: [IPAddress("198.18.1.2")!])
let status = Status(instanceID: InstanceID(high: 1, low: 2), keepaliveMs: 15_000, maxStreams: 1024, overlay: overlay)

final class Recorder: FrontSessionDelegate {
    var ids: [UInt32] = []
    var acceptNow = true
    var answer = true
    func note(_ id: UInt32) { if !ids.contains(id) { ids.append(id); if ids.count > 64 { ids.removeFirst() } } }
    func frontSession(_ s: FrontSession, hello: Hello) -> Status? {
        if hello.token == "tok" { return answer ? status : nil }
        s.goAway(.badToken, text: "token not accepted")
        return nil
    }
    func frontSession(_ s: FrontSession, resume: Resume) -> Status? {
        guard resume.instanceID == status.instanceID else { s.goAway(.unknownInstance, text: "no such instance"); return nil }
        return answer ? status : nil
    }
    func streamRequested(_ s: FrontSession, stream: UInt32, network: FlowNetwork, destination: Destination) {
        note(stream)
        if acceptNow { s.accept(stream: stream) }
    }
    func streamReadable(_ s: FrontSession, stream: UInt32) {}
    func streamWritable(_ s: FrontSession, stream: UInt32) {}
    func streamReset(_ s: FrontSession, stream: UInt32, reason: RstReason) {}
    func datagramReceived(_ s: FrontSession, association: UInt32, to: Destination, payload: UnsafeRawBufferPointer) {}
    func sessionOutputReady(_ s: FrontSession) {}
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
    /// 1…240 bytes, or larger steps of 4 KiB for the bytes above.
    mutating func length() -> Int { let b = Int(byte()); return b < 240 ? b + 1 : (b - 239) * 4096 }
}

let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = Input(p: UnsafeRawBufferPointer(start: data, count: size))
    let limits = SessionLimits(maxStreams: 8, maxOutputBytes: 256 << 10, maxDatagramQueue: 64 << 10)
    let session = FrontSession(limits: limits, keepaliveMs: 15_000)
    let rec = Recorder()
    session.delegate = rec
    let flags = input.byte()
    rec.acceptNow = flags & 1 == 0
    rec.answer = flags & 2 == 0
    var now: UInt64 = 1000
    var lastChunk = 0
    func pick(_ b: UInt8) -> UInt32 { rec.ids.isEmpty || b & 0x80 != 0 ? UInt32(b & 0x7F) : rec.ids[Int(b) % rec.ids.count] }
    while !input.done {
        let op = input.byte()
        switch op % 16 {
        case 0, 1, 2, 3, 4, 5, 6:   // carrier bytes, as FrontConnection feeds them: not while the output is backed up
            let chunk = input.bytes(input.length())
            lastChunk = chunk.count
            guard session.outputCount <= limits.maxOutputBytes else { break }
            do { try session.receive(chunk, now: now) } catch { return 0 }
        case 7:
            session.accept(stream: pick(input.byte()))
        case 8:
            session.refuse(stream: pick(input.byte()), reason: OpenFailReason(rawValue: input.byte()))
        case 9:
            let id = pick(input.byte())
            let n = Int(input.byte()) * 1024
            _ = session.read(stream: id, into: UnsafeMutableRawBufferPointer(rebasing: scratch[..<n]))
        case 10:
            let id = pick(input.byte())
            let n = min(session.writableBytes(stream: id) + Int(input.byte()), scratch.count)
            _ = session.write(stream: id, UnsafeRawBufferPointer(rebasing: scratch[..<n]))
        case 11:
            let id = pick(input.byte())
            switch input.byte() % 4 {
            case 0: session.finish(stream: id)
            case 1: session.reset(stream: id, reason: .cancel)
            case 2: session.close(stream: id)
            default: session.closeAssociation(id)
            }
        case 12:
            now += UInt64(input.byte()) * 500
            if !session.tick(now: now) { return 0 }
        case 13:
            let keep = Int(input.byte())
            session.withOutput { max(0, $0.count - keep) }
        case 14:
            let id = pick(input.byte())
            _ = session.send(association: id, from: .ip(Endpoint(IPAddress("198.18.1.2")!, 53)),
                             UnsafeRawBufferPointer(rebasing: scratch[..<input.length()]))
        default:
            var st = status
            st.maxStreams = UInt32(input.byte())
            st.overlay.mtu = UInt16(input.byte()) << 4
            if input.byte() & 1 == 0 { session.sendStatus(st) } else { session.goAway(.shutdown, text: "fuzz") }
        }
        if session.outputCount > limits.maxOutputBytes + SessionEngine.controlSlack + 2 * lastChunk + LoftWire.maxFrameSize {
            fatalError("output grew to \(session.outputCount)")
        }
        if session.bufferedBytes > limits.maxStreams * Int(LoftWire.initialStreamWindow) || session.bufferedBytes < 0 {
            fatalError("buffered \(session.bufferedBytes)")
        }
        if session.openStreamCount < 0 || session.openStreamCount > limits.maxStreams { fatalError("open streams \(session.openStreamCount)") }
    }
    _ = try? session.carrierEnded()
    return 0
}
