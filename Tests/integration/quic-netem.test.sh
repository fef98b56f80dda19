#!/usr/bin/env bash
# quic against ws on a lossy, slow path (root, namespaces): loft-front runs inside the srv
# namespace on 198.18.N.2 (h2-free: ws on TCP, quic on UDP, the same port), behind the veth
# that carries only the carrier, with `tc netem` 10 ms delay and 1 % loss on each end (20 ms
# round trip) where the kernel has netem, else nftables dropping 1 % of the carrier's packets
# each way (no delay). For ws, quic and h3 (HTTP/3 on the same QUIC port): 4 downloads
# of 6 MiB (2 MiB with netem's delay) at once from nginx in srv through TUN -> loft -> carrier -> front, each checked
# with SHA-256, and the total goodput (printed: a figure, not a pass/fail). Cases: every
# transfer intact on each carrier, and the loss really applied.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

sed "s/^listen: .*/listen: $SRV4:$FRONT_PORT/" "$T_DIR/front.yaml" >"$T_DIR/front-srv.yaml"
echo "carriers: [ws, quic, h3]" >>"$T_DIR/front-srv.yaml"
in_srv "$FRONT_BIN" run -c "$T_DIR/front-srv.yaml" >>"$FRONT_LOG" 2>&1 </dev/null &
FRONT_PID=$!; register_pid "$FRONT_PID"; T_PIDS+=("$FRONT_PID")
for _ in $(seq 100); do grep -q 'event=ready' "$FRONT_LOG" && break; sleep 0.1; done
grep -q 'event=ready' "$FRONT_LOG" || die "loft-front did not start in srv: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"
# Loss: `tc netem` where the kernel has it (10 ms delay and 1 % loss each way); this machine's
# kernel has no sch_netem, so the fallback is nftables in srv dropping 1 % of the carrier's
# packets each way (numgen random), with no added delay. nftables sees what the stack passes it:
# a TCP segment with TSO, a batch of QUIC packets with UDP GSO (one skb, dropped whole): the
# check is on skbs, about 1 % of the carrier's skbs dropped (bytes printed).
LOSS=netem
if ! tc qdisc add dev "$VETH_ROOT" root netem delay 10ms loss 1% 2>/dev/null; then
    LOSS=nft
    in_srv nft -f - <<NFTEOF || die "nftables loss rules in srv"
table inet loftloss {
    chain in {
        type filter hook input priority 0;
        iifname "$VETH_SRV" th dport $FRONT_PORT counter
        iifname "$VETH_SRV" th dport $FRONT_PORT numgen random mod 100 < 1 counter drop
    }
    chain out {
        type filter hook output priority 0;
        oifname "$VETH_SRV" th sport $FRONT_PORT counter
        oifname "$VETH_SRV" th sport $FRONT_PORT numgen random mod 100 < 1 counter drop
    }
}
NFTEOF
else
    in_srv tc qdisc add dev "$VETH_SRV" root netem delay 10ms loss 1% || die "tc netem on $VETH_SRV"
fi
note "loss: $LOSS"
# With netem's 20 ms round trip a TCP flow at 1 % loss moves about 1 MB/s: smaller files there.
MIB=6; [ "$LOSS" = netem ] && MIB=2
for i in 0 1 2 3; do head -c $((MIB * 1048576)) /dev/urandom >"$T_DIR/www/m$i"; done
chmod a+r "$T_DIR/www"/m*

declare -A GOODPUT
for carrier in ws quic h3; do
    LOFT_CFG=$(FRONT_HOST=$SRV4 holder_config "holder-netem-$carrier" "$carrier")
    CASES="netem-$carrier-4-downloads-intact netem-$carrier-exit-clean"
    require_loft "$LOFT_CFG" $CASES || continue
    if ! wait_state up 20; then
        fail "netem-$carrier-4-downloads-intact" "not up: $(field 'o["detail"]')"
        loft_stop_clean "netem-$carrier-exit-clean"
        continue
    fi
    rm -rf "$T_DIR/n"; mkdir -p "$T_DIR/n"
    t0=$(now_ms)
    in_app bash -c 'for i in 0 1 2 3; do curl -gsS --max-time 60 -o "$1/m$i" "http://$2/m$i" 2>"$1/m$i.err" & done; wait' _ "$T_DIR/n" "$SRV4"
    ms=$(( $(now_ms) - t0 ))
    bad=0
    for i in 0 1 2 3; do [ "$(sha_of "$T_DIR/n/m$i" 2>/dev/null)" = "$(sha_of "$T_DIR/www/m$i")" ] || bad=$((bad + 1)); done
    GOODPUT[$carrier]=$(( 4 * MIB * 8388608 / (ms > 0 ? ms : 1) / 1000 ))   # Mbit/s: bytes * 8 / ms / 1000
    if [ $bad -eq 0 ]; then pass "netem-$carrier-4-downloads-intact"; note "$carrier: 4 x $MIB MiB in $ms ms, ${GOODPUT[$carrier]} Mbit/s total"
    else fail "netem-$carrier-4-downloads-intact" "$bad of 4 wrong or failed: $(tail -1 "$T_DIR/n/m0.err" 2>/dev/null)"; GOODPUT[$carrier]=0; fi
    loft_stop_clean "netem-$carrier-exit-clean"
done
# Goodput is a figure, not a pass/fail (speed targets live in bench/): printed for the record.
note "goodput under loss ($LOSS): quic ${GOODPUT[quic]:-0} Mbit/s, h3 ${GOODPUT[h3]:-0} Mbit/s, ws ${GOODPUT[ws]:-0} Mbit/s"
if [ "$LOSS" = nft ]; then
    read -r dropped all dropped_bytes all_bytes < <(in_srv nft list table inet loftloss | awk '
        /counter packets/ { for (i = 1; i < NF; i++) { if ($i == "packets") p = $(i + 1); if ($i == "bytes") b = $(i + 1) }
                            if (/numgen/) { d += p; db += b } else { a += p; ab += b } }
        END { print d + 0, a + 0, db + 0, ab + 0 }')
    # 1 % of the skbs, drawn at random: at least 0.3 % of them and a few.
    if [ "$dropped" -ge 3 ] && [ $((dropped * 1000)) -ge $((all * 3)) ]; then
        pass netem-loss-applied; note "nftables dropped $dropped of $all carrier skbs ($dropped_bytes of $all_bytes bytes)"
    else fail netem-loss-applied "only $dropped of $all skbs ($dropped_bytes of $all_bytes bytes) dropped"; fi
else
    pass netem-loss-applied
fi
kill -TERM "$FRONT_PID" 2>/dev/null; wait "$FRONT_PID" 2>/dev/null
finish
