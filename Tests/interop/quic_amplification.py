#!/usr/bin/env python3
# Clients that send one QUIC Initial each and never answer (as a spoofed source would: the
# front's replies go to an address that never speaks again), from distinct loopback addresses,
# below the front's Retry threshold. Counts the UDP bytes the front sends to each for
# --seconds; RFC 9000 §8.1 allows at most 3x what the address sent until it is validated.
# The Initials come from PyPI aioquic's client (a real ClientHello, padded to 1,200 bytes).
# Prints one line per source and the PASS/FAIL line of quic-initial-amplification-3x.
#   quic_amplification.py --port P [--sources 8] [--seconds 5]
import argparse
import select
import socket
import time

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--sources", type=int, default=8)
ap.add_argument("--seconds", type=float, default=5.0)
args = ap.parse_args()

socks, sent, got = [], {}, {}
for i in range(args.sources):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.%d.%d" % (77, 2 + i), 0))
    cfg = QuicConfiguration(is_client=True, alpn_protocols=["loft"], server_name="front.test")
    q = QuicConnection(configuration=cfg)
    q.connect(("127.0.0.1", args.port), now=time.time())
    d = q.datagrams_to_send(now=time.time())
    first = d[0][0]     # the first Initial (the ClientHello), as a single datagram
    s.sendto(first, ("127.0.0.1", args.port))
    sent[s] = len(first)
    got[s] = 0
    socks.append(s)

end = time.time() + args.seconds
while time.time() < end:
    r, _, _ = select.select(socks, [], [], max(0.0, end - time.time()))
    for s in r:
        try:
            got[s] += len(s.recv(65536))
        except OSError:
            pass

worst = 0.0
for s in socks:
    ratio = got[s] / sent[s]
    worst = max(worst, ratio)
    print("  # %s: sent %d, got %d bytes in %.0f s (%.2fx)" % (s.getsockname()[0], sent[s], got[s], args.seconds, ratio), flush=True)
answered = sum(1 for s in socks if got[s] > 0)
if answered == len(socks) and worst <= 3.0:
    print("PASS quic-initial-amplification-3x")
else:
    print("FAIL quic-initial-amplification-3x: %d of %d sources answered, worst %.2fx (limit 3x)" % (answered, len(socks), worst))
