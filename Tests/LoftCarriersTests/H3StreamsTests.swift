import Foundation
@testable import LoftCarriers
import LoftCore
import LoftHTTP
import LoftIO
import LoftQUIC
import LoftTLS
import LoftTestSupport
import XCTest

/// Two sets of QUIC streams joined in memory (what one end writes on a stream the other reads
/// on it), for H3Streams' state machine without packets.
final class MemoryQuic: H3Transport {
    let loop: EventLoop
    var closed = false
    weak var peer: MemoryQuic?
    weak var layer: H3Streams?
    private var nextBidi: Int64
    private var nextUni: Int64
    var inbox: [Int64: [UInt8]] = [:]
    var inFin: Set<Int64> = []
    var resets: [(Int64, UInt64)] = []
    var released: Set<Int64> = []
    /// Bytes a write takes at most (a small value exercises nghttp3's blocked streams).
    var writeLimit = Int.max
    /// Streams whose bytes reach the peer without waking it (as if their packets were late).
    var late: Set<Int64> = []

    init(loop: EventLoop, server: Bool) {
        self.loop = loop
        nextBidi = server ? 1 : 0
        nextUni = server ? 3 : 2
    }

    func openUniStream(ringCap: Int) -> Int64? { defer { nextUni += 4 }; return nextUni }
    func openStream(ringCap: Int?) -> Int64? { defer { nextBidi += 4 }; return nextBidi }
    func writeRoom(_ id: Int64) -> Int { writeLimit }
    func write(_ id: Int64, _ bytes: UnsafeRawBufferPointer) -> Int {
        let n = min(bytes.count, writeLimit)
        guard let peer else { return n }
        peer.inbox[id, default: []] += bytes.prefix(n)
        if !late.contains(id) { loop.soon { [weak peer] in peer?.layer?.quicReadable(id) } }
        if n < bytes.count { loop.soon { [weak self] in self?.layer?.quicWritable(id) } }
        return n
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
    func finish(_ id: Int64) {
        guard let peer else { return }
        peer.inFin.insert(id)
        loop.soon { [weak peer] in peer?.layer?.quicReadable(id) }
    }
    func release(_ id: Int64) { released.insert(id) }
    func isLive(_ id: Int64) -> Bool { !released.contains(id) }
    func reset(_ id: Int64, code: UInt64) {
        resets.append((id, code))
        loop.soon { [weak peer] in peer?.layer?.quicReset(id, code: code) }
    }
    func unsent(_ id: Int64) -> Int { 0 }
}

final class H3Events: H3StreamsDelegate {
    var readable: [Int64] = []
    var writable: [Int64] = []
    var resets: [(Int64, UInt64)] = []
    var responses: [Int64: Int] = [:]
    var accepted: [(Int64, Bool)] = []
    var failed: CarrierCloseReason?
    var onReadable: ((Int64) -> Void)?
    var onWritable: ((Int64) -> Void)?
    func h3Readable(_ stream: Int64) { readable.append(stream); onReadable?(stream) }
    func h3Writable(_ stream: Int64) { writable.append(stream); onWritable?(stream) }
    func h3Reset(_ stream: Int64, code: UInt64) { resets.append((stream, code)) }
    func h3Response(_ stream: Int64, status: Int) { responses[stream] = status }
    func h3Accepted(_ stream: Int64, session: Bool) { accepted.append((stream, session)) }
    func h3Failed(_ reason: CarrierCloseReason) { failed = reason }
    var refused: [(Int64, Int)] = []
    func h3Refused(_ stream: Int64, status: Int, reason: String, nth: Int) { refused.append((stream, status)) }
}

final class H3StreamsTests: XCTestCase {
    struct Pair {
        let cq: MemoryQuic, sq: MemoryQuic
        let client: H3Streams, server: H3Streams
        let ce = H3Events(), se = H3Events()
    }

    func pair(_ h: Harness, path: String = "/loft") throws -> Pair {
        let cq = MemoryQuic(loop: h.loop, server: false)
        let sq = MemoryQuic(loop: h.loop, server: true)
        cq.peer = sq
        sq.peer = cq
        let client = try XCTUnwrap(H3Streams(quic: cq, server: false, maxRequests: 0))
        let server = try XCTUnwrap(H3Streams(quic: sq, server: true, maxRequests: 16))
        cq.layer = client
        sq.layer = server
        client.path = path
        client.authority = "front.test:443"
        server.path = "/loft"
        let p = Pair(cq: cq, sq: sq, client: client, server: server)
        client.delegate = p.ce
        server.delegate = p.se
        // Both ends' control and QPACK streams to the peer.
        for id: Int64 in [2, 6, 10] { h.loop.soon { server.quicReadable(id) } }
        for id: Int64 in [3, 7, 11] { h.loop.soon { client.quicReadable(id) } }
        return p
    }

    /// A pair whose session CONNECT (stream 0) has been answered 200.
    func sessionUp(_ h: Harness) throws -> Pair {
        let p = try pair(h)
        _ = p.client.openStream(ringCap: nil)
        XCTAssertTrue(h.run(seconds: 5) { p.ce.responses[0] == 200 })
        return p
    }

    func testDecisionOrder() {
        func d(_ m: String, _ p: String, _ path: String, tooLarge: Bool = false, stream: Int64 = 0, open: Bool = false) -> Int {
            H3Streams.decide(method: m, protocol: p, path: path, tooLarge: tooLarge, sessionPath: "/loft", stream: stream, sessionOpened: open)
        }
        XCTAssertEqual(d("CONNECT", "loft", "/loft"), 200)
        XCTAssertEqual(d("CONNECT", "loft", "/loft?x=1"), 200)
        XCTAssertEqual(d("CONNECT", "loft", "/loft", tooLarge: true), 431)
        XCTAssertEqual(d("CONNECT", "loft", "/other"), 404)
        XCTAssertEqual(d("GET", "loft", "/loft"), 405)
        XCTAssertEqual(d("POST", "", "/other"), 404)
        XCTAssertEqual(d("CONNECT", "loft", "/loft", stream: 4), 429)
        XCTAssertEqual(d("CONNECT", "loft", "/loft", open: true), 429)
        XCTAssertEqual(d("CONNECT", "loft-flow", "/loft", stream: 4), 425)
        XCTAssertEqual(d("CONNECT", "loft-flow", "/loft", stream: 4, open: true), 200)
        XCTAssertEqual(d("CONNECT", "websocket", "/loft"), 400)
        XCTAssertEqual(d("CONNECT", "", "/loft"), 400)
    }

    /// The session's CONNECT, 1 MiB each way through small QUIC writes (nghttp3 blocked and
    /// resumed), both FINs, and a flow's CONNECT beside it; every stream is forgotten at the end.
    func testSessionAndFlowBodiesBothWays() throws {
        let h = try Harness()
        let p = try pair(h)
        p.cq.writeLimit = 1000
        p.sq.writeLimit = 1000
        XCTAssertEqual(p.client.openStream(ringCap: nil), 0)
        XCTAssertTrue(h.run(seconds: 5) { p.ce.responses[0] != nil })
        XCTAssertEqual(p.ce.responses[0], 200)
        XCTAssertEqual(p.se.accepted.first?.0, 0)
        XCTAssertEqual(p.se.accepted.first?.1, true)
        let size = 1 << 20
        let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
        var sent = [0, 0]   // by the client, by the server
        var gotS: [UInt8] = [], gotC: [UInt8] = []
        var eofS = false, eofC = false
        /// Writes what `end` has not yet sent of `data` on stream 0 (as far as it takes), then its FIN.
        func push(_ end: H3Streams, _ i: Int) {
            while sent[i] < size {
                let n = data.withUnsafeBytes { end.write(0, UnsafeRawBufferPointer(rebasing: $0[sent[i]...])) }
                if n == 0 { return }
                sent[i] += n
            }
            end.finish(0)
        }
        p.ce.onWritable = { if $0 == 0 { push(p.client, 0) } }
        p.se.onWritable = { if $0 == 0 { push(p.server, 1) } }
        p.se.onReadable = { sid in
            guard sid == 0 else { return }
            eofS = p.server.drain(0) { gotS += $0 } || eofS
        }
        p.ce.onReadable = { sid in
            guard sid == 0 else { return }
            eofC = p.client.drain(0) { gotC += $0 } || eofC
        }
        push(p.client, 0)
        push(p.server, 1)
        // A flow beside the session.
        let flow = try XCTUnwrap(p.client.openStream(ringCap: nil))
        XCTAssertEqual(flow, 4)
        XCTAssertTrue(h.run(seconds: 20) { eofS && eofC && p.ce.responses[4] != nil },
                      "eofS \(eofS) eofC \(eofC) sent \(sent[0])/\(sent[1]) got \(gotS.count)/\(gotC.count) flow \(String(describing: p.ce.responses[4])) failed \(String(describing: p.ce.failed))/\(String(describing: p.se.failed))")
        XCTAssertEqual(gotS, data)
        XCTAssertEqual(gotC, data)
        XCTAssertEqual(p.ce.responses[4], 200)
        XCTAssertTrue(p.se.accepted.contains { $0.0 == 4 && !$0.1 })
        XCTAssertNil(p.ce.failed)
        XCTAssertNil(p.se.failed)
        // The flow ends both ways with nothing sent: both ends forget every request stream.
        p.client.finish(4)
        XCTAssertTrue(h.run(seconds: 5) { p.se.readable.contains(4) })
        var buf = [UInt8](repeating: 0, count: 16)
        XCTAssertTrue(buf.withUnsafeMutableBytes { p.server.read(4, into: $0) }.1)
        p.server.finish(4)
        XCTAssertTrue(h.run(seconds: 5) { p.ce.readable.contains(4) })
        XCTAssertTrue(buf.withUnsafeMutableBytes { p.client.read(4, into: $0) }.1)
        XCTAssertTrue(h.run(seconds: 5) { p.client.openRequests == 0 && p.server.openRequests == 0 })
    }

    /// A CONNECT to another path: 404 and END_STREAM, the server never hands it on.
    /// A body sent in many small DATA frames is read in place: `peek` shows its runs (the
    /// frames' payloads where the QUIC stream holds them, the frame headers between them left
    /// out) in several pieces, and `consume` takes any part of them, across runs.
    func testBodyReadInPlaceAcrossFrames() throws {
        let h = try Harness()
        let p = try pair(h)
        XCTAssertEqual(p.client.openStream(ringCap: nil), 0)
        XCTAssertTrue(h.run(seconds: 5) { p.se.accepted.first != nil })
        let data = (0..<60_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 8) }
        var got: [UInt8] = []
        var eof = false
        var pieces = 0
        p.se.onReadable = { sid in
            guard sid == 0 else { return }
            var iov = [iovec](repeating: iovec(), count: 4)
            while true {
                var count = 0
                let (n, fin) = iov.withUnsafeMutableBufferPointer { p.server.peek(0, $0.baseAddress!, max: 4, count: &count) }
                if n == 0 { eof = eof || fin; return }
                pieces = max(pieces, count)
                // Three quarters of what is shown (at least one byte), cut anywhere.
                var take = max(1, n * 3 / 4)
                let k = take
                for i in 0..<count where take > 0 {
                    let m = min(take, iov[i].iov_len)
                    got += UnsafeRawBufferPointer(start: iov[i].iov_base, count: m)
                    take -= m
                }
                p.server.consume(0, k)
            }
        }
        var off = 0
        while off < data.count {
            let n = data.withUnsafeBytes { p.client.write(0, UnsafeRawBufferPointer(rebasing: $0[off..<min(off + 777, data.count)])) }
            XCTAssertGreaterThan(n, 0)
            off += n
        }
        p.client.finish(0)
        XCTAssertTrue(h.run(seconds: 10) { eof }, "got \(got.count) of \(data.count)")
        XCTAssertEqual(got, data)
        XCTAssertGreaterThan(pieces, 1)
        XCTAssertNil(p.se.failed)
    }

    func testRefusedConnect() throws {
        let h = try Harness()
        let p = try pair(h, path: "/nope")
        XCTAssertEqual(p.client.openStream(ringCap: nil), 0)
        XCTAssertTrue(h.run(seconds: 5) { p.ce.responses[0] != nil })
        XCTAssertEqual(p.ce.responses[0], 404)
        XCTAssertEqual(p.se.refused.first?.1, 404)
        XCTAssertTrue(p.se.accepted.isEmpty)
        XCTAssertTrue(p.se.readable.isEmpty)
    }

    /// A half-close: the front ends its body first, the client goes on sending on the same
    /// flow and the front still gets every byte and the client's end.
    func testFlowHalfCloseFrontFirst() throws {
        let h = try Harness()
        let p = try sessionUp(h)
        let f = try XCTUnwrap(p.client.openStream(ringCap: nil))
        _ = [UInt8](repeating: 7, count: 1000).withUnsafeBytes { p.client.write(f, $0) }
        XCTAssertTrue(h.run(seconds: 5) { p.se.readable.contains(f) && p.ce.responses[f] == 200 })
        _ = [UInt8](repeating: 9, count: 10).withUnsafeBytes { p.server.write(f, $0) }
        p.server.finish(f)
        var got: [UInt8] = []
        var eofC = false
        p.ce.onReadable = { sid in if sid == f { eofC = p.client.drain(f) { got += $0 } || eofC } }
        XCTAssertTrue(h.run(seconds: 5) { eofC })
        XCTAssertEqual(got, [UInt8](repeating: 9, count: 10))
        // The client's direction is still open: 100 KiB more, then its end.
        let more = [UInt8](repeating: 5, count: 100_000)
        var sent = 0
        var finished = false
        func push() {
            while sent < more.count {
                let n = more.withUnsafeBytes { p.client.write(f, UnsafeRawBufferPointer(rebasing: $0[sent...])) }
                if n == 0 { return }
                sent += n
            }
            if !finished { finished = true; p.client.finish(f) }
        }
        p.ce.onWritable = { if $0 == f { push() } }
        push()
        var recv = 0
        var eofS = false
        p.se.onReadable = { sid in if sid == f { eofS = p.server.drain(f) { recv += $0.count } || eofS } }
        p.se.onReadable?(f)
        XCTAssertTrue(h.run(seconds: 10) { eofS }, "server got \(recv)")
        XCTAssertEqual(recv, 1000 + more.count)
        XCTAssertNil(p.se.failed)
        XCTAssertNil(p.ce.failed)
        XCTAssertTrue(p.se.resets.isEmpty && p.ce.resets.isEmpty)
        XCTAssertTrue(h.run(seconds: 5) { p.client.openRequests == 1 && p.server.openRequests == 1 })
    }

    /// Request streams arriving out of order (the later one's packets first): both are taken.
    func testRequestStreamsOutOfOrder() throws {
        let h = try Harness()
        let p = try sessionUp(h)
        p.cq.late = [4]
        XCTAssertEqual(p.client.openStream(ringCap: nil), 4)
        XCTAssertEqual(p.client.openStream(ringCap: nil), 8)
        XCTAssertTrue(h.run(seconds: 5) { p.se.accepted.contains { $0.0 == 8 } })
        XCTAssertFalse(p.se.accepted.contains { $0.0 == 4 })
        p.cq.late = []
        p.server.quicReadable(4)
        XCTAssertTrue(h.run(seconds: 5) { p.se.accepted.contains { $0.0 == 4 } && p.ce.responses[4] == 200 })
    }

    /// Past 16 refused requests the front gives up on the connection.
    func testTooManyRefusalsEndTheConnection() throws {
        let h = try Harness()
        let p = try pair(h, path: "/nope")
        for _ in 0..<16 { _ = p.client.openStream(ringCap: nil) }
        XCTAssertTrue(h.run(seconds: 5) { p.se.refused.count == 16 })
        XCTAssertNil(p.se.failed)
        _ = p.client.openStream(ringCap: nil)
        XCTAssertTrue(h.run(seconds: 5) { p.se.failed != nil })
        XCTAssertEqual(p.se.refused.count, 16, "the 17th is not answered: the connection goes")
    }

    /// Requests that arrive together are refused up to the cap and no further: the cap holds
    /// within one batch of packets, not only between batches (was: every request of the
    /// batch answered and reported, one log line each).
    func testRefusalsInOneBatchStopAtTheCap() throws {
        let h = try Harness()
        let p = try pair(h, path: "/nope")
        for _ in 0..<100 { _ = p.client.openStream(ringCap: nil) }
        XCTAssertTrue(h.run(seconds: 5) { p.se.failed != nil })
        XCTAssertEqual(p.se.refused.count, 16)
    }

    /// A peer's reset of a request stream reaches the delegate and the stream is forgotten.
    func testResetReachesTheOtherEnd() throws {
        let h = try Harness()
        let p = try sessionUp(h)
        let f = try XCTUnwrap(p.client.openStream(ringCap: nil))
        _ = [UInt8](repeating: 1, count: 10).withUnsafeBytes { p.client.write(f, $0) }
        XCTAssertTrue(h.run(seconds: 5) { p.se.readable.contains(f) })
        p.client.reset(f, code: 0x102)
        XCTAssertTrue(h.run(seconds: 5) { p.se.resets.contains { $0.0 == f && $0.1 == 0x102 } })
        XCTAssertEqual(p.server.openRequests, 1, "only the session's stream is left")
        XCTAssertEqual(p.client.openRequests, 1)
    }

    /// Garbage on the peer's control stream is a connection error, reported once.
    func testGarbageOnTheControlStreamFails() throws {
        let h = try Harness()
        let p = try pair(h)
        p.sq.inbox[14] = [0x00, 0x04, 0x02, 0xFF, 0xFF]   // a second control stream
        h.loop.soon { p.server.quicReadable(14) }
        XCTAssertTrue(h.run(seconds: 5) { p.se.failed != nil })
        guard case .protocolError? = p.se.failed else { return XCTFail("\(String(describing: p.se.failed))") }
    }
}
