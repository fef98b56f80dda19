#!/usr/bin/env bash
# The quic carrier against an independent QUIC implementation (PyPI aioquic). Loopback only, no
# namespaces. Tests/interop/quic_client.py as the CLIENT of loft-front: QUIC v1 + TLS 1.3 with
# ALPN loft (certificate checked against the test CA), HELLO -> STATUS on the first
# bidirectional stream, session PING/PONG, a TCP stream echoed (200 KiB, FIN/FIN), a UDP
# association echoed (a DGRAM on the session stream, and one as a QUIC DATAGRAM frame answered
# as one), GOAWAY + the stream's FIN, a wrong token (GOAWAY bad-token), another
# ALPN (handshake refused); then hostile input: 3000 garbage datagrams (empty ones among them) and an Initial flood
# from 400 source ports that never finish their handshake: a legitimate session still comes
# up, the front's memory stays bounded and its counters say what happened.
. "$(dirname "$0")/lib.sh"

FRONT_BIN=${LOFT_FRONT_BIN:-$(dirname "$LOFT_BIN")/loft-front}
INTEROP=$LOFT_REPO/Tests/interop
TOKEN=interop-token-$T_ID
FRONT_LOG=$T_DIR/front.log
CASES="quic-handshake-alpn-loft quic-hello-status quic-session-ping-pong quic-open-tcp-ok quic-tcp-echo-200k
quic-open-udp-ok quic-udp-echo quic-udp-echo-datagram-frames quic-session-end quic-bad-token-goaway quic-other-alpn-refused
quic-alive-after-garbage quic-alive-after-initial-flood"
SHELL_CASES="front-quic-counters front-memory-bounded front-exit-clean"

python3 -c 'import aioquic' 2>/dev/null || die "python3 cannot import aioquic (pip install aioquic)"
[ -x "$FRONT_BIN" ] || die "no loft-front binary at $FRONT_BIN"

# Three free loopback ports: the front's (TCP and UDP), the TCP echo's, the UDP echo's.
read -r FRONT_PORT ECHO_PORT UDP_ECHO_PORT <<<"$(python3 - <<'PYEOF'
import socket
out, keep = [], []
while len(out) < 3:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", p))
    except OSError:
        s.close(); u.close(); continue
    keep += [s, u]; out.append(p)
print(" ".join(map(str, out)))
PYEOF
)"
[ -n "$UDP_ECHO_PORT" ] || die "could not pick free ports"
"$INTEROP/gen-certs.sh" "$T_DIR/certs" >/dev/null || die "gen-certs.sh failed"

cat >"$T_DIR/front.yaml" <<EOF
log: info
listen: 127.0.0.1:$FRONT_PORT
carriers: [quic]
tls: { certificate: certs/server.pem, key: certs/server.key }
tokens: ["$TOKEN"]
pool: { ipv4: 198.18.64.0/24 }
keepalive: 10s
control: $T_DIR/front.sock
EOF

python3 "$INTEROP/tcp_echo.py" "$ECHO_PORT" >"$T_DIR/echo.log" 2>&1 </dev/null &
EPID=$!; T_PIDS+=("$EPID"); register_pid "$EPID"
"$FRONT_BIN" run -c "$T_DIR/front.yaml" >"$FRONT_LOG" 2>&1 </dev/null &
FRONT_PID=$!; T_PIDS+=("$FRONT_PID"); register_pid "$FRONT_PID"
for _ in $(seq 100); do grep -q 'event=ready' "$FRONT_LOG" && ss -Hltn "sport = :$ECHO_PORT" | grep -q . && break; sleep 0.1; done
if ! grep -q 'event=ready' "$FRONT_LOG"; then
    for c in $CASES $SHELL_CASES; do fail "$c" "loft-front did not start: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; done
    finish
fi
rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$FRONT_PID/status")

t0=$(now_ms)
timeout -k 5 150 python3 "$INTEROP/quic_client.py" --port "$FRONT_PORT" --ca "$T_DIR/certs/ca.pem" --token "$TOKEN" \
    --echo-port "$ECHO_PORT" --udp-echo-port "$UDP_ECHO_PORT" >"$T_DIR/client.out" 2>"$T_DIR/client.err" </dev/null &
CPID=$!; T_PIDS+=("$CPID"); register_pid "$CPID"
wait "$CPID"
note "aioquic client: $(( $(now_ms) - t0 )) ms"
grep '^  #' "$T_DIR/client.err" | sed 's/^  # /client: /' | while read -r l; do note "$l"; done
while read -r st name rest; do
    case $st in PASS) pass "$name" ;; FAIL) fail "${name%:}" "$rest" ;; esac
done <"$T_DIR/client.out"
for c in $CASES; do
    grep -qE "^(PASS|FAIL) $c(:|$)" "$T_DIR/client.out" || fail "$c" "not reported: $(tail -2 "$T_DIR/client.err" | tr '\n' '|')"
done

stats=$("$FRONT_BIN" stats -c "$T_DIR/front.yaml" 2>&1)
sv() { echo "$stats" | awk -v k="$1" '$1 == k { print $2 }'; }
if [ "$(sv sessions_opened)" -ge 3 ] && [ "$(sv refused_bad_token)" = 1 ] && [ "$(sv quic_packets_dropped)" -ge 2900 ] \
    && [ "$(sv handshakes_evicted)" -ge 300 ] && [ "$(sv streams_opened)" = 1 ] && [ "$(sv datagrams_down)" -ge 2 ]; then
    pass front-quic-counters
    note "front: sessions_opened $(sv sessions_opened), quic_packets_dropped $(sv quic_packets_dropped), handshakes_evicted $(sv handshakes_evicted), handshakes_failed $(sv handshakes_failed)"
else
    fail front-quic-counters "$(echo "$stats" | tr '\n' ' ')"
fi
rss1=$(awk '/^VmRSS/ {print $2}' "/proc/$FRONT_PID/status")
if [ -n "$rss1" ] && [ "$rss1" -lt $((rss0 + 65536)) ]; then pass front-memory-bounded; note "front RSS ${rss0} kB -> ${rss1} kB"
else fail front-memory-bounded "front RSS ${rss0} kB -> ${rss1} kB (allowed +64 MiB)"; fi

kill -TERM "$FRONT_PID"
rc=0; wait "$FRONT_PID" || rc=$?
if [ $rc -eq 0 ] && grep -q 'event=stopped' "$FRONT_LOG"; then pass front-exit-clean
else fail front-exit-clean "exit $rc: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; fi
finish
