#!/usr/bin/env bash
# `loft capture` (docs/capture.md): pcapng of what the TUN and the bridge read and write, read
# by Debian's tshark and tcpdump. A 20 MiB download through the TUN reassembled from the
# capture to the file's SHA-256; a BPF filter keeps only its packets; the bridge's packets on
# their interface with their direction; dropped packets with loft's reason (and only with
# --drops); the hostile packet battery (Tests/tools/hostile_battery.py) through the TUN, each
# drop loft counted in the capture with its reason; a flow and an outbound chosen; count and
# duration; a reader that stops reading loses packets (counted) and never slows or grows loft;
# `loft status` lists the captures running, with their packets and losses. Needs root.
. "$(dirname "$0")/lib.sh"

command -v tshark >/dev/null || die "no tshark (scripts/deps.sh installs it)"
topo_up
make_files 20
start_nginx 1 4096

. "$(dirname "$0")/bridge-peer.sh"

bridge_config capture
CFG=$T_DIR/capture.yaml
BIG_SHA=$(sha_of "$T_DIR/www/big")

CASES="capture-download-reassembled capture-tshark-clean capture-tcpdump-reads capture-bpf-filter
capture-bridge-interface-direction capture-drops-annotated capture-drops-only-when-asked capture-drops-battery
capture-flow capture-outbound capture-count capture-duration capture-stalled-reader capture-in-status
capture-refusals loft-exit-clean"
require_loft "$CFG" $CASES || finish
peer_up || die "socat peer did not come up: $(cat "$T_DIR/socat.log")"

# cap NAME ARGS...: `loft capture` in the background into $T_DIR/NAME.pcapng (its stderr in
# NAME.err); CAP_PID. stop_cap: Ctrl-C, then until it has written loft's statistics.
cap() {
    local name=$1; shift
    "$LOFT_BIN" capture -c "$CFG" -w "$T_DIR/$name.pcapng" "$@" 2>"$T_DIR/$name.err" &
    CAP_PID=$!
    register_pid "$CAP_PID"
    # Until loft has answered (the file holds its section header).
    local i
    for i in $(seq 50); do [ -s "$T_DIR/$name.pcapng" ] && return 0; kill -0 "$CAP_PID" 2>/dev/null || return 1; sleep 0.1; done
    return 1
}
stop_cap() {
    kill -INT "$CAP_PID" 2>/dev/null
    local i
    for i in $(seq 50); do kill -0 "$CAP_PID" 2>/dev/null || break; sleep 0.1; done
    wait "$CAP_PID" 2>/dev/null
}
# tshark, its stderr without its note on running as root.
ts() { tshark -r "$@" 2>"$T_DIR/tshark.raw"; local rc=$?; grep -v '^Running as user' "$T_DIR/tshark.raw" >"$T_DIR/tshark.err"; return $rc; }

# --- 1. A download through the TUN, filtered to port 80, reassembled --------------------------
cap dl --input tun --filter "tcp port 80" || fail capture-download-reassembled "loft capture did not start: $(cat "$T_DIR/dl.err")"
dl_pid=$CAP_PID
in_app ping -c 2 -i 0.2 "$SRV4" >/dev/null 2>&1     # not port 80: the filter leaves it out
cap all --input tun
all_pid=$CAP_PID
# loft status while both run (checked with the stalled reader's, capture-in-status).
"$LOFT_BIN" status -c "$CFG" --json >"$T_DIR/st-two.json" 2>&1
"$LOFT_BIN" status -c "$CFG" >"$T_DIR/st-two.txt" 2>&1
in_app ping -c 2 -i 0.2 "$SRV4" >/dev/null 2>&1
# Rate-limited (10 MB/s: a 4 MiB ring covers a 400 ms stall of the reader writing its file):
# the capture's reader keeps up, nothing lost, so the stream is whole. curl's rate limit is
# its reads: the app's TCP receive buffer (autotuned up to tcp_rmem's maximum, 32 MiB on the
# host) would still take the file in one burst faster than any reader, so the app's namespace
# caps it at 1 MiB for this download.
in_app sysctl -qw net.ipv4.tcp_rmem="4096 131072 1048576" || fail capture-download-reassembled "sysctl tcp_rmem in the app namespace"
in_app curl -gsS --max-time 60 --limit-rate 10M -o "$T_DIR/dl.out" "http://$SRV4/big" 2>"$T_DIR/curl.err"
CAP_PID=$dl_pid; stop_cap; CAP_PID=$all_pid; stop_cap
got=$(sha_of "$T_DIR/dl.out")
python3 - "$T_DIR/dl.pcapng" >"$T_DIR/dl.body.sha" 2>"$T_DIR/reasm.err" <<'PYEOF'
import hashlib, subprocess, sys
# tshark's own TCP reassembly: the server-to-client side of the first TCP stream, as hex.
out = subprocess.run(["tshark", "-r", sys.argv[1], "-q", "-z", "follow,tcp,raw,0"],
                     capture_output=True, text=True).stdout
data = b"".join(bytes.fromhex(l.strip()) for l in out.splitlines()
                if l.startswith("\t") and all(c in "0123456789abcdef" for c in l.strip()))
body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
print(hashlib.sha256(body).hexdigest(), len(body))
PYEOF
read -r cap_sha cap_len <"$T_DIR/dl.body.sha"
if [ "$got" = "$BIG_SHA" ] && [ "$cap_sha" = "$BIG_SHA" ]; then pass capture-download-reassembled
else fail capture-download-reassembled "download $got, reassembled from the capture $cap_sha ($cap_len bytes), file $BIG_SHA; $(cat "$T_DIR/dl.err" "$T_DIR/reasm.err" | tail -2)"; fi
note "download: $(cat "$T_DIR/dl.err"); capture $(stat -c %s "$T_DIR/dl.pcapng") bytes"
n=$(ts "$T_DIR/dl.pcapng" | wc -l)
if [ "$n" -gt 100 ] && [ ! -s "$T_DIR/tshark.err" ] && grep -q ' 0 lost' "$T_DIR/dl.err"; then pass capture-tshark-clean
else fail capture-tshark-clean "$n packets, tshark said: $(head -3 "$T_DIR/tshark.err" | tr '\n' '|'); $(cat "$T_DIR/dl.err")"; fi
tn=$(tcpdump -nn -r "$T_DIR/dl.pcapng" 2>"$T_DIR/tcpdump.err" | wc -l)
if [ "$tn" = "$n" ] && ! grep -qi 'error\|warning' "$T_DIR/tcpdump.err"; then pass capture-tcpdump-reads
else fail capture-tcpdump-reads "tcpdump read $tn packets (tshark $n): $(head -2 "$T_DIR/tcpdump.err" | tr '\n' '|')"; fi
other=$(ts "$T_DIR/dl.pcapng" -Y 'not tcp.port == 80' | wc -l)
icmp_all=$(ts "$T_DIR/all.pcapng" -Y icmp | wc -l)
if [ "$other" = 0 ] && [ "$icmp_all" -ge 4 ]; then pass capture-bpf-filter
else fail capture-bpf-filter "$other packets not port 80 in the filtered capture; $icmp_all ICMP in the unfiltered one (want >= 4)"; fi
note "filter 'tcp port 80': $n packets, $other others; unfiltered: $icmp_all ICMP"

# --- 2. The bridge: interface and direction ----------------------------------------------------
cap br --input bridge
in_peer curl -gsS --max-time 20 -o /dev/null "http://$SRV4/small" 2>/dev/null
in_peer curl -gsS --max-time 20 -o /dev/null "http://$SRV4/f0" 2>/dev/null
stop_cap
ts "$T_DIR/br.pcapng" -T fields -e frame.interface_name -e frame.p2p_dir -e ip.src -e ip.dst >"$T_DIR/br.txt"
in_n=$(awk -v s="$SRV4" '$1 == "bridge" && $2 == 1 && $4 == s' "$T_DIR/br.txt" | wc -l)
out_n=$(awk -v s="$SRV4" '$1 == "bridge" && $2 == 0 && $3 == s' "$T_DIR/br.txt" | wc -l)
wrong=$(awk -v s="$SRV4" '$1 != "bridge" || ($2 == 1 && $3 == s) || ($2 == 0 && $4 == s)' "$T_DIR/br.txt" | wc -l)
if [ "$in_n" -ge 3 ] && [ "$out_n" -ge 3 ] && [ "$wrong" = 0 ]; then pass capture-bridge-interface-direction
else fail capture-bridge-interface-direction "$in_n read (to $SRV4), $out_n written (from it), $wrong on the wrong interface or the wrong way: $(head -3 "$T_DIR/br.txt" | tr '\n' '|')"; fi
note "bridge: $in_n packets read, $out_n written"

# --- 3. Drops: hostile packets into the bridge (the peer stopped, its port theirs), with and without --drops
cat >"$T_DIR/hostile.py" <<'PYEOF'
import socket, sys
from scapy.all import IP, IPv6, UDP, TCP, raw
port, peer = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", peer))      # the bridge takes datagrams from its peer's port only
for p in [b"\x45\x00garbage",                                                       # truncated
          b"\x75" + bytes(40),                                                      # bad-version
          raw(IP(src="198.18.2.1", dst="127.0.0.1") / TCP(dport=80, flags="S")),   # loopback
          raw(IP(src="198.18.2.1", dst="224.0.0.9") / UDP(dport=520)),             # multicast
          raw(IP(src="198.18.2.1", dst="198.18.2.1") / UDP(dport=9))]:             # same-address
    s.sendto(p, ("127.0.0.1", port))
PYEOF
cap drops --input bridge --drops
drops_pid=$CAP_PID
cap nodrops --input bridge
nodrops_pid=$CAP_PID
peer_down                        # its port is the sender's now
python3 -W ignore "$T_DIR/hostile.py" "$EXT_PORT" "$PEER_PORT" 2>"$T_DIR/hostile.err" || note "hostile.py: $(tail -1 "$T_DIR/hostile.err")"
sleep 0.3
CAP_PID=$drops_pid; stop_cap; CAP_PID=$nodrops_pid; stop_cap
ts "$T_DIR/drops.pcapng" -T fields -e frame.comment >"$T_DIR/drops.txt"
reasons=$(grep -o 'dropped: [a-z-]*' "$T_DIR/drops.txt" | sort -u | tr '\n' ',')
want="dropped: bad-version,dropped: loopback,dropped: multicast,dropped: same-address,dropped: truncated,"
if [ "$reasons" = "$want" ]; then pass capture-drops-annotated
else fail capture-drops-annotated "reasons '$reasons', want '$want'"; fi
nd=$(ts "$T_DIR/nodrops.pcapng" | wc -l)
if [ "$nd" = 0 ]; then pass capture-drops-only-when-asked
else fail capture-drops-only-when-asked "$nd packets in the capture without --drops (every one sent was dropped)"; fi
note "drops: $reasons"

# --- 3b. The hostile battery through the TUN: each drop loft counts is in the capture ---------
# Its drop counters by reason before and after (the TUN input's, in `loft status --json`); the
# capture's dropped packets taken between the two readings (by their timestamps) must number
# the same per reason when the capture lost nothing (no more when it lost some, the loss noted).
cap battery --input tun --drops || fail capture-drops-battery "loft capture did not start: $(cat "$T_DIR/battery.err")"
sleep 0.3                        # a status answer is never a render of before the capture
tb=$(date +%s.%N)
json >"$T_DIR/battery.before.json"
in_app timeout 60 python3 -W ignore "$LOFT_REPO/Tests/tools/hostile_battery.py" --src4 198.18.0.1 --dst4 "$SRV4" \
    --src6 fd00:18::1 --dst6 "$SRV6" --random 3000 --seed 7 >"$T_DIR/battery.out" 2>&1
sleep 0.5                        # loft has taken them all
json >"$T_DIR/battery.after.json"
ta=$(date +%s.%N)
stop_cap
ts "$T_DIR/battery.pcapng" -Y frame.comment -T fields -e frame.time_epoch -e frame.comment >"$T_DIR/battery.txt"
cp "$T_DIR/tshark.err" "$T_DIR/battery.tshark.err"
ts "$T_DIR/battery.pcapng" >/dev/null       # every packet read, warnings or not
blost=$(sed -n 's/^loft capture: [0-9]* packets, \([0-9]*\) lost.*/\1/p' "$T_DIR/battery.err")
cat >"$T_DIR/dropcheck.py" <<'PYEOF'
import collections, json, sys
# dropcheck.py FIELDS BEFORE.json AFTER.json LOST T0 T1: FIELDS is tshark's "epoch<TAB>comment"
# of the capture's commented packets; the counters are the TUN input's drops.
fields, before, after, lost, t0, t1 = sys.argv[1:7]
lost, t0, t1 = int(lost), float(t0), float(t1)
def drops(path):
    return next(i for i in json.load(open(path))["inputs"] if i["name"] == "tun")["drops"]
b, a = drops(before), drops(after)
delta = {r: a.get(r, 0) - b.get(r, 0) for r in set(a) | set(b)}
delta = {r: n for r, n in delta.items() if n}
inside, outside = collections.Counter(), collections.Counter()
for line in open(fields):
    t, _, comment = line.rstrip("\n").partition("\t")
    if not comment.startswith("dropped: "):
        continue
    (inside if t0 <= float(t) <= t1 else outside)[comment[len("dropped: "):]] += 1
seen = set(inside) | set(outside)
bad = []
if sum(delta.values()) < 100:
    bad.append("loft counted only %d drops" % sum(delta.values()))
bad += ["%s: %d counted, none captured" % (r, n) for r, n in sorted(delta.items()) if r not in seen]
for r in sorted(set(delta) | set(inside)):
    n, c = delta.get(r, 0), inside[r]
    if (c != n) if lost == 0 else (c > n):
        bad.append("%s: %d captured, %d counted" % (r, c, n))
print(("FAIL " + "; ".join(bad) + " | " if bad else "") + "captured/counted: " +
      ", ".join("%s %d/%d" % (r, inside[r], delta.get(r, 0)) for r in sorted(set(delta) | set(inside))) +
      ("; outside the readings: %s" % dict(outside) if outside else "") + "; capture lost %d" % lost)
sys.exit(1 if bad else 0)
PYEOF
dc=$(python3 "$T_DIR/dropcheck.py" "$T_DIR/battery.txt" "$T_DIR/battery.before.json" "$T_DIR/battery.after.json" \
    "${blost:-x}" "$tb" "$ta" 2>&1); dcrc=$?
if [ $dcrc = 0 ] && [ -n "$blost" ] && [ ! -s "$T_DIR/battery.tshark.err" ] && [ ! -s "$T_DIR/tshark.err" ]; then pass capture-drops-battery
else fail capture-drops-battery "$dc; tshark: $(cat "$T_DIR/battery.tshark.err" "$T_DIR/tshark.err" | head -2 | tr '\n' '|'); $(cat "$T_DIR/battery.err"); $(tail -1 "$T_DIR/battery.out")"; fi
note "battery: $(tail -1 "$T_DIR/battery.out"); $(cat "$T_DIR/battery.err"); $dc"

# --- 4. A flow and an outbound chosen ---------------------------------------------------------
in_app curl -gsS --max-time 60 --limit-rate 200K -o /dev/null "http://$SRV4/big" 2>/dev/null &
slow=$!
fid=
for i in $(seq 30); do
    fid=$("$LOFT_BIN" status -c "$CFG" --flows --json 2>/dev/null | python3 -c '
import json, sys
for f in json.load(sys.stdin):
    if f["network"] == "tcp" and f["destination"].endswith(":80"): print(f["id"]); break')
    [ -n "$fid" ] && break; sleep 0.1
done
"$LOFT_BIN" capture -c "$CFG" -w "$T_DIR/flow.pcapng" --flow "${fid:-0}" --count 20 --duration 10s 2>"$T_DIR/flow.err" &
fpid=$!
in_app curl -gsS --max-time 10 -o /dev/null "http://$SRV4/small" 2>/dev/null    # another flow, same server
for i in $(seq 100); do kill -0 $fpid 2>/dev/null || break; sleep 0.1; done
ports=$(ts "$T_DIR/flow.pcapng" -T fields -e tcp.srcport -e tcp.dstport | tr '\t' '\n' | grep -v '^80$' | sort -u | wc -l)
fn=$(ts "$T_DIR/flow.pcapng" | wc -l)
if [ -n "$fid" ] && [ "$fn" = 20 ] && [ "$ports" = 1 ]; then pass capture-flow
else fail capture-flow "flow id '${fid}': $fn packets (want 20), $ports client ports (want 1): $(cat "$T_DIR/flow.err")"; fi
"$LOFT_BIN" capture -c "$CFG" -w "$T_DIR/ob.pcapng" --outbound direct --count 5 --duration 10s 2>"$T_DIR/ob.err"
on=$(ts "$T_DIR/ob.pcapng" | wc -l)
"$LOFT_BIN" capture -c "$CFG" -w "$T_DIR/ob2.pcapng" --outbound nowhere 2>"$T_DIR/ob2.err"; rc=$?
if [ "$on" = 5 ] && [ $rc = 1 ] && grep -q 'no outbound named "nowhere"' "$T_DIR/ob2.err"; then pass capture-outbound
else fail capture-outbound "$on packets via direct (want 5); unknown outbound: exit $rc, $(cat "$T_DIR/ob2.err")"; fi
kill $slow 2>/dev/null; wait $slow 2>/dev/null

# --- 5. Count and duration end it, with loft's statistics -----------------------------------------
in_app ping -c 30 -i 0.05 "$SRV4" >/dev/null 2>&1 &
pinger=$!
"$LOFT_BIN" capture -c "$CFG" -w "$T_DIR/count.pcapng" --input tun --count 7 --duration 10s 2>"$T_DIR/count.err"; rc=$?
cn=$(ts "$T_DIR/count.pcapng" | wc -l)
if [ $rc = 0 ] && [ "$cn" = 7 ] && grep -q '^loft capture: 7 packets, 0 lost$' "$T_DIR/count.err"; then pass capture-count
else fail capture-count "exit $rc, $cn packets: $(cat "$T_DIR/count.err")"; fi
t0=$(now_ms)
"$LOFT_BIN" capture -c "$CFG" -w "$T_DIR/dur.pcapng" --duration 700ms 2>"$T_DIR/dur.err"; rc=$?
ms=$(( $(now_ms) - t0 ))
if [ $rc = 0 ] && [ "$ms" -ge 650 ] && [ "$ms" -lt 3000 ] && grep -q 'packets, 0 lost$' "$T_DIR/dur.err"; then pass capture-duration
else fail capture-duration "exit $rc after $ms ms: $(cat "$T_DIR/dur.err")"; fi
wait $pinger

# --- 6. A reader that stops reading: packets lost and counted, loft neither slowed nor grown ------
cap stalled --input tun
kill -STOP "$CAP_PID"
rss0=$(rss_kib "$LOFT_PID")
json >"$T_DIR/st-stalled0.json" 2>&1
t0=$(now_ms)
in_app curl -gsS --max-time 60 -o "$T_DIR/dl2.out" "http://$SRV4/big" 2>"$T_DIR/curl2.err"
ms=$(( $(now_ms) - t0 ))
rss1=$(rss_kib "$LOFT_PID")
sleep 0.3                        # a fresh status render, not the one before the download
json >"$T_DIR/st-stalled1.json" 2>&1
"$LOFT_BIN" status -c "$CFG" >"$T_DIR/st-stalled1.txt" 2>&1
kill -CONT "$CAP_PID"
stop_cap
sleep 0.3
json >"$T_DIR/st-none.json" 2>&1
"$LOFT_BIN" status -c "$CFG" >"$T_DIR/st-none.txt" 2>&1
lost=$(sed -n 's/^loft capture: [0-9]* packets, \([0-9]*\) lost.*/\1/p' "$T_DIR/stalled.err")
grown=$(( (rss1 - rss0) / 1024 ))
if [ "$(sha_of "$T_DIR/dl2.out")" = "$BIG_SHA" ] && [ "${lost:-0}" -gt 0 ] && [ "$grown" -lt 12 ]; then pass capture-stalled-reader
else fail capture-stalled-reader "download $(sha_of "$T_DIR/dl2.out" | cut -c1-12) in $ms ms, RSS $rss0 -> $rss1 kB, $(cat "$T_DIR/stalled.err")"; fi
note "stalled reader: 20 MiB in $ms ms, loft RSS $rss0 -> $rss1 kB, $(cat "$T_DIR/stalled.err")"

# --- 6b. `loft status` lists the captures running: two (case 1's), then the stalled one with
# its losses rising, then none (and no captures key or section at all) ---------------------------
st=$(python3 - "$T_DIR" "${lost:-0}" <<'PYEOF' 2>&1
import json, sys
d, final_lost = sys.argv[1], int(sys.argv[2])
def load(n):
    return json.load(open("%s/%s.json" % (d, n)))
def text(n):
    return open("%s/%s.txt" % (d, n)).read()
bad = []
two, s0, s1, none = load("st-two"), load("st-stalled0"), load("st-stalled1"), load("st-none")
c = two.get("captures", {})
if c.get("running") != 2 or [x["summary"] for x in c.get("list", [])] != ['input tun, filter "tcp port 80"', "input tun"]:
    bad.append("two captures: %s" % c)
if "CAPTURES 2 running" not in text("st-two"):
    bad.append("text with two: no 'CAPTURES 2 running'")
c0, c1 = s0.get("captures", {}), s1.get("captures", {})
l0 = c0.get("list", [{}])[0].get("lost", -1) if c0.get("running") == 1 else -1
l1 = c1.get("list", [{}])[0].get("lost", -1) if c1.get("running") == 1 else -1
p1 = c1.get("list", [{}])[0].get("packets", 0) if c1.get("running") == 1 else 0
if l0 < 0 or l1 <= l0 or l1 > final_lost or p1 <= 0:
    bad.append("stalled: lost %d at the stop, %d after the download (%d packets written), %d at the end" % (l0, l1, p1, final_lost))
if "CAPTURES 1 running" not in text("st-stalled1") or " %d lost" % l1 not in text("st-stalled1"):
    bad.append("text while stalled: %r" % text("st-stalled1")[-200:])
if "captures" in none or "CAPTURES" in text("st-none"):
    bad.append("after the captures ended, still listed")
print(("FAIL " + "; ".join(bad)) if bad else
      "two running; the stalled one lost %d, then %d (%d written), %d at its end; none after" % (l0, l1, p1, final_lost))
sys.exit(1 if bad else 0)
PYEOF
); strc=$?
if [ $strc = 0 ]; then pass capture-in-status; else fail capture-in-status "$st"; fi
note "status: $st"
note "status text: $(sed -n '/^CAPTURES/,$p' "$T_DIR/st-two.txt" | tr '\n' '|') then $(sed -n '/^CAPTURES/,$p' "$T_DIR/st-stalled1.txt" | tr '\n' '|')"

# --- 7. What cannot be captured is refused with the reason -------------------------------------
"$LOFT_BIN" capture -c "$CFG" --input socks -w "$T_DIR/x.pcapng" 2>"$T_DIR/socks.err"; r1=$?
"$LOFT_BIN" capture -c "$CFG" --filter "tcp port eighty" -w "$T_DIR/x.pcapng" 2>"$T_DIR/bpf.err"; r2=$?
"$LOFT_BIN" capture -c "$CFG" --flow 999999 -w "$T_DIR/x.pcapng" 2>"$T_DIR/flow9.err"; r3=$?
if [ $r1 = 2 ] && grep -q 'SOCKS5 flows have no packets.*status --flows' "$T_DIR/socks.err" \
   && [ $r2 = 1 ] && grep -q 'filter "tcp port eighty": ' "$T_DIR/bpf.err" \
   && [ $r3 = 1 ] && grep -q 'no live flow 999999' "$T_DIR/flow9.err"; then pass capture-refusals
else fail capture-refusals "socks: $r1 $(cat "$T_DIR/socks.err"); bpf: $r2 $(cat "$T_DIR/bpf.err"); flow: $r3 $(cat "$T_DIR/flow9.err")"; fi

loft_stop_clean loft-exit-clean
finish
