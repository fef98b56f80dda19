#!/usr/bin/env bash
# The h3 carrier end to end (root, namespaces): app namespace → TUN → loft → h3 carrier (QUIC
# v1 with ALPN h3; the session in the body of an extended CONNECT `:protocol loft` on the first
# request stream, each TCP flow in the body of an extended CONNECT `loft-flow` on a request
# stream of its own, UDP associations' DGRAMs on the session stream) → loft-front on 127.0.0.1
# (UDP, the TCP listener's port number, serving quic and h3 by ALPN) → the srv namespace.
# The session's STATUS on the TUN, 50 MiB down and up over IPv4 and IPv6 (SHA-256 on both
# ends), 100 concurrent transfers each on its own request stream, DNS, then loft-front killed
# with SIGKILL and restarted (RESUME: same instance, same overlay address), `loft path-changed`
# in the middle of a 50 MiB download (migrated, intact, no RESUME), `hold: true` over h3
# (nothing leaks while the front is down, traffic back once it is), and a quic holder on the
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
    session_up_check h3- "h3 QUICv1 TLSv1.3 *alpn=h3*"
    data_checks h3- "request streams"

    resume_checks h3-
    migration_checks h3-
    loft_stop_clean h3-exit-clean
fi

# --- hold: fail-closed while the h3 session is down (holder-lib.sh) ------------------------
hold_checks h3 h3-

# --- the same UDP port serves quic (ALPN loft) beside h3 ------------------------------------
beside_check quic h3 loft

front_kill
finish
