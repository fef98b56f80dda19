import XCTest
import LoftCore
@testable import LoftProtocol

final class ClientRecorder: ClientSessionDelegate {
    var established: [(status: Status, resumed: Bool)] = []
    var statusChanges: [Status] = []
    var goAways: [(reason: GoAwayReason, text: String)] = []
    var opened: [UInt32] = []
    var openFailed: [(stream: UInt32, reason: OpenFailReason)] = []
    var readable: [UInt32: Int] = [:]
    var writable: [UInt32: Int] = [:]
    var resets: [(stream: UInt32, reason: RstReason)] = []
    var datagrams: [(association: UInt32, from: Destination, payload: [UInt8])] = []
    var outputReady = 0
    var onReadable: ((ClientSession, UInt32) -> Void)?

    func sessionEstablished(_ s: ClientSession, status: Status, resumed: Bool) { established.append((status, resumed)) }
    func sessionStatusChanged(_ s: ClientSession, status: Status) { statusChanges.append(status) }
    func sessionGoAway(_ s: ClientSession, reason: GoAwayReason, text: String) { goAways.append((reason, text)) }
    func streamOpened(_ s: ClientSession, stream: UInt32) { opened.append(stream) }
    func streamOpenFailed(_ s: ClientSession, stream: UInt32, reason: OpenFailReason) { openFailed.append((stream, reason)) }
    func streamReadable(_ s: ClientSession, stream: UInt32) {
        readable[stream, default: 0] += 1
        onReadable?(s, stream)
    }
    func streamWritable(_ s: ClientSession, stream: UInt32) { writable[stream, default: 0] += 1 }
    func streamReset(_ s: ClientSession, stream: UInt32, reason: RstReason) { resets.append((stream, reason)) }
    func datagramReceived(_ s: ClientSession, association: UInt32, from: Destination, payload: UnsafeRawBufferPointer) {
        datagrams.append((association, from, Array(payload)))
    }
    func sessionOutputReady(_ s: ClientSession) { outputReady += 1 }
}

final class FrontRecorder: FrontSessionDelegate {
    var token = "tok"
    var status = Sample.status()
    /// Instances this front knows for RESUME.
    var instances: Set<InstanceID> = []
    var autoAccept = true
    var refuseDomains = false
    var hellos: [Hello] = []
    var resumes: [Resume] = []
    var requested: [(stream: UInt32, network: FlowNetwork, destination: Destination)] = []
    var readable: [UInt32: Int] = [:]
    var writable: [UInt32: Int] = [:]
    var resets: [(stream: UInt32, reason: RstReason)] = []
    var datagrams: [(association: UInt32, to: Destination, payload: [UInt8])] = []
    var goAways: [(reason: GoAwayReason, text: String)] = []
    var outputReady = 0
    var onReadable: ((FrontSession, UInt32) -> Void)?

    func frontSession(_ s: FrontSession, hello: Hello) -> Status? {
        hellos.append(hello)
        guard hello.token == token else {
            s.goAway(.badToken, text: "token not accepted")
            return nil
        }
        instances.insert(status.instanceID)
        return status
    }
    func frontSession(_ s: FrontSession, resume: Resume) -> Status? {
        resumes.append(resume)
        guard resume.token == token else { s.goAway(.badToken, text: "token not accepted"); return nil }
        guard instances.contains(resume.instanceID) else { s.goAway(.unknownInstance, text: "no such instance"); return nil }
        var st = status
        st.instanceID = resume.instanceID
        return st
    }
    func streamRequested(_ s: FrontSession, stream: UInt32, network: FlowNetwork, destination: Destination) {
        requested.append((stream, network, destination))
        if refuseDomains, case .domain = destination { s.refuse(stream: stream, reason: .hostUnreachable); return }
        if autoAccept { s.accept(stream: stream) }
    }
    func streamReadable(_ s: FrontSession, stream: UInt32) {
        readable[stream, default: 0] += 1
        onReadable?(s, stream)
    }
    func streamWritable(_ s: FrontSession, stream: UInt32) { writable[stream, default: 0] += 1 }
    func streamReset(_ s: FrontSession, stream: UInt32, reason: RstReason) { resets.append((stream, reason)) }
    func datagramReceived(_ s: FrontSession, association: UInt32, to: Destination, payload: UnsafeRawBufferPointer) {
        datagrams.append((association, to, Array(payload)))
    }
    func sessionOutputReady(_ s: FrontSession) { outputReady += 1 }
    func frontSessionGoAway(_ s: FrontSession, reason: GoAwayReason, text: String) { goAways.append((reason, text)) }
}

/// A ClientSession wired to a FrontSession in memory.
final class Pair {
    let client: ClientSession
    var front: FrontSession
    let cd = ClientRecorder()
    var fd = FrontRecorder()
    var rng = SplitMix64(seed: 7)
    /// Feed the carrier bytes in random pieces up to this size (nil: whole).
    var maxPiece: Int? = 5000
    let frontLimits: SessionLimits
    let keepaliveMs: UInt32

    init(clientLimits: SessionLimits = .init(), frontLimits: SessionLimits = .init(), keepaliveMs: UInt32 = 15_000,
         token: String = "tok") {
        client = ClientSession(token: token, clientName: "laptop", limits: clientLimits)
        self.frontLimits = frontLimits
        self.keepaliveMs = keepaliveMs
        front = FrontSession(limits: frontLimits, keepaliveMs: keepaliveMs)
        client.delegate = cd
        front.delegate = fd
    }

    /// A new carrier: a fresh FrontSession (the front's instance table is kept in `fd`).
    func newCarrier() {
        client.detach()
        front = FrontSession(limits: frontLimits, keepaliveMs: keepaliveMs)
        front.delegate = fd
        client.attach()
    }

    func establish() throws {
        client.attach()
        try pump()
        XCTAssertEqual(client.state, .established)
    }

    static func take(_ withOutput: ((UnsafeRawBufferPointer) -> Int) -> Void) -> [UInt8] {
        var out: [UInt8] = []
        withOutput { p in out = Array(p); return p.count }
        return out
    }

    func feed(_ bytes: [UInt8], _ receive: (UnsafeRawBufferPointer) throws(ProtocolError) -> Void) throws(ProtocolError) {
        var i = 0
        while i < bytes.count {
            let n = maxPiece.map { min(bytes.count - i, Int(rng.next() % UInt64($0)) + 1) } ?? bytes.count
            let r: Result<Void, ProtocolError> = bytes[i..<i + n].withUnsafeBytes { p in
                do throws(ProtocolError) { try receive(p); return .success(()) } catch { return .failure(error) }
            }
            try r.get()
            i += n
        }
    }

    /// Moves output both ways until both are empty.
    func pump(afterRound: (() -> Void)? = nil) throws {
        var rounds = 0
        while true {
            let up = Self.take(client.withOutput)
            if !up.isEmpty { try feed(up) { p throws(ProtocolError) in try front.receive(p) } }
            let down = Self.take(front.withOutput)
            if !down.isEmpty { try feed(down) { p throws(ProtocolError) in try client.receive(p) } }
            afterRound?()
            if up.isEmpty && down.isEmpty { return }
            rounds += 1
            precondition(rounds < 1_000_000)
        }
    }
}

func decodeAll(_ bytes: [UInt8]) throws -> [Frame] {
    var d = FrameDecoder()
    d.append(bytes)
    var out: [Frame] = []
    while let f = try d.next() { out.append(f) }
    XCTAssertEqual(d.bufferedCount, 0)
    return out
}

func encodeAll(_ frames: [Frame]) throws -> [UInt8] {
    var q = ByteQueue()
    for f in frames { try FrameEncoder.encode(f, into: &q) }
    return q.takeAll()
}

extension FrontSession {
    func receive(_ bytes: [UInt8]) throws(ProtocolError) {
        let r: Result<Void, ProtocolError> = bytes.withUnsafeBytes { p in
            do throws(ProtocolError) { try receive(p); return .success(()) } catch { return .failure(error) }
        }
        try r.get()
    }
    func receive(frames: [Frame]) throws { try receive(encodeAll(frames)) }
    func takeFrames() throws -> [Frame] { try decodeAll(Pair.take(withOutput)) }
    var trackedStreams: Int { engineStreamCount }
}

extension ClientSession {
    func receive(_ bytes: [UInt8], now: UInt64? = nil) throws(ProtocolError) {
        let r: Result<Void, ProtocolError> = bytes.withUnsafeBytes { p in
            do throws(ProtocolError) {
                if let now { try receive(p, now: now) } else { try receive(p) }
                return .success(())
            } catch { return .failure(error) }
        }
        try r.get()
    }
    func receive(frames: [Frame]) throws { try receive(encodeAll(frames)) }
    func takeFrames() throws -> [Frame] { try decodeAll(Pair.take(withOutput)) }
    var trackedStreams: Int { engineStreamCount }
}

func XCTAssertThrowsProtocolError(_ expected: ProtocolError, file: StaticString = #filePath, line: UInt = #line,
                                  _ body: () throws -> Void) {
    XCTAssertThrowsError(try body(), file: file, line: line) {
        XCTAssertEqual($0 as? ProtocolError, expected, file: file, line: line)
    }
}

extension Array where Element == UInt8 {
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R { withUnsafeBytes(body) }
}
