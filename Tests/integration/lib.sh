# Shared helpers for loft's integration tests (sourced, never run).
#
# Topology (testing.md):
#   netns loft-app-<id> (made by loft)  ── TUN ──►  loft (root namespace)
#   root namespace  loft-<id>r 198.18.1.1/24 fd00:1::1/64
#        ══ veth ══ loft-<id>s 198.18.1.2/24 fd00:1::2/64  in netns loft-srv-<id>
#   servers in srv: nginx :80, sha256 sink :9000, echo :9001, dnsmasq :53, iperf3 :5201,
#   v2ray (VLESS + TLS) :8443
#
# Only 198.18.0.0/15 and fd00::/8 inside namespaces made here, and loopback, are ever used.
# Every namespace, veth, process and temp dir made here is removed by the EXIT trap, also on
# failure, timeout (SIGTERM) and Ctrl-C.

set -u

LOFT_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOFT_BIN=${LOFT_BIN:-$LOFT_REPO/.build/release/loft}

T_ID=$$
T_DIR=$(mktemp -d "/tmp/loft-test-$T_ID.XXXXXX")
chmod 755 "$T_DIR"
SRV_NS=loft-srv-$T_ID
APP_NS=loft-app-$T_ID
VETH_ROOT=loft-${T_ID}r
VETH_SRV=loft-${T_ID}s
# LOFT_TEST_NET=n moves the srv subnet to 198.18.n.0/24 and fd00:n::/64 (default 1, as in
# testing.md), for running beside another topology that already uses 198.18.1.0/24.
NET=${LOFT_TEST_NET:-1}
# Tests/run's lanes run at NET, NET+3, …: the subnets below sit at NET, NET+64, NET+100, NET+150
# and NET+160, none two of them 3 apart; a new one must keep so.
SRV_NET4=198.18.$NET.0/24
SRV_NET6=fd00:$NET::/64
SRV4=198.18.$NET.2
SRV6=fd00:$NET::2
ROOT4=198.18.$NET.1
ROOT6=fd00:$NET::1
TUN_NAME=loft0

T_PASS=0
T_FAIL=0
T_NETNS=()      # namespaces this test made (or that loft makes for it)
T_LINKS=()      # links in the root namespace this test made
T_PIDS=()       # background processes this test started
LOFT_PID=
LOFT_LOG=
LOFT_NS=
LOFT_TUN=
LOFT_RC=
T_HOOKS=()      # extra cleanup commands (on_cleanup)

# --- reporting ------------------------------------------------------------------------------

pass() { echo "PASS $1"; T_PASS=$((T_PASS + 1)); }
fail() { echo "FAIL $1: $2"; T_FAIL=$((T_FAIL + 1)); }
note() { echo "  # $*" >&2; }
die() { fail "${T_NAME:-setup}" "$*"; exit 1; }

# check NAME COMMAND...: PASS if the command exits 0, else FAIL with its last output line.
check() {
    local name=$1 out rc
    shift
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then pass "$name"; else fail "$name" "${out:-exit $rc}"; fi
    return $rc
}

# Print the summary and exit non-zero on any failure. Call as the last line of a test.
finish() {
    echo "# $(basename "$0"): $T_PASS passed, $T_FAIL failed" >&2
    [ "$T_FAIL" -eq 0 ] && [ "$T_PASS" -gt 0 ]
    exit $?
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# expect NAME SHELL-TEST WHY: PASS NAME if SHELL-TEST (eval'd) is true, else FAIL NAME: WHY.
expect() { if eval "$2"; then pass "$1"; else fail "$1" "$3"; fi; }

# fail_all WHY CASE...: every CASE fails with WHY (a part of the test that could not run).
fail_all() { local why=$1 c; shift; for c in "$@"; do fail "$c" "$why"; done; }

# relay FILE CASE...: the PASS/FAIL lines a python script printed into FILE become this test's;
# every CASE it did not report is a FAIL (the script died or was cut short: the tail of its
# stderr, FILE.err or RELAY_ERR, says why).
relay() {
    local file=$1 st name rest c
    shift
    while read -r st name rest; do
        case $st in
            PASS) pass "$name" ;;
            FAIL) fail "${name%:}" "$rest" ;;
        esac
    done <"$file"
    for c in "$@"; do
        grep -qE "^(PASS|FAIL) $c(:|$)" "$file" || fail "$c" "not reported (the script ended early: $(tail -2 "${RELAY_ERR:-$file.err}" 2>/dev/null | tr '\n' '|'))"
    done
}

# wait_log FILE PATTERN [SECONDS]: until FILE has a line matching PATTERN (10 s).
wait_log() {
    local i
    for i in $(seq $((${3:-10} * 10))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# A process's CPU time (user + system, in clock ticks) and resident memory (KiB) now. A process
# that is gone (or a zombie) reads as nothing, never as 0: a dead process must not measure as
# no CPU and no memory (and meet a "<= N" target).
CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null; }
rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$1/status" 2>/dev/null; }

# Keep a record of every name made, so that Tests/run can sweep up after a killed test.
register() {
    [ -n "${LOFT_TEST_REGISTRY:-}" ] && echo "$1 $2" >>"$LOFT_TEST_REGISTRY"
    return 0
}

# register_pid PID: also remember its start time, so a sweep never hits a reused PID.
register_pid() { register pid "$1 $(awk '{print $22}' "/proc/$1/stat" 2>/dev/null)"; }

# --- cleanup --------------------------------------------------------------------------------

kill_pid() {                        # kill_pid PID: TERM, wait up to 3 s, then KILL
    local p=$1 i
    kill -0 "$p" 2>/dev/null || return 0
    kill -TERM "$p" 2>/dev/null
    for i in $(seq 30); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    return 0
}

kill_netns_pids() {                 # every process inside a namespace this test made
    local ns=$1 p
    netns_exists "$ns" || return 0
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done
    sleep 0.2
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    return 0
}

cleanup() {
    local rc=$? p ns l
    trap '' INT TERM
    if [ -n "$LOFT_PID" ] && kill -0 "$LOFT_PID" 2>/dev/null; then
        kill -TERM "$LOFT_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$LOFT_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$LOFT_PID" 2>/dev/null
    fi
    for p in "${T_PIDS[@]}"; do kill_pid "$p"; done
    for p in "${T_HOOKS[@]}"; do eval "$p" 2>/dev/null; done
    for ns in "${T_NETNS[@]}"; do kill_netns_pids "$ns"; done
    for l in "${T_LINKS[@]}"; do ip link del "$l" 2>/dev/null; done
    for ns in "${T_NETNS[@]}"; do
        ip netns del "$ns" 2>/dev/null
        rm -rf "/etc/netns/$ns"
    done
    if [ -n "${LOFT_KEEP_LOGS:-}" ]; then      # keep loft's logs (and the servers') for a look
        mkdir -p "$LOFT_KEEP_LOGS" && cp "$T_DIR"/*.log "$LOFT_KEEP_LOGS"/ 2>/dev/null
    fi
    rm -rf "$T_DIR"
    exit $rc
}
# on_cleanup 'COMMAND': run COMMAND (eval) when the test exits.
on_cleanup() { T_HOOKS+=("$1"); }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- namespaces and links -------------------------------------------------------------------

in_srv() { ip netns exec "$SRV_NS" "$@"; }
in_app() { ip netns exec "$APP_NS" "$@"; }

netns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

# The server namespace and its veth to the root namespace.
topo_up() {
    local mtu=${1:-1500} r
    r=$(ip -4 route show "$SRV_NET4"; ip -6 route show "$SRV_NET6")
    [ -z "$r" ] || die "$SRV_NET4 / $SRV_NET6 already routed in the root namespace ($(echo "$r" | tr '\n' ';')): another topology is up; set LOFT_TEST_NET=<2..99> to use 198.18.<n>.0/24"
    T_NETNS+=("$SRV_NS"); register netns "$SRV_NS"
    T_LINKS+=("$VETH_ROOT"); register link "$VETH_ROOT"
    ip netns add "$SRV_NS" || die "ip netns add $SRV_NS"
    ip link add "$VETH_ROOT" mtu "$mtu" type veth peer name "$VETH_SRV" mtu "$mtu" netns "$SRV_NS" \
        || die "ip link add $VETH_ROOT"
    ip addr add "$ROOT4/24" dev "$VETH_ROOT"
    ip -6 addr add "$ROOT6/64" dev "$VETH_ROOT" nodad
    ip link set "$VETH_ROOT" up
    ip -n "$SRV_NS" link set lo up
    ip -n "$SRV_NS" addr add "$SRV4/24" dev "$VETH_SRV"
    ip -n "$SRV_NS" -6 addr add "$SRV6/64" dev "$VETH_SRV" nodad
    ip -n "$SRV_NS" link set "$VETH_SRV" up || die "srv veth up"
    # The app namespace is created by loft; make sure that whatever happens it is removed.
    T_NETNS+=("$APP_NS"); register netns "$APP_NS"
}

# Set the MTU of the root<->srv veth (both ends).
topo_mtu() {
    ip link set "$VETH_ROOT" mtu "$1"
    ip -n "$SRV_NS" link set "$VETH_SRV" mtu "$1"
}

# --- servers inside srv ---------------------------------------------------------------------

# wait_listen NS tcp|udp PORT [SECONDS]: until something listens on PORT inside NS.
wait_listen() {
    local ns=$1 proto=$2 port=$3 secs=${4:-10} i flag=-Hltn
    [ "$proto" = udp ] && flag=-Hlun
    for i in $(seq $((secs * 10))); do
        if ip netns exec "$ns" ss $flag "sport = :$port" 2>/dev/null | grep -q .; then return 0; fi
        sleep 0.1
    done
    return 1
}

# bg_in NS LOGNAME CMD...: start CMD inside NS in the background, remember its PID.
bg_in() {
    local ns=$1 logname=$2
    shift 2
    ip netns exec "$ns" "$@" >"$T_DIR/$logname.log" 2>&1 </dev/null &
    T_PIDS+=($!)
    LAST_PID=$!
    register_pid "$LAST_PID"
}

# Files served by nginx: big (50 MiB), small (4 KiB), f0..f7 (256 KiB each, under /slow too).
make_files() {
    local big_mib=${1:-50} i
    mkdir -p "$T_DIR/www/slow"
    head -c $((big_mib * 1048576)) /dev/urandom >"$T_DIR/www/big"
    head -c 4096 /dev/urandom >"$T_DIR/www/small"
    for i in 0 1 2 3 4 5 6 7; do
        head -c 262144 /dev/urandom >"$T_DIR/www/f$i"
        cp "$T_DIR/www/f$i" "$T_DIR/www/slow/f$i"
    done
    echo ok >"$T_DIR/www/index.html"
    chmod -R a+rX "$T_DIR/www"
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# nginx_temp_paths DIR: the http block's temp paths, all under DIR/tmp (nginx's defaults are
# outside the test's directory).
nginx_temp_paths() {
    printf '    %s_temp_path %s;\n' client_body "$1/tmp/body" proxy "$1/tmp/proxy" fastcgi "$1/tmp/fastcgi" \
        uwsgi "$1/tmp/uwsgi" scgi "$1/tmp/scgi"
}

# nginx on $SRV4:80 and [$SRV6]:80, root $T_DIR/www; /slow/ is rate limited so that
# many transfers overlap. Optional: worker count, worker_connections.
start_nginx() {
    local workers=${1:-1} conns=${2:-4096} d=$T_DIR/nginx
    mkdir -p "$d/tmp"
    cat >"$d/nginx.conf" <<EOF
worker_processes $workers;
worker_rlimit_nofile $((conns * 2 + 64));
pid $d/nginx.pid;
error_log $d/error.log warn;
daemon off;
events { worker_connections $conns; }
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    keepalive_requests 100000000;
$(nginx_temp_paths "$d")
    server {
        listen $SRV4:80 backlog=4096;
        listen [$SRV6]:80 backlog=4096;
        root $T_DIR/www;
        location /slow/ { limit_rate 128k; }
    }
}
EOF
    bg_in "$SRV_NS" nginx nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf"
    wait_listen "$SRV_NS" tcp 80 || die "nginx did not start: $(tail -3 "$d/error.log" 2>/dev/null)"
}

# bg_root NAME CMD...: start CMD in the background in the root namespace, log in $T_DIR/NAME.log;
# remember its PID (LAST_PID).
bg_root() {
    local name=$1
    shift
    "$@" >"$T_DIR/$name.log" 2>&1 </dev/null &
    LAST_PID=$!
    T_PIDS+=("$LAST_PID")
    register_pid "$LAST_PID"
}

# run_waited OUT CMD...: CMD in the background (so a SIGTERM to the test is handled at once
# and cleanup stops CMD), stdout to OUT, stderr to OUT.err; waits for it.
run_waited() {
    local out=$1 p
    shift
    "$@" >"$out" 2>"$out.err" </dev/null &
    p=$!
    T_PIDS+=("$p")
    register_pid "$p"
    wait "$p"
}

# wait_tcp PORT [SECONDS]: until something listens on PORT in the root namespace (10 s).
wait_tcp() {
    local i
    for i in $(seq $((${2:-10} * 10))); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.1
    done
    return 1
}

# download NAME URL [curl args]: a download in the namespace DL_NS (the app's), at most DL_SECONDS
# (120), whose SHA-256 must be BIG_SHA's; with CARRIED set (holder-lib.sh) the bytes must also
# have crossed the carrier (carried).
download() {
    local name=$1 url=$2 out=$T_DIR/dl.$1 t0 got size m0=
    shift 2
    [ -n "${CARRIED:-}" ] && m0=$(carrier_mark)
    t0=$(now_ms)
    if ! ip netns exec "${DL_NS:-$APP_NS}" curl -gsS --max-time "${DL_SECONDS:-120}" "$@" -o "$out" "$url" 2>"$T_DIR/curl.err"; then
        fail "$name" "curl $url: $(tail -1 "$T_DIR/curl.err")"; return 1
    fi
    got=$(sha_of "$out"); size=$(stat -c %s "$out")
    rm -f "$out"
    t0=$(( $(now_ms) - t0 ))
    if [ "$got" != "$BIG_SHA" ]; then
        fail "$name" "sha256 $got != served $BIG_SHA ($size bytes)"; return 1
    fi
    if [ -n "${CARRIED:-}" ] && ! carried "$m0" 1 "$size"; then
        fail "$name" "sha256 right, but not over the carrier: $CARRIED_WHY"; return 1
    fi
    pass "$name"; note "$name: $((size / 1048576)) MiB in $t0 ms"
}

# upload NAME HOST: $T_DIR/up to the sha256 sink on HOST from the app namespace, half-closed
# (Tests/tools/halfclose.py), at most UL_SECONDS (120); the sink's SHA-256 must be UP_SHA's; with
# CARRIED set the bytes must also have crossed the carrier.
upload() {
    local name=$1 host=$2 t0 reply m0=
    [ -n "${CARRIED:-}" ] && m0=$(carrier_mark)
    t0=$(now_ms)
    reply=$(in_app timeout "${UL_SECONDS:-120}" python3 "$LOFT_REPO/Tests/tools/halfclose.py" "$host" 9000 "$T_DIR/up" 2>&1)
    t0=$(( $(now_ms) - t0 ))
    if [ "${reply%% *}" != "$UP_SHA" ]; then
        fail "$name" "sink's sha256 '${reply:0:120}' != sent $UP_SHA"; return 1
    fi
    if [ -n "${CARRIED:-}" ] && ! carried "$m0" "$(stat -c %s "$T_DIR/up")" 1; then
        fail "$name" "sink's sha256 right, but not over the carrier: $CARRIED_WHY"; return 1
    fi
    pass "$name"; note "$name: 50 MiB in $t0 ms"
}

# TCP "sha256 sink" on :9000: reads until the client's FIN, answers "<sha256>  -", closes.
start_sink() {
    bg_in "$SRV_NS" sink4 socat -t 30 "TCP4-LISTEN:9000,bind=$SRV4,fork,reuseaddr" EXEC:sha256sum
    bg_in "$SRV_NS" sink6 socat -t 30 "TCP6-LISTEN:9000,bind=[$SRV6],fork,reuseaddr" EXEC:sha256sum
    wait_listen "$SRV_NS" tcp 9000 || die "sha256 sink did not start"
}

# TCP echo on :9001.
start_echo() {
    bg_in "$SRV_NS" echo4 socat "TCP4-LISTEN:9001,bind=$SRV4,fork,reuseaddr" PIPE
    bg_in "$SRV_NS" echo6 socat "TCP6-LISTEN:9001,bind=[$SRV6],fork,reuseaddr" PIPE
    wait_listen "$SRV_NS" tcp 9001 || die "echo server did not start"
}

# dnsmasq on :53 (v4 and v6) with one static record: probe.loft.test A 198.18.1.77,
# AAAA fd00:1::77. Nothing is forwarded anywhere (--no-resolv, no servers).
DNS_NAME=probe.loft.test
DNS_A=198.18.$NET.77
DNS_AAAA=fd00:$NET::77
start_dns() {
    bg_in "$SRV_NS" dnsmasq dnsmasq -k --conf-file=/dev/null --no-resolv --no-hosts --no-poll \
        --bind-interfaces --listen-address="$SRV4" --listen-address="$SRV6" --port=53 \
        --pid-file= --user=root --host-record="$DNS_NAME,$DNS_A,$DNS_AAAA" --log-facility=-
    wait_listen "$SRV_NS" udp 53 || die "dnsmasq did not start: $(tail -3 "$T_DIR/dnsmasq.log")"
}

start_iperf() {
    bg_in "$SRV_NS" iperf3 iperf3 -s -p 5201
    wait_listen "$SRV_NS" tcp 5201 || die "iperf3 -s did not start"
}

# start_v2ray UUID [PORT]: Debian's v2ray in srv: a VLESS inbound with TLS on [::]:PORT (8443)
# for user UUID, a freedom outbound; the name web.loft.test resolves (in v2ray only) to SRV4.
# Session tickets are on (v2ray's enableSessionResumption; its default is off).
# The certificate (vless.loft.test, SRV4, SRV6) is from a throwaway CA made here: VLESS_CA is
# its PEM, VLESS_OTHER_CA a second CA that signed nothing. Sets V2RAY_PID; call again after a
# kill to restart it with the same certificate.
start_v2ray() {
    local uuid=$1 port=${2:-8443} pki=$T_DIR/pki
    VLESS_CA=$pki/ca.pem
    VLESS_OTHER_CA=$pki/other.pem
    VLESS_KEY=$pki/server.key
    VLESS_CERT=$pki/server.pem
    if [ ! -s "$VLESS_CERT" ]; then
        mkdir -p "$pki"
        (
            cd "$pki" || exit 1
            for ca in ca other; do
                openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
                    -subj "/CN=loft test $ca" -keyout $ca.key -out $ca.pem 2>/dev/null || exit 1
            done
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=vless.loft.test" \
                -keyout server.key -out server.csr 2>/dev/null || exit 1
            printf 'subjectAltName=DNS:vless.loft.test,IP:%s,IP:%s\n' "$SRV4" "$SRV6" >san.ext
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
                -extfile san.ext -out server.pem 2>/dev/null || exit 1
            chmod 644 ./*
        ) || die "openssl: the test PKI"
    fi
    cat >"$T_DIR/v2ray.json" <<EOF
{
  "log": { "loglevel": "warning" },
  "dns": { "hosts": { "web.loft.test": "$SRV4" } },
  "inbounds": [{
    "listen": "::", "port": $port, "protocol": "vless",
    "settings": { "clients": [{ "id": "$uuid" }], "decryption": "none" },
    "streamSettings": { "network": "tcp", "security": "tls",
      "tlsSettings": { "enableSessionResumption": true,
        "certificates": [{ "certificateFile": "$VLESS_CERT", "keyFile": "$VLESS_KEY" }] } }
  }],
  "outbounds": [{ "protocol": "freedom", "settings": { "domainStrategy": "UseIP" } }]
}
EOF
    bg_in "$SRV_NS" v2ray v2ray -config "$T_DIR/v2ray.json"
    V2RAY_PID=$LAST_PID
    wait_listen "$SRV_NS" tcp "$port" || die "v2ray did not start: $(tail -5 "$T_DIR/v2ray.log")"
}

# --- the delay line (netem in user space: Tests/tools/delayline.py) -------------------------

# line_up NS [DELAY_MS] [LOSS] [delayline.py args...]: a lossy, slow point-to-point link between
# the root namespace and NS, as `tc netem delay DELAY_MS loss LOSS` on both ends would make it
# (this kernel has no sch_netem): two TUNs, LINE_A (root, LINE_NEAR4 = 198.19.(NET+100).1) and
# LINE_B (in NS, LINE_FAR4 = .2), with delayline.py forwarding between them, each way delayed
# DELAY_MS (20) and dropping LOSS (0.01) at random, at most 10000 packets queued per way (the
# queue is the delay pipe itself: netem's default limit of 1000 would cap 20 ms at 50 000
# packets/s and drop bursts on top of LOSS; delayline.py's --limit overrides it). A
# server in NS that listens on LINE_FAR4 is reached from the root namespace through the line
# only. Sets LINE_PID, LINE_LOG. Bounded: the line exits by itself after LINE_MAX_SECONDS (600).
LINE_A=loft-${T_ID}la
LINE_B=loft-${T_ID}lb
LINE_NEAR4=198.19.$((NET + 100)).1
LINE_FAR4=198.19.$((NET + 100)).2
LINE_PID=
LINE_LOG=$T_DIR/delayline.log
line_up() {
    local ns=$1 delay=${2:-20} loss=${3:-0.01} i
    shift; [ $# -gt 0 ] && shift; [ $# -gt 0 ] && shift
    register link "$LINE_A"
    nice -n -10 python3 "$LOFT_REPO/Tests/tools/delayline.py" --a "$LINE_A" --b "$LINE_B" --netns "$ns" \
        --delay-ms "$delay" --loss "$loss" --limit 10000 --max-seconds "${LINE_MAX_SECONDS:-600}" "$@" >"$LINE_LOG" 2>&1 </dev/null &
    LINE_PID=$!
    T_PIDS+=("$LINE_PID"); register_pid "$LINE_PID"
    for i in $(seq 50); do
        grep -q '^ready ' "$LINE_LOG" && break
        kill -0 "$LINE_PID" 2>/dev/null || break
        sleep 0.1
    done
    grep -q '^ready ' "$LINE_LOG" || { note "delayline did not start: $(tail -3 "$LINE_LOG" | tr '\n' '|')"; return 1; }
    ip addr add "$LINE_NEAR4" peer "$LINE_FAR4" dev "$LINE_A" &&
        ip -n "$ns" addr add "$LINE_FAR4" peer "$LINE_NEAR4" dev "$LINE_B"
}
# line_counters: the line's counters now (SIGUSR1), one line per direction:
#   delayline A->B read=N forwarded=N bytes=N dropped=N queue-dropped=N write-errors=N peak-queue=N
#   late-1ms=N max-late-ms=X seconds=X cpu-user=X cpu-system=X (the process's CPU, both ways)
line_counters() {
    local n
    [ -n "$LINE_PID" ] || return 1
    n=$(grep -c '^delayline ' "$LINE_LOG")
    kill -USR1 "$LINE_PID" 2>/dev/null || return 1
    for _ in $(seq 20); do [ "$(grep -c '^delayline ' "$LINE_LOG")" -ge $((n + 2)) ] && break; sleep 0.05; done
    grep '^delayline ' "$LINE_LOG" | tail -2
}
# line_sum KEY: KEY summed over both directions of the last line_counters output on stdin.
line_sum() { awk -v k="$1" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) s += kv[2] } } END { print s + 0 }'; }
# line_down: stop the line (its TUNs go with it); its last counters stay in LINE_LOG.
line_down() {
    [ -n "$LINE_PID" ] || return 0
    kill_pid "$LINE_PID"
    wait "$LINE_PID" 2>/dev/null
    LINE_PID=
}

# --- the kernel path (reference for benchmarks; LOFT_TEST_KERNEL=1 dry runs) ----------------

# kernel_path_up NS [MTU]: NS (created if missing) joined straight to srv by a plain veth:
#   NS: loft-<id>ka 198.18.K.1/24 fd00:K::1/64, routes to 198.18.1.0/24 and fd00:1::/64 via srv
#   srv: loft-<id>ks 198.18.K.2/24 fd00:K::2/64            (K = 100 + LOFT_TEST_NET: 101)
# so the same destinations (198.18.1.2, fd00:1::2) are reached with no loft in between.
KNET=$((100 + NET))
KGW4=198.18.$KNET.2
KGW6=fd00:$KNET::2
KVETH_APP=loft-${T_ID}ka
KVETH_SRV=loft-${T_ID}ks
kernel_path_up() {
    local ns=$1 mtu=${2:-1500}
    if ! netns_exists "$ns"; then
        T_NETNS+=("$ns"); register netns "$ns"
        ip netns add "$ns" || return 1
    fi
    register link "$KVETH_APP"
    ip link add "$KVETH_APP" mtu "$mtu" netns "$ns" type veth peer name "$KVETH_SRV" mtu "$mtu" \
        netns "$SRV_NS" || return 1
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "198.18.$KNET.1/24" dev "$KVETH_APP"
    ip -n "$ns" -6 addr add "fd00:$KNET::1/64" dev "$KVETH_APP" nodad
    ip -n "$ns" link set "$KVETH_APP" up
    ip -n "$SRV_NS" addr add "$KGW4/24" dev "$KVETH_SRV"
    ip -n "$SRV_NS" -6 addr add "$KGW6/64" dev "$KVETH_SRV" nodad
    ip -n "$SRV_NS" link set "$KVETH_SRV" up
    ip -n "$ns" route add "$SRV_NET4" via "$KGW4"
    ip -n "$ns" -6 route add "$SRV_NET6" via "$KGW6"
}
kernel_path_down() {
    ip -n "$SRV_NS" link del "$KVETH_SRV" 2>/dev/null
    return 0
}

# host_ns_up: a namespace standing in for the host (host-mode tests): HOST_NS, with a veth to
# srv (HOST4 = 198.18.(NET+150).1 here, .2 in srv) and a route to the srv subnet through it.
# in_host runs a command there; host_snapshot prints its rules and routes (for before/after).
host_ns_up() {
    HOST_NS=loft-host-$T_ID
    ip netns add "$HOST_NS" && T_NETNS+=("$HOST_NS") && register netns "$HOST_NS"
    local vh=loft-${T_ID}h vhs=loft-${T_ID}i
    ip link add "$vh" type veth peer name "$vhs" netns "$SRV_NS" && T_LINKS+=("$vh") && register link "$vh"
    ip link set "$vh" netns "$HOST_NS"
    HOST4=198.18.$((NET + 150)).1
    ip -n "$HOST_NS" link set lo up
    ip -n "$HOST_NS" addr add "$HOST4/24" dev "$vh"; ip -n "$HOST_NS" link set "$vh" up
    ip -n "$SRV_NS" addr add 198.18.$((NET + 150)).2/24 dev "$vhs"; ip -n "$SRV_NS" link set "$vhs" up
    ip -n "$HOST_NS" route add "$SRV_NET4" via 198.18.$((NET + 150)).2
}
in_host() { ip netns exec "$HOST_NS" "$@"; }

# host_config [YAML LINE...]: $T_DIR/host.yaml for loft in host mode inside HOST_NS: its TUN
# HTUN (198.18.(NET+160).1/30, route-all, no IPv6), no SOCKS5, no bridge, a control socket, and
# the lines given.
HTUN=lh$((T_ID % 100000))
host_config() {
    local l
    cat >"$T_DIR/host.yaml" <<EOF
tun: { name: $HTUN, route-all: true, ipv4: 198.18.$((NET + 160)).1/30, ipv6: off }
socks5: off
bridge: off
control: $T_DIR/host.sock
EOF
    for l in "$@"; do echo "$l" >>"$T_DIR/host.yaml"; done
}

# host_start: loft from $T_DIR/host.yaml inside HOST_NS (HPID, log $T_DIR/host-loft.log) until it
# logs event=ready (10 s); 1 if it exits first or is not ready by then.
host_start() {
    # Emptied first: the child truncates it only once forked, and the last start's event=ready
    # must not count for this one. Not through in_host: $! must be loft itself, not a subshell.
    : >"$T_DIR/host-loft.log"
    ip netns exec "$HOST_NS" "$LOFT_BIN" run -c "$T_DIR/host.yaml" >"$T_DIR/host-loft.log" 2>&1 </dev/null &
    HPID=$!; T_PIDS+=("$HPID"); register_pid "$HPID"
    for _ in $(seq 100); do grep -q event=ready "$T_DIR/host-loft.log" && return 0; kill -0 $HPID 2>/dev/null || return 1; sleep 0.1; done
    return 1
}
host_snapshot() { in_host sh -c 'ip -4 rule; ip -6 rule; ip -4 route show table all; ip -6 route show table all' | grep -v ' lo \|fe80::/64\|multicast\|^local ' ; }

# --- loft -----------------------------------------------------------------------------------

# loft_config NAME [key=value ...] > file: a namespace config for this test.
#   keys: mtu icmp idle (tcp-idle-timeout) dns netns name log
loft_config() {
    local name=$1 mtu=1500 icmp=reply idle=2h dns="[$SRV4]" netns=$APP_NS tun=$TUN_NAME log=info kv
    local offload=${LOFT_TEST_OFFLOAD:-}
    shift
    for kv in "$@"; do
        case $kv in
            mtu=*) mtu=${kv#*=} ;; icmp=*) icmp=${kv#*=} ;; idle=*) idle=${kv#*=} ;;
            dns=*) dns=${kv#*=} ;; netns=*) netns=${kv#*=} ;; name=*) tun=${kv#*=} ;;
            log=*) log=${kv#*=} ;; offload=*) offload=${kv#*=} ;;
        esac
    done
    cat >"$T_DIR/$name.yaml" <<EOF
log: $log
tun:
  name: $tun
  netns: $netns
  mtu: $mtu
  ipv4: 198.18.0.1/30
  ipv6: fd00:18::1/126
  route-all: true
  dns: $dns
  icmp: $icmp${offload:+
  offload: $offload}
socks5: off
bridge: off
limits: { max-flows: 16384, connect-timeout: 10s, tcp-idle-timeout: $idle, udp-idle-timeout: 60s }
default: direct
EOF
    echo "$T_DIR/$name.yaml"
}

# loft_start CONFIG [NETNS] [TUN]: run loft in the background and wait until it is ready: the
# log says event=ready and the TUN exists (inside NETNS, or in the root namespace if NETNS is -).
loft_start() {
    local cfg=$1 ns=${2:-$APP_NS} tun=${3:-$TUN_NAME} i
    if [ -n "${LOFT_TEST_KERNEL:-}" ]; then kernel_start "$cfg" "$ns" "$tun"; return; fi
    [ -x "$LOFT_BIN" ] || { note "no loft binary at $LOFT_BIN"; return 1; }
    LOFT_LOG=$T_DIR/loft-$(date +%s%N).log
    LOFT_NS=$ns
    LOFT_TUN=$tun
    LOFT_RC=
    : >"$LOFT_LOG"
    # LOFT_START_WRAP: a command (or function that execs) loft runs under, e.g. setpriv.
    ${LOFT_START_WRAP:-} "$LOFT_BIN" run -c "$cfg" >"$LOFT_LOG" 2>&1 </dev/null &
    LOFT_PID=$!
    register_pid "$LOFT_PID"
    for i in $(seq 300); do
        if ! kill -0 "$LOFT_PID" 2>/dev/null; then
            wait "$LOFT_PID"; LOFT_RC=$?
            note "loft exited early with $LOFT_RC: $(tail -5 "$LOFT_LOG" | tr '\n' '|')"
            LOFT_PID=
            return 1
        fi
        if grep -q 'event=ready' "$LOFT_LOG"; then
            if [ "$ns" = - ]; then
                ip link show "$tun" >/dev/null 2>&1 && return 0
            else
                ip -n "$ns" link show "$tun" >/dev/null 2>&1 && return 0
            fi
        fi
        sleep 0.1
    done
    note "loft not ready after 30 s: $(tail -5 "$LOFT_LOG" | tr '\n' '|')"
    return 1
}

# LOFT_TEST_KERNEL=1: instead of starting loft, give the app namespace the kernel path. Only
# for checking the tests' own topology and servers: loft-specific cases fail in this mode.
kernel_start() {
    LOFT_NS=$2 LOFT_TUN=$3 LOFT_LOG=$T_DIR/kernel.log LOFT_RC=
    : >"$LOFT_LOG"
    kernel_path_up "$2" "$(awk '/^  mtu:/{print $2}' "$1")" || return 1
    if [ "$2" != - ]; then
        mkdir -p "/etc/netns/$2"
        sed -n 's/^  dns: \[\(.*\)\]/\1/p' "$1" | tr ',' '\n' | sed 's/^ */nameserver /' \
            >"/etc/netns/$2/resolv.conf"
    fi
}
kernel_stop() {
    kernel_path_down
    ip netns del "$LOFT_NS" 2>/dev/null
    rm -rf "/etc/netns/$LOFT_NS"
    LOFT_RC=0
}

# loft_died: true (and says how) if the loft started by loft_start is no longer running.
loft_died() {
    [ -n "$LOFT_PID" ] || return 1
    kill -0 "$LOFT_PID" 2>/dev/null && return 1
    wait "$LOFT_PID"; LOFT_RC=$?
    note "loft (pid $LOFT_PID) died with exit status $LOFT_RC: $(tail -5 "$LOFT_LOG" | tr '\n' '|')"
    LOFT_PID=
    return 0
}

# loft_stop [SIGNAL]: signal loft (TERM), wait up to 15 s; sets LOFT_RC; returns 0 iff it
# exited 0.
loft_stop() {
    local sig=${1:-TERM} i
    if [ -n "${LOFT_TEST_KERNEL:-}" ]; then kernel_stop; return; fi
    [ -n "$LOFT_PID" ] || { LOFT_RC=none; return 1; }
    kill -"$sig" "$LOFT_PID" 2>/dev/null
    for i in $(seq 150); do kill -0 "$LOFT_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$LOFT_PID" 2>/dev/null; then
        kill -KILL "$LOFT_PID"
        wait "$LOFT_PID" 2>/dev/null
        LOFT_RC=hung
        LOFT_PID=
        return 1
    fi
    wait "$LOFT_PID"
    LOFT_RC=$?
    LOFT_PID=
    [ "$LOFT_RC" -eq 0 ]
}

# loft_leftovers NS TUN CREATED: prints what loft left behind after exiting (nothing: clean).
#   CREATED=yes: loft made NS, so NS must be gone; no: NS must still exist.
loft_leftovers() {
    local ns=$1 tun=$2 created=${3:-yes}
    if [ "$ns" = - ]; then
        ip link show "$tun" >/dev/null 2>&1 && echo "TUN $tun still exists"
    elif [ "$created" = yes ]; then
        netns_exists "$ns" && echo "namespace $ns still exists"
        [ -e "/etc/netns/$ns/resolv.conf" ] && echo "/etc/netns/$ns/resolv.conf still exists"
        [ -e "/etc/netns/$ns" ] && echo "/etc/netns/$ns still exists"
    else
        netns_exists "$ns" || echo "namespace $ns (not made by loft) was removed"
        ip -n "$ns" link show "$tun" >/dev/null 2>&1 && echo "TUN $tun still exists in $ns"
        [ -e "/etc/netns/$ns/resolv.conf" ] && echo "/etc/netns/$ns/resolv.conf still exists"
    fi
    return 0
}

# loft_stop_clean NAME: stop loft with SIGTERM, report PASS/FAIL NAME for exit 0 + cleanup.
loft_stop_clean() {
    local name=$1 ns=$LOFT_NS tun=$LOFT_TUN left
    if ! loft_stop TERM; then
        fail "$name" "loft exit status $LOFT_RC after SIGTERM: $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
        return 1
    fi
    left=$(loft_leftovers "$ns" "$tun" "${2:-yes}")
    if [ -n "$left" ]; then fail "$name" "$(echo "$left" | tr '\n' ';')"; return 1; fi
    pass "$name"
}

# Runs a test's body only if loft came up; otherwise fails every named case.
require_loft() {
    local cfg=$1 c
    shift
    if loft_start "$cfg"; then return 0; fi
    for c in "$@"; do fail "$c" "loft did not start (see above)"; done
    return 1
}

# field [OUTBOUND] EXPR: one value from `loft status --json` of the loft whose config is LOFT_CFG
# (or CFG): o = the outbound OUTBOUND (home), c = its counters, d = the outbound direct (None
# without it), s = everything.
field() {
    local ob=home
    [ $# -ge 2 ] && { ob=$1; shift; }
    "$LOFT_BIN" status --json -c "${LOFT_CFG:-$CFG}" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
o = next(x for x in s["outbounds"] if x["name"] == sys.argv[1])
d = next((x for x in s["outbounds"] if x["name"] == "direct"), None)
c = o.get("counters", {})
print(eval(sys.argv[2]))' "$ob" "$1" 2>/dev/null
}

# tree_state DIR: a fingerprint of every file under DIR (names, modes, contents), to show "untouched".
tree_state() { (cd "$1" && find . -type f -printf '%p %m\n' | sort && find . -type f | sort | xargs -r sha256sum) | sha256sum; }

# --- connection links and files (links.test.sh, qr.test.sh; W is the test's folder) ----------

L() { "$LOFT_BIN" "$@"; }

# fresh NAME: an empty consumer config, $W/NAME/main.yaml (0600, its first line "# NAME: a
# consumer"); prints its path.
fresh() {
    rm -rf "$W/$1"; mkdir -p "$W/$1"
    printf '# %s: a consumer\nsocks5: off\nbridge: off\n' "$1" >"$W/$1/main.yaml"; chmod 600 "$W/$1/main.yaml"
    echo "$W/$1/main.yaml"
}

# bad_case NAME WANT-IN-ERROR ARGS...: `loft import ARGS -c $C` (C in $W/bad) is refused: exit 2,
# WANT-IN-ERROR in what it says, nothing under $W/bad changed.
bad_case() {
    local name=$1 want=$2 before rc said
    shift 2
    before=$(tree_state "$W/bad")
    L import "$@" -c "$C" >"$T_DIR/$name.out" 2>&1; rc=$?
    said=no; grep -qF -- "$want" "$T_DIR/$name.out" && said=yes
    expect "$name" "[ $rc = 2 ] && [ '$(tree_state "$W/bad")' = '$before' ] && [ $said = yes ]" \
        "rc $rc, changed: $([ "$(tree_state "$W/bad")" = "$before" ] && echo no || echo yes): $(cat "$T_DIR/$name.out")"
}

# json: `loft status --json` of the loft started with config $CFG.
json() { "$LOFT_BIN" status -c "$CFG" --json; }

# Python snippets run inside the app namespace.
py_in_app() { ip netns exec "$APP_NS" python3 -c "$@"; }

# loft_start_host CONFIG [LOG]: loft in the root namespace (no TUN), e.g. with only socks5:,
# until it is ready and its SOCKS5 listener is up. Sets LOFT_PID and LOFT_LOG.
loft_start_host() {
    [ -x "$LOFT_BIN" ] || { note "no loft binary at $LOFT_BIN"; return 1; }
    LOFT_LOG=${2:-$T_DIR/loft.log}
    "$LOFT_BIN" run -c "$1" >"$LOFT_LOG" 2>&1 </dev/null &
    LOFT_PID=$!
    register_pid "$LOFT_PID"
    for _ in $(seq 100); do
        if ! kill -0 "$LOFT_PID" 2>/dev/null; then
            note "loft exited early: $(tail -5 "$LOFT_LOG" | tr '\n' '|')"; LOFT_PID=; return 1
        fi
        grep -q 'event=ready' "$LOFT_LOG" && grep -q 'event=socks5.listening' "$LOFT_LOG" && return 0
        sleep 0.1
    done
    note "loft not ready: $(tail -5 "$LOFT_LOG" | tr '\n' '|')"
    return 1
}

# --- loft-front -----------------------------------------------------------------------------

FRONT_BIN=${LOFT_FRONT_BIN:-$(dirname "$LOFT_BIN")/loft-front}
FRONT_PID=
FRONT_LOG=$T_DIR/front.log

# front_run CONFIG [NETNS]: loft-front in the background (inside NETNS if given), its output
# appended to FRONT_LOG; sets FRONT_PID and waits (10 s) until it logs a new event=ready, which
# it does once it listens. Returns 1, with a note, if it does not.
front_run() {
    local cfg=$1 ns=${2:-} n i
    n=$(cat "$FRONT_LOG" 2>/dev/null | grep -c 'event=ready')
    ${ns:+ip netns exec "$ns"} "$FRONT_BIN" run -c "$cfg" >>"$FRONT_LOG" 2>&1 </dev/null &
    FRONT_PID=$!
    T_PIDS+=("$FRONT_PID"); register_pid "$FRONT_PID"
    for i in $(seq 100); do
        [ "$(grep -c 'event=ready' "$FRONT_LOG" 2>/dev/null)" -gt "$n" ] 2>/dev/null && return 0
        kill -0 "$FRONT_PID" 2>/dev/null || break
        sleep 0.1
    done
    note "loft-front did not start: $(tail -3 "$FRONT_LOG" | tr '\n' '|')"
    return 1
}

# front_stat NAME: one counter of the running front (`loft-front stats`, config FRONT_CFG or
# $T_DIR/front.yaml); empty when the front does not answer.
front_stat() { "$FRONT_BIN" stats -c "${FRONT_CFG:-$T_DIR/front.yaml}" 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'; }
