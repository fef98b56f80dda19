import Foundation
import LoftCarriers
import LoftCore
import LoftIO
import LoftTLS
import LoftTestSupport
import XCTest

/// One event loop and carrier runtime per test; `run` drives it until `done` or the timeout.
final class Harness {
    let loop: EventLoop
    let runtime: CarrierRuntime
    private(set) var timedOut = false

    /// `clock`: a virtual clock, for waits that are the loop's timers (a handshake deadline).
    init(clock: VirtualClock? = nil) throws {
        loop = try EventLoop(clock: clock)
        runtime = try CarrierRuntime(loop: loop)
    }

    /// Runs the loop until `done()` holds (checked every 10 ms) or `seconds` pass.
    @discardableResult
    func run(seconds: Double, until done: @escaping () -> Bool) -> Bool {
        if !loop.run(seconds: seconds, until: done) { timedOut = true }
        return !timedOut
    }

    /// On a virtual clock (`init(clock:)`): one turn of the loop at the current time, so that
    /// what the test just asked for (a write, a reset) goes out now as on a running loop
    /// (`advance(by:)` alone moves the clock to the next timer first), then the clock advanced
    /// 10 ms at a time until `done()` holds or `seconds` of it have passed, without waiting in
    /// real time. True when done in time.
    @discardableResult
    func advance(seconds: Double, until done: () -> Bool) -> Bool {
        loop.runOnce(timeoutMs: 0)
        loop.advance(limitMs: UInt64(seconds * 1000), until: done)
        return done()
    }

    /// On a virtual clock: that turn at the current time, then `ms` of the clock.
    func advance(ms: UInt64) {
        loop.runOnce(timeoutMs: 0)
        loop.advance(by: ms)
    }

    /// Runs `action` once after `ms`.
    func after(_ ms: UInt64, _ action: @escaping () -> Void) { runtime.after(ms, action) }

    func listener(kinds: Set<CarrierKind> = [.ws, .get, .h2], path: String = "/loft", output: Int = 256 * 1024,
                  delegate: CarrierListenerDelegate) throws -> CarrierListener {
        try CarrierListener(CarrierServerOptions(listen: Endpoint(.v4(0x7F00_0001), 0), path: path, kinds: kinds,
                                                 tls: TestPKI.shared.server, outputBufferBytes: output),
                            runtime: runtime, delegate: delegate)
    }

    func client(_ kind: CarrierKind, port: UInt16, path: String = "/loft", tls: TLSClientOptions? = nil,
                host: String = "127.0.0.1", output: Int = 256 * 1024, quicMaxPacket: Int? = nil) throws -> CarrierClient {
        let t = tls ?? TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.ca)
        var o = CarrierClientOptions(kind: kind, host: host, port: port, path: path, tls: t,
                                     connectTimeoutMs: 5000, outputBufferBytes: output)
        o.quicMaxPacket = quicMaxPacket
        return try CarrierClient(o, runtime: runtime)
    }
}

/// Sends `total` random bytes and hashes what it sends and what it receives.
final class StreamPeer: CarrierDelegate {
    var carrier: Carrier?
    let total: Int
    private(set) var sent = 0
    private(set) var received = 0
    private let sentHasher = SHA256Hasher()
    private let receivedHasher = SHA256Hasher()
    private(set) var sentDigest: [UInt8] = []
    private(set) var receivedDigest: [UInt8] = []
    private var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    private var chunkFill = 0
    private var chunkOffset = 0
    var connected = false
    var closedReason: CarrierCloseReason?
    var writesRefused = 0
    var maxBuffered = 0
    /// Called with each delivery (after it is counted).
    var onReceive: ((StreamPeer) -> Void)?
    let expectReceive: Int

    init(total: Int, expectReceive: Int) {
        self.total = total
        self.expectReceive = expectReceive
    }

    var sendDone: Bool { sent == total }
    var receiveDone: Bool { received >= expectReceive }

    func pump() {
        guard let c = carrier, c.isOpen else { return }
        while sent < total {
            if chunkOffset == chunkFill {
                let n = min(chunk.count, total - sent)
                chunk.withUnsafeMutableBytes { Crypto.fillRandom($0.baseAddress!, n) }
                chunk.withUnsafeBytes { sentHasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                chunkFill = n
                chunkOffset = 0
            }
            let n = chunk.withUnsafeBytes { c.write(UnsafeRawBufferPointer(rebasing: $0[chunkOffset..<chunkFill])) }
            maxBuffered = max(maxBuffered, c.bufferedBytes)
            if n == 0 { writesRefused += 1; return }
            chunkOffset += n
            sent += n
        }
        if sentDigest.isEmpty { sentDigest = sentHasher.finish() }
    }

    func carrierConnected(_ carrier: Carrier) {
        connected = true
        pump()
    }

    func carrier(_ carrier: Carrier, received bytes: UnsafeRawBufferPointer) {
        receivedHasher.update(bytes)
        received += bytes.count
        if received >= expectReceive && receivedDigest.isEmpty { receivedDigest = receivedHasher.finish() }
        onReceive?(self)
    }

    func carrierWritable(_ carrier: Carrier) { pump() }

    func carrier(_ carrier: Carrier, closed reason: CarrierCloseReason) { closedReason = reason }
}

/// A listener delegate that hands each carrier to a peer made by `make`.
final class Acceptor: CarrierListenerDelegate {
    var carriers: [Carrier] = []
    var peers: [CarrierDelegate] = []
    var admitted: [CarrierRequest] = []
    var refuse = false
    let make: (Carrier) -> CarrierDelegate

    init(make: @escaping (Carrier) -> CarrierDelegate) { self.make = make }

    func carrierListener(_ listener: CarrierListener, admit request: CarrierRequest) -> Bool {
        admitted.append(request)
        return !refuse
    }

    func carrierListener(_ listener: CarrierListener, accepted carrier: Carrier) {
        let p = make(carrier)
        carriers.append(carrier)
        peers.append(p)
        carrier.delegate = p
        if let s = p as? StreamPeer {
            s.carrier = carrier
            s.connected = true
            s.pump()
        }
    }
}

/// Echoes what it receives, holding at most one buffer's worth back (reading paused while it
/// waits for the carrier to take it).
final class EchoPeer: CarrierDelegate {
    var carrier: Carrier?
    private var backlog = [UInt8]()
    private(set) var echoed = 0
    var closedReason: CarrierCloseReason?

    init(_ c: Carrier) { carrier = c }

    func carrierConnected(_ carrier: Carrier) {}

    func carrier(_ carrier: Carrier, received bytes: UnsafeRawBufferPointer) {
        if !backlog.isEmpty {
            backlog.append(contentsOf: bytes)
            carrier.setReading(false)
            return
        }
        let n = carrier.write(bytes)
        echoed += n
        if n < bytes.count {
            backlog.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[n...]))
            carrier.setReading(false)
        }
    }

    func carrierWritable(_ carrier: Carrier) {
        let n = backlog.withUnsafeBytes { carrier.write($0) }
        echoed += n
        backlog.removeFirst(n)
        if backlog.isEmpty { carrier.setReading(true) }
    }

    func carrier(_ carrier: Carrier, closed reason: CarrierCloseReason) { closedReason = reason }
}

/// A client delegate that only records what happened.
final class Recorder: CarrierDelegate {
    var connected = false
    var received = 0
    var closedReason: CarrierCloseReason?
    func carrierConnected(_ carrier: Carrier) { connected = true }
    func carrier(_ carrier: Carrier, received bytes: UnsafeRawBufferPointer) { received += bytes.count }
    func carrierWritable(_ carrier: Carrier) {}
    func carrier(_ carrier: Carrier, closed reason: CarrierCloseReason) { closedReason = reason }
}

func withBytes<R>(_ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) -> R) -> R { bytes.withUnsafeBytes(body) }

func withMutableBytes<R>(_ bytes: [UInt8], _ body: (UnsafeMutableRawBufferPointer) -> R) -> R {
    var b = bytes
    return b.withUnsafeMutableBytes(body)
}

/// Runs the loop until both ends have sent and received everything, then closes the client's
/// carrier and waits for the server's end to see it (or for either end to fail, or `seconds`).
/// Returns whether that happened in time, how long the exchange took (ms) and the client's
/// TLS description once open.
func exchangeAndClose(_ h: Harness, _ carrier: Carrier, _ peer: StreamPeer, _ acceptor: Acceptor,
                      seconds: Double) -> (ok: Bool, elapsedMs: UInt64, tls: String) {
    let start = monotonicMilliseconds()
    var elapsed: UInt64 = 0
    var closing = false
    var tls = ""
    let ok = h.run(seconds: seconds) {
        if tls.isEmpty && carrier.isOpen { tls = carrier.tlsDescription }
        guard let server = acceptor.peers.first as? StreamPeer else { return peer.closedReason != nil }
        if !closing && peer.sendDone && peer.receiveDone && server.sendDone && server.receiveDone {
            elapsed = monotonicMilliseconds() - start
            closing = true
            carrier.close()
        }
        return closing && server.closedReason != nil || peer.closedReason != nil
    }
    return (ok, elapsed, tls)
}
