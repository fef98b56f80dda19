#!/usr/bin/env bash
# The holder's TCP carriers over Multipath TCP (issue 34; root, namespaces). Two namespaces made
# here: loft's (SOCKS5 input only, no TUN) and the front's (loft-front, nginx and v2ray on
# 198.18.N.100), joined by two veth links, each limited to MPTCP_RATE (30 Mbit/s) by `tc qdisc
# tbf` on the front's side (the download direction). The client's second link is an MPTCP
# `subflow` endpoint with its own routing table (docs/holder.md, "Multipath TCP"); both sides
# set `ip mptcp limits`.
#  - one-link baseline: 50 MiB straight over link 1 (no loft), the rate one link carries
#  - ws, h2, get with `mptcp: true` against a front with `mptcp: true`: the carrier runs MPTCP
#    with 2 subflows (loft status), the front counts it (carriers_mptcp); 50 MiB through it at
#    >= 1.6x the baseline, SHA-256 intact, both links' qdiscs carried >= 10 MiB of it
#  - link 1 (the initial subflow's, and the default route) taken down mid-transfer: the
#    transfer finishes intact over link 2 (which moved bytes while link 1 was down), no RESUME,
#    no carrier lost, the path change counted as kept; link 1 brought back carries again
#    (a second download moves >= 5 MiB over it) with 2 subflows
#  - fallback: `mptcp: true` against a front without it works as plain TCP and says so
#    ("tcp (mptcp fell back)"); the MPTCP front counts a plain-TCP client as mptcp_fallbacks
#  - vless `mptcp: true` against Debian's v2ray 4.34 (plain TCP listener): the kernel falls back,
#    the flow works, `loft status` counts it under mptcp-fallbacks
#  - without the subflow endpoint (one subflow) link 1's address deleted: the path change finds
#    no subflow address left and redials with RESUME (not kept)
. "$(dirname "$0")/lib.sh"

ip mptcp limits show >/dev/null 2>&1 || die "no MPTCP in this kernel (ip mptcp limits show failed)"
command -v tc >/dev/null || die "tc not installed"

CNS=loft-mc-$T_ID
FNS=loft-mf-$T_ID
SRV_NS=$FNS               # lib.sh's servers (start_nginx, start_v2ray) run in the front's namespace
SRV4=198.18.$NET.100
SRV6=fd00:$NET::100
C1=198.18.$NET.1;  F1=198.18.$NET.2
C2=198.18.$NET.17; F2=198.18.$NET.18
RATE=${MPTCP_RATE:-30mbit}
FPORT=$((20000 + T_ID % 20000))
FPORT2=$((FPORT + 1))
SPORT=$((FPORT + 2))
CTL=/run/loft/mptcp-test-$T_ID.sock
in_c() { ip netns exec "$CNS" "$@"; }
in_f() { ip netns exec "$FNS" "$@"; }

for ns in "$CNS" "$FNS"; do
    T_NETNS+=("$ns"); register netns "$ns"
    ip netns add "$ns" || die "ip netns add $ns"
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 net.mptcp.enabled=1
done
ip link add name c1 netns "$CNS" type veth peer name f1 netns "$FNS" || die "veth 1"
ip link add name c2 netns "$CNS" type veth peer name f2 netns "$FNS" || die "veth 2"
ip -n "$CNS" addr add "$C1/28" dev c1; ip -n "$FNS" addr add "$F1/28" dev f1
ip -n "$CNS" addr add "$C2/28" dev c2; ip -n "$FNS" addr add "$F2/28" dev f2
for d in c1 c2; do ip -n "$CNS" link set "$d" up; done
for d in f1 f2; do ip -n "$FNS" link set "$d" up; done
ip -n "$FNS" addr add "$SRV4/32" dev lo
ip -n "$FNS" -6 addr add "$SRV6/128" dev lo nodad
# The client: the default route over link 1 (link 2 as a worse second), and one routing table
# per source address so that each subflow leaves by its own link (what a multihomed host has).
client_routes() {
    ip -n "$CNS" route replace default via "$F1" dev c1 metric 100 2>/dev/null
    ip -n "$CNS" route replace default via "$F1" dev c1 table 101 2>/dev/null
}
client_routes
ip -n "$CNS" route replace default via "$F2" dev c2 metric 200
ip -n "$CNS" route replace default via "$F2" dev c2 table 102
for t in 101 102; do ip -n "$CNS" route add unreachable default metric 4000 table $t; done
ip -n "$CNS" rule add from "$C1" lookup 101 priority 1001
ip -n "$CNS" rule add from "$C2" lookup 102 priority 1002
# MPTCP: the client's second address is a subflow endpoint; both ends allow 2 extra subflows.
ip -n "$CNS" mptcp endpoint add "$C2" dev c2 subflow || die "ip mptcp endpoint add"
ip -n "$CNS" mptcp limits set subflows 2 add_addr_accepted 2 || die "ip mptcp limits (client)"
ip -n "$FNS" mptcp limits set subflows 2 add_addr_accepted 0 || die "ip mptcp limits (front)"
for d in f1 f2; do
    in_f tc qdisc add dev "$d" root tbf rate "$RATE" burst 128kb latency 30ms || die "tc tbf on $d"
done
# sent DEV: bytes the front's qdisc on DEV has sent.
sent() { in_f tc -s qdisc show dev "$1" | awk '/Sent/ { print $2; exit }'; }
# The rate a download ran at is read off both links' qdiscs, over the middle of the transfer
# (from 10% to 90% of its bytes): TCP's and MPTCP's start (slow start, the second subflow's
# join) and loft's own start (SOCKS5, the stream's OPEN) are left out of both sides of the
# ratio. watch_start: samples "ms f1-bytes f2-bytes" every 0.1 s into $T_DIR/watch until
# watch_stop (at most 1200 samples), which prints the middle rate in bytes/s (0 when too few).
watch_start() {
    ( for _ in $(seq 1200); do echo "$(now_ms) $(sent f1) $(sent f2)"; sleep 0.1; done ) >"$T_DIR/watch" 2>/dev/null &
    WATCH=$!; T_PIDS+=("$WATCH")
}
watch_stop() {
    kill "$WATCH" 2>/dev/null; wait "$WATCH" 2>/dev/null
    awk -v total=$((50 * 1048576)) 'NF == 3 {
            n++; t[n] = $1; b[n] = $2 + $3
        }
        END {
            if (n < 3) { print 0; exit }
            lo = b[1] + total * 0.1; hi = b[1] + total * 0.9
            for (i = 1; i <= n; i++) { if (!a && b[i] >= lo) a = i; if (!z && b[i] >= hi) z = i }
            if (!a || !z || t[z] <= t[a]) { print 0; exit }
            printf "%.0f", (b[z] - b[a]) * 1000 / (t[z] - t[a])
        }' "$T_DIR/watch"
}

make_files 50
start_nginx 1 1024
BIG_SHA=$(sha_of "$T_DIR/www/big")
F0_SHA=$(sha_of "$T_DIR/www/f0")
bash "$(dirname "$0")/../interop/gen-certs.sh" "$T_DIR/pki" >/dev/null || die "test PKI"

# The front keeps its default keepalive (10 s: 20 s without a byte is a dead carrier): MPTCP
# moves a dead subflow's data to the other at its retransmission timeouts, seconds on a loaded
# machine, and a 2 s keepalive once lost the carrier in the link-down case below (docs/holder.md).
front_yaml() {      # front_yaml FILE PORT MPTCP
    cat >"$1" <<EOF
log: info
listen: 0.0.0.0:$2
tls: { certificate: $T_DIR/pki/server.pem, key: $T_DIR/pki/server.key }
tokens: ["mptcp-test-token"]
pool: { ipv4: 198.18.64.0/24 }
mtu: 1400
control: /run/loft/mptcp-front-$T_ID-$2.sock
mptcp: $3
EOF
}
FRONT_CFG=$T_DIR/front.yaml
front_yaml "$FRONT_CFG" "$FPORT" true
front_yaml "$T_DIR/front2.yaml" "$FPORT2" false
front_run "$FRONT_CFG" "$FNS" || die "loft-front (mptcp) did not start"
FRONT_LOG=$T_DIR/front2.log front_run "$T_DIR/front2.yaml" "$FNS" || die "loft-front (no mptcp) did not start"

# mp_config NAME OUTBOUND-YAML: loft with SOCKS5 on 127.0.0.1:SPORT, the outbound `home` as given.
mp_config() {
    cat >"$T_DIR/$1.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$SPORT }
outbounds:
  - name: home
$2
default: home
control: $CTL
EOF
    echo "$T_DIR/$1.yaml"
}
loft_yaml() {       # loft_yaml CARRIER PORT: a type loft outbound with mptcp on
    printf '    type: loft\n    server: %s:%s\n    carrier: %s\n    token: mptcp-test-token\n    tls: { server-name: front.test, ca: %s }\n    mptcp: true' \
        "$F1" "$2" "$1" "$T_DIR/pki/ca.pem"
}
# mp_start CONFIG: loft inside the client namespace, until its log says ready (30 s).
mp_start() {
    local i
    LOFT_CFG=$1
    LOFT_LOG=$T_DIR/loft-$(date +%s%N).log
    # nsenter execs loft (ip netns exec may fork): LOFT_PID is loft's own, for loft_stop's SIGTERM.
    nsenter --net="/run/netns/$CNS" -- "$LOFT_BIN" run -c "$1" >"$LOFT_LOG" 2>&1 </dev/null &
    LOFT_PID=$!
    register_pid "$LOFT_PID"
    for i in $(seq 300); do
        grep -q 'event=ready' "$LOFT_LOG" && return 0
        kill -0 "$LOFT_PID" 2>/dev/null || break
        sleep 0.1
    done
    note "loft did not start: $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
    return 1
}
# mp_stop NAME: loft stopped with SIGTERM exits 0 (case NAME).
mp_stop() { if loft_stop TERM; then pass "$1"; else fail "$1" "loft exit status $LOFT_RC after SIGTERM: $(tail -2 "$LOFT_LOG" | tr '\n' '|')"; fi; }
wait_state() {       # wait_state STATE SECONDS
    local i
    for i in $(seq $(($2 * 10))); do [ "$(field 'o["state"]')" = "$1" ] && return 0; sleep 0.1; done
    return 1
}
# subflows: the carrier's subflows in loft status's detail ("mptcp, N subflows: ..." per TCP
# connection; "tcp (mptcp fell back)": 0), summed; empty when loft does not answer.
subflows() { field 'sum(int(m) for m in __import__("re").findall(r"mptcp, (\d+) subflows?", o["detail"]))'; }
# wait_subflows N SECONDS: until the carrier has N subflows.
wait_subflows() {
    local i
    for i in $(seq $(($2 * 10))); do [ "$(subflows)" = "$1" ] && return 0; sleep 0.1; done
    return 1
}
# fetch OUT PATH [curl args]: PATH from nginx through loft's SOCKS5; prints bytes/s.
fetch() {
    local out=$1 path=$2
    shift 2
    in_c curl -sS --max-time 120 --socks5 "127.0.0.1:$SPORT" "$@" -w '%{speed_download}' -o "$out" "http://$SRV4/$path" 2>"$out.err"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) print 0; else printf "%.2f", a / b }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
mbit() { awk -v r="$1" 'BEGIN { printf "%.1f", r * 8 / 1e6 }'; }

# --- the one-link baseline ----------------------------------------------------------------
watch_start
in_c curl -sS --max-time 120 -o "$T_DIR/base" "http://$SRV4/big" 2>"$T_DIR/base.err"
BASE=$(watch_stop)
if [ "$(sha_of "$T_DIR/base")" = "$BIG_SHA" ] && ge "$BASE" 1000000; then
    pass baseline-one-link; note "one link ($RATE): 50 MiB at $(mbit "$BASE") Mbit/s"
else
    fail baseline-one-link "curl over link 1: rate $BASE, $(cat "$T_DIR/base.err")"
    BASE=0
fi
rm -f "$T_DIR/base"

# --- ws, h2, get over MPTCP: two subflows, both links carry, >= 1.6x one link ----------------
# carrier_checks CARRIER: cases CARRIER-mptcp-subflows, CARRIER-mptcp-50MiB-bonded. Leaves loft
# running (ws: the link-down checks use it).
carrier_checks() {
    local k=$1 m0 m1 a0 b0 a1 b1 rate r got
    if ! mp_start "$(mp_config "mp-$k" "$(loft_yaml "$k" "$FPORT")")" || ! wait_state up 15; then
        fail_all "loft over $k did not come up: $(field 'o["detail"]')" "$k-mptcp-subflows" "$k-mptcp-50MiB-bonded"
        return 1
    fi
    m0=$(front_stat carriers_mptcp)
    if wait_subflows $([ "$k" = get ] && echo 4 || echo 2) 10 && [[ $(field 'o["detail"]') == *"mptcp, 2 subflows: "*"->$F1:$FPORT"* ]] \
        && [ "$(front_stat carriers_mptcp)" -ge 1 ]; then
        pass "$k-mptcp-subflows"; note "$k: $(field 'o["detail"]'); front carriers_mptcp $(front_stat carriers_mptcp)"
    else
        fail "$k-mptcp-subflows" "detail '$(field 'o["detail"]')', subflows $(subflows), front carriers_mptcp $m0"
    fi
    a0=$(sent f1); b0=$(sent f2)
    watch_start
    whole=$(fetch "$T_DIR/dl.$k" big)
    rate=$(watch_stop)
    got=$(sha_of "$T_DIR/dl.$k" 2>/dev/null); rm -f "$T_DIR/dl.$k"
    a1=$(sent f1); b1=$(sent f2)
    r=$(ratio "${rate:-0}" "$BASE")
    local la=$(( (a1 - a0) / 1048576 )) lb=$(( (b1 - b0) / 1048576 ))
    if [ "$got" != "$BIG_SHA" ]; then
        fail "$k-mptcp-50MiB-bonded" "sha256 $got (want $BIG_SHA): $(cat "$T_DIR/dl.$k.err")"
    elif ! ge "$r" 1.6 || [ $la -lt 10 ] || [ $lb -lt 10 ]; then
        fail "$k-mptcp-50MiB-bonded" "$r x one link (want >= 1.6); link 1 moved $la MiB, link 2 $lb MiB"
    else
        pass "$k-mptcp-50MiB-bonded"
    fi
    note "$k: 50 MiB at $(mbit "${rate:-0}") Mbit/s = $r x one link (whole transfer, start included: $(mbit "${whole:-0}") Mbit/s); link 1 $la MiB, link 2 $lb MiB"
}

carrier_checks ws
# --- one link down mid-transfer: no RESUME, no reset; back up: used again -------------------
CASES="link-down-transfer-intact link-down-other-link-carries link-down-no-resume link-back-used-again link-back-subflows"
if [ -n "$LOFT_PID" ] && [ "$(field 'o["state"]')" = up ]; then
    resumes0=$(field 'c["resumes"]'); losses0=$(field 'c["carrier-losses"]'); sessions0=$(field 'c["sessions"]')
    resets0=$(field 'c["streams-reset"]')
    fetch "$T_DIR/dl.down" big >/dev/null &
    dl=$!; T_PIDS+=("$dl")
    sleep 1.5
    ip -n "$CNS" link set c1 down
    # MPTCP gives the dead subflow's data to the other one at its retransmission timeout: after
    # 2 s the transfer runs on link 2 alone; what link 2 moves in the next 3 s is measured.
    sleep 2
    b0=$(sent f2)
    sleep 3
    b1=$(sent f2)
    down_detail=$(field 'o["detail"]' | grep -o 'mptcp.*')
    ip -n "$CNS" link set c1 up
    client_routes
    wait "$dl"
    got=$(sha_of "$T_DIR/dl.down" 2>/dev/null); rm -f "$T_DIR/dl.down"
    expect link-down-transfer-intact "[ '$got' = '$BIG_SHA' ]" "sha256 $got (want $BIG_SHA): $(cat "$T_DIR/dl.down.err")"
    expect link-down-other-link-carries "[ $(( (b1 - b0) / 1048576 )) -ge 2 ]" "link 2 moved $(( (b1 - b0) / 1024 )) KiB while link 1 was down"
    note "link 2 moved $(( (b1 - b0) / 1048576 )) MiB in 3 s while link 1 was down; the kernel's subflows then: $down_detail"
    # The path monitor saw the default route change (settles in 1 s): kept, not redialled.
    for i in $(seq 50); do [ "$(field 'c["mptcp-path-changes-kept"]')" -ge 1 ] 2>/dev/null && break; sleep 0.1; done
    resumes1=$(field 'c["resumes"]'); losses1=$(field 'c["carrier-losses"]'); sessions1=$(field 'c["sessions"]')
    resets1=$(field 'c["streams-reset"]')
    kept=$(field 'c["mptcp-path-changes-kept"]'); changes=$(field 'c["path-changes"]')
    expect link-down-no-resume "[ '$resumes1' = '$resumes0' ] && [ '$losses1' = '$losses0' ] && [ '$sessions1' = '$sessions0' ] && [ '$resets1' = '$resets0' ] && [ '${kept:-0}' -ge 1 ] && grep -q 'holder.path-kept' '$LOFT_LOG'" \
        "resumes $resumes0 -> $resumes1, carrier-losses $losses0 -> $losses1, sessions $sessions0 -> $sessions1, streams-reset $resets0 -> $resets1, path-changes $changes, kept $kept: $(grep -hE 'event=(holder.down|carrier-dead|session-detached)' "$LOFT_LOG" "$FRONT_LOG" | head -4 | tr '\n' '|')"
    note "path changes $changes, kept $kept; resumes $resumes1, carrier losses $losses1"
    # Back: the stale subflow recovers at its next retransmission; a new download uses link 1.
    wait_subflows 2 20
    a0=$(sent f1)
    rate=$(fetch "$T_DIR/dl.back" big)
    got=$(sha_of "$T_DIR/dl.back" 2>/dev/null); rm -f "$T_DIR/dl.back"
    a1=$(sent f1)
    expect link-back-used-again "[ '$got' = '$BIG_SHA' ] && [ $(( (a1 - a0) / 1048576 )) -ge 5 ]" \
        "sha256 $got; link 1 moved $(( (a1 - a0) / 1048576 )) MiB of the next 50 MiB"
    note "after link 1 came back: 50 MiB at $(mbit "${rate:-0}") Mbit/s (whole transfer), link 1 moved $(( (a1 - a0) / 1048576 )) MiB"
    expect link-back-subflows "[ '$(subflows)' = 2 ] && [ '$(field 'c["resumes"]')' = '$resumes0' ]" \
        "subflows $(subflows), resumes $(field 'c["resumes"]'): $(field 'o["detail"]')"
else
    fail_all "the ws carrier is not up" $CASES
fi
mp_stop ws-exit-clean

carrier_checks h2; mp_stop h2-exit-clean
carrier_checks get; mp_stop get-exit-clean

# --- fallback: mptcp asked, the front does not speak it -------------------------------------
if mp_start "$(mp_config mp-fallback "$(loft_yaml ws "$FPORT2")")" && wait_state up 15; then
    fetch "$T_DIR/dl.fb" f0 >/dev/null
    got=$(sha_of "$T_DIR/dl.fb" 2>/dev/null)
    expect fallback-plain-tcp "[ '$got' = '$F0_SHA' ] && [[ \"$(field 'o["detail"]')\" == *'tcp (mptcp fell back)'* ]] && [ '$(subflows)' = 0 ] && grep -q 'event=holder.mptcp .*carrier=\"tcp (mptcp fell back)\"' '$LOFT_LOG'" \
        "sha $got; detail '$(field 'o["detail"]')'"
    note "fallback: $(field 'o["detail"]')"
else
    fail fallback-plain-tcp "loft did not come up against the front without mptcp: $(field 'o["detail"]')"
fi
mp_stop fallback-exit-clean
# A plain TCP client of the MPTCP front is counted as such.
fb0=$(front_stat mptcp_fallbacks)
in_c curl -sk --max-time 5 -o /dev/null "https://$F1:$FPORT/" 2>/dev/null
expect front-counts-fallback "[ '$(front_stat mptcp_fallbacks)' -gt '${fb0:-0}' ] && [ '$(front_stat mptcp_accepted)' -ge 3 ]" \
    "mptcp_fallbacks $fb0 -> $(front_stat mptcp_fallbacks), mptcp_accepted $(front_stat mptcp_accepted)"

# --- vless with mptcp against v2ray 4.34 (a plain TCP listener): the kernel falls back ------
UUID=3f0c8a5e-6b1d-4c2e-9a7f-0d1e2f3a4b5c
start_v2ray "$UUID" 8443
VY=$(printf '    type: vless\n    server: %s:8443\n    uuid: %s\n    tls: { server-name: front.test, ca: %s }\n    mptcp: true' "$F1" "$UUID" "$T_DIR/pki/ca.pem")
if mp_start "$(mp_config mp-vless "$VY")"; then
    fetch "$T_DIR/dl.vl" f0 >/dev/null
    got=$(sha_of "$T_DIR/dl.vl" 2>/dev/null)
    expect vless-v2ray-fallback "[ '$got' = '$F0_SHA' ] && [ '$(field 'c.get("mptcp-fallbacks")')' -ge 1 ] && [ '$(field 'c.get("mptcp")')' = 0 ]" \
        "sha $got; counters $(field 'c')"
    note "vless to v2ray: mptcp $(field 'c.get("mptcp")'), mptcp-fallbacks $(field 'c.get("mptcp-fallbacks")')"
else
    fail vless-v2ray-fallback "loft did not start"
fi
mp_stop vless-exit-clean

# --- every subflow's address gone (no endpoint for the new path): redialled with RESUME ------
# Without the subflow endpoint the carrier has one subflow, from link 1's address; that address
# is deleted (the default route moves to link 2): nothing is left for MPTCP to carry on over, so
# the path change redials at once with RESUME instead of keeping a connection that would hang.
ip -n "$CNS" mptcp endpoint flush
CASES="address-gone-resume address-gone-exit-clean"
if mp_start "$(mp_config mp-addr "$(loft_yaml ws "$FPORT")")" && wait_state up 15 && wait_subflows 1 10; then
    resumes0=$(field 'c["resumes"]'); kept0=$(field 'c["mptcp-path-changes-kept"]')
    ip -n "$CNS" addr del "$C1/28" dev c1
    for i in $(seq 150); do
        [ "$(field 'c["resumes"]')" -gt "$resumes0" ] 2>/dev/null && [ "$(field 'o["state"]')" = up ] && break
        sleep 0.1
    done
    fetch "$T_DIR/dl.addr" f0 >/dev/null
    got=$(sha_of "$T_DIR/dl.addr" 2>/dev/null)
    expect address-gone-resume "[ '$got' = '$F0_SHA' ] && [ '$(field 'c["resumes"]')' = $((resumes0 + 1)) ] && [ '$(field 'c["mptcp-path-changes-kept"]')' = '$kept0' ] && [[ \"$(field 'o["detail"]')\" == *'mptcp, 1 subflow: $C2:'* ]]" \
        "sha $got; resumes $resumes0 -> $(field 'c["resumes"]'), kept $kept0 -> $(field 'c["mptcp-path-changes-kept"]'): $(field 'o["detail"]')"
    note "address gone: $(field 'o["detail"]')"
    mp_stop address-gone-exit-clean
else
    fail_all "loft over ws did not come up with one subflow: $(field 'o["detail"]')" $CASES
    mp_stop address-gone-exit-clean
fi

finish
