#!/usr/bin/env bash
# The ws carrier against an independent RFC 6455 implementation, the PyPI `websockets`
# library, in both directions. Loopback only, no namespaces.
#
# 1. websockets as the CLIENT of loft-front (Tests/interop/ws_client.py, loft's frames encoded
#    from docs/protocol.md in Tests/interop/loftwire.py): HELLO -> STATUS with the configured
#    overlay, PING/PONG, a TCP stream with 1 MiB echoed under credit flow control, FIN/FIN,
#    OPEN_FAIL, RESUME (same instance and addresses, supersede, unknown instance), a wrong
#    token, malformed input (text message, unknown type, garbage, second HELLO, bad length,
#    version 2) each ending that session cleanly with the front still serving HELLO after it.
# 2. loft's ws CLIENT (the holder outbound of `loft run`, SOCKS5 only) against a websockets
#    TLS echo SERVER (Tests/interop/ws_echo_server.py): upgrade headers, masking, the HELLO
#    echoed back is a protocol error for loft (GOAWAY protocol-error, Close), loft redials and
#    keeps running; `loft status --json` counts the dials.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/interop-lib.sh"

TOKEN=interop-token-$T_ID

P1_CASES="ws-upgrade-tls13 hello-status status-instance-id status-ipv4-from-pool status-ipv6-from-pool
status-mtu status-dns status-keepalive-max-streams ping-pong-same-value ws-control-ping-pong open-tcp-ok
tcp-echo-1mib-intact front-grants-credit front-respects-credit fin-answered-with-fin open-refused-open-fail
ws-close-handshake resume-same-instance resume-same-addresses resumed-session-carries-stream
resume-supersedes-attached resume-unknown-instance bad-token-goaway front-ends-tcp-after-close-handshake
malformed-text-message alive-after-text-message malformed-unknown-type alive-after-unknown-type
malformed-garbage alive-after-garbage malformed-hello-twice alive-after-hello-twice
malformed-bad-length-ping alive-after-bad-length-ping malformed-version-2 alive-after-version-2"
P1_SHELL="bad-token-logged front-logged-protocol-errors front-still-running front-stats-counters front-exit-clean"
P2_CASES="upgrade-request-headers client-answers-ws-ping hello-binary-message client-frames-masked
goaway-protocol-error-after-echo client-close-after-goaway redial-sends-hello"

python3 -c 'import websockets' 2>/dev/null || die "python3 cannot import websockets (pip install websockets)"
[ -x "$LOFT_BIN" ] || die "no loft binary at $LOFT_BIN"

interop_ports FRONT_PORT ECHO_PORT CLOSED_PORT WS_PORT SOCKS_PORT
certs

# --- 1. websockets client -> loft-front -----------------------------------------------------

front_yaml "ws" "path: /loft" 'pool: { ipv4: 198.18.64.0/24, ipv6: "fd00:64::/64" }' "mtu: 1400" \
    'dns: [198.18.1.2, "fd00:1::2"]' "keepalive: 10s" "max-streams: 64"

if front_up $P1_CASES $P1_SHELL; then
    t0=$(now_ms)
    run_waited "$T_DIR/client.out" timeout -k 5 200 python3 "$INTEROP/ws_client.py" --port "$FRONT_PORT" --ca "$CA" --server-name front.test \
        --token "$TOKEN" --echo-port "$ECHO_PORT" --closed-port "$CLOSED_PORT" \
        --pool4 198.18.64.0/24 --pool6 fd00:64::/64 --mtu 1400 --dns 198.18.1.2,fd00:1::2 \
        --keepalive-ms 10000 --max-streams 64 --deadline 180
    note "websockets client: $(( $(now_ms) - t0 )) ms"
    client_notes "$T_DIR/client.out.err" client
    relay "$T_DIR/client.out" $P1_CASES

    if grep -q 'event=session-refused reason=bad-token' "$FRONT_LOG"; then pass bad-token-logged
    else fail bad-token-logged "no event=session-refused reason=bad-token in the front's log"; fi

    # unknown type, garbage, second HELLO, bad length, version 2 (the text message is refused by
    # the ws layer: carrier.ws.protocol_error code=1003)
    np=$(grep -c 'event=session-protocol-error' "$FRONT_LOG")
    nt=$(grep -c 'event=carrier.ws.protocol_error.*code=1003' "$FRONT_LOG")
    if [ "$np" -ge 5 ] && [ "$nt" -ge 1 ]; then pass front-logged-protocol-errors
    else fail front-logged-protocol-errors "$np session-protocol-error lines (want 5), $nt ws code=1003 lines (want 1)"; fi

    front_still_running

    # Exact counters for what the client did: one bad token, one unknown instance, two resumes
    # (one superseding the other), two streams connected and one refused, 1 MiB + 1300 bytes each way.
    want="refused_bad_token=1 refused_unknown_instance=1 sessions_resumed=2 sessions_superseded=1 streams_opened=2 streams_failed=1 bytes_up=1049876 bytes_down=1049876"
    got=$(stats_got "$want")
    pe=$(sv protocol_errors)
    if [ "$got" = "$want" ] && [ "${pe:-0}" -ge 5 ]; then pass front-stats-counters
    else fail front-stats-counters "got '$got' protocol_errors=$pe, want '$want' protocol_errors>=5"; fi

    front_exit_clean 5
fi

# --- 2. loft's ws client -> websockets echo server ------------------------------------------

loft_against_echo ws ws_echo_server.py "websockets echo server"

finish
