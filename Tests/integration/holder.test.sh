#!/usr/bin/env bash
# The holder end to end (root, namespaces): app namespace → TUN → loft → ws or get carrier
# (TLS 1.3, the test CA) → loft-front on 127.0.0.1 → the srv namespace. Per carrier: the
# session's STATUS on the TUN, 50 MiB down and up over IPv4 and IPv6 (SHA-256 on both ends),
# 100 concurrent transfers, DNS over DGRAM. Then the faults: loft-front killed with SIGKILL
# and restarted (RESUME: same instance, same overlay address), `loft path-changed` and a
# default-route change (RESUME), `hold: true` (nothing leaks direct while down: counters and a
# capture in srv; traffic flows again once the front is back), a wrong token (GOAWAY, one clear
# log line), and a front that sends garbage (loft stays up and redials). A front restarted
# with another pool and MTU: the TUN takes the new overlay and loft starts no process for it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

if ! front_start; then
    fail front-start "loft-front did not start"
    finish
fi

# --- both carriers: the whole data path ------------------------------------------------------
for carrier in ws get; do
    carrier_data_checks "$carrier" '*'
done

# --- resume: front killed and restarted, path-changed, default route change ----------------
MPORT=$((FRONT_PORT + 2))
LOFT_CFG=$(holder_config holder-resume ws "metrics: 127.0.0.1:$MPORT")
CASES="resume-after-front-kill resume-same-overlay transfer-after-resume path-changed-resume route-change-resume
keepalive-dead-carrier resume-after-stall metrics-holder-counters resume-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    resume_in_flight_checks

    # A default route added and removed in the main table (metric 4242 via the test host, so
    # an existing default route keeps precedence): one path change, one RESUME.
    r0=$(field 'c["resumes"]'); p0=$(field 'c["path-changes"]')
    ip route add default via "$SRV4" metric 4242 2>/dev/null && sleep 0.3 && ip route del default via "$SRV4" metric 4242
    ok=
    for _ in $(seq 50); do
        [ "$(field 'c["path-changes"]')" -gt "$p0" ] && [ "$(field 'o["state"]')" = up ] && [ "$(field 'c["resumes"]')" -gt "$r0" ] && { ok=1; break; }
        sleep 0.1
    done
    if [ -n "$ok" ]; then pass route-change-resume
    else fail route-change-resume "path-changes $p0 -> $(field 'c["path-changes"]'), resumes $r0 -> $(field 'c["resumes"]')"; fi

    stall_checks
    # The same counters over /metrics, read with the Prometheus client library's parser.
    want=$(field 'c["resumes"]')
    got=$(curl -s --max-time 5 "http://127.0.0.1:$MPORT/metrics" | python3 -c '
import sys
from prometheus_client.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    for s in f.samples:
        if s.name.startswith("loft_outbound_events") and s.labels.get("outbound") == "home" and s.labels.get("name") == "resumes":
            print(int(s.value))' 2>&1)
    if [ -n "$want" ] && [ "$got" = "$want" ] && [ "$want" -ge 3 ]; then pass metrics-holder-counters
    else fail metrics-holder-counters "resumes: metrics '$got', status '$want'"; fi
    loft_stop_clean resume-exit-clean
fi

# --- a different overlay: the front restarted with another pool, MTU and state file --------
# The new front does not know the instance (GOAWAY unknown-instance), so the HELLO that follows
# gets an address from its pool: the TUN takes the new address, MTU and default routes and the
# old addresses come off, over rtnetlink. `ip` and `sysctl` on loft's PATH are wrappers that
# log every call loft itself makes: loft makes none, neither at start-up (the namespace too is
# made over rtnetlink and a bind mount) nor for the STATUS; the wrappers are shown to log a
# process named loft that does run `ip` (a copy of sh under that name).
sed -e 's|198.18.64.0/24|198.18.65.0/24|; s|fd00:64::/64|fd00:65::/64|; s|^mtu: 1400|mtu: 1380|; s|front.state|front2.state|' \
    "$T_DIR/front.yaml" >"$T_DIR/front2.yaml"
SPY=$T_DIR/spy
mkdir -p "$SPY"
for tool in ip sysctl; do
    cat >"$SPY/$tool" <<EOF
#!/bin/sh
[ "\$(cat /proc/\$PPID/comm 2>/dev/null)" = loft ] && echo "$tool \$*" >>"$T_DIR/spawned"
exec $(command -v $tool) "\$@"
EOF
    chmod 755 "$SPY/$tool"
done
: >"$T_DIR/spawned"
cp "$(command -v sh)" "$T_DIR/loft"
PATH=$SPY:$PATH "$T_DIR/loft" -c 'ip -V >/dev/null; true'
spy_works=$(grep -c '^ip -V' "$T_DIR/spawned")
: >"$T_DIR/spawned"
LOFT_CFG=$(holder_config holder-overlay ws)
CASES="overlay-change-applied overlay-change-old-gone overlay-change-no-process overlay-change-traffic overlay-change-exit-clean"
if PATH=$SPY:$PATH require_loft "$LOFT_CFG" $CASES; then
    wait_state up 15
    a0=$(tun_addr4); n0=$(wc -l <"$T_DIR/spawned")
    front_kill
    FRONT_CFG=$T_DIR/front2.yaml front_start
    ok=
    for _ in $(seq 200); do [[ $(tun_addr4) == 198.18.65.* ]] && { ok=1; break; }; sleep 0.1; done
    sleep 0.3
    a1=$(ip -n "$APP_NS" -4 -o addr show dev "$TUN_NAME" | awk '{print $4}' | tr '\n' ' ')
    v6=$(ip -n "$APP_NS" -6 -o addr show dev "$TUN_NAME" scope global | awk '{print $4}' | tr '\n' ' ')
    r4=$(ip -n "$APP_NS" route show default); r6=$(ip -n "$APP_NS" -6 route show default)
    mtu=$(ip -n "$APP_NS" link show "$TUN_NAME" | grep -o 'mtu [0-9]*')
    if [ -n "$ok" ] && [[ $r4 == "default via 198.18.65.1 dev $TUN_NAME onlink"* && $r6 == "default via fd00:65::1 dev $TUN_NAME"*onlink* \
        && $v6 == fd00:65::* && $mtu == "mtu 1380" ]] && grep -q 'event=tun.overlay .*mtu=1380' "$LOFT_LOG"; then
        pass overlay-change-applied; note "overlay $a0 -> $a1 $v6, $mtu, $r4"
    else
        fail overlay-change-applied "addr '$a1' '$v6', routes '$r4' '$r6', $mtu: $(grep -E 'tun.overlay|holder.goaway' "$LOFT_LOG" | tail -2 | tr '\n' '|')"
    fi
    if [[ $a1 == 198.18.65.*/24" " && $v6 != *fd00:64::* ]] && ! grep -q 'tun.overlay.failed' "$LOFT_LOG"; then pass overlay-change-old-gone
    else fail overlay-change-old-gone "IPv4 '$a1' (was $a0), IPv6 '$v6'"; fi
    n1=$(wc -l <"$T_DIR/spawned")
    if [ "$spy_works" = 1 ] && [ "$n0" = 0 ] && [ "$n1" = 0 ]; then pass overlay-change-no-process
    else fail overlay-change-no-process "loft ran $n0 commands at start-up, $n1 after the new STATUS (the wrappers logged $spy_works of 1 for a process named loft): $(tr '\n' '|' <"$T_DIR/spawned")"; fi
    if in_app curl -gsf --max-time 10 -o /dev/null "http://$SRV4/index.html" && in_app curl -gsf --max-time 10 -o /dev/null "http://[$SRV6]/index.html"
    then pass overlay-change-traffic; else fail overlay-change-traffic "curl through the new overlay failed"; fi
    loft_stop_clean overlay-change-exit-clean
    front_kill
    front_start || note "loft-front did not start again"
fi

# --- loft itself restarted: with outbound.state-file the new process RESUMEs ---------------
# The front keeps a detached instance (loft sends no GOAWAY when it stops), so a HELLO would
# get the pool's next address; RESUME gets the same one.
LOFT_CFG=$(holder_config holder-restart ws)
sed -i "s|^    tls: .*|&\n    state-file: $T_DIR/home.state|" "$LOFT_CFG"
CASES="restart-state-file-written restart-resumes restart-same-overlay restart-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    wait_state up 15
    id0=$(instance); a0=$(tun_addr4)
    if [ "$(sed -n 2p "$T_DIR/home.state" 2>/dev/null)" = "$id0" ] && [ "$(stat -c %a "$T_DIR/home.state")" = 600 ]; then
        pass restart-state-file-written
    else
        fail restart-state-file-written "file: '$(tr '\n' '|' <"$T_DIR/home.state" 2>&1)', instance $id0"
    fi
    loft_stop TERM >/dev/null
    if loft_start "$LOFT_CFG" && wait_state up 15; then
        id1=$(instance); a1=$(tun_addr4); res=$(field 'c["resumes"]'); ses=$(field 'c["sessions"]')
        if [ "$id1" = "$id0" ] && [ "$res" = 1 ] && [ "$ses" = 0 ]; then pass restart-resumes
        else fail restart-resumes "instance $id0 -> $id1, resumes $res, sessions $ses"; fi
        if [ -n "$a0" ] && [ "$a1" = "$a0" ]; then pass restart-same-overlay; else fail restart-same-overlay "address $a0 -> $a1"; fi
        loft_stop_clean restart-exit-clean
    else
        fail restart-resumes "loft not up after its restart"; fail restart-same-overlay "not up"; fail restart-exit-clean "not up"
    fi
fi

# --- hold: fail-closed while the session is down (holder-lib.sh) ---------------------------
hold_checks ws

# --- a wrong token: GOAWAY bad-token, one clear line on each side, loft keeps running ------
bad_token_checks ws

# --- a front that sends garbage ----------------------------------------------------------
# A TLS server (the test certificate) that answers the WebSocket upgrade correctly and then
# sends binary messages of random bytes, and on every other connection garbage instead of HTTP.
GPORT=$((FRONT_PORT + 1))
cat >"$T_DIR/garbage.py" <<'EOF'
import base64, hashlib, os, socket, ssl, sys, threading
port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(16)
n = 0
def serve(c, k):
    try:
        c = ctx.wrap_socket(c, server_side=True)
        req = b""
        while b"\r\n\r\n" not in req and len(req) < 65536:
            b = c.recv(4096)
            if not b: return
            req += b
        if k % 2 == 1:
            c.sendall(os.urandom(4096)); return
        keyline = [l for l in req.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")]
        acc = base64.b64encode(hashlib.sha1(keyline[0].split(b":", 1)[1].strip() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        for _ in range(20):
            p = os.urandom(200)
            c.sendall(bytes([0x82, len(p) if len(p) < 126 else 126]) + (len(p).to_bytes(2, "big") if len(p) >= 126 else b"") + p)
        c.recv(65536)
    except Exception:  # lint: ok: the test server's own connection ending
        pass
    finally:
        try: c.close()
        except Exception: pass  # lint: ok: closing the test server's socket
while True:
    c, _ = srv.accept(); n += 1
    threading.Thread(target=serve, args=(c, n), daemon=True).start()
EOF
bg_root garbage python3 "$T_DIR/garbage.py" "$GPORT" "$T_DIR/pki/server.pem" "$T_DIR/pki/server.key"
wait_tcp "$GPORT" 5
LOFT_CFG=$(PORT=$GPORT holder_config holder-garbage ws)
CASES="garbage-front-survived garbage-front-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    ok=
    for _ in $(seq 100); do [ "$(field 'c["dials"]')" -ge 3 ] 2>/dev/null && { ok=1; break; }; sleep 0.1; done
    if [ -n "$ok" ] && ! loft_died && grep -q 'event=holder.down' "$LOFT_LOG"; then
        pass garbage-front-survived; note "garbage: $(field 'c["dials"]') dials; last: $(field 'o["detail"]')"
    else
        fail garbage-front-survived "dials $(field 'c["dials"]'); $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
    fi
    loft_stop_clean garbage-front-exit-clean
fi

front_kill
finish
