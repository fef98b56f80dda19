import CNghttp3
import Glibc
import LoftCore
import LoftIO
import LoftQUIC
import LoftTLS

/// What `H3Streams` needs of the QUIC connection beneath it (QuicConnection; unit tests and
/// the fuzz target put an in-memory pair of stream sets there).
package protocol H3Transport: QuicStreamLayer {
    var loop: EventLoop { get }
    var closed: Bool { get }
    /// A unidirectional stream of ours (control, QPACK encoder, QPACK decoder).
    func openUniStream(ringCap: Int) -> Int64?
    /// The stream is held and its owner has not let go of it (a late wake-up for a stream
    /// already done is not a new request).
    func isLive(_ id: Int64) -> Bool
    /// A request stream's received bytes in place from the front of its receive buffer (valid
    /// until the next packet or `drop`), and whether its FIN was received.
    func received(_ id: Int64) -> (UnsafeRawBufferPointer, Bool)
    /// `n` more received bytes were handed to nghttp3 (they stay in the buffer): the peer may
    /// send that much more.
    func credit(_ id: Int64, _ n: Int)
    /// `n` credited bytes leave the front of the buffer; true once the FIN was reached.
    @discardableResult func drop(_ id: Int64, _ n: Int) -> Bool
}

extension QuicConnection: H3Transport {}

/// Events of `H3Streams` for its carrier (the same shape as the QUIC ones).
package protocol H3StreamsDelegate: AnyObject {
    func h3Readable(_ stream: Int64)
    func h3Writable(_ stream: Int64)
    func h3Reset(_ stream: Int64, code: UInt64)
    /// Client: the response to a CONNECT (the session's or a flow's).
    func h3Response(_ stream: Int64, status: Int)
    /// Server: a CONNECT for the session (`loft`) or a flow (`loft-flow`) was accepted.
    func h3Accepted(_ stream: Int64, session: Bool)
    func h3Failed(_ reason: CarrierCloseReason)
    /// Server: a request was refused with `status` (END_STREAM sent).
    func h3Refused(_ stream: Int64, status: Int, reason: String, nth: Int)
}

/// The h3 carrier's streams (docs/protocol.md §1.3): HTTP/3 (nghttp3) on a QuicConnection.
/// The session is the body of an extended CONNECT (`:protocol loft`) on the client's first
/// request stream, each flow the body of an extended CONNECT `loft-flow` on a request stream
/// of its own. Bodies are bounded both ways: a request stream's received body waits up to
/// `bodyCap` bytes (QUIC's stream is handed to nghttp3 no further, so its window holds the peer
/// back), and a body written waits in nghttp3's buffer (`cnghttp3_body_write`) until QUIC's
/// stream takes it. A received body is buffered once, in the QUIC stream's receive buffer:
/// nghttp3 parses the stream's bytes there (`received`), each DATA payload stays where it is
/// and `H3BodyRuns` lists where (the reader sees it in place); bytes handed to nghttp3 are
/// credited to the peer then (`credit`, as when they were copied out) and leave the buffer as
/// the reader takes the payload before and among them (`drop`).
package final class H3Streams: QuicFlowLayer {
    package static let protocolSession = "loft"
    package static let protocolFlow = "loft-flow"
    package static let alpn = "h3"

    final class Request {
        let id: Int64
        var h: OpaquePointer?
        var session = false
        /// Server: the CONNECT was answered 200; client: the 200 arrived.
        var open = false
        /// The body, in the QUIC stream's receive buffer.
        var runs = H3BodyRuns()
        /// Stream positions of the buffer's front and of the end of the bytes nghttp3 has.
        var front = 0
        var fedEnd = 0
        var peerFin = false
        var peerFinRead = false
        /// QUIC's FIN of the stream was read and handed to nghttp3.
        var quicFin = false
        var ourFin = false
        var ourFinSent = false
        var released = false
        var wantWritable = false
        var blocked = false
        let cap: Int
        init(id: Int64, cap: Int) { self.id = id; self.cap = cap }
        var available: Int { runs.bytes }
    }

    package let isServer: Bool
    /// Held (the connection never holds its h3 layer): an h3 layer its carrier let go of
    /// after the connection can still reach it.
    package let quic: H3Transport
    package weak var delegate: H3StreamsDelegate?
    private let loop: EventLoop
    private var h3: OpaquePointer?
    private var events = cnghttp3_events()
    private var requests: [Int64: Request] = [:]
    private var sessionOpened = false
    /// Client: the session's CONNECT target.
    package var path = "/loft"
    package var authority = ""
    package private(set) var failedReason: CarrierCloseReason?
    private var toPull: [Int64] = []
    private var wakeWritable: [Int64] = []
    private lazy var pullSoon = SoonOnce(loop: loop) { [weak self] in self?.pullPending() }
    /// The request whose bytes nghttp3 is reading, where they start in memory and how many.
    private var feeding: Request?
    private var feedBase: UnsafeRawPointer?
    private var feedLen = 0
    /// Requests refused (server); past `maxRefused` the connection is closed.
    package private(set) var refused = 0
    package static let maxRefused = 16

    /// Request streams held (tests: none left once every stream ended).
    package var openRequests: Int { requests.count }

    package static let sessionBodyCap = 4 << 20
    package static let flowBodyCap = 1 << 20

    package init?(quic: H3Transport, server: Bool, maxRequests: UInt64) {
        self.quic = quic
        self.isServer = server
        self.loop = quic.loop
        events.ctx = Unmanaged.passUnretained(self).toOpaque()
        events.headers = { ctx, sid, s, head, fin in H3Streams.from(ctx).onHeaders(sid, s, head!.pointee, fin != 0) }
        events.data = { ctx, sid, d, n in H3Streams.from(ctx).onData(sid, d, n) }
        events.end_stream = { ctx, sid in H3Streams.from(ctx).onEnd(sid) }
        events.reset = { ctx, sid, code, stop in H3Streams.from(ctx).onResetAsked(sid, code, stopOnly: stop != 0) }
        events.acked = { ctx, sid in H3Streams.from(ctx).onAcked(sid) }
        guard let c = withUnsafePointer(to: &events, { cnghttp3_new(server ? 1 : 0, $0, maxRequests) }) else { return nil }
        h3 = c
        guard let ctrl = quic.openUniStream(ringCap: 64 << 10), let enc = quic.openUniStream(ringCap: 64 << 10),
              let dec = quic.openUniStream(ringCap: 64 << 10),
              cnghttp3_bind(c, ctrl, enc, dec) == 0 else { return nil }
        pump()
    }

    deinit { if let h3 { cnghttp3_free(h3) } }

    private static func from(_ ctx: UnsafeMutableRawPointer?) -> H3Streams {
        Unmanaged<H3Streams>.fromOpaque(ctx!).takeUnretainedValue()
    }

    private func fail(_ reason: CarrierCloseReason) {
        guard failedReason == nil else { return }
        failedReason = reason
        delegate?.h3Failed(reason)
    }

    // MARK: from the QUIC connection

    /// Bytes (or a FIN) on a QUIC stream: the peer's control/QPACK streams are read whole; a
    /// request stream as far as its body buffer allows.
    package func quicReadable(_ sid: Int64) {
        guard h3 != nil, failedReason == nil else { return }
        if sid & 2 != 0 { pullUni(sid); return }
        var r = requests[sid]
        if r == nil {
            // A new request stream of the client's (server; streams may arrive in any order);
            // one already done is not read again (a late wake-up), anything else is stray.
            guard isServer, sid & 3 == 0 else { quic.reset(sid, code: 0x101); return }
            guard quic.isLive(sid) else { return }
            let n = Request(id: sid, cap: Self.flowBodyCap)
            requests[sid] = n
            r = n
        }
        pull(r!)
    }

    package func quicWritable(_ sid: Int64) {
        if let h3, let r = requests[sid], r.blocked {
            r.blocked = false
            _ = cnghttp3_unblock(h3, sid)
        } else if let h3, sid & 2 != 0 {
            _ = cnghttp3_unblock(h3, sid)
        }
        pump()
    }

    package func quicReset(_ sid: Int64, code: UInt64) {
        guard let r = requests.removeValue(forKey: sid) else { return }
        if let h3 { cnghttp3_close_stream(h3, sid, code) }
        r.h = nil
        if r.open || !isServer { delegate?.h3Reset(sid, code: code) }
    }

    /// Hands up to `max` bytes of a QUIC stream to nghttp3, in place (no copy), and drops them
    /// (a unidirectional stream, or a request whose body nobody reads); false when nothing was
    /// there (no bytes, no FIN) or nghttp3 failed.
    private func feed(_ sid: Int64, upTo max: Int, fin: inout Bool) -> Bool {
        guard let h3 else { return false }
        var rv: Int64 = 0
        var got = 0
        let eof = quic.drain(sid, upTo: max) { bytes in
            got = bytes.count
            rv = cnghttp3_read(h3, sid, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, 0)
        }
        if rv >= 0 && eof { rv = cnghttp3_read(h3, sid, nil, 0, 1) }
        if rv < 0 { fail(.protocolError("HTTP/3: \(String(cString: cnghttp3_strerror(rv)))")); return false }
        fin = eof
        return got > 0 || eof
    }

    /// Hands up to `max` more of a request stream's bytes to nghttp3 where QUIC holds them; the
    /// DATA payloads among them stay there as the body (`onData`), the rest leaves the buffer
    /// once no body waits before it.
    private func feedBody(_ r: Request, upTo max: Int, fin: inout Bool) -> Bool {
        guard let h3 else { return false }
        let (bytes, quicFin) = quic.received(r.id)
        let at = r.fedEnd - r.front
        let n = Swift.max(0, min(max, bytes.count - at))
        var rv: Int64 = 0
        if n > 0, let base = bytes.baseAddress {
            feeding = r
            feedBase = UnsafeRawPointer(base)
            feedLen = n
            rv = cnghttp3_read(h3, r.id, (base + at).assumingMemoryBound(to: UInt8.self), n, 0)
            feeding = nil
            feedBase = nil
            r.fedEnd += n
            quic.credit(r.id, n)
        }
        let eof = quicFin && at + n >= bytes.count
        if rv >= 0 && eof { rv = cnghttp3_read(h3, r.id, nil, 0, 1) }
        settle(r)
        if eof { quic.drop(r.id, 0) }
        if rv < 0 { fail(.protocolError("HTTP/3: \(String(cString: cnghttp3_strerror(rv)))")); return false }
        fin = eof
        return n > 0 || eof
    }

    /// Drops from the front of the request stream's buffer what comes before its body's first
    /// byte (frame headers; everything handed to nghttp3 when no body waits or nobody reads it).
    private func settle(_ r: Request) {
        if r.released { r.runs.removeAll() }
        let to = r.runs.firstStart ?? r.fedEnd
        guard to > r.front else { return }
        let k = to - r.front
        r.front = to
        quic.drop(r.id, k)
    }

    private func pullUni(_ sid: Int64) {
        var fin = false
        while feed(sid, upTo: 65_536, fin: &fin) && !fin {}
    }

    /// Feeds nghttp3 from QUIC while the request's body buffer is under its cap.
    private func pull(_ r: Request) {
        guard h3 != nil else { return }
        while !r.quicFin && (r.released || r.available < r.cap) && failedReason == nil {
            let room = r.released ? 65_536 : min(65_536, r.cap - r.available)
            var fin = false
            if !(r.released ? feed(r.id, upTo: room, fin: &fin) : feedBody(r, upTo: room, fin: &fin)) { break }
            if fin { r.quicFin = true }
        }
        pump()
        if r.open && !r.released && (r.available > 0 || (r.peerFin && !r.peerFinRead)) { delegate?.h3Readable(r.id) }
        maybeDone(r)
    }

    private func pullPending() {
        let ids = toPull
        toPull.removeAll()
        for id in ids { if let r = requests[id] { pull(r) } }
    }

    // MARK: nghttp3 callbacks (inside nghttp3: record, act after)

    private func onHeaders(_ sid: Int64, _ s: OpaquePointer?, _ head: cnghttp3_head, _ fin: Bool) -> Int32 {
        guard let r = requests[sid] else { return 0 }
        r.h = s
        var h = head
        let method = withUnsafeBytes(of: &h.method) { String(cString: $0.baseAddress!.assumingMemoryBound(to: CChar.self)) }
        let proto = withUnsafeBytes(of: &h.protocol) { String(cString: $0.baseAddress!.assumingMemoryBound(to: CChar.self)) }
        let path = withUnsafeBytes(of: &h.path) { String(cString: $0.baseAddress!.assumingMemoryBound(to: CChar.self)) }
        if !isServer {
            // The response to our CONNECT.
            let status = Int(head.status)
            if (200..<300).contains(status) && !fin { r.open = true }
            loop.soon { [weak self] in self?.delegate?.h3Response(sid, status: fin && status < 300 ? 0 : status) }
            return 0
        }
        guard let h3, let s else { return 0 }
        let status = Self.decide(method: method, protocol: proto, path: path, tooLarge: head.too_large != 0,
                                 sessionPath: self.path, stream: sid, sessionOpened: sessionOpened)
        if status != 200 {
            refused += 1
            r.released = true
            // Past the cap the connection is closed after this batch of packets; the batch's
            // other requests get no answer and no event (one read could otherwise carry
            // hundreds of refusals, each answered and logged).
            if refused > Self.maxRefused {
                if refused == Self.maxRefused + 1 {
                    loop.soon { [weak self] in self?.fail(.protocolError("HTTP/3: more than \(Self.maxRefused) refused requests")) }
                }
                return 0
            }
            _ = cnghttp3_respond(h3, s, Int32(status), 0)
            let reason = "\(method) \(path.prefix(64))\(proto.isEmpty ? "" : " :protocol \(proto)")"
            let count = refused
            loop.soon { [weak self] in
                self?.delegate?.h3Refused(sid, status: status, reason: reason, nth: count)
            }
            return 0
        }
        let session = proto == Self.protocolSession
        if session { sessionOpened = true }
        _ = cnghttp3_respond(h3, s, 200, session ? Self.sessionBodyCap : Self.flowBodyCap)
        r.session = session
        r.open = true
        loop.soon { [weak self] in
            guard let self, self.requests[sid] === r else { return }
            self.delegate?.h3Accepted(sid, session: session)
            self.pull(r)
        }
        return 0
    }

    /// The front's answer to a request (docs/protocol.md §1.3), in this order: a header section
    /// over the limits 431; another path 404; another method 405; `:protocol loft` on the first
    /// request stream while no session is open 200, else 429; `loft-flow` once the session's
    /// CONNECT was accepted 200, before it 425; any other or no `:protocol` 400.
    package static func decide(method: String, protocol proto: String, path: String, tooLarge: Bool,
                       sessionPath: String, stream: Int64, sessionOpened: Bool) -> Int {
        if tooLarge { return 431 }
        let bare = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        if bare != sessionPath { return 404 }
        if method != "CONNECT" { return 405 }
        if proto == protocolSession { return stream == 0 && !sessionOpened ? 200 : 429 }
        if proto == protocolFlow { return sessionOpened ? 200 : 425 }
        return 400
    }

    /// A DATA payload, where `feedBody` handed the stream's bytes to nghttp3 (nghttp3 keeps
    /// bytes of its own only for a stream blocked on QPACK, which loft's SETTINGS rule out).
    private func onData(_ sid: Int64, _ d: UnsafePointer<UInt8>?, _ n: Int) -> Int32 {
        guard let r = requests[sid], !r.released, let d, n > 0 else { return 0 }
        guard r === feeding, let base = feedBase else { return -1 }
        let off = base.distance(to: UnsafeRawPointer(d))
        let at = r.front + off
        guard at >= r.fedEnd, at + n <= r.fedEnd + feedLen, r.runs.add(at: at, n) else { return -1 }
        return 0
    }

    private func onEnd(_ sid: Int64) -> Int32 {
        requests[sid]?.peerFin = true
        return 0
    }

    private func onResetAsked(_ sid: Int64, _ code: UInt64, stopOnly: Bool) -> Int32 {
        if stopOnly {
            // The rest of the peer's body is not wanted (a refused request): it is read and
            // dropped, and what we send (the refusal) is not cut off.
            // (Inside nghttp3's read of its buffer the bytes leave once the read is over.)
            if let r = requests[sid] {
                r.released = true
                if feeding !== r { settle(r) }
            }
            return 0
        }
        loop.soon { [weak self] in
            guard let self, self.requests[sid] != nil else { return }
            self.reset(sid, code: code)
            self.delegate?.h3Reset(sid, code: code)
        }
        return 0
    }

    private func onAcked(_ sid: Int64) -> Int32 {
        if let r = requests[sid], r.wantWritable { wakeWritable.append(sid) }
        return 0
    }

    // MARK: bytes out

    nonisolated(unsafe) private static let vecs = UnsafeMutablePointer<cnghttp3_vec>.allocate(capacity: 16)

    /// Moves what nghttp3 has (frames, headers, bodies) into QUIC's streams, as far as they
    /// take it.
    package func pump() {
        guard let h3, failedReason == nil, !quic.closed else { return }
        for _ in 0..<4096 {
            var sid: Int64 = -1
            var fin: Int32 = 0
            let n = cnghttp3_writev(h3, &sid, &fin, Self.vecs, 16)
            if n < 0 { fail(.protocolError("HTTP/3: \(String(cString: cnghttp3_strerror(n)))")); return }
            if sid < 0 { break }
            var total = 0
            var taken = 0
            for i in 0..<Int(n) {
                let v = Self.vecs[i]
                total += v.len
                guard v.len > 0 else { continue }
                let w = quic.write(sid, UnsafeRawBufferPointer(start: v.base, count: v.len))
                taken += w
                if w < v.len { break }
            }
            _ = cnghttp3_written(h3, sid, taken)
            if taken < total {
                cnghttp3_block(h3, sid)
                requests[sid]?.blocked = true
                continue
            }
            if fin != 0 {
                quic.finish(sid)
                if let r = requests[sid] { r.ourFinSent = true; maybeDone(r) }
            }
        }
        if !wakeWritable.isEmpty {
            let ws = wakeWritable
            wakeWritable.removeAll()
            for sid in ws {
                guard let r = requests[sid], r.wantWritable, let h = r.h, cnghttp3_body_room(h3, h) >= r.cap / 2 else { continue }
                r.wantWritable = false
                loop.soon { [weak self] in self?.delegate?.h3Writable(sid) }
            }
        }
    }

    /// Both directions are over: nghttp3 and QUIC forget the stream.
    private func maybeDone(_ r: Request) {
        guard let h3, r.quicFin, r.ourFinSent, r.released || r.peerFinRead else { return }
        requests[r.id] = nil
        cnghttp3_close_stream(h3, r.id, 0x100)
        r.h = nil
        quic.release(r.id)
    }

    // MARK: QuicStreamLayer

    /// Client: the session's CONNECT (the first stream) or a flow's.
    package func openStream(ringCap: Int?) -> Int64? {
        guard let h3, !isServer, failedReason == nil, let sid = quic.openStream(ringCap: ringCap) else { return nil }
        let session = !sessionOpened
        let r = Request(id: sid, cap: session ? Self.sessionBodyCap : Self.flowBodyCap)
        guard let s = cnghttp3_connect(h3, sid, session ? Self.protocolSession : Self.protocolFlow, path, authority, r.cap) else {
            quic.reset(sid, code: 0x102)
            return nil
        }
        sessionOpened = true
        r.session = session
        r.h = s
        requests[sid] = r
        pump()
        return sid
    }

    package func writeRoom(_ id: Int64) -> Int {
        guard let h3, let r = requests[id], let h = r.h else { return 0 }
        let n = cnghttp3_body_room(h3, h)
        if n == 0 { r.wantWritable = true }
        return n
    }

    package func write(_ id: Int64, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard let h3, let r = requests[id], let h = r.h, let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
        let n = cnghttp3_body_write(h3, h, base.assumingMemoryBound(to: UInt8.self), bytes.count)
        if n < bytes.count { r.wantWritable = true }
        if n > 0 { pump() }
        return n
    }

    package func writeSpace(_ id: Int64, max: Int) -> UnsafeMutableRawBufferPointer? { nil }
    package func commitWrite(_ id: Int64, _ n: Int) {}

    /// The body in place in the QUIC stream's buffer, one piece per run (up to `max`).
    package func peek(_ id: Int64, _ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> (Int, Bool) {
        guard let r = requests[id] else { return (0, true) }
        guard r.available > 0, max > 0, let base = quic.received(id).0.baseAddress else { return (0, finReached(r)) }
        var k = 0
        let n = r.runs.forEach(upTo: Int.max, runs: max) { start, len in
            iov[k] = iovec(iov_base: UnsafeMutableRawPointer(mutating: base + (start - r.front)), iov_len: len)
            k += 1
        }
        count = k
        return (n, false)
    }

    package func consume(_ id: Int64, _ n: Int) {
        guard n > 0, let r = requests[id] else { return }
        r.runs.take(n)
        settle(r)
        took(r, n)
    }

    /// The body in place, a run at a time (`body` may close or reset the stream).
    package func drain(_ id: Int64, upTo max: Int, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        guard let r = requests[id] else { return true }
        var n = 0
        while n < max, requests[id] === r, let start = r.runs.firstStart, let base = quic.received(id).0.baseAddress {
            var len = 0
            _ = r.runs.forEach(upTo: max - n, runs: 1) { _, l in len = l }
            body(UnsafeRawBufferPointer(start: base + (start - r.front), count: len))
            n += len
            guard requests[id] === r, !r.released else { break }
            r.runs.take(len)
            settle(r)
        }
        if n > 0 { took(r, n) }
        return finReached(r)
    }

    /// The whole body was read and the peer's FIN came: the reader has its EOF.
    private func finReached(_ r: Request) -> Bool {
        guard r.available == 0 && r.peerFin else { return false }
        r.peerFinRead = true
        maybeDone(r)
        return true
    }

    /// `n` bytes of the body were read: more is pulled from QUIC once half the cap is free.
    private func took(_ r: Request, _ n: Int) {
        if !r.quicFin && r.available < r.cap / 2 {
            toPull.append(r.id)
            pullSoon.schedule()
        }
    }

    package func finish(_ id: Int64) {
        guard let h3, let r = requests[id], let h = r.h, !r.ourFin else { return }
        r.ourFin = true
        cnghttp3_body_end(h3, h)
        pump()
    }

    package func release(_ id: Int64) {
        guard let r = requests[id] else { return }
        r.released = true
        settle(r)
        if !r.quicFin { toPull.append(id); pullSoon.schedule() }
        maybeDone(r)
    }

    package func reset(_ id: Int64, code: UInt64) {
        guard let r = requests.removeValue(forKey: id) else { return }
        if let h3 { cnghttp3_close_stream(h3, id, code) }
        r.h = nil
        quic.reset(id, code: code)
    }

    package func unsent(_ id: Int64) -> Int {
        guard let h3, let h = requests[id]?.h else { return 0 }
        return cnghttp3_body_unsent(h3, h) + quic.unsent(id)
    }
}
