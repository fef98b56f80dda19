#!/usr/bin/env bash
# Sniffing (docs/sniffing.md): apps in the app namespace name a host only inside their bytes
# (`curl --resolve NAME:PORT:ADDRESS`, the address one where nothing listens), and loft routes
# them by that name. TLS (SNI) and HTTP (Host) to sniff.loft.test go by a `domains` rule to the
# holder, whose front runs in srv and resolves the name through srv's dnsmasq, the only resolver
# that knows it; web.loft.test by another rule to VLESS (v2ray in srv, which alone knows that
# name). `loft status --flows` names a live flow's name and its source; the counters count it.
# The same TLS flow from a bridge peer (socat, Tests/integration/bridge-peer.sh) is sniffed too.
# A name from a DNS answer that passed through loft routes a later flow to that address.
# A server-first protocol: port 22 connects with no wait, port 2222 after the wait. With
# `sniff: off` the same flows go by address (the rule's count stays 0; the unreachable address
# stays unreachable). QUIC: aioquic HTTP/3 clients (v1, v2, and a ClientHello too large for one
# Initial) to an aioquic server in srv: a `domains` rule for the QUIC name sends them to the
# holder (rule count, the flow table's name `quic`), and by address with sniffing off. Needs root.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/site-lib.sh"
. "$(dirname "$0")/bridge-peer.sh"

command -v v2ray >/dev/null || die "v2ray not installed (scripts/deps.sh)"

NAME=sniff.loft.test           # dnsmasq in srv only
VNAME=web.loft.test            # v2ray only (start_v2ray's dns.hosts)
QNAME=quic.loft.test           # HTTP/3 (aioquic) in srv on QPORT
QPORT=4433
NOWHERE=198.18.$NET.99         # no host: a flow dialled there fails
UUID=5783a3e7-e373-51cd-8642-c83782b807c5
VPORT=8443
FRONT_PORT=$((20000 + T_ID % 20000))
CTL=$T_DIR/control.sock
WAIT_MS=1500

topo_up
make_files 1
start_echo
start_v2ray $UUID $VPORT
# The site's certificate (both names), from start_v2ray's CA; the front's PKI of its own.
site_cert "$NAME" "$VNAME" "$QNAME"
bash "$(dirname "$0")/../interop/gen-certs.sh" "$T_DIR/front-pki" >/dev/null || die "the front's PKI"

# dnsmasq in srv: the only resolver that knows NAME; the front's (srv's resolv.conf).
bg_in "$SRV_NS" dnsmasq dnsmasq -k --conf-file=/dev/null --no-resolv --no-hosts --no-poll \
    --bind-interfaces --listen-address="$SRV4" --port=53 --pid-file= --user=root \
    --host-record="$NAME,$SRV4" --log-queries --log-facility=-
wait_listen "$SRV_NS" udp 53 || die "dnsmasq did not start"
mkdir -p "/etc/netns/$SRV_NS"
on_cleanup "rm -rf /etc/netns/$SRV_NS"
echo "nameserver $SRV4" >"/etc/netns/$SRV_NS/resolv.conf"

# nginx in srv: HTTP :80 and HTTPS :443 (the site certificate); /slow/ rate limited.
start_site_nginx http

# The HTTP/3 server (aioquic) in srv.
H3=$(dirname "$0")/../tools/h3_get.py
bg_in "$SRV_NS" h3server python3 "$H3" server "$SRV4" $QPORT "$PKI/site.pem" "$PKI/site.key" "$T_DIR/www/small"
wait_listen "$SRV_NS" udp $QPORT || die "the HTTP/3 server did not start: $(tail -3 "$T_DIR/h3server.log")"

# Server-first listeners: a banner at once, then echo (port 22 excluded by default, 2222 not).
for p in 22 2222; do
    bg_in "$SRV_NS" banner$p socat "TCP4-LISTEN:$p,bind=$SRV4,fork,reuseaddr" SYSTEM:'echo SSH-2.0-loft-test; cat'
    wait_listen "$SRV_NS" tcp $p || die "banner server on $p did not start"
done

# loft-front in srv, resolving names with srv's resolv.conf.
cat >"$T_DIR/front.yaml" <<EOF
log: info
listen: $SRV4:$FRONT_PORT
tls: { certificate: $T_DIR/front-pki/server.pem, key: $T_DIR/front-pki/server.key }
tokens: ["sniff-test-token"]
pool: { ipv4: 198.18.64.0/24, ipv6: "fd00:64::/64" }
mtu: 1400
dns: [$ROOT4]
control: $T_DIR/front.sock
EOF
FRONT_LOG=$T_DIR/front.log
FRONT_CFG=$T_DIR/front.yaml
front_run "$FRONT_CFG" "$SRV_NS" || die "loft-front did not start"

# sniff_config NAME SNIFF-SECTION: the app namespace's TUN, the bridge for its peer, the holder
# and VLESS outbounds, rules by name.
sniff_config() {
    local cfg
    cfg=$(loft_config "$1" "dns=[]")
    sed -i -e '/^default: direct$/d' \
        -e "s/^bridge: off/bridge: { peer-port: $PEER_PORT, extension-port: $EXT_PORT, mtu: 1500 }/" "$cfg"
    cat >>"$cfg" <<EOF
control: $CTL
outbounds:
  - name: home
    type: loft
    server: $SRV4:$FRONT_PORT
    carrier: ws
    token: sniff-test-token
    tls: { server-name: front.test, ca: $T_DIR/front-pki/ca.pem }
  - { name: v, type: vless, server: "$SRV4:$VPORT", uuid: $UUID, tls: { server-name: vless.loft.test, ca: $PKI/ca.pem } }
rules:
  - { action: via, outbound: home, domains: [$NAME] }
  - { action: via, outbound: v, domains: [$VNAME] }
  - { action: via, outbound: home, network: udp, domains: [$QNAME] }
default: direct
$2
EOF
    echo "$cfg"
}

# snap: one `loft status --json` (after the control socket's 200 ms render cache has passed);
# status EXPR: a value from it (s: all of it, t: the totals, r: the rules).
snap() { sleep 0.3; "$LOFT_BIN" status --json -c "$LOFT_CFG" >"$T_DIR/snap.json" 2>/dev/null; }
status() {
    python3 -c '
import json, sys
s = json.load(open(sys.argv[2]))
t = s["totals"]
r = s["rules"]
print(eval(sys.argv[1]))' "$1" "$T_DIR/snap.json" 2>/dev/null
}

SMALL_SHA=$(sha_of "$T_DIR/www/small")
# fetch URL ADDRESS OUT: curl in the app namespace with NAME's port pinned to ADDRESS.
fetch() {
    local url=$1 addr=$2 out=$3 host port
    host=${url#*://}; host=${host%%/*}
    case $url in https*) port=443 ;; *) port=80 ;; esac
    in_app curl -sS --max-time 15 --cacert "$PKI/ca.pem" --resolve "$host:$port:$addr" -o "$out" "$url" 2>"$out.err"
}
wait_front_ready() {
    local i
    for i in $(seq 100); do [ "$(field 'o["state"]')" = up ] && return 0; sleep 0.1; done
    return 1
}

# --- sniffing on (the default) -----------------------------------------------------------------
CASES="resolver-knows-nothing sni-to-holder host-to-holder sni-to-vless flows-show-name sniff-counters
bridge-sni-to-holder quic-v1-to-holder quic-flow-name quic-v2-to-holder quic-split-hello port-22-no-wait server-first-after-wait dns-name-routes sni-v6-to-holder sniff-exit-clean"
LOFT_CFG=$(sniff_config sniff-on "sniff: { wait: ${WAIT_MS}ms }")
if require_loft "$LOFT_CFG" $CASES; then
    wait_front_ready || note "the holder's session is not up yet"
    # Neither the root namespace (loft's) nor the app's resolver knows the names.
    known=$(for n in "$NAME" "$VNAME"; do getent hosts "$n"; in_app getent hosts "$n"; done 2>&1)
    if [ -n "$known" ]; then
        fail resolver-knows-nothing "a resolver outside srv knows: $(echo "$known" | tr '\n' ' '); app resolv.conf: $(in_app cat /etc/resolv.conf | tr '\n' ' ')"
    else pass resolver-knows-nothing; fi

    q0=$(grep -c "query\[A\] $NAME" "$T_DIR/dnsmasq.log")
    fetch "https://$NAME/small" "$NOWHERE" "$T_DIR/sni.out"
    q1=$(grep -c "query\[A\] $NAME" "$T_DIR/dnsmasq.log")
    snap
    expect sni-to-holder "[ '$(sha_of "$T_DIR/sni.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ $q1 -gt $q0 ] && [ '$(status 'r[0]["flows"]')' = 1 ]" \
        "sha $(sha_of "$T_DIR/sni.out" 2>/dev/null), dnsmasq queries $q0 -> $q1, rule 0 flows $(status 'r[0]["flows"]'): $(cat "$T_DIR/sni.out.err")"

    fetch "http://$NAME/small" "$NOWHERE" "$T_DIR/host.out"
    snap
    expect host-to-holder "[ '$(sha_of "$T_DIR/host.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 'r[0]["flows"]')' = 2 ]" \
        "$(wc -c <"$T_DIR/host.out") bytes, small now $(sha_of "$T_DIR/www/small") was $SMALL_SHA, got $(sha_of "$T_DIR/host.out"); access: $(tail -3 "$T_DIR/nginx/access.log" | tr '\n' ' '), rule 0 flows $(status 'r[0]["flows"]'): $(cat "$T_DIR/host.out.err")"

    fetch "https://$VNAME/small" "$NOWHERE" "$T_DIR/vless.out"
    snap
    expect sni-to-vless "[ '$(sha_of "$T_DIR/vless.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 'r[1]["flows"]')' = 1 ]" \
        "sha $(sha_of "$T_DIR/vless.out" 2>/dev/null), rules $(status '[x["flows"] for x in r]'), access: $(tail -3 "$T_DIR/nginx/access.log" | tr '\n' ' '), rule 1 flows $(status 'r[1]["flows"]'): $(cat "$T_DIR/vless.out.err")"

    # A slow download (256 KiB at 64 KiB/s) is live while the flow table is read.
    in_app curl -sS --max-time 30 --cacert "$PKI/ca.pem" --resolve "$NAME:443:$NOWHERE" -o "$T_DIR/slow.out" \
        "https://$NAME/slow/f0" 2>"$T_DIR/slow.err" &
    SLOW=$!
    row=
    for _ in $(seq 50); do
        row=$("$LOFT_BIN" status --flows --json -c "$LOFT_CFG" 2>/dev/null | python3 -c '
import json, sys
for f in json.load(sys.stdin):
    if f.get("name") == sys.argv[1]: print(f["name_source"], f["outbound"], f["destination"])' "$NAME" 2>/dev/null)
        [ -n "$row" ] && break
        sleep 0.1
    done
    text=$("$LOFT_BIN" status --flows -c "$LOFT_CFG" 2>/dev/null | grep -c "$NAME (sni)")
    wait "$SLOW"
    expect flows-show-name "[ '$row' = 'sni home $NOWHERE:443' ] && [ '$text' -ge 1 ] && [ '$(sha_of "$T_DIR/slow.out")' = '$(sha_of "$T_DIR/www/slow/f0")' ]" \
        "row '$row', text rows $text, download $(cat "$T_DIR/slow.err")"

    snap
    expect sniff-counters "[ '$(status 't["sniffed"]')' = 4 ] && [ '$(status 't["not-sniffable"]')' = 0 ]" \
        "sniffed $(status 't["sniffed"]'), not-sniffable $(status 't["not-sniffable"]'), timed out $(status 't["sniff-timed-out"]')"

    # The peer's socat starts once loft's bridge listens (its first datagram would be refused).
    peer_up || note "the bridge peer did not start: $(tail -3 "$T_DIR/socat.log" | tr '\n' ' ')"
    ip netns exec "$PEER_NS" curl -sS --max-time 15 --cacert "$PKI/ca.pem" --resolve "$NAME:443:$NOWHERE" \
        -o "$T_DIR/bridge.out" "https://$NAME/small" 2>"$T_DIR/bridge.out.err"
    snap
    expect bridge-sni-to-holder "[ '$(sha_of "$T_DIR/bridge.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 'r[0]["flows"]')' = 4 ] && [ '$(status 't["sniffed"]')' = 5 ]" \
        "sha $(sha_of "$T_DIR/bridge.out" 2>/dev/null), rule 0 flows $(status 'r[0]["flows"]'), sniffed $(status 't["sniffed"]'): $(cat "$T_DIR/bridge.out.err")"
    peer_down

    # h3 CASE RULE-FLOWS-WANT [client args]: an HTTP/3 GET of QNAME from SRV4 through loft.
    h3() {
        local name=$1 want=$2 out
        shift 2
        out=$(in_app python3 "$H3" client "$SRV4" $QPORT "$QNAME" "$PKI/ca.pem" "$@" 2>&1)
        snap
        expect "$name" "[ '$out' = '$SMALL_SHA 4096' ] && [ '$(status 'r[2]["flows"]')' = $want ]" \
            "client: $out; rule 2 flows $(status 'r[2]["flows"]'), sniffed $(status 't["sniffed"]'), not-sniffable $(status 't["not-sniffable"]'), timed out $(status 't["sniff-timed-out"]')"
    }
    s0=$(status 't["sniffed"]')
    h3 quic-v1-to-holder 1
    row=$("$LOFT_BIN" status --flows --json -c "$LOFT_CFG" 2>/dev/null | python3 -c '
import json, sys
for f in json.load(sys.stdin):
    if f.get("name") == sys.argv[1]: print(f["network"], f["name_source"], f["outbound"])' "$QNAME" 2>/dev/null)
    expect quic-flow-name "[ '$row' = 'udp quic home' ] && [ '$(status 't["sniffed"]')' = $((s0 + 1)) ]" \
        "row '$row', sniffed $s0 -> $(status 't["sniffed"]')"
    h3 quic-v2-to-holder 2 --version 2
    h3 quic-split-hello 3 --big-hello

    # banner PORT: ms until the server's first line arrives through loft (the app sends nothing).
    banner() {
        in_app python3 -c '
import socket, sys, time
t0 = time.monotonic()
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
line = s.makefile("rb").readline()
ms = int((time.monotonic() - t0) * 1000)
s.sendall(b"ping\n")
print(ms if line.startswith(b"SSH-2.0-loft-test") else "bad-banner")' "$SRV4" "$1" 2>&1
    }
    snap; t0=$(status 't["sniff-timed-out"]')
    ms22=$(banner 22)
    snap
    expect port-22-no-wait "[ '$ms22' -lt $((WAIT_MS * 2 / 3)) ] 2>/dev/null && [ '$(status 't["sniff-timed-out"]')' = '$t0' ]" \
        "banner after '$ms22' ms (the wait is $WAIT_MS ms), timed out $t0 -> $(status 't["sniff-timed-out"]')"
    ms2222=$(banner 2222)
    snap
    expect server-first-after-wait "[ '$ms2222' -ge $((WAIT_MS - 100)) ] 2>/dev/null && [ '$ms2222' -lt 8000 ] && [ '$(status 't["sniff-timed-out"]')' = $((t0 + 1)) ]" \
        "banner after '$ms2222' ms (the wait is $WAIT_MS ms), timed out $t0 -> $(status 't["sniff-timed-out"]')"
    # A name from a DNS answer that passed through loft: port 22 (never sniffed) to the address
    # dnsmasq gave for NAME goes by NAME's rule, to the holder.
    snap; r0=$(status 'r[0]["flows"]')
    got=$(in_app dig +short +time=3 +tries=1 @"$SRV4" "$NAME" A 2>&1 | tail -1)
    ms22=$(banner 22)
    snap
    expect dns-name-routes "[ '$got' = '$SRV4' ] && [ '$ms22' -ge 0 ] 2>/dev/null && [ '$(status 'r[0]["flows"]')' = $((r0 + 1)) ] && [ '$(status 't["dns-names-learned"]')' -ge 1 ]" \
        "dig '$got', banner '$ms22', rule 0 flows $r0 -> $(status 'r[0]["flows"]'), learned $(status 't["dns-names-learned"]')"
    # IPv6: the app's flow to an address of the v6 srv net where nothing is, by SNI to the holder.
    snap; r0=$(status 'r[0]["flows"]')
    fetch "https://$NAME/small" "[fd00:$NET::99]" "$T_DIR/v6.out"
    snap
    expect sni-v6-to-holder "[ '$(sha_of "$T_DIR/v6.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 'r[0]["flows"]')' = $((r0 + 1)) ]" \
        "sha $(sha_of "$T_DIR/v6.out" 2>/dev/null), rule 0 flows $r0 -> $(status 'r[0]["flows"]'): $(cat "$T_DIR/v6.out.err")"
    loft_stop_clean sniff-exit-clean
fi

# --- sniffing off: by address ------------------------------------------------------------------
CASES="off-by-address off-name-not-dialled off-counters off-quic-by-address off-exit-clean"
LOFT_CFG=$(sniff_config sniff-off "sniff: off")
if require_loft "$LOFT_CFG" $CASES; then
    wait_front_ready || note "the holder's session is not up yet"
    fetch "https://$NAME/small" "$SRV4" "$T_DIR/off.out"
    snap
    expect off-by-address "[ '$(sha_of "$T_DIR/off.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 'r[0]["flows"]')' = 0 ]" \
        "sha $(sha_of "$T_DIR/off.out" 2>/dev/null), rule 0 flows $(status 'r[0]["flows"]'): $(cat "$T_DIR/off.out.err")"
    # The address where nothing is: dialled as it is, so the fetch fails.
    if fetch "https://$NAME/small" "$NOWHERE" "$T_DIR/off2.out"; then
        fail off-name-not-dialled "fetched through $NOWHERE with sniffing off"
    else pass off-name-not-dialled; fi
    snap
    expect off-counters "[ '$(status 't["sniffed"]')' = 0 ] && [ '$(status 'r[0]["flows"]')' = 0 ]" \
        "sniffed $(status 't["sniffed"]'), rule 0 flows $(status 'r[0]["flows"]')"
    out=$(in_app python3 "$H3" client "$SRV4" $QPORT "$QNAME" "$PKI/ca.pem" 2>&1)
    snap
    expect off-quic-by-address "[ '$out' = '$SMALL_SHA 4096' ] && [ '$(status 'r[2]["flows"]')' = 0 ] && [ '$(status 't["sniffed"]')' = 0 ]" \
        "client: $out; rule 2 flows $(status 'r[2]["flows"]')"
    loft_stop_clean off-exit-clean
fi

finish
