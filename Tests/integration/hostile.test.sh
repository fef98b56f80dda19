#!/usr/bin/env bash
# Hostile traffic from inside the routed namespace, as an attacker there would send it: each
# defect hostile traffic once found gets its case, with the figure it measures printed, and a
# battery of crafted packets runs while a transfer must stay intact. Bounded: about a minute.
#   syn-scan-frees-flows     SYNs answered by the app's RST free their flows and the
#                            destination connections at once (was: held until connect-timeout)
#   bogus-ack-no-stall       an ACK of unsent data with window 0 during a download: dropped,
#                            the download completes (was: stalled for good)
#   reorder-flood-bounded    16,000 one-byte out-of-order segments: capped, RSS flat
#   crafted-during-transfer  a 20 MiB upload stays intact (SHA-256) while odd packets of every
#                            kind and 10,000 random ones arrive; drops counted by reason
#   udp-flood-bounded        10,000 source ports to a closed port: associations capped by
#                            their idle timeout, ICMP port unreachable rate-limited
#   scans-and-churn-served   nmap SYN and UDP scans (closed UDP ports answered with ICMP port
#                            unreachable), 2,000 short connections, and a request right after
#   rss-back-after-floods    RSS returns near idle after the floods (malloc_trim)
#   loft-exit-clean
. "$(dirname "$0")/lib.sh"

CASES="syn-scan-frees-flows bogus-ack-no-stall reorder-flood-bounded crafted-during-transfer
udp-flood-bounded scans-and-churn-served rss-back-after-floods loft-exit-clean"

topo_up
# srv answers every datagram to a closed port (its own ICMP rate limit off), so loft's limit is
# the one that shows.
in_srv sysctl -qw net.ipv4.icmp_ratelimit=0 net.ipv4.icmp_msgs_per_sec=100000
make_files 20
start_nginx 1 8192
start_sink

CFG=$(loft_config hostile)
sed -i 's/udp-idle-timeout: 60s/udp-idle-timeout: 2s/' "$CFG"    # the UDP flood's associations go soon
if ! loft_start "$CFG"; then
    for c in $CASES; do fail "$c" "loft did not start"; done
    finish
fi

jq_py() { json | python3 -c "import json,sys; o=json.load(sys.stdin); print($1)"; }
established_at_srv() { in_srv ss -Htn state established "( sport = :80 )" | wc -l; }

# The packet tools, run inside the app namespace (raw sockets: the app's kernel answers loft's
# SYN-ACKs to SYNs it never sent with RST, as it would for any scan). The crafted battery is
# Tests/tools/hostile_battery.py (capture.test.sh sends it too).
cat >"$T_DIR/hostile.py" <<'EOF'
import os, random, socket, struct, sys, time, hashlib, threading
from scapy.all import IP, IPv6, TCP, UDP, ICMP, ICMPv6DestUnreach, IPv6ExtHdrHopByHop, \
    IPv6ExtHdrRouting, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPOption_RR, fragment, Raw, conf
conf.verb = 0
from rawsend import RawSender   # Tests/tools (PYTHONPATH from hp)

SRV4, SRV6, TUN4, TUN6 = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
case = sys.argv[5]
args = sys.argv[6:]

send = RawSender(SRV4, SRV6).send

if case == "synscan":                 # synscan N: N SYNs from distinct source ports to SRV4:80
    n = int(args[0])
    t0 = time.time()
    for i in range(n):
        sport = 10000 + i
        p = IP(src=TUN4, dst=SRV4) / TCP(sport=sport, dport=80, flags="S", seq=random.getrandbits(32))
        send(p)
    print("%d SYNs in %.2f s" % (n, time.time() - t0))

elif case == "bogus-ack":             # a 20 MiB download with one ACK of unsent data, window 0
    from scapy.all import AsyncSniffer
    s = socket.create_connection((SRV4, 80), timeout=10)
    lport = s.getsockname()[1]
    s.sendall(b"GET /big HTTP/1.0\r\nHost: x\r\n\r\n")
    got = bytearray()
    while len(got) < 150000:
        d = s.recv(65536)
        if not d: break
        got += d
    # Learn the app's sequence numbers from its next ACK on the TUN.
    sn = AsyncSniffer(iface="loft0", count=1, timeout=3,
                      lfilter=lambda p: TCP in p and p[TCP].sport == lport and p[TCP].flags & 0x10)
    sn.start()
    got += s.recv(65536)
    sn.join()
    pk = sn.results[0] if sn.results else None
    if pk is None:
        print("no ACK seen on the TUN"); sys.exit(1)
    send(IP(src=TUN4, dst=SRV4) / TCP(sport=lport, dport=80, flags="A", seq=pk[TCP].seq,
                                      ack=(pk[TCP].ack + 10_000_000) % (1 << 32), window=0))
    t0 = time.time()
    s.settimeout(15)
    try:
        while True:
            d = s.recv(1 << 20)
            if not d: break
            got += d
    except socket.timeout:
        pass
    got = bytes(got)
    body = got.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in got else b""
    print("%d of %d bytes after the bogus ACK, %.2f s" % (len(body), int(args[0]), time.time() - t0))
    sys.exit(0 if len(body) == int(args[0]) and hashlib.sha256(body).hexdigest() == args[1] else 1)

elif case == "reorder":               # N one-byte out-of-order segments on one upload connection
    from scapy.all import AsyncSniffer
    n = int(args[0])
    s = socket.create_connection((SRV4, 9000), timeout=10)
    lport = s.getsockname()[1]
    sn = AsyncSniffer(iface="loft0", count=1, timeout=3,
                      lfilter=lambda p: TCP in p and p[TCP].sport == lport and len(p[TCP].payload) > 0)
    sn.start()
    time.sleep(0.2)
    s.sendall(b"x")
    sn.join()
    pk = sn.results[0] if sn.results else None
    if pk is None:
        print("no data segment seen on the TUN"); sys.exit(1)
    nxt = pk[TCP].seq + 1
    t0 = time.time()
    for i in range(n):
        send(IP(src=TUN4, dst=SRV4) / TCP(sport=lport, dport=9000, flags="A", seq=(nxt + 2 + 2 * i) % (1 << 32),
                                          ack=pk[TCP].ack, window=65535) / Raw(b"z"))
    print("%d segments in %.2f s" % (n, time.time() - t0), flush=True)
    time.sleep(2)                   # held open while loft's RSS is read
    s.close()

elif case == "udpflood":              # udpflood N: N datagrams from distinct source ports, closed port
    n = int(args[0])
    t0 = time.time()
    for i in range(n):
        send(IP(src=TUN4, dst=SRV4) / UDP(sport=20000 + i, dport=7) / Raw(b"flood"))
    print("%d datagrams in %.2f s" % (n, time.time() - t0))

elif case == "upload":                # upload MiB: to the sha256 sink; prints the local port first
    mib = int(args[0])
    s = socket.create_connection((SRV4, 9000), timeout=20)
    print(s.getsockname()[1], flush=True)
    h = hashlib.sha256()
    chunk = os.urandom(1 << 20)
    t0 = time.time()
    for i in range(mib):
        s.sendall(chunk)
        h.update(chunk)
        time.sleep(0.05)            # spread over about a second, so the battery lands mid-transfer
    s.shutdown(socket.SHUT_WR)
    s.settimeout(20)
    ans = b""
    while True:
        d = s.recv(4096)
        if not d: break
        ans += d
    ok = ans.split()[0].decode() == h.hexdigest() if ans else False
    print("upload %d MiB in %.2f s: %s" % (mib, time.time() - t0, "sha256 intact" if ok else "MISMATCH %r" % ans[:80]))
    sys.exit(0 if ok else 1)
EOF
hp() { in_app env PYTHONPATH="$LOFT_REPO/Tests/tools" timeout 90 python3 -W ignore "$T_DIR/hostile.py" "$SRV4" "$SRV6" 198.18.0.1 fd00:18::1 "$@"; }
battery() { in_app timeout 90 python3 -W ignore "$LOFT_REPO/Tests/tools/hostile_battery.py" \
    --src4 198.18.0.1 --dst4 "$SRV4" --src6 fd00:18::1 --dst6 "$SRV6" "$@"; }

IDLE_RSS=$(rss_kib "$LOFT_PID")

# --- 1. out-of-order flood (first: on a fresh heap, growth shows in RSS) --------------------
before=$(rss_kib "$LOFT_PID")
hp reorder 16000 >"$T_DIR/reorder.out" 2>&1 &
RP=$!
for i in $(seq 600); do grep -q segments "$T_DIR/reorder.out" && break; kill -0 $RP 2>/dev/null || break; sleep 0.1; done
sleep 0.3
after=$(rss_kib "$LOFT_PID")
wait $RP
out=$(cat "$T_DIR/reorder.out")
capped=$(jq_py 'dict(o["drops"]).get("tcp-reorder-cap", 0)')
note "reorder flood: $(echo "$out" | tail -1); RSS $before -> $after KiB; tcp-reorder-cap drops: $capped"
if [ "${capped:-0}" -ge 15000 ] && [ $((after - before)) -lt 1024 ]; then
    pass reorder-flood-bounded
else
    fail reorder-flood-bounded "$(echo "$out" | tail -1); RSS grew $((after - before)) KiB, $capped capped"
fi

# --- 2. a SYN scan -------------------------------------------------------------------------
N=20000
out=$(hp synscan $N 2>&1)
sleep 1.5
hs=$(jq_py 'o["tcp_flows"]["handshaking"] + o["tcp_flows"]["connecting"]')
est=$(established_at_srv)
reset=$(jq_py 'dict(o["totals"]).get("handshakes-reset-by-app", 0)')
note "syn scan: $out; 1.5 s later: $hs flows still opening, $est connections at nginx, $reset handshakes reset by the app"
if [ "${hs:-99999}" -le 50 ] && [ "${est:-99999}" -le 50 ] && [ "${reset:-0}" -ge $((N * 9 / 10)) ]; then
    pass syn-scan-frees-flows
else
    fail syn-scan-frees-flows "$hs flows opening, $est connections held at the server, $reset reset by the app"
fi

# --- 3. one bogus ACK during a download ----------------------------------------------------
BIG=$(stat -c %s "$T_DIR/www/big")
out=$(hp bogus-ack "$BIG" "$(sha_of "$T_DIR/www/big")" 2>&1)
rc=$?
bad=$(jq_py 'dict(o["drops"]).get("tcp-bad-ack", 0)')
note "bogus ACK: $(echo "$out" | tail -1); tcp-bad-ack drops: $bad"
if [ $rc -eq 0 ] && [ "${bad:-0}" -ge 1 ]; then pass bogus-ack-no-stall; else fail bogus-ack-no-stall "$(echo "$out" | tail -2 | tr '\n' '|') (tcp-bad-ack $bad)"; fi

# --- 4. crafted packets while an upload runs -----------------------------------------------
drops_before=$(jq_py 'sum(v for k, v in o["drops"].items())')
hp upload 20 >"$T_DIR/upload.out" 2>&1 &
UP=$!
for i in $(seq 50); do [ -s "$T_DIR/upload.out" ] && break; sleep 0.1; done
LIVE=$(head -1 "$T_DIR/upload.out")
craft=$(battery --random 10000 --live "${LIVE:-40000}" --seed 7 2>&1)
wait $UP; urc=$?
drops=$(jq_py '", ".join("%s %d" % (k, v) for k, v in o["drops"].items() if v)')
drops_after=$(jq_py 'sum(v for k, v in o["drops"].items())')
note "crafted: $(echo "$craft" | tail -1); $(tail -1 "$T_DIR/upload.out")"
note "drops by reason now: $drops"
if [ $urc -eq 0 ] && ! loft_died && [ "${drops_after:-0}" -gt "${drops_before:-0}" ]; then
    pass crafted-during-transfer
else
    fail crafted-during-transfer "upload exit $urc: $(tail -1 "$T_DIR/upload.out"); $(echo "$craft" | tail -1)"
fi

# --- 5. a UDP flood from 10,000 source ports -----------------------------------------------
out=$(hp udpflood 10000 2>&1)
peak_assoc=$(jq_py 'o["udp_associations"]')
peak_rss=$(rss_kib "$LOFT_PID")
sent=$(jq_py 'dict(o["totals"]).get("udp-port-unreachable-sent", 0)')
limited=$(jq_py 'dict(o["totals"]).get("icmp-rate-limited", 0)')
sleep 4
left=$(jq_py 'o["udp_associations"]')
note "udp flood: $(echo "$out" | tail -1); $peak_assoc associations, RSS $peak_rss KiB; port unreachable sent $sent, rate-limited $limited; 4 s later $left associations"
if [ "${left:-1}" -eq 0 ] && [ "${sent:-0}" -ge 50 ] && [ "${limited:-0}" -ge 1 ]; then
    pass udp-flood-bounded
else
    fail udp-flood-bounded "$left associations left, $sent port unreachable sent, $limited rate-limited"
fi

# --- 6. nmap SYN and UDP scans, 2,000 short connections; new flows served right after -------
t0=$(now_ms)
syn=$(in_app nmap -n -Pn -sS -p 1-2000 -T4 --max-retries 1 "$SRV4" 2>&1 | grep -E "^[0-9]+/tcp|Not shown|done")
udp=$(in_app nmap -n -Pn -sU -p 1-300 -T4 --max-retries 1 "$SRV4" 2>&1 | grep -E "Not shown|closed|done")
in_app python3 -c '
import socket, sys
ok = 0
for i in range(2000):
    s = socket.create_connection((sys.argv[1], 80), timeout=5)
    s.sendall(b"GET /small HTTP/1.0\r\nHost: x\r\n\r\n")
    d = b""
    while True:
        c = s.recv(65536)
        if not c: break
        d += c
    ok += d.startswith(b"HTTP/1.1 200")
    s.close()
print("%d of 2000 short connections answered" % ok)' "$SRV4" >"$T_DIR/short.out" 2>&1
after_ok=$(in_app curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://$SRV4/small")
note "nmap -sS 1-2000: $(echo "$syn" | tr '\n' ' ' | cut -c1-160)"
note "nmap -sU 1-300: $(echo "$udp" | tr '\n' ' ' | cut -c1-160)"
note "$(cat "$T_DIR/short.out"); a new request right after: HTTP $after_ok; $(( $(now_ms) - t0 )) ms for the three"
if echo "$syn" | grep -q '^80/tcp *open' && echo "$udp" | grep -qi 'closed' && grep -q '^2000 of 2000' "$T_DIR/short.out" \
    && [ "$after_ok" = 200 ] && ! loft_died; then
    pass scans-and-churn-served
else
    fail scans-and-churn-served "syn: $(echo "$syn" | head -2 | tr '\n' '|'); udp: $(echo "$udp" | head -2 | tr '\n' '|'); $(cat "$T_DIR/short.out"); after: $after_ok"
fi

# --- 7. memory back after the floods -------------------------------------------------------
sleep 1
final=$(rss_kib "$LOFT_PID")
trims=$(jq_py 'dict(o["totals"]).get("memory-trims", 0)')
note "RSS: idle $IDLE_RSS KiB, after the floods (3 s later) $final KiB, memory-trims $trims"
# Both readings must exist and loft must still run: a dead loft reads as no RSS, which is no
# "back near idle".
if [ -n "$IDLE_RSS" ] && [ -n "$final" ] && ! loft_died && [ $((final - IDLE_RSS)) -lt 6144 ]; then pass rss-back-after-floods
else fail rss-back-after-floods "RSS idle '$IDLE_RSS' KiB, after '$final' KiB, loft $(loft_died && echo dead || echo running)"; fi

loft_stop_clean loft-exit-clean
finish
