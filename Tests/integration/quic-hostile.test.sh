#!/usr/bin/env bash
# Hostile clients over quic (PyPI aioquic, Tests/interop/quic_hostile.py) against loft-front on
# loopback (no namespaces), keepalive 1s, max-streams 250 (QUIC's stream limit 251): 200 flows on streams of their own that are never read
# (the client never extends a window) while a source writes 4 MiB into each: the front's RSS
# stays within 48 MiB of where it was and a new session beside them is served; a client that
# says HELLO and then nothing is ended after 2 keepalive intervals (dead_carriers); a QUIC
# DATAGRAM whose DGRAM frame lies about its length ends that session (protocol_errors) and the
# next one is served; a 60 000-byte UDP datagram comes back whole on the session stream.
. "$(dirname "$0")/lib.sh"

FRONT_BIN=${LOFT_FRONT_BIN:-$(dirname "$LOFT_BIN")/loft-front}
INTEROP=$LOFT_REPO/Tests/interop
TOKEN=hostile-token-$T_ID
FRONT_LOG=$T_DIR/front.log
CASES="quic-max-streams-is-stream-limit quic-unread-flows-memory-bounded quic-legit-beside-unread-flows quic-keepalive-expiry quic-datagram-bad-length
quic-alive-after-bad-datagram quic-oversize-dgram-back-on-stream"
python3 -c 'import aioquic' 2>/dev/null || die "python3 cannot import aioquic (pip install aioquic)"
[ -x "$FRONT_BIN" ] || die "no loft-front binary at $FRONT_BIN"

read -r FRONT_PORT SOURCE_PORT ECHO_PORT UDP_ECHO_PORT <<<"$(python3 - <<'PYEOF'
import socket
out, keep = [], []
while len(out) < 4:
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
cat >"$T_DIR/front.yaml" <<YAMLEOF
log: info
listen: 127.0.0.1:$FRONT_PORT
carriers: [quic]
tls: { certificate: certs/server.pem, key: certs/server.key }
tokens: ["$TOKEN"]
pool: { ipv4: 198.18.64.0/24 }
keepalive: 1s
max-streams: 250
control: $T_DIR/front.sock
YAMLEOF
python3 "$INTEROP/tcp_echo.py" "$ECHO_PORT" >"$T_DIR/echo.log" 2>&1 </dev/null &
EPID=$!; T_PIDS+=("$EPID"); register_pid "$EPID"
"$FRONT_BIN" run -c "$T_DIR/front.yaml" >"$FRONT_LOG" 2>&1 </dev/null &
FRONT_PID=$!; T_PIDS+=("$FRONT_PID"); register_pid "$FRONT_PID"
for _ in $(seq 100); do grep -q 'event=ready' "$FRONT_LOG" && ss -Hltn "sport = :$ECHO_PORT" | grep -q . && break; sleep 0.1; done
if ! grep -q 'event=ready' "$FRONT_LOG"; then
    for c in $CASES; do fail "$c" "loft-front did not start: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; done
    finish
fi

t0=$(now_ms)
timeout -k 5 100 python3 "$INTEROP/quic_hostile.py" --port "$FRONT_PORT" --ca "$T_DIR/certs/ca.pem" --token "$TOKEN" \
    --front-pid "$FRONT_PID" --source-port "$SOURCE_PORT" --echo-port "$ECHO_PORT" --udp-echo-port "$UDP_ECHO_PORT" \
    >"$T_DIR/client.out" 2>"$T_DIR/client.err" </dev/null &
CPID=$!; T_PIDS+=("$CPID"); register_pid "$CPID"
wait "$CPID"
note "aioquic hostile clients: $(( $(now_ms) - t0 )) ms"
grep '^  #' "$T_DIR/client.err" | sed 's/^  # /client: /' | while read -r l; do note "$l"; done
while read -r st name rest; do
    case $st in PASS) pass "$name" ;; FAIL) fail "${name%:}" "$rest" ;; esac
done <"$T_DIR/client.out"
for c in $CASES; do
    grep -qE "^(PASS|FAIL) $c(:|$)" "$T_DIR/client.out" || fail "$c" "not reported: $(tail -2 "$T_DIR/client.err" | tr '\n' '|')"
done

stats=$("$FRONT_BIN" stats -c "$T_DIR/front.yaml" 2>&1)
sv() { echo "$stats" | awk -v k="$1" '$1 == k { print $2 }'; }
if [ "$(sv dead_carriers)" -ge 1 ] && [ "$(sv protocol_errors)" -ge 1 ] && [ "$(sv sessions_opened)" -ge 5 ]; then
    pass front-hostile-counters
    note "front: sessions_opened $(sv sessions_opened), dead_carriers $(sv dead_carriers), protocol_errors $(sv protocol_errors), streams_opened $(sv streams_opened)"
else
    fail front-hostile-counters "$(echo "$stats" | tr '\n' ' ')"
fi
kill -TERM "$FRONT_PID"
rc=0; wait "$FRONT_PID" || rc=$?
if [ $rc -eq 0 ] && grep -q 'event=stopped' "$FRONT_LOG"; then pass front-exit-clean
else fail front-exit-clean "exit $rc: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; fi
finish
