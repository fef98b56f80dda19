#!/usr/bin/env python3
# delayline: what `tc netem delay D loss P limit L [rate R]` does, in user space, for kernels
# without sch_netem. Two TUN devices (IP packets, no L2): A stays in this process's namespace,
# B is moved into namespace NS (`ip link set B netns NS`; the open fd stays attached). Every IP
# packet read from one is written to the other after a fixed delay (each direction its own FIFO,
# so order is kept), unless it is dropped: at random with probability P (uniform, seedable: the
# same seed drops the same packets of the same sequence), or when L packets already wait in that
# direction (drop-tail, counted apart). With a rate, a packet also waits for the ones before it
# to be "serialized" at R bit/s (as netem's rate: then the delay). Addresses and routes are the
# caller's (Tests/integration/lib.sh: line_up). Prints "ready A B" once both exist; on SIGTERM,
# SIGINT or after --max-seconds prints one counters line per direction and exits 0; SIGUSR1
# prints the counters and goes on (each line ends with the seconds run and the process's CPU).
# Bounded: at most L packets queued per direction, and --max-seconds.
#   delayline.py --a NAME --b NAME --netns NS [--delay-ms 20] [--loss 0.01] [--seed 1]
#                [--limit 1000] [--rate-mbit 0] [--mtu 1500] [--max-seconds 600]
import argparse
import collections
import errno
import fcntl
import os
import random
import select
import signal
import struct
import subprocess
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class Direction:
    """One way through the line: packets read from `src` wait in `queue` until their time."""

    def __init__(self, name, src, dst, delay, loss, limit, rate, seed):
        self.name, self.src, self.dst = name, src, dst
        self.delay, self.loss, self.limit = delay, loss, limit
        self.byte_time = 8.0 / rate if rate > 0 else 0.0     # seconds per byte at the rate
        self.rng = random.Random(seed)
        self.queue = collections.deque()                      # (due, packet)
        self.busy_until = 0.0                                 # rate: when the last packet is "sent"
        self.read = self.forwarded = self.bytes = 0
        self.dropped = self.queue_dropped = self.write_errors = 0
        self.peak = 0                                         # most packets waiting at once
        self.late = 0                                         # written > 1 ms after their time
        self.max_late = 0.0

    def take(self, now):
        """Read the packets waiting on src, at most 64 per call: then the due packets of both ways
        are written before more are read (epoll is level-triggered: the rest come next turn)."""
        q, rng, loss = self.queue, self.rng, self.loss
        for _ in range(64):
            try:
                pkt = os.read(self.src, 65536)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EINTR):
                    return
                raise
            self.read += 1
            if loss and rng.random() < loss:
                self.dropped += 1
                continue
            if len(q) >= self.limit:
                self.queue_dropped += 1
                continue
            due = now + self.delay
            if self.byte_time:
                start = max(now, self.busy_until)
                self.busy_until = start + len(pkt) * self.byte_time
                due = self.busy_until + self.delay
            q.append((due, pkt))
            if len(q) > self.peak:
                self.peak = len(q)

    def give(self, now):
        """Write every packet whose time has come."""
        q = self.queue
        while q and q[0][0] <= now:
            due, pkt = q.popleft()
            try:
                os.write(self.dst, pkt)
            except OSError:
                self.write_errors += 1
                continue
            self.forwarded += 1
            self.bytes += len(pkt)
            lag = now - due
            if lag > 0.001:
                self.late += 1
            if lag > self.max_late:
                self.max_late = lag

    def counters(self):
        return ("delayline %s read=%d forwarded=%d bytes=%d dropped=%d queue-dropped=%d write-errors=%d"
                " peak-queue=%d late-1ms=%d max-late-ms=%.1f"
                % (self.name, self.read, self.forwarded, self.bytes, self.dropped, self.queue_dropped,
                   self.write_errors, self.peak, self.late, self.max_late * 1000))


def report(ways, secs):
    """One counters line per direction, with the seconds run and the process's CPU so far."""
    t = os.times()
    for w in ways:
        print(w.counters() + " seconds=%.1f cpu-user=%.1f cpu-system=%.1f" % (secs, t.user, t.system), flush=True)


def main():
    ap = argparse.ArgumentParser(description="user-space netem: delay and loss between two TUN devices")
    ap.add_argument("--a", required=True, help="TUN name kept in this namespace")
    ap.add_argument("--b", required=True, help="TUN name moved into --netns")
    ap.add_argument("--netns", required=True)
    ap.add_argument("--delay-ms", type=float, default=20.0, help="each way (default 20)")
    ap.add_argument("--loss", type=float, default=0.01, help="fraction dropped each way (default 0.01)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=1000, help="packets waiting per direction (default 1000, as netem)")
    ap.add_argument("--rate-mbit", type=float, default=0.0, help="per direction; 0: none (default)")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--max-seconds", type=float, default=600.0, help="exit after this long (default 600)")
    o = ap.parse_args()
    if not (0.0 <= o.loss <= 1.0) or o.delay_ms < 0 or o.limit < 1 or o.rate_mbit < 0 or o.max_seconds <= 0:
        ap.error("out of range: --loss 0...1, --delay-ms >= 0, --limit >= 1, --rate-mbit >= 0, --max-seconds > 0")

    fa, fb = open_tun(o.a), open_tun(o.b)
    for name in (o.a, o.b):
        subprocess.run(["ip", "link", "set", name, "mtu", str(o.mtu), "txqueuelen", "2000"], check=True)
    subprocess.run(["ip", "link", "set", o.b, "netns", o.netns], check=True)
    subprocess.run(["ip", "link", "set", o.a, "up"], check=True)
    subprocess.run(["ip", "-n", o.netns, "link", "set", o.b, "up"], check=True)

    delay, rate = o.delay_ms / 1000.0, o.rate_mbit * 1e6
    ways = [Direction("%s->%s" % (o.a, o.b), fa, fb, delay, o.loss, o.limit, rate, o.seed * 2),
            Direction("%s->%s" % (o.b, o.a), fb, fa, delay, o.loss, o.limit, rate, o.seed * 2 + 1)]
    by_fd = {fa: ways[0], fb: ways[1]}

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    show = []
    signal.signal(signal.SIGUSR1, lambda *_: show.append(1))

    ep = select.epoll()
    ep.register(fa, select.EPOLLIN)
    ep.register(fb, select.EPOLLIN)
    print("ready %s %s delay-ms=%g loss=%g limit=%d rate-mbit=%g seed=%d"
          % (o.a, o.b, o.delay_ms, o.loss, o.limit, o.rate_mbit, o.seed), flush=True)
    t0 = time.monotonic()
    end = t0 + o.max_seconds
    mono = time.monotonic
    while not stop:
        now = mono()
        if now >= end:
            break
        due = end
        for w in ways:
            if w.queue and w.queue[0][0] < due:
                due = w.queue[0][0]
        # At most 0.1 s: a signal does not end the wait (PEP 475 retries it), the flag is seen after.
        events = ep.poll(min(0.1, max(0.0, due - now)))
        now = mono()
        for fd, _ in events:
            by_fd[fd].take(now)
        for w in ways:
            w.give(now)
        if show:
            show.clear()
            report(ways, mono() - t0)
    report(ways, mono() - t0)
    os.close(fa)
    os.close(fb)


if __name__ == "__main__":
    main()
