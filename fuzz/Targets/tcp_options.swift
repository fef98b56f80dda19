// The TCP MSS and window scale options: read from any TCP header, and raised / lowered / set in any packet
// that parses as TCP, after which the packet must still parse, carry the new values and a valid
// checksum if it had one.
import LoftCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let p = UnsafeRawBufferPointer(start: data, count: size)
    _ = TCPOptions.mss(inTCPHeader: p)
    _ = TCPOptions.windowScale(inTCPHeader: p)
    guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535), s.proto == IPProtocol.tcp,
          !s.isLaterFragment, size <= 65535 else { return 0 }
    let validBefore = s.transportChecksumIsValid(p)
    var copy = Array(p)
    let target: UInt16 = 65495
    let changed = copy.withUnsafeMutableBytes { TCPOptions.raiseMSS(in: $0, transportOffset: s.transportOffset, to: target) }
    let scaled = copy.withUnsafeMutableBytes { TCPOptions.setWindowScale(in: $0, transportOffset: s.transportOffset, to: 3) }
    copy.withUnsafeBytes { q in
        guard case .success(let s2) = PacketSummary.parse(q, maxLength: 65535) else { fatalError("no longer parses") }
        let mss = TCPOptions.mss(inTCPHeader: UnsafeRawBufferPointer(rebasing: q[s2.transportOffset...]))
        if changed && mss != target { fatalError("raised, but the MSS reads \(String(describing: mss))") }
        let ws = TCPOptions.windowScale(inTCPHeader: UnsafeRawBufferPointer(rebasing: q[s2.transportOffset...]))
        if scaled && ws != 3 { fatalError("set, but the window scale reads \(String(describing: ws))") }
        if validBefore && !s2.transportChecksumIsValid(q) { fatalError("the checksum broke") }
    }
    // Lowered (a link smaller than the TUN): at most the target afterwards, checksum kept.
    let low: UInt16 = 536
    let lowered = copy.withUnsafeMutableBytes { TCPOptions.lowerMSS(in: $0, transportOffset: s.transportOffset, to: low) }
    copy.withUnsafeBytes { q in
        guard case .success(let s3) = PacketSummary.parse(q, maxLength: 65535) else { fatalError("no longer parses") }
        let mss = TCPOptions.mss(inTCPHeader: UnsafeRawBufferPointer(rebasing: q[s3.transportOffset...]))
        if lowered && mss != low { fatalError("lowered, but the MSS reads \(String(describing: mss))") }
        if let mss, mss > low { fatalError("MSS \(mss) left above \(low)") }
        if validBefore && !s3.transportChecksumIsValid(q) { fatalError("the checksum broke when lowered") }
    }
    return 0
}
