import Glibc
import LoftCapture
import LoftCore
import LoftIO
import LoftNetstack

/// The raw-IP UDP bridge: another process sends one whole IPv4/IPv6 packet per datagram from
/// 127.0.0.1:peer-port to loft's 127.0.0.1:extension-port, and gets the stack's replies the
/// same way. The socket is connected, so the kernel drops datagrams from any other source.
/// Reads and writes are batched (recvmmsg/sendmmsg); replies queue during a batch of events
/// and leave in one sendmmsg after it.
public final class BridgeInput: IOHandler, PacketWriter {
    public struct Counters: Sendable {
        public var datagramsIn: UInt64 = 0
        public var datagramsOut: UInt64 = 0
        /// Datagrams larger than bridge.mtu (dropped whole, never truncated).
        public var oversize: UInt64 = 0
        /// ECONNREFUSED: the peer is not bound right now (it may start later).
        public var peerMissing: UInt64 = 0
        /// Replies that could not be sent (socket buffer full, peer missing).
        public var sendDrops: UInt64 = 0
        /// Bare ACKs not sent because a later ACK of the same connection in the same batch
        /// said the same and more (`AckCoalescer`).
        public var acksCoalesced: UInt64 = 0
    }

    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    /// The runtime form of the config's `bridge` section: loft binds 127.0.0.1:`extensionPort`
    /// and connects to 127.0.0.1:`peerPort`; `mtu` is the largest packet in one datagram.
    public struct Options: Sendable, Equatable {
        public var peerPort: UInt16
        public var extensionPort: UInt16
        public var mtu: Int

        public init(peerPort: UInt16, extensionPort: UInt16, mtu: Int) {
            self.peerPort = peerPort
            self.extensionPort = extensionPort
            self.mtu = mtu
        }
    }

    let settings: Options
    let loop: EventLoop
    unowned let netstack: Netstack
    private var fd: Int32 = -1
    private var netif = 0
    private var tally = Counters()
    public var counters: Counters {
        var c = tally
        c.acksCoalesced = acks.coalesced
        return c
    }
    /// Bare ACKs held until the batch is sent, one per connection: the peer handles every
    /// datagram one by one (socat: a wake-up each), and an upload makes the stack ACK every
    /// second segment; a batch needs only each connection's last ACK.
    private lazy var acks = AckCoalescer { [unowned self] in self.enqueue($0) }
    public var inputIndex: Int { netif }
    /// Live captures (`loft capture`): asked once per packet whether one runs.
    public var capture: CaptureHub?

    private static let batch = 64
    /// Per TCP flow from the peer: the most lwIP's window scale (1) can announce.
    public static let receiveWindow = 0x1FFFE
    private let slot: Int
    private let rx: UnsafeMutableRawBufferPointer
    private var rxLens = [Int32](repeating: 0, count: BridgeInput.batch)
    private let tx: UnsafeMutableRawBufferPointer
    private var txLens = [Int32](repeating: 0, count: BridgeInput.batch)
    private var txCount = 0

    public init(settings: Options, loop: EventLoop, netstack: Netstack) {
        self.settings = settings
        self.loop = loop
        self.netstack = netstack
        // One byte more than the MTU so an oversize datagram is recognised, not cut.
        slot = settings.mtu + 1
        rx = UnsafeMutableRawBufferPointer.allocate(byteCount: slot * Self.batch, alignment: 16)
        tx = UnsafeMutableRawBufferPointer.allocate(byteCount: slot * Self.batch, alignment: 16)
    }

    deinit {
        rx.deallocate()
        tx.deallocate()
    }

    public func start() throws {
        let s = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        guard s >= 0 else { throw StartError(description: "bridge: socket: \(String(cString: strerror(Sockets.errno)))") }
        _ = Syscall.setOption(s, SOL_SOCKET, SO_RCVBUF, 4 << 20)
        _ = Syscall.setOption(s, SOL_SOCKET, SO_SNDBUF, 4 << 20)
        let loopback = IPAddress.v4(0x7F00_0001)
        let local = SocketAddress(Endpoint(loopback, settings.extensionPort))
        if case .failure(let e) = Syscall.bind(s, to: local) {
            _ = Syscall.close(s)
            throw StartError(description: "bridge: cannot bind 127.0.0.1:\(settings.extensionPort): \(e)")
        }
        let peer = SocketAddress(Endpoint(loopback, settings.peerPort))
        if case .failure(let e) = Syscall.connect(s, to: peer) {
            _ = Syscall.close(s)
            throw StartError(description: "bridge: cannot connect to 127.0.0.1:\(settings.peerPort): \(e)")
        }
        fd = s
        // A round trip through the peer process takes several times the TUN's, and lwIP's
        // 64 KiB window would bound an upload to about 1 Gbit/s at 0.5 ms. Loft's own socket
        // buffer (4 MiB) takes what the larger window lets the peer send. The other way, the
        // send buffer stays at lwIP's 64 KiB: a burst beyond that overflows a peer's default
        // UDP receive buffer (208 KiB on Linux), and lwIP, without SACK, recovers from the
        // loss slowly (a 50 MiB download through a default socat took 11.8 s instead of 1).
        netif = netstack.addInput(mtu: settings.mtu, writer: self, verifyChecksums: true,
                                  receiveWindow: Self.receiveWindow)
        loop.register(fd, IOEvents.readable, self)
        loop.addAfterEvents { [weak self] in self?.flush() }
        Log.info("bridge.up", ["listen": "127.0.0.1:\(settings.extensionPort)", "peer": "127.0.0.1:\(settings.peerPort)",
                               "mtu": settings.mtu])
    }

    public func stop() {
        guard fd >= 0 else { return }
        flush()
        loop.unregister(fd)
        _ = Syscall.close(fd)
        fd = -1
        Log.info("bridge.down", [:])
    }

    public func handleIO(_ events: UInt32) {
        // A few batches per wake-up, then let the loop serve others.
        for _ in 0..<4 {
            let got = rxLens.withUnsafeMutableBufferPointer { lens in
                Syscall.receiveBatch(fd, rx.baseAddress!.assumingMemoryBound(to: UInt8.self), slot: slot, count: Int32(Self.batch),
                                     lens: lens.baseAddress!)
            }
            let n: Int
            switch got {
            case .success(let count): n = count
            case .failure(let e):
                if e.code == ECONNREFUSED { tally.peerMissing &+= 1; continue }
                return
            }
            for i in 0..<n {
                tally.datagramsIn &+= 1
                let len = Int(rxLens[i])
                if len < 0 || len > settings.mtu {
                    tally.oversize &+= 1
                    netstack.countDrop(.tooLarge, input: netif,
                                       packet: UnsafeRawBufferPointer(rebasing: rx[i * slot ..< i * slot + min(max(len, 0), slot)]))
                    continue
                }
                let packet = UnsafeRawBufferPointer(rebasing: rx[i * slot ..< i * slot + len])
                if let c = capture, c.isActive { c.packet(packet, netif: netif, .inbound) }
                netstack.input(packet, from: netif)
            }
            if Int(n) < Self.batch { return }
        }
    }

    /// The bridge's input has no offload: `segmentSize` is always 0.
    public func writePacket(_ packet: UnsafeRawBufferPointer, segmentSize: Int) {
        guard fd >= 0 else { return }
        guard packet.count <= settings.mtu else {
            tally.sendDrops &+= 1
            return
        }
        if acks.pass(packet) { return }
        enqueue(packet)
    }

    private func enqueue(_ packet: UnsafeRawBufferPointer) {
        if let c = capture, c.isActive { c.packet(packet, netif: netif, .outbound) }
        if txCount == Self.batch { send() }
        let dst = tx.baseAddress! + txCount * slot
        dst.copyMemory(from: packet.baseAddress!, byteCount: packet.count)
        txLens[txCount] = Int32(packet.count)
        txCount += 1
    }

    /// The end of a batch: the held ACKs join the queued replies, all sent.
    func flush() {
        acks.flush()
        send()
    }

    /// Sends the queued replies in one sendmmsg.
    private func send() {
        guard txCount > 0, fd >= 0 else { return }
        var sent = 0
        while sent < txCount {
            let result = txLens.withUnsafeBufferPointer { lens in
                Syscall.sendBatch(fd, tx.baseAddress!.assumingMemoryBound(to: UInt8.self) + sent * slot, slot: slot,
                                  lens: lens.baseAddress! + sent, count: Int32(txCount - sent))
            }
            var n = 0
            if case .success(let count) = result { n = count }
            if n <= 0 {
                if case .failure(let e) = result, e.code == ECONNREFUSED { tally.peerMissing &+= 1 }
                // The peer is gone or its buffer is full: these replies are lost (TCP retransmits).
                tally.sendDrops &+= UInt64(txCount - sent)
                break
            }
            tally.datagramsOut &+= UInt64(n)
            sent += Int(n)
        }
        txCount = 0
    }
}
