// The checks a synchronized connection's segment passes before lwIP sees it (docs/netstack.md,
// "TCP: segments checked before lwIP"): pure functions of the segment and its connection's
// sequence state, which clwip_input reads from the pcb. Policy, kept apart from the glue and
// unit-tested on crafted state (Tests/LoftNetstackTests/TCPSegmentCheckTests.swift). In C so
// that a segment costs one call into clwip, as before (docs/architecture.md).
#include "clwip.h"

#define SEQ_LT(a, b) ((int32_t)((uint32_t)(a) - (uint32_t)(b)) < 0)
#define SEQ_GT(a, b) ((int32_t)((uint32_t)(a) - (uint32_t)(b)) > 0)

int clwip_segment_checked(uint8_t flags) {
    // SYN (0x02) and RST (0x04) are lwIP's to judge (it checks an RST's sequence number
    // exactly); a segment without ACK (0x10) is dropped by lwIP in every synchronized state.
    return (flags & (0x02 | 0x04)) == 0 && (flags & 0x10) != 0;
}

int clwip_segment_verdict(const clwip_tcp_window *w, uint32_t seq, uint32_t ack, uint32_t payload) {
    // RFC 5961 5.2: SND.UNA - MAX.SND.WND <= SEG.ACK <= SND.NXT.
    if (SEQ_GT(ack, w->snd_nxt) || SEQ_LT(ack, w->lastack - w->max_snd_wnd)) return CLWIP_SEGMENT_BAD_ACK;
    // RFC 793 acceptability, the upper edge: nothing may start beyond the window offered.
    if (SEQ_GT(seq, w->rcv_nxt + w->rcv_wnd)) return CLWIP_SEGMENT_OUT_OF_WINDOW;
    // Data ahead of what is expected is kept by lwIP until the gap fills: bounded.
    if (payload > 0 && w->has_ooseq && SEQ_GT(seq, w->rcv_nxt)) return CLWIP_SEGMENT_CHECK_REORDER;
    return CLWIP_SEGMENT_OK;
}

int clwip_reorder_full(uint32_t segments, uint32_t bytes, uint32_t payload) {
    return segments > 0 &&
           (segments >= CLWIP_OOSEQ_MAX_SEGMENTS || (uint64_t)bytes + payload > CLWIP_OOSEQ_MAX_BYTES);
}
