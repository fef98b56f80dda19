import Glibc
import LoftCarriers
import LoftCore
import LoftIO
import LoftTLS

/// One UDP association through a VLESS server. VLESS's UDP command names one destination per
/// connection, so the association keeps one TLS connection per destination it sent to, opened
/// by the first datagram and closed after the UDP idle timeout. Replies come only from those
/// destinations: an app behind it sees an address- and port-restricted mapping, not full cone.
/// A name (SOCKS5 UDP ASSOCIATE with a domain) is resolved here first, with the loop's
/// resolver, so that replies carry the address they came from.
final class VLESSAssociation: DatagramAssociation {
    weak var events: DatagramEvents?
    let outbound: VLESSOutbound
    private var conns: [Endpoint: VLESSDatagramConnection] = [:]
    private var resolving: [ResolveRequest] = []
    private(set) var closed = false
    /// Destinations one association may talk to at once; datagrams to more are dropped.
    static let maxDestinations = 256

    init(outbound: VLESSOutbound, events: DatagramEvents) {
        self.outbound = outbound
        self.events = events
        outbound.meter.flows &+= 1
        outbound.meter.live += 1
    }

    deinit { if !closed { close() } }

    @discardableResult
    func send(_ payload: UnsafeRawBufferPointer, to destination: Destination) -> Bool {
        guard !closed else { return false }
        switch destination {
        case .ip(let e):
            if let c = conns[e] { return c.send(payload) }
            guard conns.count < Self.maxDestinations else { return dropped() }
            let c = VLESSDatagramConnection(association: self, destination: e)
            conns[e] = c
            c.start()
            return c.send(payload)
        case .domain(let name, let port):
            let copy = Array(payload)
            resolving.removeAll { !$0.isPending }
            resolving.append(outbound.runtime.resolver.resolve(name, port: port) { [weak self] resolved in
                guard let self, !self.closed else { return }
                guard case .success(let endpoint) = resolved else { _ = self.dropped(); return }
                copy.withUnsafeBytes { _ = self.send($0, to: .ip(endpoint)) }
            })
            return true
        }
    }

    func dropped() -> Bool {
        outbound.meter.udpDropped &+= 1
        return false
    }

    func received(_ payload: UnsafeRawBufferPointer, from: Endpoint) {
        outbound.meter.bytesDown &+= UInt64(payload.count)
        events?.datagramReceived(payload, from: from)
    }

    func ended(_ c: VLESSDatagramConnection) {
        if conns[c.destination] === c { conns[c.destination] = nil }
    }

    func close() {
        guard !closed else { return }
        closed = true
        outbound.meter.live -= 1
        for r in resolving { r.cancel() }
        resolving.removeAll()
        let all = conns.values
        conns.removeAll()
        for c in all { c.close() }
    }
}

/// One destination of an association: a TLS connection with command UDP, datagrams framed
/// with their 2-byte length both ways. Datagrams sent before the handshake finishes wait (up
/// to `queueLimit` bytes) and leave with the request header in one write.
final class VLESSDatagramConnection: ByteStreamEvents {
    unowned let association: VLESSAssociation
    let destination: Endpoint
    private var outbound: VLESSOutbound { association.outbound }
    private var stream: ByteStream?
    private var queue: [UInt8]
    /// Payload bytes in `queue` (counted as sent when the queue is written).
    private var queuedPayload = 0
    private var connected = false
    private var responded = false
    /// The start of the response header or of a frame, taken off the stream until its rest
    /// comes (at most one frame: 65,537 bytes).
    private var partial: [UInt8] = []
    private var lastActivity: UInt64
    private var idleTimer: TimerHandle?
    private var connectTimer: TimerHandle?
    private var done = false
    static let queueLimit = 32 * 1024

    init(association: VLESSAssociation, destination: Endpoint) {
        self.association = association
        self.destination = destination
        queue = VLESS.encode(VLESS.Request(uuid: association.outbound.options.uuid, command: .udp,
                                           destination: .ip(destination))) ?? []
        lastActivity = association.outbound.loop.now
    }

    func start() {
        // A frame need not fit in the input buffer: one split across reads waits in `partial`.
        stream = outbound.dial(events: self)
        armIdle()
        // Datagrams keep the idle deadline away: a connection that never comes up needs its own.
        connectTimer = outbound.loop.schedule(after: outbound.options.connectTimeoutMs) { [weak self] in
            guard let self else { return }
            self.connectTimer = nil
            guard !self.connected, !self.done else { return }
            self.outbound.failed(.timeout, "no TLS connection within the connect timeout")
            self.end()
        }
    }

    deinit {
        if let t = idleTimer { outbound.loop.cancel(t) }
        if let t = connectTimer { outbound.loop.cancel(t) }
    }

    private func armIdle() {
        let loop = outbound.loop
        idleTimer = loop.schedule(at: lastActivity &+ outbound.options.udpIdleTimeoutMs) { [weak self] in
            guard let self else { return }
            self.idleTimer = nil
            if loop.now &- self.lastActivity >= self.outbound.options.udpIdleTimeoutMs {
                self.end()
            } else {
                self.armIdle()
            }
        }
    }

    func send(_ payload: UnsafeRawBufferPointer) -> Bool {
        guard !done, let (h0, h1) = VLESS.frameHeader(payload.count) else { return association.dropped() }
        lastActivity = outbound.loop.now
        guard connected, let stream else {
            guard queue.count + 2 + payload.count <= Self.queueLimit else { return association.dropped() }
            queue.append(h0); queue.append(h1)
            queue += payload
            queuedPayload += payload.count
            return true
        }
        let total = 2 + payload.count
        // A frame goes whole or not at all (a datagram may be dropped, a stream not cut).
        guard stream.writeRoom >= total else { return association.dropped() }
        var hdr = (h0, h1)
        let w = withUnsafeMutableBytes(of: &hdr) { h -> Int in
            var iov = (iovec(iov_base: h.baseAddress, iov_len: 2),
                       iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress), iov_len: payload.count))
            return withUnsafeMutableBytes(of: &iov) { stream.write($0.baseAddress!.assumingMemoryBound(to: iovec.self), count: 2) }
        }
        guard w == total else {
            if w < 0 { end() }
            return association.dropped()
        }
        outbound.meter.bytesUp &+= UInt64(payload.count)
        return true
    }

    // MARK: ByteStreamEvents

    func streamConnected(_: ByteStream) {
        connected = true
        if let t = connectTimer { outbound.loop.cancel(t); connectTimer = nil }
        guard let stream else { return }
        // The request header and every datagram that waited, in one write.
        let w = queue.withUnsafeBytes { raw -> Int in
            var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress!), iov_len: raw.count)
            return stream.write(&iov, count: 1)
        }
        if w != queue.count { end(); return }
        outbound.meter.bytesUp &+= UInt64(queuedPayload)
        queue = []
        queuedPayload = 0
    }

    func streamFailed(_: ByteStream, _ failure: FlowFailure) {
        let (cause, detail) = VLESSOutbound.cause(of: stream as? TLSStream, responded: responded)
        outbound.failed(cause, detail)
        stream = nil
        end()
    }

    func streamWritable(_: ByteStream) {}

    /// Reads whole frames in place (zero-copy out of the TLS end's input buffer). What is left
    /// behind the last whole frame (the start of the response header or of a frame whose rest
    /// is in a later TLS record) is taken off the stream into `partial`: the TLS end stops
    /// reading while its reader leaves bytes in it (TLSStream), so a frame's start left there
    /// would wait for ever for its rest. `partial` takes only what completes its unit; the
    /// bytes behind it are read in place again.
    func streamReadable(_: ByteStream) {
        guard let stream else { return }
        while !done {
            var iov = iovec()
            var n = 0
            guard let r = stream.peek(&iov, max: 1, count: &n) else { return }
            switch r {
            case .data(let k) where k > 0:
                let bytes = UnsafeRawBufferPointer(start: iov.iov_base, count: k)
                if !partial.isEmpty {
                    // Complete the split unit first: at most what it still needs.
                    guard let need = partialNeeds() else { return badResponse() }
                    let t = min(need, k)
                    partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[0..<t]))
                    stream.consume(t)
                    // A frame's length, once in, says how much more it needs.
                    guard let still = partialNeeds() else { return badResponse() }
                    if still > 0 { continue }
                    let used = partial.withUnsafeBytes { take(whole: $0) }
                    if done { return }
                    assert(used == partial.count, "a completed unit is taken whole")
                    partial.removeAll(keepingCapacity: true)
                    continue
                }
                let used = take(whole: bytes)
                if done { return }
                if used < k {
                    // The start of a unit whose rest is on its way.
                    partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[used...]))
                    if partialNeeds() == nil { return badResponse() }
                }
                stream.consume(k)
            case .data, .wouldBlock:
                return
            case .eof:
                if !responded { outbound.failed(.noResponse, "closed without a response") }
                end()
                return
            case .failed:
                let (cause, detail) = VLESSOutbound.cause(of: stream as? TLSStream, responded: responded)
                outbound.failed(cause, detail)
                end()
                return
            }
        }
    }

    /// Bytes the unit in `partial` (the response header until it came, then a frame) still
    /// needs; nil when the response is not VLESS.
    private func partialNeeds() -> Int? {
        partial.withUnsafeBytes { responded ? VLESS.frameBytesNeeded($0) : VLESS.responseBytesNeeded($0) }
    }

    private func badResponse() {
        let why = partial.first.map { "response version \($0)" } ?? "bad response"
        outbound.failed(.badResponse, why)
        end()
    }

    /// Takes the response header (until it came) and every whole frame at the start of
    /// `bytes`, delivering each datagram; returns the bytes used (the rest is a unit's start).
    private func take(whole bytes: UnsafeRawBufferPointer) -> Int {
        var used = 0
        if !responded {
            switch VLESS.parseResponse(bytes) {
            case .needMore: return 0
            case .bad(let why):
                outbound.failed(.badResponse, why)
                end()
                return 0
            case .done(_, let len):
                used = len
                responded = true
                outbound.responded()
            }
        }
        while !done {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[used...])
            guard case .done(let range, let len) = VLESS.parseFrame(rest) else { break }
            lastActivity = outbound.loop.now
            association.received(UnsafeRawBufferPointer(rebasing: rest[range]), from: destination)
            used += len
        }
        return used
    }

    /// Gone: closed, and out of its association.
    private func end() {
        guard !done else { return }
        done = true
        if let t = idleTimer { outbound.loop.cancel(t); idleTimer = nil }
        if let t = connectTimer { outbound.loop.cancel(t); connectTimer = nil }
        stream?.events = nil
        stream?.close()
        stream = nil
        association.ended(self)
    }

    func close() { end() }
}
