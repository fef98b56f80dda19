#!/usr/bin/env bash
# loft-front under a handshake flood: 300 TCP connections that never finish TLS, re-opened as
# the front closes them (at most 200 per second), for 8 s, from the same address as the
# holder. The holder is made to redial in the middle of it (`loft path-changed`) and must be
# back within seconds, not after the attack; a download through the session keeps going. Also
# random bytes after a TLS handshake, and a slow reader that never reads, cost nothing else.
#   front-redial-under-flood   the holder's new session is up within 3 s during the flood
#   front-download-under-flood a 20 MiB download through the session, intact, during the flood
#   front-garbage-after-tls    random bytes after TLS: the connection is closed, front up
#   front-absurd-ws-frame      a WebSocket frame claiming 2^62 bytes: that carrier ends, front up
#   front-evicts-counted       the front counted the handshakes it evicted
. "$(dirname "$0")/lib.sh"

FPORT=$((20000 + T_ID % 20000))
S5_PORT=$((FPORT + 1))
while ss -Htln "sport = :$S5_PORT" 2>/dev/null | grep -q .; do S5_PORT=$((S5_PORT + 1)); done
CASES="front-redial-under-flood front-download-under-flood front-garbage-after-tls front-absurd-ws-frame
front-evicts-counted"

topo_up
make_files 20
start_nginx 1 1024
bash "$(dirname "$0")/../interop/gen-certs.sh" "$T_DIR/pki" >/dev/null || die "test PKI"
BIG_SHA=$(sha_of "$T_DIR/www/big")

cat >"$T_DIR/front.yaml" <<EOF
listen: $SRV4:$FPORT
tls: { certificate: $T_DIR/pki/server.pem, key: $T_DIR/pki/server.key }
tokens: ["flood-test"]
pool: { ipv4: 198.18.64.0/24 }
keepalive: 2s
control: $T_DIR/front.sock
EOF
front_run "$T_DIR/front.yaml" "$SRV_NS" || { fail_all "loft-front did not start: $(tail -2 "$FRONT_LOG" | tr '\n' '|')" $CASES; finish; }

cat >"$T_DIR/loft.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$S5_PORT }
bridge: off
control: $T_DIR/loft.sock
outbounds:
  - { name: home, type: loft, server: "$SRV4:$FPORT", carrier: ws, token: flood-test,
      tls: { server-name: front.test, ca: $T_DIR/pki/ca.pem } }
default: home
EOF
loft_start_host "$T_DIR/loft.yaml" || { for c in $CASES; do fail "$c" "loft did not start"; done; finish; }

LOFT_CFG=$T_DIR/loft.yaml
wait_up() {     # wait_up SECONDS: until the holder is up; prints the milliseconds it took
    local t0 i
    t0=$(now_ms)
    for i in $(seq $(($1 * 20))); do
        [ "$(field 'o["state"]')" = up ] && { echo $(( $(now_ms) - t0 )); return 0; }
        sleep 0.05
    done
    echo never; return 1
}
wait_up 10 >/dev/null || { for c in $CASES; do fail "$c" "the holder never came up: $(tail -3 "$LOFT_LOG" | tr '\n' '|')"; done; finish; }

# The flood: 300 connections that send nothing, each re-opened when the front closes it.
cat >"$T_DIR/flood.py" <<'EOF'
import socket, sys, time, selectors
host, port, n, secs, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
sel = selectors.DefaultSelector()
opened, closed_by_front, end = 0, 0, time.time() + secs
budget, last = rate, time.time()
live = 0
while time.time() < end:
    now = time.time()
    budget = min(rate, budget + (now - last) * rate); last = now
    while live < n and budget >= 1:
        s = socket.socket(); s.setblocking(False)
        try: s.connect((host, port))
        except BlockingIOError: pass
        sel.register(s, selectors.EVENT_READ); live += 1; opened += 1; budget -= 1
    for key, _ in sel.select(timeout=0.02):
        try: d = key.fileobj.recv(4096)
        except OSError: d = b""
        if not d:
            sel.unregister(key.fileobj); key.fileobj.close(); live -= 1; closed_by_front += 1
print("%d connections opened, %d closed by the front, %d open at the end" % (opened, closed_by_front, live))
EOF
python3 "$T_DIR/flood.py" "$SRV4" "$FPORT" 300 8 200 >"$T_DIR/flood.out" 2>&1 &
FLOOD=$!
sleep 2

# A redial in the middle of the flood: it happened (the resumes counter grew) and the session
# is up again within 3 s. "up" alone would also read so when no redial was made at all.
r0=$(field 'c["resumes"]')
t0=$(now_ms); took=never
"$LOFT_BIN" path-changed -c "$T_DIR/loft.yaml" >/dev/null 2>&1
for _ in $(seq 120); do
    [ "$(field 'c["resumes"]')" -gt "${r0:-0}" ] 2>/dev/null && [ "$(field 'o["state"]')" = up ] && { took=$(( $(now_ms) - t0 )); break; }
    sleep 0.05
done
note "holder redialled during the flood: resumes $r0 -> $(field 'c["resumes"]'), up after ${took} ms"
if [ -n "$r0" ] && [ "$took" != never ] && [ "$took" -le 3000 ]; then pass front-redial-under-flood
else fail front-redial-under-flood "resumes $r0 -> $(field 'c["resumes"]'), up after $took ms (state $(field 'o["state"]')); front: $(tail -2 "$T_DIR/front.log" | tr '\n' '|')"; fi

t0=$(now_ms)
got=$(curl -sS --max-time 30 --socks5-hostname "127.0.0.1:$S5_PORT" "http://$SRV4/big" 2>"$T_DIR/curl.err" | sha256sum | cut -d' ' -f1)
dt=$(( $(now_ms) - t0 ))
note "20 MiB through the session during the flood: $dt ms"
if [ "$got" = "$BIG_SHA" ]; then pass front-download-under-flood; else fail front-download-under-flood "sha256 $got after $dt ms: $(tail -1 "$T_DIR/curl.err")"; fi
wait $FLOOD
note "flood: $(cat "$T_DIR/flood.out")"

# Random bytes after a completed TLS handshake: closed, and the front keeps serving.
g=$(python3 - "$SRV4" "$FPORT" "$T_DIR/pki/ca.pem" <<'EOF'
import socket, ssl, sys, os
ctx = ssl.create_default_context(cafile=sys.argv[3]); ctx.check_hostname = False
s = ctx.wrap_socket(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5), server_hostname="front.test")
s.sendall(os.urandom(4096))
d = b""
try:
    while len(d) < 65536:
        d2 = s.recv(4096)
        if not d2: break
        d += d2
    print("closed by the front after %d bytes %r" % (len(d), d[:40]) if len(d) < 65536 else "answered 64 KiB, not closed")
except TimeoutError:
    print("not closed within 5 s")         # a hung front: a timeout is no close
except (OSError, ssl.SSLError) as e:
    print("closed by the front: %s" % type(e).__name__)
EOF
)
note "garbage after TLS: $g"
if kill -0 "$FRONT_PID" 2>/dev/null && [ "$(field 'o["state"]')" = up ] && [[ $g == "closed by the front"* ]]; then pass front-garbage-after-tls
else fail front-garbage-after-tls "front alive: $(kill -0 "$FRONT_PID" 2>/dev/null && echo yes || echo no), holder $(field 'o["state"]'); $g"; fi

# A WebSocket frame claiming 2^62 bytes, then a trickle: the front ends that carrier (the
# session's first frame cannot be that long) and keeps serving.
w=$(python3 - "$SRV4" "$FPORT" "$T_DIR/pki/ca.pem" <<'EOF'
import socket, ssl, sys, os, base64, struct, time
ctx = ssl.create_default_context(cafile=sys.argv[3]); ctx.check_hostname = False
s = ctx.wrap_socket(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5), server_hostname="front.test")
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(("GET /loft HTTP/1.1\r\nHost: front.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % key).encode())
head = s.recv(4096)
if not head.startswith(b"HTTP/1.1 101"):
    print("no upgrade: %r" % head[:40]); sys.exit(0)
s.sendall(bytes([0x82, 0xFF]) + struct.pack("!Q", 1 << 62) + os.urandom(4) + os.urandom(1024))
t0 = time.time()
try:
    while True:
        d = s.recv(4096)
        if not d: break
        time.sleep(0.01); s.sendall(os.urandom(16))
    print("closed by the front after %.2f s" % (time.time() - t0))
except TimeoutError:
    print("not closed within 5 s (%.2f s)" % (time.time() - t0))   # a hung front: a timeout is no close
except (OSError, ssl.SSLError) as e:
    print("closed by the front after %.2f s (%s)" % (time.time() - t0, type(e).__name__))
EOF
)
note "a 2^62-byte WebSocket frame: $w"
if kill -0 "$FRONT_PID" 2>/dev/null && [ "$(field 'o["state"]')" = up ] && echo "$w" | grep -q "closed by the front"; then pass front-absurd-ws-frame
else fail front-absurd-ws-frame "front alive: $(kill -0 "$FRONT_PID" 2>/dev/null && echo yes || echo no), holder $(field 'o["state"]'); $w"; fi

ev=$(front_stat handshakes_evicted)
failed=$(front_stat handshakes_failed)
note "front: handshakes evicted $ev, failed $failed"
if [ "${ev:-0}" -ge 1 ]; then pass front-evicts-counted; else fail front-evicts-counted "handshakes_evicted '$ev'"; fi

loft_stop TERM >/dev/null
finish
