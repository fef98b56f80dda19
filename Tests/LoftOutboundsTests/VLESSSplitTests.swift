import Glibc
import LoftCore
import LoftIO
import LoftTLS
import LoftTestSupport
import XCTest
@testable import LoftCarriers
@testable import LoftOutbounds

/// A VLESS server of our own on 127.0.0.1 (TLS with the test PKI) for UDP associations: each
/// connection's first datagram names a split point `k` (4 bytes); the server answers with
/// `reply` (the response header and frames) in two TLS records, the first `k` bytes, then,
/// `gapMs` later, the rest. So every byte position of the reply is, on some connection, where
/// one read ends and the next begins.
final class SplitVLESSServer: IOHandler, TLSConnectionOwner {
    let runtime: CarrierRuntime
    let context: TLSContext
    private(set) var listenFD: Int32 = -1
    private(set) var port: UInt16 = 0
    let reply: [UInt8]
    let gapMs: UInt64
    private var conns: [ObjectIdentifier: (conn: TLSConnection, got: [UInt8], answered: Bool)] = [:]
    private var timers: [TimerHandle] = []
    /// Request header (IPv4 destination) and one 4-byte frame.
    static let requestBytes = 26 + 2 + 4

    init(runtime: CarrierRuntime, reply: [UInt8], gapMs: UInt64) throws {
        self.runtime = runtime
        self.reply = reply
        self.gapMs = gapMs
        context = try TLSContext(server: TestPKI.shared.server, alpn: [])
        (listenFD, port) = loopbackListener(loop: runtime.loop, backlog: 512, handler: self)
    }

    deinit {
        runtime.loop.unregister(listenFD)
        close(listenFD)
        for t in timers { runtime.loop.cancel(t) }
        for c in conns.values { c.conn.abort() }
    }

    func handleIO(_ events: UInt32) {
        while true {
            let fd = accept(listenFD, nil, nil)
            guard fd >= 0 else { return }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            guard let c = TLSConnection.accepted(runtime: runtime, context: context, fd: fd, peer: nil,
                                                 inputBytes: 16 * 1024, outputBytes: 128 * 1024) else { continue }
            c.owner = self
            conns[ObjectIdentifier(c)] = (c, [], false)
        }
    }

    func tlsReady(_ c: TLSConnection) {}
    func tlsFlushed(_ c: TLSConnection) {}
    func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?) { conns[ObjectIdentifier(c)] = nil }

    func tlsReceived(_ c: TLSConnection) {
        let id = ObjectIdentifier(c)
        guard var e = conns[id] else { return }
        e.got += UnsafeRawBufferPointer(start: c.input + c.inStart, count: c.inEnd - c.inStart)
        c.inStart = c.inEnd
        defer { conns[id] = e }
        guard !e.answered, e.got.count >= Self.requestBytes else { return }
        e.answered = true
        let k = min(e.got[28..<32].reduce(0) { $0 << 8 | Int($1) }, reply.count)
        send(c, reply[0..<k])
        timers.append(runtime.after(gapMs) { [weak self, weak c] in
            guard let self, let c else { return }
            self.send(c, self.reply[k...])
        })
    }

    /// One SSL_write per call: one TLS record per 16 KiB.
    private func send(_ c: TLSConnection, _ bytes: ArraySlice<UInt8>) {
        guard !bytes.isEmpty else { return }
        _ = bytes.withUnsafeBytes { c.append($0) }
        c.flush()
    }
}

/// The association's frame reader over the real TLS end (TLSStream's read behaviour: what the
/// reader leaves stays in the connection's input buffer), the server's reply split at every
/// byte position across two TLS records. Every frame must come out whole and exact, in order.
final class VLESSSplitTests: XCTestCase {
    let uuid = VLESS.parseUUID("27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b")!
    let destination = Endpoint("198.18.1.2:53")!

    func testAssociationTakesFramesSplitAtEveryByteAcrossTLSRecords() throws {
        let sc = try Scenario()
        // The response header, then frames: short ones, an empty one, one of 20,000 bytes
        // (which itself spans two records of 16 KiB) and the largest, 65,535 bytes (larger
        // than the TLS end's 64 KiB input buffer).
        let payloads: [[UInt8]] = [[7, 7, 7], [], [9], (0..<40).map { UInt8($0) },
                                   (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31) },
                                   (0..<65_535).map { UInt8(truncatingIfNeeded: $0 &* 17) }]
        var reply: [UInt8] = [0, 0]
        for p in payloads { reply += [UInt8(p.count >> 8), UInt8(p.count & 0xff)] + p }
        let small = reply.count - 20_002 - 65_537
        let last = reply.count - 65_537
        // Every position through the short frames and the long frame's header, a few inside
        // the long ones and at their edges.
        let splits = Array(0...(small + 1)) + [small + 2, small + 1000, small + 16_000, last - 1, last, last + 1,
                                               last + 2, last + 40_000, reply.count - 1]
        let server = try SplitVLESSServer(runtime: sc.runtime, reply: reply, gapMs: 30)
        let o = try VLESSOutbound(name: "v", loop: sc.loop, runtime: sc.runtime,
                                  options: VLESSOptions(host: "127.0.0.1", port: server.port, uuid: uuid,
                                                        tls: TLSClientOptions(insecure: true)))
        var probes: [DatagramProbe] = []
        var associations: [DatagramAssociation] = []
        let ok = sc.run(seconds: 30, [
            {
                for k in splits {
                    let p = DatagramProbe()
                    let a = o.openAssociation(events: p)!
                    let four = [UInt8(k >> 24), UInt8(k >> 16 & 0xff), UInt8(k >> 8 & 0xff), UInt8(k & 0xff)]
                    _ = four.withUnsafeBytes { a.send($0, to: .ip(self.destination)) }
                    probes.append(p)
                    associations.append(a)
                }
                return true
            },
            { probes.allSatisfy { $0.received.count >= payloads.count } },
        ])
        for (i, p) in probes.enumerated() {
            XCTAssertEqual(p.received.count, payloads.count, "split at byte \(splits[i]) of \(reply.count)")
            XCTAssertTrue(p.received.map(\.payload) == payloads, "split at byte \(splits[i]): frames not exact")
        }
        XCTAssertTrue(ok, "not every frame arrived")
        XCTAssertEqual(o.status.counter("udp-dropped"), 0)
        for a in associations { a.close() }
        _ = server
    }

    /// The same reader over a scripted stream, every split into two reads and one byte per
    /// read: after every read nothing may be left in the stream (the TLS end would stop
    /// reading), and the frames come out exact. A bad response split after its first byte
    /// still fails as one.
    func testEverySplitOverAScriptedStream() throws {
        let sc = try Scenario()
        var dialed: [TestStream] = []
        let o = try VLESSOutbound(name: "v", loop: sc.loop, runtime: sc.runtime,
                                  options: VLESSOptions(host: "127.0.0.1", port: 1, uuid: uuid,
                                                        tls: TLSClientOptions(insecure: true)))
        o.testDialer = { events in
            let s = TestStream(readInterest: true)
            s.zeroCopy = true
            s.events = events
            dialed.append(s)
            return s
        }
        let payloads: [[UInt8]] = [[7, 7, 7], [], [9], (0..<300).map { UInt8(truncatingIfNeeded: $0) }, [1, 2]]
        var reply: [UInt8] = [0, 2, 0xAA, 0xBB]        // a response with two addon bytes
        for p in payloads { reply += [UInt8(p.count >> 8), UInt8(p.count & 0xff)] + p }
        var cuts: [[Int]] = (0...reply.count).map { [$0] }
        cuts.append(Array(1..<reply.count))            // one byte per read
        for cut in cuts {
            let probe = DatagramProbe()
            let a = try XCTUnwrap(o.openAssociation(events: probe))
            _ = [UInt8(1)].withUnsafeBytes { a.send($0, to: .ip(destination)) }
            let s = dialed.last!
            s.events?.streamConnected(s)
            var at = 0
            for c in cut + [reply.count] {
                s.incoming += reply[at..<c]
                at = c
                s.events?.streamReadable(s)
                XCTAssertEqual(s.incoming, [], "cut \(cut.count == 1 ? "at \(cut[0])" : "every byte"): bytes left in the stream")
            }
            XCTAssertTrue(probe.received.map(\.payload) == payloads, "cut \(cut.count == 1 ? "at \(cut[0])" : "every byte")")
            a.close()
        }
        // Not VLESS, split after its first byte: one bad response, the connection ended.
        let a = try XCTUnwrap(o.openAssociation(events: DatagramProbe()))
        _ = [UInt8(1)].withUnsafeBytes { a.send($0, to: .ip(destination)) }
        let s = dialed.last!
        s.events?.streamConnected(s)
        s.incoming = [0]
        s.events?.streamReadable(s)
        s.incoming = [5]
        s.events?.streamReadable(s)
        XCTAssertFalse(s.closed)
        s.incoming = [1, 2, 3, 4, 5]
        s.events?.streamReadable(s)
        XCTAssertFalse(s.closed, "the response's 5 addon bytes are skipped")
        s.incoming = [0x48]
        let bad = try XCTUnwrap(o.openAssociation(events: DatagramProbe()))
        _ = [UInt8(1)].withUnsafeBytes { bad.send($0, to: .ip(destination)) }
        let b = dialed.last!
        b.events?.streamConnected(b)
        b.incoming = [0x48]
        b.events?.streamReadable(b)
        XCTAssertTrue(b.closed)
        XCTAssertEqual(o.failures(.badResponse), 1)
        a.close()
        bad.close()
    }
}
