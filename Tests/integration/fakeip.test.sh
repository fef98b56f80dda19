#!/usr/bin/env bash
# Fake-IP DNS (docs/fakeip.md): apps in the app namespace ask the TUN's DNS (dnsmasq in srv) and
# get pool addresses from loft for every name but the excluded one; curl by name then reaches
# nginx in srv through direct (loft resolves the name: its resolv.conf, bind-mounted in a mount
# namespace of its own, names srv's dnsmasq), the holder (the front resolves it) and VLESS
# (v2ray resolves it, the only one that knows its name), each chosen by a `domains` rule; the
# flow table shows the name with source fake-ip. The excluded name and a TXT query get the real
# answers. A restarted loft keeps the mapping (the app's cached address still works); an
# address of the pool that stands for no name is refused (an RST at once), never dialled.
# Needs root.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/site-lib.sh"

command -v v2ray >/dev/null || die "v2ray not installed (scripts/deps.sh)"
command -v dig >/dev/null || die "dig not installed (scripts/deps.sh: dnsutils)"

HNAME=holder.loft.test          # dnsmasq (the front's resolver)
DNAME=direct.loft.test          # dnsmasq (loft's resolver for direct)
VNAME=web.loft.test             # v2ray only
XNAME=real.loft.test            # excluded: its real answer
UUID=5783a3e7-e373-51cd-8642-c83782b807c5
VPORT=8443
FRONT_PORT=$((20000 + T_ID % 20000))
CTL=$T_DIR/control.sock
POOL4=198.19.$NET.0/24
POOL6=fd00:$NET:fa::/112

topo_up
make_files 1
start_v2ray $UUID $VPORT
site_cert "$HNAME" "$DNAME" "$VNAME"
bash "$(dirname "$0")/../interop/gen-certs.sh" "$T_DIR/front-pki" >/dev/null || die "the front's PKI"

bg_in "$SRV_NS" dnsmasq dnsmasq -k --conf-file=/dev/null --no-resolv --no-hosts --no-poll \
    --bind-interfaces --listen-address="$SRV4" --port=53 --pid-file= --user=root \
    --host-record="$HNAME,$SRV4" --host-record="$DNAME,$SRV4" --host-record="$XNAME,$SRV4" \
    --txt-record="$HNAME,loft-real-txt" --log-queries --log-facility=-
wait_listen "$SRV_NS" udp 53 || die "dnsmasq did not start"
mkdir -p "/etc/netns/$SRV_NS"
on_cleanup "rm -rf /etc/netns/$SRV_NS"
echo "nameserver $SRV4" >"/etc/netns/$SRV_NS/resolv.conf"
# loft's own resolver (direct): srv's dnsmasq, in a mount namespace of loft's own.
echo "nameserver $SRV4" >"$T_DIR/loft-resolv.conf"
with_resolv() { exec unshare -m --propagation slave sh -c 'mount --bind "$0" /etc/resolv.conf && exec "$@"' "$T_DIR/loft-resolv.conf" "$@"; }
LOFT_START_WRAP=with_resolv
# The app namespace exists before loft (a mount namespace of loft's own would hide one it made).
ip netns add "$APP_NS" || die "ip netns add $APP_NS"

start_site_nginx

cat >"$T_DIR/front.yaml" <<EOF
log: info
listen: $SRV4:$FRONT_PORT
tls: { certificate: $T_DIR/front-pki/server.pem, key: $T_DIR/front-pki/server.key }
tokens: ["fakeip-test-token"]
pool: { ipv4: 198.18.64.0/24, ipv6: "fd00:64::/64" }
mtu: 1400
dns: [$SRV4]
control: $T_DIR/front.sock
EOF
FRONT_LOG=$T_DIR/front.log
FRONT_CFG=$T_DIR/front.yaml
front_run "$FRONT_CFG" "$SRV_NS" || die "loft-front did not start"

LOFT_CFG=$(loft_config fakeip)
sed -i '/^default: direct$/d' "$LOFT_CFG"
cat >>"$LOFT_CFG" <<EOF
control: $CTL
outbounds:
  - name: home
    type: loft
    server: $SRV4:$FRONT_PORT
    carrier: ws
    token: fakeip-test-token
    tls: { server-name: front.test, ca: $T_DIR/front-pki/ca.pem }
  - { name: v, type: vless, server: "$SRV4:$VPORT", uuid: $UUID, tls: { server-name: vless.loft.test, ca: $PKI/ca.pem } }
rules:
  - { action: via, outbound: home, domains: [$HNAME] }
  - { action: via, outbound: v, domains: [$VNAME] }
default: direct
fake-ip:
  ipv4: $POOL4
  ipv6: "$POOL6"
  ttl: 2s
  exclude: [$XNAME]
  file: $T_DIR/fakeip.map
EOF

snap() { sleep 0.3; "$LOFT_BIN" status --json -c "$LOFT_CFG" >"$T_DIR/snap.json" 2>/dev/null; }
status() {
    python3 -c '
import json, sys
s = json.load(open(sys.argv[2]))
t = s["totals"]
r = s["rules"]
o = {x["name"]: x for x in s["outbounds"]}
print(eval(sys.argv[1]))' "$1" "$T_DIR/snap.json" 2>/dev/null
}
in_pool() {   # in_pool ADDRESS: the address lies in POOL4 or POOL6
    python3 -c 'import ipaddress, sys; a = ipaddress.ip_address(sys.argv[1]); sys.exit(0 if any(a in ipaddress.ip_network(p) for p in sys.argv[2:]) else 1)' \
        "$1" "$POOL4" "$POOL6" 2>/dev/null
}
SMALL_SHA=$(sha_of "$T_DIR/www/small")
fetch() {     # fetch NAME OUT [curl args]: by name, resolved by the app through the TUN
    local name=$1 out=$2
    shift 2
    in_app curl -sS --max-time 15 --cacert "$PKI/ca.pem" -o "$out" "$@" "https://$name/small" 2>"$out.err"
}

CASES="dig-fake-a dig-fake-aaaa dig-same-answer dig-excluded-real dig-txt-real curl-direct curl-direct-ipv6 curl-holder curl-vless
flows-fake-ip unknown-refused restart-keeps-mapping restart-exit-clean fakeip-exit-clean"
if require_loft "$LOFT_CFG" $CASES; then
    for _ in $(seq 100); do snap; [ "$(status 'o["home"]["state"]')" = up ] && break; done
    a4=$(in_app dig +short +time=3 +tries=1 @"$SRV4" "$DNAME" A 2>&1 | tail -1)
    expect dig-fake-a "in_pool '$a4'" "dig A $DNAME: '$a4' (pool $POOL4)"
    a6=$(in_app dig +short +time=3 +tries=1 @"$SRV4" "$DNAME" AAAA 2>&1 | tail -1)
    expect dig-fake-aaaa "in_pool '$a6'" "dig AAAA $DNAME: '$a6' (pool $POOL6)"
    again=$(in_app dig +short +time=3 +tries=1 @"$SRV4" "$DNAME" A 2>&1 | tail -1)
    ttl=$(in_app dig +noall +answer +time=3 +tries=1 @"$SRV4" "$DNAME" A 2>&1 | awk '{print $2}' | tail -1)
    expect dig-same-answer "[ '$again' = '$a4' ] && [ '$ttl' = 2 ]" "again '$again' (first '$a4'), ttl '$ttl'"
    x=$(in_app dig +short +time=3 +tries=1 @"$SRV4" "$XNAME" A 2>&1 | tail -1)
    expect dig-excluded-real "[ '$x' = '$SRV4' ]" "dig A $XNAME: '$x' (its real address is $SRV4)"
    txt=$(in_app dig +short +time=3 +tries=1 @"$SRV4" "$HNAME" TXT 2>&1 | tail -1)
    expect dig-txt-real "[ '$txt' = '\"loft-real-txt\"' ]" "dig TXT $HNAME: '$txt'"

    snap; d0=$(status 'o["direct"]["flows_total"]')
    fetch "$DNAME" "$T_DIR/direct.out"
    snap
    expect curl-direct "[ '$(sha_of "$T_DIR/direct.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 'o["direct"]["flows_total"]')' -gt '$d0' ]" \
        "$(cat "$T_DIR/direct.out.err"), direct flows $d0 -> $(status 'o["direct"]["flows_total"]')"
    fetch "$DNAME" "$T_DIR/direct6.out" -6
    expect curl-direct-ipv6 "[ '$(sha_of "$T_DIR/direct6.out" 2>/dev/null)' = '$SMALL_SHA' ]" "$(cat "$T_DIR/direct6.out.err")"
    fetch "$HNAME" "$T_DIR/holder.out"
    snap
    expect curl-holder "[ '$(sha_of "$T_DIR/holder.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 'r[0]["flows"]')' = 1 ]" \
        "$(cat "$T_DIR/holder.out.err"), rule 0 flows $(status 'r[0]["flows"]')"
    fetch "$VNAME" "$T_DIR/vless.out"
    snap
    expect curl-vless "[ '$(sha_of "$T_DIR/vless.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 'r[1]["flows"]')' = 1 ]" \
        "$(cat "$T_DIR/vless.out.err"), rule 1 flows $(status 'r[1]["flows"]')"

    in_app curl -sS --max-time 30 --cacert "$PKI/ca.pem" -o "$T_DIR/slow.out" "https://$HNAME/slow/f0" 2>"$T_DIR/slow.err" &
    SLOW=$!
    row=
    for _ in $(seq 50); do
        row=$("$LOFT_BIN" status --flows --json -c "$LOFT_CFG" 2>/dev/null | python3 -c '
import json, sys
for f in json.load(sys.stdin):
    if f.get("name") == sys.argv[1]: print(f["name_source"], f["outbound"])' "$HNAME" 2>/dev/null)
        [ -n "$row" ] && break
        sleep 0.1
    done
    wait "$SLOW"
    expect flows-fake-ip "[ '$row' = 'fake-ip home' ] && [ '$(sha_of "$T_DIR/slow.out")' = '$(sha_of "$T_DIR/www/slow/f0")' ]" \
        "row '$row', download $(cat "$T_DIR/slow.err")"

    # An address of the pool that no name was given: refused at once, nothing dialled.
    snap; d0=$(status 'o["direct"]["flows_total"]'); f0=$(status 't["fake-ip-refused"]')
    t0=$(now_ms)
    in_app curl -sS --max-time 10 -o /dev/null "http://198.19.$NET.200/" 2>"$T_DIR/unknown.err"; rc=$?
    ms=$(( $(now_ms) - t0 ))
    snap
    expect unknown-refused "[ $rc = 7 ] && [ $ms -lt 5000 ] && [ '$(status 't["fake-ip-refused"]')' = $((f0 + 1)) ] && [ '$(status 'o["direct"]["flows_total"]')' = '$d0' ]" \
        "curl exit $rc after $ms ms ($(cat "$T_DIR/unknown.err")), refused $f0 -> $(status 't["fake-ip-refused"]'), direct flows $d0 -> $(status 'o["direct"]["flows_total"]')"

    # Restart: the app keeps using the address it was given (no new query).
    if loft_stop TERM && grep -q " $DNAME\$" "$T_DIR/fakeip.map" && loft_start "$LOFT_CFG"; then
        fetch "$DNAME" "$T_DIR/again.out" --resolve "$DNAME:443:$a4"
        snap
        expect restart-keeps-mapping "[ '$(sha_of "$T_DIR/again.out" 2>/dev/null)' = '$SMALL_SHA' ] && [ '$(status 't["fake-ip-refused"]')' = 0 ]" \
            "$(cat "$T_DIR/again.out.err"), refused $(status 't["fake-ip-refused"]'); map: $(head -c 300 "$T_DIR/fakeip.map" | tr '\n' ' ')"
        pass restart-exit-clean
    else
        fail restart-keeps-mapping "restart failed: rc $LOFT_RC, map: $(head -c 300 "$T_DIR/fakeip.map" 2>/dev/null | tr '\n' ' ')"
        fail restart-exit-clean "loft exit status $LOFT_RC"
    fi
    loft_stop_clean fakeip-exit-clean no
fi

finish
