// The lwIP glue: the only C that includes lwIP headers. Swift sees this plain-C API.
//
// lwIP runs in own-loop mode (lwip_init, no tcpip thread): every call here must come from the
// one event-loop thread, and no lock is taken. Callbacks into Swift happen synchronously from
// clwip_input, clwip_check_timeouts and the tcp_* calls that can trigger output.
#ifndef CLWIP_H
#define CLWIP_H
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct clwip_tcp clwip_tcp;     // struct tcp_pcb
typedef struct clwip_pbuf clwip_pbuf;   // struct pbuf
typedef struct clwip_udp clwip_udp;     // struct udp_pcb (one opened over a link)
/// One netstack's share of lwIP: its netifs (inputs) and their state. Several may live in one
/// process (lwIP itself is one per process: see docs/architecture.md), all on one thread.
typedef struct clwip_stack clwip_stack;

/// An IP endpoint in network byte order; for IPv4 only ip[0..3] is used.
typedef struct {
    uint8_t ip[16];
    uint16_t port;      // host order
    uint8_t is_v6;
} clwip_endpoint;

typedef struct {
    /// A packet leaves the stack towards the input it belongs to. The bytes are lent. `ctx`:
    /// the stack's, from clwip_stack_new.
    void (*output)(void *ctx, int netif, const uint8_t *data, size_t len);
    /// A TCP handshake completed. Return a nonzero token to keep the connection (it is passed to
    /// every later callback), or 0 to reset it.
    uintptr_t (*accepted)(void *ctx, clwip_tcp *pcb, int netif, const clwip_endpoint *src, const clwip_endpoint *dst);
    /// Data (p != NULL, ownership passes to Swift) or the peer's FIN (p == NULL). Swift only
    /// queues it (no pcb is closed or aborted inside).
    void (*received)(uintptr_t token, clwip_pbuf *p);
    /// `len` bytes were acknowledged by the peer: send-buffer space is back.
    void (*sent)(uintptr_t token, uint16_t len);
    /// The connection is gone (reset by the peer or aborted by lwIP); the pcb is already freed.
    void (*failed)(uintptr_t token, int err);
    /// An active open (clwip_tcp_connect) completed its handshake.
    void (*connected)(uintptr_t token);
    /// A UDP datagram; ownership of p passes to Swift.
    void (*udp)(void *ctx, int netif, const clwip_endpoint *src, const clwip_endpoint *dst, clwip_pbuf *p);
    /// A datagram for a pcb opened with clwip_udp_open; ownership of p passes to Swift.
    void (*link_udp)(uintptr_t token, const clwip_endpoint *src, clwip_pbuf *p);
} clwip_callbacks;

/// A new stack: `ctx` is passed to its output, accepted and udp callbacks. The callbacks are
/// the same functions for every stack (the last given are kept). Initialises lwIP on the
/// first call in the process. NULL when out of memory.
clwip_stack *clwip_stack_new(const clwip_callbacks *callbacks, void *ctx);
/// Sets the `ctx` the stack's callbacks get.
void clwip_stack_set_context(clwip_stack *st, void *ctx);
/// Adds an input (TUN, bridge): a netif that accepts any destination. Returns its index in
/// this stack, or -1 (the stack has MAX_NETIFS).
int clwip_netif_add(clwip_stack *st, uint16_t mtu);
/// A new MTU for input `idx` (a holder's STATUS changed the TUN's).
void clwip_netif_set_mtu(clwip_stack *st, int idx, uint16_t mtu);
/// The receive window of connections accepted on input `idx` from now on (bytes the app may
/// send ahead), when larger than TCP_WND; at most 0x1FFFE (window scale 1).
void clwip_netif_set_recv_window(clwip_stack *st, int idx, uint32_t bytes);
/// The window scale the input's connections use: the smallest that holds its receive window
/// (lwIP's compiled 1 up to 128 KiB). Its SYN-ACKs must announce it (lwIP's announce 1).
uint8_t clwip_netif_window_scale(clwip_stack *st, int idx);

/// What clwip_input says of a packet it did not give lwIP.
enum {
    CLWIP_SEGMENT_OK = 0,
    CLWIP_NO_MEMORY = -1,
    /// A segment of a synchronized connection acknowledging what was never sent, or older
    /// than the largest window the app ever offered (RFC 5961 5.2).
    CLWIP_SEGMENT_BAD_ACK = 1,
    /// A segment starting beyond the receive window (RFC 793 acceptability).
    CLWIP_SEGMENT_OUT_OF_WINDOW = 2,
    /// Out-of-order data while the connection already holds the most it may (below).
    CLWIP_SEGMENT_OOSEQ_FULL = 3,
    /// (clwip_segment_verdict only) passes if the out-of-order data held leaves room for it
    /// (clwip_reorder_full).
    CLWIP_SEGMENT_CHECK_REORDER = 4,
};
/// Out-of-order data held per connection: segments, and bytes (one receive window).
#define CLWIP_OOSEQ_MAX_SEGMENTS 128
#define CLWIP_OOSEQ_MAX_BYTES 0x20000

// ---- the segment checks (segment_check.c): policy on a connection's sequence state ----------

/// A synchronized connection's sequence state, as the checks before lwIP need it.
typedef struct {
    uint32_t snd_nxt, lastack;
    /// The largest window the app ever offered (lwIP's TCP_WND before it offered one).
    uint32_t max_snd_wnd;
    uint32_t rcv_nxt;
    /// The receive window offered: the larger of the current and the last announced.
    uint32_t rcv_wnd;
    /// Out-of-order data is held.
    uint8_t has_ooseq;
} clwip_tcp_window;
/// Whether a segment with these TCP flags is checked: ACK set, SYN and RST clear.
int clwip_segment_checked(uint8_t flags);
/// The verdict on a segment of `payload` bytes at `seq` acknowledging `ack`: CLWIP_SEGMENT_OK,
/// _BAD_ACK, _OUT_OF_WINDOW, or _CHECK_REORDER.
int clwip_segment_verdict(const clwip_tcp_window *w, uint32_t seq, uint32_t ack, uint32_t payload);
/// Whether out-of-order data of `payload` bytes finds no room beside `segments` segments of
/// `bytes` bytes already held (nothing held: always room).
int clwip_reorder_full(uint32_t segments, uint32_t bytes, uint32_t payload);

/// The size of the buffer clwip_rx_buffer returns (the largest IP packet).
#define CLWIP_RX_BUFFER_SIZE 0xFFFF
/// Where an input reads its next packet to give to clwip_input (CLWIP_RX_BUFFER_SIZE bytes;
/// NULL when no memory): a large TCP segment read there is handed to lwIP without a copy, and
/// the next call returns a new buffer; otherwise the same one. Valid until the next
/// clwip_input of a packet in it.
uint8_t *clwip_rx_buffer(clwip_stack *st);

/// Feeds one IP packet (copied, unless it is a large TCP segment in clwip_rx_buffer's buffer).
/// `syn_port` >= 0 makes sure a listener for that TCP port exists first; `udp_port` >= 0 the
/// same for a UDP port. `tcp_offset` > 0 (where the TCP header starts, for a TCP packet other
/// than a SYN) has the segment checked against its connection first (segment_check.c).
/// `checksum_answer` >= 0 (with
/// `tcp_offset` > 0): the TCP checksum field holds only the pseudo-header's sum (a local
/// sender's NEEDS_CSUM segment), and lwIP's verification of the segment is answered with this
/// value (computed by the caller: the sum that makes it verify) without summing the payload;
/// -1 otherwise. Returns CLWIP_SEGMENT_OK, CLWIP_NO_MEMORY when no pbuf could be allocated,
/// or why the segment was dropped unseen.
int clwip_input(clwip_stack *st, int netif, const uint8_t *packet, size_t len, int syn_port, int udp_port, int tcp_offset,
                int checksum_answer);

/// Runs due lwIP timers; returns milliseconds until the next one (capped at 1000).
uint32_t clwip_check_timeouts(void);

// TCP
/// Bytes that fit in the send buffer right now (0 also when the segment queue is full).
uint32_t clwip_tcp_sndbuf(clwip_tcp *pcb);
/// Bytes written and held in the send queue: not sent yet, or sent and not acknowledged.
uint32_t clwip_tcp_queued(clwip_tcp *pcb);
/// Copies data into the send buffer. Returns 0, or a negative lwIP error (ERR_MEM = -1).
/// `summed` 0: the payload is not checksummed as it is copied, for connections whose segments
/// leave with a partial checksum the kernel completes (the TUN's offload); the segments'
/// checksum fields are then wrong until the writer sets them.
int clwip_tcp_write(clwip_tcp *pcb, const void *data, uint32_t len, int summed);
/// Sends what is queued.
void clwip_tcp_output(clwip_tcp *pcb);
/// The largest window scale an input may announce (lwIP's own is 1), and the most bytes a
/// connection can then have in flight either way: 512 KiB (8 segments of 64 KiB).
#define CLWIP_MAX_WINDOW_SCALE 3
#define CLWIP_MAX_WINDOW (0xFFFFu << CLWIP_MAX_WINDOW_SCALE)
/// Raises the connection's MSS above lwIP's compiled 1460 (an input whose MTU allows larger
/// segments; the app announced at least this much), and its send buffer to its input's
/// receive window (at least 128 KiB).
/// Call from the accepted callback: lwIP sets the initial congestion window from the MSS
/// right after it. Never lowers the MSS.
void clwip_tcp_raise_mss(clwip_tcp *pcb, uint16_t mss);
/// Opens the receive window by `len` bytes (data delivered downstream).
void clwip_tcp_recved(clwip_tcp *pcb, uint32_t len);
/// Sends FIN after queued data (half-close towards the app).
int clwip_tcp_shutdown_write(clwip_tcp *pcb);
/// Detaches Swift and closes gracefully (lwIP finishes the FIN exchange on its own); falls back
/// to an abort if lwIP has no memory. Never call from inside this pcb's callbacks.
void clwip_tcp_close(clwip_tcp *pcb);
/// Opens a TCP connection from `from` (an address and port of the link behind netif `idx`)
/// to `to`, bound to that netif: its SYN leaves at once through the netif's output, and
/// `token` gets received/sent/failed like an accepted pcb's, plus `connected` when the
/// handshake completes. Returns NULL with *err set (ERR_USE = -8: the port is taken here;
/// ERR_MEM = -1; ERR_ARG = -16).
clwip_tcp *clwip_tcp_connect(clwip_stack *st, int idx, const clwip_endpoint *from, const clwip_endpoint *to,
                             uintptr_t token, int *err);
/// Detaches Swift and sends RST. Inside tcp_received return 1 afterwards.
void clwip_tcp_abort(clwip_tcp *pcb);

// pbufs handed to Swift
uint16_t clwip_pbuf_total(const clwip_pbuf *p);
/// Copies up to `len` bytes from offset 0 into dst; returns the count.
uint16_t clwip_pbuf_copy(const clwip_pbuf *p, void *dst, uint16_t len);
/// Frees the first `len` bytes of a chain; returns the rest (NULL when all consumed).
clwip_pbuf *clwip_pbuf_consume(clwip_pbuf *p, uint16_t len);
void clwip_pbuf_free(clwip_pbuf *p);
/// Describes `count` chains as iovecs (at most `max`); returns how many were filled.
int clwip_pbuf_iovecs(clwip_pbuf *const *chains, int count, struct iovec *iov, int max);

// UDP
/// Sends a datagram from `from` (a remote endpoint, used as source) to `to` (the app) on netif.
/// Returns 0 or a negative lwIP error.
int clwip_udp_send(clwip_stack *st, int netif, const clwip_endpoint *from, const clwip_endpoint *to, const void *data, uint16_t len);

/// A UDP pcb on netif `idx` bound to `from` (the link's address and a port): datagrams fed
/// to that netif for it reach `link_udp` with `token`. NULL with *err (ERR_USE = -8: the port
/// is taken here). IPv4 only.
clwip_udp *clwip_udp_open(clwip_stack *st, int idx, const clwip_endpoint *from, uintptr_t token, int *err);
/// Sends a datagram from the pcb's address to `to` through its netif. 0 or a negative lwIP error.
int clwip_udp_sendto(clwip_udp *pcb, const clwip_endpoint *to, const void *data, uint16_t len);
void clwip_udp_close(clwip_udp *pcb);

/// Frees every connection of this stack's that lwIP holds in TIME_WAIT. The app side is the local kernel over a
/// lossless TUN, so TIME_WAIT protects nothing here, while it would keep a pcb per closed
/// connection for 2 minutes and answer a reused 4-tuple's SYN with a stale ACK. Returns how
/// many were freed.
uint32_t clwip_reap_timewait(clwip_stack *st);


/// Undoes everything the stack made and frees it: aborts its TCP connections (RST to the app,
/// no callbacks into Swift), frees its TIME_WAIT pcbs and its UDP pcbs opened over links,
/// removes its netifs; the last stack in the process also frees the shared listeners and UDP
/// pcbs. lwIP itself stays initialised. Never call from a callback.
void clwip_stack_free(clwip_stack *st);

/// lwIP's live objects, counted on its own lists (Debian's build has no LWIP_STATS, so pbufs
/// and memp pools cannot be counted).
typedef struct {
    uint32_t tcp_active, tcp_time_wait, tcp_listen, tcp_bound, udp, netifs;
} clwip_resources;
void clwip_get_resources(clwip_resources *out);

/// The checksum lwIP uses for everything (clwip.c replaces liblwip's lwip_standard_chksum with
/// this one): the one's-complement sum of `len` bytes as 16-bit words in memory order, folded,
/// not complemented.
uint16_t clwip_checksum(const void *data, int len);
#endif
