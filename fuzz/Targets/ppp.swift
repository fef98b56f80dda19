// Fuzz target: the PPP codec (LoftSSTP/PPPCodec.swift) on one frame, as an SSTP data packet
// delivers it: the protocol field (with or without FF 03, compressed or not), the packet
// (code · id · length), its options, and the PAP and CHAP readers. Whatever parses encodes back
// to the same value; offsets stay inside the frame.
import LoftSSTP

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let frame = UnsafeRawBufferPointer(start: data, count: size)
    guard let (proto, offset) = PPP.parseFrame(frame) else { return 0 }
    precondition(offset <= size && proto & 1 == 1)
    let info = UnsafeRawBufferPointer(rebasing: frame[offset...])
    guard let packet = PPP.Packet(info) else { return 0 }
    let bytes = packet.bytes!
    precondition(bytes.count <= info.count && bytes.elementsEqual(info[0..<bytes.count]), "packet does not re-encode")
    if let options = PPP.parseOptions(packet.data) {
        precondition(PPP.encodeOptions(options) == packet.data, "options do not re-encode")
    }
    switch proto {
    case PPP.pap:
        if case .ack(let m) = PAP.reply(packet) { precondition(m.utf8.count <= 200) }
        if case .nak(let m) = PAP.reply(packet) { precondition(m.utf8.count <= 200) }
    case PPP.chap:
        if let (value, name) = CHAP.parseChallenge(packet) {
            precondition(1 + value.count + name.count == packet.data.count)
            let again = CHAP.response(id: packet.id, value: value, name: name)!
            precondition(again.data == packet.data)
        }
        _ = MSCHAPv2.failureReason(CHAP.message(packet))
    default:
        break
    }
    return 0
}
