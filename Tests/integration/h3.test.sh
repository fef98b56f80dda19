#!/usr/bin/env bash
# The h3 carrier end to end (root, namespaces): app namespace → TUN → loft → h3 carrier (QUIC
# v1 with ALPN h3; the session in the body of an extended CONNECT `:protocol loft` on the first
# request stream, each TCP flow in the body of an extended CONNECT `loft-flow` on a request
# stream of its own, UDP associations' DGRAMs on the session stream) → loft-front on 127.0.0.1
# (UDP, the TCP listener's port number, serving quic and h3 by ALPN) → the srv namespace.
# The session's STATUS on the TUN, 50 MiB down and up over IPv4 and IPv6 (SHA-256 on both
# ends), 100 concurrent transfers each on its own request stream, DNS, then loft-front killed
# with SIGKILL and restarted (RESUME: same instance, same overlay address), `loft path-changed`
# in the middle of a 50 MiB download (migrated, intact, no RESUME), and a quic holder on the
# same UDP port (ALPN loft) beside it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

echo "carriers: [quic, h3]" >>"$T_DIR/front.yaml"
if ! front_start; then
    fail front-start "loft-front did not start"
    finish
fi

LOFT_CFG=$(holder_config holder-h3 h3)
CASES="h3-session-up h3-download-v4-50MiB h3-download-v6-50MiB h3-upload-v4-50MiB h3-upload-v6-50MiB
h3-concurrent-100 h3-flows-on-own-streams h3-dns-v4 h3-dns-v6 h3-resume-after-front-kill h3-resume-same-overlay
h3-transfer-after-resume h3-download-across-migration h3-path-changed-migrates h3-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    if wait_state up 15; then
        a4=$(tun_addr4); r=$(ip -n "$APP_NS" route show default)
        if [[ $a4 == 198.18.64.* && $r == *"via 198.18.64.1"* ]] && [[ $(field 'o["detail"]') == "h3 QUICv1 TLSv1.3 "*"alpn=h3"* ]]; then
            pass h3-session-up; note "h3: overlay $a4, $r; $(field 'o["detail"]')"
        else
            fail h3-session-up "TUN not set from STATUS: addr $a4, route '$r', detail $(field 'o["detail"]')"
        fi
    else
        fail h3-session-up "outbound not up: state $(field 'o["state"]'), $(field 'o["detail"]')"
    fi
    download h3-download-v4-50MiB "http://$SRV4/big"
    download h3-download-v6-50MiB "http://[$SRV6]/big"
    upload h3-upload-v4-50MiB "$SRV4"
    upload h3-upload-v6-50MiB "$SRV6"
    f0=$(field 'c["flow-streams"]')
    concurrent h3-concurrent-100 100
    f1=$(field 'c["flow-streams"]')
    if [ $((f1 - f0)) -ge 100 ]; then pass h3-flows-on-own-streams; note "TCP flows on request streams of their own: $f0 -> $f1"
    else fail h3-flows-on-own-streams "flow-streams $f0 -> $f1 over 100 transfers"; fi
    dns h3-dns-v4 "$SRV4" A "$DNS_A"
    dns h3-dns-v6 "$SRV6" AAAA "$DNS_AAAA"

    id0=$(instance); a0=$(tun_addr4)
    front_kill
    wait_state down 10 || note "state after kill: $(field 'o["state"]')"
    front_start
    if wait_state up 20; then
        id1=$(instance); a1=$(tun_addr4); res=$(field 'c["resumes"]')
        if [ "$id1" = "$id0" ] && [ "${res:-0}" -ge 1 ]; then pass h3-resume-after-front-kill
        else fail h3-resume-after-front-kill "instance $id0 -> $id1, resumes $res"; fi
        if [ "$a1" = "$a0" ]; then pass h3-resume-same-overlay; else fail h3-resume-same-overlay "address $a0 -> $a1"; fi
    else
        fail h3-resume-after-front-kill "not up again after the restart: $(field 'o["detail"]')"
        fail h3-resume-same-overlay "not up"
    fi
    download h3-transfer-after-resume "http://$SRV4/big"

    # `loft path-changed` in the middle of a 50 MiB download: the QUIC connection under HTTP/3
    # migrates to a new socket, the session's and the download's request streams carry on.
    r0=$(field 'c["resumes"]'); l0=$(field 'c["carrier-losses"]'); m0=$(field 'c["migrations"]')
    ( sleep 1; "$LOFT_BIN" path-changed -c "$LOFT_CFG" >/dev/null 2>&1 ) &
    PC=$!
    download h3-download-across-migration "http://$SRV4/big" --limit-rate 25M
    wait "$PC" 2>/dev/null
    m1=$(field 'c["migrations"]')
    if [ "$m1" = $((m0 + 1)) ] && [ "$(field 'c["resumes"]')" = "$r0" ] && [ "$(field 'c["carrier-losses"]')" = "$l0" ] \
        && [ "$(field 'o["state"]')" = up ]; then
        pass h3-path-changed-migrates; note "path-changed: migrations $m0 -> $m1, resumes $r0, carrier-losses $l0"
    else
        fail h3-path-changed-migrates "migrations $m0 -> $m1, resumes $r0 -> $(field 'c["resumes"]'), losses $l0 -> $(field 'c["carrier-losses"]'), state $(field 'o["state"]')"
    fi
    loft_stop_clean h3-exit-clean
fi

# --- the same UDP port serves quic (ALPN loft) beside h3 ------------------------------------
LOFT_CFG=$(holder_config holder-quic quic)
CASES="quic-beside-h3 quic-beside-h3-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    if wait_state up 15 && in_app curl -gsf --max-time 10 -o /dev/null "http://$SRV4/index.html" \
        && [[ $(field 'o["detail"]') == *"alpn=loft"* ]]; then pass quic-beside-h3
    else fail quic-beside-h3 "state $(field 'o["state"]'), $(field 'o["detail"]')"; fi
    loft_stop_clean quic-beside-h3-exit-clean
fi

front_kill
finish
