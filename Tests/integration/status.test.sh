#!/usr/bin/env bash
# Runtime status: counters read back exactly over the control socket (JSON) and the metrics
# endpoint (curl + the prometheus-client parser) after known traffic; `loft status --watch`
# under tmux at 80 columns; the socket refuses other users and answers malformed requests
# with an error; 200 idle control clients do not lock `loft status` out, and a storm of
# status, flows and /metrics requests over 8,000 live flows leaves a download its speed.
# Needs root (namespaces, a second user via setpriv).
. "$(dirname "$0")/lib.sh"

topo_up
make_files 20
start_nginx 1 1024
BIG_SHA=$(sha_of "$T_DIR/www/big")

EXT_PORT=$((31000 + T_ID % 10000))
PEER_PORT=$((EXT_PORT + 10000))
METRICS_PORT=$((20000 + T_ID % 10000))
SOCK=$T_DIR/control.sock
loft_config status-base >/dev/null
sed -e "s/^bridge: off/bridge: { peer-port: $PEER_PORT, extension-port: $EXT_PORT }/" \
    "$T_DIR/status-base.yaml" >"$T_DIR/status.yaml"
printf 'control: %s\nmetrics: 127.0.0.1:%s\n' "$SOCK" "$METRICS_PORT" >>"$T_DIR/status.yaml"
CFG=$T_DIR/status.yaml

CASES="status-placeholders status-counters-exact metrics-counters-exact status-flows-list
status-watch-tmux control-refuses-other-users control-malformed-request control-idle-clients-evicted
control-storm-bounded loft-exit-clean"
require_loft "$CFG" $CASES || finish

jget() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {"d": d}))' "$1"; }

# Before any bridge traffic: the bridge row exists with placeholders.
out=$("$LOFT_BIN" status -c "$CFG")
if echo "$out" | grep -q '^bridge   up' && echo "$out" | grep '^bridge' | grep -q ' - ' && echo "$out" | grep -q '^FLOWS'; then
    pass status-placeholders
else
    fail status-placeholders "$(echo "$out" | head -12 | tr '\n' '|')"
fi

# Known traffic over the bridge from a raw peer (nothing else writes to that socket):
# N valid UDP packets from K source ports, M malformed datagrams.
cat >"$T_DIR/peer.py" <<'EOF'
import socket, struct, sys
ext, peer, n, k, m, dst = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", peer))
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
src = bytes([198, 18, 2, 1]); d = socket.inet_aton(dst)
total = 0
for i in range(n):
    payload = b"x" * (10 + i % 50)
    sport = 40000 + i % k
    udp = struct.pack("!HHHH", sport, 9, 8 + len(payload), 0) + payload
    c = csum(src + d + struct.pack("!BBH", 0, 17, len(udp)) + udp) or 0xffff
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i, 0, 64, 17, 0, src, d)
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    s.sendto(h + udp, ("127.0.0.1", ext)); total += len(h) + len(udp)
for i in range(m):
    s.sendto(b"\x55" + b"\0" * 30, ("127.0.0.1", ext))
print(total)
EOF
N=300; K=7; M=11
bytes=$(python3 "$T_DIR/peer.py" "$EXT_PORT" "$PEER_PORT" $N $K $M "$SRV4")
# And 5 TCP flows from the TUN.
for i in 1 2 3 4 5; do in_app curl -s -o /dev/null --max-time 10 "http://$SRV4/small"; done
sleep 0.5

j=$(json)
got=$(echo "$j" | jget '"%d %d %d %d %d" % ([i for i in d["inputs"] if i["name"]=="bridge"][0]["packets_in"], [i for i in d["inputs"] if i["name"]=="bridge"][0]["bytes_in"], [i for i in d["inputs"] if i["name"]=="bridge"][0]["drops"].get("bad-version", 0), d["totals"]["udp-associations-opened"], d["totals"]["tcp-flows-opened"])')
want="$((N + M)) $bytes $M $K 5"
# bytes_in counts the valid packets plus the malformed datagrams (31 bytes each).
want="$((N + M)) $((bytes + 31 * M)) $M $K 5"
if [ "$got" = "$want" ]; then pass status-counters-exact; else fail status-counters-exact "got '$got' want '$want'"; fi

cat >"$T_DIR/prom.py" <<'EOF'
import sys
from prometheus_client.parser import text_string_to_metric_families
v = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        v[(s.name, tuple(sorted(s.labels.items())))] = s.value
def g(name, **labels): return int(v[(name, tuple(sorted(labels.items())))])
print(g("loft_input_packets_total", input="bridge", direction="in"),
      g("loft_input_bytes_total", input="bridge", direction="in"),
      g("loft_input_drops_total", input="bridge", reason="bad-version"),
      g("loft_udp_associations_opened_total"),
      g("loft_tcp_flows_opened_total"))
EOF
got=$(curl -s --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics" | python3 "$T_DIR/prom.py" 2>&1)
if [ "$got" = "$want" ]; then pass metrics-counters-exact; else fail metrics-counters-exact "got '$got' want '$want'"; fi

# Live flows: the UDP associations are listed (idle timeout 60 s), sorted by bytes.
fl=$("$LOFT_BIN" status -c "$CFG" --flows --json)
n=$(echo "$fl" | jget 'len([f for f in d if f["network"]=="udp"])')
sorted=$(echo "$fl" | jget 'all(d[i]["bytes_up"]+d[i]["bytes_down"] >= d[i+1]["bytes_up"]+d[i+1]["bytes_down"] for i in range(len(d)-1))')
if [ "$n" = "$K" ] && [ "$sorted" = True ]; then pass status-flows-list; else fail status-flows-list "udp flows $n (want $K), sorted $sorted"; fi

# --watch in a real terminal (tmux, 80x30): two captures a second apart, figures move.
SESSION=loft-watch-$T_ID
on_cleanup "tmux kill-session -t $SESSION"
tmux new-session -d -s "$SESSION" -x 80 -y 30 "$LOFT_BIN status -c $CFG --watch"
sleep 1.5
in_app curl -s -o /dev/null "http://$SRV4/small"
a=$(tmux capture-pane -p -t "$SESSION")
sleep 1.2
in_app curl -s -o /dev/null "http://$SRV4/small"
sleep 1.2
b=$(tmux capture-pane -p -t "$SESSION")
wide=$(printf '%s\n%s\n' "$a" "$b" | awk 'length($0) > 80' | wc -l)
if [ "$a" != "$b" ] && echo "$b" | grep -q '^INPUT' && echo "$b" | grep -q '^TOTALS' && [ "$wide" -eq 0 ]; then
    pass status-watch-tmux
else
    fail status-watch-tmux "changed: $([ "$a" != "$b" ] && echo yes || echo no), lines over 80: $wide; $(echo "$b" | head -3 | tr '\n' '|')"
fi
tmux kill-session -t "$SESSION" 2>/dev/null

# Other users: the socket is 0600 root; nobody cannot connect.
mode=$(stat -c %a "$SOCK")
other=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$LOFT_BIN" status -c "$CFG" 2>&1); orc=$?
if [ "$mode" = 600 ] && [ $orc -ne 0 ] && echo "$other" | grep -qi 'permission denied'; then
    pass control-refuses-other-users
else
    fail control-refuses-other-users "mode $mode, exit $orc: $other"
fi

# Malformed requests: an error line each, and loft keeps answering.
r1=$(printf 'no-such-command\n' | socat -t 2 - "UNIX-CONNECT:$SOCK")
r2=$(head -c 5000 /dev/urandom | tr -d '\n' | socat -t 2 - "UNIX-CONNECT:$SOCK")
r3=$(printf 'status yaml\n' | socat -t 2 - "UNIX-CONNECT:$SOCK")
if [[ $r1 == error* ]] && [[ $r2 == error* ]] && [[ $r3 == error* ]] && "$LOFT_BIN" status -c "$CFG" >/dev/null; then
    pass control-malformed-request
else
    fail control-malformed-request "'${r1:0:60}' '${r2:0:60}' '${r3:0:60}'"
fi

# 200 idle control clients (more than the 32 slots): the oldest idle ones make room, and
# `loft status` answers.
cat >"$T_DIR/idle.py" <<'EOF'
import socket, sys, time
held = []
for i in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[1]); held.append(s)
    except OSError:
        pass
print(len(held), flush=True)
time.sleep(float(sys.argv[3]))
EOF
python3 "$T_DIR/idle.py" "$SOCK" 200 4 >"$T_DIR/idle.out" &
IDLE=$!
for i in $(seq 50); do [ -s "$T_DIR/idle.out" ] && break; sleep 0.1; done
out=$("$LOFT_BIN" status -c "$CFG" 2>&1); rc=$?
evicted=$(json | jget 'd["totals"].get("control-evicted-idle", 0)')
wait $IDLE
note "200 idle control clients: loft status exit $rc, $evicted idle clients evicted"
if [ $rc -eq 0 ] && echo "$out" | grep -q '^TOTALS' && [ "${evicted:-0}" -ge 150 ]; then
    pass control-idle-clients-evicted
else
    fail control-idle-clients-evicted "exit $rc: $(echo "$out" | head -2 | tr '\n' '|'), $evicted evicted"
fi

# A storm: 8,000 UDP flows opened, then 20 control clients asking for status, flows and metrics
# as fast as they can, and /metrics scraped in a loop, while the app downloads 20 MiB. A burst
# of datagrams can overflow the TUN's queue (4,509 to 6,916 of the 8,000 made flows in single
# bursts): the burst is sent again, at most three times, until 6,000 flows are open (a port that
# already has its association reuses it).
burst() {
    in_app python3 -c '
import socket, sys
for i in range(8000):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("", 30000 + i)); s.sendto(b"x", (sys.argv[1], 9)); s.close()' "$SRV4"
    sleep 0.5
}
for round in 1 2 3; do
    burst
    [ "$(json | jget 'd["udp_associations"]')" -ge 6000 ] 2>/dev/null && break
done
cat >"$T_DIR/storm.py" <<'EOF'
import socket, sys, time
path, secs, req = sys.argv[1], float(sys.argv[2]), sys.argv[3].encode() + b"\n"
end, n = time.time() + secs, 0
while time.time() < end:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path); s.sendall(req)
        while s.recv(1 << 16): pass
        n += 1
    except OSError:
        pass
    s.close()
print(n)
EOF
# dl: one 20 MiB download's milliseconds, or "failed" (SHA-256 checked: a failed download is no
# speed, and any one of them fails the case).
dl() {
    local t0 got; t0=$(now_ms)
    got=$(in_app curl -sf --max-time 30 "http://$SRV4/big" | sha256sum | cut -d' ' -f1)
    if [ "$got" = "$BIG_SHA" ]; then echo $(( $(now_ms) - t0 )); else echo failed; fi
}
quiet_all=$(dl; dl; dl); quiet=$(echo "$quiet_all" | sort -n | sed -n 2p)
assoc=$(json | jget 'd["udp_associations"]')
pids=()
for i in $(seq 20); do
    case $((i % 3)) in 0) r=flows ;; 1) r="status json" ;; 2) r=metrics ;; esac
    python3 "$T_DIR/storm.py" "$SOCK" 6 "$r" >"$T_DIR/storm.$i" 2>&1 & pids+=($!)
done
( end=$(( $(date +%s) + 6 )); n=0; while [ "$(date +%s)" -lt $end ]; do
    curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$METRICS_PORT/metrics"; n=$((n + 1)); done; echo $n >"$T_DIR/scrapes" ) &
pids+=($!)
sleep 1
storm_all=$(dl; dl; dl); storm=$(echo "$storm_all" | sort -n | sed -n 2p)
wait "${pids[@]}"
answers=$(cat "$T_DIR"/storm.* | awk '{s += $1} END {print s}')
cached=$(json | jget 'd["totals"].get("control-cached-answers", 0)')
note "storm over $assoc UDP flows: 20 MiB download $quiet ms quiet, $storm ms during the storm (medians of 3); $answers control answers ($cached from the cache), $(cat "$T_DIR/scrapes") /metrics scrapes in 6 s"
if [[ "$quiet_all $storm_all" != *failed* ]] && [ "${storm:-99999}" -le $((quiet * 3 + 500)) ] && [ "${answers:-0}" -gt 0 ] && [ "${assoc:-0}" -ge 5000 ]; then
    pass control-storm-bounded
else
    fail control-storm-bounded "downloads $(echo $storm_all) ms in the storm vs $(echo $quiet_all) ms quiet ($assoc flows, $answers answers)"
fi

loft_stop_clean loft-exit-clean
finish
