import Glibc
import LoftCore
import LoftIO
import LoftNetstack
// The fake outbound and stream (TestOutbound, TestStream, TestAssociation), for every file here.
@_exported import LoftTestSupport
import XCTest

/// Collects every packet the stack emits towards the input. With `offload` it completes the
/// TCP checksums lwIP left partial, as the kernel does behind a TUN with offload (see
/// PacketWriter), through the same `VirtioNetHeader` code the TUN uses.
final class TestWriter: PacketWriter {
    var packets: [[UInt8]] = []
    /// Every packet's length and the `segmentSize` it was written with (0: a plain packet);
    /// kept when `packets` are taken.
    var writes: [(length: Int, segmentSize: Int)] = []
    var offload = false
    func writePacket(_ packet: UnsafeRawBufferPointer, segmentSize: Int) {
        var p = Array(packet)
        if offload, let (h, seed) = VirtioNetHeader.forPartialTCP(packet) {
            let field = Int(h.checksumStart) + Int(h.checksumOffset)
            p[field] = UInt8(seed >> 8)
            p[field + 1] = UInt8(truncatingIfNeeded: seed)
            if let refused = p.withUnsafeMutableBytes({ h.complete($0) }) { XCTFail("partial checksum refused: \(refused)") }
        }
        packets.append(p)
        writes.append((packet.count, segmentSize))
    }
}

/// Sends every flow to one outbound (or drops), counting how often it was asked.
final class TestRouter: FlowRouter {
    var decision: RouteDecision
    var requests: [FlowRequest] = []

    init(decision: RouteDecision) { self.decision = decision }

    func route(_ request: FlowRequest) -> RouteMatch {
        requests.append(request)
        return RouteMatch(decision, rule: 0)
    }

    func calls(_ network: FlowNetwork) -> Int { requests.filter { $0.network == network }.count }
}

/// A Netstack on an embedded loop: packets in through `send`, one loop turn per `turn()`
/// (stream readiness, then the loop's deferred work, after-event hooks and lwIP's timers),
/// packets out collected by the writer.
final class Harness {
    let loop: EventLoop
    let writer = TestWriter()
    let outbound = TestOutbound()
    let router: TestRouter
    private(set) var netstack: Netstack!
    private(set) var input = 0
    private let dead = DeadEvents()

    /// `clock`: a virtual clock for tests of deadlines (`loop.advance(by:)` moves it).
    init(settings: Netstack.Settings = Netstack.Settings(), mtu: Int = 1500, offload: Bool = false,
         clock: VirtualClock? = nil) {
        loop = try! EventLoop(clock: clock)
        router = TestRouter(decision: .drop(reset: true))
        router.decision = .outbound(outbound)
        let ns = Netstack(loop: loop, router: router, settings: settings)
        netstack = ns
        writer.offload = offload
        input = ns.addInput(mtu: mtu, writer: writer, receiveWindow: offload ? Netstack.maxWindow : 0, offload: offload)
        loop.timerHook = { [weak ns] in ns?.runTimers() ?? 1000 }
        loop.addAfterEvents { [weak ns] in ns?.afterEvents() }
    }

    /// Shuts the stack down (idempotent); every test ends with it. Afterwards nothing of lwIP's
    /// may be left (unless `expectEmpty` is false: another stack is still live).
    func shutdown(expectEmpty: Bool = true, file: StaticString = #filePath, line: UInt = #line) {
        netstack?.shutdown()
        guard expectEmpty else { return }
        let r = Netstack.lwipResources()
        XCTAssertTrue(r.isEmpty, "lwIP objects left after shutdown: \(r)", file: file, line: line)
    }

    /// Drops the harness's reference to the stack without shutting it down (for deinit tests).
    func releaseStack() { netstack = nil }

    /// Feeds packets as one batch, then runs one loop turn.
    func send(_ packets: [UInt8]...) { send(batch: packets) }

    func send(batch packets: [[UInt8]]) {
        for p in packets { p.withUnsafeBytes { netstack.input($0, from: input) } }
        turn()
    }

    /// Feeds TCP segments whose checksum field holds only the pseudo-header's sum, as a TUN
    /// with offload reads a local app's segments (NEEDS_CSUM), then runs one loop turn.
    func sendPartial(_ packets: [UInt8]...) {
        for var p in packets {
            let t = p[0] >> 4 == 4 ? Int(p[0] & 0x0F) * 4 : 40
            let (_, seed) = p.withUnsafeBytes { VirtioNetHeader.forPartialTCP($0)! }
            p[t + 16] = UInt8(seed >> 8)
            p[t + 17] = UInt8(truncatingIfNeeded: seed)
            p.withUnsafeBytes { netstack.input($0, from: input, partialChecksum: true) }
        }
        turn()
    }

    /// One loop iteration.
    func turn() {
        for s in outbound.streams { s.deliverReadiness() }
        loop.runOnce(timeoutMs: 0)
    }

    func turns(_ n: Int) { for _ in 0..<n { turn() } }

    /// Removes and returns the packets emitted so far.
    func takePackets() -> [[UInt8]] {
        defer { writer.packets.removeAll() }
        return writer.packets
    }

    /// Removes the TCP segments for `app` from what was emitted, and lets the app take them.
    @discardableResult
    func deliver(to app: inout AppTCP, file: StaticString = #filePath, line: UInt = #line) -> [Segment] {
        var mine: [Segment] = []
        var rest: [[UInt8]] = []
        for p in writer.packets {
            if let s = Segment.parse(p), app.owns(s) { mine.append(s) } else { rest.append(p) }
        }
        writer.packets = rest
        for s in mine { app.receive(s) }
        XCTAssertEqual(app.unexpected, 0, "lwIP sent bytes out of order", file: file, line: line)
        return mine
    }

    /// SYN, outbound opened and connected, SYN-ACK, ACK: an established flow.
    func establish(_ app: inout AppTCP, file: StaticString = #filePath, line: UInt = #line) -> TestStream {
        let before = outbound.streams.count
        send(app.syn())
        guard outbound.streams.count == before + 1 else {
            XCTFail("the SYN opened no outbound stream", file: file, line: line)
            return TestStream(destination: .ip(app.remote), events: dead)
        }
        let stream = outbound.streams[before]
        stream.connect()
        turn()
        deliver(to: &app, file: file, line: line)
        XCTAssertTrue(app.synAckSeen, "no SYN-ACK", file: file, line: line)
        send(app.ackPacket())
        deliver(to: &app, file: file, line: line)
        return stream
    }

    /// The app receives what lwIP sent and ACKs it, until nothing new comes (at most `rounds`).
    func pumpToApp(_ app: inout AppTCP, rounds: Int = 200) {
        for _ in 0..<rounds {
            turn()
            let segs = deliver(to: &app)
            if segs.isEmpty { return }
            if segs.contains(where: { !$0.payload.isEmpty || $0.isFIN }) { send(app.ackPacket()) }
        }
    }
}

extension Netstack {
    /// Live TCP flows by state name (connecting, handshaking, established, closing).
    var states: [String: Int] { Dictionary(uniqueKeysWithValues: tcpStateCounts()) }
}

/// Events nobody listens to (placeholder for a failed setup).
final class DeadEvents: ByteStreamEvents {
    func streamConnected(_: ByteStream) {}
    func streamFailed(_: ByteStream, _ failure: FlowFailure) {}
    func streamReadable(_: ByteStream) {}
    func streamWritable(_: ByteStream) {}
}

/// Byte-for-byte equality, reported as lengths and the first differing offset (not as dumps).
func assertBytes(_ actual: [UInt8], _ expected: [UInt8], _ message: String = "",
                 file: StaticString = #filePath, line: UInt = #line) {
    if actual == expected { return }
    let common = min(actual.count, expected.count)
    let firstDiff = (0..<common).first { actual[$0] != expected[$0] } ?? common
    XCTFail("bytes differ: got \(actual.count), expected \(expected.count), first difference at \(firstDiff) \(message)",
            file: file, line: line)
}

/// Deterministic test bytes.
func pattern(_ count: Int, seed: UInt8 = 0) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8 &+ Int(seed)) }
}
