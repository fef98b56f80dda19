@testable import LoftCarriers
import LoftCore
import LoftHTTP
import XCTest

/// An H2Engine's output in memory, with a capacity (the TLS output buffer's role).
final class MemoryOutput: H2Output {
    var bytes: [UInt8] = []
    var capacity: Int
    init(capacity: Int = 256 * 1024) { self.capacity = capacity }
    var h2Free: Int { capacity - bytes.count }
    func h2Append(_ p: UnsafeRawPointer, _ count: Int) {
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: p, count: count))
    }
    func take() -> [UInt8] { defer { bytes.removeAll(keepingCapacity: true) }; return bytes }
}

/// Records what an engine reports.
final class EngineRecorder: H2EngineOwner {
    var admit = true
    var admitted: [H2RequestHead] = []
    var events: [String] = []
    var received: [UInt8] = []
    var pauseAt = Int.max
    var response: Int?
    var accepted = false
    var peerEnded = false
    var windowOpened = 0
    var refused: [Int] = []

    func h2Admit(_ engine: H2Engine, _ head: H2RequestHead) -> Bool {
        admitted.append(head)
        return admit
    }

    func h2Event(_ engine: H2Engine, _ event: H2Event) {
        switch event {
        case .peerSettings: events.append("settings")
        case .accepted: accepted = true; events.append("accepted")
        case .response(let s): response = s; events.append("response \(s)")
        case .data(let b):
            received += b
            if received.count >= pauseAt { engine.paused = true }
        case .windowOpened: windowOpened += 1
        case .peerEnded: peerEnded = true; events.append("ended")
        case .streamReset(let c): events.append("reset \(c)")
        case .goAway(let c): events.append("goaway \(c)")
        case .refused(let s, _): refused.append(s); events.append("refused \(s)")
        }
    }
}

/// A client and a server engine joined in memory.
final class EnginePair {
    let cOut = MemoryOutput()
    let sOut = MemoryOutput()
    let client: H2Engine
    let server: H2Engine
    let cRec = EngineRecorder()
    let sRec = EngineRecorder()
    /// Bytes the receiving side did not take yet (it paused).
    var toServer: [UInt8] = []
    var toClient: [UInt8] = []

    init(clientSettings: H2Settings = H2Settings(), serverSettings: H2Settings = H2Settings()) {
        client = H2Engine(server: false, settings: clientSettings, output: cOut)!
        server = H2Engine(server: true, path: "/loft", settings: serverSettings, output: sOut)!
        client.owner = cRec
        server.owner = sRec
    }

    /// Moves bytes both ways until nothing moves (or `rounds` pass).
    func run(rounds: Int = 1000) {
        for _ in 0..<rounds {
            client.pump()
            server.pump()
            toServer += cOut.take()
            toClient += sOut.take()
            var moved = false
            if !toServer.isEmpty, let n = toServer.withUnsafeBytes({ server.receive($0) }), n > 0 {
                toServer.removeFirst(n); moved = true
            }
            if !toClient.isEmpty, let n = toClient.withUnsafeBytes({ client.receive($0) }), n > 0 {
                toClient.removeFirst(n); moved = true
            }
            if !moved && cOut.bytes.isEmpty && sOut.bytes.isEmpty && !client.wantsWrite && !server.wantsWrite { return }
        }
    }

    /// SETTINGS both ways, the CONNECT and its 200.
    func open() {
        run()
        XCTAssertEqual(cRec.events.first, "settings")
        XCTAssertTrue(client.peerAllowsConnect)
        XCTAssertTrue(client.connect(authority: "front.test:443", path: "/loft"))
        run()
    }
}

final class H2EngineTests: XCTestCase {
    func testExtendedConnectOpensTheSession() {
        let p = EnginePair()
        p.open()
        XCTAssertEqual(p.cRec.response, 200)
        XCTAssertTrue(p.sRec.accepted)
        let head = p.sRec.admitted.first
        XCTAssertEqual(head?.method, "CONNECT")
        XCTAssertEqual(head?.protocolName, "loft")
        XCTAssertEqual(head?.path, "/loft")
        XCTAssertEqual(head?.authority, "front.test:443")
        XCTAssertEqual(p.client.sessionStream, 1)
        XCTAssertEqual(p.server.sessionStream, 1)
        // Our SETTINGS give each side a 16 MiB window, well above HTTP/2's 64 KiB.
        XCTAssertEqual(p.client.sendWindow, 16 << 20)
        XCTAssertEqual(p.server.sendWindow, 16 << 20)
    }

    /// The SETTINGS and window docs/protocol.md §1.1 gives, as they go on the wire.
    func testSettingsOnTheWire() {
        func entries(_ p: [UInt8]) -> [UInt16: UInt32] {
            var d: [UInt16: UInt32] = [:]
            var i = 0
            while i + 6 <= p.count {
                d[UInt16(p[i]) << 8 | UInt16(p[i + 1])] = p[i + 2..<i + 6].reduce(0) { $0 << 8 | UInt32($1) }
                i += 6
            }
            return d
        }
        let so = MemoryOutput()
        let server = H2Engine(server: true, output: so)!
        server.pump()
        let sf = splitFrames(so.bytes)
        XCTAssertEqual(sf.first?.type, 4)
        XCTAssertEqual(entries(sf[0].payload), [3: 8, 4: 16 << 20, 5: 65536, 6: 16384, 8: 1])
        XCTAssertTrue(sf.contains { $0.type == 8 && $0.stream == 0 && $0.payload == [0, 0xFF, 0, 1] }, "WINDOW_UPDATE to 16 MiB")
        let co = MemoryOutput()
        let client = H2Engine(server: false, output: co)!
        client.pump()
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        XCTAssertEqual(Array(co.bytes.prefix(24)), preface)
        let cf = splitFrames(Array(co.bytes.dropFirst(24)))
        XCTAssertEqual(cf.first?.type, 4)
        XCTAssertEqual(entries(cf[0].payload), [2: 0, 4: 16 << 20, 5: 65536, 6: 16384])
        XCTAssertTrue(cf.contains { $0.type == 8 && $0.stream == 0 && $0.payload == [0, 0xFF, 0, 1] })
    }

    func testBytesBothWaysAndEndStream() {
        let p = EnginePair()
        p.open()
        var up = [UInt8](repeating: 0, count: 3 << 20)
        var down = [UInt8](repeating: 0, count: 3 << 20)
        for i in up.indices { up[i] = UInt8(truncatingIfNeeded: i &* 7) ; down[i] = UInt8(truncatingIfNeeded: i &* 13) }
        var sentUp = 0, sentDown = 0
        for _ in 0..<10_000 where sentUp < up.count || sentDown < down.count {
            sentUp += up[sentUp...].withUnsafeBytes { p.client.write($0) }
            sentDown += down[sentDown...].withUnsafeBytes { p.server.write($0) }
            p.run()
        }
        XCTAssertEqual(p.sRec.received, up)
        XCTAssertEqual(p.cRec.received, down)
        p.client.finish()
        p.run()
        XCTAssertTrue(p.sRec.peerEnded)
        p.server.finish()
        p.run()
        XCTAssertTrue(p.cRec.peerEnded)
        XCTAssertFalse(p.client.sessionStreamOpen)
    }

    /// Writes stop at the peer's window and at the output's room; the window reopens when the
    /// peer takes the bytes.
    func testWindowAndOutputBoundWrites() {
        var small = H2Settings()
        small.initialWindow = 65535
        small.connectionWindow = 65535
        let p = EnginePair(clientSettings: small)
        p.open()
        let big = [UInt8](repeating: 0x5A, count: 1 << 20)
        let n = big.withUnsafeBytes { p.server.write($0) }
        XCTAssertEqual(n, 65535, "the client's 64 KiB window bounds what the server frames")
        XCTAssertEqual(p.server.writable, 0)
        XCTAssertEqual(big.withUnsafeBytes { p.server.write($0) }, 0)
        let opened = p.sRec.windowOpened
        p.run()
        XCTAssertEqual(p.cRec.received.count, 65535)
        XCTAssertGreaterThan(p.sRec.windowOpened, opened, "WINDOW_UPDATE reported")
        XCTAssertGreaterThan(p.server.writable, 0)
        // The output's room bounds too: 100 KiB of output, control reserve kept.
        let q = EnginePair()
        q.open()
        q.sOut.capacity = 100 * 1024
        let m = big.withUnsafeBytes { q.server.write($0) }
        XCTAssertLessThanOrEqual(q.sOut.bytes.count, 100 * 1024 - H2Engine.controlReserve)
        XCTAssertGreaterThan(m, 90 * 1024)
        XCTAssertEqual(m + 9 * ((m + 65535) / 65536), q.sOut.bytes.count, "payload copied once, 9 header bytes per frame")
    }

    /// The engine's framed reader (nghttp2) with its input split into two receives at every
    /// byte position of a run of DATA frames (two writes: 5 and 300 bytes, so two frames with
    /// their 9-byte headers): every byte comes out exact and in order (issue 28: any framed
    /// reader on any stream). One session, the same run again for each split.
    func testReceiveSplitAtEveryByte() {
        let p = EnginePair()
        p.open()
        let a = (0..<5).map { UInt8($0 + 1) }
        let b = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        var wireCount: Int?
        var k = 0
        var expected: [UInt8] = []
        while k <= (wireCount ?? 0) {
            XCTAssertEqual(a.withUnsafeBytes { p.client.write($0) }, a.count)
            XCTAssertEqual(b.withUnsafeBytes { p.client.write($0) }, b.count)
            p.client.pump()
            let wire = p.cOut.take()
            if wireCount == nil { wireCount = wire.count }
            XCTAssertEqual(wire.count, wireCount, "the same frames each time")
            expected += a + b
            let cut = min(k, wire.count)
            let first = wire[0..<cut].withUnsafeBytes { p.server.receive($0) }
            let second = wire[cut...].withUnsafeBytes { p.server.receive($0) }
            XCTAssertEqual(first, cut, "split at byte \(k): first read")
            XCTAssertEqual(second, wire.count - cut, "split at byte \(k): second read")
            XCTAssertTrue(p.sRec.received == expected, "split at byte \(k) of \(wire.count)")
            p.run()
            k += 1
        }
        XCTAssertEqual(wireCount, 2 * 9 + a.count + b.count)
        XCTAssertTrue(p.sRec.events.allSatisfy { !$0.hasPrefix("reset") && !$0.hasPrefix("goaway") })
    }

    /// A reader that pauses keeps the rest of the input unprocessed until the next receive.
    func testPausedReceiveLeavesTheRest() {
        let p = EnginePair()
        p.open()
        p.sRec.pauseAt = 1000
        let data = [UInt8](repeating: 1, count: 200_000)
        XCTAssertEqual(data.withUnsafeBytes { p.client.write($0) }, data.count)
        p.client.pump()
        let wire = p.cOut.take()
        let n = wire.withUnsafeBytes { p.server.receive($0) } ?? -1
        XCTAssertGreaterThan(n, 0)
        XCTAssertLessThan(n, wire.count)
        XCTAssertLessThan(p.sRec.received.count, 100_000)
        p.sRec.pauseAt = .max
        let rest = Array(wire[n...])
        XCTAssertEqual(rest.withUnsafeBytes { p.server.receive($0) }, rest.count)
        XCTAssertEqual(p.sRec.received.count, data.count)
    }

    /// RST_STREAM and GOAWAY with an error reach the other side as events (the carrier ends).
    func testResetAndGoAwayAreReported() {
        let p = EnginePair()
        p.open()
        p.client.fail(8)    // CANCEL
        p.run()
        XCTAssertTrue(p.sRec.events.contains("reset 8"), "\(p.sRec.events)")
        XCTAssertTrue(p.sRec.events.contains("goaway 8"), "\(p.sRec.events)")
        XCTAssertFalse(p.server.sessionStreamOpen)
        XCTAssertEqual(p.server.writable, 0)
    }

    func testAdmitRefusalIs403() {
        let p = EnginePair()
        p.sRec.admit = false
        p.open()
        XCTAssertEqual(p.cRec.response, 403)
        XCTAssertEqual(p.sRec.refused, [403])
        XCTAssertFalse(p.sRec.accepted)
    }

    /// A second CONNECT on a connection that carries a session already is answered 429.
    func testSecondConnectIs429() {
        let p = EnginePair()
        p.open()
        var block: [UInt8] = [0x02, 7] + Array("CONNECT".utf8)           // :method, literal
        block += [0x00, 9] + Array(":protocol".utf8) + [4] + Array("loft".utf8)
        block += [0x87, 0x04, 5] + Array("/loft".utf8) + [0x01, 1, 0x78]  // :scheme https, :path, :authority
        let wire = h2Frame(1, 0x4, 3, block)
        XCTAssertEqual(wire.withUnsafeBytes { p.server.receive($0) }, wire.count)
        XCTAssertEqual(p.sRec.refused, [429])
        XCTAssertEqual(p.server.sessionStream, 1)
        XCTAssertEqual(p.sRec.admitted.count, 1)
    }

    /// Requests pipelined in one write reach the engine over several reads (TLS records):
    /// they are refused up to the cap and no further, whatever the reads: the GOAWAY follows the
    /// 16th, later requests are reset without an answer or an event (was: 630 refusals, each
    /// with a response and a log line, before the GOAWAY on one connection).
    func testPipelinedRefusalsStopAtTheCap() {
        let out = MemoryOutput()
        let rec = EngineRecorder()
        let e = H2Engine(server: true, path: "/loft", output: out)!
        e.owner = rec
        var wire = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        wire += h2Frame(4, 0, 0, [])
        _ = wire.withUnsafeBytes { e.receive($0) }
        var stream: UInt32 = 1
        for _ in 0..<25 {
            // Eight GET / requests per read (MAX_CONCURRENT_STREAMS), each on its own stream.
            var batch: [UInt8] = []
            for _ in 0..<8 {
                batch += h2Frame(1, 0x5, stream, [0x82, 0x87, 0x84, 0x01, 1, 0x78])
                stream += 2
            }
            _ = batch.withUnsafeBytes { e.receive($0) }
            e.pump()
            _ = out.take()
        }
        XCTAssertEqual(rec.refused.count, H2Engine.maxRefusals, "refusals answered on one connection")
        XCTAssertNotNil(e.failure)
        XCTAssertTrue(rec.refused.allSatisfy { $0 == 404 })
    }

    func testDecisions() {
        func head(_ m: String, _ path: String, _ proto: String = "") -> H2RequestHead {
            var h = H2RequestHead(); h.method = m; h.path = path; h.protocolName = proto; return h
        }
        XCTAssertEqual(H2Engine.decide(head("CONNECT", "/loft", "loft"), path: "/loft").status, 200)
        XCTAssertEqual(H2Engine.decide(head("CONNECT", "/loft?x=1", "loft"), path: "/loft").status, 200)
        XCTAssertEqual(H2Engine.decide(head("GET", "/other"), path: "/loft").status, 404)
        XCTAssertEqual(H2Engine.decide(head("CONNECT", "/lof", "loft"), path: "/loft").status, 404)
        XCTAssertEqual(H2Engine.decide(head("GET", "/loft"), path: "/loft").status, 405)
        XCTAssertEqual(H2Engine.decide(head("POST", "/loft"), path: "/loft").status, 405)
        XCTAssertEqual(H2Engine.decide(head("CONNECT", "/loft"), path: "/loft").status, 400)
        XCTAssertEqual(H2Engine.decide(head("CONNECT", "/loft", "websocket"), path: "/loft").status, 400)
        var big = head("CONNECT", "/loft", "loft")
        big.tooBig = true
        XCTAssertEqual(H2Engine.decide(big, path: "/loft").status, 431)
    }

    /// Bytes that are not HTTP/2 end the server connection with a GOAWAY; nothing is delivered.
    func testGarbageEndsTheConnection() {
        let out = MemoryOutput()
        let rec = EngineRecorder()
        let e = H2Engine(server: true, output: out)!
        e.owner = rec
        let junk = [UInt8]("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        let r = junk.withUnsafeBytes { e.receive($0) }
        XCTAssertNil(r)
        XCTAssertNotNil(e.failure)
        XCTAssertTrue(rec.received.isEmpty)
        XCTAssertFalse(rec.accepted)
    }

    /// A header block that decodes far beyond the header list limit is refused (431, stream
    /// reset) and the connection goes on.
    func testHeaderBombIsRefused() {
        let out = MemoryOutput()
        let rec = EngineRecorder()
        let e = H2Engine(server: true, output: out)!
        e.owner = rec
        var wire = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        wire += h2Frame(4, 0, 0, [])
        // :method GET, :scheme https, :path /, then x-bomb: 4000 × "v" added to the table and
        // referenced 4000 times.
        var block: [UInt8] = [0x82, 0x87, 0x84, 0x40, 6] + Array("x-bomb".utf8)
        block += [0x7F, 0xA1, 0x1E] + [UInt8](repeating: 0x76, count: 4000)   // 127 + 3873
        block += [UInt8](repeating: 0x80 | 62, count: 4000)
        wire += h2Frame(1, 0x5, 1, block)
        XCTAssertEqual(wire.withUnsafeBytes { e.receive($0) }, wire.count)
        e.pump()
        XCTAssertEqual(rec.refused, [431])
        XCTAssertFalse(e.isFinished)
        XCTAssertNil(e.failure)
        // The front's answer: RST_STREAM INTERNAL_ERROR (2) on stream 1.
        let frames = splitFrames(out.bytes)
        XCTAssertTrue(frames.contains { $0.type == 3 && $0.stream == 1 && $0.payload == [0, 0, 0, 2] }, "\(frames.map { $0.type })")
    }
}

func h2Frame(_ type: UInt8, _ flags: UInt8, _ stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
    let n = payload.count
    return [UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF), type, flags,
            UInt8(stream >> 24), UInt8(stream >> 16 & 0xFF), UInt8(stream >> 8 & 0xFF), UInt8(stream & 0xFF)] + payload
}

/// Frames of an HTTP/2 byte stream (after the client preface, if any).
func splitFrames(_ b: [UInt8]) -> [(type: UInt8, flags: UInt8, stream: UInt32, payload: [UInt8])] {
    var out: [(type: UInt8, flags: UInt8, stream: UInt32, payload: [UInt8])] = []
    var i = 0
    while i + 9 <= b.count {
        let n = Int(b[i]) << 16 | Int(b[i + 1]) << 8 | Int(b[i + 2])
        guard i + 9 + n <= b.count else { break }
        let sid = UInt32(b[i + 5] & 0x7F) << 24 | UInt32(b[i + 6]) << 16 | UInt32(b[i + 7]) << 8 | UInt32(b[i + 8])
        out.append((b[i + 3], b[i + 4], sid, Array(b[i + 9..<i + 9 + n])))
        i += 9 + n
    }
    return out
}
