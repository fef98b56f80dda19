// Thin Linux shims: the TUN ioctls, network-namespace switching, epoll and rtnetlink, whose kernel
// structs or macros Swift cannot import cleanly.
#ifndef CLINUX_H
#define CLINUX_H
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>

/// Opens /dev/net/tun as IFF_TUN|IFF_NO_PI, nonblocking, named `name`; with `vnet_hdr` also
/// IFF_VNET_HDR (every packet read or written then starts with a 10-byte virtio_net_hdr). When
/// `netns_path` is non-NULL the device is created inside that namespace (the calling thread
/// enters it and returns to its own before this returns). Returns the fd or -errno.
int clinux_tun_open(const char *name, const char *netns_path, int vnet_hdr);

/// TUNSETOFFLOAD: the TUN_F_* offloads the reader accepts (CLINUX_TUN_F_*). 0 or -errno.
int clinux_tun_set_offload(int fd, unsigned flags);
enum {
    CLINUX_TUN_F_CSUM = 0x01,
    CLINUX_TUN_F_TSO4 = 0x02,
    CLINUX_TUN_F_TSO6 = 0x04,
    CLINUX_TUN_F_TSO_ECN = 0x08,
    CLINUX_TUN_F_USO4 = 0x20,
    CLINUX_TUN_F_USO6 = 0x40,
};

/// epoll: plain-integer wrappers (struct epoll_event is packed, which Swift imports poorly).
int clinux_epoll_create(void);
int clinux_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token);
/// Waits; fills tokens[i], events[i]; returns the count or -errno.
int clinux_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms);

enum {
    CLINUX_EPOLLIN = 0x001, CLINUX_EPOLLOUT = 0x004, CLINUX_EPOLLERR = 0x008,
    CLINUX_EPOLLHUP = 0x010, CLINUX_EPOLLRDHUP = 0x2000, CLINUX_EPOLLONESHOT = 0x40000000,
    CLINUX_EPOLL_CTL_ADD = 1, CLINUX_EPOLL_CTL_DEL = 2, CLINUX_EPOLL_CTL_MOD = 3,
};

/// eventfd / signalfd for a loop-integrated shutdown: blocks SIGINT, SIGTERM, SIGHUP and
/// SIGPIPE (ignored) for the process and returns a signalfd that reports the first three.
int clinux_signalfd_for_shutdown(void);
/// Reads one signal number from the signalfd, or -1.
int clinux_signalfd_read(int fd);

/// Raises RLIMIT_NOFILE's soft limit to its hard limit; returns the new soft limit.
long clinux_raise_nofile(void);

/// Resident set size and its peak (VmRSS, VmHWM) in bytes, from /proc/self/status.
int clinux_memory(uint64_t *rss, uint64_t *peak);
/// Gives malloc's free memory back to the system (malloc_trim(0)); 1 if any was released.
int clinux_malloc_trim(void);
/// malloc keeps up to `keep` bytes of free memory at the top of its heap instead of returning
/// it at every free (M_TRIM_THRESHOLD; M_TOP_PAD grows the heap `keep`/8 at a time), and
/// serves blocks below 1 MiB from the heap, never mmap (a fixed M_MMAP_THRESHOLD).
void clinux_malloc_keep(size_t keep);
/// Bytes of the heap in use (malloc's count of allocated chunks).
size_t clinux_heap_in_use(void);

/// errno of the calling thread (Swift's Glibc exposes it, but this keeps the C boundary in one place).
int clinux_errno(void);

/// Socket option helpers whose constants differ in Swift's Glibc import.
int clinux_set_nodelay(int fd);
int clinux_set_linger_reset(int fd);
int clinux_so_error(int fd);
/// Multipath TCP (a socket made with IPPROTO_MPTCP): 1 when the connection runs MPTCP, 0 when it
/// is plain TCP (never asked, or fell back: the peer or a middlebox did not speak it), or -errno.
int clinux_mptcp_active(int fd);
/// MPTCP_SUBFLOW_ADDRS: the connection's subflows, up to `max` of them, as local and remote
/// sockaddr_storage pairs (out[2i], out[2i+1]); returns how many the kernel has (may exceed
/// `max`), or -errno (-EOPNOTSUPP: not MPTCP, or fell back).
int clinux_mptcp_subflows(int fd, struct sockaddr_storage *out, int max);
/// Asks a UDP socket (AF_INET or AF_INET6) for ICMP errors on its error queue (IP_RECVERR /
/// IPV6_RECVERR), so an unconnected socket learns that a destination refused a datagram.
int clinux_udp_recverr(int fd, int family);
/// Takes one error off a UDP socket's error queue: returns its errno (ECONNREFUSED for a port
/// unreachable, EHOSTUNREACH, ...) and the original datagram's destination in `addr`/`len`;
/// 0 when the queue is empty; -1 when the queue held something that was not an ICMP error.
int clinux_udp_read_error(int fd, void *addr, unsigned *len);

/// recvmmsg into `count` slots of `slot` bytes each at `base`; lens[i] gets each datagram's
/// length, or -1 when it was larger than the slot (MSG_TRUNC). Returns the count or -errno.
int clinux_recv_batch(int fd, uint8_t *base, size_t slot, int count, int *lens);
/// sendmmsg of `count` datagrams (connected socket); returns how many were sent or -errno.
int clinux_send_batch(int fd, const uint8_t *base, size_t slot, const int *lens, int count);

/// UDP generic receive offload on the socket (UDP_GRO): back-to-back datagrams of one size
/// from one sender may arrive as one read (see clinux_udp_recv_segments). 0 or -errno.
int clinux_udp_enable_gro(int fd);
/// Never fragment this UDP socket's datagrams (DF on IPv4, no fragment header on IPv6): one
/// larger than the path's MTU fails with EMSGSIZE. Both options are tried (a dual-stack
/// socket sends IPv4 too); 0 when either took.
int clinux_udp_no_fragment(int fd);
/// The path MTU the kernel knows for a connected socket (IP_MTU / IPV6_MTU), or -errno.
int clinux_path_mtu(int fd, int family);
/// One sendmsg of `len` bytes that the kernel cuts into datagrams of `segment` bytes (the last
/// may be shorter; UDP_SEGMENT, at most 64 of them); `segment` 0 or >= len: one datagram.
/// `addr` NULL on a connected socket. Returns the bytes sent or -errno.
long clinux_udp_send_segments(int fd, const uint8_t *buf, size_t len, int segment, const void *addr, unsigned addrlen);
/// One recvmsg: `*segment` gets the size the datagrams were coalesced at (UDP_GRO), 0 when
/// the read is one datagram; `addr`/`addrlen` (may be NULL) the sender. Bytes or -errno.
long clinux_udp_recv_segments(int fd, uint8_t *buf, size_t cap, int *segment, void *addr, unsigned *addrlen);
/// Up to `n` (at most 64) such reads in one recvmmsg: read i lands at `buf + i * cap`, its size
/// in `lens[i]`, its GRO segment size in `segs[i]` (0: one datagram), its sender in
/// `addrs + i * 128` (a sockaddr_storage) of `addrlens[i]` bytes. Returns how many reads, or -errno.
int clinux_udp_recv_many(int fd, uint8_t *buf, size_t cap, unsigned n, int *lens, int *segs, void *addrs, unsigned *addrlens);

/// A nonblocking listening AF_UNIX stream socket at `path` with mode `mode`. A stale socket
/// file is replaced; a live one (something accepts on it) gives -EADDRINUSE.
int clinux_unix_listen(const char *path, unsigned mode);
/// A blocking AF_UNIX stream connection to `path`, or -errno.
int clinux_unix_connect(const char *path);
/// Columns of the terminal on fd, or 0 when it is not a terminal.
int clinux_terminal_width(int fd);
/// accept4 with SOCK_NONBLOCK|SOCK_CLOEXEC; the fd or -errno.
int clinux_accept(int fd);
/// The same, with the peer's address into `addr` (`*len` bytes; set to the address's length).
int clinux_accept_from(int fd, void *addr, unsigned *len);
/// The peer's uid on an AF_UNIX socket, or -1.
long clinux_peer_uid(int fd);
/// A nonblocking rtnetlink socket subscribed to IPv4 and IPv6 route changes; -errno on failure.
int clinux_route_monitor_open(void);
/// Drains the socket; returns how many default-route changes of the main table it held (not
/// counting routes through `ignore_ifindex`), or -errno. A lost notification (ENOBUFS) counts.
int clinux_route_monitor_read(int fd, int ignore_ifindex);

/// rtnetlink requests. A NETLINK_ROUTE socket opened inside `netns_path` (NULL: the caller's
/// namespace; the thread returns to its own before this returns) stays in that namespace.
/// Blocking with a 2 s receive timeout; the fd or -errno.
int clinux_rtnl_open(const char *netns_path);
/// Each call below sends one request with NLM_F_ACK and reads the kernel's answer: 0 or -errno.
/// The index of the interface `name` in the socket's namespace (RTM_GETLINK), or -errno.
int clinux_rtnl_ifindex(int fd, const char *name);
/// RTM_SETLINK: the MTU when `mtu` > 0; IFF_UP set (`up` 1) or cleared (0), left alone when < 0.
int clinux_rtnl_set_link(int fd, int ifindex, int mtu, int up);
/// RTM_SETLINK, IFLA_AF_SPEC/AF_INET/IFLA_INET_CONF: the device's IPv4 promote_secondaries.
int clinux_rtnl_promote_secondaries(int fd, int ifindex, int on);
/// `replace` 1: RTM_NEWADDR with NLM_F_CREATE|NLM_F_REPLACE (`ip addr replace`; IPv6 with
/// IFA_F_NODAD); 0: RTM_DELADDR. `addr` is 4 (AF_INET) or 16 (AF_INET6) bytes, network order.
int clinux_rtnl_addr(int fd, int replace, int ifindex, int family, const uint8_t *addr, int prefixlen);
/// RTM_NEWROUTE with NLM_F_CREATE|NLM_F_REPLACE in the main table: the default route of
/// `family` via `gateway` (RTNH_F_ONLINK) on the device, or through the device alone when
/// `gateway` is NULL.
int clinux_rtnl_default_route(int fd, int ifindex, int family, const uint8_t *gateway);
/// `route` 1: RTM_NEWROUTE with NLM_F_CREATE|NLM_F_REPLACE (`ip route replace DST/LEN dev D
/// table T`: unicast, boot protocol, link scope for IPv4, universe for IPv6); 0: RTM_DELROUTE of the same.
int clinux_rtnl_table_route(int fd, int add, int family, uint32_t table, const uint8_t *dst, int dst_len, int ifindex);
/// Deletes every route of `family` in `table` (`ip route flush table T`): a dump, then one
/// RTM_DELROUTE per route found. The number deleted, or -errno.
int clinux_rtnl_flush_table(int fd, int family, uint32_t table);
/// A policy rule (`ip rule add|del priority P [fwmark M] [to DST/LEN] lookup T`): `add` 1 sends
/// RTM_NEWRULE (NLM_F_CREATE|NLM_F_EXCL, action to table), 0 RTM_DELRULE matching the same
/// attributes. `fwmark` 0 and `dst` NULL leave those out; `table` 0 leaves it out (del only).
int clinux_rtnl_rule(int fd, int add, int family, uint32_t priority, uint32_t fwmark, uint32_t table,
                     const uint8_t *dst, int dst_len);

/// Network namespaces by name, as `ip netns add|del NAME` make them: /var/run/netns made a
/// shared mount point (so later mounts reach other mount namespaces), the file NAME created and
/// a new network namespace bind-mounted on it from a short-lived thread (loft's own threads stay
/// where they are). 0 or -errno (EEXIST when the name is taken).
int clinux_netns_add(const char *name);
/// Detaches the bind mount and removes the file: 0 or -errno.
int clinux_netns_del(const char *name);

#endif

/// The git commit loft was built from: -DLOFT_COMMIT="…" (scripts/install and scripts/quickstart
/// pass it with -Xcc); "unknown" when built without it.
const char *clinux_build_commit(void);
