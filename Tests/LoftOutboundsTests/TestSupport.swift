import Foundation
import Glibc
import LoftCarriers
import LoftConfig
import LoftCore
import LoftFront
import LoftIO
import LoftProtocol
import LoftTLS
// The echo servers and the fake outbound, for every file here.
@_exported import LoftTestSupport
import XCTest
@testable import LoftOutbounds

let loopback4 = IPAddress.v4(0x7F00_0001)
let loopback6 = IPAddress("::1")!

/// One loop, fronts and holders on it, driven through a list of steps.
final class Scenario {
    let loop: EventLoop
    let runtime: CarrierRuntime
    private(set) var failedStep: Int?

    /// `clock`: a virtual clock, for scenarios whose waits are the loop's timers (backoff,
    /// redial): the loop jumps to its next timer whenever it has nothing else to do.
    init(clock: VirtualClock? = nil) throws {
        Log.threshold = .warn
        loop = try EventLoop(clock: clock)
        runtime = try CarrierRuntime(loop: loop)
    }

    static func frontSettings(port: UInt16 = 0, stateFile: String? = nil) -> FrontSettings {
        FrontSettings(log: .warn, listen: Endpoint(loopback4, port), certificateFile: TestPKI.shared.dir + "/server.pem",
                      keyFile: TestPKI.shared.dir + "/server.key", tokens: ["secret-1"],
                      pool: FrontPoolSettings(ipv4: IPPrefix("198.18.64.0/24")!, ipv6: IPPrefix("fd00:64::/64")!),
                      mtu: 1400, dns: [IPAddress("198.18.1.2")!], keepalive: .seconds(10), instanceExpiry: .seconds(600),
                      maxSessions: 16, maxStreams: 16, connectTimeout: .seconds(3), stateFile: stateFile)
    }

    /// A front on 127.0.0.1 on this loop (any port unless given).
    func startFront(port: UInt16 = 0, stateFile: String? = nil) throws -> FrontServer {
        let f = try FrontServer(settings: Self.frontSettings(port: port, stateFile: stateFile), loop: loop)
        try f.start()
        return f
    }

    func holder(_ kind: CarrierKind = .ws, port: UInt16, hold: Bool = false, fallback: Outbound? = nil,
                minBackoffMs: UInt64 = 200, maxBackoffMs: UInt64 = 2000, stateFile: String? = nil) throws -> HolderOutbound {
        let carrier = CarrierClientOptions(kind: kind, host: "127.0.0.1", port: port, path: "/loft",
                                           tls: TLSClientOptions(serverName: "front.test",
                                                                 caFile: TestPKI.shared.dir + "/ca.pem"),
                                           connectTimeoutMs: 5000)
        var options = HolderOptions(carrier: carrier, token: "secret-1", clientName: "outbound-tests", hold: hold,
                                    minBackoffMs: minBackoffMs, maxBackoffMs: maxBackoffMs)
        options.stateFile = stateFile
        return try HolderOutbound(name: "home", loop: loop, runtime: runtime, options: options, fallback: fallback)
    }

    /// Runs the loop once through `steps`: each is called every 10 ms until it returns true,
    /// then the next. False (and `failedStep` set) when `seconds` pass first. One run per
    /// scenario: the loop cannot run twice.
    @discardableResult
    func run(seconds: Double = 15, _ steps: [() -> Bool]) -> Bool {
        failedStep = loop.run(steps: steps, seconds: seconds)
        return failedStep == nil
    }

    /// A step that waits `ms` from its first call (on the loop's clock).
    func pause(_ ms: UInt64) -> () -> Bool {
        var until: UInt64?
        return { [loop] in
            let now = loop.currentTime
            if until == nil { until = now + ms }
            return now >= until!
        }
    }
}

/// A port on `address` nobody listens on: bound, noted, closed.
func closedPort(_ address: IPAddress = loopback4) -> UInt16 {
    let fd = Sockets.make(family: address.isIPv4 ? AF_INET : AF_INET6, type: Int32(SOCK_STREAM.rawValue))
    defer { close(fd) }
    let addr = SocketAddress(Endpoint(address, 0))
    _ = addr.withSockaddr { bind(fd, $0, $1) }
    return Sockets.localEndpoint(fd)!.port
}

/// The bytes a probe sends: a pattern that does not repeat every power of two.
func pattern(_ count: Int, seed: Int = 0) -> [UInt8] {
    (0..<count).map { i in UInt8(truncatingIfNeeded: i &* 31 &+ seed &* 7 &+ i >> 9 &+ i >> 17) }
}

/// The app side of one TCP flow, as the netstack drives it: writes `toSend` (honouring 0 =
/// full until streamWritable), reads on streamReadable while reading is on.
final class StreamProbe: ByteStreamEvents {
    var conn: ByteStream?
    var toSend: [UInt8] = []
    private(set) var sent = 0
    /// shutdownWrite once everything is sent.
    var finishAfterSending = false
    private(set) var finSent = false
    var received: [UInt8] = []
    /// Bytes per read() call.
    var readSize = 16 * 1024
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)

    private(set) var connected = false
    private(set) var failure: FlowFailure?
    private(set) var readFailure: FlowFailure?
    private(set) var eof = false
    private(set) var writeBroken = false
    private(set) var writesRefused = 0      // write() returned 0
    private(set) var writableEvents = 0
    private(set) var readableEvents = 0
    /// streamReadable while the probe had read interest off.
    private(set) var readableWhileOff = 0
    /// streamReadable before streamConnected (the netstack ignores those: its app has no
    /// connection yet).
    private(set) var readableBeforeConnected = 0
    /// A read that returned more bytes than the buffer it was given.
    private(set) var overReads = 0
    private(set) var reading = true

    deinit { buffer.deallocate() }

    func setReading(_ on: Bool) {
        reading = on
        conn?.setReadInterest(on)
    }

    func streamConnected(_: ByteStream) {
        connected = true
        pump()
    }

    func streamFailed(_: ByteStream, _ failure: FlowFailure) { self.failure = failure }

    func streamReadable(_: ByteStream) {
        readableEvents += 1
        if !connected { readableBeforeConnected += 1; return }
        if !reading { readableWhileOff += 1; return }
        drain()
    }

    func streamWritable(_: ByteStream) {
        writableEvents += 1
        pump()
    }

    func pump() {
        guard let conn, connected, !writeBroken else { return }
        while sent < toSend.count {
            // Two segments per write, as lwIP hands over a split send buffer.
            let chunk = min(toSend.count - sent, 200 * 1024)
            let first = chunk / 3
            let n = toSend.withUnsafeMutableBytes { p -> Int in
                var iov = [iovec(iov_base: p.baseAddress! + sent, iov_len: first),
                           iovec(iov_base: p.baseAddress! + sent + first, iov_len: chunk - first)]
                return conn.write(&iov, count: 2)
            }
            if n < 0 { writeBroken = true; return }
            if n == 0 { writesRefused += 1; return }
            sent += n
        }
        if finishAfterSending && !finSent {
            finSent = true
            conn.shutdownWrite()
        }
    }

    func drain() {
        guard let conn else { return }
        while reading, !eof, readFailure == nil {
            let size = min(readSize, buffer.count)
            let r = conn.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<size]))
            switch r {
            case .data(let n):
                if n > size { overReads += 1 }
                received.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<min(n, size)]))
            case .wouldBlock: return
            case .eof: eof = true
            case .failed(let f): readFailure = f
            }
        }
    }
}

/// The app side of one UDP association.
final class DatagramProbe: DatagramEvents {
    var received: [(payload: [UInt8], from: Endpoint)] = []
    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {
        received.append((Array(payload), from))
    }
}
