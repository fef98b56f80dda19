# Shared by quic-interop.test.sh and quic-hostile.test.sh (sourced after lib.sh, never run): the
# loopback set-up of the tests against aioquic (Tests/interop/): free ports, the test PKI in
# $T_DIR/certs, a TCP echo beside loft-front (front_up), the Python clients' PASS/FAIL lines as
# the test's cases (client_results), the front's counters (front_stats, sv) and its clean exit
# (front_exit_clean).

FRONT_BIN=${LOFT_FRONT_BIN:-$(dirname "$LOFT_BIN")/loft-front}
INTEROP=$LOFT_REPO/Tests/interop
FRONT_LOG=$T_DIR/front.log
python3 -c 'import aioquic' 2>/dev/null || die "python3 cannot import aioquic (pip install aioquic)"
[ -x "$FRONT_BIN" ] || die "no loft-front binary at $FRONT_BIN"

# free_ports N: N loopback port numbers, each free for both TCP and UDP, on one line.
free_ports() {
    python3 - "$1" <<'PYEOF'
import socket, sys
out, keep = [], []
while len(out) < int(sys.argv[1]):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", p))
    except OSError:
        s.close(); u.close(); continue
    keep += [s, u]; out.append(p)
print(" ".join(map(str, out)))
PYEOF
}

# front_yaml TOKEN [YAML LINE...]: $T_DIR/front.yaml for a quic front on 127.0.0.1:$FRONT_PORT
# with the test PKI, TOKEN, the pool 198.18.64.0/24 and a control socket, plus the lines given.
front_yaml() {
    local token=$1 l
    shift
    cat >"$T_DIR/front.yaml" <<YAMLEOF
log: info
listen: 127.0.0.1:$FRONT_PORT
carriers: [quic]
tls: { certificate: certs/server.pem, key: certs/server.key }
tokens: ["$token"]
pool: { ipv4: 198.18.64.0/24 }
control: $T_DIR/front.sock
YAMLEOF
    for l in "$@"; do echo "$l" >>"$T_DIR/front.yaml"; done
}

# certs: the test PKI (gen-certs.sh) in $T_DIR/certs.
certs() { "$INTEROP/gen-certs.sh" "$T_DIR/certs" >/dev/null || die "gen-certs.sh failed"; }

# front_up CASE...: a TCP echo on $ECHO_PORT and loft-front from $T_DIR/front.yaml, until the
# front's log says ready and the echo listens (10 s). Sets FRONT_PID. If the front does not
# start, every CASE fails and the test finishes.
front_up() {
    local c
    python3 "$INTEROP/tcp_echo.py" "$ECHO_PORT" >"$T_DIR/echo.log" 2>&1 </dev/null &
    EPID=$!; T_PIDS+=("$EPID"); register_pid "$EPID"
    "$FRONT_BIN" run -c "$T_DIR/front.yaml" >"$FRONT_LOG" 2>&1 </dev/null &
    FRONT_PID=$!; T_PIDS+=("$FRONT_PID"); register_pid "$FRONT_PID"
    for _ in $(seq 100); do grep -q 'event=ready' "$FRONT_LOG" && ss -Hltn "sport = :$ECHO_PORT" | grep -q . && break; sleep 0.1; done
    if ! grep -q 'event=ready' "$FRONT_LOG"; then
        for c in "$@"; do fail "$c" "loft-front did not start: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; done
        finish
    fi
}

# client_results CASE...: the clients' notes ("  # " lines of $T_DIR/client.err) as notes, their
# PASS/FAIL lines ($T_DIR/client.out) as passes and failures, and each CASE they did not
# report as a failure.
client_results() {
    local st name rest c
    grep '^  #' "$T_DIR/client.err" | sed 's/^  # /client: /' | while read -r l; do note "$l"; done
    while read -r st name rest; do
        case $st in PASS) pass "$name" ;; FAIL) fail "${name%:}" "$rest" ;; esac
    done <"$T_DIR/client.out"
    for c in "$@"; do
        grep -qE "^(PASS|FAIL) $c(:|$)" "$T_DIR/client.out" || fail "$c" "not reported: $(tail -2 "$T_DIR/client.err" | tr '\n' '|')"
    done
}

# front_stats: the front's counters (`loft-front stats`) into $stats; `sv NAME` is one of them.
front_stats() { stats=$("$FRONT_BIN" stats -c "$T_DIR/front.yaml" 2>&1); }
sv() { echo "$stats" | awk -v k="$1" '$1 == k { print $2 }'; }

# front_exit_clean: SIGTERM to the front: it exits 0 after logging event=stopped (case
# front-exit-clean).
front_exit_clean() {
    local rc=0
    kill -TERM "$FRONT_PID"
    wait "$FRONT_PID" || rc=$?
    if [ $rc -eq 0 ] && grep -q 'event=stopped' "$FRONT_LOG"; then pass front-exit-clean
    else fail front-exit-clean "exit $rc: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; fi
}
