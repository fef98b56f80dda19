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

FRONT_BIN=${LOFT_FRONT_BIN:-$(dirname "$LOFT_BIN")/loft-front}
INTEROP=$LOFT_REPO/Tests/interop
TOKEN=interop-token-$T_ID
FRONT_LOG=$T_DIR/front.log

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
P2_SHELL="loft-still-running loft-logs-holder-down status-home-dials loft-exit-clean"

# relay FILE EXPECTED...: turn the PASS/FAIL lines a python script printed into ours; every
# expected case it did not report is a FAIL (the script died or was cut short).
relay() {
    local file=$1 st name rest c
    shift
    while read -r st name rest; do
        case $st in
            PASS) pass "$name" ;;
            FAIL) fail "${name%:}" "$rest" ;;
        esac
    done <"$file"
    for c in "$@"; do
        grep -qE "^(PASS|FAIL) $c(:|$)" "$file" || fail "$c" "not reported (the script ended early: $(tail -2 "$file.err" 2>/dev/null | tr '\n' '|'))"
    done
}

fail_all() { local why=$1 c; shift; for c in "$@"; do fail "$c" "$why"; done; }

# bg NAME CMD...: start CMD in the background (root namespace), log in $T_DIR/NAME.log.
bg() {
    local name=$1
    shift
    "$@" >"$T_DIR/$name.log" 2>&1 </dev/null &
    LAST_PID=$!
    T_PIDS+=("$LAST_PID")
    register_pid "$LAST_PID"
}

# run_waited OUT CMD...: CMD in the background (so a SIGTERM to the test is handled at once
# and cleanup stops CMD), stdout to OUT, stderr to OUT.err; waits for it.
run_waited() {
    local out=$1 p
    shift
    "$@" >"$out" 2>"$out.err" </dev/null &
    p=$!
    T_PIDS+=("$p")
    register_pid "$p"
    wait "$p"
}

# wait_tcp PORT [SECONDS]: until something listens on 127.0.0.1:PORT.
wait_tcp() {
    local i
    for i in $(seq $((${2:-10} * 10))); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.1
    done
    return 1
}

# wait_log FILE PATTERN [SECONDS]
wait_log() {
    local i
    for i in $(seq $((${3:-10} * 10))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

python3 -c 'import h2' 2>/dev/null || die "python3 cannot import h2 (pip install h2)"
command -v nghttp >/dev/null || die "no nghttp (apt-get install nghttp2-client)"
[ -x "$FRONT_BIN" ] || die "no loft-front binary at $FRONT_BIN"
[ -x "$LOFT_BIN" ] || die "no loft binary at $LOFT_BIN"

# Five free loopback ports (the kernel picks them; nothing else of ours uses them).
read -r FRONT_PORT ECHO_PORT CLOSED_PORT WS_PORT SOCKS_PORT <<<"$(python3 - <<'EOF'
import socket
ss = []
for _ in range(4):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
# The SOCKS5 port is taken for TCP and UDP alike: free for both.
for _ in range(100):
    s = socket.socket(); s.bind(("127.0.0.1", 0))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", s.getsockname()[1])); ss.append(s); ss.append(u); break
    except OSError:
        s.close(); u.close()
print(" ".join(str(s.getsockname()[1]) for s in ss[:5]))
EOF
)"
[ -n "$SOCKS_PORT" ] || die "could not pick free ports"
"$INTEROP/gen-certs.sh" "$T_DIR/certs" >/dev/null || die "gen-certs.sh failed"
CA=$T_DIR/certs/ca.pem

# --- 1. h2-library client -> loft-front ----------------------------------------------------

cat >"$T_DIR/front.yaml" <<EOF
log: info
listen: 127.0.0.1:$FRONT_PORT
path: /loft
carriers: [ws, get, h2]
tls: { certificate: certs/server.pem, key: certs/server.key }
tokens: ["$TOKEN"]
pool: { ipv4: 198.18.64.0/24, ipv6: "fd00:64::/64" }
mtu: 1400
dns: [198.18.1.2, "fd00:1::2"]
keepalive: 10s
max-streams: 64
control: $T_DIR/front.sock
EOF

bg tcp-echo python3 "$INTEROP/tcp_echo.py" "$ECHO_PORT"
bg front "$FRONT_BIN" run -c "$T_DIR/front.yaml"
FRONT_PID=$LAST_PID
FRONT_LOG=$T_DIR/front.log
if ! wait_tcp "$ECHO_PORT" || ! wait_log "$FRONT_LOG" 'event=ready'; then
    fail_all "loft-front or the echo server did not start: $(tail -3 "$FRONT_LOG" | tr '\n' '|')" $P1_CASES $P1_SHELL $P1_SHUT
else
    rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$FRONT_PID/status")
    t0=$(now_ms)
    run_waited "$T_DIR/client.out" timeout -k 5 200 python3 "$INTEROP/h2_client.py" --port "$FRONT_PORT" --ca "$CA" \
        --token "$TOKEN" --echo-port "$ECHO_PORT" --pool4 198.18.64.0/24 --deadline 180
    note "h2 client: $(( $(now_ms) - t0 )) ms"
    grep '^  #' "$T_DIR/client.out.err" | sed 's/^  # /client: /' | while read -r l; do note "$l"; done
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
    rss1=$(awk '/^VmRSS/ {print $2}' "/proc/$FRONT_PID/status")
    if [ -n "$rss1" ] && [ "$rss1" -lt $((rss0 + 65536)) ]; then pass front-memory-bounded; note "front RSS ${rss0} kB -> ${rss1} kB"
    else fail front-memory-bounded "front RSS ${rss0} kB -> ${rss1} kB (allowed +64 MiB)"; fi

    stats=$("$FRONT_BIN" stats -c "$T_DIR/front.yaml" 2>&1)
    if kill -0 "$FRONT_PID" 2>/dev/null && echo "$stats" | grep -q '^sessions_opened '; then pass front-still-running
    else fail front-still-running "pid $FRONT_PID alive: $(kill -0 "$FRONT_PID" 2>/dev/null && echo yes || echo no); stats: $(echo "$stats" | head -2 | tr '\n' '|')"; fi

    # one bad token, two streams (1 MiB echoed, and the unread session's), every session counted
    sv() { echo "$stats" | awk -v k="$1" '$1 == k { print $2 }'; }
    want="refused_bad_token=1 streams_opened=2"
    got=""
    for kv in $want; do got+="${kv%%=*}=$(sv "${kv%%=*}") "; done
    got=${got% }
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
    bg shutdown-watch python3 "$INTEROP/h2_client.py" --port "$FRONT_PORT" --ca "$CA" --token "$TOKEN" \
        --echo-port "$ECHO_PORT" --hold-until-shutdown "$T_DIR/shutdown.ready"
    WATCH=$LAST_PID
    for _ in $(seq 100); do [ -s "$T_DIR/shutdown.ready" ] && break; sleep 0.1; done
    kill -TERM "$FRONT_PID" 2>/dev/null
    rc=hung
    for _ in $(seq 50); do kill -0 "$FRONT_PID" 2>/dev/null || { wait "$FRONT_PID"; rc=$?; break; }; sleep 0.1; done
    if [ "$rc" = 0 ] && grep -q 'event=stopped' "$FRONT_LOG"; then pass front-exit-clean
    else fail front-exit-clean "exit status $rc after SIGTERM: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; fi
    for _ in $(seq 100); do kill -0 "$WATCH" 2>/dev/null || break; sleep 0.1; done
    relay "$T_DIR/shutdown-watch.log" $P1_SHUT
fi

# --- 3. loft's h2 client -> h2-library echo server -------------------------------------------

RESULTS=$T_DIR/h2-echo.jsonl
: >"$RESULTS"
bg h2-echo python3 "$INTEROP/h2_echo_server.py" serve --port "$WS_PORT" --cert "$T_DIR/certs/server.pem" \
    --key "$T_DIR/certs/server.key" --results "$RESULTS"
CTL=/run/loft/h2-interop-$$.sock
on_cleanup "rm -f $CTL"
cat >"$T_DIR/loft.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$SOCKS_PORT }
bridge: off
outbounds:
  - { name: home, type: loft, server: 127.0.0.1:$WS_PORT, carrier: h2, token: t, tls: { server-name: front.test, ca: $CA } }
default: home
control: $CTL
EOF

if ! wait_tcp "$WS_PORT"; then
    fail_all "the h2 echo server did not start: $(tail -3 "$T_DIR/h2-echo.log" | tr '\n' '|')" $P2_CASES $P2_SHELL
else
    LOFT_LOG=$T_DIR/loft.log
    "$LOFT_BIN" run -c "$T_DIR/loft.yaml" >"$LOFT_LOG" 2>&1 </dev/null &
    LOFT_PID=$!
    register_pid "$LOFT_PID"
    # Two connections reach the echo server: the first dial and the redial after it.
    for _ in $(seq 150); do
        [ "$(wc -l <"$RESULTS")" -ge 2 ] && break
        loft_died && break
        sleep 0.1
    done
    note "echo server saw $(wc -l <"$RESULTS") connection(s) from loft"
    run_waited "$T_DIR/check.out" timeout 30 python3 "$INTEROP/h2_echo_server.py" check --results "$RESULTS" \
        --token t --host "front.test:$WS_PORT"
    grep '^  #' "$T_DIR/check.out.err" | sed 's/^  # /server: /' | while read -r l; do note "$l"; done
    relay "$T_DIR/check.out" $P2_CASES

    if [ -n "$LOFT_PID" ] && kill -0 "$LOFT_PID" 2>/dev/null && "$LOFT_BIN" status -c "$T_DIR/loft.yaml" >/dev/null 2>&1; then
        pass loft-still-running
    else
        fail loft-still-running "loft is gone or does not answer on $CTL: $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
    fi

    if grep -q 'event=holder.down outbound=home' "$LOFT_LOG" && grep -q 'event=holder.protocol-error outbound=home' "$LOFT_LOG"; then
        pass loft-logs-holder-down
    else
        fail loft-logs-holder-down "no holder.protocol-error / holder.down for home: $(grep holder "$LOFT_LOG" | head -3 | tr '\n' '|')"
    fi

    js=$("$LOFT_BIN" status -c "$T_DIR/loft.yaml" --json 2>&1)
    got=$(echo "$js" | python3 -c '
import json, sys
d = json.load(sys.stdin)
h = [o for o in d["outbounds"] if o["name"] == "home"]
print("%s %s %s" % (h[0]["type"], h[0]["counters"].get("dials", 0), h[0]["counters"].get("sessions", 0)) if h else "missing")' 2>&1)
    read -r typ dials sessions <<<"$got"
    if [ "$typ" = loft ] && [ "${dials:-0}" -ge 2 ] 2>/dev/null && [ "$sessions" = 0 ]; then
        pass status-home-dials
        note "status: home dials=$dials sessions=$sessions"
    else
        fail status-home-dials "outbound home: '$got' (want type loft, dials >= 2, sessions 0): $(echo "$js" | head -c 200)"
    fi

    if loft_stop TERM && [ ! -e "$CTL" ]; then pass loft-exit-clean
    else fail loft-exit-clean "exit status $LOFT_RC after SIGTERM, control socket left: $([ -e "$CTL" ] && echo yes || echo no)"; fi
fi

finish
