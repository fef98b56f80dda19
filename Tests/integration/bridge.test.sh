#!/usr/bin/env bash
# The raw-IP UDP bridge with a real peer: socat turns a TUN in its own namespace into a bridge
# client (one datagram = one IP packet). Downloads with SHA-256, DNS, IPv6; replies never cross
# between the bridge and loft's own TUN; the peer stops and restarts; malformed datagrams from a
# raw sender are all counted as drops while a real transfer completes intact. Needs root.
. "$(dirname "$0")/lib.sh"

topo_up
make_files 50
start_nginx 1 4096
start_dns
start_sink

. "$(dirname "$0")/bridge-peer.sh"

bridge_config bridge
cfg=$T_DIR/bridge.yaml

CASES="bridge-download-v4 bridge-download-v6 bridge-upload-v4 bridge-acks-coalesced bridge-dns bridge-replies-stay-on-their-input
bridge-peer-restart bridge-malformed-counted bridge-transfer-during-garbage loft-exit-clean"
# loft first: socat itself gives up when its first read meets ECONNREFUSED. (loft does not:
# the restart case below stops and starts the peer under a running loft.)
require_loft "$cfg" $CASES || finish
peer_up || die "socat peer did not come up: $(cat "$T_DIR/socat.log")"

BIG_SHA=$(sha_of "$T_DIR/www/big")
DL_NS=$PEER_NS DL_SECONDS=60 download bridge-download-v4 "http://$SRV4/big"
DL_NS=$PEER_NS DL_SECONDS=60 download bridge-download-v6 "http://[$SRV6]/big"

# An upload: the stack ACKs the peer's segments, and a bare ACK queued right behind another of
# the same flow replaces it (counted), so the bytes must still arrive whole and in order.
bridge_counter() {  # bridge_counter NAME: one of the bridge row's counters from `loft status --json`
    "$LOFT_BIN" status -c "$cfg" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print([i for i in d["inputs"] if i["name"] == "bridge"][0]["counters"][sys.argv[1]])' "$1"
}
acks_before=$(bridge_counter acks-coalesced); t0=$(now_ms)
got=$(in_peer timeout 60 socat -t 30 - "TCP4:$SRV4:9000" <"$T_DIR/www/big" | cut -d' ' -f1)
if [ "$got" = "$(sha_of "$T_DIR/www/big")" ]; then pass bridge-upload-v4; note "bridge-upload-v4: 50 MiB in $(( $(now_ms) - t0 )) ms"
else fail bridge-upload-v4 "sha256 '$got'"; fi
acks_after=$(bridge_counter acks-coalesced)
if [ "$acks_after" -gt "$acks_before" ] 2>/dev/null; then
    pass bridge-acks-coalesced; note "acks-coalesced during the 50 MiB upload: $((acks_after - acks_before))"
else
    fail bridge-acks-coalesced "acks-coalesced $acks_before -> $acks_after"
fi

got=$(in_peer dig +short +time=2 +tries=2 "@$SRV4" "$DNS_NAME" A 2>&1)
if [ "$got" = "$DNS_A" ]; then pass bridge-dns; else fail bridge-dns "dig: '$got'"; fi

# Replies stay on their input: during a bridge transfer loft's TUN (in the app namespace)
# receives almost nothing, and during a TUN transfer the peer's TUN receives almost nothing.
rx() { ip -n "$1" -s link show "$2" | awk '/RX:/{getline; print $2; exit}'; }
tun_before=$(rx "$APP_NS" "$TUN_NAME"); peer_before=$(rx "$PEER_NS" "$PEER_TUN")
in_peer curl -sS -o /dev/null --max-time 60 "http://$SRV4/big"; e1=$?
tun_after=$(rx "$APP_NS" "$TUN_NAME")
in_app curl -sS -o /dev/null --max-time 60 "http://$SRV4/big"; e2=$?
peer_after=$(rx "$PEER_NS" "$PEER_TUN")
# The peer's count includes the first transfer (~36k packets); the second must add little.
tun_delta=$((tun_after - tun_before)); peer_delta=$((peer_after - peer_before))
if [ $e1 -eq 0 ] && [ $e2 -eq 0 ] && [ $tun_delta -lt 20 ] && [ $peer_delta -gt 30000 ]; then
    peer_mid=$peer_after
    pass bridge-replies-stay-on-their-input
else
    fail bridge-replies-stay-on-their-input "curl $e1/$e2, TUN got $tun_delta packets during the bridge transfer, peer $peer_delta"
fi

# The peer goes away and comes back: loft keeps its socket and carries on.
peer_down
sleep 1
peer_up || fail bridge-peer-restart "socat did not come back"
got=$(in_peer curl -sS -g --max-time 30 "http://$SRV4/small" | sha256sum | cut -d' ' -f1)
if kill -0 "$LOFT_PID" 2>/dev/null && [ "$got" = "$(sha_of "$T_DIR/www/small")" ]; then
    pass bridge-peer-restart
else
    fail bridge-peer-restart "loft alive: $(kill -0 "$LOFT_PID" 2>/dev/null && echo yes || echo no), sha $got"
fi

# Malformed input from a raw sender bound to the peer port (the real peer is stopped for it),
# while a real 50 MiB transfer runs through loft's TUN at the same time.
peer_down
cat >"$T_DIR/garbage.py" <<'EOF'
import os, random, socket, struct, sys
ext, peer, n_random = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", peer))
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
def ipv4(payload, proto=6, total=None, ihl=5, cs=None, frag=0):
    tl = total if total is not None else 20 + len(payload)
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, tl, 1, frag, 64, proto, 0,
                    bytes([198, 18, 2, 1]), bytes([198, 18, 1, 2]))
    c = csum(h) if cs is None else cs
    return h[:10] + struct.pack("!H", c) + h[12:] + payload
def tcp(sport=1000, dport=80, flags=0x02, good=True):
    seg = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, flags, 65535, 0, 0)
    pseudo = bytes([198, 18, 2, 1, 198, 18, 1, 2]) + struct.pack("!BBH", 0, 6, len(seg))
    c = csum(pseudo + seg) if good else 0x1234
    return seg[:16] + struct.pack("!H", c) + seg[18:]
crafted = [
    b"",                                            # empty
    b"\x45",                                        # truncated IPv4
    bytes([0x55]) + os.urandom(39),                 # version 5
    bytes([0x00]) + os.urandom(39),                 # version 0
    ipv4(tcp(), total=200),                         # total length > datagram
    ipv4(tcp(), total=30),                          # total length < datagram
    ipv4(tcp(), ihl=4),                             # header length < 20
    ipv4(tcp(), cs=0xdead),                         # bad header checksum
    ipv4(tcp(good=False)),                          # bad TCP checksum
    ipv4(tcp()[:10]),                               # truncated TCP header
    ipv4(b"\x00" * 8, proto=17),                    # UDP length 0
    bytes([0x60]) + os.urandom(20),                 # truncated IPv6
    bytes([0x60, 0, 0, 0, 0, 200, 6, 64]) + os.urandom(32) + b"x" * 10,   # v6 payload length lies
    ipv4(b"A" * 1600),                              # larger than bridge.mtu
]
for p in crafted:
    s.sendto(p, ("127.0.0.1", ext))
rnd = random.Random(7)
for i in range(n_random):
    s.sendto(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 200))), ("127.0.0.1", ext))
# From another port: the connected socket never even sees these.
o = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(100):
    o.sendto(ipv4(tcp(good=False)), ("127.0.0.1", ext))
print(len(crafted) + n_random)
EOF
in_app curl -sS -o "$T_DIR/during" --max-time 90 "http://$SRV4/big" &
curl_pid=$!
sent=$(python3 "$T_DIR/garbage.py" "$EXT_PORT" "$PEER_PORT" 10000)
wait $curl_pid; curl_rc=$?
if [ $curl_rc -eq 0 ] && [ "$(sha_of "$T_DIR/during")" = "$(sha_of "$T_DIR/www/big")" ] && kill -0 "$LOFT_PID" 2>/dev/null; then
    pass bridge-transfer-during-garbage
else
    fail bridge-transfer-during-garbage "curl exit $curl_rc, loft alive: $(kill -0 "$LOFT_PID" 2>/dev/null && echo yes || echo no)"
fi
sleep 0.5

# Stop loft; its exit summary lists the bridge's drops by reason. Every garbage datagram
# (sent=crafted+random) must be counted as a drop; the 100 from a foreign port never arrive.
if loft_stop TERM; then
    line=$(grep 'event=input.stats input=bridge' "$LOFT_LOG")
    # Malformed reasons only: the real peer's own IPv6 multicast (router solicitations) is
    # dropped too, under "multicast".
    drops=$(echo "$line" | tr ' ' '\n' |
        awk -F= '/^drop_(truncated|bad-version|bad-length|bad-checksum|too-large)=/{s+=$2} END{print s+0}')
    if [ "$drops" -eq "$sent" ]; then
        pass bridge-malformed-counted
    else
        fail bridge-malformed-counted "sent $sent malformed datagrams, loft counted $drops drops: $line"
    fi
    left=$(loft_leftovers "$APP_NS" "$TUN_NAME" yes)
    if [ -z "$left" ]; then pass loft-exit-clean; else fail loft-exit-clean "$left"; fi
else
    fail bridge-malformed-counted "loft exit status $LOFT_RC"
    fail loft-exit-clean "loft exit status $LOFT_RC"
fi
finish
