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

FRONT_BIN=${LOFT_FRONT_BIN:-$(dirname "$LOFT_BIN")/loft-front}
INTEROP=$LOFT_REPO/Tests/interop
TOKEN=interop-token-$T_ID
FRONT_LOG=$T_DIR/front.log

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

python3 -c 'import websockets' 2>/dev/null || die "python3 cannot import websockets (pip install websockets)"
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

# --- 1. websockets client -> loft-front -----------------------------------------------------

cat >"$T_DIR/front.yaml" <<EOF
log: info
listen: 127.0.0.1:$FRONT_PORT
path: /loft
carriers: [ws]
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
    fail_all "loft-front or the echo server did not start: $(tail -3 "$FRONT_LOG" | tr '\n' '|')" $P1_CASES $P1_SHELL
else
    t0=$(now_ms)
    run_waited "$T_DIR/client.out" timeout -k 5 200 python3 "$INTEROP/ws_client.py" --port "$FRONT_PORT" --ca "$CA" --server-name front.test \
        --token "$TOKEN" --echo-port "$ECHO_PORT" --closed-port "$CLOSED_PORT" \
        --pool4 198.18.64.0/24 --pool6 fd00:64::/64 --mtu 1400 --dns 198.18.1.2,fd00:1::2 \
        --keepalive-ms 10000 --max-streams 64 --deadline 180
    note "websockets client: $(( $(now_ms) - t0 )) ms"
    grep '^  #' "$T_DIR/client.out.err" | sed 's/^  # /client: /' | while read -r l; do note "$l"; done
    relay "$T_DIR/client.out" $P1_CASES

    if grep -q 'event=session-refused reason=bad-token' "$FRONT_LOG"; then pass bad-token-logged
    else fail bad-token-logged "no event=session-refused reason=bad-token in the front's log"; fi

    # unknown type, garbage, second HELLO, bad length, version 2 (the text message is refused by
    # the ws layer: carrier.ws.protocol_error code=1003)
    np=$(grep -c 'event=session-protocol-error' "$FRONT_LOG")
    nt=$(grep -c 'event=carrier.ws.protocol_error.*code=1003' "$FRONT_LOG")
    if [ "$np" -ge 5 ] && [ "$nt" -ge 1 ]; then pass front-logged-protocol-errors
    else fail front-logged-protocol-errors "$np session-protocol-error lines (want 5), $nt ws code=1003 lines (want 1)"; fi

    stats=$("$FRONT_BIN" stats -c "$T_DIR/front.yaml" 2>&1)
    if kill -0 "$FRONT_PID" 2>/dev/null && echo "$stats" | grep -q '^sessions_opened '; then pass front-still-running
    else fail front-still-running "pid $FRONT_PID alive: $(kill -0 "$FRONT_PID" 2>/dev/null && echo yes || echo no); stats: $(echo "$stats" | head -2 | tr '\n' '|')"; fi

    # Exact counters for what the client did: one bad token, one unknown instance, two resumes
    # (one superseding the other), two streams connected and one refused, 1 MiB + 1300 bytes each way.
    sv() { echo "$stats" | awk -v k="$1" '$1 == k { print $2 }'; }
    want="refused_bad_token=1 refused_unknown_instance=1 sessions_resumed=2 sessions_superseded=1 streams_opened=2 streams_failed=1 bytes_up=1049876 bytes_down=1049876"
    got=""
    for kv in $want; do got+="${kv%%=*}=$(sv "${kv%%=*}") "; done
    got=${got% }
    pe=$(sv protocol_errors)
    if [ "$got" = "$want" ] && [ "${pe:-0}" -ge 5 ]; then pass front-stats-counters
    else fail front-stats-counters "got '$got' protocol_errors=$pe, want '$want' protocol_errors>=5"; fi

    kill -TERM "$FRONT_PID" 2>/dev/null
    rc=hung
    for _ in $(seq 50); do kill -0 "$FRONT_PID" 2>/dev/null || { wait "$FRONT_PID"; rc=$?; break; }; sleep 0.1; done
    if [ "$rc" = 0 ] && grep -q 'event=stopped' "$FRONT_LOG"; then pass front-exit-clean
    else fail front-exit-clean "exit status $rc after SIGTERM: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; fi
fi

# --- 2. loft's ws client -> websockets echo server ------------------------------------------

RESULTS=$T_DIR/ws-echo.jsonl
: >"$RESULTS"
bg ws-echo python3 "$INTEROP/ws_echo_server.py" serve --port "$WS_PORT" --cert "$T_DIR/certs/server.pem" \
    --key "$T_DIR/certs/server.key" --results "$RESULTS"
CTL=/run/loft/ws-interop-$$.sock
on_cleanup "rm -f $CTL"
cat >"$T_DIR/loft.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$SOCKS_PORT }
bridge: off
outbounds:
  - { name: home, type: loft, server: 127.0.0.1:$WS_PORT, carrier: ws, token: t, tls: { server-name: front.test, ca: $CA } }
default: home
control: $CTL
EOF

if ! wait_tcp "$WS_PORT"; then
    fail_all "the websockets echo server did not start: $(tail -3 "$T_DIR/ws-echo.log" | tr '\n' '|')" $P2_CASES $P2_SHELL
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
    run_waited "$T_DIR/check.out" timeout 30 python3 "$INTEROP/ws_echo_server.py" check --results "$RESULTS" \
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
