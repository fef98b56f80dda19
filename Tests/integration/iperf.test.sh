#!/usr/bin/env bash
# iperf3 through loft, 3 s each: upload, download (-R), IPv6, 4 streams. Each must finish
# without error and move data; the rate is only noted (bench/ measures it).
. "$(dirname "$0")/lib.sh"

topo_up
start_iperf

CASES="iperf-up-v4 iperf-down-v4 iperf-down-v6 iperf-up-v4-4streams loft-exit-clean"
require_loft "$(loft_config iperf)" $CASES || finish

run_iperf() {       # run_iperf NAME HOST ARGS...
    local name=$1 host=$2 j res
    shift 2
    j=$T_DIR/$name.json
    in_app timeout 30 iperf3 -J -c "$host" -t 3 "$@" >"$j" 2>&1
    res=$(python3 - "$j" <<'EOF2'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("bad iperf3 output: %s" % open(sys.argv[1]).read()[-200:].replace("\n", "|")); sys.exit(1)
if "error" in d:
    print("iperf3: " + d["error"]); sys.exit(1)
e = d["end"]
sent, recv = e["sum_sent"]["bytes"], e["sum_received"]["bytes"]
if recv <= 0:
    print("no bytes received (sent %d)" % sent); sys.exit(1)
print("%.0f Mbit/s received" % (e["sum_received"]["bits_per_second"] / 1e6))
EOF2
    )
    if [ $? -eq 0 ]; then pass "$name"; note "$name: $res"; else fail "$name" "$res"; fi
}

run_iperf iperf-up-v4 "$SRV4"
run_iperf iperf-down-v4 "$SRV4" -R
run_iperf iperf-down-v6 "$SRV6" -R
run_iperf iperf-up-v4-4streams "$SRV4" -P 4

loft_stop_clean loft-exit-clean
finish
