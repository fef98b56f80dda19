// Fuzz target: the PPP codec (LoftSSTP/PPPCodec.swift) on one frame, as an SSTP data packet
// delivers it: the protocol field (with or without FF 03, compressed or not), the packet
// (code · id · length), its options, IPV6CP's evaluation, and the PAP and CHAP readers. Whatever parses encodes back
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
    case PPP.ipv6cp:
        // IPV6CP's answer to a Configure-Request (SSTPClient.evaluateIPV6CP): a Reject or Nak
        // names only options of the request or the suggestion; an Ack is the request itself.
        if let options = PPP.parseOptions(packet.data) {
            let ours: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 9], suggestion: [UInt8] = [2, 0, 0, 0, 0, 0, 0, 7]
            let r = SSTPClient.evaluateIPV6CP(options, ours: ours, suggestion: suggestion)
            switch r.code {
            case .configureAck: precondition(r.reply == options && (r.peer == nil || r.peer!.count == 8))
            case .configureNak: precondition(r.reply == [PPP.Option(type: 1, data: suggestion)])
            default: precondition(!r.reply.isEmpty && r.reply.allSatisfy { o in options.contains(o) })
            }
            precondition(PPP.encodeOptions(r.reply) != nil)
        }
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
