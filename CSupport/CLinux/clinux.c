#define _GNU_SOURCE
#include "clinux.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/errqueue.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <pthread.h>
#include <stdlib.h>
#include <linux/fib_rules.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

// Enters netns_path on this thread; returns the fd of the thread's previous namespace, or -errno.
static int enter_netns(const char *netns_path) {
    int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0) return -errno;
    int target = open(netns_path, O_RDONLY | O_CLOEXEC);
    if (target < 0) { int e = errno; close(self); return -e; }
    if (setns(target, CLONE_NEWNET) != 0) { int e = errno; close(target); close(self); return -e; }
    close(target);
    return self;
}

static void leave_netns(int previous) {
    if (previous >= 0) {
        // Returning to our own namespace cannot fail unless the fd is bad; nothing to recover.
        (void)setns(previous, CLONE_NEWNET);
        close(previous);
    }
}

int clinux_tun_open(const char *name, const char *netns_path, int vnet_hdr) {
    int previous = -1;
    if (netns_path) {
        previous = enter_netns(netns_path);
        if (previous < 0) return previous;
    }
    int result;
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        result = -errno;
    } else {
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0);
        strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
        if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
            result = -errno;
            close(fd);
        } else {
            result = fd;
        }
    }
    leave_netns(previous);
    return result;
}

int clinux_tun_set_offload(int fd, unsigned flags) {
    _Static_assert(CLINUX_TUN_F_CSUM == TUN_F_CSUM && CLINUX_TUN_F_TSO4 == TUN_F_TSO4 &&
                   CLINUX_TUN_F_TSO6 == TUN_F_TSO6 && CLINUX_TUN_F_TSO_ECN == TUN_F_TSO_ECN,
                   "TUN_F_* values");
    return ioctl(fd, TUNSETOFFLOAD, (unsigned long)flags) == 0 ? 0 : -errno;
}

int clinux_epoll_create(void) {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int clinux_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event ev;
    ev.events = events;
    ev.data.u64 = token;
    return epoll_ctl(epfd, op, fd, &ev) == 0 ? 0 : -errno;
}

int clinux_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms) {
    struct epoll_event evs[256];
    if (max > 256) max = 256;
    int n = epoll_wait(epfd, evs, max, timeout_ms);
    if (n < 0) return -errno;
    for (int i = 0; i < n; i++) {
        tokens[i] = evs[i].data.u64;
        events[i] = evs[i].events;
    }
    return n;
}

int clinux_signalfd_for_shutdown(void) {
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) return -errno;
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int clinux_signalfd_read(int fd) {
    struct signalfd_siginfo info;
    ssize_t n = read(fd, &info, sizeof info);
    if (n != (ssize_t)sizeof info) return -1;
    return (int)info.ssi_signo;
}

long clinux_raise_nofile(void) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
    if (lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &lim);
        (void)getrlimit(RLIMIT_NOFILE, &lim);
    }
    return (long)lim.rlim_cur;
}

int clinux_memory(uint64_t *rss, uint64_t *peak) {
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) return -1;
    char line[256];
    unsigned long long v;
    *rss = 0; *peak = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &v) == 1) *rss = v * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &v) == 1) *peak = v * 1024;
    }
    fclose(f);
    return 0;
}

int clinux_errno(void) { return errno; }

int clinux_set_nodelay(int fd) {
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int clinux_set_linger_reset(int fd) {
    struct linger l = { .l_onoff = 1, .l_linger = 0 };
    return setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

int clinux_so_error(int fd) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
}

#ifndef SOL_MPTCP
#define SOL_MPTCP 284
#endif
#ifndef TCP_IS_MPTCP
#define TCP_IS_MPTCP 43
#endif
#ifndef MPTCP_SUBFLOW_ADDRS
#define MPTCP_SUBFLOW_ADDRS 3
#endif

int clinux_mptcp_active(int fd) {
    // TCP_IS_MPTCP (Linux 5.16): 1 on an MPTCP socket still running MPTCP, 0 on a TCP socket and
    // on an MPTCP socket that fell back (measured on 6.18: MPTCP_INFO then fails with EOPNOTSUPP).
    int v = 0;
    socklen_t len = sizeof v;
    if (getsockopt(fd, SOL_TCP, TCP_IS_MPTCP, &v, &len) != 0) return -errno;
    return v ? 1 : 0;
}

int clinux_mptcp_subflows(int fd, struct sockaddr_storage *out, int max) {
    // struct mptcp_subflow_data, then one struct mptcp_subflow_addrs (two sockaddr_storage) per
    // subflow (linux/mptcp.h, Linux 5.17).
    struct { uint32_t size_subflow_data, num_subflows, size_kernel, size_user; } __attribute__((aligned(8))) head;
    enum { most = 16 };
    if (max > most) max = most;
    if (max < 0) max = 0;
    struct {
        typeof(head) h;
        struct sockaddr_storage pairs[2 * most];
    } buf;
    memset(&buf, 0, sizeof buf);
    buf.h.size_subflow_data = sizeof head;
    buf.h.size_user = 2 * sizeof(struct sockaddr_storage);
    socklen_t len = sizeof head + (socklen_t)max * 2 * sizeof(struct sockaddr_storage);
    if (getsockopt(fd, SOL_MPTCP, MPTCP_SUBFLOW_ADDRS, &buf, &len) != 0) return -errno;
    int n = (int)buf.h.num_subflows;
    int copied = n < max ? n : max;
    if (buf.h.size_user != 2 * sizeof(struct sockaddr_storage)) copied = 0;  // a layout this build does not know
    memcpy(out, buf.pairs, (size_t)copied * 2 * sizeof(struct sockaddr_storage));
    return n;
}

int clinux_udp_recverr(int fd, int family) {
    int one = 1;
    if (family == AF_INET6) return setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &one, sizeof one) == 0 ? 0 : -errno;
    return setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof one) == 0 ? 0 : -errno;
}

int clinux_udp_read_error(int fd, void *addr, unsigned *len) {
    char control[512];
    char data[64];
    struct iovec iov = { data, sizeof data };
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_name = addr;
    msg.msg_namelen = *len;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return 0;
    *len = msg.msg_namelen;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) ||
            (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR)) {
            struct sock_extended_err e;
            memcpy(&e, CMSG_DATA(c), sizeof e);
            if (e.ee_origin == SO_EE_ORIGIN_ICMP || e.ee_origin == SO_EE_ORIGIN_ICMP6) return (int)e.ee_errno;
        }
    }
    return -1;
}

int clinux_recv_batch(int fd, uint8_t *base, size_t slot, int count, int *lens) {
    struct mmsghdr msgs[64];
    struct iovec iov[64];
    if (count > 64) count = 64;
    memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)count);
    for (int i = 0; i < count; i++) {
        iov[i].iov_base = base + (size_t)i * slot;
        iov[i].iov_len = slot;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int n = recvmmsg(fd, msgs, (unsigned)count, MSG_DONTWAIT, NULL);
    if (n < 0) return -errno;
    for (int i = 0; i < n; i++) {
        lens[i] = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ? -1 : (int)msgs[i].msg_len;
    }
    return n;
}

int clinux_send_batch(int fd, const uint8_t *base, size_t slot, const int *lens, int count) {
    struct mmsghdr msgs[64];
    struct iovec iov[64];
    if (count > 64) count = 64;
    memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)count);
    for (int i = 0; i < count; i++) {
        iov[i].iov_base = (void *)(base + (size_t)i * slot);
        iov[i].iov_len = (size_t)lens[i];
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int n = sendmmsg(fd, msgs, (unsigned)count, MSG_DONTWAIT);
    return n < 0 ? -errno : n;
}

int clinux_udp_enable_gro(int fd) {
    int on = 1;
    return setsockopt(fd, IPPROTO_UDP, UDP_GRO, &on, sizeof on) == 0 ? 0 : -errno;
}

int clinux_udp_no_fragment(int fd) {
    int v4 = IP_PMTUDISC_DO, v6 = IPV6_PMTUDISC_DO;
    int a = setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v4, sizeof v4);
    int b = setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &v6, sizeof v6);
    return (a == 0 || b == 0) ? 0 : -errno;
}

int clinux_path_mtu(int fd, int family) {
    int mtu = 0;
    socklen_t len = sizeof mtu;
    int rv = family == AF_INET6 ? getsockopt(fd, IPPROTO_IPV6, IPV6_MTU, &mtu, &len)
                                : getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &len);
    return rv == 0 ? mtu : -errno;
}

long clinux_udp_send_segments(int fd, const uint8_t *buf, size_t len, int segment, const void *addr, unsigned addrlen) {
    struct iovec iov = { (void *)buf, len };
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_name = (void *)addr;
    m.msg_namelen = addr ? addrlen : 0;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    union { char buf[CMSG_SPACE(sizeof(uint16_t))]; struct cmsghdr align; } ctl;
    if (segment > 0 && (size_t)segment < len) {
        memset(&ctl, 0, sizeof ctl);
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = IPPROTO_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t s = (uint16_t)segment;
        memcpy(CMSG_DATA(cm), &s, sizeof s);
    }
    ssize_t n;
    do { n = sendmsg(fd, &m, MSG_DONTWAIT); } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : (long)n;
}

long clinux_udp_recv_segments(int fd, uint8_t *buf, size_t cap, int *segment, void *addr, unsigned *addrlen) {
    struct iovec iov = { buf, cap };
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_name = addr;
    m.msg_namelen = addr && addrlen ? *addrlen : 0;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    union { char buf[CMSG_SPACE(sizeof(int)) * 2]; struct cmsghdr align; } ctl;
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof ctl.buf;
    ssize_t n;
    do { n = recvmsg(fd, &m, MSG_DONTWAIT); } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    *segment = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
        if (cm->cmsg_level == IPPROTO_UDP && cm->cmsg_type == UDP_GRO) {
            int s = 0;
            memcpy(&s, CMSG_DATA(cm), sizeof s);
            *segment = s;
        }
    }
    if (addr && addrlen) *addrlen = m.msg_namelen;
    return (long)n;
}

int clinux_udp_recv_many(int fd, uint8_t *buf, size_t cap, unsigned n, int *lens, int *segs, void *addrs, unsigned *addrlens) {
    enum { MAX = 64 };
    if (n > MAX) n = MAX;
    struct mmsghdr mm[MAX];
    struct iovec iov[MAX];
    union { char buf[CMSG_SPACE(sizeof(int)) * 2]; struct cmsghdr align; } ctl[MAX];
    memset(mm, 0, sizeof(struct mmsghdr) * n);
    for (unsigned i = 0; i < n; i++) {
        iov[i].iov_base = buf + (size_t)i * cap;
        iov[i].iov_len = cap;
        mm[i].msg_hdr.msg_name = (char *)addrs + (size_t)i * sizeof(struct sockaddr_storage);
        mm[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_storage);
        mm[i].msg_hdr.msg_iov = &iov[i];
        mm[i].msg_hdr.msg_iovlen = 1;
        mm[i].msg_hdr.msg_control = ctl[i].buf;
        mm[i].msg_hdr.msg_controllen = sizeof ctl[i].buf;
    }
    int k;
    do { k = recvmmsg(fd, mm, n, MSG_DONTWAIT, NULL); } while (k < 0 && errno == EINTR);
    if (k < 0) return -errno;
    for (int i = 0; i < k; i++) {
        lens[i] = (int)mm[i].msg_len;
        addrlens[i] = mm[i].msg_hdr.msg_namelen;
        segs[i] = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mm[i].msg_hdr); cm; cm = CMSG_NXTHDR(&mm[i].msg_hdr, cm)) {
            if (cm->cmsg_level == IPPROTO_UDP && cm->cmsg_type == UDP_GRO) {
                int sz = 0;
                memcpy(&sz, CMSG_DATA(cm), sizeof sz);
                segs[i] = sz;
            }
        }
    }
    return k;
}

static int fill_unix(struct sockaddr_un *a, const char *path) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a->sun_path) return -ENAMETOOLONG;
    strcpy(a->sun_path, path);
    return 0;
}

int clinux_unix_connect(const char *path) {
    struct sockaddr_un a;
    int r = fill_unix(&a, path);
    if (r) return r;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { int e = errno; close(fd); return -e; }
    return fd;
}

int clinux_unix_listen(const char *path, unsigned mode) {
    struct sockaddr_un a;
    int r = fill_unix(&a, path);
    if (r) return r;
    int probe = clinux_unix_connect(path);
    if (probe >= 0) { close(probe); return -EADDRINUSE; }
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    // Created with no permissions for others from the first moment, then set exactly.
    mode_t old = umask(0177);
    int b = bind(fd, (struct sockaddr *)&a, sizeof a);
    umask(old);
    if (b != 0 || chmod(path, (mode_t)mode) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

long clinux_peer_uid(int fd) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    return (long)cred.uid;
}

int clinux_accept(int fd) {
    int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return c < 0 ? -errno : c;
}

int clinux_accept_from(int fd, void *addr, unsigned *len) {
    socklen_t l = *len;
    int c = accept4(fd, (struct sockaddr *)addr, &l, SOCK_NONBLOCK | SOCK_CLOEXEC);
    *len = l;
    return c < 0 ? -errno : c;
}

int clinux_terminal_width(int fd) {
    struct winsize w;
    if (ioctl(fd, TIOCGWINSZ, &w) != 0) return 0;
    return w.ws_col;
}

// --- route monitor: rtnetlink notifications for the host's default routes ----------------

#include <linux/netlink.h>
#include <linux/rtnetlink.h>

int clinux_route_monitor_open(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -errno;
    struct sockaddr_nl sa;
    memset(&sa, 0, sizeof sa);
    sa.nl_family = AF_NETLINK;
    sa.nl_groups = RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

int clinux_route_monitor_read(int fd, int ignore_ifindex) {
    char buf[16384];
    int changes = 0;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? changes : (errno == ENOBUFS ? changes + 1 : -errno);
        if (n == 0) return changes;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type != RTM_NEWROUTE && h->nlmsg_type != RTM_DELROUTE) continue;
            struct rtmsg *rt = NLMSG_DATA(h);
            if (rt->rtm_dst_len != 0) continue;
            unsigned table = rt->rtm_table;
            int oif = 0;
            int len = (int)RTM_PAYLOAD(h);
            for (struct rtattr *a = RTM_RTA(rt); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
                if (a->rta_type == RTA_TABLE) table = *(unsigned *)RTA_DATA(a);
                if (a->rta_type == RTA_OIF) oif = *(int *)RTA_DATA(a);
            }
            if (table != RT_TABLE_MAIN) continue;
            if (ignore_ifindex > 0 && oif == ignore_ifindex) continue;
            changes++;
        }
    }
}

// --- rtnetlink requests: addresses, links and routes of one namespace ----------------------
// Each call builds one request, sends it with NLM_F_ACK and waits (bounded by SO_RCVTIMEO)
// for the kernel's answer to that sequence number.

#include <linux/if_addr.h>
#include <linux/ip.h>

int clinux_rtnl_open(const char *netns_path) {
    int previous = -1;
    if (netns_path) {
        previous = enter_netns(netns_path);
        if (previous < 0) return previous;
    }
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    int result = fd < 0 ? -errno : fd;
    leave_netns(previous);
    if (fd < 0) return result;
    struct sockaddr_nl sa;
    memset(&sa, 0, sizeof sa);
    sa.nl_family = AF_NETLINK;
    // A kernel that answers a local request takes microseconds; 2 s means something is wrong.
    struct timeval tv = { .tv_sec = 2, .tv_usec = 0 };
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

struct rtnl_request {
    struct nlmsghdr h;
    char body[512];
};

static void *rtnl_start(struct rtnl_request *r, uint16_t type, uint16_t flags, size_t fixed) {
    memset(r, 0, sizeof *r);
    r->h.nlmsg_len = NLMSG_LENGTH(fixed);
    r->h.nlmsg_type = type;
    r->h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    return NLMSG_DATA(&r->h);
}

static struct rtattr *rtnl_attr(struct rtnl_request *r, uint16_t type, const void *data, size_t len) {
    struct rtattr *a = (struct rtattr *)((char *)&r->h + NLMSG_ALIGN(r->h.nlmsg_len));
    a->rta_type = type;
    a->rta_len = (unsigned short)RTA_LENGTH(len);
    if (len) memcpy(RTA_DATA(a), data, len);
    r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + RTA_ALIGN(a->rta_len);
    return a;
}

// Closes a nested attribute opened with rtnl_attr(r, type, NULL, 0).
static void rtnl_nest_end(struct rtnl_request *r, struct rtattr *nest) {
    nest->rta_len = (unsigned short)((char *)&r->h + r->h.nlmsg_len - (char *)nest);
}

// Sends the request and reads until the answer to its sequence number: the ACK (0 or -errno),
// or for RTM_GETLINK the link, whose index is returned. Other messages are skipped.
static int rtnl_transact(int fd, struct rtnl_request *r) {
    static uint32_t seq;
    r->h.nlmsg_seq = ++seq;
    struct sockaddr_nl kernel;
    memset(&kernel, 0, sizeof kernel);
    kernel.nl_family = AF_NETLINK;
    ssize_t sent;
    do {
        sent = sendto(fd, &r->h, r->h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) return -errno;
    char buf[16384];
    int found = 0;  // RTM_GETLINK: the index, returned once the ACK follows
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != r->h.nlmsg_seq) continue;
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                if (h->nlmsg_len < NLMSG_LENGTH(sizeof *e)) return -EPROTO;
                return e->error != 0 ? e->error : found;
            }
            if (h->nlmsg_type == RTM_NEWLINK && r->h.nlmsg_type == RTM_GETLINK) {
                const struct ifinfomsg *ifi = NLMSG_DATA(h);
                found = ifi->ifi_index;
            }
        }
    }
}

int clinux_rtnl_ifindex(int fd, const char *name) {
    size_t len = strlen(name);
    if (len == 0 || len >= IFNAMSIZ) return -EINVAL;
    struct rtnl_request r;
    struct ifinfomsg *ifi = rtnl_start(&r, RTM_GETLINK, 0, sizeof *ifi);
    ifi->ifi_family = AF_UNSPEC;
    rtnl_attr(&r, IFLA_IFNAME, name, len + 1);
    uint32_t mask = RTEXT_FILTER_SKIP_STATS;  // a short answer: only the index is read
    rtnl_attr(&r, IFLA_EXT_MASK, &mask, sizeof mask);
    int index = rtnl_transact(fd, &r);
    return index == 0 ? -ENODEV : index;
}

int clinux_rtnl_set_link(int fd, int ifindex, int mtu, int up) {
    struct rtnl_request r;
    struct ifinfomsg *ifi = rtnl_start(&r, RTM_SETLINK, 0, sizeof *ifi);
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    if (up >= 0) {
        ifi->ifi_change = IFF_UP;
        ifi->ifi_flags = up ? IFF_UP : 0;
    }
    if (mtu > 0) {
        uint32_t m = (uint32_t)mtu;
        rtnl_attr(&r, IFLA_MTU, &m, sizeof m);
    }
    return rtnl_transact(fd, &r);
}

int clinux_rtnl_promote_secondaries(int fd, int ifindex, int on) {
    struct rtnl_request r;
    struct ifinfomsg *ifi = rtnl_start(&r, RTM_SETLINK, 0, sizeof *ifi);
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    struct rtattr *spec = rtnl_attr(&r, IFLA_AF_SPEC, NULL, 0);
    struct rtattr *inet = rtnl_attr(&r, AF_INET, NULL, 0);
    struct rtattr *conf = rtnl_attr(&r, IFLA_INET_CONF, NULL, 0);
    uint32_t v = on ? 1 : 0;
    rtnl_attr(&r, IPV4_DEVCONF_PROMOTE_SECONDARIES, &v, sizeof v);
    rtnl_nest_end(&r, conf);
    rtnl_nest_end(&r, inet);
    rtnl_nest_end(&r, spec);
    return rtnl_transact(fd, &r);
}

static int addr_len(int family) {
    return family == AF_INET ? 4 : family == AF_INET6 ? 16 : -1;
}

int clinux_rtnl_addr(int fd, int replace, int ifindex, int family, const uint8_t *addr, int prefixlen) {
    int alen = addr_len(family);
    if (alen < 0 || prefixlen < 0 || prefixlen > alen * 8) return -EINVAL;
    struct rtnl_request r;
    struct ifaddrmsg *ifa = rtnl_start(&r, replace ? RTM_NEWADDR : RTM_DELADDR,
                                       replace ? NLM_F_CREATE | NLM_F_REPLACE : 0, sizeof *ifa);
    ifa->ifa_family = (uint8_t)family;
    ifa->ifa_prefixlen = (uint8_t)prefixlen;
    ifa->ifa_scope = RT_SCOPE_UNIVERSE;
    ifa->ifa_index = (uint32_t)ifindex;
    if (replace && family == AF_INET6) ifa->ifa_flags = IFA_F_NODAD;
    rtnl_attr(&r, IFA_LOCAL, addr, (size_t)alen);
    rtnl_attr(&r, IFA_ADDRESS, addr, (size_t)alen);
    return rtnl_transact(fd, &r);
}

int clinux_rtnl_default_route(int fd, int ifindex, int family, const uint8_t *gateway) {
    int alen = addr_len(family);
    if (alen < 0) return -EINVAL;
    struct rtnl_request r;
    struct rtmsg *rt = rtnl_start(&r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, sizeof *rt);
    rt->rtm_family = (uint8_t)family;
    rt->rtm_table = RT_TABLE_MAIN;
    rt->rtm_protocol = RTPROT_BOOT;
    rt->rtm_type = RTN_UNICAST;
    // As `ip route replace default dev D` chooses: link scope for an IPv4 route without a
    // gateway, universe otherwise.
    rt->rtm_scope = gateway || family == AF_INET6 ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
    if (gateway) {
        rt->rtm_flags = RTNH_F_ONLINK;
        rtnl_attr(&r, RTA_GATEWAY, gateway, (size_t)alen);
    }
    uint32_t oif = (uint32_t)ifindex;
    rtnl_attr(&r, RTA_OIF, &oif, sizeof oif);
    return rtnl_transact(fd, &r);
}

int clinux_rtnl_table_route(int fd, int add, int family, uint32_t table, const uint8_t *dst, int dst_len, int ifindex) {
    int alen = addr_len(family);
    if (alen < 0 || dst_len < 0 || dst_len > alen * 8) return -EINVAL;
    struct rtnl_request r;
    struct rtmsg *rt = rtnl_start(&r, add ? RTM_NEWROUTE : RTM_DELROUTE, add ? NLM_F_CREATE | NLM_F_REPLACE : 0, sizeof *rt);
    rt->rtm_family = (uint8_t)family;
    rt->rtm_dst_len = (uint8_t)dst_len;
    rt->rtm_table = table < 256 ? (uint8_t)table : RT_TABLE_UNSPEC;
    rt->rtm_protocol = RTPROT_BOOT;
    rt->rtm_type = RTN_UNICAST;
    // As `ip route replace DST dev D` chooses without a gateway: link scope for IPv4.
    rt->rtm_scope = family == AF_INET6 ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
    rtnl_attr(&r, RTA_TABLE, &table, sizeof table);
    if (dst_len > 0) rtnl_attr(&r, RTA_DST, dst, (size_t)alen);
    uint32_t oif = (uint32_t)ifindex;
    rtnl_attr(&r, RTA_OIF, &oif, sizeof oif);
    return rtnl_transact(fd, &r);
}

static int rtnl_flush_pass(int fd, int family, uint32_t table, int *more);

int clinux_rtnl_flush_table(int fd, int family, uint32_t table) {
    // Passes of at most max_routes each, until one finds the table's last routes.
    int deleted = 0, more = 1;
    while (more) {
        int n = rtnl_flush_pass(fd, family, table, &more);
        if (n < 0) return n;
        deleted += n;
        if (n == 0) break;
    }
    return deleted;
}

// One dump of the family's routes; up to max_routes of `table`'s are deleted. `more` is set when
// the pass stopped at max_routes (the table may hold more).
static int rtnl_flush_pass(int fd, int family, uint32_t table, int *more) {
    *more = 0;
    // 1. The dump: every route of the family; those of `table` are kept (whole messages, so
    //    each can be sent back as its own RTM_DELROUTE).
    struct rtnl_request r;
    struct rtmsg *rt = rtnl_start(&r, RTM_GETROUTE, NLM_F_DUMP, sizeof *rt);
    r.h.nlmsg_flags &= (uint16_t)~NLM_F_ACK;
    rt->rtm_family = (uint8_t)family;
    static uint32_t dump_seq = 0x40000000u;
    r.h.nlmsg_seq = ++dump_seq;
    struct sockaddr_nl kernel;
    memset(&kernel, 0, sizeof kernel);
    kernel.nl_family = AF_NETLINK;
    ssize_t sent;
    do {
        sent = sendto(fd, &r.h, r.h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) return -errno;
    enum { max_routes = 4096 };
    struct rtnl_request *found = calloc(max_routes, sizeof *found);
    if (!found) return -ENOMEM;
    int count = 0, done = 0, failure = 0;
    char buf[32768];
    while (!done) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            failure = errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
            break;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != r.h.nlmsg_seq) continue;
            if (h->nlmsg_type == NLMSG_DONE) { done = 1; break; }
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                failure = h->nlmsg_len < NLMSG_LENGTH(sizeof *e) ? -EPROTO : (e->error ? e->error : -EPROTO);
                done = 1;
                break;
            }
            if (h->nlmsg_type != RTM_NEWROUTE || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct rtmsg))) continue;
            const struct rtmsg *m = NLMSG_DATA(h);
            uint32_t t = m->rtm_table;
            int len = (int)RTM_PAYLOAD(h);
            for (const struct rtattr *a = RTM_RTA(m); RTA_OK(a, len); a = RTA_NEXT(a, len))
                if (a->rta_type == RTA_TABLE && RTA_PAYLOAD(a) >= sizeof(uint32_t)) memcpy(&t, RTA_DATA(a), sizeof t);
            if (t != table) continue;
            if (count == max_routes) { *more = 1; continue; }
            // The route's identity (what RTM_DELROUTE matches on), not its cache and metrics.
            struct rtmsg *d = rtnl_start(&found[count], RTM_DELROUTE, 0, sizeof *d);
            *d = *m;
            d->rtm_scope = RT_SCOPE_NOWHERE;
            len = (int)RTM_PAYLOAD(h);
            for (const struct rtattr *a = RTM_RTA(m); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
                switch (a->rta_type) {
                case RTA_DST: case RTA_OIF: case RTA_TABLE: case RTA_GATEWAY: case RTA_PRIORITY:
                    if (RTA_PAYLOAD(a) <= 16) rtnl_attr(&found[count], a->rta_type, RTA_DATA(a), RTA_PAYLOAD(a));
                    break;
                }
            }
            count++;
        }
    }
    // 2. One RTM_DELROUTE per route kept: the kernel's own description of it.
    int deleted = 0;
    for (int i = 0; i < count && !failure; i++) {
        int rc = rtnl_transact(fd, &found[i]);
        if (rc == 0) deleted++;
        else if (rc != -ESRCH) failure = rc;
    }
    free(found);
    return failure ? failure : deleted;
}

int clinux_rtnl_rule(int fd, int add, int family, uint32_t priority, uint32_t fwmark, uint32_t table,
                     const uint8_t *dst, int dst_len) {
    int alen = addr_len(family);
    if (alen < 0 || (dst && (dst_len < 0 || dst_len > alen * 8))) return -EINVAL;
    struct rtnl_request r;
    struct fib_rule_hdr *frh = rtnl_start(&r, add ? RTM_NEWRULE : RTM_DELRULE, add ? NLM_F_CREATE | NLM_F_EXCL : 0, sizeof *frh);
    frh->family = (uint8_t)family;
    frh->action = add ? FR_ACT_TO_TBL : FR_ACT_UNSPEC;
    if (table) frh->table = table < 256 ? (uint8_t)table : RT_TABLE_UNSPEC;
    rtnl_attr(&r, FRA_PRIORITY, &priority, sizeof priority);
    if (fwmark) rtnl_attr(&r, FRA_FWMARK, &fwmark, sizeof fwmark);
    if (table) rtnl_attr(&r, FRA_TABLE, &table, sizeof table);
    if (dst) {
        frh->dst_len = (uint8_t)dst_len;
        rtnl_attr(&r, FRA_DST, dst, (size_t)alen);
    }
    return rtnl_transact(fd, &r);
}

// --- network namespaces by name ------------------------------------------------------------

#define NETNS_RUN_DIR "/var/run/netns"

static void *netns_bind(void *arg) {
    const char *path = arg;
    intptr_t rc = 0;
    // This thread alone moves into a new namespace; /proc/thread-self names it.
    if (unshare(CLONE_NEWNET) != 0) rc = -errno;
    else if (mount("/proc/thread-self/ns/net", path, "none", MS_BIND, NULL) != 0) rc = -errno;
    return (void *)rc;
}

int clinux_netns_add(const char *name) {
    if (!name || !*name || strchr(name, '/') || strlen(name) > 200 || !strcmp(name, ".") || !strcmp(name, ".."))
        return -EINVAL;
    if (mkdir(NETNS_RUN_DIR, 0755) != 0 && errno != EEXIST) return -errno;
    // As iproute2 does: the folder a shared mount point, made one by binding it to itself if
    // it is not a mount point yet (EINVAL).
    int made_mount = 0;
    while (mount("", NETNS_RUN_DIR, "none", MS_SHARED | MS_REC, NULL) != 0) {
        if (errno != EINVAL || made_mount) return -errno;
        if (mount(NETNS_RUN_DIR, NETNS_RUN_DIR, "none", MS_BIND | MS_REC, NULL) != 0) return -errno;
        made_mount = 1;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/%s", NETNS_RUN_DIR, name);
    int fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
    if (fd < 0) return -errno;
    close(fd);
    pthread_t t;
    void *result = NULL;
    int e = pthread_create(&t, NULL, netns_bind, path);
    if (e != 0) { unlink(path); return -e; }
    pthread_join(t, &result);
    int rc = (int)(intptr_t)result;
    if (rc != 0) unlink(path);
    return rc;
}

int clinux_netns_del(const char *name) {
    if (!name || !*name || strchr(name, '/') || strlen(name) > 200) return -EINVAL;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", NETNS_RUN_DIR, name);
    // As iproute2 does: a lazy unmount (a process still inside keeps the namespace), then the file.
    umount2(path, MNT_DETACH);
    if (unlink(path) != 0) return -errno;
    return 0;
}

int clinux_malloc_trim(void) { return malloc_trim(0); }

size_t clinux_heap_in_use(void) { return mallinfo2().uordblks; }

void clinux_malloc_keep(size_t keep) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, (int)keep);
    mallopt(M_TOP_PAD, (int)(keep / 8));
}

// --- build identity -------------------------------------------------------------------------

#ifndef LOFT_COMMIT
#define LOFT_COMMIT "unknown"
#endif
const char *clinux_build_commit(void) { return LOFT_COMMIT; }
