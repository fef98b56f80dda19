#!/usr/bin/env bash
# `loft try` end to end (issue 30): it starts, the three commands it prints work as printed
# (curl and dig through `loft exec`, `loft status`), `loft exec` runs as the sudo user, and
# Ctrl-C (SIGINT) leaves nothing: no namespace, veth, /etc/netns entry, folder or process.
# `loft exec` without a running loft says so. loft try's own subnet: 198.18.254.0/24.
. "$(dirname "$0")/lib.sh"

for n in loft-try loft-try-dst; do
    netns_exists "$n" && die "namespace $n exists already (another loft try?)"
    T_NETNS+=("$n"); register netns "$n"
done
T_LINKS+=(loft-try0); register link loft-try0

OUT=$T_DIR/try.out
setsid "$LOFT_BIN" try >"$OUT" 2>&1 </dev/null &
TRY_PID=$!
register_pid "$TRY_PID"
for _ in $(seq 150); do grep -q 'Ctrl-C removes' "$OUT" && break; kill -0 $TRY_PID 2>/dev/null || break; sleep 0.1; done
if grep -q 'Ctrl-C removes' "$OUT"; then pass try-started; else fail try-started "$(tail -3 "$OUT" | tr '\n' '|')"; fi
TMPDIR_TRY=$(grep -o '/tmp/loft-try\.[A-Za-z0-9]*' "$OUT" | head -1)

# The printed commands, run as printed (as root: without the sudo).
mapfile -t CMDS < <(sed -n 's/^    sudo //p' "$OUT")
if [ ${#CMDS[@]} -eq 3 ]; then
    got=$(eval "timeout 20 ${CMDS[0]} -sS -m 10" 2>&1)
    echo "$got" | grep -q 'Hello through loft' && pass try-curl || fail try-curl "${CMDS[0]}: $got"
    got=$(eval "timeout 20 ${CMDS[1]} +time=2 +tries=2" 2>&1)
    [ "$got" = 198.18.254.2 ] && pass try-dig || fail try-dig "${CMDS[1]}: $got"
    got=$(eval "timeout 20 ${CMDS[2]}" 2>&1)
    echo "$got" | grep -q 'loft-try in netns loft-try' && pass try-status || fail try-status "${CMDS[2]}: $(echo "$got" | head -5 | tr '\n' '|')"
    # loft exec through sudo runs as the user who asked.
    cfg=$(echo "${CMDS[0]}" | awk '{print $4}')
    who=$(SUDO_USER=nobody timeout 10 "$LOFT_BIN" exec -c "$cfg" -- sh -c 'id -un; curl -sS -m 10 http://try.loft.test/ >/dev/null && echo fetched' 2>&1 | tr '\n' ' ')
    [ "$who" = "nobody fetched " ] && pass exec-as-sudo-user || fail exec-as-sudo-user "$who"
    # The flows went through loft: its counters saw TCP flows from the namespace.
    flows=$("$LOFT_BIN" status --json --control /run/loft/try.sock | python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["tcp-flows-opened"])' 2>&1)
    [ "${flows:-0}" -ge 2 ] 2>/dev/null && pass exec-through-loft || fail exec-through-loft "tcp-flows-opened: $flows"
else
    for c in try-curl try-dig try-status exec-as-sudo-user exec-through-loft; do fail $c "printed $(echo ${#CMDS[@]}) commands: $(cat "$OUT" | tr '\n' '|')"; done
fi

# Ctrl-C: everything gone, exit 0.
kill -INT "$TRY_PID"
for _ in $(seq 150); do kill -0 "$TRY_PID" 2>/dev/null || break; sleep 0.1; done
wait "$TRY_PID"; rc=$?
left=
for n in loft-try loft-try-dst; do netns_exists "$n" && left+="namespace $n;"; done
ip link show loft-try0 >/dev/null 2>&1 && left+="link loft-try0;"
[ -e /etc/netns/loft-try ] && left+="/etc/netns/loft-try;"
[ -n "$TMPDIR_TRY" ] && [ -e "$TMPDIR_TRY" ] && left+="$TMPDIR_TRY;"
[ -n "$TMPDIR_TRY" ] && pgrep -f "$TMPDIR_TRY" >/dev/null 2>&1 && left+="processes: $(pgrep -af "$TMPDIR_TRY" | tr '\n' ' ');"
if [ $rc -eq 0 ] && [ -z "$left" ] && [ -n "$TMPDIR_TRY" ] && grep -q 'loft try: removed' "$OUT"; then pass try-ctrl-c-leaves-nothing
else fail try-ctrl-c-leaves-nothing "exit $rc, left: $left $(tail -2 "$OUT" | tr '\n' '|')"; fi

# loft exec with no loft running for the file: exit 1, said.
out=$(timeout 10 "$LOFT_BIN" exec -c "$(loft_config noloft)" -- true 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^loft exec: no loft runs for .*noloft.yaml (nothing holds tun.netns \"$APP_NS\")"; then pass exec-no-loft-said
else fail exec-no-loft-said "exit $rc: $out"; fi

finish
