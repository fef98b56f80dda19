# Shared helpers for loft's benchmarks (sourced). Builds on the integration tests' library
# (Tests/integration/lib.sh: srv namespace, veth, servers, loft and loft-front start/stop, trap
# cleanup, cpu_ticks and rss_kib): only what the benchmarks alone use is defined here
# (docs/testing.md, "The shell library").
#
# The app namespace loft-app-<id> is made here, before loft starts, and gets two paths to
# the same servers (198.18.1.2, fd00:1::2):
#   kernel: a plain veth straight to srv (routes 198.18.1.0/24, fd00:1::/64 via it)
#   loft:   those routes removed; loft is started with tun.netns = this namespace, so its
#           default routes send everything into the TUN, and loft dials from the root namespace.
# Both are measured in the same run, one after the other, on the same namespace and servers.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$BENCH_DIR/../Tests/integration/lib.sh"
RESULTS=${LOFT_BENCH_RESULTS:-$BENCH_DIR/results}
mkdir -p "$RESULTS"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"  # 10k flows need >10k fds

bench_require_loft() {
    [ -x "$LOFT_BIN" ] && return 0
    echo "warning: no loft binary at $LOFT_BIN (build it with 'swift build -c release' or set"\
         "LOFT_BIN): only the kernel path is measured" >&2
}

# bench_topology [MTU]: srv namespace + servers are left to the caller; this makes the app
# namespace with the kernel path switched on.
bench_app_up() {
    T_NETNS+=("$APP_NS"); register netns "$APP_NS"
    ip netns add "$APP_NS" || die "ip netns add $APP_NS"
    kernel_path_up "$APP_NS" "${1:-1500}" || die "kernel path"
}

kernel_routes_on() {
    ip -n "$APP_NS" route replace "$SRV_NET4" via "$KGW4"
    ip -n "$APP_NS" -6 route replace "$SRV_NET6" via "$KGW6"
}
kernel_routes_off() {
    ip -n "$APP_NS" route del "$SRV_NET4" 2>/dev/null
    ip -n "$APP_NS" -6 route del "$SRV_NET6" 2>/dev/null
    return 0
}

# All links on both paths to MTU (kernel veth, root<->srv veth).
bench_mtu() {
    ip -n "$APP_NS" link set "$KVETH_APP" mtu "$1"
    ip -n "$SRV_NS" link set "$KVETH_SRV" mtu "$1"
    topo_mtu "$1"
}

# bench_loft_start [loft_config key=value ...]: kernel routes off, loft up in APP_NS (LAST_CFG: its config).
bench_loft_start() {
    kernel_routes_off
    LAST_CFG=$(loft_config "bench-$(date +%s%N)" "$@")
    loft_start "$LAST_CFG" "$APP_NS" || {
        echo "loft did not start: $(tail -5 "$LOFT_LOG" 2>/dev/null)" >&2; return 1; }
}
# bench_path_start NAME [DEFAULT OUTBOUND]: kernel routes off, loft up in APP_NS with a config
# bench-NAME (control socket $T_DIR/control-NAME.sock) whose default is direct, or DEFAULT with
# OUTBOUND (one YAML flow mapping) as its one outbound; LAST_CFG is its path. When loft does not
# start: one that started but never became ready is stopped (LOFT_PID is reused), the kernel
# routes are back, and it returns 1.
bench_path_start() {
    local cfg
    cfg=$(loft_config "bench-$1")
    sed -i '/^default: direct$/d' "$cfg"
    {
        echo "control: $T_DIR/control-$1.sock"
        if [ $# -ge 3 ]; then
            echo "outbounds:"
            echo "  - $3"
            echo "default: $2"
        else
            echo "default: direct"
        fi
    } >>"$cfg"
    LAST_CFG=$cfg
    kernel_routes_off
    if ! loft_start "$cfg" "$APP_NS"; then
        echo "loft did not start: $(tail -5 "$LOFT_LOG")" >&2
        [ -n "$LOFT_PID" ] && loft_stop KILL
        kernel_routes_on
        return 1
    fi
}
bench_loft_stop() {
    loft_stop TERM || echo "warning: loft exit status $LOFT_RC" >&2
    kernel_routes_on
}

# The peak resident memory (KiB) of a process (nothing when it is gone, as rss_kib), and its reset.
hwm_kib() { awk '/^VmHWM:/{print $2}' "/proc/$1/status" 2>/dev/null; }
# kib_mib KIB: KiB as MiB "%.1f", or "-" when there is no reading.
kib_mib() { case $1 in ''|-) echo - ;; *) awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}' ;; esac; }
reset_hwm() { echo 5 >"/proc/$1/clear_refs" 2>/dev/null; }

# CPU % of one core between two cpu_ticks samples over MS milliseconds.
cpu_pct() { [ -n "$1" ] && [ -n "$2" ] || { echo -; return; }; awk -v a="$1" -v b="$2" -v ms="$3" -v hz="$CLK_TCK" 'BEGIN { printf "%.0f", (b - a) / hz / (ms / 1000) * 100 }'; }
# CPU per Gbit/s: the sum of the CPU % figures given (cpu_pct's, e.g. loft's and loft-front's)
# over GBPS, "%.1f" (% of one core per Gbit/s carried), or "-" when a figure is missing or no
# traffic was carried. Usage: cpu_per_gbps GBPS CPU [CPU...]
cpu_per_gbps() {
    local g=$1 c
    shift
    for c in "$@"; do case $c in ''|-|error) echo -; return ;; esac; done
    case $g in ''|-|error) echo -; return ;; esac
    awk -v g="$g" -v cs="$*" 'BEGIN { n = split(cs, a, " "); for (i = 1; i <= n; i++) t += a[i]
        if (g + 0 <= 0) print "-"; else printf "%.1f\n", t / g }'
}

# Integrity of a path in the same run: 50 MiB down (nginx) and up (sha256 sink), hashes
# compared on both ends. Needs make_files, start_nginx and start_sink. Prints "ok" or why not.
integrity_check() {
    local want got
    want=$(sha_of "$T_DIR/www/big")
    got=$(in_app curl -sS --max-time 120 "http://$SRV4/big" | sha256sum | cut -d' ' -f1)
    [ "$got" = "$want" ] || { echo "download sha256 mismatch"; return 1; }
    got=$(in_app timeout 120 socat -t 30 - "TCP4:$SRV4:9000" <"$T_DIR/www/big" | cut -d' ' -f1)
    [ "$got" = "$want" ] || { echo "upload sha256 mismatch"; return 1; }
    echo ok
}

# free_port [BASE]: the first port from BASE (20000 + the test's id) that no TCP or UDP socket
# of the root namespace uses, in any state (at most 200 tried).
free_port() {
    local p=${1:-$((20000 + T_ID % 20000))} i
    for i in $(seq 200); do
        ss -Htuan "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
        p=$((p + 1))
    done
    echo "$p"
}

# gbps_of FILE: the received Gbit/s ("%.3f") of an `iperf3 -J` run, or "error".
gbps_of() {
    python3 -c '
import json,sys
try:
    d=json.load(open(sys.argv[1]))
    print("%.3f" % (d["end"]["sum_received"]["bits_per_second"]/1e9) if "error" not in d else "error")
except Exception: print("error")' "$1"
}

bench_meta() {      # JSON object describing this run
    python3 - "$LOFT_BIN" "$LOFT_REPO" <<'EOF'
import json, os, subprocess, sys, time
def out(*c):
    try: return subprocess.run(c, capture_output=True, text=True, cwd=sys.argv[2]).stdout.strip()
    except Exception: return ""
print(json.dumps({
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "kernel": os.uname().release, "cpus": os.cpu_count(),
    "commit": out("git", "rev-parse", "--short", "HEAD"),
    "loft_version": out(sys.argv[1], "--version"),
}))
EOF
}

# wait_time_wait MAX RUNNER [SS_FILTER...]: waits (at most 70 s) until fewer than MAX TCP sockets
# are in TIME_WAIT where RUNNER runs `ss` (`in_app`, or `command` for the host namespace): a run
# started within 60 s of another would otherwise find the local port range used up.
wait_time_wait() {
    local max=$1 run=$2 i left; shift 2
    for i in $(seq 70); do
        left=$($run ss -tanH state time-wait "$@" | wc -l)
        [ "$left" -lt "$max" ] && return 0
        sleep 1
    done
    echo "warning: $left TCP sockets still in TIME_WAIT after 70 s" >&2
}
