#!/usr/bin/env bash
# The sstp outbound against the test's own SSTP responder (Tests/interop/sstp_server.py: TLS,
# SSTP, PPP with MS-CHAPv2 or PAP, IPCP, the crypto binding checked with Python's own MD4, DES,
# SHA and HMAC), which routes the client's IP packets through a TUN in the srv namespace. From
# the app namespace through loft's TUN: the IPCP address on the TUN and the IPCP DNS in the
# namespace's resolv.conf, 50 MiB down and up with SHA-256, UDP, ping, a DNS lookup, 100
# concurrent flows, all as IP packets over PPP (packet mode, not lwIP); MS-CHAPv2 and PAP;
# a wrong password: one log line, redials with backoff, loft still running. SOCKS5 CONNECT
# routed to sstp (python-socks as the client): TCP that loft opens itself over the PPP link
# (lwIP's active open from the IPCP address), a download and an upload with SHA-256, a refused
# port reported as refused, UDP ASSOCIATE; a bridge peer's TCP and UDP routed to sstp the same way.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sstp-lib.sh"

topo_up
sstp_pki
S5_PORT=$((20000 + T_ID % 20000))
while ss -Htuln "sport = :$S5_PORT" 2>/dev/null | grep -q .; do S5_PORT=$((S5_PORT + 1)); done
# A bridge peer (as in bridge.test.sh): socat turns a TUN in its own namespace into a bridge
# client, whose flows loft routes to sstp like any others.
PEER_NS=loft-peer-$T_ID
PEER_TUN=lpeer$((T_ID % 100000))
EXT_PORT=$((S5_PORT + 1))      # after the SOCKS5 port (its UDP relay takes the same number)
while ss -Htuln "sport = :$EXT_PORT" 2>/dev/null | grep -q .; do EXT_PORT=$((EXT_PORT + 1)); done
PEER_PORT=$((EXT_PORT + 1))
while ss -Htuln "sport = :$PEER_PORT" 2>/dev/null | grep -q .; do PEER_PORT=$((PEER_PORT + 1)); done
. "$(dirname "$0")/bridge-peer.sh"

# udp_echo5 WORD: Python that sends "WORD 0".."WORD 4" to the UDP echo behind the link and
# prints how many came back unchanged from it.
udp_echo5() {
    cat <<PYEOF
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
ok = 0
for i in range(5):
    s.sendto(b'$1 %d' % i, ('$PPP_LOCAL', 9101))
    d, a = s.recvfrom(100)
    ok += d == b'$1 %d' % i and a == ('$PPP_LOCAL', 9101)
print(ok)
PYEOF
}

# Services behind the PPP link, in srv, on the responder's TUN address.
make_files 50
head -c $((4 * 1024 * 1024 + 12345)) /dev/urandom >"$T_DIR/www/s5"
# socks.py MODE HOST PORT [FILE]: through loft's SOCKS5 listener (python-socks): dl prints the
# SHA-256 of what arrives until EOF; ul sends FILE, half-closes, prints the reply.
cat >"$T_DIR/socks.py" <<'PYEOF'
import sys, hashlib, socket, struct
from python_socks.sync import Proxy
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "udp":   # UDP ASSOCIATE by hand (RFC 1928): 5 datagrams to host:port and back
    c = socket.create_connection(("127.0.0.1", int(sys.argv[5])), timeout=5)
    c.sendall(b"\x05\x01\x00"); assert c.recv(2) == b"\x05\x00"
    c.sendall(b"\x05\x03\x00\x01" + bytes(4) + bytes(2))
    r = c.recv(10)
    if r[1] != 0:
        print("udp associate reply", r[1]); sys.exit(0)
    relay = (socket.inet_ntoa(r[4:8]), struct.unpack("!H", r[8:10])[0])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
    ok, srcs = 0, set()
    for i in range(5):
        u.sendto(b"\x00\x00\x00\x01" + socket.inet_aton(host) + struct.pack("!H", port) + b"dgram %d" % i, relay)
        d, _ = u.recvfrom(2000)
        ok += d[10:] == b"dgram %d" % i and d[4:8] == socket.inet_aton(host) and d[8:10] == struct.pack("!H", port)
    print(ok); sys.exit(0)
proxy = Proxy.from_url("socks5://127.0.0.1:%s" % sys.argv[5], rdns=True)   # names go to loft as names
try:
    s = proxy.connect(dest_host=host, dest_port=port, timeout=10)
except Exception as e:     # printed, and judged by the caller: the SOCKS reply code, when there is one
    print("error", type(e).__name__, "reply=%s" % getattr(e, "error_code", None), e)
    sys.exit(0)
s.settimeout(30)
if mode == "ul":
    s.sendall(open(sys.argv[4], "rb").read())
    import socket
    s.shutdown(socket.SHUT_WR)
h, out = hashlib.sha256(), b""
while True:
    c = s.recv(65536)
    if not c:
        break
    h.update(c)
    out += c if mode == "ul" else b""
print(h.hexdigest() if mode == "dl" else out.decode().split()[0])
PYEOF
start_services() {
    bg_in "$SRV_NS" dl socat "TCP4-LISTEN:9100,bind=$PPP_LOCAL,fork,reuseaddr" "OPEN:$T_DIR/www/big,rdonly"
    bg_in "$SRV_NS" sink socat -d -d -t 30 "TCP4-LISTEN:9000,bind=$PPP_LOCAL,fork,reuseaddr" EXEC:sha256sum
    SINK_LOG=$T_DIR/sink.log
    bg_in "$SRV_NS" s5dl socat "TCP4-LISTEN:9103,bind=$PPP_LOCAL,fork,reuseaddr" "OPEN:$T_DIR/www/s5,rdonly"
    bg_in "$SRV_NS" small socat "TCP4-LISTEN:9102,bind=$PPP_LOCAL,fork,reuseaddr,backlog=256" "OPEN:$T_DIR/www/f0,rdonly"
    # IPv6 over the link (IPV6CP): the responder's link-local end, fe80::1 on its TUN.
    bg_in "$SRV_NS" v6dl socat "TCP6-LISTEN:9104,ipv6only=1,fork,reuseaddr" "OPEN:$T_DIR/www/f0,rdonly"
    bg_in "$SRV_NS" uecho socat "UDP4-RECVFROM:9101,bind=$PPP_LOCAL,fork" PIPE
    bg_in "$SRV_NS" dnsmasq dnsmasq -k --conf-file=/dev/null --no-resolv --no-hosts --no-poll \
        --bind-interfaces --listen-address="$PPP_LOCAL" --port=53 --pid-file= --user=root \
        --host-record="probe.loft.test,198.19.$NET.77" --host-record="svc.loft.test,$PPP_LOCAL" --log-queries --log-facility=-
    wait_listen "$SRV_NS" tcp 9100 && wait_listen "$SRV_NS" udp 53 || die "services behind the link did not start"
}

# sstp_config NAME AUTH-LIST PASSWORD [OUTBOUND-LINE [TOP-LINE]]
sstp_config() {
    cat >"$T_DIR/$1.yaml" <<EOF
log: info
tun:
  name: $TUN_NAME
  netns: $APP_NS
  ipv4: 198.18.0.1/30
  ipv6: fd00:18::1/126
  route-all: true
socks5: { listen: 127.0.0.1:$S5_PORT }
bridge: { peer-port: $PEER_PORT, extension-port: $EXT_PORT, mtu: 1500 }
outbounds:
  - name: corp
    type: sstp
    server: $SRV4:$SPORT
    user: $USER_NAME
    password: "$3"
    tls: { server-name: sstp.loft.test, ca: $PKI/ca.pem }
    auth: $2
${4:+    $4}
limits: { max-flows: 16384, connect-timeout: 10s, tcp-idle-timeout: 2h, udp-idle-timeout: 60s }
default: corp
control: $T_DIR/$1.sock
${5:-}
EOF
    echo "$T_DIR/$1.yaml"
}

# echo_direct: one line through the echo service on srv's own address (the direct path).
echo_direct() { in_app timeout 3 socat -t 1 - "TCP4:$SRV4:9001,connect-timeout=1" <<<"direct-$1" 2>/dev/null; }

# --- MS-CHAPv2: the data path -------------------------------------------------------------------
IPV6CP=1 start_responder mschapv2
start_services
start_echo          # on srv's own address: reached by the direct path only
CASES="mschapv2-up tun-address resolv-conf binding-checked download-50m upload-50m udp ping dns ipv6-link-local ipv6-nd ipv6-ping ipv6-tcp flows-100 packet-mode
socks5-download socks5-upload socks5-refused socks5-name socks5-name-unknown socks5-udp socks5-counted bridge-tcp bridge-udp server-killed fallback-direct
redial-new-address socks5-after-redial path-changed stop-clean"
if require_loft "$(sstp_config chap '[mschapv2, pap]' "$PASSWORD")" $CASES; then
    if wait_log "$LOFT_LOG" 'event=sstp.up' 15; then pass mschapv2-up
    else fail mschapv2-up "no sstp.up: $(grep sstp "$LOFT_LOG" | tail -3 | tr '\n' '|') / $(tail -3 "$RESP_LOG" | tr '\n' '|')"; fi
    sleep 0.5
    a=$(ip -n "$APP_NS" -4 addr show dev "$TUN_NAME")
    if echo "$a" | grep -q "inet $PPP_CLIENT/32"; then pass tun-address; else fail tun-address "$(echo "$a" | tr '\n' '|')"; fi
    if grep -q "^nameserver $PPP_LOCAL" "/etc/netns/$APP_NS/resolv.conf" 2>/dev/null; then pass resolv-conf
    else fail resolv-conf "$(cat "/etc/netns/$APP_NS/resolv.conf" 2>&1 | tr '\n' '|')"; fi
    if grep -q '^binding-ok' "$RESP_LOG"; then pass binding-checked; else fail binding-checked "$(tail -3 "$RESP_LOG" | tr '\n' '|')"; fi

    want=$(sha_of "$T_DIR/www/big")
    t0=$(now_ms)
    got=$(in_app timeout 60 socat -u "TCP4:$PPP_LOCAL:9100" - | sha256sum | cut -d' ' -f1)
    t1=$(now_ms)
    if [ "$got" = "$want" ]; then pass download-50m; note "50 MiB down in $((t1 - t0)) ms"
    else fail download-50m "sha256 $got, want $want"; fi
    t0=$(now_ms)
    got=$(in_app timeout 60 socat -t 30 - "TCP4:$PPP_LOCAL:9000" <"$T_DIR/www/big" | cut -d' ' -f1)
    t1=$(now_ms)
    if [ "$got" = "$want" ]; then pass upload-50m; note "50 MiB up in $((t1 - t0)) ms"
    else fail upload-50m "sha256 $got, want $want; loft: $(grep -v 'event=ready' "$LOFT_LOG" | tail -4 | tr '\n' '|'); responder: $(tail -4 "$RESP_LOG" | tr '\n' '|'); status: $("$LOFT_BIN" status -c "$T_DIR/chap.yaml" 2>&1 | tr '\n' '|')"; fi

    r=$(py_in_app "$(udp_echo5 dgram)" 2>&1)
    if [ "$r" = 5 ]; then pass udp; else fail udp "$r"; fi
    if in_app ping -c 3 -i 0.2 -W 2 "$PPP_LOCAL" >"$T_DIR/ping.out" 2>&1; then pass ping
    else fail ping "$(tail -2 "$T_DIR/ping.out" | tr '\n' '|')"; fi
    r=$(in_app getent hosts probe.loft.test 2>&1)
    if echo "$r" | grep -q "^198.19.$NET.77 "; then pass dns; else fail dns "getent: $r"; fi
    # IPV6CP: the responder Naks loft's first interface identifier with ::2, so loft's
    # link-local is fe80::2 (on the TUN beside its other addresses); IPv6 packets to the
    # responder's fe80::1 pass over PPP (protocol 0x0057): ping, and a TCP download.
    for i in $(seq 30); do grep -q '^up6' "$RESP_LOG" && break; sleep 0.1; done
    sleep 0.3
    a=$(ip -n "$APP_NS" -6 addr show dev "$TUN_NAME")
    if echo "$a" | grep -q "inet6 fe80::2/64" && grep -q 'ipv6=fe80::2' "$LOFT_LOG"; then pass ipv6-link-local
    else fail ipv6-link-local "$(echo "$a" | grep inet6 | tr '\n' '|') / $(grep -E 'sstp.(up|link)' "$LOFT_LOG" | tail -2 | tr '\n' '|') / $(tail -2 "$RESP_LOG" | tr '\n' '|')"; fi
    # The responder, like a host behind SoftEther's hub, sends IPv6 to loft only after a
    # Neighbor Solicitation for fe80::2 (to ff02::1:ff00:2) got a valid Advertisement: loft's
    # link answers it itself (the TUN's kernel never sees ND).
    if wait_log "$RESP_LOG" '^nd-ok' 3; then pass ipv6-nd
    else fail ipv6-nd "$(grep -E '^(up6|nd-)' "$RESP_LOG" | tail -2 | tr '\n' '|')"; fi
    if in_app ping -6 -c 2 -i 0.2 -W 2 "fe80::1%$TUN_NAME" >"$T_DIR/ping6.out" 2>&1 && grep -q 'from fe80::1' "$T_DIR/ping6.out"; then pass ipv6-ping
    else fail ipv6-ping "$(tail -2 "$T_DIR/ping6.out" | tr '\n' '|')"; fi
    want=$(sha_of "$T_DIR/www/f0")
    got=$(in_app timeout 10 socat -u "TCP6:[fe80::1%$TUN_NAME]:9104" - | sha256sum | cut -d' ' -f1)
    if [ "$got" = "$want" ]; then pass ipv6-tcp; else fail ipv6-tcp "sha256 $got, want $want"; fi

    want=$(sha_of "$T_DIR/www/f0")
    t0=$(now_ms)
    pids=()
    for i in $(seq 100); do
        (in_app timeout 30 socat -u "TCP4:$PPP_LOCAL:9102" - | sha256sum | cut -d' ' -f1 >"$T_DIR/flow.$i") &
        pids+=($!)
    done
    wait "${pids[@]}"
    bad=0
    for i in $(seq 100); do [ "$(cat "$T_DIR/flow.$i")" = "$want" ] || bad=$((bad + 1)); done
    if [ $bad -eq 0 ]; then pass flows-100; note "100 concurrent flows in $(($(now_ms) - t0)) ms"
    else fail flows-100 "$bad of 100 transfers wrong ($(cat "$T_DIR"/flow.* | sort | uniq -c | sort -rn | head -3 | tr '\n' ' ')): $("$LOFT_BIN" status -c "$T_DIR/chap.yaml" 2>&1 | grep -A4 '^corp' | tr '\n' '|')"; fi

    # Packet mode: lwIP terminated none of these flows (no TCP flow ever opened in loft's
    # table), and the sstp outbound carried them as packets.
    st=$("$LOFT_BIN" status -c "$T_DIR/chap.yaml" 2>&1)
    up=$(echo "$st" | sed -n 's/.*packets-up \([0-9]*\).*/\1/p')
    if echo "$st" | grep -q 'tcp-flows-opened - ' && [ "${up:-0}" -gt 36000 ]; then pass packet-mode
    else fail packet-mode "packets-up ${up:-?}: $(echo "$st" | grep -E 'TOTALS|packets-up' | tr '\n' '|')"; fi
    # SOCKS5 CONNECT routed to sstp: loft opens the connection itself over the link (from the
    # IPCP address, a port in 61000-65535); the services see it as any client of the link.
    want=$(sha_of "$T_DIR/www/s5")
    t0=$(now_ms)
    got=$(timeout 60 python3 "$T_DIR/socks.py" dl "$PPP_LOCAL" 9103 - "$S5_PORT" 2>&1)
    t1=$(now_ms)
    if [ "$got" = "$want" ]; then pass socks5-download; note "SOCKS5 over sstp: 4 MiB down in $((t1 - t0)) ms"
    else fail socks5-download "sha256 $got, want $want; loft: $(grep -v 'event=ready' "$LOFT_LOG" | tail -3 | tr '\n' '|')"; fi
    t0=$(now_ms)
    got=$(timeout 60 python3 "$T_DIR/socks.py" ul "$PPP_LOCAL" 9000 "$T_DIR/www/s5" "$S5_PORT" 2>&1)
    t1=$(now_ms)
    if [ "$got" = "$want" ]; then pass socks5-upload; note "SOCKS5 over sstp: 4 MiB up in $((t1 - t0)) ms"
    else fail socks5-upload "sha256 $got, want $want; loft: $(grep -v 'event=ready' "$LOFT_LOG" | tail -3 | tr '\n' '|')"; fi
    # Nothing listens on 9199 behind the link: the server's RST makes a SOCKS5 "connection
    # refused" (reply 5) at once. The reply code is checked: the client's own "Connection
    # refused" (no listener at loft's port) is not this.
    t0=$(now_ms)
    got=$(timeout 20 python3 "$T_DIR/socks.py" dl "$PPP_LOCAL" 9199 - "$S5_PORT" 2>&1)
    t1=$(now_ms)
    if [[ $got == "error ProxyError reply=5 "* ]] && [ $((t1 - t0)) -lt 5000 ]; then pass socks5-refused
    else fail socks5-refused "$got in $((t1 - t0)) ms"; fi
    # A name in the CONNECT (ATYP 3): loft asks the IPCP DNS server (dnsmasq behind the link)
    # over the link and connects to the answer; a name it does not know fails at once.
    want=$(sha_of "$T_DIR/www/s5")
    got=$(timeout 20 python3 "$T_DIR/socks.py" dl svc.loft.test 9103 - "$S5_PORT" 2>&1)
    if [ "$got" = "$want" ] && grep -q 'query\[A\] svc.loft.test from '"$PPP_CLIENT" "$T_DIR/dnsmasq.log"; then pass socks5-name
    else fail socks5-name "sha256 $got, want $want; dnsmasq: $(grep svc "$T_DIR/dnsmasq.log" | tail -2 | tr '\n' '|')"; fi
    t0=$(now_ms)
    got=$(timeout 20 python3 "$T_DIR/socks.py" dl nosuch.loft.test 9103 - "$S5_PORT" 2>&1)
    t1=$(now_ms)
    if echo "$got" | grep -qi 'error' && [ $((t1 - t0)) -lt 3000 ] && grep -q 'event=sstp.lookup-failed.*nosuch.loft.test' "$LOFT_LOG"; then pass socks5-name-unknown
    else fail socks5-name-unknown "$got in $((t1 - t0)) ms: $(grep lookup "$LOFT_LOG" | tail -1)"; fi
    # UDP ASSOCIATE routed to sstp: an lwIP udp pcb over the link, to the echo service.
    got=$(timeout 20 python3 "$T_DIR/socks.py" udp "$PPP_LOCAL" 9101 - "$S5_PORT" 2>&1)
    if [ "$got" = 5 ]; then pass socks5-udp; else fail socks5-udp "$got"; fi
    st=$("$LOFT_BIN" status -c "$T_DIR/chap.yaml" 2>&1)
    n=$(echo "$st" | sed -n 's/.*link-connections-opened \([0-9]*\).*/\1/p')
    sv=$(echo "$st" | sed -n 's/.* streams \([0-9]*\).*/\1/p')
    if [ "${n:-0}" -ge 3 ] && [ "${sv:-0}" -ge 3 ] && grep -q "$PPP_CLIENT:6[1-5][0-9][0-9][0-9]" "$SINK_LOG" 2>/dev/null; then pass socks5-counted
    else fail socks5-counted "link-connections-opened ${n:-?}, streams ${sv:-?}: $(echo "$st" | grep -E 'link-conn|streams' | tr '\n' '|'); sink: $(tail -2 "$SINK_LOG" 2>&1 | tr '\n' '|')"; fi
    # The bridge's flows routed to sstp: lwIP terminates them on the bridge and loft opens them
    # again over the link (TCP and UDP).
    if peer_up; then
        want=$(sha_of "$T_DIR/www/s5")
        got=$(ip netns exec "$PEER_NS" timeout 30 socat -u "TCP4:$PPP_LOCAL:9103" - | sha256sum | cut -d' ' -f1)
        if [ "$got" = "$want" ]; then pass bridge-tcp; else fail bridge-tcp "sha256 $got, want $want"; fi
        r=$(in_peer python3 -c "$(udp_echo5 bridge)" 2>&1)
        if [ "$r" = 5 ]; then pass bridge-udp; else fail bridge-udp "$r"; fi
    else
        fail bridge-tcp "socat peer did not come up: $(cat "$T_DIR/socat.log")"; fail bridge-udp "no peer"
    fi
    peer_down
    # The server dies in the middle of a transfer: the link is down (one log line), loft
    # redials with backoff, and the address the new server hands out goes on the TUN.
    # A SOCKS5 download over the link at the same time ends too (its connection fails with
    # the link), well before its 20 s timeout.
    t0=$(now_ms)
    (timeout 20 python3 "$T_DIR/socks.py" dl "$PPP_LOCAL" 9100 - "$S5_PORT" >"$T_DIR/s5cut.out" 2>&1) &
    s5=$!
    sleep 0.2
    # The in-app download is load only: over a packet link the app's TCP stalls rather than
    # resets, so it is cut at 5 s (not 20) to keep loft's redial backoff short for the next case.
    (in_app timeout 5 socat -u "TCP4:$PPP_LOCAL:9100" - >/dev/null 2>&1) &
    dl=$!
    sleep 0.3
    stop_responder
    wait "$s5"
    s5ms=$(($(now_ms) - t0))
    wait "$dl"
    if wait_log "$LOFT_LOG" 'event=sstp.down' 10 && ! loft_died && [ $s5ms -lt 15000 ] \
        && ! grep -qx "$(sha_of "$T_DIR/www/big")" "$T_DIR/s5cut.out"; then pass server-killed
        note "the SOCKS5 download over the link ended $s5ms ms after it started: $(tail -1 "$T_DIR/s5cut.out" | cut -c1-80)"
    else fail server-killed "socks5 ${s5ms} ms: $(tail -1 "$T_DIR/s5cut.out"); $(grep sstp "$LOFT_LOG" | tail -2 | tr '\n' '|')"; fi
    # Without `hold`, a flow routed to sstp while its link is down goes direct (the fallback),
    # through lwIP like any stream outbound's, counted fallback-flows.
    r=$(echo_direct fb)
    fb=$(LOFT_CFG="$T_DIR/chap.yaml" field corp 'c["fallback-flows"]')
    if [ "$r" = direct-fb ] && [ "${fb:-0}" -ge 1 ] && [ "$(LOFT_CFG="$T_DIR/chap.yaml" field corp 'o["state"]')" = down ]; then pass fallback-direct
    else fail fallback-direct "echo '$r', fallback-flows ${fb:-?}, state $(LOFT_CFG="$T_DIR/chap.yaml" field corp 'o["state"]')"; fi
    # The next link up after this responder starts (not a count since loft started: a redial
    # under load may have brought one more up before it).
    ups0=$(grep -c 'event=sstp.up' "$LOFT_LOG")
    # The redial backoff doubles from 0.5 s up to 30 s (±25 %) while the server is away, so the
    # next dial may be up to 37.5 s off: wait that long, not less.
    CLIENT_ADDRESS=198.19.$NET.3 IPV6CP=1 start_responder mschapv2
    for i in $(seq 400); do [ "$(grep -c 'event=sstp.up' "$LOFT_LOG")" -gt "$ups0" ] && break; sleep 0.1; done
    sleep 0.5
    a=$(ip -n "$APP_NS" -4 addr show dev "$TUN_NAME")
    if echo "$a" | grep -q "inet 198.19.$NET.3/32" && ! echo "$a" | grep -q "inet $PPP_CLIENT/" \
        && in_app ping -c 2 -i 0.2 -W 2 "$PPP_LOCAL" >/dev/null 2>&1; then pass redial-new-address
    else fail redial-new-address "$(grep sstp "$LOFT_LOG" | tail -3 | tr '\n' '|') / $(echo "$a" | grep inet | tr '\n' '|')"; fi
    # Connections loft opens over the link work again after the redial, from the new address
    # (the responder routes only the address it handed out back to the link).
    want=$(sha_of "$T_DIR/www/s5")
    got=$(timeout 20 python3 "$T_DIR/socks.py" dl "$PPP_LOCAL" 9103 - "$S5_PORT" 2>&1)
    if [ "$got" = "$want" ]; then pass socks5-after-redial
    else fail socks5-after-redial "sha256 $got, want $want; $(grep sstp "$LOFT_LOG" | tail -2 | tr '\n' '|')"; fi
    # A path change (here asked for with `loft path-changed`): the connection is dropped and
    # dialled again at once.
    ups0=$(grep -c 'event=sstp.up' "$LOFT_LOG")
    out=$("$LOFT_BIN" path-changed -c "$T_DIR/chap.yaml" 2>&1)
    for i in $(seq 100); do [ "$(grep -c 'event=sstp.up' "$LOFT_LOG")" -gt "$ups0" ] && break; sleep 0.1; done
    if echo "$out" | grep -q 'corp: redialling' && [ "$(grep -c 'event=sstp.up' "$LOFT_LOG")" -gt "$ups0" ] \
        && grep -q 'event=sstp.path-changed' "$LOFT_LOG" && in_app ping -c 1 -W 2 "$PPP_LOCAL" >/dev/null 2>&1; then
        pass path-changed
    else fail path-changed "$out: $(grep sstp "$LOFT_LOG" | tail -3 | tr '\n' '|')"; fi
    loft_stop_clean stop-clean
fi
stop_responder

# --- PAP, the keepalive, hold -----------------------------------------------------------------
# keepalive 1 s: an SSTP Echo Request after 1 s of silence, down after 2 s. `hold: true`: while
# the link is down nothing routed to it goes anywhere else.
# This responder speaks TLS 1.2 at most, as Windows servers before 2022 do: pap-up checks that
# loft took it.
TLS12=1 start_responder pap
HCFG=$T_DIR/pap.yaml
HCASES="pap-up pap-data keepalive-expiry hold-held hold-no-leak-counters hold-no-leak-capture hold-redial-address hold-exit-clean"
if require_loft "$(sstp_config pap '[pap]' "$PASSWORD" 'keepalive: 1s' 'hold: true')" $HCASES; then
    if wait_log "$LOFT_LOG" 'event=sstp.up.*auth=pap' 15 && grep -q '^binding-ok' "$RESP_LOG" \
        && grep -q '^tls TLSv1.2' "$RESP_LOG" && grep 'event=sstp.up' "$LOFT_LOG" | grep -q 'TLSv1.2'; then pass pap-up
    else fail pap-up "$(grep sstp "$LOFT_LOG" | tail -3 | tr '\n' '|') / $(tail -3 "$RESP_LOG" | tr '\n' '|')"; fi
    want=$(sha_of "$T_DIR/www/f0")
    got=$(in_app timeout 20 socat -u "TCP4:$PPP_LOCAL:9102" - | sha256sum | cut -d' ' -f1)
    if [ "$got" = "$want" ] && in_app ping -c 1 -W 2 "$PPP_LOCAL" >/dev/null 2>&1; then pass pap-data
    else fail pap-data "sha256 $got, want $want"; fi
    # The responder goes silent (SIGUSR1: no echo answers, nothing at all) with the TCP
    # connection open: loft's keepalive notices within 2 s and redials (the next session answers).
    # The keepalive's own line is required: a second sstp.up after some other drop is not this.
    t0=$(now_ms); t1=; ups=$(grep -c 'event=sstp.up' "$LOFT_LOG")
    kill -USR1 "$RESP_PID"
    if wait_log "$LOFT_LOG" 'event=sstp.down.*timeout: nothing from the server for 2 s' 6; then
        t1=$(now_ms)
        for i in $(seq 60); do [ "$(grep -c 'event=sstp.up' "$LOFT_LOG")" -gt "$ups" ] && break; sleep 0.1; done
    fi
    if [ -n "$t1" ] && [ "$(grep -c 'event=sstp.up' "$LOFT_LOG")" -gt "$ups" ] && in_app ping -c 1 -W 2 "$PPP_LOCAL" >/dev/null 2>&1; then
        pass keepalive-expiry; note "keepalive: down $((t1 - t0)) ms after the responder went silent, up again"
    else fail keepalive-expiry "$(grep sstp "$LOFT_LOG" | tail -3 | tr '\n' '|') / $(tail -3 "$RESP_LOG" | tr '\n' '|')"; fi
    # The server gone with `hold: true`: the state is held; TCP, UDP (DNS), ping from the app and
    # a SOCKS5 CONNECT to srv's own address (which the direct path would reach) are dropped
    # inside loft (hold-drops), no flow goes direct, and a capture on srv sees none of it.
    stop_responder
    # (Between redial attempts: a refused dial shows `dialing` for a moment.)
    st=
    for i in $(seq 50); do
        st=$(LOFT_CFG="$HCFG" field corp 'o["state"]')
        [ "$st" = held ] && "$LOFT_BIN" status -c "$HCFG" 2>/dev/null | grep -q '^corp .*held' && break
        st=; sleep 0.1
    done
    if [ -n "$st" ]; then pass hold-held
    else fail hold-held "state $(LOFT_CFG="$HCFG" field corp 'o["state"]'): $("$LOFT_BIN" status -c "$HCFG" 2>&1 | grep -A1 '^corp' | tr '\n' '|')"; fi
    in_srv timeout 8 tcpdump -ni "$VETH_SRV" -w "$T_DIR/hold.pcap" "not tcp port $SPORT and not arp and not icmp6" >/dev/null 2>&1 &
    dump=$!
    sleep 1
    in_app dig +short +time=1 +tries=1 "@$SRV4" probe.loft.test >/dev/null 2>&1 &
    q1=$!
    in_app ping -c 1 -W 1 "$SRV4" >/dev/null 2>&1 &
    q2=$!
    r2=$(timeout 10 python3 "$T_DIR/socks.py" dl "$SRV4" 9001 - "$S5_PORT" 2>&1)
    r1=$(echo_direct held)
    wait "$q1" "$q2" 2>/dev/null
    kill -INT "$dump" 2>/dev/null; wait "$dump" 2>/dev/null
    drops=$(LOFT_CFG="$HCFG" field corp 'c["hold-drops"]')
    direct=$(LOFT_CFG="$HCFG" field corp 'd["flows_total"]')
    if [ -z "$r1" ] && [ "${r2%% *}" = error ] && [ "${drops:-0}" -ge 4 ] && [ "$direct" = 0 ]; then
        pass hold-no-leak-counters; note "hold: $drops packets and flows dropped; SOCKS5: $r2"
    else fail hold-no-leak-counters "echo '$r1', socks5 '$r2', hold-drops ${drops:-?}, direct flows ${direct:-?}"; fi
    seen=$(tcpdump -nr "$T_DIR/hold.pcap" 2>/dev/null | wc -l)
    if [ -s "$T_DIR/hold.pcap" ] && [ "$seen" -eq 0 ]; then pass hold-no-leak-capture
    else fail hold-no-leak-capture "$seen packets reached srv while the link was held: $(tcpdump -nr "$T_DIR/hold.pcap" 2>/dev/null | head -3 | tr '\n' '|')"; fi
    # The server back, handing out another address: the link is up again, the TUN takes it.
    n=$(grep -c 'event=sstp.up' "$LOFT_LOG")
    CLIENT_ADDRESS=198.19.$NET.4 start_responder pap
    # The backoff has grown to seconds by now (the redial with backoff is checked above):
    # `loft path-changed` dials again at once.
    "$LOFT_BIN" path-changed -c "$HCFG" >/dev/null 2>&1
    for i in $(seq 150); do [ "$(grep -c 'event=sstp.up' "$LOFT_LOG")" -gt "$n" ] && break; sleep 0.1; done
    sleep 0.3
    a=$(ip -n "$APP_NS" -4 addr show dev "$TUN_NAME")
    if echo "$a" | grep -q "inet 198.19.$NET.4/32" && ! echo "$a" | grep -q "inet $PPP_CLIENT/" \
        && in_app ping -c 1 -W 2 "$PPP_LOCAL" >/dev/null 2>&1 && [ "$(LOFT_CFG="$HCFG" field corp 'o["state"]')" = up ]; then pass hold-redial-address
    else fail hold-redial-address "$(grep sstp "$LOFT_LOG" | tail -2 | tr '\n' '|') / $(echo "$a" | grep inet | tr '\n' '|')"; fi
    loft_stop_clean hold-exit-clean
fi
stop_responder

# --- a wrong password: one log line, backoff, no crash ------------------------------------------
start_responder mschapv2
if require_loft "$(sstp_config wrong '[mschapv2]' 'not the password')" wrong-password; then
    sleep 3
    n=$(grep -c 'event=sstp.down.*authentication failed: MS-CHAPv2: E=691' "$LOFT_LOG")
    tries=$(grep -c '^auth-failed' "$RESP_LOG")
    # Backoff: 0.5, 1, 2 s (±25 %) between attempts, so at most 4 in 3 s; a path change
    # (another program moving the host's default route) starts the backoff again.
    pc=$(grep -c 'event=sstp.path-changed' "$LOFT_LOG")
    if [ "$n" = 1 ] && [ "$tries" -ge 2 ] && [ "$tries" -le $((4 + 3 * pc)) ] && ! loft_died; then pass wrong-password
        note "$tries attempts in 3 s ($pc path changes), one log line"
    else fail wrong-password "log lines $n, attempts $tries: $(grep sstp "$LOFT_LOG" | tail -3 | tr '\n' '|')"; fi
    loft_stop TERM
fi
stop_responder
finish
