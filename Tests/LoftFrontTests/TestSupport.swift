import Foundation
import Glibc
import LoftCarriers
import LoftConfig
import LoftCore
import LoftIO
import LoftProtocol
import LoftTLS
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
    func dial(_ kind: CarrierKind = .ws, multipath: Bool = false) -> RawClient {
        var options = CarrierClientOptions(kind: kind, host: "127.0.0.1", port: port, path: "/loft",
                                           tls: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.dir + "/ca.pem"),
                                           connectTimeoutMs: 5000)
        options.multipath = multipath
        let client = try! CarrierClient(options, runtime: clientRuntime)
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
