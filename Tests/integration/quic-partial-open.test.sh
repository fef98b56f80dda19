#!/usr/bin/env bash
# Flow streams whose OPEN never completes (issue 28, 3), over quic against loft-front on
# loopback (no namespaces): four rounds of 10 authenticated sessions x 1,000 streams that carry
# only the first 3 bytes of an OPEN frame (PyPI aioquic, Tests/interop/quic_partial_open.py).
#   quic-partial-open-deadline     the front resets every such stream once its OPEN deadline
#                                  (connect-timeout, 2 s here) passes (was: held for good)
#   quic-partial-open-memory-flat  the front's RSS after round 4's sessions closed is within
#                                  4 MiB of where round 1 ended (was: 72 -> 80 -> 89 -> 93 MB)
#   quic-partial-open-counted      the front counts the expired OPENs (open_timeouts)
#   front-exit-clean
# Bounded: about 60 s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/quic-lib.sh"

TOKEN=partial-token-$T_ID
CASES="quic-partial-open-deadline quic-partial-open-memory-flat"
interop_ports FRONT_PORT ECHO_PORT
[ -n "$ECHO_PORT" ] || die "could not pick free ports"
certs
front_yaml quic "pool: { ipv4: 198.18.64.0/24 }" "keepalive: 10s" "connect-timeout: 2s"
front_up $CASES quic-partial-open-counted || finish

t0=$(now_ms)
timeout -k 5 150 python3 "$INTEROP/quic_partial_open.py" --port "$FRONT_PORT" --ca "$T_DIR/certs/ca.pem" --token "$TOKEN" \
    --front-pid "$FRONT_PID" --rounds 4 --sessions 10 --streams 1000 --deadline 2 \
    >"$T_DIR/client.out" 2>"$T_DIR/client.err" </dev/null
grep '^  #' "$T_DIR/client.out" | sed 's/^  # //' | while read -r l; do note "$l"; done
note "partial OPEN rounds: $(( $(now_ms) - t0 )) ms"
client_results $CASES

front_stats
n=$(sv open_timeouts)
if [ "${n:-0}" -ge 40000 ]; then pass quic-partial-open-counted
else fail quic-partial-open-counted "open_timeouts ${n:-none} (want 40000): $(echo "$stats" | tr '\n' ' ')"; fi
front_exit_clean
finish
