#!/usr/bin/env bash
# ICMP echo per tun.icmp: reply answers pings locally, drop answers nothing.
. "$(dirname "$0")/lib.sh"

topo_up

ping_ok() {         # ping_ok NAME ADDR: one echo must be answered within 2 s
    local out
    out=$(in_app ping -c1 -W2 "$2" 2>&1)
    if [ $? -eq 0 ]; then pass "$1"; else fail "$1" "ping -c1 -W2 $2: $(echo "$out" | tail -2 | tr '\n' '|')"; fi
}
ping_none() {       # ping_none NAME ADDR: no answer at all
    local out rc
    out=$(in_app ping -c1 -W2 "$2" 2>&1)
    rc=$?
    if [ $rc -eq 1 ]; then pass "$1"; else fail "$1" "ping -c1 -W2 $2 exit $rc (want 1, no reply): $(echo "$out" | tail -2 | tr '\n' '|')"; fi
}

if require_loft "$(loft_config icmp-reply icmp=reply)" ping-reply-v4 ping-reply-v6 loft-exit-clean-reply; then
    ping_ok ping-reply-v4 "$SRV4"
    ping_ok ping-reply-v6 "$SRV6"
    loft_stop_clean loft-exit-clean-reply
fi

if require_loft "$(loft_config icmp-drop icmp=drop)" ping-drop-v4 ping-drop-v6 loft-exit-clean-drop; then
    ping_none ping-drop-v4 "$SRV4"
    ping_none ping-drop-v6 "$SRV6"
    loft_stop_clean loft-exit-clean-drop
fi
finish
