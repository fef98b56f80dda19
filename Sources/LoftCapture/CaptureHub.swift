import LoftControl
import LoftCore
import LoftIO

/// Where loft's inputs hand packets to live captures (`loft capture`, docs/capture.md). The
/// inputs ask `isActive` per packet and call nothing more while nobody captures; a capture's
/// cost is bounded by its ring (a slow reader loses packets, counted, and never slows the data
/// path). At most `maxSessions` captures at a time.
///
/// A capture shows packets as loft took them: one read from an input is written into the
/// captures' rings before the netstack sees it (lwIP rewrites TCP headers in place), and taken
/// back out if the netstack drops it while taking it in (`dropped`); captures that asked for
/// drops get it again then, with loft's reason as its comment.
public final class CaptureHub {
    /// An input packets are captured on: the netstack's input index, the kind, the device's name.
    public struct Interface {
        public let netif: Int
        public let kind: CaptureRequest.Input
        public let name: String
        public init(netif: Int, kind: CaptureRequest.Input, name: String) {
            self.netif = netif
            self.kind = kind
            self.name = name
        }
    }

    /// Where the inputs look first: false while no capture runs.
    public private(set) var isActive = false
    public static let maxSessions = 4
    /// Each capture's buffer toward its reader.
    public static let ringBytes = 4 << 20

    let loop: EventLoop
    private(set) var interfaces: [Interface] = []
    private var sessions: [CaptureSession] = []
    /// The flow a packet belongs to (its id and outbound's name), for `flow=` and `outbound=`:
    /// `inbound` when it was read from the input.
    public var flowOf: ((UnsafeRawBufferPointer, Int, Bool) -> (id: UInt64, outbound: String)?)?
    /// A flow id that is live now (a capture of an unknown flow is refused).
    public var flowExists: ((UInt64) -> Bool)?
    /// The outbound names (a capture of an unknown outbound is refused).
    public var outboundNames: [String] = []
    /// Runs when `isActive` changes: the netstack reports its drops to `dropped` while it is on.
    public var activeChanged: ((Bool) -> Void)?
    /// The last packet read from an input (its bytes' address and its input) while the
    /// netstack takes it: a drop of it takes it back out of the captures.
    private var pending: (UnsafeRawPointer?, Int) = (nil, -1)
    /// Captures run, and packets their readers lost, since start (each capture's own are in its
    /// statistics block and its `capture.end` log line).
    public private(set) var started: UInt64 = 0
    public private(set) var lost: UInt64 = 0

    public init(loop: EventLoop) { self.loop = loop }

    public func add(_ i: Interface) { interfaces.append(i) }

    /// A `capture` request on the control connection `fd`: answered `ok` and streamed, or
    /// answered `error …`; `fd` is this hub's from now on.
    public func start(_ request: CaptureRequest, fd: Int32) {
        switch makeSession(request, fd: fd) {
        case .success(let s):
            sessions.append(s)
            started &+= 1
            update()
            Log.info("capture.start", ["input": request.input.rawValue, "filter": request.filter ?? "",
                                       "drops": request.drops, "captures": sessions.count])
        case .failure(let e):
            ControlServer.refuse(fd, "error \(e.description)\n")
        }
    }

    private func makeSession(_ r: CaptureRequest, fd: Int32) -> Result<CaptureSession, CaptureError> {
        guard sessions.count < Self.maxSessions else {
            return .failure(CaptureError("busy: \(Self.maxSessions) captures are running"))
        }
        let chosen = interfaces.filter { r.input == .all || $0.kind == r.input }
        guard !chosen.isEmpty else {
            let have = interfaces.isEmpty ? "none" : interfaces.map(\.kind.rawValue).joined(separator: ", ")
            return .failure(CaptureError("no \(r.input == .all ? "packet input" : "\(r.input.rawValue) input") in this loft (inputs with packets: \(have))"))
        }
        if let o = r.outbound, !outboundNames.contains(o) {
            return .failure(CaptureError("no outbound named \"\(o)\" (\(outboundNames.joined(separator: ", ")))"))
        }
        if let f = r.flow, flowExists?(f) != true {
            return .failure(CaptureError("no live flow \(f) (see `loft status --flows`)"))
        }
        var filter: PacketFilter?
        if let expr = r.filter {
            switch PacketFilter.compile(expr, snaplen: r.snaplen) {
            case .success(let f): filter = f
            case .failure(let e): return .failure(e)
            }
        }
        let s = CaptureSession(hub: self, id: started &+ 1, fd: fd, request: r, interfaces: chosen, filter: filter)
        return .success(s)
    }

    func ended(_ s: CaptureSession) {
        sessions.removeAll { $0 === s }
        lost &+= s.lostTotal
        update()
        Log.info("capture.end", ["packets": s.written, "lost": s.lostTotal, "reason": s.endReason])
    }

    private func update() {
        let active = !sessions.isEmpty
        pending = (nil, -1)
        if active != isActive {
            isActive = active
            activeChanged?(active)
        }
    }

    /// A packet read from (`.inbound`: before the netstack takes it) or written to
    /// (`.outbound`) input `netif`. Call only while `isActive`.
    public func packet(_ p: UnsafeRawBufferPointer, netif: Int, _ direction: PcapNG.Direction) {
        var flow: (id: UInt64, outbound: String)??
        pending = direction == .inbound ? (UnsafeRawPointer(p.baseAddress), netif) : (nil, -1)
        for s in sessions {
            s.offer(p, netif: netif, direction, comment: nil, flow: &flow)
        }
    }

    /// A packet of input `netif` the netstack dropped as it took it in, and why: out of the
    /// captures if they had it, and into those that asked for drops, with the reason.
    public func dropped(_ p: UnsafeRawBufferPointer, netif: Int, reason: String) {
        let wasPending = pending.1 == netif && pending.0 != nil && pending.0 == UnsafeRawPointer(p.baseAddress)
        pending = (nil, -1)
        var flow: (id: UInt64, outbound: String)??
        var comment: [UInt8]?       // made once, and only when a capture asked for drops
        for s in sessions {
            if wasPending { s.takeBackLast() }
            guard s.request.drops else { continue }
            if comment == nil { comment = Array("dropped: \(reason)".utf8) }
            s.offer(p, netif: netif, .inbound, comment: comment, flow: &flow)
        }
    }

    /// The captures running now, for `loft status`: what each asked for, the packets it has
    /// written and lost so far.
    public var status: [StatusReport.Capture] {
        let now = loop.currentTime
        return sessions.map { s in
            let r = s.request
            var c = StatusReport.Capture(id: s.id, input: r.input.rawValue, outbound: r.outbound, flow: r.flow,
                                         drops: r.drops, filter: r.filter)
            c.packets = s.written
            c.lost = s.lostTotal
            c.ageMs = now &- s.startedAt
            return c
        }
    }

    /// loft stops: every capture ends (statistics written where the reader takes them).
    public func stop() {
        for s in sessions { s.finish("loft stopped") }
    }
}
