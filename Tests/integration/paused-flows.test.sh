#!/usr/bin/env bash
# Many flows paused by their apps: 500 TUN flows through direct to a server that speaks first
# and sends as fast as it can, while the app never reads. Every splice is paused both ways;
# loft must sit idle (issue 28, 10: a paused flag left set since the dial made the pause a
# no-op, epoll reported the direct sockets readable on every turn, loft at 100 % of a core).
#   paused-flows-idle      loft's CPU over 3 s with the 500 flows open and paused: < 15 % of a core
#   paused-flows-served    a new small request meanwhile is answered (its time printed; < 1 s)
#   paused-flows-resume    the flows read again: each gets 256 KiB more of the server's pattern
#   loft-exit-clean
# Bounded: about 20 s.
. "$(dirname "$0")/lib.sh"

N=${PAUSED_FLOWS:-500}
CASES="paused-flows-idle paused-flows-served paused-flows-resume loft-exit-clean"

topo_up
make_files 1
start_nginx 1 8192

# The server: on accept it writes a repeating 0..250 pattern until the socket is full, and
# again whenever it is writable; at most 60 s.
cat >"$T_DIR/talker.py" <<'EOF'
import selectors, socket, sys, time
sel = selectors.DefaultSelector()
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], 9100)); ls.listen(4096); ls.setblocking(False)
sel.register(ls, selectors.EVENT_READ)
chunk = bytes(i % 251 for i in range(251 * 256))
sent = {}
end = time.time() + 60
while time.time() < end:
    for key, _ in sel.select(1):
        s = key.fileobj
        if s is ls:
            try:
                c, _ = ls.accept()
            except BlockingIOError:
                continue
            c.setblocking(False)
            sent[c] = 0
            sel.register(c, selectors.EVENT_WRITE)
            continue
        try:
            off = sent[s] % 251
            n = s.send(chunk[off:] + chunk[:off])
            sent[s] += n
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            sel.unregister(s); s.close(); del sent[s]
EOF
bg_in "$SRV_NS" talker python3 "$T_DIR/talker.py" "$SRV4"
wait_listen "$SRV_NS" tcp 9100 || die "talker did not start"

CFG=$(loft_config paused)
if ! require_loft "$CFG" $CASES; then finish; fi

# The app: N connections that read nothing until told (SIGUSR1), then 256 KiB each, checked
# against the pattern; prints "opened N" and "resumed N ok".
cat >"$T_DIR/app.py" <<'EOF'
import signal, socket, sys, time
srv, n = sys.argv[1], int(sys.argv[2])
go = []
signal.signal(signal.SIGUSR1, lambda *a: go.append(1))
conns = []
for i in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect((srv, 9100))
    conns.append(s)
print("opened %d" % len(conns), flush=True)
end = time.time() + 40
while not go and time.time() < end:
    time.sleep(0.05)
good = 0
want = 256 * 1024
for s in conns:
    got = bytearray()
    try:
        while len(got) < want:
            d = s.recv(want - len(got))
            if not d: break
            got += d
    except OSError:
        pass
    # The pattern from the flow's first byte: byte k is k % 251.
    if len(got) == want and all(got[k] == k % 251 for k in range(0, want, 997)):
        good += 1
print("resumed %d ok" % good, flush=True)
EOF
ip netns exec "$APP_NS" python3 "$T_DIR/app.py" "$SRV4" "$N" >"$T_DIR/app.out" 2>&1 &
APP_PID=$!
T_PIDS+=($APP_PID); register_pid "$APP_PID"
for _ in $(seq 300); do grep -q '^opened' "$T_DIR/app.out" && break; sleep 0.1; done
note "app: $(head -1 "$T_DIR/app.out")"

sleep 2          # every flow has filled its buffers and paused
t0=$(cpu_ticks "$LOFT_PID"); s0=$(now_ms)
sleep 3
t1=$(cpu_ticks "$LOFT_PID"); s1=$(now_ms)
hz=$(getconf CLK_TCK)
pct=$(( (t1 - t0) * 1000 * 100 / hz / (s1 - s0) ))
note "loft with $N paused flows: $pct % of a core over $((s1 - s0)) ms"
if grep -q "^opened $N" "$T_DIR/app.out" && [ "$pct" -lt 15 ]; then pass paused-flows-idle
else fail paused-flows-idle "$(head -1 "$T_DIR/app.out"); loft at $pct % of a core with $N paused flows"; fi

r=$(in_app curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 5 "http://$SRV4/small")
code=${r% *}
ms=$(echo "${r#* }" | awk '{printf "%.1f", $1 * 1000}')
note "a small request beside them: $ms ms, HTTP $code"
if [ "$code" = 200 ] && awk -v m="$ms" 'BEGIN { exit !(m < 1000) }'; then pass paused-flows-served
else fail paused-flows-served "HTTP $code in ${ms:-?} ms"; fi

kill -USR1 "$APP_PID"
for _ in $(seq 300); do grep -q '^resumed' "$T_DIR/app.out" && break; sleep 0.1; done
note "app: $(tail -1 "$T_DIR/app.out")"
if grep -q "^resumed $N ok" "$T_DIR/app.out"; then pass paused-flows-resume
else fail paused-flows-resume "$(tail -1 "$T_DIR/app.out")"; fi
wait "$APP_PID" 2>/dev/null

loft_stop_clean loft-exit-clean
finish
