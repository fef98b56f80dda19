#!/usr/bin/env bash
# The holder in host mode (root, namespaces): loft's TUN in the namespace that stands for the
# host, `route-all: true` and the holder as the default, so everything goes into the TUN —
# including, unless loft keeps it out, the carrier to the front. The front runs in the srv
# namespace on 198.18.N.2 (a routed, non-loopback address), so the only thing that keeps the
# carrier off the TUN is loft's fwmark rule. Checks: the session comes up over the veth (no
# hairpin), the TUN takes the overlay, a 50 MiB download through it is intact and counted on
# both ends, and every route and rule is gone after exit.
. "$(dirname "$0")/lib.sh"

FPORT=$((20000 + T_ID % 20000))
CASES="host-holder-up host-holder-carrier-off-tun host-holder-overlay host-holder-download host-holder-counted host-holder-clean-exit"

topo_up
make_files 50
start_nginx 1 1024
bash "$(dirname "$0")/../interop/gen-certs.sh" "$T_DIR/pki" >/dev/null || die "test PKI"
BIG_SHA=$(sha_of "$T_DIR/www/big")

host_ns_up
before=$(host_snapshot)

cat >"$T_DIR/front.yaml" <<EOF
listen: $SRV4:$FPORT
tls: { certificate: $T_DIR/pki/server.pem, key: $T_DIR/pki/server.key }
tokens: ["host-test"]
pool: { ipv4: 198.18.64.0/24 }
mtu: 1400
keepalive: 2s
control: $T_DIR/front.sock
EOF
front_run "$T_DIR/front.yaml" "$SRV_NS" || { fail_all "loft-front did not start: $(tail -2 "$FRONT_LOG" | tr '\n' '|')" $CASES; finish; }

host_config "outbounds:" "  - { name: home, type: loft, server: \"$SRV4:$FPORT\", carrier: ws, token: host-test," \
    "      tls: { server-name: front.test, ca: $T_DIR/pki/ca.pem } }" "default: home" "hold: true"
host_start || { fail_all "loft did not start: $(tail -3 "$T_DIR/host-loft.log" | tr '\n' '|')" $CASES; finish; }

status() { "$LOFT_BIN" status --json -c "$T_DIR/host.yaml" 2>/dev/null; }
LOFT_CFG=$T_DIR/host.yaml
up=
for _ in $(seq 100); do [ "$(field 'o["state"]')" = up ] && { up=1; break; }; sleep 0.1; done
if [ -n "$up" ]; then pass host-holder-up; else fail host-holder-up "state $(field 'o["state"]'): $(field 'o["detail"]')"; fi

# The carrier is a TCP connection from the host's veth address to the front, marked 0x4c46.
conn=$(in_host ss -Htne state established "dst $SRV4:$FPORT")
if [ -n "$conn" ] && echo "$conn" | grep -q "$HOST4:" && echo "$conn" | grep -q 'fwmark:0x4c46'; then pass host-holder-carrier-off-tun
else fail host-holder-carrier-off-tun "carrier socket: '${conn:0:160}'"; fi

a4=$(in_host ip -4 addr show dev "$HTUN" | awk '/inet /{print $2}')
if [[ $a4 == 198.18.64.* ]]; then pass host-holder-overlay; else fail host-holder-overlay "TUN address '$a4'"; fi

got=$(in_host curl -sS --max-time 60 "http://$SRV4/big" 2>"$T_DIR/curl.err" | sha256sum | cut -d' ' -f1)
if [ "$got" = "$BIG_SHA" ]; then pass host-holder-download; else fail host-holder-download "sha256 $got: $(tail -1 "$T_DIR/curl.err")"; fi

flows=$(field 'o["flows_total"]')
opened=$(front_stat streams_opened)
if [ "${flows:-0}" -ge 1 ] && [ "${opened:-0}" -ge 1 ]; then pass host-holder-counted
else fail host-holder-counted "loft flows via home $flows, front streams opened $opened; rules: $(in_host ip rule | tr '\n' '|'); totals: $(status | python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"])'); front: $("$FRONT_BIN" stats -c "$T_DIR/front.yaml" 2>&1 | head -3 | tr '\n' '|')"; fi

kill -TERM "$HPID"; wait "$HPID"; rc=$?
after=$(host_snapshot)
if [ $rc -eq 0 ] && [ "$before" = "$after" ]; then pass host-holder-clean-exit
else fail host-holder-clean-exit "exit $rc; diff: $(diff <(echo "$before") <(echo "$after") | tr '\n' '|')"; fi
finish
