# Shared by the tests against independent peers on loopback (ws-interop, h2-interop,
# get-interop; quic-lib.sh for the quic ones), sourced after lib.sh, never run: the test PKI
# (certs), loft-front beside a TCP echo (front_up), the clients' notes (client_notes), the
# front's counters (front_stats, sv) and clean exit (front_exit_clean), and loft's own client
# against a peer's echo server (loft_against_echo).

INTEROP=$LOFT_REPO/Tests/interop
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

# interop_ports NAME...: free loopback ports (free_ports) into the variables NAME...
interop_ports() {
    local -a got
    local v
    read -ra got <<<"$(free_ports $#)"
    [ ${#got[@]} -eq $# ] || die "could not pick free ports"
    for v in "$@"; do printf -v "$v" %s "${got[0]}"; got=("${got[@]:1}"); done
}

# certs: the test PKI (gen-certs.sh) in $T_DIR/certs; CA is its CA's PEM.
CA=$T_DIR/certs/ca.pem
certs() { "$INTEROP/gen-certs.sh" "$T_DIR/certs" >/dev/null || die "gen-certs.sh failed"; }

# front_yaml CARRIERS [YAML LINE...]: $T_DIR/front.yaml for a front on 127.0.0.1:$FRONT_PORT
# serving CARRIERS (e.g. "ws, get, h2") with the test PKI, the token $TOKEN and a control
# socket, plus the lines given (the pool at least).
front_yaml() {
    local l
    cat >"$T_DIR/front.yaml" <<YAMLEOF
log: info
listen: 127.0.0.1:$FRONT_PORT
carriers: [$1]
tls: { certificate: certs/server.pem, key: certs/server.key }
tokens: ["$TOKEN"]
control: $T_DIR/front.sock
YAMLEOF
    shift
    for l in "$@"; do echo "$l" >>"$T_DIR/front.yaml"; done
}

# front_up CASE...: a TCP echo on $ECHO_PORT and loft-front from $T_DIR/front.yaml, until the
# front logs event=ready and the echo listens (10 s each). Sets FRONT_PID. If either does not
# start, every CASE fails and it returns 1.
front_up() {
    bg_root tcp-echo python3 "$INTEROP/tcp_echo.py" "$ECHO_PORT"
    if ! front_run "$T_DIR/front.yaml" || ! wait_tcp "$ECHO_PORT"; then
        fail_all "loft-front or the echo server did not start: $(tail -3 "$FRONT_LOG" | tr '\n' '|')" "$@"
        return 1
    fi
}

# client_notes FILE LABEL: the "  # " lines a python script wrote to FILE, as notes "LABEL: ...".
client_notes() { grep '^  #' "$1" | sed "s/^  # /${2:+$2: }/" | while read -r l; do note "$l"; done; }

# front_stats: the front's counters (`loft-front stats`) into $stats; `sv NAME` is one of them.
front_stats() { stats=$("$FRONT_BIN" stats -c "$T_DIR/front.yaml" 2>&1); }
sv() { echo "$stats" | awk -v k="$1" '$1 == k { print $2 }'; }

# stats_got "NAME=VALUE...": the same names with the front's values ($stats), "NAME=VALUE ...".
stats_got() {
    local kv got=""
    for kv in $1; do got+="${kv%%=*}=$(sv "${kv%%=*}") "; done
    echo "${got% }"
}

# front_exit_clean [SECONDS]: SIGTERM to the front: it exits 0 (within SECONDS if given, else
# however long it takes) after logging event=stopped (case front-exit-clean).
front_exit_clean() {
    local rc=hung
    kill -TERM "$FRONT_PID" 2>/dev/null
    if [ -z "${1:-}" ]; then
        rc=0; wait "$FRONT_PID" || rc=$?
    else
        for _ in $(seq $(($1 * 10))); do kill -0 "$FRONT_PID" 2>/dev/null || { wait "$FRONT_PID"; rc=$?; break; }; sleep 0.1; done
    fi
    if [ "$rc" = 0 ] && grep -q 'event=stopped' "$FRONT_LOG"; then pass front-exit-clean
    else fail front-exit-clean "exit status $rc after SIGTERM: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; fi
}

# loft_against_echo CARRIER SERVER.py WHAT: loft's CARRIER client (the holder outbound of
# `loft run`, SOCKS5 only on $SOCKS_PORT) against the peer's TLS echo SERVER.py on $WS_PORT
# (WHAT names it in failures): the server records what loft sent, echoes the HELLO back (a
# protocol error for loft), loft redials and keeps running. Cases $P2_CASES (the server's
# `check`), loft-still-running, loft-logs-holder-down, status-home-dials, loft-exit-clean.
loft_against_echo() {
    local carrier=$1 server=$2 what=$3 js got typ dials sessions
    RESULTS=$T_DIR/$carrier-echo.jsonl
    : >"$RESULTS"
    bg_root "$carrier-echo" python3 "$INTEROP/$server" serve --port "$WS_PORT" --cert "$T_DIR/certs/server.pem" \
        --key "$T_DIR/certs/server.key" --results "$RESULTS"
    CTL=/run/loft/$carrier-interop-$$.sock
    on_cleanup "rm -f $CTL"
    cat >"$T_DIR/loft.yaml" <<YAMLEOF
log: info
socks5: { listen: 127.0.0.1:$SOCKS_PORT }
bridge: off
outbounds:
  - { name: home, type: loft, server: 127.0.0.1:$WS_PORT, carrier: $carrier, token: t, tls: { server-name: front.test, ca: $CA } }
default: home
control: $CTL
YAMLEOF
    if ! wait_tcp "$WS_PORT"; then
        fail_all "the $what did not start: $(tail -3 "$T_DIR/$carrier-echo.log" | tr '\n' '|')" $P2_CASES \
            loft-still-running loft-logs-holder-down status-home-dials loft-exit-clean
        return
    fi
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
    run_waited "$T_DIR/check.out" timeout 30 python3 "$INTEROP/$server" check --results "$RESULTS" \
        --token t --host "front.test:$WS_PORT"
    client_notes "$T_DIR/check.out.err" server
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
}

# front_still_running: the front is alive and answers `loft-front stats` (case
# front-still-running); leaves its counters in $stats.
front_still_running() {
    front_stats
    if kill -0 "$FRONT_PID" 2>/dev/null && echo "$stats" | grep -q '^sessions_opened '; then pass front-still-running
    else fail front-still-running "pid $FRONT_PID alive: $(kill -0 "$FRONT_PID" 2>/dev/null && echo yes || echo no); stats: $(echo "$stats" | head -2 | tr '\n' '|')"; fi
}
