#!/usr/bin/env bash
# The h2 carrier against independent HTTP/2 implementations, in both directions. Loopback only,
# no namespaces.
#
# 1. The PyPI `h2` library as the CLIENT of loft-front (Tests/interop/h2_client.py, loft's
#    frames from docs/protocol.md in Tests/interop/loftwire.py): TLS 1.3 + ALPN h2, the front's
#    SETTINGS (ENABLE_CONNECT_PROTOCOL, windows), the extended CONNECT, HELLO -> STATUS, h2
#    PING, session PING/PONG, a TCP stream with 1 MiB echoed, FIN/FIN, END_STREAM both ways,
#    404 / 405 / 400 / 429 refusals, a wrong token (GOAWAY bad-token); then hostile HTTP/2:
#    an absurd frame length, an HPACK bomb, SETTINGS and PING floods, 200 streams at once,
#    malformed frames, a session never read; the front serves a new session after each and its
#    memory stays bounded.
# 2. `nghttp` (Debian nghttp2-client) against the front: an h2 handshake with the front's
#    SETTINGS, 404 for another path.
# 3. loft's h2 CLIENT (the holder outbound of `loft run`, SOCKS5 only) against an h2-library
#    TLS echo SERVER (Tests/interop/h2_echo_server.py): its SETTINGS and window, the CONNECT's
#    pseudo-headers, h2 PING answered, HELLO in DATA; the HELLO echoed back is a protocol error
#    for loft (GOAWAY protocol-error, END_STREAM), loft redials and keeps running.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/interop-lib.sh"

TOKEN=interop-token-$T_ID

P1_CASES="h2-alpn-tls13 settings-enable-connect-protocol settings-windows-above-64k extended-connect-200
hello-status front-connection-window h2-ping-ack session-ping-pong open-tcp-ok tcp-echo-1mib fin-answered-with-fin
end-stream-answered wrong-path-404 get-on-session-path-405 other-protocol-400 second-session-429 bad-token-goaway
bad-token-stream-ends alive-after-refusals absurd-frame-length alive-after-absurd-length alive-after-hpack-bomb
alive-after-settings-flood alive-after-ping-flood alive-after-many-streams pipelined-refusals-capped data-on-stream-0 ping-wrong-length
garbage-frames alive-after-malformed alive-beside-unread-session"
P1_SHUT="shutdown-session-goaway shutdown-end-stream shutdown-h2-goaway"
P1_SHELL="front-logged-h2-errors front-memory-bounded front-still-running front-stats-counters nghttp-handshake nghttp-404 front-exit-clean"
P2_CASES="alpn-h2 client-settings connect-request-headers client-answers-h2-ping hello-in-data
goaway-protocol-error-after-echo client-ends-stream-after-goaway redial-sends-hello"

python3 -c 'import h2' 2>/dev/null || die "python3 cannot import h2 (pip install h2)"
command -v nghttp >/dev/null || die "no nghttp (apt-get install nghttp2-client)"
[ -x "$LOFT_BIN" ] || die "no loft binary at $LOFT_BIN"

interop_ports FRONT_PORT ECHO_PORT CLOSED_PORT WS_PORT SOCKS_PORT
certs

# --- 1. h2-library client -> loft-front ----------------------------------------------------

front_yaml "ws, get, h2" "path: /loft" 'pool: { ipv4: 198.18.64.0/24, ipv6: "fd00:64::/64" }' "mtu: 1400" \
    "dns: [$SRV4, \"$SRV6\"]" "keepalive: 10s" "max-streams: 64"

if front_up $P1_CASES $P1_SHELL $P1_SHUT; then
    rss0=$(rss_kib "$FRONT_PID")
    t0=$(now_ms)
    run_waited "$T_DIR/client.out" timeout -k 5 200 python3 "$INTEROP/h2_client.py" --port "$FRONT_PORT" --ca "$CA" \
        --token "$TOKEN" --echo-port "$ECHO_PORT" --pool4 198.18.64.0/24 --deadline 180
    note "h2 client: $(( $(now_ms) - t0 )) ms"
    client_notes "$T_DIR/client.out.err" client
    relay "$T_DIR/client.out" $P1_CASES

    # frame size, flood, PROTOCOL_ERROR: each a clear line; refusals (404 405 400 429 431): one
    # line per connection that had any (the refusal connection, the HPACK bomb's 431, the 200
    # streams, the 2000 pipelined requests: 4), however many it had
    np=$(grep -c 'event=carrier.h2.protocol_error' "$FRONT_LOG")
    nf=$(grep -c 'event=carrier.h2.protocol_error.*Flooding' "$FRONT_LOG")
    nr=$(grep -c 'event=carrier.rejected.*carrier=h2' "$FRONT_LOG")
    n431=$(grep -c 'event=carrier.rejected.*carrier=h2 status=431' "$FRONT_LOG")
    if [ "$np" -ge 4 ] && [ "$nf" -ge 1 ] && [ "$nr" -ge 3 ] && [ "$nr" -le 6 ] && [ "$n431" -ge 1 ]; then pass front-logged-h2-errors
    else fail front-logged-h2-errors "$np carrier.h2.protocol_error lines (want >= 4), $nf floods (want >= 1), $nr h2 refusal lines (want 3..6: one per connection), $n431 431s (want >= 1)"; fi
    rss1=$(rss_kib "$FRONT_PID")
    if [ -n "$rss1" ] && [ "$rss1" -lt $((rss0 + 65536)) ]; then pass front-memory-bounded; note "front RSS ${rss0} kB -> ${rss1} kB"
    else fail front-memory-bounded "front RSS ${rss0} kB -> ${rss1} kB (allowed +64 MiB)"; fi

    front_still_running

    # one bad token, two streams (1 MiB echoed, and the unread session's), every session counted
    want="refused_bad_token=1 streams_opened=2"
    got=$(stats_got "$want")
    # refusals: 404 405 400 429 and the bomb's 431 (plus 404s of the 200 streams); failed
    # handshakes: absurd length, settings flood, DATA on stream 0, short PING, garbage
    if [ "$got" = "$want" ] && [ "$(sv sessions_opened)" -ge 9 ] && [ "$(sv bytes_up)" -ge 1048576 ] && [ "$(sv bytes_down)" -ge 1048576 ] \
        && [ "$(sv requests_rejected)" -ge 5 ] && [ "$(sv handshakes_failed)" -ge 5 ]; then pass front-stats-counters
        note "front: requests_rejected $(sv requests_rejected), handshakes_failed $(sv handshakes_failed)"
    else fail front-stats-counters "got '$got' sessions_opened=$(sv sessions_opened) bytes_up=$(sv bytes_up) bytes_down=$(sv bytes_down) requests_rejected=$(sv requests_rejected) handshakes_failed=$(sv handshakes_failed), want '$want' sessions_opened>=9 bytes >= 1 MiB each way, requests_rejected>=5 handshakes_failed>=5"; fi

    # --- 2. nghttp -> loft-front ---
    out=$(timeout 10 nghttp -nv --no-verify-peer "https://127.0.0.1:$FRONT_PORT/loft" 2>&1)
    if echo "$out" | grep -q 'negotiated protocol: h2' && echo "$out" | grep -q 'recv SETTINGS' && echo "$out" | grep -q 'SETTINGS_ENABLE_CONNECT_PROTOCOL(0x08):1' \
        && echo "$out" | grep -q ':status: 405'; then pass nghttp-handshake
    else fail nghttp-handshake "$(echo "$out" | grep -E 'Negotiated|SETTINGS|status' | head -8 | tr '\n' '|')"; fi
    out=$(timeout 10 nghttp -nv --no-verify-peer "https://127.0.0.1:$FRONT_PORT/other" 2>&1)
    if echo "$out" | grep -q ':status: 404'; then pass nghttp-404
    else fail nghttp-404 "$(echo "$out" | grep -E 'status|GOAWAY|ERROR' | head -5 | tr '\n' '|')"; fi
    echo "$out" >"$T_DIR/nghttp.out"

    # SIGTERM with a session open: GOAWAY shutdown in the session, END_STREAM, HTTP/2 GOAWAY.
    bg_root shutdown-watch python3 "$INTEROP/h2_client.py" --port "$FRONT_PORT" --ca "$CA" --token "$TOKEN" \
        --echo-port "$ECHO_PORT" --hold-until-shutdown "$T_DIR/shutdown.ready"
    WATCH=$LAST_PID
    for _ in $(seq 100); do [ -s "$T_DIR/shutdown.ready" ] && break; sleep 0.1; done
    front_exit_clean 5
    for _ in $(seq 100); do kill -0 "$WATCH" 2>/dev/null || break; sleep 0.1; done
    relay "$T_DIR/shutdown-watch.log" $P1_SHUT
fi

# --- 3. loft's h2 client -> h2-library echo server -------------------------------------------

loft_against_echo h2 h2_echo_server.py "h2 echo server"

finish
