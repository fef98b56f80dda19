#!/usr/bin/env python3
# The hostile packet battery (scapy): odd packets of every kind loft must drop or answer
# without harm, then N random ones (valid-looking IPv4/IPv6 headers with random rest, and pure
# noise), sent on raw sockets from inside the app's namespace, so they reach loft through its
# TUN as the app's kernel routes them. The same seed sends the same packets. Used by
# hostile.test.sh (crafted-during-transfer: while an upload runs) and capture.test.sh
# (capture-drops-battery: every drop in `loft capture --drops`, with its reason).
#   hostile_battery.py --src4 A --dst4 B --src6 A6 --dst6 B6 [--random N] [--live PORT] [--seed S]
# --live: a port of a live TCP connection of the app (flag combinations and ICMP errors quote
# it). Prints "N crafted packets sent (M in the battery, R random)".
import argparse
import random
from rawsend import RawSender
from scapy.all import IP, IPv6, TCP, UDP, ICMP, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, IPv6ExtHdrDestOpt, \
    IPv6ExtHdrFragment, IPOption_RR, fragment, Raw, conf
conf.verb = 0

ap = argparse.ArgumentParser(description="loft's hostile packet battery")
ap.add_argument("--src4", required=True, help="the app's IPv4 address (on the TUN)")
ap.add_argument("--dst4", required=True, help="a server's IPv4 address beyond loft")
ap.add_argument("--src6", required=True)
ap.add_argument("--dst6", required=True)
ap.add_argument("--random", type=int, default=10000, help="random packets after the battery")
ap.add_argument("--live", type=int, default=40000, help="the port of a live TCP connection")
ap.add_argument("--seed", type=int, default=7)
a = ap.parse_args()
TUN4, SRV4, TUN6, SRV6, live = a.src4, a.dst4, a.src6, a.dst6, a.live

send = RawSender(SRV4, SRV6).send


sent = 0
rnd = random.Random(a.seed)
batch = []
# IPv4: bad checksums, options, fragments (tiny, overlapping, never completed), flags, TTL.
batch += [IP(src=TUN4, dst=SRV4, chksum=0x1234) / TCP(dport=80, flags="S")]
batch += [IP(src=TUN4, dst=SRV4) / TCP(dport=80, flags="S", chksum=0x1234)]
batch += [IP(src=TUN4, dst=SRV4) / UDP(dport=53, chksum=0x1234) / Raw(b"q")]
batch += [IP(src=TUN4, dst=SRV4, options=[IPOption_RR()]) / TCP(dport=80, flags="S")]
batch += fragment(IP(src=TUN4, dst=SRV4) / UDP(dport=9999) / Raw(b"A" * 3000), fragsize=8)
batch += fragment(IP(src=TUN4, dst=SRV4, id=77) / UDP(dport=9998) / Raw(b"B" * 2000), fragsize=512)[:-1]
batch += [IP(src=TUN4, dst=SRV4, id=78, flags="MF", frag=0) / Raw(b"C" * 64),
          IP(src=TUN4, dst=SRV4, id=78, frag=4, proto=17) / Raw(b"D" * 64)]  # overlapping
for fl in ["", "F", "U", "P", "FPU", "SF", "SR", "SA", "RA", "FA", "SFRPAUEC", "E", "C"]:
    batch += [IP(src=TUN4, dst=SRV4) / TCP(sport=rnd.randint(1024, 65535), dport=live, flags=fl,
                                            seq=rnd.getrandbits(32), ack=rnd.getrandbits(32))]
batch += [IP(src=TUN4, dst=SRV4) / TCP(dport=80, flags="S", options=[("MSS", 0), ("WScale", 14),
          ("SAckOK", b""), ("Timestamp", (1, 0)), (99, b"\xff" * 6)])]
batch += [IP(src=TUN4, dst=SRV4) / TCP(dport=80, flags="S", dataofs=15) / Raw(b"\x00" * 40)]
batch += [IP(src=TUN4, dst=SRV4, ttl=t) / TCP(dport=80, flags="S") for t in (0, 1)]
batch += [IP(src=SRV4, dst=SRV4) / TCP(dport=80, flags="S"),
          IP(src=TUN4, dst=TUN4) / TCP(dport=80, flags="S"),
          IP(src=TUN4, dst="224.0.0.1") / UDP(dport=5353) / Raw(b"m"),
          IP(src=TUN4, dst="255.255.255.255") / UDP(dport=67) / Raw(b"b"),
          IP(src="0.0.0.0", dst=SRV4) / UDP(dport=53) / Raw(b"z"),
          IP(src=TUN4, dst="198.18.0.3") / UDP(dport=53) / Raw(b"bcast-of-tun-subnet")]
# ICMP errors quoting the live connection's flow and a made-up one.
batch += [IP(src=TUN4, dst=SRV4) / ICMP(type=3, code=4, nexthopmtu=68) /
          IP(src=SRV4, dst=TUN4) / TCP(sport=9000, dport=live)]
batch += [IP(src=TUN4, dst=SRV4) / ICMP(type=3, code=3) / IP(src=SRV4, dst=TUN4) / UDP(sport=53, dport=5353)]
# IPv6: extension-header chains, fragments, hop limit 0, multicast.
batch += [IPv6(src=TUN6, dst=SRV6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / IPv6ExtHdrRouting() /
          TCP(dport=80, flags="S")]
batch += [IPv6(src=TUN6, dst=SRV6) / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt() / UDP(dport=53) / Raw(b"q")]
batch += [IPv6(src=TUN6, dst=SRV6) / IPv6ExtHdrFragment(id=5, m=1) / UDP(dport=9) / Raw(b"E" * 64)]
batch += [IPv6(src=TUN6, dst=SRV6, hlim=0) / TCP(dport=80, flags="S"),
          IPv6(src=TUN6, dst="ff02::1") / UDP(dport=5353) / Raw(b"m"),
          IPv6(src=TUN6, dst=TUN6) / TCP(dport=80, flags="S"),
          IPv6(src=TUN6, dst=SRV6, nh=250) / Raw(b"unknown next header")]
for p in batch:
    sent += send(p)
# Random packets: valid-looking IPv4/IPv6 headers with random rest, and pure noise.
for i in range(a.random):
    kind = rnd.random()
    if kind < 0.4:
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 60)))
        p = IP(src=TUN4, dst=SRV4, proto=rnd.choice([6, 17, 1, 47, 132]), id=rnd.getrandbits(16)) / Raw(body)
    elif kind < 0.7:
        p = IP(src=TUN4, dst=SRV4) / TCP(sport=rnd.randint(1, 65535), dport=rnd.choice([80, 9000, live, 1]),
                                         flags=rnd.getrandbits(8), seq=rnd.getrandbits(32),
                                         ack=rnd.getrandbits(32), window=rnd.getrandbits(16)) / \
            Raw(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 40))))
    else:
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 60)))
        p = IPv6(src=TUN6, dst=SRV6, nh=rnd.choice([6, 17, 58, 0, 43, 44, 60, 59])) / Raw(body)
    sent += send(p)
print("%d crafted packets sent (%d in the battery, %d random)" % (sent, len(batch), a.random))
