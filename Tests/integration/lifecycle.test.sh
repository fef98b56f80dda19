#!/usr/bin/env bash
# What loft sets up in the namespace, and that SIGTERM / SIGINT take all of it down again:
# the namespace it created, /etc/netns/<ns>/resolv.conf, its TUN, its processes, no new links.
# A namespace loft did not create is kept. Host mode (no netns, route-all: false).
# runs alone: it compares the whole machine's links before and after (Tests/run).
. "$(dirname "$0")/lib.sh"

topo_up

links_root() { ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort; }

# setup-state: namespace, TUN (up, MTU, addresses), default routes into it, resolv.conf.
state_problems() {
    local ns=$1 mtu=$2 l
    netns_exists "$ns" || echo "namespace $ns missing"
    l=$(ip -n "$ns" -o link show "$TUN_NAME" 2>&1) || { echo "no $TUN_NAME in $ns"; return; }
    echo "$l" | grep -q "mtu $mtu " || echo "$TUN_NAME mtu: $l"
    echo "$l" | grep -q ',UP' || echo "$TUN_NAME not up: $l"
    ip -n "$ns" -o -4 addr show dev "$TUN_NAME" | grep -q ' 198.18.0.1/30 ' || echo "no 198.18.0.1/30 on $TUN_NAME"
    ip -n "$ns" -o -6 addr show dev "$TUN_NAME" | grep -q ' fd00:18::1/126 ' || echo "no fd00:18::1/126 on $TUN_NAME"
    ip -n "$ns" -4 route show default | grep -q "dev $TUN_NAME" || echo "no IPv4 default route via $TUN_NAME: $(ip -n "$ns" -4 route | tr '\n' '|')"
    ip -n "$ns" -6 route show default | grep -q "dev $TUN_NAME" || echo "no IPv6 default route via $TUN_NAME: $(ip -n "$ns" -6 route | tr '\n' '|')"
    grep -qx "nameserver $SRV4" "/etc/netns/$ns/resolv.conf" 2>/dev/null || echo "resolv.conf: $(cat "/etc/netns/$ns/resolv.conf" 2>&1 | tr '\n' '|')"
}

# teardown NAME SIGNAL CREATED: stop loft with SIGNAL; exit 0, nothing left behind.
teardown() {
    local name=$1 sig=$2 created=$3 ns=$LOFT_NS tun=$LOFT_TUN pid=$LOFT_PID kids left p
    kids=
    [ -n "$pid" ] && kids=$(pgrep -P "$pid" | tr '\n' ' ')
    if ! loft_stop "$sig"; then
        fail "$name" "loft exit status $LOFT_RC after SIG$sig: $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
        return
    fi
    left=$(loft_leftovers "$ns" "$tun" "$created")
    for p in $pid $kids; do kill -0 "$p" 2>/dev/null && left+="process $p still running;"; done
    [ "$(links_root)" = "$LINKS_BEFORE" ] || left+="root links changed: $(diff <(echo "$LINKS_BEFORE") <(links_root) | grep '^[<>]' | tr '\n' ' ');"
    if [ -z "$left" ]; then pass "$name"; else fail "$name" "$(echo "$left" | tr '\n' ';')"; fi
}

LINKS_BEFORE=$(links_root)

# 1: loft creates the namespace; SIGTERM.
if require_loft "$(loft_config life1)" setup-state sigterm-teardown; then
    p=$(state_problems "$APP_NS" 1500)
    if [ -z "$p" ]; then pass setup-state; else fail setup-state "$(echo "$p" | tr '\n' ';')"; fi
    teardown sigterm-teardown TERM yes
fi

# 2: again with MTU 9000; SIGINT.
if require_loft "$(loft_config life2 mtu=9000)" setup-state-mtu9000 sigint-teardown; then
    p=$(state_problems "$APP_NS" 9000)
    if [ -z "$p" ]; then pass setup-state-mtu9000; else fail setup-state-mtu9000 "$(echo "$p" | tr '\n' ';')"; fi
    teardown sigint-teardown INT yes
fi

# 2b: a second loft for the same namespace exits at once, naming the first, and touches
# nothing: the first keeps its namespace, TUN, routes and traffic.
if require_loft "$(loft_config life-lock)" second-loft-refused first-loft-untouched lock-teardown; then
    t0=$(now_ms)
    out=$(timeout 20 "$LOFT_BIN" run -c "$T_DIR/life-lock.yaml" 2>&1 </dev/null)
    rc=$?
    took=$(( $(now_ms) - t0 ))
    note "second loft: exit $rc after $took ms: $(echo "$out" | grep -m1 'start.failed' | cut -c1-200)"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$out" | grep -q "pid $LOFT_PID" && [ $took -lt 5000 ]; then
        pass second-loft-refused
    else
        fail second-loft-refused "exit $rc after $took ms: $(echo "$out" | tail -3 | tr '\n' '|')"
    fi
    p=$(state_problems "$APP_NS" 1500)
    in_app ping -c1 -W2 "$SRV4" >/dev/null 2>&1 || p+="no ping through the first loft;"
    grep -q 'tun.down' "$LOFT_LOG" && p+="the first loft took its TUN down;"
    if [ -z "$p" ]; then pass first-loft-untouched; else fail first-loft-untouched "$(echo "$p" | tr '\n' ';')"; fi
    teardown lock-teardown TERM yes
fi

# 3: a namespace that exists before loft starts is used and kept.
PRE_NS=loft-pre-$T_ID
T_NETNS+=("$PRE_NS"); register netns "$PRE_NS"
ip netns add "$PRE_NS"
if loft_start "$(loft_config life3 netns="$PRE_NS")" "$PRE_NS"; then
    p=$(state_problems "$PRE_NS" 1500)
    if [ -z "$p" ]; then pass existing-netns-used; else fail existing-netns-used "$(echo "$p" | tr '\n' ';')"; fi
    teardown existing-netns-kept TERM no
else
    fail existing-netns-used "loft did not start"; fail existing-netns-kept "loft did not start"
fi

# 4: host mode: a TUN in the root namespace with only its own subnet routed; loft answers a
# ping to that subnet itself. A lower-priority unreachable route keeps 198.18.5.0/30 from
# ever leaving the machine should the TUN be missing.
HOST_TUN=loft-${T_ID}t
register link "$HOST_TUN"
ip route add unreachable 198.18.5.0/30 metric 4000
on_cleanup 'ip route del unreachable 198.18.5.0/30 metric 4000'
cat >"$T_DIR/host.yaml" <<EOF2
log: info
tun:
  name: $HOST_TUN
  mtu: 1500
  ipv4: 198.18.5.1/30
  ipv6: fd00:5::1/126
  route-all: false
  icmp: reply
socks5: off
bridge: off
default: direct
EOF2
if loft_start "$T_DIR/host.yaml" - "$HOST_TUN"; then
    if ip route get 198.18.5.2 2>&1 | grep -q "dev $HOST_TUN"; then
        out=$(ping -c1 -W2 198.18.5.2 2>&1)
        if [ $? -eq 0 ]; then pass host-mode-ping; else fail host-mode-ping "$(echo "$out" | tail -2 | tr '\n' '|')"; fi
    else
        fail host-mode-ping "198.18.5.2 not routed into $HOST_TUN: $(ip route get 198.18.5.2 2>&1)"
    fi
    if { ip route show default; ip -6 route show default; } | grep -q "$HOST_TUN"; then
        fail host-mode-no-default-route "a default route (IPv4 or IPv6) via $HOST_TUN with route-all: false"
    else pass host-mode-no-default-route; fi
    teardown host-mode-teardown TERM yes
else
    fail host-mode-ping "loft did not start"; fail host-mode-no-default-route "loft did not start"
    fail host-mode-teardown "loft did not start"
fi
finish
