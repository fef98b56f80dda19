// c-ares shim: the only C that includes <ares.h>. Plain C types only, so Swift imports it
// cleanly. Every function is called from the event-loop thread; nothing here blocks (c-ares
// reads /etc/resolv.conf once in cares_channel_new and /etc/hosts at each lookup).
#ifndef CARES_SHIM_H
#define CARES_SHIM_H
#include <stdint.h>

/// Outcomes passed to a cares_result_cb.
enum {
    CARES_RESULT_OK = 0,         // at least one address
    CARES_RESULT_NOT_FOUND = 1,  // the name does not exist or has no A/AAAA records
    CARES_RESULT_TIMEOUT = 2,    // no server answered within the tries
    CARES_RESULT_FAILED = 3,     // anything else (refused, bad response, bad name, memory)
    CARES_RESULT_DESTROYED = 4,  // the channel is being destroyed: the lookup never finished
};

/// One address of a result: family 4 or 6, `bytes` in network order (4 or 16 used).
typedef struct cares_address {
    int family;
    uint8_t bytes[16];
} cares_address;

typedef struct cares_channel cares_channel;

/// c-ares opened (readable or writable non-zero) or is about to close (both zero) `fd`:
/// the embedder watches it for what is asked, or stops watching it.
typedef void (*cares_socket_cb)(void *context, int fd, int readable, int writable);

/// A lookup ended. `addresses` (`count` of them) is valid only during the call. `ttl` is the
/// smallest answer TTL in seconds (0 for /etc/hosts entries and literals); -1 without addresses.
/// `detail` is c-ares's own status, for logs (cares_error_text).
typedef void (*cares_result_cb)(void *context, int result, int detail,
                                const cares_address *addresses, int count, int ttl);

/// Initialises the library once per process (start-up; not thread-safe). 0 on success.
int cares_library_init(void);

/// A channel reading resolv.conf (`resolv_conf`, NULL: /etc/resolv.conf) and /etc/hosts as
/// c-ares does by default. `servers` (NULL: the resolv.conf ones) replaces the servers,
/// "host:port,host:port" with IPv6 hosts in brackets. `port` (0: 53) is the port of servers
/// named without one. `timeout_ms` is the first try's timeout (later tries double it), `tries`
/// how many rounds over the servers. Returns NULL on failure with c-ares's status in *error.
cares_channel *cares_channel_new(cares_socket_cb socket_cb, void *socket_context,
                                 const char *resolv_conf, const char *servers, uint16_t port,
                                 int timeout_ms, int tries, int *error);

/// Ends every lookup (their callbacks run with CARES_RESULT_DESTROYED), closes the sockets
/// (socket callbacks with both flags zero first), frees the channel.
void cares_channel_free(cares_channel *channel);

/// Sets the SO_MARK that c-ares's sockets opened from now on carry (0: none), as the rest of
/// loft's own sockets do in host mode.
void cares_set_mark(cares_channel *channel, uint32_t mark);

/// Starts looking up A and AAAA records of `name` (NUL-terminated). The callback runs exactly
/// once: maybe during this call (an /etc/hosts entry, a bad name), else from cares_process.
void cares_lookup(cares_channel *channel, const char *name, cares_result_cb callback, void *context);

/// Reads from `read_fd` / writes to `write_fd` (-1: none) as far as ready, then handles the
/// timeouts that passed. cares_process(channel, -1, -1) handles timeouts only.
void cares_process(cares_channel *channel, int read_fd, int write_fd);

/// Milliseconds until c-ares must handle a timeout (rounded up), or -1 with no lookup pending.
int64_t cares_timeout_ms(cares_channel *channel);

/// c-ares's text for a status (the `detail` of a result, the *error of cares_channel_new).
const char *cares_error_text(int status);

/// A DNS query for `name` (type 1: A, 28: AAAA), recursion desired, id `id`, written to `out`
/// (at most `cap` bytes) by c-ares (ares_create_query). Returns its length, or -1 (a bad name,
/// too long for `cap`). For lookups that loft sends itself over a link (sstp's SOCKS5 names).
int cares_make_query(const char *name, int type, uint16_t id, uint8_t *out, int cap);

/// The addresses of a DNS answer to such a query, parsed by c-ares (ares_parse_a_reply /
/// ares_parse_aaaa_reply): up to `cap` into `out`, the smallest TTL in *ttl. Returns how many,
/// or -CARES_RESULT_NOT_FOUND (no such name, no records of the type) / -CARES_RESULT_FAILED
/// (malformed, truncated, not an answer). The caller checks the id (the first two bytes).
int cares_parse_answer(const uint8_t *buf, int len, int type, cares_address *out, int cap, int *ttl);

#endif
