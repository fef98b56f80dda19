import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftTLS
import LoftTestSupport
import XCTest
@testable import LoftOutbounds

/// The VLESS codec (bytes exact, every truncation, bad input) and the vless stream's state
/// machine over a scripted inner stream: the header in front of the first write, alone after
/// the wait, the response header taken off the first reads, and every failure counted once by
/// cause.
final class VLESSCodecTests: XCTestCase {
    let uuid: [UInt8] = [0x27, 0xf0, 0xa1, 0xc2, 0x5b, 0x3e, 0x4d, 0x6f, 0x9a, 0x8b, 0x0c, 0x1d, 0x2e, 0x3f, 0x4a, 0x5b]

    func testUUID() {
        XCTAssertEqual(VLESS.parseUUID("27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b"), uuid)
        XCTAssertEqual(VLESS.parseUUID("27F0A1C25B3E4D6F9A8B0C1D2E3F4A5B"), uuid)
        for bad in ["", "27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5", "27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5g",
                    "27f0a1c25-b3e-4d6f-9a8b-0c1d2e3f4a5b", "27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b0"] {
            XCTAssertNil(VLESS.parseUUID(bad), bad)
        }
    }

    func testRequestBytes() {
        let v4 = VLESS.encode(.init(uuid: uuid, command: .tcp, destination: .ip(Endpoint("198.18.1.2:80")!)))!
        XCTAssertEqual(v4, [0] + uuid + [0, 1, 0, 80, 1, 198, 18, 1, 2])
        let v6 = VLESS.encode(.init(uuid: uuid, command: .udp, destination: .ip(Endpoint("[fd00:1::2]:53")!)))!
        XCTAssertEqual(v6, [0] + uuid + [0, 2, 0, 53, 3, 0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2])
        let d = VLESS.encode(.init(uuid: uuid, command: .tcp, destination: .domain("a.example", 443)))!
        XCTAssertEqual(d, [0] + uuid + [0, 1, 1, 187, 2, 9] + Array("a.example".utf8))
        XCTAssertNil(VLESS.encode(.init(uuid: uuid, command: .tcp, destination: .domain("", 443))))
        XCTAssertNil(VLESS.encode(.init(uuid: uuid, command: .tcp, destination: .domain(String(repeating: "a", count: 256), 1))))
        XCTAssertNotNil(VLESS.encode(.init(uuid: uuid, command: .tcp, destination: .domain(String(repeating: "a", count: 255), 1))))
        XCTAssertNil(VLESS.encode(.init(uuid: [1, 2], command: .tcp, destination: .domain("x", 1))))
    }

    func testRequestRoundTripAndEveryTruncation() {
        let requests: [VLESS.Request] = [
            .init(uuid: uuid, command: .tcp, destination: .ip(Endpoint("198.18.1.2:80")!)),
            .init(uuid: uuid, command: .udp, destination: .ip(Endpoint("[fd00:1::2]:53")!)),
            .init(uuid: uuid, command: .tcp, destination: .domain("web.loft.test", 8080)),
        ]
        for r in requests {
            let bytes = VLESS.encode(r)! + [9, 9, 9]
            bytes.withUnsafeBytes { raw in
                XCTAssertEqual(VLESS.parseRequest(raw), .done(r, bytes.count - 3))
                for cut in 0..<(bytes.count - 3) {
                    XCTAssertEqual(VLESS.parseRequest(UnsafeRawBufferPointer(rebasing: raw[0..<cut])), .needMore, "cut \(cut)")
                }
            }
        }
        // Addons are skipped.
        let withAddons: [UInt8] = [0] + uuid + [2, 0xaa, 0xbb, 1, 0, 80, 1, 10, 0, 0, 1]
        withAddons.withUnsafeBytes {
            XCTAssertEqual(VLESS.parseRequest($0), .done(requests[0].with(.ip(Endpoint("10.0.0.1:80")!)), withAddons.count))
        }
        for (bytes, why) in [([1] + uuid, "version 1"), ([0] + uuid + [0, 3], "command 3"),
                             ([0] + uuid + [0, 1, 0, 80, 4], "address type 4"), ([0] + uuid + [0, 1, 0, 80, 2, 0], "empty domain")] {
            bytes.withUnsafeBytes { XCTAssertEqual(VLESS.parseRequest($0), .bad(why)) }
        }
    }

    func testResponse() {
        func parse(_ b: [UInt8]) -> VLESS.Parse<Int> { b.withUnsafeBytes { VLESS.parseResponse($0) } }
        func need(_ b: [UInt8]) -> Int? { b.withUnsafeBytes { VLESS.responseBytesNeeded($0) } }
        XCTAssertEqual(parse([]), .needMore)
        XCTAssertEqual(parse([0]), .needMore)
        XCTAssertEqual(parse([0, 0]), .done(2, 2))
        XCTAssertEqual(parse([0, 0, 7, 7]), .done(2, 2))
        XCTAssertEqual(parse([0, 2, 1]), .needMore)
        XCTAssertEqual(parse([0, 2, 1, 1, 5]), .done(4, 4))
        XCTAssertEqual(parse([1, 0]), .bad("response version 1"))
        XCTAssertEqual(parse(Array("HTTP/1.1 400".utf8)), .bad("response version 72"))
        XCTAssertEqual(need([]), 2)
        XCTAssertEqual(need([0]), 1)
        XCTAssertEqual(need([0, 3]), 3)
        XCTAssertEqual(need([0, 3, 1, 1, 1]), 0)
        XCTAssertNil(need([5]))
        XCTAssertEqual(VLESS.encodeResponse(), [0, 0])
    }

    func testFrames() {
        XCTAssertNil(VLESS.frameHeader(65536))
        XCTAssertNil(VLESS.frameHeader(-1))
        XCTAssertTrue(VLESS.frameHeader(65535)! == (0xff, 0xff))
        XCTAssertTrue(VLESS.frameHeader(258)! == (1, 2))
        let payload = pattern(300, seed: 3)
        let bytes = [1, 44] + payload + [0, 0] + [0, 1, 7] + [0]
        bytes.withUnsafeBytes { raw in
            XCTAssertEqual(VLESS.parseFrame(raw), .done(2..<302, 302))
            for cut in 0..<302 { XCTAssertEqual(VLESS.parseFrame(UnsafeRawBufferPointer(rebasing: raw[0..<cut])), .needMore) }
            let rest = UnsafeRawBufferPointer(rebasing: raw[302...])
            XCTAssertEqual(VLESS.parseFrame(rest), .done(2..<2, 2), "an empty datagram is a frame")
            let rest2 = UnsafeRawBufferPointer(rebasing: rest[2...])
            XCTAssertEqual(VLESS.parseFrame(rest2), .done(2..<3, 3))
            XCTAssertEqual(VLESS.parseFrame(UnsafeRawBufferPointer(rebasing: rest2[3...])), .needMore)
        }
    }
}

extension VLESS.Request {
    func with(_ d: Destination) -> VLESS.Request { VLESS.Request(uuid: uuid, command: command, destination: d) }
}

final class VLESSStreamTests: XCTestCase {
    let uuidText = "27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b"
    var sc: Scenario!
    var outbound: VLESSOutbound!
    let destination = Destination.ip(Endpoint("198.18.1.2:80")!)
    var header: [UInt8] { VLESS.encode(.init(uuid: VLESS.parseUUID(uuidText)!, command: .tcp, destination: destination))! }

    override func setUpWithError() throws {
        sc = try Scenario()
        outbound = try VLESSOutbound(name: "v", loop: sc.loop, runtime: sc.runtime,
                                     options: VLESSOptions(host: "127.0.0.1", port: closedPort(),
                                                           uuid: VLESS.parseUUID(uuidText)!,
                                                           tls: TLSClientOptions(insecure: true)))
    }

    /// A vless flow's end (the in-line preface end) over a scripted inner stream, connected.
    func make(_ log: RecordingStreamEvents, connect: Bool = true) -> (PrefaceStream<VLESS.ResponseCodec>, TestStream) {
        let (s, _) = outbound.makeEnd(events: log)
        let inner = TestStream(readInterest: true)
        inner.zeroCopy = true
        s.attach(inner, connected: connect, holding: header)
        return (s, inner)
    }

    func write(_ s: ByteStream, _ bytes: [UInt8]) -> Int {
        var b = bytes
        return b.withUnsafeMutableBytes { raw in
            var iov = iovec(iov_base: raw.baseAddress, iov_len: raw.count)
            return s.write(&iov, count: 1)
        }
    }

    func read(_ s: ByteStream, max: Int = 4096) -> StreamReadResult {
        var buf = [UInt8](repeating: 0, count: max)
        return buf.withUnsafeMutableBytes { s.read(into: $0) }
    }

    func testHeaderLeavesWithTheFirstBytesInOneWrite() {
        let log = RecordingStreamEvents()
        let (s, inner) = make(log)
        XCTAssertEqual(log.connected, 1)
        XCTAssertTrue(inner.writes.isEmpty, "the header waits for the app's bytes")
        XCTAssertEqual(write(s, Array("GET /".utf8)), 5)
        XCTAssertEqual(inner.writes.count, 1)
        XCTAssertEqual(inner.writes[0], header + Array("GET /".utf8))
        XCTAssertEqual(write(s, [1, 2, 3]), 3)
        XCTAssertEqual(inner.writes.last!, [1, 2, 3])
        XCTAssertEqual(outbound.status.bytesUp, 8, "only the app's bytes are counted")
        s.close()
        XCTAssertTrue(inner.closed)
        XCTAssertEqual(outbound.status.liveFlows, 0)
        XCTAssertEqual(outbound.status.flows, 1)
    }

    func testHeaderAloneAfterTheWait() {
        let log = RecordingStreamEvents()
        var pair: (PrefaceStream<VLESS.ResponseCodec>, TestStream)?
        let ok = sc.run([
            { pair = self.make(log); return true },
            { !pair!.1.writes.isEmpty },
        ])
        XCTAssertTrue(ok)
        XCTAssertEqual(pair!.1.writes, [header])
        XCTAssertEqual(write(pair!.0, [7]), 1)
        XCTAssertEqual(pair!.1.writes.last!, [7])
    }

    func testPartialHeaderWrite() {
        let log = RecordingStreamEvents()
        let (s, inner) = make(log)
        inner.room = 10
        XCTAssertEqual(s.writeRoom, 1, "room smaller than the header still lets a write try")
        XCTAssertEqual(write(s, [1, 2, 3]), 0)
        XCTAssertEqual(inner.written, Array(header[0..<10]))
        inner.room = Int.max
        s.streamWritable(inner)
        XCTAssertEqual(inner.written, header, "the rest of the header goes when room comes back")
        XCTAssertEqual(log.writable, 1)
        XCTAssertEqual(write(s, [1, 2, 3]), 3)
        XCTAssertEqual(inner.written, header + [1, 2, 3])
    }

    func testShutdownBeforeAnyByteSendsTheHeaderFirst() {
        let log = RecordingStreamEvents()
        let (s, inner) = make(log)
        s.shutdownWrite()
        XCTAssertEqual(inner.written, header)
        XCTAssertTrue(inner.shut)
    }

    func testResponseHeaderTakenOffInPieces() {
        let log = RecordingStreamEvents()
        let (s, inner) = make(log)
        inner.incoming = [0]
        XCTAssertEqual(read(s), .wouldBlock)
        inner.incoming = [3, 9]
        XCTAssertEqual(read(s), .wouldBlock)
        inner.incoming = [9, 9] + Array("HTTP".utf8)
        var buf = [UInt8](repeating: 0, count: 64)
        let r = buf.withUnsafeMutableBytes { s.read(into: $0) }
        XCTAssertEqual(r, .data(4))
        XCTAssertEqual(Array(buf[0..<4]), Array("HTTP".utf8))
        inner.eof = true
        XCTAssertEqual(read(s), .eof)
        XCTAssertEqual(outbound.status.bytesDown, 4)
        XCTAssertEqual(outbound.status.extra.reduce(0) { $0 + $1.1 }, 0, "nothing failed")
    }

    func testBadResponseFailsAndIsCounted() {
        let log = RecordingStreamEvents()
        let (s, inner) = make(log)
        _ = write(s, [1])
        inner.incoming = Array("HTTP/1.1 400 Bad Request\r\n".utf8)
        XCTAssertEqual(read(s), .failed(.other(EPROTO)))
        XCTAssertEqual(outbound.failures(.badResponse), 1)
        s.reset()
        XCTAssertTrue(inner.resetCalls > 0)
        XCTAssertEqual(outbound.failures(.timeout), 0, "a reset after a failure counts nothing more")
        XCTAssertTrue(outbound.status.detail.contains("bad-response"), outbound.status.detail)
    }

    func testClosedBeforeResponseIsCountedOnceEach() {
        for _ in 0..<3 {
            let log = RecordingStreamEvents()
            let (s, inner) = make(log)
            _ = write(s, [1])
            inner.incoming = [0]
            inner.eof = true
            XCTAssertEqual(read(s), .failed(.other(ECONNRESET)))
            XCTAssertEqual(read(s), .failed(.other(ECONNRESET)), "the failure stays")
            s.reset()
        }
        XCTAssertEqual(outbound.failures(.noResponse), 3)
        XCTAssertEqual(outbound.meter.logged, [.noResponse], "logged once for the cause")
        XCTAssertEqual(outbound.status.state, "failing")
        XCTAssertEqual(outbound.status.liveFlows, 0)
        // A flow that gets its response clears the logged causes: the next failure is news.
        let (s, inner) = make(RecordingStreamEvents())
        inner.incoming = [0, 0, 1]
        XCTAssertEqual(read(s), .data(1))
        XCTAssertTrue(outbound.meter.logged.isEmpty)
        XCTAssertEqual(outbound.status.state, "ready")
        s.close()
    }

    func testAppDoneThenServerClosesSilentlyIsAPlainEnd() {
        let (s, inner) = make(RecordingStreamEvents())
        s.shutdownWrite()
        inner.eof = true
        XCTAssertEqual(read(s), .eof)
        XCTAssertEqual(outbound.status.extra.reduce(0) { $0 + $1.1 }, 0, "not a failure")
        s.close()
    }

    func testResetWhileConnectingIsTheConnectDeadline() {
        let (s, inner) = make(RecordingStreamEvents(), connect: false)
        XCTAssertEqual(write(s, [1]), 0, "nothing is written before the connection is up")
        s.reset()
        XCTAssertTrue(inner.resetCalls > 0)
        XCTAssertEqual(outbound.failures(.timeout), 1)
    }

    func testReadInterestPassesThrough() {
        let (s, inner) = make(RecordingStreamEvents())
        s.setReadInterest(false)
        XCTAssertFalse(inner.readInterest)
        s.setReadInterest(true)
        XCTAssertTrue(inner.readInterest)
    }

    /// The real TLS end: a refused connect and a server that is not TLS, each one failure of
    /// its cause, reported as the stream's failure.
    func testRefusedAndNotTLSThroughTheOutbound() throws {
        let refused = StreamProbe()
        let echo = TCPEchoServer(loop: sc.loop, address: loopback4)
        let notTLS = try VLESSOutbound(name: "n", loop: sc.loop, runtime: sc.runtime,
                                       options: VLESSOptions(host: "127.0.0.1", port: echo.endpoint.port,
                                                             uuid: VLESS.parseUUID(uuidText)!,
                                                             tls: TLSClientOptions(insecure: true)))
        let garbled = StreamProbe()
        let ok = sc.run([
            { refused.conn = self.outbound.openStream(to: self.destination, events: refused)
              garbled.conn = notTLS.openStream(to: self.destination, events: garbled); return true },
            { refused.failure != nil && garbled.failure != nil },
        ])
        XCTAssertTrue(ok)
        XCTAssertEqual(refused.failure, .refused)
        XCTAssertEqual(outbound.failures(.connect), 1)
        XCTAssertEqual(notTLS.failures(.tls), 1)
        XCTAssertEqual(outbound.status.liveFlows, 0)
        XCTAssertEqual(notTLS.status.liveFlows, 0)
    }
}

/// The UDP association over scripted inner streams: one connection per destination, the
/// request header and the datagrams that waited in one write, frames both ways (split across
/// reads), drops counted, the idle timeout, a bad response.
final class VLESSAssociationTests: XCTestCase {
    let uuid = VLESS.parseUUID("27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b")!
    let dns4 = Endpoint("198.18.1.2:53")!
    let dns6 = Endpoint("[fd00:1::2]:53")!
    var sc: Scenario!
    var dialed: [TestStream] = []

    /// On virtual time: the idle and connect deadlines are loop timers, the inner streams
    /// scripted.
    override func setUpWithError() throws { sc = try Scenario(clock: VirtualClock()) }

    func outbound(idleMs: UInt64 = 60_000, connectMs: UInt64 = 10_000) throws -> VLESSOutbound {
        let o = try VLESSOutbound(name: "v", loop: sc.loop, runtime: sc.runtime,
                                  options: VLESSOptions(host: "127.0.0.1", port: 1, uuid: uuid,
                                                        tls: TLSClientOptions(insecure: true), udpIdleTimeoutMs: idleMs,
                                                        connectTimeoutMs: connectMs))
        o.testDialer = { [unowned self] events in
            let s = TestStream(readInterest: true)
            s.zeroCopy = true
            s.events = events
            self.dialed.append(s)
            return s
        }
        return o
    }

    func send(_ a: DatagramAssociation, _ bytes: [UInt8], to e: Endpoint) -> Bool {
        bytes.withUnsafeBytes { a.send($0, to: .ip(e)) }
    }

    func header(_ e: Endpoint) -> [UInt8] { VLESS.encode(.init(uuid: uuid, command: .udp, destination: .ip(e)))! }

    func testOneConnectionPerDestinationAndFramesBothWays() throws {
        let o = try outbound()
        let probe = DatagramProbe()
        let a = try XCTUnwrap(o.openAssociation(events: probe))
        XCTAssertTrue(send(a, [1, 2, 3], to: dns4))
        XCTAssertTrue(send(a, [4], to: dns4))
        XCTAssertTrue(send(a, [5, 5], to: dns6))
        XCTAssertEqual(dialed.count, 2, "one connection per destination")
        XCTAssertTrue(dialed[0].writes.isEmpty, "nothing before the handshake")
        dialed[0].events?.streamConnected(dialed[0])
        XCTAssertEqual(dialed[0].writes, [header(dns4) + [0, 3, 1, 2, 3, 0, 1, 4]], "header and waiting datagrams in one write")
        XCTAssertTrue(send(a, [9, 9], to: dns4))
        XCTAssertEqual(dialed[0].writes.last!, [0, 2, 9, 9])
        // Replies: the response header, one frame and the start of the next; then the rest.
        dialed[0].incoming = [0, 0, 0, 2, 7, 7, 0, 3, 8]
        dialed[0].events?.streamReadable(dialed[0])
        XCTAssertEqual(probe.received.map(\.payload), [[7, 7]])
        XCTAssertEqual(probe.received.first?.from, dns4)
        // A partial frame is taken off the stream (the TLS end stops reading while bytes are
        // left in it: issue 28) and delivered once whole.
        XCTAssertEqual(dialed[0].incoming, [], "a partial frame waits in the association until it is whole")
        XCTAssertEqual(probe.received.count, 1)
        dialed[0].incoming += [8, 8, 0, 0]
        dialed[0].events?.streamReadable(dialed[0])
        XCTAssertEqual(probe.received.map(\.payload), [[7, 7], [8, 8, 8], []])
        XCTAssertEqual(o.status.bytesUp, 6)
        XCTAssertEqual(o.status.bytesDown, 5)
        XCTAssertEqual(o.status.flows, 1, "an association is one flow")
        a.close()
        XCTAssertTrue(dialed.allSatisfy(\.closed))
        XCTAssertEqual(o.status.liveFlows, 0)
    }

    func testDropsAreCounted() throws {
        let o = try outbound()
        let a = try XCTUnwrap(o.openAssociation(events: DatagramProbe()))
        XCTAssertFalse(send(a, [UInt8](repeating: 1, count: 65536), to: dns4), "too long for a frame")
        XCTAssertTrue(send(a, [UInt8](repeating: 1, count: 30000), to: dns4))
        XCTAssertFalse(send(a, [UInt8](repeating: 1, count: 3000), to: dns4), "over the 32 KiB waiting before the handshake")
        dialed[0].events?.streamConnected(dialed[0])
        dialed[0].room = 10
        XCTAssertFalse(send(a, [UInt8](repeating: 1, count: 20), to: dns4), "a frame goes whole or not at all")
        XCTAssertEqual(o.status.counter("udp-dropped"), 3)
        a.close()
    }

    func testBadResponseEndsTheDestinationAndTheNextDatagramRedials() throws {
        let o = try outbound()
        let probe = DatagramProbe()
        let a = try XCTUnwrap(o.openAssociation(events: probe))
        XCTAssertTrue(send(a, [1], to: dns4))
        dialed[0].events?.streamConnected(dialed[0])
        dialed[0].incoming = Array("HTTP/1.1 400".utf8)
        dialed[0].events?.streamReadable(dialed[0])
        XCTAssertTrue(dialed[0].closed)
        XCTAssertEqual(o.failures(.badResponse), 1)
        XCTAssertTrue(probe.received.isEmpty)
        XCTAssertTrue(send(a, [2], to: dns4))
        XCTAssertEqual(dialed.count, 2)
        dialed[1].events?.streamConnected(dialed[1])
        dialed[1].incoming = [0, 0]
        dialed[1].eof = true
        dialed[1].events?.streamReadable(dialed[1])
        XCTAssertTrue(dialed[1].closed, "the server's end closes the destination")
        XCTAssertEqual(o.failures(.noResponse), 0, "it had answered")
        a.close()
    }

    func testConnectDeadlineWhileDatagramsKeepComing() throws {
        let o = try outbound(idleMs: 60, connectMs: 100)
        let a = try XCTUnwrap(o.openAssociation(events: DatagramProbe()))
        // A datagram every 20 ms keeps the idle deadline away; the connect deadline still ends
        // a connection that never came up, and the next datagram dials again.
        var sent = 0
        let ok = sc.run([
            { sent += 1; _ = self.send(a, [1], to: self.dns4); return self.dialed.count >= 2 || sent > 50 },
        ])
        XCTAssertTrue(ok)
        XCTAssertEqual(dialed.count, 2, "after \(sent) sends")
        XCTAssertTrue(dialed[0].closed)
        XCTAssertEqual(o.failures(.timeout), 1)
        a.close()
    }

    func testIdleDestinationCloses() throws {
        let o = try outbound(idleMs: 60)
        let a = try XCTUnwrap(o.openAssociation(events: DatagramProbe()))
        let ok = sc.run([
            { self.send(a, [1], to: self.dns4) },
            { self.dialed[0].events?.streamConnected(self.dialed[0]); return true },
            { self.dialed[0].closed },
            { self.send(a, [2], to: self.dns4) && self.dialed.count == 2 },
        ])
        XCTAssertTrue(ok, "stuck at step \(sc.failedStep ?? -1)")
        a.close()
    }
}
