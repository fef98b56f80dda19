# Shared by holder.test.sh, h2.test.sh, quic.test.sh and h3.test.sh (sourced after lib.sh, never
# run): the topology and servers, loft-front on 127.0.0.1 (front_start, front_kill), the holder's
# config (holder_config) and the data-path checks each carrier runs.

FRONT_PORT=$((20000 + T_ID % 20000))
CTL=/run/loft/holder-test-$T_ID.sock

topo_up
make_files 50
head -c $((50 * 1048576)) /dev/urandom >"$T_DIR/up"
start_nginx 1 4096
start_sink
start_dns
bash "$(dirname "$0")/../interop/gen-certs.sh" "$T_DIR/pki" >/dev/null || die "test PKI"
BIG_SHA=$(sha_of "$T_DIR/www/big")
UP_SHA=$(sha_of "$T_DIR/up")

cat >"$T_DIR/front.yaml" <<EOF
log: info
listen: 127.0.0.1:$FRONT_PORT
tls: { certificate: $T_DIR/pki/server.pem, key: $T_DIR/pki/server.key }
tokens: ["holder-test-token"]
pool: { ipv4: 198.18.64.0/24, ipv6: "fd00:64::/64" }
mtu: 1400
dns: [$SRV4]
keepalive: 2s
instance-expiry: 10m
state-file: $T_DIR/front.state
EOF

# front_start: loft-front from FRONT_CFG ($T_DIR/front.yaml), until it is ready (lib.sh's front_run).
front_start() { front_run "${FRONT_CFG:-$T_DIR/front.yaml}"; }
front_kill() { [ -n "$FRONT_PID" ] && kill -KILL "$FRONT_PID" 2>/dev/null; wait "$FRONT_PID" 2>/dev/null; FRONT_PID=; }

# holder_config NAME CARRIER [top-level yaml ...]: a namespace config whose default is the holder
# (FRONT_HOST, PORT, TOKEN and QUIC_MAX_PACKET, the outbound's quic-max-packet, from the environment).
holder_config() {
    local name=$1 carrier=$2 token=${TOKEN:-holder-test-token} port=${PORT:-$FRONT_PORT}
    shift 2
    loft_config "$name" idle=2h >/dev/null
    # A failure here prints no path, so the caller's loft does not start on the direct config.
    python3 - "$T_DIR/$name.yaml" "$carrier" "$token" "$port" "$T_DIR/pki/ca.pem" "$CTL" "$@" <<'EOF' || return 1
import sys
path, carrier, token, port, ca, ctl, *extra = sys.argv[1:]
text = open(path).read().replace("default: direct\n", "")
socks = __import__("os").environ.get("SOCKS_PORT")
packet = __import__("os").environ.get("QUIC_MAX_PACKET")
packet = "    quic-max-packet: %s\n" % packet if packet else ""
if socks:
    text = text.replace("socks5: off\n", "socks5: { listen: 127.0.0.1:%s }\n" % socks)
text += f"""outbounds:
  - name: home
    type: loft
    server: {__import__("os").environ.get("FRONT_HOST", "127.0.0.1")}:{port}
    carrier: {carrier}
    token: {token}
    tls: {{ server-name: front.test, ca: {ca} }}
{packet}default: home
control: {ctl}
"""
for line in extra:
    text += line + "\n"
open(path, "w").write(text)
EOF
    echo "$T_DIR/$name.yaml"
}

wait_state() {       # wait_state STATE SECONDS
    local i
    for i in $(seq $(($2 * 10))); do [ "$(field 'o["state"]')" = "$1" ] && return 0; sleep 0.1; done
    return 1
}
instance() { grep -o 'instance=[0-9a-f]*' "$LOFT_LOG" | tail -1 | cut -d= -f2; }
tun_addr4() { ip -n "$APP_NS" -4 addr show dev "$TUN_NAME" | awk '/inet /{print $2}' | head -1; }

# carrier_mark: "UP DOWN DIRECT" now: the home outbound's bytes_up and bytes_down and the direct
# outbound's flows_total (`loft status --json`); empty if loft does not answer.
carrier_mark() {
    "$LOFT_BIN" status --json -c "$LOFT_CFG" 2>/dev/null | python3 -c '
import json, sys
o = {x["name"]: x for x in json.load(sys.stdin)["outbounds"]}
print(o["home"]["bytes_up"], o["home"]["bytes_down"], o["direct"]["flows_total"])' 2>/dev/null
}
# With CARRIED set, lib.sh's download and upload also check that the bytes crossed the carrier.
CARRIED=1

# carried MARK UP DOWN: since MARK (carrier_mark's line) the home outbound carried at least UP
# bytes up and DOWN bytes down, and no flow went direct: the transfer crossed the carrier, not
# the direct fallback a session that died after session-up leaves (hold is off in these
# configs). Read for up to 3 s (the last bytes are counted as they are relayed); on failure
# CARRIED_WHY says what was seen.
carried() {
    local m0 m1 i
    read -ra m0 <<<"$1"
    CARRIED_WHY="loft status gave no counters before the transfer"
    [ ${#m0[@]} -eq 3 ] || return 1
    for i in $(seq 30); do
        read -ra m1 <<<"$(carrier_mark)"
        if [ ${#m1[@]} -eq 3 ]; then
            CARRIED_WHY="the home outbound carried $((m1[0] - m0[0])) bytes up, $((m1[1] - m0[1])) down (want >= $2, $3); direct flows ${m0[2]} -> ${m1[2]}"
            [ $((m1[0] - m0[0])) -ge "$2" ] && [ $((m1[1] - m0[1])) -ge "$3" ] && [ "${m1[2]}" = "${m0[2]}" ] && return 0
        else
            CARRIED_WHY="loft status gave no counters after the transfer"
        fi
        sleep 0.1
    done
    return 1
}

concurrent() {      # concurrent NAME N: N transfers of 256 KiB at once (rate-limited, so they overlap), over the carrier
    local name=$1 n=$2 bad=0 first= i m0
    m0=$(carrier_mark)
    rm -rf "$T_DIR/c"; mkdir -p "$T_DIR/c"
    in_app bash -c '
        dir=$1 v4=$2 v6=$3 n=$4
        for i in $(seq 0 $((n - 1))); do
            if [ $((i % 2)) -eq 0 ]; then host=$v4; else host="[$v6]"; fi
            curl -gsS --max-time 60 -o "$dir/$i" "http://$host/slow/f$((i % 8))" 2>"$dir/$i.err" &
        done
        wait' _ "$T_DIR/c" "$SRV4" "$SRV6" "$n"
    for i in $(seq 0 $((n - 1))); do
        if [ "$(sha_of "$T_DIR/c/$i" 2>/dev/null)" != "$(sha_of "$T_DIR/www/f$((i % 8))")" ]; then
            bad=$((bad + 1))
            [ -z "$first" ] && first="#$i: $(tail -1 "$T_DIR/c/$i.err" 2>/dev/null)"
        fi
    done
    if [ $bad -ne 0 ]; then fail "$name" "$bad of $n wrong or failed; first: $first"
    elif carried "$m0" 1 $((n * 262144)); then pass "$name"
    else fail "$name" "all $n intact, but not over the carrier: $CARRIED_WHY"; fi
}

dns() {             # dns NAME SERVER TYPE WANT: the answer, over the carrier
    local got m0
    m0=$(carrier_mark)
    got=$(in_app dig +short +time=2 +tries=2 "@$2" "$DNS_NAME" "$3" 2>&1 | head -1)
    if [ "$got" != "$4" ]; then fail "$1" "dig @$2 $DNS_NAME $3: '$got' (want $4)"
    elif carried "$m0" 20 20; then pass "$1"
    else fail "$1" "answer right, but not over the carrier: $CARRIED_WHY"; fi
}

# hold_checks CARRIER [PREFIX]: `hold: true` fails closed while the session is down. The front
# is killed; the app's TCP connects and a DNS query are dropped inside loft (hold-drops counted,
# no flow on direct, no packet reaches srv in a capture), and traffic flows again once the front
# is back. Cases PREFIXhold-no-leak-counters, -no-leak-capture, -traffic-back, -exit-clean.
hold_checks() {
    local carrier=$1 p=${2:-} drops direct seen cases
    LOFT_CFG=$(holder_config "holder-${p}hold" "$carrier" "hold: true")
    cases="${p}hold-no-leak-counters ${p}hold-no-leak-capture ${p}hold-traffic-back ${p}hold-exit-clean"
    require_loft "$LOFT_CFG" $cases || return 0
    wait_state up 15
    front_kill
    # A carrier over TCP sees the connection end; quic notices the dead front by keepalive
    # (2 s intervals) or QUIC's idle timeout, whichever comes first.
    wait_state held 10 || note "state after kill: $(field 'o["state"]')"
    in_srv timeout 8 tcpdump -ni "$VETH_SRV" -w "$T_DIR/${p}hold.pcap" "tcp port 80 or udp port 53" >/dev/null 2>&1 &
    local dump=$!
    sleep 1
    in_app curl -gs --max-time 3 -o /dev/null "http://$SRV4/index.html"; in_app curl -gs --max-time 3 -o /dev/null "http://[$SRV6]/index.html"
    in_app dig +short +time=1 +tries=1 "@$SRV4" "$DNS_NAME" >/dev/null 2>&1
    sleep 1
    kill -INT "$dump" 2>/dev/null; wait "$dump" 2>/dev/null
    drops=$(field 'c["hold-drops"]')
    direct=$("$LOFT_BIN" status --json -c "$LOFT_CFG" | python3 -c '
import json, sys; s = json.load(sys.stdin); print(next(x for x in s["outbounds"] if x["name"] == "direct")["flows_total"])')
    if [ "${drops:-0}" -ge 2 ] && [ "$direct" = 0 ]; then pass "${p}hold-no-leak-counters"; note "${p}hold: $drops flows/datagrams dropped"
    else fail "${p}hold-no-leak-counters" "hold-drops $drops, direct flows $direct, state $(field 'o["state"]')"; fi
    seen=$(tcpdump -nr "$T_DIR/${p}hold.pcap" 2>/dev/null | wc -l)
    if [ -s "$T_DIR/${p}hold.pcap" ] && [ "$seen" -eq 0 ]; then pass "${p}hold-no-leak-capture"
    else fail "${p}hold-no-leak-capture" "$seen packets reached srv while the session was down"; fi
    front_start
    if wait_state up 20 && in_app curl -gsf --max-time 10 -o /dev/null "http://$SRV4/index.html"; then pass "${p}hold-traffic-back"
    else fail "${p}hold-traffic-back" "state $(field 'o["state"]'), curl failed"; fi
    loft_stop_clean "${p}hold-exit-clean"
}

# session_up_check P DETAIL [MTU]: the holder comes up (15 s) and its STATUS set the TUN: an
# overlay address in 198.18.64.0/24, the default route via 198.18.64.1, the outbound's detail
# matching the pattern DETAIL; with MTU, also the TUN's mtu MTU and the front's DNS server in the
# namespace's resolv.conf. Case Psession-up.
session_up_check() {
    local p=$1 detail=$2 want_mtu=${3:-} a4 r mtu=
    if wait_state up 15; then
        a4=$(tun_addr4); r=$(ip -n "$APP_NS" route show default)
        [ -n "$want_mtu" ] && mtu=$(ip -n "$APP_NS" link show "$TUN_NAME" | grep -o 'mtu [0-9]*')
        if [[ $a4 == 198.18.64.* && $r == *"via 198.18.64.1"* ]] \
            && { [ -z "$want_mtu" ] || { [ "$mtu" = "mtu $want_mtu" ] && grep -q "nameserver $SRV4" "/etc/netns/$APP_NS/resolv.conf"; }; } \
            && [[ $(field 'o["detail"]') == $detail ]]; then
            pass "${p}session-up"; note "${p%-}: overlay $a4, $r${mtu:+, $mtu}; $(field 'o["detail"]')"
        else
            fail "${p}session-up" "TUN not set from STATUS: addr $a4, route '$r', ${mtu:+$mtu, }detail $(field 'o["detail"]')"
        fi
    else
        fail "${p}session-up" "outbound not up: state $(field 'o["state"]'), $(field 'o["detail"]')"
    fi
}

# carrier_data_checks CARRIER DETAIL: a holder over CARRIER (SOCKS5 input too): its session up
# with the front's STATUS on the TUN (MTU 1400, the outbound's detail matching DETAIL), the data
# path (data_checks), SOCKS5 through the holder (counted by it), no flow direct, a clean exit.
# Cases CARRIER-session-up, -download-v4-50MiB, -download-v6-50MiB, -upload-v4-50MiB,
# -upload-v6-50MiB, -concurrent-100, -dns-v4, -dns-v6, -socks5-via-holder, -nothing-direct,
# -exit-clean.
carrier_data_checks() {
    local carrier=$1 f0 got direct
    SPORT=$((FRONT_PORT + 3))
    LOFT_CFG=$(SOCKS_PORT=$SPORT holder_config "holder-$carrier" "$carrier")
    CASES="$carrier-session-up $carrier-download-v4-50MiB $carrier-download-v6-50MiB $carrier-upload-v4-50MiB
$carrier-upload-v6-50MiB $carrier-concurrent-100 $carrier-dns-v4 $carrier-dns-v6 $carrier-socks5-via-holder $carrier-nothing-direct $carrier-exit-clean"
    require_loft "$LOFT_CFG" $CASES || return 0
    session_up_check "$carrier-" "$2" 1400
    data_checks "$carrier-"
    # The SOCKS5 input takes the same router: CONNECT through the holder, counted by it.
    f0=$(field 'o["flows_total"]')
    got=$(curl -sS --max-time 60 --socks5 "127.0.0.1:$SPORT" "http://$SRV4/big" 2>"$T_DIR/curl.err" | sha256sum | cut -d' ' -f1)
    if [ "$got" = "$BIG_SHA" ] && [ "$(field 'o["flows_total"]')" -gt "${f0:-0}" ]; then pass "$carrier-socks5-via-holder"
    else fail "$carrier-socks5-via-holder" "sha256 $got, flows $f0 -> $(field 'o["flows_total"]'): $(tail -1 "$T_DIR/curl.err")"; fi
    direct=$("$LOFT_BIN" status --json -c "$LOFT_CFG" | python3 -c '
import json, sys; s = json.load(sys.stdin); print(next(x for x in s["outbounds"] if x["name"] == "direct")["flows_total"])')
    if [ "$direct" = 0 ]; then pass "$carrier-nothing-direct"
    else fail "$carrier-nothing-direct" "$direct flows went direct, not over the carrier"; fi
    loft_stop_clean "$carrier-exit-clean"
}

# data_checks P [STREAMS]: the data path through the session: 50 MiB down and up over IPv4 and
# IPv6 (SHA-256 on both ends), 100 concurrent transfers, DNS over IPv4 and IPv6. Cases
# Pdownload-v4-50MiB, -download-v6-50MiB, -upload-v4-50MiB, -upload-v6-50MiB, -concurrent-100,
# -dns-v4, -dns-v6; with STREAMS (what a flow's stream is called in the note), also
# Pflows-on-own-streams: the 100 transfers took 100 more flow streams.
data_checks() {
    local p=$1 streams=${2:-} f0 f1
    download "${p}download-v4-50MiB" "http://$SRV4/big"
    download "${p}download-v6-50MiB" "http://[$SRV6]/big"
    upload "${p}upload-v4-50MiB" "$SRV4"
    upload "${p}upload-v6-50MiB" "$SRV6"
    if [ -n "$streams" ]; then f0=$(field 'c["flow-streams"]'); fi
    concurrent "${p}concurrent-100" 100
    if [ -n "$streams" ]; then
        f1=$(field 'c["flow-streams"]')
        if [ $((f1 - f0)) -ge 100 ]; then pass "${p}flows-on-own-streams"; note "TCP flows on $streams of their own: $f0 -> $f1"
        else fail "${p}flows-on-own-streams" "flow-streams $f0 -> $f1 over 100 transfers"; fi
    fi
    dns "${p}dns-v4" "$SRV4" A "$DNS_A"
    dns "${p}dns-v6" "$SRV6" AAAA "$DNS_AAAA"
}

# resume_checks P: loft-front killed (SIGKILL) and restarted: the session resumes with the same
# instance and overlay address, and a 50 MiB download goes through after it. Cases
# Presume-after-front-kill, Presume-same-overlay, Ptransfer-after-resume. Sets A0, the overlay
# address before the kill.
resume_checks() {
    local p=$1 id0 id1 a1 res
    id0=$(instance); A0=$(tun_addr4)
    front_kill
    wait_state down 10 || note "state after kill: $(field 'o["state"]')"
    front_start
    if wait_state up 20; then
        id1=$(instance); a1=$(tun_addr4); res=$(field 'c["resumes"]')
        if [ "$id1" = "$id0" ] && [ "${res:-0}" -ge 1 ]; then pass "${p}resume-after-front-kill"
        else fail "${p}resume-after-front-kill" "instance $id0 -> $id1, resumes $res"; fi
        if [ "$a1" = "$A0" ]; then pass "${p}resume-same-overlay"; else fail "${p}resume-same-overlay" "address $A0 -> $a1"; fi
    else
        fail "${p}resume-after-front-kill" "not up again after the restart: $(field 'o["detail"]')"
        fail "${p}resume-same-overlay" "not up"
    fi
    download "${p}transfer-after-resume" "http://$SRV4/big"
}

# migration_checks P [ADDR]: `loft path-changed` in the middle of a 50 MiB download over a
# carrier on QUIC: the connection migrates to a new socket (path validation), the session and
# the download's stream carry on (no RESUME, no carrier loss, still up; with ADDR, the overlay
# address is still ADDR). Cases Pdownload-across-migration, Ppath-changed-migrates.
migration_checks() {
    local p=$1 addr=${2:-} r0 l0 m0 m1 pc
    r0=$(field 'c["resumes"]'); l0=$(field 'c["carrier-losses"]'); m0=$(field 'c["migrations"]')
    ( sleep 1; "$LOFT_BIN" path-changed -c "$LOFT_CFG" >"$T_DIR/path-changed.out" 2>&1 ) &
    pc=$!
    download "${p}download-across-migration" "http://$SRV4/big" --limit-rate 25M
    wait "$pc" 2>/dev/null
    m1=$(field 'c["migrations"]')
    # What path-changed says is what it does: it migrates (issue 30: it said "redialling with RESUME").
    if [ "$m1" = $((m0 + 1)) ] && [ "$(field 'c["resumes"]')" = "$r0" ] && [ "$(field 'c["carrier-losses"]')" = "$l0" ] \
        && grep -q '^home: migrating the connection to the new path' "$T_DIR/path-changed.out" \
        && [ "$(field 'o["state"]')" = up ] && { [ -z "$addr" ] || [ "$(tun_addr4)" = "$addr" ]; }; then
        pass "${p}path-changed-migrates"; note "path-changed: migrations $m0 -> $m1, resumes $r0, carrier-losses $l0"
    else
        fail "${p}path-changed-migrates" "migrations $m0 -> $m1, resumes $r0 -> $(field 'c["resumes"]'), losses $l0 -> $(field 'c["carrier-losses"]'), state $(field 'o["state"]'), said: $(tr '\n' '|' <"$T_DIR/path-changed.out")"
    fi
}

# beside_check CARRIER OTHER ALPN: a holder over CARRIER on the front's port that also serves
# OTHER comes up with ALPN and carries a request. Cases CARRIER-beside-OTHER, -exit-clean.
beside_check() {
    local name=$1-beside-$2 alpn=$3
    LOFT_CFG=$(holder_config "holder-$1" "$1")
    require_loft "$LOFT_CFG" "$name" "$name-exit-clean" || return 0
    if wait_state up 15 && in_app curl -gsf --max-time 10 -o /dev/null "http://$SRV4/index.html" \
        && [[ $(field 'o["detail"]') == *"alpn=$alpn"* ]]; then pass "$name"
    else fail "$name" "state $(field 'o["state"]'), $(field 'o["detail"]')"; fi
    loft_stop_clean "$name-exit-clean"
}

# resume_in_flight_checks: with the holder up, loft-front is killed (SIGKILL) while a transfer is
# in flight (it may reset: streams do not survive a resume in this version) and restarted: the
# session resumes with the same instance and overlay address, a 50 MiB download goes through,
# then `loft path-changed` resumes it again. Cases resume-after-front-kill, resume-same-overlay,
# transfer-after-resume, path-changed-resume. Sets id0 and a0, the instance and the overlay
# address before the kill.
resume_in_flight_checks() {
    wait_state up 15
    id0=$(instance); a0=$(tun_addr4)
    in_app curl -gs --max-time 30 --limit-rate 2M -o /dev/null "http://$SRV4/big" &
    CURL=$!
    sleep 1
    front_kill
    wait_state down 10 || note "state after kill: $(field 'o["state"]')"
    front_start
    if wait_state up 20; then
        id1=$(instance); a1=$(tun_addr4); res=$(field 'c["resumes"]')
        if [ "$id1" = "$id0" ] && [ "${res:-0}" -ge 1 ]; then pass resume-after-front-kill
        else fail resume-after-front-kill "instance $id0 -> $id1, resumes $res"; fi
        if [ "$a1" = "$a0" ]; then pass resume-same-overlay; else fail resume-same-overlay "address $a0 -> $a1"; fi
    else
        fail resume-after-front-kill "not up again after the restart: $(field 'o["detail"]')"
        fail resume-same-overlay "not up"
    fi
    kill "$CURL" 2>/dev/null; wait "$CURL" 2>/dev/null
    download transfer-after-resume "http://$SRV4/big"

    r0=$(field 'c["resumes"]')
    "$LOFT_BIN" path-changed -c "$LOFT_CFG" >/dev/null 2>&1
    sleep 0.5
    if wait_state up 10 && [ "$(field 'c["resumes"]')" -gt "$r0" ] && [ "$(instance)" = "$id0" ] && [ "$(tun_addr4)" = "$a0" ]; then
        pass path-changed-resume
    else
        fail path-changed-resume "resumes $r0 -> $(field 'c["resumes"]'), state $(field 'o["state"]')"
    fi
}

# stall_checks: a front that stops answering (SIGSTOP: the TCP connection stays up, nothing is
# read or sent) is noticed within 2 keepalive intervals (the front's STATUS says 2 s), and the
# session resumes once it runs again (overlay a0). Cases keepalive-dead-carrier, resume-after-stall.
stall_checks() {
    l0=$(field 'c["carrier-losses"]'); r0=$(field 'c["resumes"]')
    kill -STOP "$FRONT_PID"; t0=$(now_ms); ok=
    for _ in $(seq 100); do [ "$(field 'c["carrier-losses"]')" -gt "$l0" ] && { ok=1; break; }; sleep 0.1; done
    ms=$(( $(now_ms) - t0 ))
    kill -CONT "$FRONT_PID"
    if [ -n "$ok" ] && [ $ms -le 6500 ]; then pass keepalive-dead-carrier; note "silent front noticed after $ms ms (keepalive 2 s)"
    else fail keepalive-dead-carrier "carrier-losses $l0 -> $(field 'c["carrier-losses"]') after $ms ms"; fi
    if wait_state up 30 && [ "$(field 'c["resumes"]')" -gt "$r0" ] && [ "$(tun_addr4)" = "$a0" ] \
        && in_app curl -gsf --max-time 10 -o /dev/null "http://$SRV4/index.html"; then pass resume-after-stall
    else fail resume-after-stall "state $(field 'o["state"]'), resumes $r0 -> $(field 'c["resumes"]')"; fi
}

# bad_token_checks CARRIER: a holder over CARRIER with the wrong token gets GOAWAY bad-token, one
# clear line on each side, and loft keeps running. Cases bad-token-goaway, bad-token-front-log,
# bad-token-exit-clean.
bad_token_checks() {
    LOFT_CFG=$(TOKEN=not-the-token holder_config holder-badtoken "$1")
    CASES="bad-token-goaway bad-token-front-log bad-token-exit-clean"
    if require_loft "$LOFT_CFG" $CASES; then
        ok=
        for _ in $(seq 50); do grep -q 'event=holder.goaway.*reason=bad-token' "$LOFT_LOG" && { ok=1; break; }; sleep 0.1; done
        if [ -n "$ok" ] && ! loft_died && [ "$(field 'o["state"]')" != up ]; then pass bad-token-goaway
        else fail bad-token-goaway "no GOAWAY bad-token in loft's log: $(grep holder "$LOFT_LOG" | tail -2 | tr '\n' '|')"; fi
        if grep -q 'event=session-refused.*reason=bad-token' "$FRONT_LOG"; then pass bad-token-front-log
        else fail bad-token-front-log "no event=session-refused reason=bad-token in loft-front's log"; fi
        loft_stop_clean bad-token-exit-clean
    fi
}
