// What the quic carrier reads from the network before (or besides) ngtcp2's own packet
// decoding, fed arbitrary bytes:
// - byte 0 even: the front's packet demultiplexing: the destination connection id of any packet
//   (cngtcp2_packet_dcid, 18-byte short-header ids), whether it is an Initial to accept
//   (cngtcp2_peek_initial), the id as a routing key (QuicCID);
// - byte 0 odd: QUIC DATAGRAM payloads into an established FrontSession with an association
//   (id 1) and a TCP stream (id 3) open: the rest is a sequence of datagrams, each a length
//   byte (1...256) and that many bytes, given to receiveDatagram until one is a protocol error.
//   Checked: the session's output and buffers stay within its limits.
// - byte 0 = 2 or 3 (mod 4): the first bytes of a flow's own QUIC stream (FlowPreamble): the
//   front's OPEN reader (2) or the holder's answer reader (3), fed as the readers feed them:
//   exactly the bytes `needMore` asks for, until a verdict.
import CNgtcp2
@testable import LoftCarriers
import LoftCore
@testable import LoftProtocol
@testable import LoftQUIC

private let overlay = Overlay(ipv4: IPPrefix("198.18.64.2/24")!, gateway4: IPAddress("198.18.64.1")!,
                              ipv6: nil, gateway6: nil, mtu: 1400, dns: [])
private let status = Status(instanceID: InstanceID(high: 1, low: 2), keepaliveMs: 15_000, maxStreams: 16, overlay: overlay)

private final class Delegate: FrontSessionDelegate {
    var datagrams = 0
    func frontSession(_ s: FrontSession, hello: Hello) -> Status? { status }
    func frontSession(_ s: FrontSession, resume: Resume) -> Status? { nil }
    func streamRequested(_ s: FrontSession, stream: UInt32, network: FlowNetwork, destination: Destination) { s.accept(stream: stream) }
    func streamReadable(_ s: FrontSession, stream: UInt32) {}
    func streamWritable(_ s: FrontSession, stream: UInt32) {}
    func streamReset(_ s: FrontSession, stream: UInt32, reason: RstReason) {}
    func datagramReceived(_ s: FrontSession, association: UInt32, to: Destination, payload: UnsafeRawBufferPointer) {
        datagrams += 1
        // Answered as the front does: a DGRAM back on the same association.
        _ = s.send(association: association, from: to, payload)
    }
    func sessionOutputReady(_ s: FrontSession) {}
}

private func frame(_ type: UInt8, _ stream: UInt32, _ body: [UInt8]) -> [UInt8] {
    [type, 0] + withUnsafeBytes(of: stream.bigEndian, Array.init) + withUnsafeBytes(of: UInt16(body.count).bigEndian, Array.init) + body
}

private let opening: [UInt8] =
    frame(0x01, 0, [1, 0, 0, 0, 0, 3] + Array("tok".utf8) + [0])
    + frame(0x10, 1, [17, 1, 198, 18, 1, 2, 0, 53])
    + frame(0x10, 3, [6, 1, 198, 18, 1, 2, 0, 80])

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size >= 1 else { return 0 }
    let rest = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    if data[0] % 4 >= 2 {
        var have = 0
        while true {
            let piece = UnsafeRawBufferPointer(rebasing: rest[0..<have])
            let need: Int
            if data[0] % 4 == 2 {
                switch FlowPreamble.parseOpen(piece) {
                case .needMore(let n): need = n
                case .open, .malformed: return 0
                }
            } else {
                switch FlowPreamble.parseAnswer(piece) {
                case .needMore(let n): need = n
                case .accepted, .refused, .malformed: return 0
                }
            }
            guard need > 0, have + need <= FlowPreamble.maxOpen else { fatalError("asked for \(need) after \(have)") }
            guard have + need <= rest.count else { return 0 }
            have += need
        }
    }
    if data[0] & 1 == 0 {
        var dcid = [UInt8](repeating: 0, count: 20)
        var len = 0
        let base = rest.baseAddress?.assumingMemoryBound(to: UInt8.self)
        if cngtcp2_packet_dcid(base, rest.count, 18, &dcid, &len) == 0 {
            guard len <= 20, QuicCID(dcid.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[0..<len]) }) != nil else {
                fatalError("dcid of \(len) bytes")
            }
        }
        if cngtcp2_peek_initial(base, rest.count, &dcid, &len) == 1 && len > 20 { fatalError("Initial dcid of \(len) bytes") }
        return 0
    }
    let limits = SessionLimits(maxStreams: 16, maxOutputBytes: 256 << 10, maxDatagramQueue: 64 << 10)
    let session = FrontSession(limits: limits, keepaliveMs: 15_000)
    let d = Delegate()
    session.delegate = d
    var sunk = 0
    session.datagramSink = { frame in
        guard frame.count <= 1400 else { return false }
        sunk += 1
        return true
    }
    do { try opening.withUnsafeBytes { try session.receive($0, now: 1000) } } catch { fatalError("opening refused: \(error)") }
    var at = 0
    while at < rest.count {
        let n = Int(rest[at]) + 1
        at += 1
        let piece = UnsafeRawBufferPointer(rebasing: rest[at..<min(rest.count, at + n)])
        at += piece.count
        do { try session.receiveDatagram(piece, now: 1000) } catch { break }
        if session.outputCount > limits.maxOutputBytes + SessionEngine.controlSlack { fatalError("output \(session.outputCount)") }
        if session.bufferedBytes > limits.maxStreams * Int(LoftWire.initialStreamWindow) { fatalError("buffered \(session.bufferedBytes)") }
    }
    if sunk > d.datagrams { fatalError("\(sunk) datagrams sent for \(d.datagrams) received") }
    return 0
}
