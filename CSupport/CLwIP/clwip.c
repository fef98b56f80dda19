// lwIP glue. Accepting any destination uses the address swap (see docs/netstack.md): before
// each ip_input the packet's destination is written into the netif's address slot (v4) or
// its second IPv6 slot, then a dummy is put back. Listeners and UDP pcbs are created lazily
// per port and shared by every netif; which input (and which stack) a connection or datagram
// belongs to is the netif it came in on (its `state` is its input_slot).
//
// Each clwip_stack (one per Swift Netstack) owns its netifs and their per-input state. What
// stays process-wide is lwIP's own (one lwIP per process: its pcb lists, netif list, timeouts
// and memory are globals) and what is shared because of it: lwip_init done once, the per-port
// listeners and UDP pcbs, the callback functions, and the checksum hook's state (lwIP calls
// lwip_standard_chksum without any context). All on the one loop thread.
#include "clwip.h"

#include "cchecksum.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "lwip/init.h"
#include "lwip/ip.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/sys.h"
#include "lwip/tcp.h"
#include "lwip/timeouts.h"
#include "lwip/udp.h"
#include "lwip/priv/tcp_priv.h"

#define MAX_NETIFS 8   // the TUN, the bridge and up to six packet links (sstp outbounds)

typedef struct {
    struct netif netif;    // its `state` points back here
    clwip_stack *stack;
    int index;             // the input's index in its stack
    uint32_t recv_window;  // each accepted pcb's receive window (bytes from the app)
    uint8_t rcv_scale;     // and the window scale that holds it
} input_slot;

struct clwip_stack {
    void *ctx;             // passed to the stack-level callbacks (output, accepted, udp)
    input_slot slots[MAX_NETIFS];
    int slot_count;
    struct pbuf *rx_spare; // see clwip_rx_buffer
    unsigned char flatten_buf[65536];  // a chained pbuf, flattened for output
};

// The functions Swift gives lwIP: the same for every stack (a stack's own callbacks get its ctx;
// a connection's get the token of its Swift end).
static clwip_callbacks cb;
// Live stacks: the shared listeners and UDP pcbs go with the last one.
static int stack_count;
// Listeners and UDP pcbs are shared by all inputs of all stacks, one per port (a pcb bound to
// any address takes a segment from any netif); which input a connection belongs to is decided
// per pcb (tcp_bind_netif at SYN time) and per datagram (the netif it came in on).
static struct tcp_pcb **listener_by_port;   // [65536]
static struct udp_pcb **udp_by_port;    // [65536]
// The dummy put back after each input: nonzero so lwIP's routing still sees an up netif.
static const uint32_t DUMMY_V4 = PP_HTONL(0x00000001UL);

static void endpoint_from(clwip_endpoint *e, const ip_addr_t *a, u16_t port) {
    memset(e, 0, sizeof *e);
    e->port = port;
    if (IP_IS_V6(a)) {
        e->is_v6 = 1;
        memcpy(e->ip, ip_2_ip6(a)->addr, 16);
    } else {
        memcpy(e->ip, &ip_2_ip4(a)->addr, 4);
    }
}

static void ip_from_endpoint(ip_addr_t *a, const clwip_endpoint *e) {
    if (e->is_v6) {
        IP_SET_TYPE_VAL(*a, IPADDR_TYPE_V6);
        memcpy(ip_2_ip6(a)->addr, e->ip, 16);
        ip6_addr_clear_zone(ip_2_ip6(a));
    } else {
        IP_SET_TYPE_VAL(*a, IPADDR_TYPE_V4);
        memcpy(&ip_2_ip4(a)->addr, e->ip, 4);
    }
}

static input_slot *slot_of(const struct netif *n) { return n ? (input_slot *)n->state : NULL; }

static int owns_netif(const clwip_stack *st, u8_t netif_idx) {
    for (int i = 0; i < st->slot_count; i++) {
        if (netif_get_index(&st->slots[i].netif) == netif_idx) return 1;
    }
    return 0;
}

// ---- the checksum --------------------------------------------------------------------------

// liblwip's own lwip_standard_chksum reads two bytes per step; it sums every TCP segment lwIP
// verifies and every payload it copies (CHECKSUM_ON_COPY). The library calls it through its
// PLT, so this definition in the executable replaces it (ELF interposition; lwIP itself is not
// changed) with the one Internet checksum (CChecksum's loft_checksum_sum, which Swift's
// InternetChecksum uses too), plus the two answers below. Checked against a byte-pair
// reference in ChecksumTests and by every TCP segment lwIP takes (a wrong sum drops them all).
u16_t lwip_standard_chksum(const void *dataptr, int len);

// lwIP calls the hook with no context, so what it answers besides the sum is process-wide
// state, set and cleared around a single lwIP call on the loop thread:
// Set only inside clwip_tcp_write for a connection whose segments leave with a partial checksum
// (a TUN with offload: the kernel completes it): lwIP's sum of the payload as it copies it
// (CHECKSUM_ON_COPY) would be thrown away, so it is not computed.
static int payload_unsummed;

// Set only inside clwip_input for a TCP segment whose checksum the sending kernel left partial
// (NEEDS_CSUM: a local app's segment, never on a wire): lwIP's verification sums the segment
// (from its TCP header, in one call: the pbuf is contiguous) and the answer for exactly that
// call is the value that makes the segment verify (the caller's `checksum_answer`, computed in
// Swift: Netstack.checksumAnswer), so neither loft nor lwIP sums its payload.
static const void *answered_ptr;
static int answered_len;
static u16_t answered_sum;

u16_t lwip_standard_chksum(const void *dataptr, int len) {
    if (len <= 0 || payload_unsummed) return 0;
    if (dataptr == answered_ptr && len == answered_len) {
        answered_ptr = NULL;
        return answered_sum;
    }
    return loft_checksum_sum(dataptr, (size_t)len);
}

uint16_t clwip_checksum(const void *data, int len) { return lwip_standard_chksum(data, len); }

// ---- lwIP's lightweight protection ----------------------------------------------------------

// The Unix port's sys_arch_protect takes a recursive pthread mutex (pthread_self, a compare,
// pthread_mutex_lock, and the unlock in sys_arch_unprotect) around every pbuf and memp
// allocation and free, several times per packet. loft runs lwIP on its one loop thread only
// (own-loop mode: no tcpip thread, every call from the loop; docs/netstack.md), so there is
// nothing to exclude: liblwip calls these through its PLT, and these definitions in the
// executable replace its own (ELF interposition, as lwip_standard_chksum above).
sys_prot_t sys_arch_protect(void) { return 0; }

void sys_arch_unprotect(sys_prot_t pval) { (void)pval; }

// ---- netif output -------------------------------------------------------------------------

static void emit(struct netif *n, struct pbuf *p) {
    input_slot *s = slot_of(n);
    if (s == NULL) return;
    if (p->next == NULL) {
        cb.output(s->stack->ctx, s->index, (const uint8_t *)p->payload, p->len);
    } else {
        u16_t len = pbuf_copy_partial(p, s->stack->flatten_buf, 0xFFFF, 0);
        cb.output(s->stack->ctx, s->index, s->stack->flatten_buf, len);
    }
}

static err_t output_v4(struct netif *n, struct pbuf *p, const ip4_addr_t *dst) {
    (void)dst;
    emit(n, p);
    return ERR_OK;
}

static err_t output_v6(struct netif *n, struct pbuf *p, const ip6_addr_t *dst) {
    (void)dst;
    emit(n, p);
    return ERR_OK;
}

static err_t netif_setup(struct netif *n) {
    n->name[0] = 'l';
    n->name[1] = 'f';
    n->output = output_v4;
    n->output_ip6 = output_v6;
    n->flags = 0;  // no ARP, broadcast, IGMP or MLD: a point-to-point packet interface
    return ERR_OK;
}

// lwip_init registers lwIP's cyclic timers each time it runs, so it runs once per process.
static int lwip_initialised;

clwip_stack *clwip_stack_new(const clwip_callbacks *callbacks, void *ctx) {
    if (!listener_by_port) listener_by_port = calloc(65536, sizeof(struct tcp_pcb *));
    if (!udp_by_port) udp_by_port = calloc(65536, sizeof(struct udp_pcb *));
    clwip_stack *st = calloc(1, sizeof *st);
    if (!listener_by_port || !udp_by_port || !st) { free(st); return NULL; }
    cb = *callbacks;
    if (!lwip_initialised) {
        lwip_init();
        lwip_initialised = 1;
    }
    st->ctx = ctx;
    stack_count++;
    return st;
}

void clwip_stack_set_context(clwip_stack *st, void *ctx) { st->ctx = ctx; }

void clwip_netif_set_mtu(clwip_stack *st, int idx, uint16_t mtu) {
    if (idx < 0 || idx >= st->slot_count) return;
    st->slots[idx].netif.mtu = mtu;
    st->slots[idx].netif.mtu6 = mtu;
}

int clwip_netif_add(clwip_stack *st, uint16_t mtu) {
    if (st->slot_count == MAX_NETIFS) return -1;
    input_slot *s = &st->slots[st->slot_count];
    s->stack = st;
    s->index = st->slot_count;
    s->recv_window = TCP_WND;
    s->rcv_scale = TCP_RCV_SCALE;
    ip4_addr_t addr, mask, gw;
    addr.addr = DUMMY_V4;
    mask.addr = 0;
    gw.addr = 0;
    if (!netif_add(&s->netif, &addr, &mask, &gw, s, netif_setup, ip_input)) return -1;
    s->netif.mtu = mtu;
    s->netif.mtu6 = mtu;
    // Slot 1 holds each packet's IPv6 destination during input; it stays PREFERRED so that
    // ip6_input accepts it. Slot 0 (link-local) stays invalid: no router solicitation.
    ip_addr_t v6;
    IP_SET_TYPE_VAL(v6, IPADDR_TYPE_V6);
    memset(ip_2_ip6(&v6)->addr, 0, 16);
    ip_2_ip6(&v6)->addr[3] = PP_HTONL(1);
    ip6_addr_clear_zone(ip_2_ip6(&v6));
    ip_addr_copy(s->netif.ip6_addr[1], v6);
    netif_ip6_addr_set_state(&s->netif, 1, IP6_ADDR_PREFERRED);
    netif_set_ip6_autoconfig_enabled(&s->netif, 0);
    if (netif_default == NULL) netif_set_default(&s->netif);
    netif_set_link_up(&s->netif);
    netif_set_up(&s->netif);
    return st->slot_count++;
}

// ---- TCP ----------------------------------------------------------------------------------

static err_t on_recv(void *arg, struct tcp_pcb *pcb, struct pbuf *p, err_t err) {
    (void)err;
    if (arg == NULL) {  // detached: discard (lwIP's own default behaviour)
        if (p) { tcp_recved(pcb, p->tot_len); pbuf_free(p); }
        return ERR_OK;
    }
    cb.received((uintptr_t)arg, (clwip_pbuf *)p);
    return ERR_OK;
}

static err_t on_sent(void *arg, struct tcp_pcb *pcb, u16_t len) {
    (void)pcb;
    if (arg) cb.sent((uintptr_t)arg, len);
    return ERR_OK;
}

static void on_err(void *arg, err_t err) {
    if (arg) cb.failed((uintptr_t)arg, err);
}

static err_t on_connected(void *arg, struct tcp_pcb *pcb, err_t err) {
    (void)pcb;
    (void)err;  // lwIP 2.1 always passes ERR_OK
    if (arg) cb.connected((uintptr_t)arg);
    return ERR_OK;
}

static err_t on_accept(void *arg, struct tcp_pcb *pcb, err_t err) {
    (void)arg;
    if (err != ERR_OK || pcb == NULL) return ERR_VAL;
    // Called from the ACK that completes the handshake, inside clwip_input: the netif it came
    // in on is the connection's input.
    input_slot *s = slot_of(ip_current_input_netif());
    if (s == NULL) { tcp_abort(pcb); return ERR_ABRT; }
    clwip_endpoint src, dst;
    endpoint_from(&src, &pcb->remote_ip, pcb->remote_port);
    endpoint_from(&dst, &pcb->local_ip, pcb->local_port);
    tcp_nagle_disable(pcb);  // the outbound side already coalesces; forward writes at once
    // rcv_wnd is a 32-bit per-pcb counter; the library's TCP_WND is only its starting value
    // and tcp_recved's cap (see clwip_tcp_recved).
    uint32_t recv_window = s->recv_window;
    // The SYN-ACK announced the input's scale (Netstack rewrote lwIP's 1 on its way out); from
    // here on every window lwIP sends is shifted by it. Nothing but SYN-ACKs, whose window is
    // never scaled, left before this callback.
    if (pcb->flags & TF_WND_SCALE) pcb->rcv_scale = s->rcv_scale;
    if (recv_window > pcb->rcv_wnd && (pcb->flags & TF_WND_SCALE)) {
        pcb->rcv_wnd = recv_window;
        tcp_update_rcv_ann_wnd(pcb);
        tcp_ack_now(pcb);
    }
    uintptr_t token = cb.accepted(s->stack->ctx, (clwip_tcp *)pcb, s->index, &src, &dst);
    if (token == 0) {
        tcp_abort(pcb);
        return ERR_ABRT;
    }
    tcp_arg(pcb, (void *)token);
    tcp_recv(pcb, on_recv);
    tcp_sent(pcb, on_sent);
    tcp_err(pcb, on_err);
    return ERR_OK;
}

static void ensure_listener(u16_t port) {
    if (listener_by_port[port]) return;
    struct tcp_pcb *pcb = tcp_new_ip_type(IPADDR_TYPE_ANY);
    if (!pcb) return;
    if (tcp_bind(pcb, IP_ANY_TYPE, port) != ERR_OK) { tcp_close(pcb); return; }
    struct tcp_pcb *l = tcp_listen_with_backlog(pcb, TCP_DEFAULT_LISTEN_BACKLOG);
    if (!l) { tcp_close(pcb); return; }
    tcp_accept(l, on_accept);
    listener_by_port[port] = l;
}

uint32_t clwip_tcp_sndbuf(clwip_tcp *c) {
    struct tcp_pcb *pcb = (struct tcp_pcb *)c;
    // Each segment tcp_write makes is one pbuf, and the queue holds TCP_SND_QUEUELEN of them:
    // offer only what fits in both, so a write never fails half-way.
    int slots = (int)TCP_SND_QUEUELEN - 4 - (int)tcp_sndqueuelen(pcb);
    if (slots <= 0) return 0;
    uint32_t by_queue = (uint32_t)slots * pcb->mss;
    return pcb->snd_buf < by_queue ? pcb->snd_buf : by_queue;
}

uint32_t clwip_tcp_queued(clwip_tcp *c) {
    struct tcp_pcb *pcb = (struct tcp_pcb *)c;
    return pcb->snd_lbb - pcb->lastack;
}

int clwip_tcp_write(clwip_tcp *c, const void *data, uint32_t len, int summed) {
    struct tcp_pcb *pcb = (struct tcp_pcb *)c;
    if (len > 0xFFFF) len = 0xFFFF;
    // tcp_write only copies payload (headers are summed by tcp_output): every sum it asks for
    // is the payload's.
    payload_unsummed = !summed;
    // This lwIP is built with LWIP_NETIF_TX_SINGLE_PBUF: every new segment's pbuf is allocated
    // at the full MSS, whatever the write. With an MSS of up to 64 KiB, a flow's 12-byte answer
    // would hold 64 KiB until acknowledged (10k flows answered at once: 640 MiB). A write that
    // starts a new segment smaller than the MSS gets a segment of its own size: the MSS is
    // lowered to the write's length for the call (only with nothing unsent: lwIP fills the last
    // unsent segment's room first and expects it to fit the MSS).
    u16_t mss = pcb->mss;
    if (pcb->unsent == NULL && len > 0 && len < mss) pcb->mss = (u16_t)len;
    err_t e = tcp_write(pcb, data, (u16_t)len, TCP_WRITE_FLAG_COPY);
    pcb->mss = mss;
    payload_unsummed = 0;
    return e;
}

void clwip_tcp_output(clwip_tcp *c) { tcp_output((struct tcp_pcb *)c); }

static uint32_t recv_window_of(const struct tcp_pcb *pcb);

void clwip_tcp_raise_mss(clwip_tcp *c, uint16_t mss) {
    struct tcp_pcb *pcb = (struct tcp_pcb *)c;
    if (mss <= pcb->mss) return;
    pcb->mss = mss;
    // Several such segments in flight: the send buffer grows to the input's receive window,
    // at least what window scale 1 can have outstanding (lwIP starts it at TCP_SND_BUF, a
    // plain counter from then on).
    uint32_t want = recv_window_of(pcb);
    if (want < 0x1FFFE) want = 0x1FFFE;
    if (pcb->snd_buf < want) pcb->snd_buf = want;
}

// tcp_recved caps the window at the library's TCP_WND; a larger one (up to CLWIP_MAX_WINDOW
// with the input's window scale) is kept the same way here, with the input's own cap.
static uint32_t recv_window_of(const struct tcp_pcb *pcb) {
    if (!(pcb->flags & TF_WND_SCALE)) return TCP_WND;
    input_slot *s = slot_of(netif_get_by_index(pcb->netif_idx));
    return s ? s->recv_window : TCP_WND;
}

void clwip_tcp_recved(clwip_tcp *c, uint32_t len) {
    struct tcp_pcb *pcb = (struct tcp_pcb *)c;
    uint32_t max = recv_window_of(pcb);
    if (max <= TCP_WND) {
        while (len > 0) {
            u16_t n = len > 0xFFFF ? 0xFFFF : (u16_t)len;
            tcp_recved(pcb, n);
            len -= n;
        }
        return;
    }
    uint32_t wnd = pcb->rcv_wnd + len;
    pcb->rcv_wnd = wnd > max || wnd < pcb->rcv_wnd ? max : wnd;
    if (tcp_update_rcv_ann_wnd(pcb) >= TCP_WND_UPDATE_THRESHOLD) {
        tcp_ack_now(pcb);
        tcp_output(pcb);
    }
}

void clwip_netif_set_recv_window(clwip_stack *st, int idx, uint32_t bytes) {
    if (idx < 0 || idx >= st->slot_count) return;
    input_slot *s = &st->slots[idx];
    s->recv_window = bytes > CLWIP_MAX_WINDOW ? CLWIP_MAX_WINDOW : bytes;
    uint8_t scale = TCP_RCV_SCALE;
    while (scale < CLWIP_MAX_WINDOW_SCALE && (0xFFFFu << scale) < s->recv_window) scale++;
    s->rcv_scale = scale;
}

uint8_t clwip_netif_window_scale(clwip_stack *st, int idx) {
    return idx >= 0 && idx < st->slot_count ? st->slots[idx].rcv_scale : TCP_RCV_SCALE;
}

int clwip_tcp_shutdown_write(clwip_tcp *c) {
    return tcp_shutdown((struct tcp_pcb *)c, 0, 1);
}

static void detach(struct tcp_pcb *pcb) {
    tcp_arg(pcb, NULL);
    tcp_sent(pcb, NULL);
    tcp_err(pcb, NULL);
    tcp_recv(pcb, on_recv);  // on_recv with a NULL arg discards late data
}

void clwip_tcp_close(clwip_tcp *c) {
    struct tcp_pcb *pcb = (struct tcp_pcb *)c;
    detach(pcb);
    if (tcp_close(pcb) != ERR_OK) tcp_abort(pcb);
}

clwip_tcp *clwip_tcp_connect(clwip_stack *st, int idx, const clwip_endpoint *from, const clwip_endpoint *to,
                             uintptr_t token, int *err) {
    *err = ERR_OK;
    if (idx < 0 || idx >= st->slot_count || from->is_v6 != to->is_v6) { *err = ERR_ARG; return NULL; }
    struct tcp_pcb *pcb = tcp_new_ip_type(from->is_v6 ? IPADDR_TYPE_V6 : IPADDR_TYPE_V4);
    if (!pcb) { *err = ERR_MEM; return NULL; }
    ip_addr_t src, dst;
    ip_from_endpoint(&src, from);
    ip_from_endpoint(&dst, to);
    // Bound to the link's netif: its segments leave by it, and only segments fed to that
    // netif reach it (tcp_input skips pcbs bound to another one).
    tcp_bind_netif(pcb, &st->slots[idx].netif);
    err_t e = tcp_bind(pcb, &src, from->port);   // ERR_USE: another pcb has the port
    if (e != ERR_OK) { tcp_close(pcb); *err = e; return NULL; }
    tcp_nagle_disable(pcb);
    tcp_arg(pcb, (void *)token);
    tcp_recv(pcb, on_recv);
    tcp_sent(pcb, on_sent);
    tcp_err(pcb, on_err);
    e = tcp_connect(pcb, &dst, to->port, on_connected);
    if (e != ERR_OK) {
        detach(pcb);
        tcp_abort(pcb);
        *err = e;
        return NULL;
    }
    return (clwip_tcp *)pcb;
}

void clwip_tcp_abort(clwip_tcp *c) {
    struct tcp_pcb *pcb = (struct tcp_pcb *)c;
    detach(pcb);
    tcp_abort(pcb);
}

// ---- UDP ----------------------------------------------------------------------------------

static void on_udp(void *arg, struct udp_pcb *pcb, struct pbuf *p, const ip_addr_t *addr, u16_t port) {
    (void)arg;
    // Inside clwip_input: the netif the datagram came in on is its input.
    input_slot *s = slot_of(ip_current_input_netif());
    if (s == NULL) { pbuf_free(p); return; }
    clwip_endpoint src, dst;
    endpoint_from(&src, addr, port);
    endpoint_from(&dst, ip_current_dest_addr(), pcb->local_port);
    cb.udp(s->stack->ctx, s->index, &src, &dst, (clwip_pbuf *)p);
}

static struct udp_pcb *ensure_udp(u16_t port) {
    if (udp_by_port[port]) return udp_by_port[port];
    struct udp_pcb *pcb = udp_new_ip_type(IPADDR_TYPE_ANY);
    if (!pcb) return NULL;
    if (udp_bind(pcb, IP_ANY_TYPE, port) != ERR_OK) { udp_remove(pcb); return NULL; }
    udp_recv(pcb, on_udp, NULL);
    udp_by_port[port] = pcb;
    return pcb;
}

int clwip_udp_send(clwip_stack *st, int idx, const clwip_endpoint *from, const clwip_endpoint *to, const void *data,
                   uint16_t len) {
    if (idx < 0 || idx >= st->slot_count) return ERR_ARG;
    struct udp_pcb *pcb = ensure_udp(from->port);
    if (!pcb) return ERR_MEM;
    struct pbuf *p = pbuf_alloc(PBUF_TRANSPORT, len, PBUF_RAM);
    if (!p) return ERR_MEM;
    memcpy(p->payload, data, len);
    ip_addr_t src, dst;
    ip_from_endpoint(&src, from);
    ip_from_endpoint(&dst, to);
    err_t e = udp_sendto_if_src(pcb, p, &dst, to->port, &st->slots[idx].netif, &src);
    pbuf_free(p);
    return e;
}

// ---- UDP over a link (active side) ------------------------------------------------------------

static void on_link_udp(void *arg, struct udp_pcb *pcb, struct pbuf *p, const ip_addr_t *addr, u16_t port) {
    (void)pcb;
    if (!arg) { pbuf_free(p); return; }
    clwip_endpoint src;
    endpoint_from(&src, addr, port);
    cb.link_udp((uintptr_t)arg, &src, (clwip_pbuf *)p);
}

clwip_udp *clwip_udp_open(clwip_stack *st, int idx, const clwip_endpoint *from, uintptr_t token, int *err) {
    *err = ERR_OK;
    if (idx < 0 || idx >= st->slot_count || from->is_v6) { *err = ERR_ARG; return NULL; }
    struct udp_pcb *pcb = udp_new_ip_type(IPADDR_TYPE_V4);
    if (!pcb) { *err = ERR_MEM; return NULL; }
    ip_addr_t src;
    ip_from_endpoint(&src, from);
    udp_bind_netif(pcb, &st->slots[idx].netif);
    err_t e = udp_bind(pcb, &src, from->port);   // ERR_USE: a pcb has the port
    if (e != ERR_OK) { udp_remove(pcb); *err = e; return NULL; }
    udp_recv(pcb, on_link_udp, (void *)token);
    return (clwip_udp *)pcb;
}

int clwip_udp_sendto(clwip_udp *c, const clwip_endpoint *to, const void *data, uint16_t len) {
    struct udp_pcb *pcb = (struct udp_pcb *)c;
    struct pbuf *p = pbuf_alloc(PBUF_TRANSPORT, len, PBUF_RAM);
    if (!p) return ERR_MEM;
    memcpy(p->payload, data, len);
    ip_addr_t dst;
    ip_from_endpoint(&dst, to);
    // udp_sendto would compare the pcb's address with the netif's (a dummy here): the source
    // is given explicitly, the netif is the one the pcb is bound to.
    struct netif *n = netif_get_by_index(pcb->netif_idx);
    err_t e = n ? udp_sendto_if_src(pcb, p, &dst, to->port, n, &pcb->local_ip) : ERR_RTE;
    pbuf_free(p);
    return e;
}

void clwip_udp_close(clwip_udp *c) { udp_remove((struct udp_pcb *)c); }

// ---- input --------------------------------------------------------------------------------

// ---- a segment's connection, for the checks before lwIP ----------------------------------
//
// lwIP 2.1 takes a segment's window before it checks the segment's acknowledgement and
// sequence number, and keeps out-of-order segments without a limit in this build
// (TCP_OOSEQ_MAX_BYTES/PBUFS are 0). So a synchronized connection's segments are checked first
// (the checks themselves: segment_check.c); this finds the connection and reads its state.

static uint32_t be32_at(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int addr_is(const ip_addr_t *a, const uint8_t *bytes, int v6) {
    if (v6) return IP_IS_V6(a) && memcmp(ip_2_ip6(a)->addr, bytes, 16) == 0;
    return !IP_IS_V6(a) && memcmp(&ip_2_ip4(a)->addr, bytes, 4) == 0;
}

// The connection a segment belongs to, moved to the head of the list (where lwIP's own
// lookup, which moves it there too, then finds it first).
static struct tcp_pcb *find_active(const struct netif *netif, const uint8_t *packet, int v6, u16_t sport, u16_t dport) {
    const uint8_t *src = packet + (v6 ? 8 : 12);
    const uint8_t *dst = packet + (v6 ? 24 : 16);
    u8_t nidx = netif_get_index(netif);
    struct tcp_pcb *prev = NULL;
    for (struct tcp_pcb *pcb = tcp_active_pcbs; pcb != NULL; prev = pcb, pcb = pcb->next) {
        if (pcb->remote_port != sport || pcb->local_port != dport) continue;
        if (pcb->netif_idx != NETIF_NO_INDEX && pcb->netif_idx != nidx) continue;
        if (!addr_is(&pcb->remote_ip, src, v6) || !addr_is(&pcb->local_ip, dst, v6)) continue;
        if (prev != NULL) {
            prev->next = pcb->next;
            pcb->next = tcp_active_pcbs;
            tcp_active_pcbs = pcb;
        }
        return pcb;
    }
    return NULL;
}

static int check_segment(const struct netif *netif, const uint8_t *packet, size_t len, int off) {
    if (off <= 0 || (size_t)off + 20 > len) return CLWIP_SEGMENT_OK;
    const uint8_t *t = packet + off;
    if (!clwip_segment_checked(t[13])) return CLWIP_SEGMENT_OK;
    struct tcp_pcb *pcb = find_active(netif, packet, (packet[0] >> 4) == 6,
                                      (u16_t)(t[0] << 8 | t[1]), (u16_t)(t[2] << 8 | t[3]));
    if (pcb == NULL || pcb->state < ESTABLISHED || pcb->state == TIME_WAIT) return CLWIP_SEGMENT_OK;
    clwip_tcp_window w;
    w.snd_nxt = pcb->snd_nxt;
    w.lastack = pcb->lastack;
    w.max_snd_wnd = pcb->snd_wnd_max > 0 ? pcb->snd_wnd_max : TCP_WND;
    w.rcv_nxt = pcb->rcv_nxt;
    w.rcv_wnd = pcb->rcv_wnd > pcb->rcv_ann_wnd ? pcb->rcv_wnd : pcb->rcv_ann_wnd;
    w.has_ooseq = pcb->ooseq != NULL;
    size_t hl = (size_t)(t[12] >> 4) * 4;
    uint32_t payload = (size_t)off + hl <= len ? (uint32_t)(len - (size_t)off - hl) : 0;
    int v = clwip_segment_verdict(&w, be32_at(t + 4), be32_at(t + 8), payload);
    if (v != CLWIP_SEGMENT_CHECK_REORDER) return v;
    uint32_t segments = 0, bytes = 0;
    for (struct tcp_seg *q = pcb->ooseq; q != NULL; q = q->next) {
        segments++;
        bytes += q->len;
    }
    return clwip_reorder_full(segments, bytes, payload) ? CLWIP_SEGMENT_OOSEQ_FULL : CLWIP_SEGMENT_OK;
}

// The buffer an input reads its next packet into (clwip_rx_buffer): a pbuf lwIP can take as it
// is. A large TCP segment read into it goes to lwIP in it (no copy) and a new one is made for
// the next read; anything else is copied into a pbuf of its own size and the buffer is reused.
// (With MEM_LIBC_MALLOC, pbuf_realloc does not shrink the allocation: a segment handed over
// keeps the whole buffer, so only segments of at least half of it are.)
#define RX_TAKEN_MIN 0x8000

uint8_t *clwip_rx_buffer(clwip_stack *st) {
    if (st->rx_spare == NULL) st->rx_spare = pbuf_alloc(PBUF_RAW, CLWIP_RX_BUFFER_SIZE, PBUF_RAM);
    return st->rx_spare ? (uint8_t *)st->rx_spare->payload : NULL;
}

int clwip_input(clwip_stack *st, int idx, const uint8_t *packet, size_t len, int syn_port, int udp_port, int tcp_offset,
                int checksum_answer) {
    if (idx < 0 || idx >= st->slot_count || len < 20 || len > 0xFFFF) return -1;
    input_slot *s = &st->slots[idx];
    if (tcp_offset > 0) {
        int verdict = check_segment(&s->netif, packet, len, tcp_offset);
        if (verdict != CLWIP_SEGMENT_OK) return verdict;
    }
    if (syn_port >= 0) ensure_listener((u16_t)syn_port);
    if (udp_port >= 0) ensure_udp((u16_t)udp_port);
    struct pbuf *p;
    // Taken in place: a TCP segment (not a SYN, not an RST: the caller reads those again after
    // lwIP has them) that fills at least half of the read buffer it is in.
    if (st->rx_spare != NULL && packet == (const uint8_t *)st->rx_spare->payload && len >= RX_TAKEN_MIN &&
        tcp_offset > 0 && (size_t)tcp_offset + 14 <= len && !(packet[tcp_offset + 13] & (TCP_SYN | TCP_RST))) {
        p = st->rx_spare;
        st->rx_spare = NULL;
        pbuf_realloc(p, (u16_t)len);
    } else {
        p = pbuf_alloc(PBUF_RAW, (u16_t)len, PBUF_RAM);
        if (!p) return -1;
        memcpy(p->payload, packet, len);
    }
    // While this packet is processed, only its own input may look like a route for IPv4
    // (lwIP's ip4_route takes the first netif whose address/mask matches; all masks are 0):
    // every other netif in the process, this stack's or another's, has address 0 meanwhile.
    struct netif *n;
    NETIF_FOREACH(n) {
        if (n != &s->netif) ip_2_ip4(&n->ip_addr)->addr = 0;
    }
    struct tcp_pcb *head_before = tcp_active_pcbs;
    if (checksum_answer >= 0 && tcp_offset > 0) {
        answered_sum = (u16_t)checksum_answer;
        answered_len = (int)(len - (size_t)tcp_offset);
        answered_ptr = (const uint8_t *)p->payload + tcp_offset;
    }
    int v6 = (packet[0] >> 4) == 6;
    if (v6) {
        ip6_addr_t *slot = ip_2_ip6(&s->netif.ip6_addr[1]);
        memcpy(slot->addr, packet + 24, 16);
        ip_input(p, &s->netif);   // consumes p
        memset(slot->addr, 0, 16);
        slot->addr[3] = PP_HTONL(1);
    } else {
        memcpy(&ip_2_ip4(&s->netif.ip_addr)->addr, packet + 16, 4);
        ip_input(p, &s->netif);
    }
    NETIF_FOREACH(n) ip_2_ip4(&n->ip_addr)->addr = DUMMY_V4;
    answered_ptr = NULL;
    // A SYN that created a connection: bind it to this input now, so its SYN-ACK
    // retransmissions (sent later from timers) also leave by the input it came from.
    if (syn_port >= 0 && tcp_active_pcbs != head_before && tcp_active_pcbs &&
        tcp_active_pcbs->state == SYN_RCVD && tcp_active_pcbs->netif_idx == NETIF_NO_INDEX) {
        tcp_bind_netif(tcp_active_pcbs, &s->netif);
    }
    return 0;
}

uint32_t clwip_check_timeouts(void) {
    sys_check_timeouts();
    u32_t ms = sys_timeouts_sleeptime();
    return ms > 1000 ? 1000 : ms;
}

// ---- pbufs --------------------------------------------------------------------------------

uint16_t clwip_pbuf_total(const clwip_pbuf *p) { return ((const struct pbuf *)p)->tot_len; }

uint16_t clwip_pbuf_copy(const clwip_pbuf *p, void *dst, uint16_t len) {
    return pbuf_copy_partial((const struct pbuf *)p, dst, len, 0);
}

clwip_pbuf *clwip_pbuf_consume(clwip_pbuf *p, uint16_t len) {
    struct pbuf *q = (struct pbuf *)p;
    if (len >= q->tot_len) { pbuf_free(q); return NULL; }
    return (clwip_pbuf *)pbuf_free_header(q, len);
}

void clwip_pbuf_free(clwip_pbuf *p) { pbuf_free((struct pbuf *)p); }

int clwip_pbuf_iovecs(clwip_pbuf *const *chains, int count, struct iovec *iov, int max) {
    int n = 0;
    for (int c = 0; c < count && n < max; c++) {
        for (struct pbuf *q = (struct pbuf *)chains[c]; q && n < max; q = q->next) {
            if (q->len == 0) continue;
            iov[n].iov_base = q->payload;
            iov[n].iov_len = q->len;
            n++;
        }
    }
    return n;
}

// A pcb of this stack's: bound to one of its netifs (every accepted or opened pcb is, from its
// SYN on), or bound to none.
static int stack_owns(const clwip_stack *st, const struct tcp_pcb *pcb) {
    return pcb->netif_idx == NETIF_NO_INDEX || owns_netif(st, pcb->netif_idx);
}

uint32_t clwip_reap_timewait(clwip_stack *st) {
    uint32_t n = 0;
    struct tcp_pcb *pcb = tcp_tw_pcbs;
    while (pcb != NULL) {
        struct tcp_pcb *next = pcb->next;
        // Only connections Swift has let go of (clwip_tcp_close detached them); a flow still
        // holding its pcb closes it first. tcp_abort on a TIME_WAIT pcb removes it from
        // tcp_tw_pcbs and frees it, sending nothing.
        if (pcb->callback_arg == NULL && stack_owns(st, pcb)) {
            tcp_abort(pcb);
            n++;
        }
        pcb = next;
    }
    return n;
}

// ---- teardown -----------------------------------------------------------------------------

// Aborts the stack's pcbs on `list` (detached first: no callback reaches Swift). tcp_abort
// unlinks the pcb, so the walk restarts from the head after each.
static void abort_owned(clwip_stack *st, struct tcp_pcb **list) {
    for (;;) {
        struct tcp_pcb *pcb = *list;
        while (pcb != NULL && !stack_owns(st, pcb)) pcb = pcb->next;
        if (pcb == NULL) return;
        detach(pcb);
        tcp_abort(pcb);
    }
}

void clwip_stack_free(clwip_stack *st) {
    if (st == NULL) return;
    if (st->rx_spare != NULL) {
        pbuf_free(st->rx_spare);
        st->rx_spare = NULL;
    }
    // Connections first, while their input still exists: each is detached (no callback reaches
    // Swift) and aborted, which sends an RST to the app unless it is in TIME_WAIT.
    abort_owned(st, &tcp_active_pcbs);
    abort_owned(st, &tcp_tw_pcbs);
    // UDP pcbs bound to its netifs (opened over a link).
    for (struct udp_pcb *u = udp_pcbs; u != NULL;) {
        struct udp_pcb *next = u->next;
        if (u->netif_idx != NETIF_NO_INDEX && owns_netif(st, u->netif_idx)) udp_remove(u);
        u = next;
    }
    if (stack_count == 1) {
        // The last stack: the shared listeners and UDP pcbs, and bound-but-unopened pcbs, go
        // too (tcp_close cannot fail for them).
        while (tcp_listen_pcbs.pcbs != NULL) tcp_close(tcp_listen_pcbs.pcbs);
        while (tcp_bound_pcbs != NULL) tcp_close(tcp_bound_pcbs);
        while (udp_pcbs != NULL) udp_remove(udp_pcbs);
        free(listener_by_port);
        listener_by_port = NULL;
        free(udp_by_port);
        udp_by_port = NULL;
    }
    for (int i = st->slot_count - 1; i >= 0; i--) netif_remove(&st->slots[i].netif);
    // netif_remove clears the default netif if it was one of these: another stack's takes over.
    if (netif_default == NULL && netif_list != NULL) netif_set_default(netif_list);
    stack_count--;
    free(st);
}

void clwip_get_resources(clwip_resources *out) {
    memset(out, 0, sizeof *out);
    for (struct tcp_pcb *p = tcp_active_pcbs; p != NULL; p = p->next) out->tcp_active++;
    for (struct tcp_pcb *p = tcp_tw_pcbs; p != NULL; p = p->next) out->tcp_time_wait++;
    for (struct tcp_pcb_listen *p = tcp_listen_pcbs.listen_pcbs; p != NULL; p = p->next) out->tcp_listen++;
    for (struct tcp_pcb *p = tcp_bound_pcbs; p != NULL; p = p->next) out->tcp_bound++;
    for (struct udp_pcb *p = udp_pcbs; p != NULL; p = p->next) out->udp++;
    struct netif *n;
    NETIF_FOREACH(n) out->netifs++;
}
