#!/usr/bin/env bash
# TCP through loft: 50 MiB downloads and uploads over IPv4 and IPv6 (SHA-256 compared on both
# ends), half-close both families, 200 concurrent transfers, an 8000-byte UDP datagram each way.
# LOFT_TRANSFER_MTU (1500) sets the TUN's and the veths' MTU; above 1500 also: the app's sockets
# use the large MSS (large-mtu.test.sh runs this at 65535). The TUN's offloads are on (the
# default, `offload-state` checks that large segments crossed both ways) unless
# LOFT_TEST_OFFLOAD=off (offload-off.test.sh: the same bytes without them).
. "$(dirname "$0")/lib.sh"

MTU=${LOFT_TRANSFER_MTU:-1500}
topo_up "$MTU"
make_files 50
head -c $((50 * 1048576)) /dev/urandom >"$T_DIR/up"
start_nginx 1 4096
start_sink

CASES="download-v4-50MiB download-v6-50MiB upload-v4-50MiB upload-v6-50MiB half-close-v4
half-close-v6 concurrent-200 udp-8000-each-way udp-gso-datagrams offload-state memory-back-when-calm loft-exit-clean"
[ "$MTU" -gt 1500 ] && CASES+=" large-mss-v4 large-mss-v6"
CFG=$(loft_config transfer mtu="$MTU")
echo "control: $T_DIR/control.sock" >>"$CFG"
require_loft "$CFG" $CASES || finish

IDLE_RSS=$(rss_kib "$LOFT_PID")
BIG_SHA=$(sha_of "$T_DIR/www/big")
UP_SHA=$(sha_of "$T_DIR/up")

DL_SECONDS=180 UL_SECONDS=180       # lib.sh's download and upload: 50 MiB each, at most 3 minutes

halfclose() {       # half-close NAME HOST: a short request, FIN, the reply still arrives
    local name=$1 host=$2 want reply
    want=$(printf 'half-close probe\n' | sha256sum | cut -d' ' -f1)
    reply=$(in_app timeout 30 python3 "$LOFT_REPO/Tests/tools/halfclose.py" "$host" 9000 - 2>&1)
    if [ "${reply%% *}" = "$want" ]; then pass "$name"; else fail "$name" "reply '${reply:0:120}' != $want"; fi
}

download download-v4-50MiB "http://$SRV4/big"
download download-v6-50MiB "http://[$SRV6]/big"
upload upload-v4-50MiB "$SRV4"
upload upload-v6-50MiB "$SRV6"
halfclose half-close-v4 "$SRV4"
halfclose half-close-v6 "$SRV6"

# The TUN's offloads as `loft status` shows them, and (when on, below MTU 65535) large segments
# read and written by the transfers above: 64 KiB segments crossed the smaller device both ways.
"$LOFT_BIN" status -c "$CFG" --json >"$T_DIR/status.json" 2>&1
r=$(python3 - "$T_DIR/status.json" "${LOFT_TEST_OFFLOAD:-auto}" "$MTU" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
tun = [i for i in d["inputs"] if i["name"] == "tun"][0]
c = dict(tun.get("counters", {}))
want_on = sys.argv[2] != "off"
if want_on:
    # At MTU 65535 every segment fits the device: none is large.
    large = int(sys.argv[3]) >= 65535 or (c.get("large-segments-in", 0) > 0 and c.get("large-segments-out", 0) > 0)
    ok = "offload on" in tun["detail"] and "large-segments-in" in c and large
else:
    ok = "offload off (config)" in tun["detail"] and "large-segments-in" not in c
print(("ok " if ok else "bad ") + tun["detail"] + " " + json.dumps(c))
PYEOF
)
note "offload-state: $r"
case $r in ok*) pass offload-state ;; *) fail offload-state "$r" ;; esac

# An 8000-byte datagram each way: to a UDP echo in srv and back (fragments at MTU 1500).
bg_in "$SRV_NS" udpecho python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((__import__("sys").argv[1], 9003))
while True:
    d, a = s.recvfrom(65535); s.sendto(d, a)' "$SRV4"
wait_listen "$SRV_NS" udp 9003
r=$(in_app python3 -c '
import socket, sys, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
d = os.urandom(8000); s.sendto(d, (sys.argv[1], 9003))
r, _ = s.recvfrom(65535); print("same" if r == d else "differs (%d bytes)" % len(r))' "$SRV4" 2>&1 | tail -1)
if [ "$r" = same ]; then pass udp-8000-each-way; else fail udp-8000-each-way "$r"; fi

# UDP GSO from the app (UDP_SEGMENT, as QUIC stacks send): 12,000 bytes in 1,200-byte datagrams,
# one send. With the TUN's USO the kernel hands loft one super-datagram, which loft cuts; each
# datagram comes back from the echo as it was sent.
r=$(in_app python3 -c '
import socket, sys, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.setsockopt(socket.IPPROTO_UDP, 103, 1200)   # UDP_SEGMENT
d = os.urandom(12000); s.sendto(d, (sys.argv[1], 9003))
got = []
try:
    while len(got) < 10: got.append(s.recvfrom(65535)[0])
except socket.timeout:
    pass
same = len(got) == 10 and sorted(got) == sorted(d[i:i + 1200] for i in range(0, 12000, 1200))
print("same" if same else "differs: %d datagrams, sizes %s" % (len(got), sorted(set(map(len, got)))))' "$SRV4" 2>&1 | tail -1)
uso=$("$LOFT_BIN" status -c "$CFG" --json | python3 -c '
import json, sys
t = [i for i in json.load(sys.stdin)["inputs"] if i["name"] == "tun"][0]
print("%s %s" % ("uso4" in t["detail"], t.get("counters", {}).get("large-datagrams-in", 0)))')
note "udp-gso-datagrams: $r; TUN offers USO / super-datagrams cut: $uso"
case "$r $uso" in
    "same True 0") fail udp-gso-datagrams "the TUN has USO but no super-datagram was read" ;;
    same*) pass udp-gso-datagrams ;;
    *) fail udp-gso-datagrams "$r" ;;
esac

if [ "$MTU" -gt 1500 ]; then
    # The app's socket uses an MSS that fits the MTU (ss shows it during a download).
    for v in 4 6; do
        [ $v = 4 ] && url="http://$SRV4/big" || url="http://[$SRV6]/big"
        in_app curl -gs --max-time 60 -o /dev/null --limit-rate 20M "$url" &
        cp=$!
        sleep 0.5
        mss=$(in_app ss -tin state established "( dport = :80 )" | grep -o ' mss:[0-9]*' | head -1 | cut -d: -f2)
        wait $cp
        want=$(( MTU - (v == 4 ? 40 : 60) ))
        [ "$want" -gt 65495 ] && want=65495
        note "large-mss-v$v: the app's socket has mss ${mss:-?} (MTU $MTU)"
        if [ "${mss:-0}" -gt 1460 ] && [ "${mss:-0}" -ge $((want - 100)) ]; then pass large-mss-v$v; else fail large-mss-v$v "mss '${mss}' (want about $want)"; fi
    done
fi

# 200 transfers at once: 256 KiB each from the rate-limited /slow/ (128 KiB/s, so each takes
# about 2 s and all of them overlap), half over IPv4 and half over IPv6, all hashes checked.
mkdir -p "$T_DIR/c"
t0=$(now_ms)
in_app bash -c '
    dir=$1 v4=$2 v6=$3
    for i in $(seq 0 199); do
        if [ $((i % 2)) -eq 0 ]; then host=$v4; else host="[$v6]"; fi
        curl -gsS --max-time 90 -o "$dir/$i" "http://$host/slow/f$((i % 8))" 2>"$dir/$i.err" &
    done
    wait' _ "$T_DIR/c" "$SRV4" "$SRV6"
bad=0; first=
for i in $(seq 0 199); do
    if [ "$(sha_of "$T_DIR/c/$i" 2>/dev/null)" != "$(sha_of "$T_DIR/www/f$((i % 8))")" ]; then
        bad=$((bad + 1))
        [ -z "$first" ] && first="#$i: $(cat "$T_DIR/c/$i.err" 2>/dev/null | tail -1) ($(stat -c %s "$T_DIR/c/$i" 2>/dev/null || echo no) bytes)"
    fi
done
if [ $bad -eq 0 ]; then
    pass concurrent-200; note "concurrent-200: $(( $(now_ms) - t0 )) ms"
else
    fail concurrent-200 "$bad of 200 transfers wrong or failed; first: $first"
fi

# Transfers keep freed memory with malloc (no heap shrink and regrow per segment); once the
# stack has been calm for 5 s after a burst it is given back (memory-trims).
peak=$(awk '/^VmHWM/{print $2}' "/proc/$LOFT_PID/status")
trims=0
for _ in $(seq 1 24); do
    trims=$("$LOFT_BIN" status -c "$CFG" --json | python3 -c 'import json,sys; print(dict(json.load(sys.stdin)["totals"]).get("memory-trims", 0))')
    [ "$trims" -gt 0 ] && break
    sleep 0.5
done
final=$(rss_kib "$LOFT_PID")
note "memory: RSS idle $IDLE_RSS KiB, peak $peak KiB, after the calm $final KiB, memory-trims $trims"
if [ "$trims" -gt 0 ] && [ $((final - IDLE_RSS)) -lt 8192 ]; then
    pass memory-back-when-calm
else
    fail memory-back-when-calm "memory-trims $trims, RSS idle $IDLE_RSS KiB, now $final KiB"
fi

loft_stop_clean loft-exit-clean
finish
