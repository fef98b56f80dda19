#!/usr/bin/env bash
# The get carrier against an independent client: Tests/interop/get_client.py, written from
# docs/protocol.md (section 1.4) with Python's ssl and asyncio, loft's frames from
# Tests/interop/loftwire.py. Loopback only, no namespaces. Against loft-front serving only get:
# the GET/POST pair joined by a session id (the GET answered only once its POST is there, 200
# chunked), HELLO -> STATUS, PING/PONG, a TCP stream with 1 MiB echoed under credit flow control
# (SHA-256), FIN/FIN, OPEN_FAIL, the upstream's last chunk answered (POST 200, the downstream's
# last chunk), a wrong token (GOAWAY bad-token), refused requests (400, 404, 405, 409), a GET
# left alone (408), a malformed chunk and bytes after the GET (POST 400), each leaving the
# front serving sessions; then the front's counters for exactly what the client did.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/interop-lib.sh"

TOKEN=interop-token-$T_ID
P1_CASES="get-tls13-alpn-http11 get-answered-after-post get-200-chunked hello-status ping-pong-same-value
open-tcp-ok tcp-echo-1mib-intact front-grants-credit front-respects-credit fin-answered-with-fin
open-refused-open-fail upstream-end-post-200 upstream-end-last-chunk bad-token-goaway no-session-id-400
short-session-id-400 wrong-path-404 put-405 post-not-chunked-400 second-get-409 alive-after-refusals
unjoined-get-408 malformed-chunk-400 alive-after-malformed-chunk bytes-after-get-400 alive-after-bytes-after-get"
P1_SHELL="front-logged-get-errors front-still-running front-stats-counters front-exit-clean"

interop_ports FRONT_PORT ECHO_PORT CLOSED_PORT
certs

# GET_INTEROP_CARRIERS=ws: a front without get, against which every get case fails.
front_yaml "${GET_INTEROP_CARRIERS:-get}" "path: /loft" "pool: { ipv4: 198.18.64.0/24 }" "mtu: 1400" "keepalive: 10s"

front_up $P1_CASES $P1_SHELL || finish
t0=$(now_ms)
run_waited "$T_DIR/client.out" timeout -k 5 150 python3 "$INTEROP/get_client.py" --port "$FRONT_PORT" --ca "$CA" \
    --token "$TOKEN" --echo-port "$ECHO_PORT" --closed-port "$CLOSED_PORT" --pool4 198.18.64.0/24 --deadline 120
note "get client: $(( $(now_ms) - t0 )) ms"
client_notes "$T_DIR/client.out.err" client
relay "$T_DIR/client.out" $P1_CASES

# The two malformed cases each log a protocol error of the get carrier; the join deadline one
# join_timeout line.
np=$(grep -c 'event=carrier.get.protocol_error' "$FRONT_LOG")
nj=$(grep -c 'event=carrier.get.join_timeout' "$FRONT_LOG")
if [ "$np" -eq 2 ] && [ "$nj" -eq 1 ]; then pass front-logged-get-errors
else fail front-logged-get-errors "$np carrier.get.protocol_error lines (want 2), $nj carrier.get.join_timeout lines (want 1)"; fi

front_still_running
# Exact counters for what the client did: one bad token; two streams asked for, one connected
# (1 MiB echoed: 1048576 bytes each way) and one refused.
want="refused_bad_token=1 streams_opened=1 streams_failed=1 bytes_up=1048576 bytes_down=1048576"
got=$(stats_got "$want")
if [ "$got" = "$want" ]; then pass front-stats-counters; note "front: sessions_opened $(sv sessions_opened), requests_rejected $(sv requests_rejected)"
else fail front-stats-counters "got '$got', want '$want'"; fi

front_exit_clean 5
finish
