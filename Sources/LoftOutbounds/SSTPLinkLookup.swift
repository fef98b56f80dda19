import LoftCore
import LoftIO
import LoftSSTP

/// One name looked up through the DNS servers IPCP gave, over a UDP association on the sstp
/// link (from the link's address, as any host on it would ask): an A query to the first server,
/// sent again every second, alternating servers, four times at most; the first answer with the
/// query's id from one of the servers decides. IPv4 only (streams over the link are IPv4).
final class LinkLookup: DatagramEvents, PrefaceWait {
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

/// Datagram events that go nowhere.
final class NoDatagrams: DatagramEvents {
    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {}
}
