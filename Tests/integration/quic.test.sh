#!/usr/bin/env bash
# The quic carrier end to end (root, namespaces): app namespace → TUN → loft → quic carrier
# (QUIC v1, TLS 1.3 with ALPN loft, the test CA; the session on the connection's first
# bidirectional stream, each TCP flow on a QUIC stream of its own) → loft-front on 127.0.0.1 (UDP, the TCP listener's port number) → the
# srv namespace. The session's STATUS on the TUN, 50 MiB down and up over IPv4 and IPv6
# (SHA-256 on both ends), 100 concurrent transfers, DNS (its datagrams as QUIC DATAGRAM frames), then loft-front killed with SIGKILL
# and restarted (RESUME: same instance, same overlay address), `loft path-changed` in the
# middle of a 50 MiB download (the connection migrates to a new socket: the download completes
# intact, migrations = 1, no RESUME), `hold: true` over quic (nothing leaks while the front is
# down, traffic back once it is), and the same front port still serving h2 over TCP.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

echo "carriers: [h2, quic]" >>"$T_DIR/front.yaml"
if ! front_start; then
    fail front-start "loft-front did not start"
    finish
fi
if ss -Huln "sport = :$FRONT_PORT" | grep -q .; then pass front-quic-udp-listener
else fail front-quic-udp-listener "no UDP socket on :$FRONT_PORT"; fi

carrier=quic
LOFT_CFG=$(holder_config holder-quic quic)
CASES="quic-session-up quic-download-v4-50MiB quic-download-v6-50MiB quic-upload-v4-50MiB quic-upload-v6-50MiB
quic-concurrent-100 quic-flows-on-own-streams quic-dns-v4 quic-dns-v6 quic-dns-in-datagram-frames quic-resume-after-front-kill quic-resume-same-overlay
quic-transfer-after-resume quic-download-across-migration quic-path-changed-migrates quic-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    session_up_check quic- "quic QUICv1 TLSv1.3 *alpn=loft*" 1400
    data_checks quic- "QUIC streams"
    # Ten DNS queries from one UDP socket (one association): after the first (which goes on the
    # session stream behind the association's OPEN) every DGRAM is a QUIC DATAGRAM frame.
    d0=$(field 'c["datagram-frames-out"]'); i0=$(field 'c["datagram-frames-in"]')
    answers=$(in_app timeout 20 python3 - "$SRV4" "$DNS_NAME" <<'PYEOF'
import socket, struct, sys
srv, name = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
got = 0
for i in range(10):
    q = struct.pack("!HHHHHH", 0x4000 + i, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
    for _ in range(3):
        s.sendto(q, (srv, 53))
        try:
            r, _ = s.recvfrom(4096)
        except socket.timeout:
            continue
        if r[:2] == q[:2] and struct.unpack("!H", r[6:8])[0] >= 1:
            got += 1
            break
print(got)
PYEOF
)
    dout=$(( $(field 'c["datagram-frames-out"]') - d0 )); din=$(( $(field 'c["datagram-frames-in"]') - i0 ))
    if [ "$answers" = 10 ] && [ "$dout" -ge 9 ] && [ "$din" -ge 10 ]; then pass quic-dns-in-datagram-frames; note "10 DNS answers; QUIC DATAGRAM frames: $dout out, $din in"
    else fail quic-dns-in-datagram-frames "answers $answers, datagram-frames-out +$dout, datagram-frames-in +$din"; fi

    resume_checks quic-
    migration_checks quic- "$A0"
    loft_stop_clean quic-exit-clean
fi

# --- hold: fail-closed while the quic session is down (holder-lib.sh) ----------------------
hold_checks quic quic-

# --- the same port number serves h2 over TCP beside quic ------------------------------------
beside_check h2 quic h2
front_kill

# --- quic-max-packet: 8952-byte packets where the path carries them (loopback) -------------
# Both ends set it: the holder's detail names the size in use, 50 MiB go down and up intact.
# Then a path that does not carry them (the srv namespace's veth, MTU 1500): the dial fails at
# once, saying so, instead of losing every full packet.
cp "$T_DIR/front.yaml" "$T_DIR/front-9k.yaml"
echo "quic-max-packet: 8952" >>"$T_DIR/front-9k.yaml"
CASES="quic9k-session-up quic9k-download-v4-50MiB quic9k-upload-v4-50MiB quic9k-exit-clean"
if ! FRONT_CFG=$T_DIR/front-9k.yaml front_start; then
    for c in $CASES; do fail "$c" "loft-front with quic-max-packet did not start"; done
else
    LOFT_CFG=$(QUIC_MAX_PACKET=8952 holder_config holder-quic-9k quic)
    if require_loft "$LOFT_CFG" $CASES; then
        session_up_check quic9k- "quic QUICv1 TLSv1.3 *alpn=loft, packets 8952 B*" 1400
        download quic9k-download-v4-50MiB "http://$SRV4/big"
        upload quic9k-upload-v4-50MiB "$SRV4"
        loft_stop_clean quic9k-exit-clean
    fi
    front_kill
fi
LOFT_CFG=$(QUIC_MAX_PACKET=8952 FRONT_HOST=$SRV4 holder_config holder-quic-9k-small quic)
want="quic-max-packet 8952 does not fit the path to $SRV4:$FRONT_PORT (MTU 1500: at most 1472)"
if require_loft "$LOFT_CFG" quic9k-path-too-small quic9k-small-exit-clean; then
    d=
    for _ in $(seq 50); do d=$(field 'o["detail"]'); [[ $d == *"$want"* ]] && break; sleep 0.1; done
    if [[ $d == *"$want"* ]] && [ "$(field 'o["state"]')" != up ]; then pass quic9k-path-too-small; note "quic9k: $d"
    else fail quic9k-path-too-small "detail '$d', state $(field 'o["state"]') (want: $want)"; fi
    loft_stop_clean quic9k-small-exit-clean
fi
finish
