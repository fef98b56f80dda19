import CLwIP
import LoftCore
import XCTest

/// The checks before lwIP (CSupport/CLwIP/segment_check.c) on crafted sequence state: RFC
/// 5961's ACK range, RFC 793's upper window edge, and the out-of-order cap.
final class TCPSegmentCheckTests: XCTestCase {
    /// A connection that sent up to 10_000 (acknowledged to 8_000), with an app window of at
    /// most 4_000, expecting 50_000 next with a 65_535-byte window.
    func window(ooseq: Bool = false, sndNxt: UInt32 = 10_000, lastAck: UInt32 = 8_000, maxSendWindow: UInt32 = 4_000,
                rcvNxt: UInt32 = 50_000, rcvWindow: UInt32 = 65_535) -> clwip_tcp_window {
        var w = clwip_tcp_window()
        w.snd_nxt = sndNxt
        w.lastack = lastAck
        w.max_snd_wnd = maxSendWindow
        w.rcv_nxt = rcvNxt
        w.rcv_wnd = rcvWindow
        w.has_ooseq = ooseq ? 1 : 0
        return w
    }

    enum Verdict { case accept, badAck, outOfWindow, checkReorder, other }

    func verdict(seq: UInt32 = 50_000, ack: UInt32 = 9_000, payload: UInt32 = 100, _ w: clwip_tcp_window) -> Verdict {
        var w = w
        switch clwip_segment_verdict(&w, seq, ack, payload) {
        case Int32(CLWIP_SEGMENT_OK): return .accept
        case Int32(CLWIP_SEGMENT_BAD_ACK): return .badAck
        case Int32(CLWIP_SEGMENT_OUT_OF_WINDOW): return .outOfWindow
        case Int32(CLWIP_SEGMENT_CHECK_REORDER): return .checkReorder
        default: return .other
        }
    }

    func checked(_ flags: UInt8) -> Bool { clwip_segment_checked(flags) != 0 }

    func reorderFull(segments: UInt32, bytes: UInt32, payload: UInt32) -> Bool {
        clwip_reorder_full(segments, bytes, payload) != 0
    }

    func testOnlyAcknowledgingSegmentsWithoutSYNOrRSTAreChecked() {
        XCTAssertTrue(checked(PacketSummary.tcpACK))
        XCTAssertTrue(checked(PacketSummary.tcpACK | PacketSummary.tcpFIN))
        XCTAssertFalse(checked(PacketSummary.tcpACK | PacketSummary.tcpRST))
        XCTAssertFalse(checked(PacketSummary.tcpACK | PacketSummary.tcpSYN))
        XCTAssertFalse(checked(PacketSummary.tcpFIN))
        XCTAssertFalse(checked(0))
    }

    func testAcknowledgementRangeRFC5961() {
        let w = window()
        XCTAssertEqual(verdict(ack: 10_000, w), .accept, "SND.NXT itself")
        XCTAssertEqual(verdict(ack: 10_001, w), .badAck, "beyond what was sent")
        XCTAssertEqual(verdict(ack: 4_000, w), .accept, "SND.UNA - MAX.SND.WND itself")
        XCTAssertEqual(verdict(ack: 3_999, w), .badAck, "older than the largest window")
        XCTAssertEqual(verdict(ack: 8_000 &+ 0x8000_0000, w), .badAck, "half the sequence space away")
    }

    func testAcknowledgementRangeAcrossTheWrap() {
        let w = window(sndNxt: 100, lastAck: 0xFFFF_FF00, maxSendWindow: 0x200)
        XCTAssertEqual(verdict(ack: 50, w), .accept)
        XCTAssertEqual(verdict(ack: 0xFFFF_FD00, w), .accept)
        XCTAssertEqual(verdict(ack: 0xFFFF_FCFF, w), .badAck)
        XCTAssertEqual(verdict(ack: 101, w), .badAck)
    }

    func testSequenceUpperEdgeRFC793() {
        let w = window()
        XCTAssertEqual(verdict(seq: 50_000 + 65_535, w), .accept, "at the window's edge")
        XCTAssertEqual(verdict(seq: 50_000 + 65_536, w), .outOfWindow, "beyond it")
        XCTAssertEqual(verdict(seq: 49_000, w), .accept, "old data is lwIP's to trim")
        let wrapped = window(rcvNxt: 0xFFFF_0000, rcvWindow: 0x2_0000)
        XCTAssertEqual(verdict(seq: 0xFFFF, ack: 9_000, wrapped), .accept)
        XCTAssertEqual(verdict(seq: 0x1_0001, ack: 9_000, wrapped), .outOfWindow)
    }

    func testBadAckIsJudgedBeforeTheWindow() {
        XCTAssertEqual(verdict(seq: 50_000 + 70_000, ack: 20_000, window()), .badAck)
    }

    func testOutOfOrderDataIsCheckedOnlyWhenSomeIsHeld() {
        XCTAssertEqual(verdict(seq: 51_000, window()), .accept, "nothing held: lwIP keeps it")
        XCTAssertEqual(verdict(seq: 51_000, window(ooseq: true)), .checkReorder)
        XCTAssertEqual(verdict(seq: 50_000, window(ooseq: true)), .accept, "in order")
        XCTAssertEqual(verdict(seq: 51_000, payload: 0, window(ooseq: true)), .accept, "no data")
    }

    func testOutOfOrderCap() {
        let maxSegs = UInt32(CLWIP_OOSEQ_MAX_SEGMENTS), maxBytes = UInt32(CLWIP_OOSEQ_MAX_BYTES)
        XCTAssertFalse(reorderFull(segments: 0, bytes: 0, payload: 1 << 20), "nothing held")
        XCTAssertFalse(reorderFull(segments: maxSegs - 1, bytes: 1000, payload: 1000))
        XCTAssertTrue(reorderFull(segments: maxSegs, bytes: 1000, payload: 1))
        XCTAssertFalse(reorderFull(segments: 2, bytes: maxBytes - 100, payload: 100), "exactly full")
        XCTAssertTrue(reorderFull(segments: 2, bytes: maxBytes - 100, payload: 101))
        XCTAssertEqual(maxSegs, 128)
        XCTAssertEqual(maxBytes, 0x20000)
    }
}
