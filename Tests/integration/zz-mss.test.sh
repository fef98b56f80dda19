. "$(dirname "$0")/lib.sh"
topo_up 65535
make_files 50
start_nginx 1 1024
start_iperf
for mtu in ${MTUS:-1500 65535}; do
loft_start "$(loft_config m$mtu mtu=$mtu)" || die "no loft"
for d in "" "-R"; do
  t0=$(now_ms)
  r=$(in_app timeout 20 iperf3 -c $SRV4 -t 3 $d -J | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["end"]["sum_received"]["bits_per_second"]/1e9,2))' 2>&1 | tail -1)
  note "mtu $mtu iperf ${d:-up} $r Gbit/s ($(( $(now_ms) - t0 )) ms)"
done
for d in "" "-R"; do
  t0=$(now_ms)
  r=$(in_app timeout 20 iperf3 -6 -c $SRV6 -t 3 $d -J | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["end"]["sum_received"]["bits_per_second"]/1e9,2))' 2>&1 | tail -1)
  note "mtu $mtu iperf v6 ${d:-up} $r Gbit/s ($(( $(now_ms) - t0 )) ms)"
done
loft_stop TERM
done
pass x
finish
