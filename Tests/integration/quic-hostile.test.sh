#!/usr/bin/env bash
# Hostile clients over quic (PyPI aioquic, Tests/interop/quic_hostile.py) against loft-front on
# loopback (no namespaces), keepalive 1s, max-streams 250 (QUIC's stream limit 251): 200 flows on streams of their own that are never read
# (the client never extends a window) while a source writes 4 MiB into each: the front's RSS
# stays within 48 MiB of where it was and a new session beside them is served; a client that
# says HELLO and then nothing is ended after 2 keepalive intervals (dead_carriers); a QUIC
# DATAGRAM whose DGRAM frame lies about its length ends that session (protocol_errors) and the
# next one is served; a 60 000-byte UDP datagram comes back whole on the session stream.
# Eight clients that each send one Initial from an address of their own and never answer (as a
# spoofed source would) get at most 3x its bytes back over 5 s (RFC 9000 §8.1; ngtcp2 0.12.1's
# probe timeouts alone sent 6x), the held packets counted (quic_amplification_held).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/quic-lib.sh"

TOKEN=hostile-token-$T_ID
CASES="quic-max-streams-is-stream-limit quic-unread-flows-memory-bounded quic-legit-beside-unread-flows quic-keepalive-expiry quic-datagram-bad-length
quic-alive-after-bad-datagram quic-oversize-dgram-back-on-stream quic-initial-amplification-3x"
interop_ports FRONT_PORT SOURCE_PORT ECHO_PORT UDP_ECHO_PORT
[ -n "$UDP_ECHO_PORT" ] || die "could not pick free ports"
certs
front_yaml quic "pool: { ipv4: 198.18.64.0/24 }" "keepalive: 1s" "max-streams: 250"
front_up $CASES || finish

t0=$(now_ms)
timeout -k 5 100 python3 "$INTEROP/quic_hostile.py" --port "$FRONT_PORT" --ca "$T_DIR/certs/ca.pem" --token "$TOKEN" \
    --front-pid "$FRONT_PID" --source-port "$SOURCE_PORT" --echo-port "$ECHO_PORT" --udp-echo-port "$UDP_ECHO_PORT" \
    >"$T_DIR/client.out" 2>"$T_DIR/client.err" </dev/null &
CPID=$!; T_PIDS+=("$CPID"); register_pid "$CPID"
wait "$CPID"
note "aioquic hostile clients: $(( $(now_ms) - t0 )) ms"
timeout -k 5 30 python3 "$INTEROP/quic_amplification.py" --port "$FRONT_PORT" --sources 8 --seconds 5 \
    >>"$T_DIR/client.out" 2>>"$T_DIR/client.err" </dev/null
grep '^  #' "$T_DIR/client.out" | sed 's/^  # /amplification: /' | while read -r l; do note "$l"; done
client_results $CASES

front_stats
if [ "$(sv dead_carriers)" -ge 1 ] && [ "$(sv protocol_errors)" -ge 1 ] && [ "$(sv sessions_opened)" -ge 5 ]; then
    pass front-hostile-counters
    note "front: sessions_opened $(sv sessions_opened), dead_carriers $(sv dead_carriers), protocol_errors $(sv protocol_errors), streams_opened $(sv streams_opened), quic_amplification_held $(sv quic_amplification_held)"
else
    fail front-hostile-counters "$(echo "$stats" | tr '\n' ' ')"
fi
front_exit_clean
finish
