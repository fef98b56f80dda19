#!/usr/bin/env bash
# QUIC migration on a real default-route change, and a front name with several addresses
# (root, namespaces). loft runs in a namespace of its own standing in for a phone (HOST_NS,
# SOCKS5 input only) with two links to the srv namespace, A and B, and its default route via
# A; loft-front (quic and h3) runs in srv on an address of its own (FRONT4, on srv's lo)
# reached through the default route. For quic, then h3: one second into a 50 MiB download
# (SOCKS5 -> holder -> carrier -> loft-front -> nginx in srv, rate-limited to 10 MB/s so it is
# still in flight after the route monitor's 1 s settling), the default route is replaced by one
# via B and link A goes down, as when Wi-Fi gives way to LTE. loft's route monitor (rtnetlink)
# sees the change and the carrier migrates the connection to a new socket, whose source
# address is B's: the download, still running when the migration is logged, completes with
# the right SHA-256, migrations 0 -> 1, no RESUME and no carrier loss, the QUIC socket now on
# B's address. Cases CARRIER-route-session-up, -route-download-across-change,
# -route-change-migrates, -route-new-socket-on-b, -route-exit-clean.
# Then the front's name with several addresses (HOST_NS's /etc/hosts): the first refused (an
# address in srv where nothing listens: ICMP port unreachable), the second silent (nftables in
# srv drops it), the third the front's: the quic carrier dials them in order and comes up on
# the third in its first dial (connect-timeout 3 s: about 1 s for each address that has others
# after it). Cases addresses-up-on-third, addresses-tried-in-order, addresses-transfer,
# addresses-exit-clean.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

HOST_NS=loft-host-$T_ID
LINK_A=loft-${T_ID}a
NA=$((NET + 150)) NB=$((NET + 152))     # the two links' subnets 198.18.NA.0/24, 198.18.NB.0/24
FRONT4=198.18.$((NET + 151)).9
SOCKS_PORT=1080                           # on HOST_NS's own loopback
T_NETNS+=("$HOST_NS"); register netns "$HOST_NS"
ip netns add "$HOST_NS" || die "ip netns add $HOST_NS"
ip -n "$HOST_NS" link set lo up
for l in a b; do
    n=$NA; [ $l = b ] && n=$NB
    register link "loft-${T_ID}$l"
    ip -n "$HOST_NS" link add "loft-${T_ID}$l" type veth peer name "loft-${T_ID}${l}s" netns "$SRV_NS" \
        || die "veth $l"
    ip -n "$HOST_NS" addr add "198.18.$n.1/24" dev "loft-${T_ID}$l"
    ip -n "$HOST_NS" link set "loft-${T_ID}$l" up
    ip -n "$SRV_NS" addr add "198.18.$n.2/24" dev "loft-${T_ID}${l}s"
    ip -n "$SRV_NS" link set "loft-${T_ID}${l}s" up
done
ip -n "$SRV_NS" addr add "$FRONT4/32" dev lo
ip -n "$HOST_NS" route add default via "198.18.$NA.2" || die "default route via A"

sed "s/^listen: .*/listen: $FRONT4:$FRONT_PORT/" "$T_DIR/front.yaml" >"$T_DIR/front-srv.yaml"
echo "carriers: [quic, h3]" >>"$T_DIR/front-srv.yaml"
front_run "$T_DIR/front-srv.yaml" "$SRV_NS" || die "loft-front did not start in srv: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"

on_cleanup "rm -f $CTL"
# loft_route_config CARRIER SERVER: loft's config (SOCKS5 input, the holder over CARRIER to
# SERVER:FRONT_PORT); prints its path.
loft_route_config() {
    cat >"$T_DIR/loft-$1.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$SOCKS_PORT }
bridge: off
outbounds:
  - { name: home, type: loft, server: $2:$FRONT_PORT, carrier: $1, token: holder-test-token,
      tls: { server-name: front.test, ca: $T_DIR/pki/ca.pem } }
default: home
control: $CTL
EOF
    echo "$T_DIR/loft-$1.yaml"
}
# loft_in_host CONFIG: loft in HOST_NS (log $T_DIR/<config's name>.log).
loft_in_host() {
    LOFT_CFG=$1 LOFT_LOG=$T_DIR/$(basename "$1" .yaml).log LOFT_NS=- LOFT_TUN=none
    ip netns exec "$HOST_NS" "$LOFT_BIN" run -c "$LOFT_CFG" >"$LOFT_LOG" 2>&1 </dev/null &
    LOFT_PID=$!; register_pid "$LOFT_PID"
}
# quic_local: the local address of loft's QUIC socket towards the front.
quic_local() { ip netns exec "$HOST_NS" ss -Hun "dst $FRONT4:$FRONT_PORT" | awk '{print $(NF - 1)}' | head -1; }

# route_change CARRIER: the route change in the middle of a download over CARRIER (quic, h3),
# from the default route via A. Cases CARRIER-route-session-up, -route-download-across-change,
# -route-change-migrates, -route-new-socket-on-b, -route-exit-clean.
route_change() {
    local c=$1 p=$1-route- L0 L1 r0 l0 m0 m1 r1 l1 pc sw t0 end_ms ms got mig_ms x
    ip -n "$HOST_NS" link set "$LINK_A" up
    ip -n "$HOST_NS" route replace default via "198.18.$NA.2" || die "default route via A"
    loft_in_host "$(loft_route_config "$c" "$FRONT4")"
    if ! wait_state up 15; then
        for x in session-up download-across-change change-migrates new-socket-on-b; do
            fail "$p$x" "holder not up: $(field 'o["state"]') $(field 'o["detail"]'); $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
        done
        loft_stop_clean "${p}exit-clean"
        return
    fi
    L0=$(quic_local)
    if [[ $L0 == 198.18.$NA.1:* ]]; then pass "${p}session-up"; note "$c: quic socket $L0 (link A)"
    else fail "${p}session-up" "quic socket '$L0', not on link A (198.18.$NA.1)"; fi

    r0=$(field 'c["resumes"]'); l0=$(field 'c["carrier-losses"]'); m0=$(field 'c["migrations"]')
    (
        sleep 1
        ip -n "$HOST_NS" route replace default via "198.18.$NB.2"
        ip -n "$HOST_NS" link set "$LINK_A" down
    ) &
    sw=$!
    t0=$(now_ms)
    ip netns exec "$HOST_NS" curl -sS --max-time 40 --limit-rate 10M --socks5 "127.0.0.1:$SOCKS_PORT" \
        -o "$T_DIR/dl" "http://$SRV4/big" 2>"$T_DIR/curl.err"
    end_ms=$(now_ms)
    ms=$((end_ms - t0))
    wait "$sw"
    got=$(sha_of "$T_DIR/dl" 2>/dev/null)
    rm -f "$T_DIR/dl"
    # The migration (its log line's time) happened while the download was still running.
    mig_ms=$(awk '/event=holder.migrated/ { sub("ts=", "", $1); printf "%.0f\n", $1 * 1000; exit }' "$LOFT_LOG")
    if [ "$got" = "$BIG_SHA" ] && [ -n "$mig_ms" ] && [ "$mig_ms" -gt "$t0" ] && [ "$mig_ms" -lt $((end_ms - 200)) ]; then
        pass "${p}download-across-change"; note "$c: 50 MiB in $ms ms, migrated $((mig_ms - t0)) ms into it"
    else
        fail "${p}download-across-change" "sha256 '$got' (want $BIG_SHA) after $ms ms, migrated at ${mig_ms:-never} (download $t0..$end_ms): $(tail -1 "$T_DIR/curl.err")"
    fi
    m1=$(field 'c["migrations"]'); r1=$(field 'c["resumes"]'); l1=$(field 'c["carrier-losses"]'); pc=$(field 'c["path-changes"]')
    if [ "$m1" = $((m0 + 1)) ] && [ "$r1" = "$r0" ] && [ "$l1" = "$l0" ] && [ "$(field 'o["state"]')" = up ] \
        && grep -q 'event=path-monitor.changed' "$LOFT_LOG"; then
        pass "${p}change-migrates"; note "$c: route monitor: path-changes $pc, migrations $m0 -> $m1, resumes $r0, carrier-losses $l0"
    else
        fail "${p}change-migrates" "migrations $m0 -> $m1, resumes $r0 -> $r1, losses $l0 -> $l1, path-changes $pc, state $(field 'o["state"]'); $(grep -E 'path-monitor|holder\.(path|migr)|quic.migrat' "$LOFT_LOG" | tail -3 | tr '\n' '|')"
    fi
    L1=$(quic_local)
    if [[ $L1 == 198.18.$NB.1:* ]]; then pass "${p}new-socket-on-b"; note "$c: quic socket $L0 -> $L1"
    else fail "${p}new-socket-on-b" "quic socket '$L0' -> '$L1', not on link B (198.18.$NB.1)"; fi
    loft_stop_clean "${p}exit-clean"
}
route_change quic
route_change h3

# --- the front's name with several addresses --------------------------------------------------
REFUSED4=198.18.$((NET + 151)).7 SILENT4=198.18.$((NET + 151)).8
ip -n "$SRV_NS" addr add "$REFUSED4/32" dev lo
ip -n "$SRV_NS" addr add "$SILENT4/32" dev lo
in_srv nft add table ip loftsilent && in_srv nft add chain ip loftsilent in '{ type filter hook input priority 0; }' \
    && in_srv nft add rule ip loftsilent in ip daddr "$SILENT4" drop || die "nftables in srv"
mkdir -p "/etc/netns/$HOST_NS"
printf '127.0.0.1 localhost\n%s front.test\n%s front.test\n%s front.test\n' "$REFUSED4" "$SILENT4" "$FRONT4" \
    >"/etc/netns/$HOST_NS/hosts"
sed 's/^log: info/log: info\nlimits: { connect-timeout: 3s }/' "$(loft_route_config quic front.test)" >"$T_DIR/loft-names.yaml"
t0=$(now_ms)
loft_in_host "$T_DIR/loft-names.yaml"
if wait_state up 10; then
    up_ms=$(( $(now_ms) - t0 ))
    peer=$(ip netns exec "$HOST_NS" ss -Hun "dst $FRONT4:$FRONT_PORT" | awk '{print $NF}' | head -1)
    if [ "$peer" = "$FRONT4:$FRONT_PORT" ] && [ "$(field 'c["dials"]')" = 1 ]; then
        pass addresses-up-on-third; note "up in $up_ms ms on $peer, dials $(field 'c["dials"]')"
    else fail addresses-up-on-third "quic socket to '$peer', dials $(field 'c["dials"]')"; fi
else
    fail addresses-up-on-third "not up in 10 s: $(field 'o["state"]') $(field 'o["detail"]')"
fi
tried=$(grep 'event=carrier.quic.next-address' "$LOFT_LOG" | sed -n 's/.*next=\([0-9.:]*\).*/\1/p' | tr '\n' ' ')
reasons=$(grep 'event=carrier.quic.next-address' "$LOFT_LOG" | sed -n 's/.*failed="\([^"]*\)".*/\1/p' | tr '\n' '|')
if [ "$tried" = "$SILENT4:$FRONT_PORT $FRONT4:$FRONT_PORT " ] && [[ $reasons == "$REFUSED4"*efused*"|$SILENT4"*"no QUIC handshake within"* ]]; then
    pass addresses-tried-in-order; note "after $reasons"
else
    fail addresses-tried-in-order "next addresses '$tried' after '$reasons'"
fi
got=$(ip netns exec "$HOST_NS" curl -sS --max-time 20 --socks5 "127.0.0.1:$SOCKS_PORT" "http://$SRV4/f0" 2>&1 | sha256sum | cut -d' ' -f1)
if [ "$got" = "$(sha_of "$T_DIR/www/f0")" ]; then pass addresses-transfer
else fail addresses-transfer "256 KiB through the holder: sha256 $got"; fi
loft_stop_clean addresses-exit-clean
kill -TERM "$FRONT_PID" 2>/dev/null; wait "$FRONT_PID" 2>/dev/null
finish
