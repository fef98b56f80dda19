# The SSTP responder (Tests/interop/sstp_server.py) in the srv namespace, for sstp.test.sh and
# bench/sstp (sourced after lib.sh).
python3 -c 'import Crypto.Cipher.DES' 2>/dev/null || die "pycryptodome not installed (scripts/deps.sh)"

SPORT=8443
PPP_LOCAL=198.19.$NET.1          # the responder's end of the PPP link (its TUN), and its services
PPP_CLIENT=198.19.$NET.2         # what IPCP gives loft
STUN=sstp$T_ID                   # the responder's TUN in srv
USER_NAME=alice
PASSWORD='pa55 word'

PKI=$T_DIR/pki
sstp_pki() {        # a throwaway CA and the responder's certificate (sstp.loft.test) in $PKI
    mkdir -p "$PKI"
    (
        cd "$PKI" || exit 1
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
            -subj "/CN=loft test ca" -keyout ca.key -out ca.pem 2>/dev/null || exit 1
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=sstp.loft.test" \
            -keyout server.key -out server.csr 2>/dev/null || exit 1
        printf 'subjectAltName=DNS:sstp.loft.test\n' >san.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile san.ext -out server.pem 2>/dev/null || exit 1
        chmod 644 ./*
    ) || die "openssl: the test PKI"
}

RESP_LOG=
# start_responder AUTH [ALLOW]: the SSTP responder in srv, asking for AUTH (mschapv2 | pap);
# IPV6CP=1: offering IPV6CP (fe80::1 its end, fe80::2 loft's); TLS12=1: TLS 1.2 at most;
# RESP_EXTRA: more of its options (a hostile mode: --flood, --nak-all, --offer-address, --mru …).
start_responder() {
    bg_in "$SRV_NS" "sstp-$1" python3 "$LOFT_REPO/Tests/interop/sstp_server.py" --listen "$SRV4:$SPORT" \
        --cert "$PKI/server.pem" --key "$PKI/server.key" --user "$USER_NAME" --password "$PASSWORD" \
        --auth "$1" --allow "${2:-mschapv2,pap}" --tun "$STUN" --local "$PPP_LOCAL" \
        --client-address "${CLIENT_ADDRESS:-$PPP_CLIENT}" --dns "$PPP_LOCAL" ${IPV6CP:+--ipv6cp} ${TLS12:+--tls12} ${RESP_EXTRA:-}
    RESP_PID=$LAST_PID
    RESP_LOG=$T_DIR/sstp-$1.log
    wait_listen "$SRV_NS" tcp $SPORT || die "sstp responder did not start: $(tail -3 "$RESP_LOG")"
}
stop_responder() { kill_pid "$RESP_PID"; }

