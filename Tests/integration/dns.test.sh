#!/usr/bin/env bash
# UDP through loft: DNS queries to dnsmasq in srv over IPv4 and IPv6, and the namespace's
# resolv.conf that loft writes.
. "$(dirname "$0")/lib.sh"

topo_up
start_dns

CASES="dns-udp-v4 dns-udp-v6 dns-resolv-conf dns-50-queries loft-exit-clean"
require_loft "$(loft_config dns)" $CASES || finish

dig_is() {          # dig_is NAME WANT DIG-ARGS...
    local name=$1 want=$2 got
    shift 2
    got=$(in_app dig +short +time=2 +tries=2 "$@" 2>&1)
    if [ "$got" = "$want" ]; then pass "$name"; else fail "$name" "dig $*: '$got', want '$want'"; fi
}

dig_is dns-udp-v4 "$DNS_A" "@$SRV4" "$DNS_NAME" A
dig_is dns-udp-v6 "$DNS_AAAA" "@$SRV6" "$DNS_NAME" AAAA

# loft writes /etc/netns/<ns>/resolv.conf; ip netns exec puts it over /etc/resolv.conf.
rc=/etc/netns/$APP_NS/resolv.conf
if ! grep -qx "nameserver $SRV4" "$rc" 2>/dev/null; then
    fail dns-resolv-conf "$rc: $(cat "$rc" 2>&1 | tr '\n' '|')"
else
    dig_is dns-resolv-conf "$DNS_A" "$DNS_NAME" A
fi

# 50 queries, each from a new socket (a new UDP association), alternating families.
bad=0; first=
for i in $(seq 50); do
    if [ $((i % 2)) -eq 0 ]; then s=$SRV4 t=A w=$DNS_A; else s=$SRV6 t=AAAA w=$DNS_AAAA; fi
    got=$(in_app dig +short +time=2 +tries=1 "@$s" "$DNS_NAME" $t 2>&1)
    if [ "$got" != "$w" ]; then bad=$((bad + 1)); [ -z "$first" ] && first="@$s $t: '$got'"; fi
done
if [ $bad -eq 0 ]; then pass dns-50-queries; else fail dns-50-queries "$bad of 50 failed; first: $first"; fi

loft_stop_clean loft-exit-clean
finish
