#!/usr/bin/env bash
# The h2 carrier end to end (root, namespaces): app namespace → TUN → loft → h2 carrier (TLS 1.3
# with ALPN h2, the session on one extended CONNECT stream, the test CA) → loft-front on
# 127.0.0.1 → the srv namespace. The session's STATUS on the TUN, 50 MiB down and up over IPv4
# and IPv6 (SHA-256 on both ends), 100 concurrent transfers, DNS over DGRAM, SOCKS5 through the
# holder. Then the faults over h2: loft-front killed with SIGKILL and restarted (RESUME: same
# instance, same overlay address), `loft path-changed` (RESUME), a front that stops answering
# (keepalive), `hold: true` (nothing leaks direct while down, traffic back once the front is),
# a wrong token (GOAWAY bad-token), a hostile h2 front (garbage, an absurd frame length, a PING
# flood, random session bytes: loft stays up and redials). The same front port serves ws at the
# same time (ALPN).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

if ! front_start; then
    fail front-start "loft-front did not start"
    finish
fi

# --- the whole data path over h2 --------------------------------------------------------------
for carrier in h2; do
    carrier_data_checks "$carrier" "h2 TLSv1.3 *alpn=h2*"
done

# --- resume: front killed and restarted, path-changed, default route change ----------------
MPORT=$((FRONT_PORT + 2))
LOFT_CFG=$(holder_config holder-resume h2)
CASES="resume-after-front-kill resume-same-overlay transfer-after-resume path-changed-resume
keepalive-dead-carrier resume-after-stall resume-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    resume_in_flight_checks

    stall_checks
    loft_stop_clean resume-exit-clean
fi

# --- hold: fail-closed while the session is down (holder-lib.sh) ---------------------------
hold_checks h2

# --- a wrong token: GOAWAY bad-token, one clear line on each side, loft keeps running ------
bad_token_checks h2

# --- a hostile h2 front -------------------------------------------------------------------
# A TLS server with ALPN h2 (the test certificate) that, connection by connection: sends random
# bytes; sends a valid SETTINGS (extended CONNECT allowed) and then a frame claiming 16 MiB; sends
# SETTINGS and 20000 PINGs without reading; answers the CONNECT with 200 and then sends DATA of
# random bytes on the stream. loft must stay up, redial with backoff, and say why.
GPORT=$((FRONT_PORT + 1))
cat >"$T_DIR/h2garbage.py" <<'EOF'
import os, socket, ssl, struct, sys, threading
port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key); ctx.set_alpn_protocols(["h2"])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(16)
def fr(t, fl, sid, p, n=None):
    return struct.pack("!I", len(p) if n is None else n)[1:] + bytes([t, fl]) + struct.pack("!I", sid) + p
settings = fr(4, 0, 0, struct.pack("!HI", 8, 1))
def serve(c, k):
    try:
        c = ctx.wrap_socket(c, server_side=True)
        c.settimeout(5)
        kind = k % 4
        if kind == 0:
            c.sendall(os.urandom(4096))
        elif kind == 1:
            c.sendall(settings + fr(0, 0, 1, b"", (1 << 24) - 1))
        elif kind == 2:
            c.sendall(settings + fr(6, 0, 0, b"12345678") * 20000)
        else:
            c.sendall(settings)
            got = b""
            while len(got) < 24 + 9:
                b = c.recv(65536)
                if not b: return
                got += b
            # :status 200 (static index 8) on stream 1, then random session bytes
            c.sendall(fr(1, 4, 1, b"\x88") + fr(0, 0, 1, os.urandom(3000)))
        c.recv(65536)
    except Exception:  # lint: ok: the test server's own connection ending
        pass
    finally:
        try: c.close()
        except Exception: pass  # lint: ok: closing the test server's socket
n = 0
while True:
    c, _ = srv.accept(); n += 1
    threading.Thread(target=serve, args=(c, n), daemon=True).start()
EOF
bg_root h2garbage python3 "$T_DIR/h2garbage.py" "$GPORT" "$T_DIR/pki/server.pem" "$T_DIR/pki/server.key"
wait_tcp "$GPORT" 5
LOFT_CFG=$(PORT=$GPORT holder_config holder-h2garbage h2)
CASES="hostile-h2-front-survived hostile-h2-front-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    ok=
    for _ in $(seq 300); do [ "$(field 'c["dials"]')" -ge 5 ] 2>/dev/null && { ok=1; break; }; sleep 0.1; done
    if [ -n "$ok" ] && ! loft_died && grep -q 'event=holder.down' "$LOFT_LOG" && [ "$(field 'o["state"]')" != up ]; then
        pass hostile-h2-front-survived; note "hostile h2 front: $(field 'c["dials"]') dials; last: $(field 'o["detail"]')"
    else
        fail hostile-h2-front-survived "dials $(field 'c["dials"]'), state $(field 'o["state"]'); $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
    fi
    grep -E 'holder\.(down|protocol-error)|carrier\.h2' "$LOFT_LOG" | sed 's/^ts=[^ ]* //' | sort | uniq -c | sort -rn | head -6 >"$T_DIR/h2garbage.events"
    loft_stop_clean hostile-h2-front-exit-clean
fi

# --- the same port serves ws beside h2 (ALPN http/1.1) --------------------------------------
beside_check ws h2 http/1.1

front_kill
finish
