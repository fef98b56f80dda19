#!/usr/bin/env bash
# Rules: drop (silent and reset) for TCP, UDP and ICMP beside traffic that flows; counters per
# rule; `loft check` reports shadowed rules; `loft reload` swaps rules live; a to-file list of
# 100,000 prefixes loads fast. Host mode in a namespace of its own: loft's policy routes send
# that namespace's traffic through its TUN, its own sockets stay off it, and exactly its routes
# and rules are removed on exit, on SIGTERM and after a kill -9 (at the next start). Needs root.
. "$(dirname "$0")/lib.sh"

topo_up
make_files 1
start_nginx 1 1024
start_dns
start_sink

SOCK=$T_DIR/control.sock
write_rules() {     # write_rules FILE EXTRA-RULE-LINES
    loft_config rules-base >/dev/null
    sed -e '/^default: direct/d' -e '/^limits:/d' "$T_DIR/rules-base.yaml" >"$1"
    cat >>"$1" <<EOF
control: $SOCK
limits: { connect-timeout: 3s }
rules:
  - { action: drop, to: ["$SRV4/32"], network: tcp, ports: [9] }
  - { action: drop, reset: true, to: ["$SRV4/32"], network: tcp, ports: [10] }
  - { action: drop, network: udp, ports: [53], to: ["$SRV6/128"] }
  - { action: drop, to: [198.18.$NET.99/32] }
$2
default: direct
EOF
}
CFG=$T_DIR/rules.yaml
write_rules "$CFG" ""

CASES="check-shadowed-rule drop-tcp-silent drop-tcp-reset drop-udp-v6-only drop-icmp other-traffic-flows
rule-counters reload-swaps-rules prefixes-100k-load loft-exit-clean host-mode-routes-in-use
host-mode-traffic-through-tun host-mode-clean-exit host-mode-kill9-cleaned-next-start"

# loft check: a rule after a broader one can never match.
cat >"$T_DIR/shadow.yaml" <<EOF
socks5: off
bridge: off
rules:
  - { action: direct, to: [198.18.0.0/15] }
  - { action: drop, to: [198.18.99.0/24] }
EOF
out=$("$LOFT_BIN" check -c "$T_DIR/shadow.yaml" 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "shadow.yaml:5:5: warning: rule 2 can never match: rule 1"; then
    pass check-shadowed-rule
else
    fail check-shadowed-rule "exit $rc: $out"
fi

require_loft "$CFG" $CASES || finish

t0=$(now_ms); in_app curl -s -o /dev/null --connect-timeout 2 "http://$SRV4:9/"; rc=$?; ms=$(( $(now_ms) - t0 ))
if [ $rc -eq 28 ] && [ $ms -ge 1900 ]; then pass drop-tcp-silent; else fail drop-tcp-silent "curl exit $rc after $ms ms (want a timeout, 28)"; fi

t0=$(now_ms); err=$(in_app curl -sS -o /dev/null --connect-timeout 5 "http://$SRV4:10/" 2>&1); rc=$?; ms=$(( $(now_ms) - t0 ))
# curl says "Connection refused" or, in newer versions, "Couldn't connect to server" for ECONNREFUSED.
if [ $rc -eq 7 ] && [ $ms -lt 1000 ] && echo "$err" | grep -qiE "refused|couldn.t connect"; then pass drop-tcp-reset; else fail drop-tcp-reset "curl exit $rc after $ms ms: $err"; fi

a4=$(in_app dig +short +time=1 +tries=1 "@$SRV4" "$DNS_NAME" A 2>&1)
a6=$(in_app dig +short +time=1 +tries=1 "@$SRV6" "$DNS_NAME" A 2>&1)
if [ "$a4" = "$DNS_A" ] && ! echo "$a6" | grep -q "$DNS_A"; then pass drop-udp-v6-only; else fail drop-udp-v6-only "v4 '$a4' v6 '$a6'"; fi

# ICMP to the dropped /32 vanishes; to the server it is answered. No host has .99 or .98, but
# with icmp: reply loft answers every echo itself: .98 (no rule) is answered, so .99's silence
# is the rule's doing.
p4=$(in_app ping -c1 -W2 "$SRV4" >/dev/null && echo answered || echo silent)
p98=$(in_app ping -c1 -W2 198.18.$NET.98 >/dev/null && echo answered || echo silent)
p99=$(in_app ping -c2 -W1 198.18.$NET.99 >/dev/null && echo answered || echo silent)
if [ "$p4 $p98 $p99" = "answered answered silent" ]; then
    pass drop-icmp
else
    fail drop-icmp "ping $SRV4 $p4, .98 (no rule) $p98, .99 (dropped) $p99; want answered answered silent"
fi

got=$(in_app curl -s --max-time 10 "http://$SRV4/small" | sha256sum | cut -d' ' -f1)
if [ "$got" = "$(sha_of "$T_DIR/www/small")" ]; then pass other-traffic-flows; else fail other-traffic-flows "sha $got"; fi

jq_rules() { "$LOFT_BIN" status -c "$CFG" --json | python3 -c '
import json,sys
d=json.load(sys.stdin)
print(" ".join(str(r["matches"]) for r in d["rules"]), d["drops"]["rule"], d["default_matches"] > 0)'; }
r=$(jq_rules)
set -- $r
# rule 1: the SYN and its retransmissions (>= 1); rule 2: 1 SYN; rule 3: the v6 query (1);
# rule 4: 2 echo requests; drops by rule >= 5; the default matched the other flows.
if [ "$1" -ge 1 ] && [ "$2" -ge 1 ] && [ "$3" -ge 1 ] && [ "$4" -eq 2 ] && [ "$5" -ge 5 ] && [ "$6" = True ]; then
    pass rule-counters
else
    fail rule-counters "matches/drops: $r"
fi

# reload: a new file drops the server's port 80 with a reset; the running loft applies it.
write_rules "$CFG" "  - { action: drop, reset: true, to: [\"$SRV4/32\"], network: tcp, ports: [80] }"
out=$("$LOFT_BIN" reload -c "$CFG" 2>&1)
in_app curl -s -o /dev/null --max-time 3 "http://$SRV4/small"; rc=$?
if echo "$out" | grep -q "rules reloaded: 5" && [ $rc -eq 7 ]; then pass reload-swaps-rules; else fail reload-swaps-rules "reload '$out', curl exit $rc"; fi

loft_stop_clean loft-exit-clean

# 100,000 prefixes from a file: check parses and compiles them quickly.
python3 -c '
import sys
with open(sys.argv[1], "w") as f:
    f.write("# generated list\n")
    for i in range(100000):
        f.write("%d.%d.%d.0/24\n" % (10 + i // 65536, (i // 256) % 256, i % 256))' "$T_DIR/big-list.txt"
cat >"$T_DIR/big.yaml" <<EOF
socks5: off
bridge: off
rules:
  - { action: drop, to-file: big-list.txt }
EOF
t0=$(now_ms); out=$("$LOFT_BIN" check -c "$T_DIR/big.yaml" 2>&1); rc=$?; ms=$(( $(now_ms) - t0 ))
if [ $rc -eq 0 ] && [ $ms -lt 1000 ]; then pass prefixes-100k-load; note "100k prefixes: loft check in $ms ms"; else fail prefixes-100k-load "exit $rc in $ms ms: $out"; fi

# --- host mode, inside a namespace standing in for the host -----------------------------------
host_ns_up
before=$(host_snapshot)
host_config "rules:" "  - { action: direct, to: [198.18.$((NET + 150)).0/24] }" "default: direct"
if host_start; then
    during=$(host_snapshot)
    if echo "$during" | grep -q "fwmark 0x4c46 lookup main" && echo "$during" | grep -q "to 198.18.$((NET + 150)).0/24 lookup main" \
        && echo "$during" | grep -q "default dev $HTUN table"; then
        pass host-mode-routes-in-use
    else
        fail host-mode-routes-in-use "$(echo "$during" | tr '\n' '|')"
    fi
    got=$(in_host curl -s --max-time 10 "http://$SRV4/small" | sha256sum | cut -d' ' -f1)
    flows=$("$LOFT_BIN" status -c "$T_DIR/host.yaml" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["tcp-flows-opened"])')
    if [ "$got" = "$(sha_of "$T_DIR/www/small")" ] && [ "$flows" -ge 1 ]; then
        pass host-mode-traffic-through-tun
    else
        fail host-mode-traffic-through-tun "sha $got, loft tcp flows $flows"
    fi
    kill -TERM $HPID; wait $HPID; rc=$?
    after=$(host_snapshot)
    if [ $rc -eq 0 ] && [ "$before" = "$after" ]; then pass host-mode-clean-exit
    else fail host-mode-clean-exit "exit $rc; diff: $(diff <(echo "$before") <(echo "$after") | tr '\n' '|')"; fi
    # kill -9 leaves routes behind; the next start removes them first, the next stop the rest.
    host_start && kill -KILL $HPID; wait $HPID 2>/dev/null
    left=$(host_snapshot)
    if host_start; then kill -TERM $HPID; wait $HPID; fi
    after=$(host_snapshot)
    if [ "$left" != "$before" ] && [ "$before" = "$after" ]; then pass host-mode-kill9-cleaned-next-start
    else fail host-mode-kill9-cleaned-next-start "leftovers seen: $([ "$left" != "$before" ] && echo yes || echo no); diff: $(diff <(echo "$before") <(echo "$after") | tr '\n' '|')"; fi
else
    for c in host-mode-routes-in-use host-mode-traffic-through-tun host-mode-clean-exit host-mode-kill9-cleaned-next-start; do
        fail $c "host-mode loft did not start: $(tail -3 "$T_DIR/host-loft.log" | tr '\n' '|')"
    done
fi
finish
