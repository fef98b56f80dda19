import CLwIP
import LoftCore

/// The checks a synchronized connection's segment passes before lwIP sees it. lwIP 2.1 takes a
/// segment's window before it checks the segment's acknowledgement and sequence number, and
/// keeps out-of-order segments without a limit in this build (TCP_OOSEQ_MAX_BYTES/PBUFS are 0).
/// So each segment is checked here first, the way a kernel checks it (RFC 793 acceptability,
/// RFC 5961's ACK range), and dropped unseen when it fails. Pure policy on the connection's
/// sequence state (`clwip_tcp_window`, read by clwip): tested with crafted values.
enum TCPSegmentCheck {
    enum Verdict: Equatable {
        case accept
        /// Acknowledges what was never sent, or is older than the largest window the app ever
        /// offered (RFC 5961 5.2).
        case badAck
        /// Starts beyond the receive window (RFC 793 acceptability).
        case outOfWindow
        /// Passes, if the out-of-order data held leaves room for it (`reorderFull(...)`).
        case checkReorder
    }

    /// Out-of-order data held per connection: segments, and bytes (one receive window).
    static let maxReorderSegments: UInt32 = 128
    static let maxReorderBytes: UInt32 = 0x20000

    /// Whether a segment with these flags is checked: SYN and RST are lwIP's to judge (it
    /// checks an RST's sequence number exactly); a segment without ACK is dropped by lwIP in
    /// every synchronized state.
    @inline(__always)
    static func applies(flags: UInt8) -> Bool {
        flags & (PacketSummary.tcpSYN | PacketSummary.tcpRST) == 0 && flags & PacketSummary.tcpACK != 0
    }

    @inline(__always) static func seqGT(_ a: UInt32, _ b: UInt32) -> Bool { Int32(bitPattern: a &- b) > 0 }
    @inline(__always) static func seqLT(_ a: UInt32, _ b: UInt32) -> Bool { Int32(bitPattern: a &- b) < 0 }

    /// The verdict on a segment of `payload` bytes at `seq` acknowledging `ack`.
    @inline(__always)
    static func verdict(seq: UInt32, ack: UInt32, payload: Int, window w: clwip_tcp_window) -> Verdict {
        // RFC 5961 5.2: SND.UNA - MAX.SND.WND <= SEG.ACK <= SND.NXT.
        if seqGT(ack, w.snd_nxt) || seqLT(ack, w.lastack &- w.max_snd_wnd) { return .badAck }
        // RFC 793 acceptability, the upper edge: nothing may start beyond the window offered.
        if seqGT(seq, w.rcv_nxt &+ w.rcv_wnd) { return .outOfWindow }
        // Data ahead of what is expected is kept by lwIP until the gap fills: bounded.
        if payload > 0 && w.has_ooseq != 0 && seqGT(seq, w.rcv_nxt) { return .checkReorder }
        return .accept
    }

    /// Whether out-of-order data of `payload` bytes finds no room beside `segments` segments of
    /// `bytes` bytes already held (nothing held: always room).
    static func reorderFull(segments: UInt32, bytes: UInt32, payload: Int) -> Bool {
        segments > 0 && (segments >= maxReorderSegments || UInt64(bytes) + UInt64(payload) > UInt64(maxReorderBytes))
    }
}

extension Netstack {
    /// The checks for a TCP segment (not a SYN) whose header starts at `tcpOffset`: nil to
    /// pass it to lwIP, or why it is dropped unseen.
    @inline(__always)
    func checkSegment(_ packet: UnsafeRawBufferPointer, netif: Int, tcpOffset: Int) -> PacketDropReason? {
        guard packet.count >= tcpOffset + 20 else { return nil }
        let flags = packet[tcpOffset + 13]
        guard TCPSegmentCheck.applies(flags: flags) else { return nil }
        var w = clwip_tcp_window()
        guard let pcb = clwip_tcp_find_synchronized(lwip, Int32(netif), packet.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                                    packet.count, Int32(tcpOffset), &w) else { return nil }
        let seq = UInt32(bigEndian: packet.loadUnaligned(fromByteOffset: tcpOffset + 4, as: UInt32.self))
        let ack = UInt32(bigEndian: packet.loadUnaligned(fromByteOffset: tcpOffset + 8, as: UInt32.self))
        let header = Int(packet[tcpOffset + 12] >> 4) * 4
        let payload = tcpOffset + header <= packet.count ? packet.count - tcpOffset - header : 0
        switch TCPSegmentCheck.verdict(seq: seq, ack: ack, payload: payload, window: w) {
        case .accept: return nil
        case .badAck: return .tcpBadAck
        case .outOfWindow: return .tcpOutOfWindow
        case .checkReorder:
            var segments: UInt32 = 0, bytes: UInt32 = 0
            clwip_tcp_ooseq(pcb, &segments, &bytes)
            return TCPSegmentCheck.reorderFull(segments: segments, bytes: bytes, payload: payload) ? .tcpReorderCap : nil
        }
    }
}
