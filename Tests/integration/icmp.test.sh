#!/usr/bin/env bash
# ICMP echo per tun.icmp: reply answers pings locally, drop answers nothing. A datagram a
# destination refuses comes back to the app as ICMP port unreachable.
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

# refused HOST: a connected UDP socket in the app namespace sends to a closed port of the srv
# namespace; the srv kernel refuses it at loft's direct socket, loft tells the app, and the
# app's next recv fails with ECONNREFUSED (at once, not at a timeout).
refused() {
    in_app python3 - "$1" <<'PY'
import socket, sys, time
host = sys.argv[1]
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.connect((host, 9))
t0 = time.time()
s.send(b"anyone there?")
try:
    s.recv(100)
    print("got an answer"); sys.exit(1)
except ConnectionRefusedError:
    print("ECONNREFUSED after %.0f ms" % ((time.time() - t0) * 1000)); sys.exit(0)
except socket.timeout:
    print("no ICMP: timed out after 3 s"); sys.exit(1)
PY
}

if require_loft "$(loft_config icmp-reply icmp=reply)" ping-reply-v4 ping-reply-v6 udp-port-unreachable-v4 udp-port-unreachable-v6 loft-exit-clean-reply; then
    # Addresses no host has (in srv's subnets, nothing answers there): only loft's own reply
    # answers them, so a forwarded ping cannot pass for one.
    ping_ok ping-reply-v4 "198.18.$NET.77"
    ping_ok ping-reply-v6 "fd00:$NET::77"
    for v in 4 6; do
        [ $v = 4 ] && host=$SRV4 || host=$SRV6
        out=$(refused "$host" 2>&1)
        if [ $? -eq 0 ]; then pass udp-port-unreachable-v$v; else fail udp-port-unreachable-v$v "$out"; fi
        note "udp to $host:9: $out"
    done
    loft_stop_clean loft-exit-clean-reply
fi

if require_loft "$(loft_config icmp-drop icmp=drop)" ping-drop-v4 ping-drop-v6 loft-exit-clean-drop; then
    ping_none ping-drop-v4 "$SRV4"
    ping_none ping-drop-v6 "$SRV6"
    loft_stop_clean loft-exit-clean-drop
fi
finish
