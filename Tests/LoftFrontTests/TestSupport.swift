import Foundation
import Glibc
import LoftCarriers
import LoftConfig
import LoftCore
import LoftIO
import LoftProtocol
import LoftTestSupport
import XCTest
@testable import LoftFront

/// A front on 127.0.0.1 (any port) and clients that speak raw loft frames to it, all on one loop.
final class FrontHarness {
    let loop: EventLoop
    let clientRuntime: CarrierRuntime
    let server: FrontServer
    private(set) var failedStep: Int?

    static func settings(maxSessions: Int = 16, pool: String = "198.18.64.0/24", expiry: Duration = .seconds(600),
                         keepalive: Duration = .seconds(10), stateFile: String? = nil,
                         udpIdleTimeout: Duration = .seconds(60)) -> FrontSettings {
        FrontSettings(log: .warn, listen: Endpoint(.v4(0x7F00_0001), 0), certificateFile: TestPKI.shared.dir + "/server.pem",
                      keyFile: TestPKI.shared.dir + "/server.key", tokens: ["secret-1", "secret-2"],
                      pool: FrontPoolSettings(ipv4: IPPrefix(pool)!, ipv6: IPPrefix("fd00:64::/64")!),
                      mtu: 1400, dns: [IPAddress("198.18.1.2")!], keepalive: keepalive, instanceExpiry: expiry,
                      maxSessions: maxSessions, maxStreams: 8, connectTimeout: .seconds(3), stateFile: stateFile,
                      udpIdleTimeout: udpIdleTimeout)
    }

    /// `clock`: a virtual clock, for scenarios whose waits are the front's timers (keepalive,
    /// expiry, UDP idle): the loop jumps to its next timer whenever it has nothing else to do.
    init(_ settings: FrontSettings = FrontHarness.settings(), clock: VirtualClock? = nil) throws {
        Log.threshold = .warn
        loop = try EventLoop(clock: clock)
        clientRuntime = try CarrierRuntime(loop: loop)
        server = try FrontServer(settings: settings, loop: loop)
        try server.start()
    }

    var port: UInt16 { server.localEndpoint!.port }

    /// Runs the loop once through `steps`: each is called every 10 ms until it returns true,
    /// then the next. False (and `failedStep` set) when `seconds` pass first. The loop cannot
    /// run twice, so one scenario per harness.
    @discardableResult
    func run(seconds: Double = 20, _ steps: [() -> Bool]) -> Bool {
        failedStep = loop.run(steps: steps, seconds: seconds)
        return failedStep == nil
    }

    /// A carrier to the front (connected once `connected` is true).
    func dial(_ kind: CarrierKind = .ws) -> RawClient {
        let client = try! CarrierClient(
            CarrierClientOptions(kind: kind, host: "127.0.0.1", port: port, path: "/loft",
                                 tls: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.dir + "/ca.pem"),
                                 connectTimeoutMs: 5000),
            runtime: clientRuntime)
        let raw = RawClient()
        raw.carrier = client.dial(delegate: raw)
        raw.dialer = client
        return raw
    }
}

/// A loft client made by hand: frames in, frames out, no session logic.
final class RawClient: CarrierDelegate {
    var carrier: Carrier?
    var dialer: CarrierClient?
    var connected = false
    var closed: CarrierCloseReason?
    var decoder = FrameDecoder()
    var frames: [Frame] = []
    var decodeError: ProtocolError?
    /// DATA per stream, in order.
    var data: [UInt32: [UInt8]] = [:]
    var answersPings = true

    var status: Status? {
        for f in frames { if case .status(let s) = f { return s } }
        return nil
    }

    var goAway: (GoAwayReason, String)? {
        for f in frames { if case .goaway(let r, let t) = f { return (r, t) } }
        return nil
    }

    func has(_ match: (Frame) -> Bool) -> Bool { frames.contains(where: match) }

    func send(_ frame: Frame) {
        var q = ByteQueue()
        // Frames the encoder refuses (the fuzz test makes some) are simply not sent.
        guard (try? FrameEncoder.encode(frame, into: &q)) != nil else { return }
        sendRaw(q.takeAll())
    }

    func sendRaw(_ bytes: [UInt8]) {
        guard let c = carrier, c.isOpen else { return }
        _ = bytes.withUnsafeBytes { c.write($0) }
    }

    func carrierConnected(_ carrier: Carrier) { connected = true }

    func carrier(_ carrier: Carrier, received bytes: UnsafeRawBufferPointer) {
        decoder.append(bytes)
        do throws(ProtocolError) {
            while let f = try decoder.next() {
                if case .data(let s, let p) = f { data[s, default: []] += p }
                if case .ping(let v) = f, answersPings { send(.pong(v)) }
                frames.append(f)
            }
        } catch {
            decodeError = error
        }
    }

    func carrierWritable(_ carrier: Carrier) {}

    func carrier(_ carrier: Carrier, closed reason: CarrierCloseReason) { closed = reason }
}

/// A TCP server on 127.0.0.1 that echoes every byte and answers EOF with its own FIN.
final class EchoServer: IOHandler {
    let loop: EventLoop
    let fd: Int32
    let port: UInt16
    private var clients: [Int32: EchoClient] = [:]
    private(set) var accepted = 0

    init(loop: EventLoop) {
        self.loop = loop
        let s = Sockets.make(family: AF_INET, type: Int32(SOCK_STREAM.rawValue))
        let addr = SocketAddress(Endpoint(.v4(0x7F00_0001), 0))
        _ = addr.withSockaddr { bind(s, $0, $1) }
        listen(s, 64)
        fd = s
        port = Sockets.localEndpoint(s)!.port
        loop.register(fd, IOEvents.readable, self)
    }

    func handleIO(_ events: UInt32) {
        let c = accept(fd, nil, nil)
        guard c >= 0 else { return }
        _ = fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK)
        accepted += 1
        let client = EchoClient(fd: c, loop: loop)
        clients[c] = client
        client.onClose = { [weak self] in self?.clients[c] = nil }
        loop.register(c, IOEvents.readable, client)
    }

    deinit {
        loop.unregister(fd)
        Glibc.close(fd)
    }
}

final class EchoClient: IOHandler {
    let fd: Int32
    let loop: EventLoop
    var onClose: (() -> Void)?

    init(fd: Int32, loop: EventLoop) { self.fd = fd; self.loop = loop }

    func handleIO(_ events: UInt32) {
        var buf = [UInt8](repeating: 0, count: 65536)
        let n = read(fd, &buf, buf.count)
        if n > 0 {
            // Tests send little; a blocking-enough write is fine here.
            var off = 0
            while off < n {
                let w = buf.withUnsafeBytes { write(fd, $0.baseAddress! + off, n - off) }
                if w > 0 { off += w } else { usleep(1000) }
            }
        } else if n == 0 {
            shutdown(fd, Int32(SHUT_WR))
            loop.unregister(fd)
            Glibc.close(fd)
            onClose?()
        } else if errno != EAGAIN {
            loop.unregister(fd)
            Glibc.close(fd)
            onClose?()
        }
    }
}

/// A UDP socket on 127.0.0.1 that sends every datagram back to its sender.
final class UDPEcho: IOHandler {
    let fd: Int32
    let port: UInt16
    let loop: EventLoop

    init(loop: EventLoop) {
        self.loop = loop
        let s = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        let addr = SocketAddress(Endpoint(.v4(0x7F00_0001), 0))
        _ = addr.withSockaddr { bind(s, $0, $1) }
        fd = s
        port = Sockets.localEndpoint(s)!.port
        loop.register(fd, IOEvents.readable, self)
    }

    func handleIO(_ events: UInt32) {
        var buf = [UInt8](repeating: 0, count: 65536)
        var from = SocketAddress()
        let n = from.withMutableSockaddr { recvfrom(fd, &buf, buf.count, Int32(MSG_DONTWAIT), $0, $1) }
        guard n >= 0 else { return }
        _ = from.withSockaddr { sendto(fd, buf, n, 0, $0, $1) }
    }

    deinit {
        loop.unregister(fd)
        Glibc.close(fd)
    }
}
