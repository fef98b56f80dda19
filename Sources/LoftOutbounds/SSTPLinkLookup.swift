import Glibc
import LoftCore
import LoftIO
import LoftSSTP

/// One name looked up through the DNS servers IPCP gave, over a UDP association on the sstp
/// link (from the link's address, as any host on it would ask): an A query to the first server,
/// sent again every second, alternating servers, four times at most; the first answer with the
/// query's id from one of the servers decides. IPv4 only (streams over the link are IPv4).
final class LinkLookup: DatagramEvents {
    static let tries = 4
    private let retryMs: UInt64

    private let loop: EventLoop
    private let name: String
    private let servers: [Endpoint]
    private var association: DatagramAssociation?
    private var timer: TimerHandle?
    private var sent = 0
    private let id: UInt16
    private var completion: ((DNSWire.Answer?) -> Void)?

    /// `completion` runs once, later on the loop: the answer, or nil when none came in time.
    init?(loop: EventLoop, name: String, servers: [IPAddress], association: DatagramAssociation, retryMs: UInt64 = 1000,
          completion: @escaping (DNSWire.Answer?) -> Void) {
        guard !servers.isEmpty else { return nil }
        self.loop = loop
        self.retryMs = retryMs
        self.name = name
        self.servers = servers.map { Endpoint($0, 53) }
        self.association = association
        self.completion = completion
        let r = SSTPClient.secureRandom(2)
        id = UInt16(r[0]) << 8 | UInt16(r[1])
        association.events = self
    }

    /// False when the name cannot be put in a query.
    func start() -> Bool {
        guard DNSWire.query(name, type: .a, id: id) != nil else { return false }
        send()
        return true
    }

    private func send() {
        guard completion != nil, let a = association, let q = DNSWire.query(name, type: .a, id: id) else { return }
        let server = servers[sent % servers.count]
        sent += 1
        _ = q.withUnsafeBytes { a.send($0, to: .ip(server)) }
        timer = loop.schedule(after: retryMs) { [weak self] in
            guard let self else { return }
            self.timer = nil
            if self.sent >= Self.tries { self.finish(nil) } else { self.send() }
        }
    }

    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {
        guard servers.contains(from) else { return }
        let answer = DNSWire.answer(payload, type: .a, id: id)
        if answer == .malformed { return }   // another id, or junk: the right answer may still come
        finish(answer)
    }

    private func finish(_ answer: DNSWire.Answer?) {
        if let t = timer { loop.cancel(t) }
        timer = nil
        association?.events = nil
        association?.close()
        association = nil
        let c = completion
        completion = nil
        c?(answer)
    }

    /// Nothing more is sent and the completion never runs.
    func cancel() {
        completion = nil
        finish(nil)
    }
}

/// The stream a SOCKS5 CONNECT to a name routed to sstp gets at once: nothing passes until the
/// name is resolved over the link and the connection over the link is opened; from then on
/// every call goes to that connection, and its events come through unchanged. A failed lookup
/// is one `streamFailed`.
final class PendingLinkStream: ByteStream, ByteStreamEvents {
    weak var events: ByteStreamEvents?
    private var inner: ByteStream?
    private var failure: FlowFailure?
    private var readInterest = true
    private var shutdownPending = false
    private var closed = false
    var lookup: LinkLookup?

    init(events: ByteStreamEvents) { self.events = events }

    /// A placeholder for an association's events until its `LinkLookup` takes them over.
    let nothing = NoDatagrams()

    /// The connection over the link (it reports to this stream from now on).
    func attach(_ s: ByteStream) {
        lookup = nil
        guard !closed else { s.reset(); return }
        inner = s
        s.events = self
        s.setReadInterest(readInterest)
        if shutdownPending { s.shutdownWrite() }
    }

    func fail(_ f: FlowFailure) {
        lookup = nil
        guard !closed, inner == nil, failure == nil else { return }
        failure = f
        events?.streamFailed(self, f)
    }

    var writeRoom: Int { inner?.writeRoom ?? 0 }
    func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        if let inner { return inner.write(segments, count: count) }
        return failure == nil ? 0 : -1
    }
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        if let inner { return inner.read(into: buffer) }
        return failure.map { .failed($0) } ?? .wouldBlock
    }
    func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        inner?.peek(iov, max: max, count: &count)
    }
    func consume(_ n: Int) { inner?.consume(n) }
    func setReadInterest(_ on: Bool) {
        readInterest = on
        inner?.setReadInterest(on)
    }
    func shutdownWrite() {
        if let inner { inner.shutdownWrite() } else { shutdownPending = true }
    }
    func close() {
        closed = true
        if let inner { inner.close() } else { lookup?.cancel(); lookup = nil }
    }
    func reset() {
        closed = true
        if let inner { inner.reset() } else { lookup?.cancel(); lookup = nil }
    }

    func streamConnected(_: ByteStream) { events?.streamConnected(self) }
    func streamFailed(_: ByteStream, _ failure: FlowFailure) { events?.streamFailed(self, failure) }
    func streamReadable(_: ByteStream) { events?.streamReadable(self) }
    func streamWritable(_: ByteStream) { events?.streamWritable(self) }
}

/// Datagram events that go nowhere.
final class NoDatagrams: DatagramEvents {
    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {}
}
