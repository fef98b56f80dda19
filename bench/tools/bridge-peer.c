// A batched bridge peer for bench/bridge: a TUN device joined to loft's UDP bridge, one raw IP
// packet per datagram, like socat's TUN mode, but moving up to 64 packets per wake-up
// (read loop on the TUN + sendmmsg, recvmmsg + write loop). It exists to show what the bridge
// carries when the peer is not the bottleneck; socat stays the benchmark's real peer.
//   bridge-peer TUN-NAME LOCAL-PORT PEER-PORT     (binds 127.0.0.1:LOCAL-PORT, connects to PEER-PORT)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

enum { BATCH = 64, SLOT = 65536 };

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: bridge-peer TUN-NAME LOCAL-PORT PEER-PORT\n"); return 2; }
    int tun = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    strncpy(ifr.ifr_name, argv[1], IFNAMSIZ - 1);
    if (tun < 0 || ioctl(tun, TUNSETIFF, &ifr) < 0) { perror("bridge-peer: tun"); return 1; }
    int udp = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int size = 4 << 20;
    setsockopt(udp, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    setsockopt(udp, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(udp, (struct sockaddr *)&a, sizeof a) < 0) { perror("bridge-peer: bind"); return 1; }
    a.sin_port = htons((unsigned short)atoi(argv[3]));
    if (connect(udp, (struct sockaddr *)&a, sizeof a) < 0) { perror("bridge-peer: connect"); return 1; }
    static char buf[BATCH][SLOT];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    for (;;) {
        struct pollfd p[2] = { { .fd = tun, .events = POLLIN }, { .fd = udp, .events = POLLIN } };
        if (poll(p, 2, -1) < 0) continue;
        if (p[0].revents & POLLIN) {
            int n = 0;
            while (n < BATCH) {
                ssize_t r = read(tun, buf[n], SLOT);
                if (r <= 0) break;
                iov[n] = (struct iovec){ buf[n], (size_t)r };
                memset(&msgs[n], 0, sizeof msgs[n]);
                msgs[n].msg_hdr.msg_iov = &iov[n];
                msgs[n].msg_hdr.msg_iovlen = 1;
                n++;
            }
            if (n > 0) sendmmsg(udp, msgs, (unsigned)n, 0);  // a missing loft: ECONNREFUSED, dropped
        }
        if (p[1].revents & POLLIN) {
            for (int i = 0; i < BATCH; i++) {
                iov[i] = (struct iovec){ buf[i], SLOT };
                memset(&msgs[i], 0, sizeof msgs[i]);
                msgs[i].msg_hdr.msg_iov = &iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            int n = recvmmsg(udp, msgs, BATCH, 0, NULL);
            for (int i = 0; i < n; i++) (void)!write(tun, buf[i], msgs[i].msg_len);
        }
    }
}
