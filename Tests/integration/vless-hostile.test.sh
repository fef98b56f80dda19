#!/usr/bin/env bash
# The vless outbound under load that hurt it (issue 28), against Debian's v2ray (4.34) in the
# srv namespace, as vless.test.sh sets it up:
#  - udp-burst: a cold burst of 25 datagrams of 1,200 bytes to a UDP echo through v2ray, three
#    times (a new app socket, so a new association and TLS connection, each time): the echoes
#    come back in frames that span TLS records; nearly all must arrive, and a later probe too.
#  - unread-rss: UNREAD_FLOWS (300) TCP flows to a server that sends UNREAD_BYTES (2 MiB) at
#    once each, the app reading none of it: loft's RSS (VmRSS) must stay under a bound (the
#    read budget, docs/vless.md); reader-beside-unread: one more flow, read, gets its bytes
#    intact within 10 s meanwhile; unread-intact: then the app reads every flow to its end and
#    each one's bytes arrive intact (SHA-256).
. "$(dirname "$0")/lib.sh"

command -v v2ray >/dev/null || die "v2ray not installed (scripts/deps.sh)"

UUID=5783a3e7-e373-51cd-8642-c83782b807c5
VPORT=8443
UECHO=9003                       # UDP echo (python, in srv)
FAST=9004                        # TCP: sends the file fast.bin at once, then closes
UNREAD_FLOWS=${UNREAD_FLOWS:-300}
UNREAD_BYTES=${UNREAD_BYTES:-$((2 * 1048576))}
# RSS bound for unread-rss, MiB over loft's RSS before the flows: what the flows may hold
# (twice the 16 MiB read budget) plus 0.25 MiB per flow (its TLS and lwIP state, the TLS
# input buffer's pages, one record past its share, the allocator's slack): 107 MiB for 300
# flows. Measured (docs/vless.md): +188 MiB before the budget, +78..80 MiB with it.
RSS_BOUND_MIB=${RSS_BOUND_MIB:-$((32 + UNREAD_FLOWS / 4))}

topo_up
start_v2ray $UUID $VPORT
head -c $UNREAD_BYTES /dev/urandom >"$T_DIR/fast.bin"
chmod 644 "$T_DIR/fast.bin"
FAST_SHA=$(sha_of "$T_DIR/fast.bin")

cat >"$T_DIR/servers.py" <<'EOF'
import socket, sys, threading

srv4, uecho, fast, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = open(path, "rb").read()

def echo():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    u.bind((srv4, uecho))
    while True:
        b, a = u.recvfrom(65536)
        u.sendto(b, a)

def sender(c):
    try:
        c.settimeout(120)
        c.sendall(data)
    except Exception:  # lint: ok: the test server's sender ends with its peer
        pass
    finally:
        c.close()

def serve():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((srv4, fast))
    s.listen(1024)
    while True:
        c, _ = s.accept()
        threading.Thread(target=sender, args=(c,), daemon=True).start()

threading.Thread(target=echo, daemon=True).start()
serve()
EOF
bg_in "$SRV_NS" servers python3 "$T_DIR/servers.py" "$SRV4" $UECHO $FAST "$T_DIR/fast.bin"
wait_listen "$SRV_NS" tcp $FAST || die "test servers did not start: $(tail -3 "$T_DIR/servers.log")"
wait_listen "$SRV_NS" udp $UECHO || die "udp echo did not start: $(tail -3 "$T_DIR/servers.log")"

CFG=$(loft_config vless-hostile)
sed -i '/^default: direct$/d' "$CFG"
{
    echo "control: $T_DIR/control.sock"
    echo "outbounds:"
    printf '  - { name: v, type: vless, server: "%s:%s", uuid: %s, tls: { server-name: vless.loft.test, ca: %s } }\n' \
        "$SRV4" $VPORT $UUID "$VLESS_CA"
    echo "default: v"
} >>"$CFG"

CASES="udp-burst unread-rss reader-beside-unread unread-intact stop"
require_loft "$CFG" $CASES || exit 1


# --- udp-burst ------------------------------------------------------------------------------
# Each round: a new socket sends 25 datagrams of 1,200 bytes back to back (before the TLS
# connection is up: they leave together with the request header), collects echoes for 3 s,
# then sends a probe every 0.3 s (at most 10) until one comes back. Prints "GOT PROBE".
cat >"$T_DIR/burst.py" <<'EOF'
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
sent = {}
for i in range(25):
    d = bytes([i]) * 8 + bytes((i * 7 + k) & 0xff for k in range(1192))
    sent[d] = i
    u.sendto(d, (host, port))
got = set()
end = time.time() + 3
while time.time() < end and len(got) < 25:
    u.settimeout(max(0.01, end - time.time()))
    try:
        d, _ = u.recvfrom(65536)
    except socket.timeout:
        break
    if d in sent:
        got.add(sent[d])
probe = 0
for j in range(10):
    p = b"probe-%d" % j
    u.sendto(p, (host, port))
    u.settimeout(0.3)
    try:
        while True:
            d, _ = u.recvfrom(65536)
            if d.startswith(b"probe-"):
                probe = 1
                break
    except socket.timeout:
        pass
    if probe:
        break
print(len(got), probe)
EOF
# Over veth and loopback nothing should be lost; 23 of 25 leaves room for a drop by the kernel
# or v2ray on this shared machine (UDP promises nothing) while a stalled association (0, or the
# ones before the first frame that spans two records) still fails.
results=""
ok=1
for round in 1 2 3; do
    r=$(timeout 20 ip netns exec "$APP_NS" python3 "$T_DIR/burst.py" "$SRV4" $UECHO 2>&1 | tail -1)
    results="$results round $round: ${r:-nothing};"
    set -- $r
    if [ "${1:-0}" -lt 23 ] 2>/dev/null || [ "${2:-0}" != 1 ]; then ok=0; fi
done
dropped=$("$LOFT_BIN" status --json -c "$CFG" 2>/dev/null | python3 -c '
import json, sys
o = next(x for x in json.load(sys.stdin)["outbounds"] if x["name"] == "v")
print(o.get("counters", {}).get("udp-dropped", 0))' 2>/dev/null)
note "udp-burst (echoes of 25, probe back):$results udp-dropped=$dropped"
expect udp-burst "[ $ok = 1 ]" "echoes of 25 and probe (1: came back):$results udp-dropped=$dropped"

# --- unread-rss, unread-intact ---------------------------------------------------------------
# The client opens UNREAD_FLOWS connections (the server starts sending at once), writes
# "connected N" to its status file, waits for the file "go" (at most 120 s), then reads every
# connection to its end and prints how many got the file's SHA-256.
cat >"$T_DIR/unread.py" <<'EOF'
import hashlib, os, selectors, socket, sys, time
host, port, n, want, tdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
socks = []
for i in range(n):
    try:
        socks.append(socket.create_connection((host, port), timeout=10))
    except OSError as e:
        print("connect %d failed: %s" % (i, e), file=sys.stderr)
open(tdir + "/unread.status", "w").write("connected %d\n" % len(socks))
end = time.time() + 120
while not os.path.exists(tdir + "/go") and time.time() < end:
    time.sleep(0.1)
sel = selectors.DefaultSelector()
hashes = {}
for s in socks:
    s.setblocking(False)
    hashes[s] = hashlib.sha256()
    sel.register(s, selectors.EVENT_READ)
good = 0
end = time.time() + 120
while hashes and time.time() < end:
    for key, _ in sel.select(timeout=1):
        s = key.fileobj
        try:
            b = s.recv(1 << 20)
        except BlockingIOError:
            continue
        except OSError as e:
            print("recv: %s" % e, file=sys.stderr)
            b = b""
        if b:
            hashes[s].update(b)
            continue
        if hashes[s].hexdigest() == want:
            good += 1
        sel.unregister(s)
        s.close()
        del hashes[s]
print(good)
EOF
rm -f "$T_DIR/go" "$T_DIR/unread.status"
rss0=$(rss_kib "$LOFT_PID")
timeout 300 ip netns exec "$APP_NS" python3 "$T_DIR/unread.py" "$SRV4" $FAST $UNREAD_FLOWS "$FAST_SHA" "$T_DIR" \
    >"$T_DIR/unread.out" 2>"$T_DIR/unread.err" &
UPID=$!
for _ in $(seq 600); do [ -s "$T_DIR/unread.status" ] && break; sleep 0.1; done
connected=$(awk '{print $2}' "$T_DIR/unread.status" 2>/dev/null)
# Every flow is connected; the servers send, nobody reads. Take the highest RSS while the
# buffers fill: sampled every 0.5 s until it has not grown for 3 s (at most 30 s).
peak=$(rss_kib "$LOFT_PID"); still=0
for _ in $(seq 60); do
    sleep 0.5
    r=$(rss_kib "$LOFT_PID")
    if [ "${r:-0}" -gt "$peak" ]; then peak=$r; still=0; else still=$((still + 1)); fi
    [ $still -ge 6 ] && break
done
grown=$(((peak - rss0) / 1024))
note "unread-rss: $connected flows; loft RSS ${rss0} KiB before, peak ${peak} KiB (+${grown} MiB), bound +$RSS_BOUND_MIB MiB"
expect unread-rss "[ '${connected:-0}' = $UNREAD_FLOWS ] && [ $grown -lt $RSS_BOUND_MIB ]" \
    "$connected of $UNREAD_FLOWS flows connected; RSS grew ${grown} MiB (${rss0} -> ${peak} KiB), bound $RSS_BOUND_MIB MiB"
# Beside them (the sum over the budget, the unread flows stopped), a flow whose app reads
# still gets its 2 MiB, intact, in a few seconds: the flows that hold the most wait, not it.
cat >"$T_DIR/reader.py" <<'EOF2'
import hashlib, socket, sys, time
t0 = time.time()
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
h = hashlib.sha256()
n = 0
while True:
    b = s.recv(1 << 20)
    if not b:
        break
    h.update(b)
    n += len(b)
print(h.hexdigest(), n, int((time.time() - t0) * 1000))
EOF2
read -r rsha rbytes rms < <(timeout 60 ip netns exec "$APP_NS" python3 "$T_DIR/reader.py" "$SRV4" $FAST 2>&1)
note "reader-beside-unread: $rbytes bytes in $rms ms"
expect reader-beside-unread "[ '$rsha' = '$FAST_SHA' ] && [ '${rms:-99999}' -lt 10000 ]" \
    "sha $rsha, $rbytes bytes in $rms ms (want $FAST_SHA within 10 s)"
touch "$T_DIR/go"
wait $UPID
good=$(tail -1 "$T_DIR/unread.out")
expect unread-intact "[ '$good' = '$UNREAD_FLOWS' ] && ! loft_died" \
    "$good of $UNREAD_FLOWS flows got the $UNREAD_BYTES bytes intact ($(head -3 "$T_DIR/unread.err" | tr '\n' ' '))"

loft_stop_clean stop
finish
