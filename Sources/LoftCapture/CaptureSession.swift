import Glibc
import LoftControl
import LoftCore
import LoftIO

/// One running capture: its reader's connection, its filters and its ring of pcapng blocks.
/// Packets that pass its filters are written into the ring as Enhanced Packet blocks (the
/// packet copied once) and the ring goes to the reader after each batch of events; a packet
/// the ring has no room for is lost and counted. It ends at its count or duration, when the
/// reader goes away, or when loft stops: then an Interface Statistics block per interface says
/// what passed the filters and what was lost, and the connection closes once that is out.
final class CaptureSession: IOHandler {
    let fd: Int32
    let request: CaptureRequest
    /// Its number since loft started, and when (the loop's clock, ms): for `loft status`.
    let id: UInt64
    let startedAt: UInt64
    private unowned let hub: CaptureHub
    private let filter: PacketFilter?
    /// pcapng interface id by netstack input index (-1: not captured).
    private var interfaceID: [Int32]
    private var accepted: [UInt64]
    private var lost: [UInt64]
    private var ring: ByteRing
    /// Ring space kept for the statistics blocks at the end.
    private let reserve: Int
    private let startMicros: UInt64
    private(set) var written: UInt64 = 0
    private(set) var endReason = ""
    private var ending = false
    private var closed = false
    private var timer: TimerHandle?
    private var flushSoon: SoonOnce!
    private var wantWritable = false
    /// The reader has ended its side (it reads on until the statistics are out).
    private var readerDone = false
    /// The bytes the last packet offered took in the ring (0: it was not kept), and the
    /// interface it counted on, so that it can be taken back.
    private var lastKept = 0
    private var lastInterface = 0
    /// The count is reached: nothing more is kept (the end follows after the batch).
    private var full = false
    /// Itself, from the end until the connection is closed (the hub has let go by then).
    private var keep: CaptureSession?

    var lostTotal: UInt64 { lost.reduce(0, &+) }

    init(hub: CaptureHub, id: UInt64, fd: Int32, request: CaptureRequest, interfaces: [CaptureHub.Interface], filter: PacketFilter?) {
        self.hub = hub
        self.id = id
        self.startedAt = hub.loop.currentTime
        self.fd = fd
        self.request = request
        self.filter = filter
        let top = (interfaces.map(\.netif).max() ?? 0) + 1
        interfaceID = [Int32](repeating: -1, count: top)
        accepted = [UInt64](repeating: 0, count: interfaces.count)
        lost = [UInt64](repeating: 0, count: interfaces.count)
        ring = ByteRing(capacity: CaptureHub.ringBytes)
        reserve = 128 * interfaces.count
        startMicros = WallClock.microseconds()
        flushSoon = SoonOnce(loop: hub.loop) { [weak self] in self?.flush() }
        ring.append(Array("ok\n".utf8))
        ring.append(PcapNG.sectionHeader(application: "loft \(Release.version) capture", os: "Linux"))
        for (n, i) in interfaces.enumerated() {
            interfaceID[i.netif] = Int32(n)
            let what = i.kind == .tun ? "loft's TUN input" : "loft's UDP bridge input"
            ring.append(PcapNG.interfaceDescription(name: i.name, description: what, snaplen: UInt32(request.snaplen)))
        }
        hub.loop.register(fd, IOEvents.readable, self)
        if let ms = request.durationMs {
            timer = hub.loop.schedule(after: ms) { [weak self] in
                self?.timer = nil
                self?.finish("duration")
            }
        }
        flushSoon.schedule()
    }

    /// A packet on input `netif`: kept when it passes the filters and fits in the ring.
    @inline(__always)
    func offer(_ p: UnsafeRawBufferPointer, netif: Int, _ direction: PcapNG.Direction, comment: [UInt8]?,
               flow: inout (id: UInt64, outbound: String)??) {
        lastKept = 0
        guard !ending, !full, netif < interfaceID.count else { return }
        let id = interfaceID[netif]
        guard id >= 0 else { return }
        if request.flow != nil || request.outbound != nil {
            if flow == nil { flow = .some(hub.flowOf?(p, netif, direction == .inbound)) }
            guard let f = flow!, request.flow.map({ $0 == f.id }) ?? true,
                  request.outbound.map({ $0 == f.outbound }) ?? true else { return }
        }
        let captured = min(p.count, request.snaplen)
        if let filter, !filter.matches(p, captured: captured, length: p.count) { return }
        accepted[Int(id)] &+= 1
        let need = PcapNG.enhancedPacketLength(captured: captured, commentBytes: comment?.count ?? 0)
        guard need <= ring.free - reserve else {
            lost[Int(id)] &+= 1
            return
        }
        PcapNG.enhancedPacket(interface: UInt32(id), micros: WallClock.microseconds(),
                              packet: UnsafeRawBufferPointer(rebasing: p[0..<captured]), originalLength: p.count,
                              direction: direction, comment: comment) { ring.append($0) }
        written &+= 1
        lastKept = need
        lastInterface = Int(id)
        flushSoon.schedule()
        if let count = request.count, written >= count {
            full = true
            hub.loop.soon { [weak self] in
                guard let self, self.full else { return }
                self.finish("count")
            }
        }
    }

    /// The last packet offered is not to be kept after all (the netstack dropped it).
    func takeBackLast() {
        guard lastKept > 0, !ending else { return }
        ring.dropLast(lastKept)
        written &-= 1
        accepted[lastInterface] &-= 1
        lastKept = 0
        full = false
    }

    func handleIO(_ events: UInt32) {
        if events & (IOEvents.error | IOEvents.hangup) != 0 {
            // The reader is gone both ways: nothing more reaches it.
            if !ending { finish("reader gone") }
            close()
            return
        }
        if events & IOEvents.readable != 0, !readerDone {
            // The reader sends nothing after its request; its end of sending (Ctrl-C in
            // `loft capture`) ends the capture, and the statistics still go to it.
            var b = [UInt8](repeating: 0, count: 256)
            switch b.withUnsafeMutableBytes({ Syscall.read(fd, $0.baseAddress!, $0.count) }) {
            case .failure(let e) where e.wouldBlock: break
            case .success(let n) where n > 0: break
            case .success:
                readerDone = true
                watch()
                if !ending { finish("reader closed") }
            case .failure:
                if !ending { finish("reader gone") }
                close()
                return
            }
        }
        if events & IOEvents.writable != 0 { flush() }
    }

    /// What the loop watches: the reader's end while it may come, room to write while bytes wait.
    private func watch() {
        guard !closed else { return }
        hub.loop.modify(fd, (readerDone ? 0 : IOEvents.readable) | (wantWritable ? IOEvents.writable : 0))
    }

    /// The ring to the reader, as much as it takes now.
    private func flush() {
        guard !closed else { return }
        while !ring.isEmpty {
            let (a, b, n) = ring.pieces()
            // sendmsg with MSG_NOSIGNAL: a reader gone is an error here, never a SIGPIPE.
            let r = withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { v -> Result<Int, Errno> in
                v[0] = a
                v[1] = b
                var m = msghdr()
                m.msg_iov = v.baseAddress
                m.msg_iovlen = n
                return withUnsafePointer(to: &m) { Syscall.sendmsg(fd, $0, flags: Int32(MSG_NOSIGNAL)) }
            }
            switch r {
            case .success(let w) where w > 0:
                ring.consume(w)
            case .failure(let e) where e.wouldBlock:
                if !wantWritable {
                    wantWritable = true
                    watch()
                }
                return
            default:
                if !ending { finish("reader gone") }
                close()
                return
            }
        }
        if wantWritable {
            wantWritable = false
            watch()
        }
        if ending { close() }
    }

    /// The capture ends: the statistics blocks, then the connection closes once they are out
    /// (at most 2 s later: a reader that stopped reading does not hold it).
    func finish(_ why: String) {
        guard !ending else { return }
        ending = true
        endReason = why
        if let timer { hub.loop.cancel(timer) }
        let now = WallClock.microseconds()
        for n in 0..<accepted.count {
            let isb = PcapNG.interfaceStatistics(interface: UInt32(n), start: startMicros, end: now,
                                                 accepted: accepted[n], lost: lost[n])
            if isb.count <= ring.free { ring.append(isb) }
        }
        keep = self
        hub.ended(self)
        timer = hub.loop.schedule(after: 2000) { [weak self] in self?.close() }
        flushSoon.schedule()
    }

    private func close() {
        guard !closed else { return }
        closed = true
        if let timer { hub.loop.cancel(timer) }
        timer = nil
        hub.loop.unregister(fd)
        _ = Syscall.close(fd)
        ring.deallocate()
        keep = nil
    }
}
