#!/usr/bin/env bash
# The sstp outbound against hostile or odd SSTP servers (issue 28): the test responder
# (Tests/interop/sstp_server.py) in its hostile modes, one loft redialled onto each with
# `loft path-changed`. Fragmented IPv4 datagrams cross the link (UDP echoes of 1473–8000 bytes,
# ping -s 5000); IPCP addresses that cannot be a host's on the link (loopback, multicast, the
# limited broadcast, the server's own, the TUN's own) are not taken and the namespace keeps
# working; the TUN's MTU is what the link carries (server MRU 1500, 1000 and 65535: a 4 MiB upload);
# a server that floods LCP Echo-Requests or unknown protocols and stops reading does not make
# loft grow; one that renegotiates LCP after up is redialled with backoff and one log line; one
# that Naks every LCP request is given up after Max-Failure rounds, at little CPU.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sstp-lib.sh"

topo_up
sstp_pki
make_files 1
head -c $((4 * 1024 * 1024 + 12345)) /dev/urandom >"$T_DIR/www/up4"
# On every address of srv: the responder's TUN (and $PPP_LOCAL with it) comes and goes with it.
bg_in "$SRV_NS" sink socat -t 30 "TCP4-LISTEN:9000,fork,reuseaddr" EXEC:sha256sum
bg_in "$SRV_NS" uecho socat -b 65536 "UDP4-RECVFROM:9101,fork" PIPE
wait_listen "$SRV_NS" tcp 9000 && wait_listen "$SRV_NS" udp 9101 || die "services did not start"

CFG=$T_DIR/hostile.yaml
cat >"$CFG" <<EOF
log: info
tun:
  name: $TUN_NAME
  netns: $APP_NS
  ipv4: 198.18.0.1/30
  ipv6: fd00:18::1/126
  route-all: true
socks5: off
bridge: off
outbounds:
  - name: corp
    type: sstp
    server: $SRV4:$SPORT
    user: $USER_NAME
    password: "$PASSWORD"
    tls: { server-name: sstp.loft.test, ca: $PKI/ca.pem }
    auth: [mschapv2]
limits: { connect-timeout: 10s, udp-idle-timeout: 60s }
default: corp
control: $T_DIR/hostile.sock
EOF

ups() { grep -c 'event=sstp.up' "$LOFT_LOG"; }
# redial_to ARGS…: the responder restarted with ARGS (RESP_EXTRA), loft dials it at once.
redial_to() {
    stop_responder
    RESP_EXTRA="$*" start_responder mschapv2
    "$LOFT_BIN" path-changed -c "$CFG" >/dev/null 2>&1
}
# wait_sstp_up N: until loft logged its Nth sstp.up (10 s), then the TUN settles.
wait_sstp_up() {
    local i
    for i in $(seq 100); do [ "$(ups)" -ge "$1" ] && { sleep 0.3; return 0; }; sleep 0.1; done
    return 1
}
tun_mtu() { ip -n "$APP_NS" link show dev "$TUN_NAME" | sed -n 's/.* mtu \([0-9]*\) .*/\1/p'; }
reply_drops() {
    "$LOFT_BIN" status --json -c "$CFG" 2>/dev/null | python3 -c '
import json, sys
o = next(x for x in json.load(sys.stdin)["outbounds"] if x["name"] == "corp")
print(o.get("counters", {}).get("reply-drops", 0))' 2>/dev/null
}
tun_addrs() { ip -n "$APP_NS" -4 addr show dev "$TUN_NAME" | awk '/inet / {print $2}' | tr '\n' ' '; }

CASES="hostile-up udp-fragments ping-fragmented bad-address-127.0.0.1 bad-address-224.0.0.1
bad-address-255.255.255.255 bad-address-server-own bad-address-tun-own bad-address-recovers
mru-1500-mtu mru-1500-upload mru-1000-mtu mru-1000-upload mru-65535-mtu mru-65535-upload flood-echo flood-reject
renegotiate-backoff nak-all-bounded stop-clean"
start_responder mschapv2
if require_loft "$CFG" $CASES; then
    if wait_sstp_up 1; then pass hostile-up; else fail hostile-up "$(grep sstp "$LOFT_LOG" | tail -3 | tr '\n' '|')"; fi

    # --- 8: fragmented IPv4 datagrams (MTU 1500): the later fragments follow the first one
    # over the link; the echo's fragmented answers come back to the TUN.
    r=$(py_in_app "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
ok = []
for n in (500, 1472, 1473, 3000, 8000):
    for attempt in range(3):
        s.sendto(bytes([n % 251]) * n, ('$PPP_LOCAL', 9101))
        try:
            d, a = s.recvfrom(65536)
        except socket.timeout:
            continue
        if d == bytes([n % 251]) * n:
            ok.append(n)
            break
print(' '.join(map(str, ok)))" 2>&1)
    if [ "$r" = "500 1472 1473 3000 8000" ]; then pass udp-fragments; note "UDP echoes back: $r"
    else fail udp-fragments "echoes back: '$r' (want 500 1472 1473 3000 8000)"; fi
    if in_app ping -c 3 -i 0.3 -W 2 -s 5000 "$PPP_LOCAL" >"$T_DIR/ping5000.out" 2>&1; then pass ping-fragmented
    else fail ping-fragmented "$(tail -2 "$T_DIR/ping5000.out" | tr '\n' '|')"; fi

    # --- 6: an IPCP address that cannot be loft's on this link is not taken (the TUN keeps the
    # last link's address; loopback in the namespace still works); the reason is logged.
    for a in 127.0.0.1 224.0.0.1 255.255.255.255 "$PPP_LOCAL" 198.18.0.1; do
        case $a in
            "$PPP_LOCAL") name=server-own ;;
            198.18.0.1) name=tun-own ;;
            *) name=$a ;;
        esac
        redial_to --offer-address "$a"
        wait_log "$LOFT_LOG" "event=sstp.down.*${a//./\\.}" 8
        sleep 0.3
        have=$(tun_addrs)
        if grep -q "event=sstp.down.*${a//./\\.}" "$LOFT_LOG" && ! echo " $have" | grep -q " $a/32 " \
            && echo "$have" | grep -q "$PPP_CLIENT/32" && in_app ping -c 1 -W 1 127.0.0.1 >/dev/null 2>&1; then
            pass "bad-address-$name"; note "$a: $(grep "event=sstp.down.*${a//./\\.}" "$LOFT_LOG" | head -1 | sed 's/.*reason=//' | cut -c1-150)"
        else fail "bad-address-$name" "TUN has '$have'; $(grep sstp "$LOFT_LOG" | tail -2 | tr '\n' '|')"; fi
    done
    n=$(ups)
    redial_to
    if wait_sstp_up $((n + 1)) && echo "$(tun_addrs)" | grep -q "$PPP_CLIENT/32" && in_app ping -c 1 -W 2 "$PPP_LOCAL" >/dev/null 2>&1; then
        pass bad-address-recovers
    else fail bad-address-recovers "TUN has '$(tun_addrs)'; $(grep sstp "$LOFT_LOG" | tail -2 | tr '\n' '|')"; fi

    # --- 7: the TUN's MTU is what the link carries. MRU 1000: the TUN keeps IPv6's 1280 and
    # loft fits the flows to 1000; MRU 65535: an SSTP packet carries at most 4087.
    want=$(sha_of "$T_DIR/www/up4")
    for mru in 1500 1000 65535; do
        n=$(ups)
        redial_to --mru $mru
        wait_sstp_up $((n + 1))
        m=$(tun_mtu)
        case $mru in 1500) expect=1500 ;; 1000) expect=1280 ;; *) expect=4087 ;; esac
        if [ "$m" = "$expect" ]; then pass mru-$mru-mtu; else fail mru-$mru-mtu "TUN MTU $m, want $expect"; fi
        t0=$(now_ms)
        got=$(in_app timeout 20 socat -t 10 - "TCP4:$PPP_LOCAL:9000" <"$T_DIR/www/up4" | cut -d' ' -f1)
        t1=$(now_ms)
        if [ "$got" = "$want" ]; then pass mru-$mru-upload; note "MRU $mru: TUN MTU $m, 4 MiB up in $((t1 - t0)) ms"
        else fail mru-$mru-upload "sha256 '$got' after $((t1 - t0)) ms; TUN MTU $m; $("$LOFT_BIN" status -c "$CFG" 2>&1 | grep -E 'full-drops|link-down' | tr '\n' '|')"; fi
    done

    # --- 5: a server that floods and stops reading: loft's replies wait at most 256 KiB, the
    # rest are dropped and counted, and the link ends; loft's memory stays flat.
    # Each with a fresh loft (memory a process once had shows in its RSS for good).
    # (Protocol-Rejects quote at most the server's MRU: twice the frames.)
    for flood in echo:10000 reject:20000; do
        kind=${flood%%:*}
        redial_to
        loft_stop TERM
        if ! loft_start "$CFG" || ! wait_sstp_up 1; then fail flood-$kind "loft did not start or come up"; continue; fi
        n=$(ups)
        rss0=$(rss_kib "$LOFT_PID")
        peak=$rss0
        redial_to --flood $flood
        wait_sstp_up $((n + 1))
        for i in $(seq 40); do
            r=$(rss_kib "$LOFT_PID"); [ "${r:-0}" -gt "$peak" ] && peak=$r
            grep -q '^flood-\(done\|cut\)' "$RESP_LOG" && [ $i -ge 10 ] && break
            sleep 0.2
        done
        grown=$(((peak - rss0) / 1024))
        down=$(grep -c 'event=sstp.down.*does not read' "$LOFT_LOG")
        rd=$(reply_drops)
        if [ "$grown" -lt 6 ] && [ "$down" -ge 1 ] && [ "${rd:-0}" -ge 256 ]; then pass flood-$kind
        else fail flood-$kind "RSS $rss0 -> $peak kB (+$grown MiB), down-lines $down, reply-drops ${rd:-?}; $(grep -E '^flood' "$RESP_LOG" | tail -1)"; fi
        note "flood $flood (4000 bytes each, not read): RSS ${rss0} kB -> peak ${peak} kB, reply-drops ${rd:-?}; $(grep -E '^flood' "$RESP_LOG" | tail -1)"
    done

    # --- 11: LCP renegotiated 300 ms after every up: loft redials with a growing backoff and
    # logs the reason once.
    redial_to --renegotiate-ms 300
    n0=$(ups)
    w0=$(grep -c 'event=sstp.down.*restarted LCP' "$LOFT_LOG")
    sleep 8
    nu=$(($(ups) - n0))
    nw=$(($(grep -c 'event=sstp.down.*restarted LCP' "$LOFT_LOG") - w0))
    if [ "$nu" -ge 2 ] && [ "$nu" -le 5 ] && [ "$nw" -le 1 ]; then pass renegotiate-backoff
    else fail renegotiate-backoff "$nu ups, $nw warnings in 8 s"; fi
    note "renegotiating server: $nu links up and $nw warnings in 8 s"
    # A server that Naks every LCP request: Max-Failure rounds, then given up and redialled
    # with backoff; loft's CPU stays low.
    # Warnings are counted from when path-changed has been answered: it forgets the reasons
    # logged, so a dial to the new server that failed before it arrived is logged again.
    redial_to --nak-all
    w0=$(grep -c 'event=sstp.down.*LCP did not converge' "$LOFT_LOG")
    sleep 0.5
    c0=$(cpu_ticks "$LOFT_PID")
    sleep 6
    c1=$(cpu_ticks "$LOFT_PID")
    reqs=$(grep -c '^tls' "$RESP_LOG")
    nreq=$(sed -n 's/^lcp-requests //p' "$RESP_LOG" | sort -n | tail -1)
    nw=$(($(grep -c 'event=sstp.down.*LCP did not converge' "$LOFT_LOG") - w0))
    cpu=$(((c1 - c0) * 100 / 6 / $(getconf CLK_TCK)))
    if [ "$cpu" -lt 5 ] && [ "$nw" = 1 ] && [ "$reqs" -le 6 ]; then pass nak-all-bounded
    else fail nak-all-bounded "loft at $cpu % of a core, $nw warnings, $reqs connections, ${nreq:-<10} LCP requests"; fi
    note "Nak-all server: loft at $cpu % of a core over 6 s; $reqs connections; LCP requests counted up to ${nreq:-<10}; $nw warnings"
    loft_stop_clean stop-clean
fi
stop_responder
finish
