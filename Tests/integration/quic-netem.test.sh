#!/usr/bin/env bash
# quic and h3 against ws on a lossy, slow path (root, namespaces): issue 14's netem scenario on
# a kernel without sch_netem. loft-front runs inside the srv namespace and listens only on the
# far end of the delay line (lib.sh line_up: Tests/tools/delayline.py, two TUNs, 20 ms each way,
# 1 % of the packets dropped at random each way, at most 10000 queued), so every carrier packet
# between loft (root namespace) and the front crosses it; nginx is beside the front in srv. For
# ws, quic and h3 (HTTP/3 on the same UDP port): 4 downloads of NETEM_MIB (16) MiB at once from
# nginx through TUN -> loft -> carrier -> line -> front, each checked with SHA-256, and one
# upload of the same size to the sha256 sink; the total goodput of the 4 downloads is printed (a
# figure, not a pass/fail: the quic/ws target is bench/holder's netem row). Cases: every transfer
# intact on each carrier, the line's round trip about 40 ms, the loss really applied (the line's
# counters, about 1 % each way) and the carriers' bytes through the line.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

MIB=${NETEM_MIB:-16}
line_up "$SRV_NS" 20 0.01 --seed "$T_ID" || die "delay line"
note "$(head -1 "$LINE_LOG")"

# The round trip through the line: 2 x 20 ms plus scheduling (ping may lose 2 % of its probes).
rtt=$(ping -n -c 10 -i 0.2 -W 1 "$LINE_FAR4" 2>&1 | awk -F/ '/^rtt/ { print $5 }')
if [ -n "$rtt" ] && awk -v r="$rtt" 'BEGIN { exit !(r >= 39 && r <= 80) }'; then
    pass netem-rtt-40ms; note "ping through the line: avg $rtt ms"
else fail netem-rtt-40ms "ping $LINE_FAR4 through the line: avg '${rtt:-no reply}' ms (want 39...80)"; fi

sed "s/^listen: .*/listen: $LINE_FAR4:$FRONT_PORT/" "$T_DIR/front.yaml" >"$T_DIR/front-srv.yaml"
echo "carriers: [ws, quic, h3]" >>"$T_DIR/front-srv.yaml"
front_run "$T_DIR/front-srv.yaml" "$SRV_NS" || die "loft-front did not start in srv: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"

for i in 0 1 2 3; do head -c $((MIB * 1048576)) /dev/urandom >"$T_DIR/www/m$i"; done
chmod a+r "$T_DIR/www"/m*
M0_SHA=$(sha_of "$T_DIR/www/m0")

declare -A GOODPUT
for carrier in ws quic h3; do
    LOFT_CFG=$(FRONT_HOST=$LINE_FAR4 holder_config "holder-netem-$carrier" "$carrier")
    CASES="netem-$carrier-4-downloads-intact netem-$carrier-upload-intact netem-$carrier-exit-clean"
    require_loft "$LOFT_CFG" $CASES || continue
    if ! wait_state up 20; then
        fail "netem-$carrier-4-downloads-intact" "not up: $(field 'o["detail"]')"
        fail "netem-$carrier-upload-intact" "not up"
        loft_stop_clean "netem-$carrier-exit-clean"
        continue
    fi
    rm -rf "$T_DIR/n"; mkdir -p "$T_DIR/n"
    t0=$(now_ms)
    in_app bash -c 'for i in 0 1 2 3; do curl -gsS --max-time 40 -o "$1/m$i" "http://$2/m$i" 2>"$1/m$i.err" & done; wait' _ "$T_DIR/n" "$SRV4"
    ms=$(( $(now_ms) - t0 ))
    bad=0
    for i in 0 1 2 3; do [ "$(sha_of "$T_DIR/n/m$i" 2>/dev/null)" = "$(sha_of "$T_DIR/www/m$i")" ] || bad=$((bad + 1)); done
    GOODPUT[$carrier]=$(( 4 * MIB * 8388608 / (ms > 0 ? ms : 1) / 1000 ))   # Mbit/s: bytes * 8 / ms / 1000
    if [ $bad -eq 0 ]; then pass "netem-$carrier-4-downloads-intact"; note "$carrier: 4 x $MIB MiB down at once in $ms ms, ${GOODPUT[$carrier]} Mbit/s total"
    else fail "netem-$carrier-4-downloads-intact" "$bad of 4 wrong or failed ($ms ms): $(tail -1 "$T_DIR/n/m0.err" 2>/dev/null)"; GOODPUT[$carrier]=0; fi
    t0=$(now_ms)
    got=$(in_app timeout -k 5 40 socat -t 30 - "TCP4:$SRV4:9000" <"$T_DIR/www/m0" 2>"$T_DIR/n/up.err" | cut -d' ' -f1)
    ms=$(( $(now_ms) - t0 ))
    if [ "$got" = "$M0_SHA" ]; then pass "netem-$carrier-upload-intact"; note "$carrier: $MIB MiB up in $ms ms"
    else fail "netem-$carrier-upload-intact" "sink's sha256 '${got:-nothing}' ($ms ms): $(tail -1 "$T_DIR/n/up.err")"; fi
    loft_stop_clean "netem-$carrier-exit-clean"
done
# Goodput is a figure, not a pass/fail (speed targets live in bench/): printed for the record.
note "goodput through the line (20 ms each way, 1 % loss): quic ${GOODPUT[quic]:-0} Mbit/s, h3 ${GOODPUT[h3]:-0} Mbit/s, ws ${GOODPUT[ws]:-0} Mbit/s; quic/ws $(awk -v q="${GOODPUT[quic]:-0}" -v w="${GOODPUT[ws]:-0}" 'BEGIN { if (w > 0) printf "%.2f", q / w; else print "-" }')"

# The loss really happened, on both ways, about 1 % of what entered (binomial: 0.4...2.5 %),
# and the carriers' bytes went through the line (at least the 3 x 5 transfers' payload).
c1=$(line_counters)
note "line: $(echo "$c1" | tr '\n' ';')"
ok=yes why=
while read -r way; do
    read -r r d <<<"$(echo "$way" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } } END { print v["read"] + 0, v["dropped"] + 0 }')"
    if [ "$r" -lt 1000 ] || [ $((d * 1000)) -lt $((r * 4)) ] || [ $((d * 1000)) -gt $((r * 25)) ]; then
        ok=no; why="$why ${way%% read=*}: $d of $r dropped;"
    fi
done <<<"$c1"
if [ $ok = yes ]; then pass netem-loss-applied; else fail netem-loss-applied "$why"; fi
bytes=$(echo "$c1" | line_sum bytes)
want=$(( 3 * 5 * MIB * 1048576 ))
if [ "$bytes" -ge "$want" ]; then pass netem-through-line; note "line carried $bytes bytes (payload $want)"
else fail netem-through-line "the line carried $bytes bytes, less than the $want bytes of payload"; fi
kill -TERM "$FRONT_PID" 2>/dev/null; wait "$FRONT_PID" 2>/dev/null
line_down
finish
