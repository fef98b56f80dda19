// Replay (docs/protocol.md §8.1) on a ClientSession and a FrontSession that both do it, driven
// by the input: a sequence of operations, each one byte (op) and its arguments, interleaving an
// honest carrier between them (in pieces), carriers cut with part of what was in flight lost,
// RESUMEs continuing the parked session, and frames from a hostile peer into either end (ACKs,
// RESUME and STATUS replay fields with any counts, any bytes). Checked after every step: the
// kept bytes stay within the replay bound, the output within its bound; and, while only the
// honest carrier was used, every byte the front wrote arrives at the client once and in order.
import LoftCore
@testable import LoftProtocol

let status = Status(instanceID: InstanceID(high: 1, low: 2), keepaliveMs: 15_000, maxStreams: 1024,
                    overlay: Overlay(ipv4: IPPrefix("198.18.64.2/24")!, gateway4: IPAddress("198.18.64.1")!, mtu: 1400))

final class Front: FrontSessionDelegate {
    var session: FrontSession
    var parked: FrontSession?
    var ids: [UInt32] = []
    let limits: SessionLimits
    init(limits: SessionLimits) {
        self.limits = limits
        session = FrontSession(limits: limits, keepaliveMs: 15_000, replayGraceMs: 30_000)
        session.delegate = self
    }
    func fresh() {
        session = FrontSession(limits: limits, keepaliveMs: 15_000, replayGraceMs: 30_000)
        session.delegate = self
    }
    func frontSession(_ s: FrontSession, hello: Hello) -> Status? { status }
    func frontSession(_ s: FrontSession, resume: Resume) -> Status? {
        if let rp = resume.replay, rp.continuing, let old = parked {
            parked = nil
            do { try old.resumeParked(peerReceived: rp.received) } catch {
                s.goAway(.protocolError, text: "\(error)")
                return nil
            }
            session = old
            return nil
        }
        parked = nil
        return status
    }
    func streamRequested(_ s: FrontSession, stream: UInt32, network: FlowNetwork, destination: Destination) {
        ids.append(stream)
        s.accept(stream: stream)
    }
    func streamReadable(_ s: FrontSession, stream: UInt32) {}
    func streamWritable(_ s: FrontSession, stream: UInt32) {}
    func streamReset(_ s: FrontSession, stream: UInt32, reason: RstReason) {}
    func datagramReceived(_ s: FrontSession, association: UInt32, to: Destination, payload: UnsafeRawBufferPointer) {}
    func sessionOutputReady(_ s: FrontSession) {}
}

final class Client: ClientSessionDelegate {
    func sessionEstablished(_ s: ClientSession, status: Status, resumed: Bool) {}
    func sessionStatusChanged(_ s: ClientSession, status: Status) {}
    func sessionGoAway(_ s: ClientSession, reason: GoAwayReason, text: String) {}
    func streamOpened(_ s: ClientSession, stream: UInt32) {}
    func streamOpenFailed(_ s: ClientSession, stream: UInt32, reason: OpenFailReason) {}
    func streamReadable(_ s: ClientSession, stream: UInt32) {}
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
    mutating func bytes(_ n: Int) -> [UInt8] {
        let k = min(n, p.count - at)
        defer { at += k }
        return Array(p[at..<at + k])
    }
    mutating func u64() -> UInt64 { var v: UInt64 = 0; for _ in 0..<8 { v = v << 8 | UInt64(byte()) }; return v }
}

let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 18, alignment: 8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = Input(p: UnsafeRawBufferPointer(start: data, count: size))
    let limits = SessionLimits(maxStreams: 8, maxOutputBytes: 64 << 10, maxDatagramQueue: 16 << 10,
                               replay: true, maxReplayBytes: 128 << 10)
    let front = Front(limits: limits)
    let cd = Client()
    let client = ClientSession(token: "tok", clientName: "fuzz", limits: limits)
    client.delegate = cd
    client.attach()
    var up: [UInt8] = [], down: [UInt8] = []
    var honest = true
    var sent: UInt8 = 0, expect: UInt8 = 0
    var stream: UInt32?
    func fail() { honest = false; client.detach(); _ = front.session.park(); front.fresh(); client.attach() }
    while !input.done {
        let op = input.byte()
        let s = front.session
        switch op % 12 {
        case 0, 1, 2:   // the honest carrier moves a piece each way
            client.withOutput { up += $0; return $0.count }
            s.withOutput { down += $0; return $0.count }
            let n = Int(input.byte()) * 64 + 1
            let u = Array(up.prefix(n)), d = Array(down.prefix(n))
            up.removeFirst(u.count); down.removeFirst(d.count)
            do {
                try u.withUnsafeBytes { p in try s.receive(p) }
                try d.withUnsafeBytes { p in try client.receive(p) }
            } catch { fail() }
        case 3:
            if stream == nil { stream = client.openStream(to: .ip(Endpoint(IPAddress("198.18.1.2")!, 80))) }
        case 4:   // the front writes a counting pattern on the first stream it accepted
            guard let id = front.ids.first else { break }
            let n = min(Int(input.byte()) * 256, scratch.count)
            for i in 0..<n { scratch[i] = sent &+ UInt8(truncatingIfNeeded: i) }
            let w = s.write(stream: id, UnsafeRawBufferPointer(rebasing: scratch[..<n]))
            sent &+= UInt8(truncatingIfNeeded: w)
        case 5:   // the client reads it and checks the pattern
            guard let id = stream else { break }
            if case .data(let n) = client.read(stream: id, into: UnsafeMutableRawBufferPointer(rebasing: scratch[..<(Int(input.byte()) * 256)])) {
                for i in 0..<n where scratch[i] != expect &+ UInt8(truncatingIfNeeded: i) {
                    if honest { fatalError("byte \(i) of a read differs after replay") }
                }
                expect &+= UInt8(truncatingIfNeeded: n)
            }
        case 6:   // the carrier breaks: part of what is in flight arrives, the rest is lost
            client.withOutput { up += $0; return $0.count }
            s.withOutput { down += $0; return $0.count }
            let u = Array(up.prefix(Int(input.byte()) * 97)), d = Array(down.prefix(Int(input.byte()) * 97))
            up = []; down = []
            do {
                try u.withUnsafeBytes { p in try s.receive(p) }
                try d.withUnsafeBytes { p in try client.receive(p) }
            } catch { honest = false }
            client.detach()
            if s.park() { front.parked = s }
            front.fresh()
            if input.byte() & 7 == 0 { front.parked = nil }   // the front lost the streams
            client.attach()
        case 7:   // a hostile ACK to the client
            var q = ByteQueue()
            try? FrameEncoder.encode(.ack(input.byte() & 1 == 0 ? input.u64() : UInt64(input.byte()) << 8), into: &q)
            honest = false
            do { try q.withUnsafeReadableBytes { p in try client.receive(p) } } catch { fail() }
        case 8:   // a hostile continuing claim to the parked front
            if let p = front.parked {
                honest = false
                front.parked = nil
                _ = try? p.resumeParked(peerReceived: input.u64())
            }
        case 9:   // any bytes into either end
            let b = input.bytes(Int(input.byte()))
            honest = false
            do {
                if op & 0x10 == 0 { try b.withUnsafeBytes { p in try s.receive(p) } } else { try b.withUnsafeBytes { p in try client.receive(p) } }
            } catch { fail() }
        case 10:
            _ = client.tick(now: UInt64(input.byte()) * 1000)
            _ = s.tick(now: UInt64(input.byte()) * 1000)
        default:
            if let id = stream {
                let n = client.writableBytes(stream: id)
                _ = client.write(stream: id, UnsafeRawBufferPointer(rebasing: scratch[..<min(n + Int(input.byte()), scratch.count)]))
            }
        }
        for e in [client as SessionEnd, front.session] {
            if e.replayHeldBytes > 128 << 10 + SessionEngine.controlSlack + LoftWire.maxFrameSize {
                fatalError("kept \(e.replayHeldBytes) bytes for replay")
            }
            if e.outputCount > (64 << 10) + SessionEngine.controlSlack + 4 * LoftWire.maxFrameSize + 256 * 64 {
                fatalError("output grew to \(e.outputCount)")
            }
        }
    }
    return 0
}
