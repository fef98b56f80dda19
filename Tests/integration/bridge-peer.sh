# A bridge peer for the bridge, capture and sstp tests: socat turns a TUN (198.18.2.1/24,
# fd00:2::1/64) in its own namespace into a bridge client (one datagram = one IP packet).
# The caller may set PEER_NS, PEER_TUN, EXT_PORT (loft's bridge port) and PEER_PORT (socat's)
# before sourcing this (each has a default from the test's id): the namespace is made (and
# removed with the test's), and peer_up / peer_down start and stop socat; in_peer runs a
# command in the peer's namespace.
PEER_NS=${PEER_NS:-loft-peer-$T_ID}
PEER_TUN=${PEER_TUN:-lpeer$((T_ID % 100000))}
EXT_PORT=${EXT_PORT:-$((30000 + T_ID % 10000))}
PEER_PORT=${PEER_PORT:-$((EXT_PORT + 10000))}
SOCAT_PID=
ip netns add "$PEER_NS" && T_NETNS+=("$PEER_NS") && register netns "$PEER_NS"
ip -n "$PEER_NS" link set lo up

# socat runs in the root namespace (its UDP socket must reach loft on the host's loopback);
# its TUN is then moved into the peer namespace, where the open fd keeps working.
peer_up() {
    socat "TUN:198.18.2.1/24,tun-type=tun,iff-no-pi,tun-name=$PEER_TUN" \
        "UDP:127.0.0.1:$EXT_PORT,bind=127.0.0.1:$PEER_PORT" >"$T_DIR/socat.log" 2>&1 &
    SOCAT_PID=$!
    T_PIDS+=("$SOCAT_PID"); register_pid "$SOCAT_PID"
    local i
    # Until socat has given the device its address, and a moment for its flags ioctls that
    # follow (moving it earlier fails them: "SIOCGIFFLAGS ... No such device").
    for i in $(seq 50); do ip -4 addr show dev "$PEER_TUN" 2>/dev/null | grep -q 'inet ' && break; sleep 0.1; done
    sleep 0.2
    ip link set "$PEER_TUN" netns "$PEER_NS" || return 1
    ip -n "$PEER_NS" addr add 198.18.2.1/24 dev "$PEER_TUN"
    ip -n "$PEER_NS" -6 addr add fd00:2::1/64 dev "$PEER_TUN" nodad
    ip -n "$PEER_NS" link set "$PEER_TUN" up
    ip -n "$PEER_NS" route add default dev "$PEER_TUN"
    ip -n "$PEER_NS" -6 route add default dev "$PEER_TUN"
}
peer_down() { [ -n "$SOCAT_PID" ] && kill_pid "$SOCAT_PID"; SOCAT_PID=; }
in_peer() { ip netns exec "$PEER_NS" "$@"; }
# bridge_config NAME: loft's config with the bridge on for this peer (MTU 1500) and a control
# socket of its own ($T_DIR/NAME.sock: `loft status -c` must reach this loft, not another one
# on the machine that holds the default path), written to $T_DIR/NAME.yaml.
bridge_config() {
    loft_config "$1-base" >/dev/null
    sed "s/^bridge: off/bridge: { peer-port: $PEER_PORT, extension-port: $EXT_PORT, mtu: 1500 }/" \
        "$T_DIR/$1-base.yaml" >"$T_DIR/$1.yaml"
    echo "control: $T_DIR/$1.sock" >>"$T_DIR/$1.yaml"
}
