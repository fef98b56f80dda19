// c-ares shim for loft's resolver: see include/cares_shim.h. The only file that includes <ares.h>.
#include "cares_shim.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <ares.h>

struct cares_channel {
    ares_channel ares;
    uint32_t mark;
};

// What a lookup's c-ares callback needs to reach the embedder's.
struct lookup {
    cares_result_cb callback;
    void *context;
};

// Runs for every socket c-ares opens, before it connects: applies the channel's mark.
static int configure_socket(ares_socket_t fd, int type, void *data) {
    (void)type;
    const cares_channel *channel = data;
    if (channel->mark != 0) {
        uint32_t mark = channel->mark;
        if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) != 0) return -1;
    }
    return 0;
}

int cares_library_init(void) {
    return ares_library_init(ARES_LIB_INIT_ALL);
}

cares_channel *cares_channel_new(cares_socket_cb socket_cb, void *socket_context,
                                 const char *resolv_conf, const char *servers, uint16_t port,
                                 int timeout_ms, int tries, int *error) {
    cares_channel *channel = calloc(1, sizeof(*channel));
    if (!channel) {
        *error = ARES_ENOMEM;
        return NULL;
    }
    struct ares_options options;
    memset(&options, 0, sizeof(options));
    int mask = ARES_OPT_SOCK_STATE_CB;
    // c-ares passes the socket callback's data pointer through unchanged.
    options.sock_state_cb = (ares_sock_state_cb)socket_cb;
    options.sock_state_cb_data = socket_context;
    if (timeout_ms > 0) {
        options.timeout = timeout_ms;
        mask |= ARES_OPT_TIMEOUTMS;
    }
    if (tries > 0) {
        options.tries = tries;
        mask |= ARES_OPT_TRIES;
    }
    if (port != 0) {
        options.udp_port = port;
        options.tcp_port = port;
        mask |= ARES_OPT_UDP_PORT | ARES_OPT_TCP_PORT;
    }
    if (resolv_conf) {
        // c-ares copies the path.
        options.resolvconf_path = (char *)resolv_conf;
        mask |= ARES_OPT_RESOLVCONF;
    }
    int status = ares_init_options(&channel->ares, &options, mask);
    if (status != ARES_SUCCESS) {
        free(channel);
        *error = status;
        return NULL;
    }
    if (servers) {
        status = ares_set_servers_ports_csv(channel->ares, servers);
        if (status != ARES_SUCCESS) {
            ares_destroy(channel->ares);
            free(channel);
            *error = status;
            return NULL;
        }
    }
    ares_set_socket_configure_callback(channel->ares, configure_socket, channel);
    *error = ARES_SUCCESS;
    return channel;
}

void cares_channel_free(cares_channel *channel) {
    if (!channel) return;
    ares_destroy(channel->ares);
    free(channel);
}

// Maps c-ares's status to the shim's few outcomes.
static int result_of(int status) {
    switch (status) {
    case ARES_SUCCESS: return CARES_RESULT_OK;
    case ARES_ENOTFOUND:
    case ARES_ENODATA:
    case ARES_ENONAME: return CARES_RESULT_NOT_FOUND;
    case ARES_ETIMEOUT: return CARES_RESULT_TIMEOUT;
    case ARES_EDESTRUCTION:
    case ARES_ECANCELLED: return CARES_RESULT_DESTROYED;
    default: return CARES_RESULT_FAILED;
    }
}

// Copies the IPv4 and IPv6 addresses of `result` (each node's length checked against its
// family's sockaddr) into a flat array, and hands them on with the smallest TTL.
static void lookup_done(void *arg, int status, int timeouts, struct ares_addrinfo *result) {
    (void)timeouts;
    struct lookup *lookup = arg;
    cares_address *addresses = NULL;
    int count = 0;
    int ttl = -1;
    if (status == ARES_SUCCESS && result) {
        int nodes = 0;
        for (struct ares_addrinfo_node *n = result->nodes; n; n = n->ai_next) nodes++;
        if (nodes > 0) addresses = calloc((size_t)nodes, sizeof(*addresses));
        for (struct ares_addrinfo_node *n = result->nodes; n && addresses; n = n->ai_next) {
            if (!n->ai_addr) continue;
            cares_address *a = &addresses[count];
            if (n->ai_family == AF_INET && n->ai_addr->sa_family == AF_INET
                && n->ai_addrlen >= (ares_socklen_t)sizeof(struct sockaddr_in)) {
                const struct sockaddr_in *sin = (const struct sockaddr_in *)n->ai_addr;
                a->family = 4;
                memcpy(a->bytes, &sin->sin_addr, 4);
            } else if (n->ai_family == AF_INET6 && n->ai_addr->sa_family == AF_INET6
                       && n->ai_addrlen >= (ares_socklen_t)sizeof(struct sockaddr_in6)) {
                const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)n->ai_addr;
                a->family = 6;
                memcpy(a->bytes, &sin6->sin6_addr, 16);
            } else {
                continue;
            }
            int node_ttl = n->ai_ttl < 0 ? 0 : n->ai_ttl;
            if (ttl < 0 || node_ttl < ttl) ttl = node_ttl;
            count++;
        }
    }
    int outcome = result_of(status);
    if (outcome == CARES_RESULT_OK && count == 0) {
        // Success without a usable address (or no memory to copy them).
        outcome = addresses || !result || !result->nodes ? CARES_RESULT_NOT_FOUND : CARES_RESULT_FAILED;
        ttl = -1;
    }
    if (result) ares_freeaddrinfo(result);
    lookup->callback(lookup->context, outcome, status, addresses, count, ttl);
    free(addresses);
    free(lookup);
}

void cares_set_mark(cares_channel *channel, uint32_t mark) {
    channel->mark = mark;
}

void cares_lookup(cares_channel *channel, const char *name, cares_result_cb callback, void *context) {
    struct lookup *lookup = malloc(sizeof(*lookup));
    if (!lookup) {
        callback(context, CARES_RESULT_FAILED, ARES_ENOMEM, NULL, 0, -1);
        return;
    }
    lookup->callback = callback;
    lookup->context = context;
    struct ares_addrinfo_hints hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    // The embedder orders the addresses itself (IPv4 first); RFC 6724 sorting would also
    // connect a UDP socket to each address.
    hints.ai_flags = ARES_AI_NOSORT;
    ares_getaddrinfo(channel->ares, name, NULL, &hints, lookup_done, lookup);
}

void cares_process(cares_channel *channel, int read_fd, int write_fd) {
    ares_process_fd(channel->ares, read_fd < 0 ? ARES_SOCKET_BAD : read_fd,
                    write_fd < 0 ? ARES_SOCKET_BAD : write_fd);
}

int64_t cares_timeout_ms(cares_channel *channel) {
    struct timeval storage;
    struct timeval *tv = ares_timeout(channel->ares, NULL, &storage);
    if (!tv) return -1;
    if (tv->tv_sec < 0) return 0;
    return (int64_t)tv->tv_sec * 1000 + ((int64_t)tv->tv_usec + 999) / 1000;
}

const char *cares_error_text(int status) {
    return ares_strerror(status);
}

int cares_make_query(const char *name, int type, uint16_t id, uint8_t *out, int cap) {
    unsigned char *buf = NULL;
    int len = 0;
    if (type != 1 && type != 28) return -1;
    if (ares_create_query(name, 1 /* C_IN */, type, id, 1, &buf, &len, 0) != ARES_SUCCESS || !buf) return -1;
    int n = len <= cap ? len : -1;
    if (n > 0) memcpy(out, buf, (size_t)len);
    ares_free_string(buf);
    return n;
}

int cares_parse_answer(const uint8_t *buf, int len, int type, cares_address *out, int cap, int *ttl) {
    int n = cap > 32 ? 32 : cap;
    int status;
    *ttl = -1;
    if (len < 12 || n <= 0) return -CARES_RESULT_FAILED;
    if (type == 1) {
        struct ares_addrttl a[32];
        status = ares_parse_a_reply(buf, len, NULL, a, &n);
        if (status == ARES_SUCCESS) {
            for (int i = 0; i < n; i++) {
                out[i].family = 4;
                memcpy(out[i].bytes, &a[i].ipaddr, 4);
                if (*ttl < 0 || a[i].ttl < *ttl) *ttl = a[i].ttl;
            }
        }
    } else if (type == 28) {
        struct ares_addr6ttl a[32];
        status = ares_parse_aaaa_reply(buf, len, NULL, a, &n);
        if (status == ARES_SUCCESS) {
            for (int i = 0; i < n; i++) {
                out[i].family = 6;
                memcpy(out[i].bytes, &a[i].ip6addr, 16);
                if (*ttl < 0 || a[i].ttl < *ttl) *ttl = a[i].ttl;
            }
        }
    } else {
        return -CARES_RESULT_FAILED;
    }
    if (status != ARES_SUCCESS) return -result_of(status);
    return n > 0 ? n : -CARES_RESULT_NOT_FOUND;
}
