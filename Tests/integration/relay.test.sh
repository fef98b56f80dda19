#!/usr/bin/env bash
# loft's relays at a connection's edges, through the TUN (app namespace, default: direct) and
# through the SOCKS5 server on loopback:
#   reset-1MiB / reset-stalled: the server sends 1 MiB (or as much as the path takes until it
#     stalls) and resets (SO_LINGER {1,0}) while the app is not reading; loft must stay idle
#     meanwhile (CPU < 5 % of a core over 3 s) and the app must then get its reset
#     (ECONNRESET; data before it is allowed), not an EOF and not a hang;
#   upload-remote-fin: the server half-closes right after accepting while the app uploads
#     20 MiB: the app sees EOF at once, its upload still arrives whole (SHA-256 at the server);
#   download-after-app-fin: the app sends a request and half-closes, the server then sends
#     20 MiB and closes: SHA-256 intact at the app.
. "$(dirname "$0")/lib.sh"

CPU_LIMIT_PCT=5
CPU_WINDOW_S=3
PAUSE_S=5
RESET_BYTES=1048576              # the "1MiB" reset cases
STALL_BYTES=$((64 * 1048576))    # the "stalled" ones: send until loft takes no more (its
                                 # buffers and the sockets' are full), then reset
BIG_BYTES=$((20 * 1048576))
PORT_BASE=9110                   # one port per case: 9110.. (lib.sh's servers use 80, 9000, 9001)

# A test-unique SOCKS5 port on loopback that nothing uses.
S5_PORT=$((20000 + (T_ID + 7919) % 20000))
while ss -Htuln "sport = :$S5_PORT" 2>/dev/null | grep -q .; do S5_PORT=$((S5_PORT + 1)); done

topo_up
head -c "$BIG_BYTES" /dev/urandom >"$T_DIR/big"
BIG_SHA=$(sha_of "$T_DIR/big")

# One-connection servers (run in srv, v4 and v6): python3 srv.py MODE PORT RESULT [BYTES|FILE]
#   reset:     send up to BYTES (less if the peer takes nothing for 0.5 s), then
#              SO_LINGER {1,0} and close: an RST. RESULT: "sent N".
#   sink-fin:  shutdown(SHUT_WR) right after accept, read to EOF. RESULT: "<sha256> N".
#   send-file: read the request to EOF, send FILE, close. RESULT: "request N sent M".
# RESULT is written (renamed into place) when the connection is done; the server then exits.
cat >"$T_DIR/srv.py" <<'EOF'
import hashlib, os, select, socket, struct, sys, time
mode, port, result = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ls = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
ls.bind(("::", port))
ls.listen(4)
ls.settimeout(40)
c, peer = ls.accept()
ls.close()

def done(text):
    with open(result + ".tmp", "w") as f:
        f.write(text + "\n")
    os.rename(result + ".tmp", result)

if mode == "reset":
    want, block = int(sys.argv[4]), 1 << 20
    buf = memoryview(os.urandom(block))
    c.setblocking(False)
    sent, last = 0, time.time()
    while sent < want and time.time() - last < 0.5:
        try:
            o = sent % block
            sent += c.send(buf[o:min(block, o + 65536, o + want - sent)])
            last = time.time()
        except BlockingIOError:
            select.select([], [c], [], 0.1)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    done("sent %d" % sent)
elif mode == "sink-fin":
    c.shutdown(socket.SHUT_WR)
    c.settimeout(30)
    h, n = hashlib.sha256(), 0
    while True:
        d = c.recv(262144)
        if not d:
            break
        h.update(d)
        n += len(d)
    c.close()
    done("%s %d" % (h.hexdigest(), n))
elif mode == "send-file":
    c.settimeout(30)
    req = 0
    while True:
        d = c.recv(65536)
        if not d:
            break
        req += len(d)
    data = open(sys.argv[4], "rb").read()
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
    c.close()
    done("request %d sent %d" % (req, len(data)))
EOF

# The app: python3 app.py direct|S5PORT MODE HOST PORT ARGS...  (direct: plain connect, run in
# the app namespace; a port: a SOCKS5 CONNECT through 127.0.0.1:S5PORT, no authentication).
#   reset-paused GOFILE PAUSE: connect, read nothing until GOFILE exists and PAUSE s have
#     passed, then read to the end. Prints "reset|eof|hang|error:<e> BYTES PAUSED_S";
#     exit 0 only for a reset.
#   upload BYTES: upload BYTES random bytes while watching for the server's EOF (which must
#     come within 3 s; the last 4 MiB wait for it), then shutdown(SHUT_WR) and close. Prints "<sha256> BYTES EOF_MS SENT_AT_EOF TOTAL_MS".
#   request: send a short request, shutdown(SHUT_WR), read to EOF. Prints "<sha256> BYTES MS".
cat >"$T_DIR/app.py" <<'EOF'
import hashlib, os, select, socket, struct, sys, time
via, mode, host, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
args = sys.argv[5:]

def out(msg, rc):
    print(msg); sys.exit(rc)

def recv_exact(s, n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            out("error:socks5-closed-during-handshake 0 0", 2)
        b += d
    return b

def connect():
    if via == "direct":
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect((host, port))
        return s
    s = socket.create_connection(("127.0.0.1", int(via)), timeout=10)
    s.sendall(b"\x05\x01\x00")
    if recv_exact(s, 2) != b"\x05\x00":
        out("error:socks5-method 0 0", 2)
    if ":" in host:
        a = b"\x04" + socket.inet_pton(socket.AF_INET6, host)
    else:
        a = b"\x01" + socket.inet_pton(socket.AF_INET, host)
    s.sendall(b"\x05\x01\x00" + a + struct.pack(">H", port))
    head = recv_exact(s, 4)
    if head[1] != 0:
        out("error:socks5-reply-%02x 0 0" % head[1], 2)
    recv_exact(s, {1: 6, 4: 18}.get(head[3], 6))
    return s

if mode == "upload":
    data = os.urandom(int(args[0]))
s = connect()
t0 = time.time()

if mode == "reset-paused":
    go, pause = args[0], float(args[1])
    while not os.path.exists(go) or time.time() - t0 < pause:
        if time.time() - t0 > 30:
            break
        time.sleep(0.05)
    paused = time.time() - t0
    s.settimeout(15)
    n = 0
    try:
        while True:
            d = s.recv(65536)
            if not d:
                out("eof %d %.1f" % (n, paused), 1)
            n += len(d)
    except ConnectionResetError:
        out("reset %d %.1f" % (n, paused), 0)
    except socket.timeout:
        out("hang %d %.1f" % (n, paused), 1)
    except OSError as e:
        out("error:%s %d %.1f" % (e.__class__.__name__, n, paused), 1)

if mode == "upload":
    # All but the last HOLD bytes go at once; the rest only after the server's EOF arrived, so
    # that the upload overlaps the EOF and surely goes on after it.
    total, hold = len(data), min(4 << 20, len(data) // 2)
    view = memoryview(data)
    s.setblocking(False)
    sent, eof_ms, sent_at_eof, stuck = 0, None, None, None
    while sent < total or eof_ms is None:
        limit = total if eof_ms is not None else total - hold
        if time.time() - t0 > 40:
            out("error:timeout sent %d eof %s" % (sent, eof_ms), 1)
        if sent >= limit and eof_ms is None:
            stuck = stuck or time.time()
            if time.time() - stuck > 3:
                out("error:no-eof-3s-after-%d-bytes" % sent, 1)
        r, w, _ = select.select([s] if eof_ms is None else [], [s] if sent < limit else [], [], 0.5)
        try:
            if r:
                d = s.recv(65536)
                if d:
                    out("error:data-from-a-half-closed-server %r" % d[:40], 1)
                eof_ms, sent_at_eof = (time.time() - t0) * 1000, sent
            if w:
                sent += s.send(view[sent:min(limit, sent + 262144)])
        except BlockingIOError:
            pass
        except OSError as e:
            out("error:%s after %d bytes sent (eof at %s ms)" % (e.__class__.__name__, sent, eof_ms), 1)
    ms = (time.time() - t0) * 1000
    s.shutdown(socket.SHUT_WR)
    s.close()
    out("%s %d %.0f %d %.0f" % (hashlib.sha256(data).hexdigest(), sent, eof_ms, sent_at_eof, ms), 0)

if mode == "request":
    s.sendall(b"GET big\n")
    s.shutdown(socket.SHUT_WR)
    s.settimeout(30)
    h, n = hashlib.sha256(), 0
    try:
        while True:
            d = s.recv(262144)
            if not d:
                break
            h.update(d)
            n += len(d)
    except OSError as e:
        out("error:%s after %d bytes" % (e.__class__.__name__, n), 1)
    out("%s %d %.0f" % (h.hexdigest(), n, (time.time() - t0) * 1000), 0)

out("error:unknown-mode", 2)
EOF

# srv_start NAME MODE PORT [FILE|BYTES]: a one-connection server; its result goes to
# $T_DIR/NAME.result.
srv_start() {
    local name=$1 mode=$2 port=$3
    shift 3
    rm -f "$T_DIR/$name.result"
    bg_in "$SRV_NS" "srv-$name" timeout 60 python3 "$T_DIR/srv.py" "$mode" "$port" \
        "$T_DIR/$name.result" "$@"
    wait_listen "$SRV_NS" tcp "$port" 10
}

# wait_file FILE SECONDS: until FILE exists.
wait_file() {
    local i
    for i in $(seq $(($2 * 20))); do [ -e "$1" ] && return 0; sleep 0.05; done
    return 1
}

# run_app VIA ARGS...: the app, in the app namespace for the TUN, in the root one for SOCKS5.
run_app() {
    if [ "$1" = direct ]; then in_app timeout 60 python3 "$T_DIR/app.py" "$@"
    else timeout 60 python3 "$T_DIR/app.py" "$@"; fi
}

# cpu_share PID MS: the share of a core PID used over the next MS milliseconds ("12.3").
cpu_share() {
    local c0 c1 t0 t1
    t0=$(now_ms); c0=$(cpu_ticks "$1")
    sleep "$(awk -v ms="$2" 'BEGIN { printf "%.3f", ms / 1000 }')"
    c1=$(cpu_ticks "$1"); t1=$(now_ms)
    [ -n "$c0" ] && [ -n "$c1" ] || return 1
    awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v ms=$((t1 - t0)) 'BEGIN { printf "%.1f", d * 100000 / hz / ms }'
}

# reset_paused NAME VIA HOST PORT BYTES: cases NAME-paused-cpu and NAME-delivered. The server
# sends up to BYTES (less if the path stops taking data for 0.5 s) and resets; meanwhile the
# app reads nothing.
reset_paused() {
    local name=$1 via=$2 host=$3 port=$4 bytes=$5 app_pid idle pct out rc kind nread paused
    local go=$T_DIR/$name.go
    if ! srv_start "$name" reset "$port" "$bytes"; then
        fail "$name-paused-cpu" "reset server did not start"
        fail "$name-delivered" "reset server did not start"; return
    fi
    idle=$(cpu_share "$LOFT_PID" 500)             # loft before this case, for comparison
    rm -f "$go"
    run_app "$via" reset-paused "$host" "$port" "$go" "$PAUSE_S" >"$T_DIR/$name.app" 2>&1 &
    app_pid=$!
    # The server has reset the connection and the app is still paused: loft must be idle now.
    if ! wait_file "$T_DIR/$name.result" 10; then
        fail "$name-paused-cpu" "the server never got to its reset: $(cat "$T_DIR/$name.app" "$T_DIR/srv-$name.log" 2>/dev/null | tail -2 | tr '\n' '|')"
    elif ! pct=$(cpu_share "$LOFT_PID" $((CPU_WINDOW_S * 1000))); then
        fail "$name-paused-cpu" "loft (pid $LOFT_PID) is gone"
    else
        note "$name-paused-cpu: server $(cat "$T_DIR/$name.result") bytes then reset; loft $pct % of a core over ${CPU_WINDOW_S} s while the app was paused (before the case: ${idle:-?} %)"
        if awk -v p="$pct" -v l="$CPU_LIMIT_PCT" 'BEGIN { exit !(p < l) }'; then
            pass "$name-paused-cpu"
        else
            fail "$name-paused-cpu" "loft used $pct % of a core over ${CPU_WINDOW_S} s while the app was paused after the server's reset (limit $CPU_LIMIT_PCT %)"
        fi
    fi
    touch "$go"
    wait "$app_pid"
    rc=$?
    out=$(tail -1 "$T_DIR/$name.app")
    read -r kind nread paused _ <<<"$out"
    if [ $rc -eq 0 ] && [ "$kind" = reset ]; then
        pass "$name-delivered"
        note "$name-delivered: ECONNRESET after $nread bytes read, paused $paused s"
    else
        fail "$name-delivered" "app: '${out:-exit $rc}' (want reset: kind, bytes read, s paused)"
    fi
}

# upload_fin NAME VIA HOST PORT: the server half-closes at once, the app uploads 20 MiB.
upload_fin() {
    local name=$1 via=$2 host=$3 port=$4 out srv sha n eof_ms at_eof ms
    srv_start "$name" sink-fin "$port" || { fail "$name" "sink-fin server did not start"; return; }
    out=$(run_app "$via" upload "$host" "$port" "$BIG_BYTES" 2>&1 | tail -1)
    read -r sha n eof_ms at_eof ms _ <<<"$out"
    if [ "${#sha}" -ne 64 ]; then fail "$name" "app: '${out:0:200}'"; return; fi
    if ! wait_file "$T_DIR/$name.result" 30; then
        fail "$name" "the server never saw the app's EOF: $(tail -2 "$T_DIR/srv-$name.log" | tr '\n' '|')"; return
    fi
    srv=$(cat "$T_DIR/$name.result")
    if [ "$srv" != "$sha $n" ]; then
        fail "$name" "server got '$srv', app sent '$sha $n'"
    elif [ "$eof_ms" -gt 3000 ]; then
        fail "$name" "the server's FIN reached the app only after $eof_ms ms"
    else
        pass "$name"
        note "$name: EOF at the app $eof_ms ms after connect ($at_eof bytes sent by then); all 20 MiB sent in $ms ms, the server's SHA-256 matches"
    fi
}

# download_fin NAME VIA HOST PORT: the app requests and half-closes, the server sends 20 MiB.
download_fin() {
    local name=$1 via=$2 host=$3 port=$4 out sha n ms
    srv_start "$name" send-file "$port" "$T_DIR/big" || { fail "$name" "send-file server did not start"; return; }
    out=$(run_app "$via" request "$host" "$port" 2>&1 | tail -1)
    read -r sha n ms _ <<<"$out"
    if [ "$sha" = "$BIG_SHA" ] && [ "$n" = "$BIG_BYTES" ]; then
        pass "$name"; note "$name: 20 MiB after the app's FIN, intact, in $ms ms"
    else
        fail "$name" "app: '${out:0:200}', want $BIG_SHA $BIG_BYTES ($(cat "$T_DIR/$name.result" 2>/dev/null))"
    fi
}

# 1. Through the TUN: the app in the app namespace, loft's direct outbound.
CASES1="tun-reset-1MiB-paused-cpu tun-reset-1MiB-delivered tun-reset-stalled-paused-cpu
tun-reset-stalled-delivered tun-upload-remote-fin-v4 tun-upload-remote-fin-v6
tun-download-after-app-fin-v4 tun-download-after-app-fin-v6 loft-exit-clean-tun"
if require_loft "$(loft_config relay)" $CASES1; then
    reset_paused tun-reset-1MiB direct "$SRV4" $PORT_BASE "$RESET_BYTES"
    reset_paused tun-reset-stalled direct "$SRV6" $((PORT_BASE + 1)) "$STALL_BYTES"
    upload_fin tun-upload-remote-fin-v4 direct "$SRV4" $((PORT_BASE + 2))
    upload_fin tun-upload-remote-fin-v6 direct "$SRV6" $((PORT_BASE + 3))
    download_fin tun-download-after-app-fin-v4 direct "$SRV4" $((PORT_BASE + 4))
    download_fin tun-download-after-app-fin-v6 direct "$SRV6" $((PORT_BASE + 5))
    if loft_died; then fail loft-exit-clean-tun "loft died during the cases"
    else loft_stop_clean loft-exit-clean-tun; fi
fi

# 2. Through SOCKS5 on loopback (no TUN).
cat >"$T_DIR/s5.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$S5_PORT, max-clients: 128 }
bridge: off
default: direct
limits: { max-flows: 16384, connect-timeout: 10s, tcp-idle-timeout: 2h, udp-idle-timeout: 60s }
EOF
CASES2="socks5-reset-1MiB-paused-cpu socks5-reset-1MiB-delivered socks5-reset-stalled-paused-cpu
socks5-reset-stalled-delivered socks5-upload-remote-fin socks5-download-after-app-fin
loft-exit-clean-socks5"
if loft_start_host "$T_DIR/s5.yaml" "$T_DIR/loft-s5.log"; then
    reset_paused socks5-reset-1MiB "$S5_PORT" "$SRV4" $((PORT_BASE + 6)) "$RESET_BYTES"
    reset_paused socks5-reset-stalled "$S5_PORT" "$SRV4" $((PORT_BASE + 7)) "$STALL_BYTES"
    upload_fin socks5-upload-remote-fin "$S5_PORT" "$SRV4" $((PORT_BASE + 8))
    download_fin socks5-download-after-app-fin "$S5_PORT" "$SRV4" $((PORT_BASE + 9))
    if loft_died; then
        fail loft-exit-clean-socks5 "loft died during the cases"
    elif loft_stop TERM; then
        pass loft-exit-clean-socks5
    else
        fail loft-exit-clean-socks5 "loft exit status $LOFT_RC after SIGTERM: $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
    fi
else
    for c in $CASES2; do fail "$c" "loft did not start"; done
fi
finish
