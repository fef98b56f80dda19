import CNghttp2
import LoftCore

/// Where an H2Engine's frames go: a TLS connection's output buffer, or memory (tests, fuzzing).
package protocol H2Output: AnyObject {
    /// Bytes the output takes now.
    var h2Free: Int { get }
    /// Appends `count` bytes; the caller checked `h2Free`.
    func h2Append(_ bytes: UnsafeRawPointer, _ count: Int)
}

/// Our HTTP/2 SETTINGS and receive windows for loft sessions.
package struct H2Settings {
    package init() {}
    /// Streams a client may open at once on the front (one session, and room for a stray request).
    package var maxConcurrentStreams: UInt32 = 8
    /// Each stream's receive window. Bytes are delivered as they arrive and never queued by the
    /// engine (a paused reader leaves them in the socket), so a large window costs no memory and
    /// lets one session fill a fast link.
    package var initialWindow: UInt32 = 16 << 20
    package var connectionWindow: UInt32 = 16 << 20
    package var maxFrameSize: UInt32 = 1 << 16
    /// Decoded header bytes of one request or response (names + values + 32 each, RFC 9113 §6.5.2).
    package var maxHeaderList: UInt32 = 16 << 10
    package var maxHeaderFields = 100
}

/// A request head as the front saw it on one stream.
package struct H2RequestHead: Equatable {
    package init() {}
    package var method = ""
    package var scheme = ""
    package var authority = ""
    package var path = ""
    package var protocolName = ""
    package var headers = HTTPHeaders()
    package var status = 0
    package var size = 0
    package var fields = 0
    package var tooBig = false
}

/// What the embedder hears from an H2Engine, always after the nghttp2 call that produced it has
/// returned (never from inside nghttp2), in wire order.
package enum H2Event {
    /// Client: the front's first SETTINGS arrived (extended CONNECT can be sent, or not).
    case peerSettings
    /// Server: a request for the session was accepted and answered 200; `engine.sessionStream` is its stream.
    case accepted(H2RequestHead)
    /// Client: the final response to the CONNECT.
    case response(status: Int)
    /// Session bytes (valid during the call only).
    case data(UnsafeRawBufferPointer)
    /// The send window grew.
    case windowOpened
    /// The peer ended the session stream (END_STREAM).
    case peerEnded
    /// The session stream was reset or closed with an error code.
    case streamReset(UInt32)
    /// The peer sent GOAWAY.
    case goAway(UInt32)
    /// Server: a request was refused with `status` (404, 405, 400, 403, 429, 431).
    case refused(status: Int, reason: String)
}

package protocol H2EngineOwner: AnyObject {
    /// Server: a well-formed request for the session path; false refuses it with 403.
    func h2Admit(_ engine: H2Engine, _ head: H2RequestHead) -> Bool
    func h2Event(_ engine: H2Engine, _ event: H2Event)
}

/// One HTTP/2 connection carrying one loft session on one stream, sans-IO: nghttp2 (behind the
/// CNghttp2 shim) does the framing, HPACK and flow control; this type maps it to the session
/// stream. The session runs on an extended CONNECT (RFC 8441) with `:protocol` `loft`; the front
/// answers 200 and both sides then send DATA until END_STREAM.
///
/// - Sending: `write` offers the caller's bytes; nghttp2 frames as much as the windows and the
///   output allow, and the DATA payload is copied once, straight from the caller into the output
///   (nghttp2's NO_COPY data source): no staging buffer. What did not fit stays with the caller.
/// - Receiving: `receive` pauses nghttp2 at each DATA chunk and hands it to the owner from the
///   input bytes themselves; the owner may stop (`paused`) and the rest waits unprocessed.
package final class H2Engine {
    package static let protocolName = "loft"
    /// Output kept free for control frames (SETTINGS/PING ACKs, WINDOW_UPDATE, GOAWAY).
    package static let controlReserve = 512
    /// Refused requests (404, 405, 400, 403, a second session) before the connection is ended.
    package static let maxRefusals = 16

    package let isServer: Bool
    package let settings: H2Settings
    /// Server: the session path.
    package let path: String
    package unowned let output: H2Output
    package weak var owner: H2EngineOwner?
    private var h: OpaquePointer?

    /// The stream carrying the session (0 until the CONNECT was sent / accepted).
    package private(set) var sessionStream: Int32 = 0
    /// The engine's failure or the GOAWAY/RST error it sent, for logs.
    package private(set) var failure: String?
    package private(set) var refusals = 0
    package private(set) var sawPeerSettings = false

    private var offer: UnsafeRawBufferPointer?
    private var offerTaken = 0
    private var ending = false
    private var heads: [Int32: H2RequestHead] = [:]
    private var events: [PendingEvent] = []
    private var draining = false
    private var pendingData: UnsafeRawBufferPointer?
    /// Set by the owner during a `.data` event: stop delivering until the next `receive`.
    package var paused = false

    private enum PendingEvent {
        case headers(Int32, endStream: Bool)
        case peerSettings
        case windowOpened
        case endStream(Int32)
        case closed(Int32, UInt32)
        case goAway(UInt32)
    }

    package init?(server: Bool, path: String = "/loft", settings: H2Settings = H2Settings(), output: H2Output) {
        isServer = server
        self.path = path
        self.settings = settings
        self.output = output
        var cb = cnghttp2_callbacks()
        cb.send = { u, data, len in H2Engine.of(u).sendRaw(data!, len) }
        cb.send_data = { u, stream, header, len in H2Engine.of(u).sendData(stream, header!, len) }
        cb.data_length = { u, stream, max, eof in H2Engine.of(u).dataLength(stream, max, eof!) }
        cb.header = { u, stream, n, nl, v, vl in
            H2Engine.of(u).header(stream, UnsafeRawBufferPointer(start: n, count: nl), UnsafeRawBufferPointer(start: v, count: vl))
        }
        cb.frame_received = { u, type, flags, stream, code in H2Engine.of(u).frameReceived(type, flags, stream, code) }
        cb.data = { u, stream, data, len in H2Engine.of(u).dataChunk(stream, data, len) }
        cb.stream_closed = { u, stream, code in H2Engine.of(u).events.append(.closed(stream, code)) }
        cb.frame_sent = { u, type, stream, code in H2Engine.of(u).frameSent(type, stream, code) }
        var st = cnghttp2_settings(max_concurrent_streams: settings.maxConcurrentStreams, initial_window: settings.initialWindow,
                               connection_window: settings.connectionWindow, max_frame_size: settings.maxFrameSize,
                               max_header_list: settings.maxHeaderList, enable_connect_protocol: server ? 1 : 0)
        guard let handle = cnghttp2_new(server ? 1 : 0, &cb, Unmanaged.passUnretained(self).toOpaque(), &st) else { return nil }
        h = handle
    }

    deinit { cnghttp2_free(h) }

    private static func of(_ u: UnsafeMutableRawPointer?) -> H2Engine {
        Unmanaged<H2Engine>.fromOpaque(u!).takeUnretainedValue()
    }

    // MARK: state

    /// Neither side has anything left: the connection is over (after a GOAWAY, or an error).
    package var isFinished: Bool { h == nil || (cnghttp2_want_read(h) == 0 && cnghttp2_want_write(h) == 0) }
    /// nghttp2 has frames it could not hand to the output yet.
    package var wantsWrite: Bool { h != nil && cnghttp2_want_write(h) != 0 }
    /// Payload bytes the session stream may send now (both windows).
    package var sendWindow: Int {
        guard let h, sessionStreamOpen, !ending else { return 0 }
        return Int(max(0, cnghttp2_send_window(h, sessionStream)))
    }
    /// The peer allows extended CONNECT (its SETTINGS_ENABLE_CONNECT_PROTOCOL).
    package var peerAllowsConnect: Bool { h.map { cnghttp2_remote_setting($0, 8) == 1 } ?? false }
    /// The session stream exists and is not closed yet (nghttp2 keeps closed streams around, so
    /// the engine tracks this itself).
    package var sessionStreamOpen: Bool { h != nil && sessionStream > 0 && !sessionClosed }
    private var sessionClosed = false

    /// Session bytes `write` would take now.
    package var writable: Int {
        guard let h else { return 0 }
        let room = output.h2Free - Self.controlReserve
        guard room > 9 else { return 0 }
        let frameSize = max(16384, Int(cnghttp2_remote_setting(h, 5)))    // the peer's SETTINGS_MAX_FRAME_SIZE
        let frames = room / frameSize + 1
        return max(0, min(sendWindow, room - 9 * frames))
    }

    // MARK: driving

    /// Feeds received bytes; returns how many were used (fewer when the owner paused), or nil
    /// when the connection failed (`failure` says why; a GOAWAY may be queued: `pump` it out).
    package func receive(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard let h else { return nil }
        paused = false
        var pos = 0
        while pos < bytes.count && !paused {
            pendingData = nil
            let n = cnghttp2_recv(h, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self) + pos, bytes.count - pos)
            if n < 0 {
                failure = failure ?? String(cString: cnghttp2_strerror(Int32(n)))
                drain()
                return nil
            }
            pos += n
            drain()
            if self.h == nil { return nil }
            if n == 0 { break }     // nothing taken (never expected): do not spin
        }
        return pos
    }

    /// Serializes what nghttp2 has due into the output. False when the connection failed.
    @discardableResult
    package func pump() -> Bool {
        guard let h else { return false }
        let r = cnghttp2_send(h)
        if r != 0 {
            failure = failure ?? String(cString: cnghttp2_strerror(r))
            return false
        }
        drain()
        return true
    }

    /// Offers session bytes; returns how many were framed into the output.
    package func write(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard let h, sessionStream > 0, !ending, bytes.count > 0 else { return 0 }
        offer = bytes
        offerTaken = 0
        _ = cnghttp2_resume(h, sessionStream)
        let r = cnghttp2_send(h)
        let taken = offerTaken
        offer = nil
        offerTaken = 0
        if r != 0 { failure = failure ?? String(cString: cnghttp2_strerror(r)) }
        drain()
        return taken
    }

    /// Client: the extended CONNECT for the session.
    package func connect(authority: String, path: String) -> Bool {
        guard let h, !isServer, sessionStream == 0 else { return false }
        let id = cnghttp2_submit_connect(h, authority, path, Self.protocolName)
        guard id > 0 else { failure = String(cString: cnghttp2_strerror(id)); return false }
        sessionStream = id
        return pump()
    }

    /// Ends the session stream (END_STREAM after the bytes already framed), or resets it when
    /// no END_STREAM can go out (no send window), then GOAWAY NO_ERROR.
    package func finish() {
        guard let h else { return }
        if sessionStreamOpen, !ending {
            ending = true
            if cnghttp2_send_window(h, sessionStream) > 0 {
                _ = cnghttp2_resume(h, sessionStream)
            } else {
                _ = cnghttp2_submit_rst(h, sessionStream, UInt32(CNGHTTP2_CANCEL))
            }
            // END_STREAM goes out before the GOAWAY (nghttp2 would put GOAWAY first): a peer
            // that takes GOAWAY as the end of everything still sees the stream end.
            guard pump(), self.h != nil else { return }
        }
        _ = cnghttp2_submit_goaway(h, UInt32(CNGHTTP2_NO_ERROR))
        pump()
    }

    /// Resets the session stream with `code` and ends the connection with GOAWAY `code`.
    package func fail(_ code: UInt32) {
        guard let h else { return }
        if sessionStreamOpen { _ = cnghttp2_submit_rst(h, sessionStream, code) }
        _ = cnghttp2_submit_goaway(h, code)
        pump()
    }

    /// The nghttp2 state is dropped; nothing more is read or written.
    package func close() {
        cnghttp2_free(h)
        h = nil
        events.removeAll()
    }

    // MARK: nghttp2 callbacks (no owner calls from here)

    private func sendRaw(_ data: UnsafePointer<UInt8>, _ len: Int) -> Int {
        let n = min(len, output.h2Free)
        if n > 0 { output.h2Append(data, n) }
        return n
    }

    private func dataLength(_ stream: Int32, _ max: Int, _ eof: UnsafeMutablePointer<Int32>) -> Int {
        guard stream == sessionStream else { eof.pointee = 1; return 0 }
        let left = (offer?.count ?? 0) - offerTaken
        if left == 0 {
            if ending { eof.pointee = 1 }
            return 0
        }
        let room = output.h2Free - Self.controlReserve - 9
        return Swift.max(0, Swift.min(max, left, room))
    }

    private func sendData(_ stream: Int32, _ header: UnsafePointer<UInt8>, _ len: Int) -> Int32 {
        guard output.h2Free >= 9 + len else { return 1 }
        output.h2Append(header, 9)
        if len > 0 {
            guard let o = offer, offerTaken + len <= o.count else { return 1 }
            output.h2Append(o.baseAddress! + offerTaken, len)
            offerTaken += len
        }
        return 0
    }

    private func header(_ stream: Int32, _ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Int32 {
        var head = heads[stream] ?? H2RequestHead()
        head.size += name.count + value.count + 32
        head.fields += 1
        if head.size > Int(settings.maxHeaderList) || head.fields > settings.maxHeaderFields {
            head.tooBig = true
            heads[stream] = head
            return 1
        }
        let n = String(decoding: name, as: UTF8.self)
        let v = String(decoding: value, as: UTF8.self)
        switch n {
        case ":method": head.method = v
        case ":scheme": head.scheme = v
        case ":authority": head.authority = v
        case ":path": head.path = v
        case ":protocol": head.protocolName = v
        case ":status": head.status = Int(v) ?? 0
        default: head.headers.fields.append((n, v))
        }
        heads[stream] = head
        return 0
    }

    private func frameReceived(_ type: UInt8, _ flags: UInt8, _ stream: Int32, _ code: UInt32) -> Int32 {
        let endStream = flags & UInt8(CNGHTTP2_FLAG_END_STREAM) != 0
        switch Int(type) {
        case Int(CNGHTTP2_HEADERS):
            events.append(.headers(stream, endStream: endStream))
        case Int(CNGHTTP2_DATA):
            if endStream { events.append(.endStream(stream)) }
        case Int(CNGHTTP2_SETTINGS):
            if flags & UInt8(CNGHTTP2_FLAG_ACK) == 0 {
                if !sawPeerSettings { sawPeerSettings = true; events.append(.peerSettings) }
                events.append(.windowOpened)
            }
        case Int(CNGHTTP2_WINDOW_UPDATE):
            if stream == 0 || stream == sessionStream { events.append(.windowOpened) }
        case Int(CNGHTTP2_GOAWAY):
            events.append(.goAway(code))
        default:
            break
        }
        return 0
    }

    private func dataChunk(_ stream: Int32, _ data: UnsafePointer<UInt8>?, _ len: Int) -> Int32 {
        guard stream == sessionStream, len > 0, let data else { return 0 }
        // Delivered after nghttp2 returns (the bytes are the caller's input, still valid).
        pendingData = UnsafeRawBufferPointer(start: data, count: len)
        return 1
    }

    private func frameSent(_ type: UInt8, _ stream: Int32, _ code: UInt32) {
        guard code != UInt32(CNGHTTP2_NO_ERROR), failure == nil else { return }
        let what = Int(type) == Int(CNGHTTP2_GOAWAY) ? "GOAWAY" : "RST_STREAM"
        if Int(type) == Int(CNGHTTP2_GOAWAY) || stream == sessionStream {
            failure = "sent \(what) \(Self.errorName(code))"
        }
    }

    package static func errorName(_ code: UInt32) -> String { String(cString: cnghttp2_error_name(code)) }

    // MARK: events, after nghttp2 returned

    private func drain() {
        guard !draining else { return }
        draining = true
        defer { draining = false }
        var i = 0
        while true {
            while i < events.count {
                let e = events[i]
                i += 1
                handle(e)
                if h == nil { events.removeAll(); pendingData = nil; return }
            }
            events.removeAll(keepingCapacity: true)
            i = 0
            guard let d = pendingData else { return }
            pendingData = nil
            owner?.h2Event(self, .data(d))
            if h == nil { events.removeAll(); return }
        }
    }

    private func handle(_ e: PendingEvent) {
        switch e {
        case .peerSettings:
            owner?.h2Event(self, .peerSettings)
        case .windowOpened:
            if sessionStream > 0 { owner?.h2Event(self, .windowOpened) }
        case .goAway(let code):
            owner?.h2Event(self, .goAway(code))
        case .endStream(let s):
            if s == sessionStream { owner?.h2Event(self, .peerEnded) }
        case .closed(let s, let code):
            if s == sessionStream { sessionClosed = true }
            if let head = heads.removeValue(forKey: s), head.tooBig, isServer {
                // The header callback refused it (nghttp2 reset the stream): counted like a 431.
                refusals += 1
                owner?.h2Event(self, .refused(status: 431, reason: "request header fields too large"))
            }
            if s == sessionStream && code != UInt32(CNGHTTP2_NO_ERROR) { owner?.h2Event(self, .streamReset(code)) }
        case .headers(let s, let endStream):
            guard let head = heads[s] else { return }
            if isServer {
                if s == sessionStream {
                    // Trailers on the session stream: only END_STREAM matters.
                    if endStream { owner?.h2Event(self, .peerEnded) }
                    return
                }
                request(s, head)
            } else if s == sessionStream {
                heads.removeValue(forKey: s)
                if head.status >= 200 || head.status < 100 {
                    owner?.h2Event(self, .response(status: head.status))
                    if endStream { owner?.h2Event(self, .peerEnded) }
                }
            }
        }
    }

    /// What the front answers a request: 200 for the session, else the refusal's status.
    package static func decide(_ head: H2RequestHead, path: String) -> (status: Int, reason: String) {
        if head.tooBig { return (431, "request header fields too large") }
        let p = head.path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        if p != path { return (404, "no such path \(head.path)") }
        if head.method != "CONNECT" { return (405, "method \(head.method) not allowed") }
        if head.protocolName != protocolName {
            return (400, head.protocolName.isEmpty ? "not an extended CONNECT" : "protocol \(head.protocolName) is not served here")
        }
        return (200, "")
    }

    private func request(_ s: Int32, _ head: H2RequestHead) {
        guard let h else { return }
        heads.removeValue(forKey: s)
        // Past the cap (the GOAWAY is queued): no answer and no event, whatever the reads.
        guard refusals < Self.maxRefusals else {
            _ = cnghttp2_submit_rst(h, s, UInt32(CNGHTTP2_REFUSED_STREAM))
            return
        }
        var (status, reason) = Self.decide(head, path: path)
        if status == 200 && sessionStream != 0 { (status, reason) = (429, "this connection carries a session already") }
        if status == 200, let o = owner, !o.h2Admit(self, head) { (status, reason) = (403, "refused by the front") }
        if status == 200 {
            sessionStream = s
            _ = cnghttp2_submit_response(h, s, 200, 1, nil, 0)
            owner?.h2Event(self, .accepted(head))
            return
        }
        refusals += 1
        owner?.h2Event(self, .refused(status: status, reason: reason))
        if status == 405 {
            "allow".withCString { n in
                "CONNECT".withCString { v in
                    let pair: [UnsafePointer<CChar>?] = [n, v]
                    _ = pair.withUnsafeBufferPointer { cnghttp2_submit_response(h, s, Int32(status), 0, $0.baseAddress, 1) }
                }
            }
        } else {
            _ = cnghttp2_submit_response(h, s, Int32(status), 0, nil, 0)
        }
        if refusals >= Self.maxRefusals {
            failure = "\(refusals) requests refused"
            _ = cnghttp2_submit_goaway(h, UInt32(CNGHTTP2_NO_ERROR))
        }
    }
}
