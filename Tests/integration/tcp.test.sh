#!/usr/bin/env bash
# TCP edge cases: a closed port is refused fast; idle connections and tcp-idle-timeout.
. "$(dirname "$0")/lib.sh"

topo_up
start_echo

# idle.py HOST PORT IDLE kept|closed: echo a line, stay idle IDLE seconds, then
#   kept:   the connection must still echo;
#   closed: the connection must have been closed (FIN or RST) by then.
cat >"$T_DIR/idle.py" <<'EOF2'
import select, socket, sys, time
host, port, idle, want = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(5)
s.connect((host, port))
s.sendall(b"first\n")
if s.recv(100) != b"first\n":
    print("no echo before idling"); sys.exit(1)
t0 = time.time()
closed_at = None
try:
    r, _, _ = select.select([s], [], [], idle)     # idle: send nothing, watch for a close
    if r:
        closed_at = time.time() - t0
        data = s.recv(100)
        if data:
            print("unexpected data while idle: %r" % data); sys.exit(1)
except OSError:
    closed_at = time.time() - t0
if closed_at is None:
    time.sleep(max(0.0, idle - (time.time() - t0)))
    try:
        s.sendall(b"second\n")
        data = s.recv(100)
        if data == b"second\n":
            if want == "kept":
                print("kept after %.1f s idle" % idle); sys.exit(0)
            print("still open after %.1f s idle" % idle); sys.exit(1)
        closed_at = time.time() - t0
    except socket.timeout:
        print("no echo and no close after %.1f s idle" % idle); sys.exit(1)
    except OSError as e:
        closed_at = time.time() - t0
if want == "closed":
    print("closed after %.1f s idle" % closed_at); sys.exit(0)
print("closed after %.1f s idle, wanted kept" % closed_at); sys.exit(1)
EOF2

refused() {         # refused NAME URL
    local name=$1 url=$2 t0 ms rc
    t0=$(now_ms)
    in_app curl -gv --max-time 10 -o /dev/null "$url" >"$T_DIR/refused.out" 2>&1
    rc=$?
    ms=$(( $(now_ms) - t0 ))
    if [ $rc -ne 7 ]; then
        fail "$name" "curl exit $rc (want 7) after $ms ms: $(grep -m1 -i 'connect\|reset\|fail' "$T_DIR/refused.out")"
    elif ! grep -q 'Connection refused' "$T_DIR/refused.out"; then
        fail "$name" "no 'Connection refused': $(grep -m1 -i 'connect' "$T_DIR/refused.out")"
    elif [ $ms -ge 2000 ]; then
        fail "$name" "refused only after $ms ms (want < 2000)"
    else
        pass "$name"; note "$name: refused in $ms ms"
    fi
}

idle() {            # idle NAME HOST SECONDS kept|closed
    local name=$1 out
    out=$(in_app timeout 30 python3 "$T_DIR/idle.py" "$2" 9001 "$3" "$4" 2>&1)
    if [ $? -eq 0 ]; then pass "$name"; note "$name: $out"; else fail "$name" "$out"; fi
}

# 1: default limits (tcp-idle-timeout 2h).
CASES1="refused-v4 refused-v6 idle-6s-kept-default-timeout loft-exit-clean-1"
if require_loft "$(loft_config tcp1)" $CASES1; then
    refused refused-v4 "http://$SRV4:9/"
    refused refused-v6 "http://[$SRV6]:9/"
    idle idle-6s-kept-default-timeout "$SRV4" 6 kept
    loft_stop_clean loft-exit-clean-1
fi

# 2: tcp-idle-timeout 3s: 1.5 s idle is kept, 6 s idle is closed by loft.
CASES2="idle-1.5s-kept-v4 idle-1.5s-kept-v6 idle-6s-closed-v4 idle-6s-closed-v6 loft-exit-clean-2"
if require_loft "$(loft_config tcp2 idle=3s)" $CASES2; then
    idle idle-1.5s-kept-v4 "$SRV4" 1.5 kept
    idle idle-1.5s-kept-v6 "$SRV6" 1.5 kept
    idle idle-6s-closed-v4 "$SRV4" 6 closed
    idle idle-6s-closed-v6 "$SRV6" 6 closed
    loft_stop_clean loft-exit-clean-2
fi
finish
