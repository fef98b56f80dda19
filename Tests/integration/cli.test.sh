#!/usr/bin/env bash
# The command line as a newcomer meets it (issue 30): COMMAND --help exits 0, -V, check FILE
# without -c (loft and loft-front), what a user without root is told, the journal's priority
# prefix and --log-format json, `loft status` piped (COLUMNS, --wide, --watch without terminal
# codes), q quits --watch in tmux, --control, and `loft reload` saying what it did not apply.
# No TUN: loft runs with only SOCKS5 on a free port, its control socket in the test's folder.
. "$(dirname "$0")/lib.sh"

FRONT_BIN=$(dirname "$LOFT_BIN")/loft-front
PORT=$((20000 + T_ID % 20000 + 7))
while ss -Htuln "sport = :$PORT" 2>/dev/null | grep -q .; do PORT=$((PORT + 1)); done
CTL=$T_DIR/control.sock
cd "$T_DIR" || die "cd"

write_cfg() {   # write_cfg [extra outbound yaml]
    cat >"$T_DIR/cli.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$PORT }
bridge: off
outbounds:
  - name: blackhole
    type: drop
$1
rules:
  - { action: drop, to: [198.18.$NET.99/32, "fd00:$NET::99/128", 198.18.$NET.98/32, 198.18.$NET.97/32] }
  - { action: via, outbound: blackhole, ports: [25, 465, 587, "6660-6669"], network: tcp }
default: direct
control: $CTL
EOF
}
write_cfg ""

# --help anywhere is help: exit 0 with the usage on stdout.
p=
for cmd in "--help" "-h" "status --help" "run --help" "check -h" "reload --help"; do
    out=$("$LOFT_BIN" $cmd 2>/dev/null); rc=$?
    [ $rc -eq 0 ] && echo "$out" | grep -q '^usage: loft run' || p+="loft $cmd: exit $rc;"
done
for cmd in "--help" "stats --help" "check -h"; do
    out=$("$FRONT_BIN" $cmd 2>/dev/null); rc=$?
    [ $rc -eq 0 ] && echo "$out" | grep -q '^usage: loft-front run' || p+="loft-front $cmd: exit $rc;"
done
if [ -z "$p" ]; then pass help-exit-0; else fail help-exit-0 "$p"; fi

# -V is --version, and both name the commit.
a=$("$LOFT_BIN" -V 2>&1); b=$("$LOFT_BIN" --version 2>&1); c=$("$FRONT_BIN" -V 2>&1)
if [ "$a" = "$b" ] && echo "$a" | grep -Eq '^loft [0-9.]+ \(commit [^)]+\)$' && echo "$c" | grep -Eq '^loft-front [0-9.]+ \(commit [^)]+\)$'; then
    pass version-with-commit
else
    fail version-with-commit "-V '$a', --version '$b', loft-front -V '$c'"
fi

# check FILE without -c.
out=$("$LOFT_BIN" check "$T_DIR/cli.yaml" 2>&1); rc=$?
echo "listen: 127.0.0.1:1" >"$T_DIR/front.yaml"
fout=$("$FRONT_BIN" check "$T_DIR/front.yaml" 2>&1); frc=$?
if [ $rc -eq 0 ] && [ "$out" = "$T_DIR/cli.yaml: ok" ] && [ $frc -eq 2 ] && ! echo "$fout" | grep -q 'unknown argument' \
    && echo "$fout" | grep -q "^$T_DIR/front.yaml"; then
    pass check-without-c
else
    fail check-without-c "loft: $rc '$out'; loft-front: $frc '$fout'"
fi

# Without root: the built-in default says what it cannot do and what to do, and starts nothing.
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups timeout 10 "$LOFT_BIN" run 2>&1 </dev/null); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q 'control socket /run/loft/control.sock: cannot .*Permission denied (run as root, or set control: to a path you can write); nothing was started' \
    && ! echo "$out" | grep -q 'event='; then
    pass no-root-message
else
    fail no-root-message "exit $rc: $(echo "$out" | head -2 | tr '\n' '|')"
fi

# A listener below ip_unprivileged_port_start without CAP_NET_BIND_SERVICE: named, nothing bound.
start=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start)
if [ "$start" -gt 80 ]; then
    sed "s/listen: 127.0.0.1:$PORT/listen: 127.0.0.1:80/" "$T_DIR/cli.yaml" >"$T_DIR/low.yaml"
    out=$(setpriv --bounding-set=-net_bind_service --inh-caps=-all timeout 10 "$LOFT_BIN" run -c "$T_DIR/low.yaml" 2>&1 </dev/null); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q "missing capability CAP_NET_BIND_SERVICE (socks5 port 80 is below $start)" && [ ! -e "$CTL" ]; then
        pass low-port-capability-named
    else
        fail low-port-capability-named "exit $rc: $out"
    fi
else
    note "ip_unprivileged_port_start is $start: any port binds, low-port-capability-named not run"
fi

# Under the journal: each line starts with its syslog priority, no ts= (the journal keeps it).
# systemd sets JOURNAL_STREAM to the device and inode of the stream stderr is; here a file's.
# Inherited with stderr elsewhere, it changes nothing.
: >"$T_DIR/journal.log"
JS=$(stat -c '%d:%i' "$T_DIR/journal.log")
JOURNAL_STREAM=$JS "$LOFT_BIN" run -c "$T_DIR/cli.yaml" >"$T_DIR/journal.log" 2>&1 </dev/null &
LOFT_PID=$!
register_pid "$LOFT_PID"
for _ in $(seq 100); do grep -q 'event=ready' "$T_DIR/journal.log" && break; sleep 0.1; done
# A second loft on the same file (its control socket taken: start.failed) with the variable
# but stderr a pipe: plain text.
inherited=$(JOURNAL_STREAM=$JS timeout 10 "$LOFT_BIN" run -c "$T_DIR/cli.yaml" 2>&1 </dev/null)

# status piped: 80 columns, COLUMNS wider, --wide wider still; --control finds it.
widest() { awk '{ if (length > m) m = length } END { print m + 0 }'; }
w80=$("$LOFT_BIN" status --control "$CTL" | widest)
w200=$(COLUMNS=200 "$LOFT_BIN" status --control "$CTL" | widest)
wwide=$("$LOFT_BIN" status --control "$CTL" --wide | widest)
wcfg=$(COLUMNS=200 "$LOFT_BIN" status -c "$T_DIR/cli.yaml" | widest)
if [ "$w80" -le 80 ] && [ "$w200" -gt 80 ] && [ "$w200" -le 200 ] && [ "$wwide" -ge "$w200" ] && [ "$wcfg" = "$w200" ]; then
    pass status-width-piped
else
    fail status-width-piped "widest lines: 80 cols $w80, COLUMNS=200 $w200, --wide $wwide, -c $wcfg"
fi

# --watch piped: reports one after another, not a byte of terminal control.
timeout 2.5 "$LOFT_BIN" status --control "$CTL" --watch >"$T_DIR/watch.out" 2>&1 </dev/null
esc=$(tr -cd '\033' <"$T_DIR/watch.out" | wc -c)
reports=$(grep -c '^loft ' "$T_DIR/watch.out")
if [ "$esc" -eq 0 ] && [ "$reports" -ge 2 ]; then pass status-watch-piped
else fail status-watch-piped "$esc escape bytes, $reports reports"; fi

# q quits --watch in tmux (no Enter), and leaves the terminal as it was.
SESSION=loft-cli-$T_ID
on_cleanup "tmux kill-session -t $SESSION"
tmux new-session -d -s "$SESSION" -x 100 -y 40 "$LOFT_BIN status --control $CTL --watch; echo watch-exit=\$?; stty -a | grep -q -- -icanon && echo terminal-left-raw || echo terminal-cooked; sleep 30"
sleep 1.5
tmux send-keys -t "$SESSION" q
for _ in $(seq 30); do tmux capture-pane -p -t "$SESSION" | grep -q 'watch-exit=' && break; sleep 0.1; done
screen=$(tmux capture-pane -p -t "$SESSION")
if echo "$screen" | grep -q 'watch-exit=0' && echo "$screen" | grep -q 'terminal-cooked'; then pass status-watch-q-quits
else fail status-watch-q-quits "$(echo "$screen" | grep -v '^$' | tail -3 | tr '\n' '|')"; fi
tmux kill-session -t "$SESSION" 2>/dev/null

# reload: rules are applied; an outbound changed in the file is said not to be, and logged as a
# warning (priority 4 under the journal).
sed -i 's/6660-6669/6660-6670/' "$T_DIR/cli.yaml"
r1=$("$LOFT_BIN" reload --control "$CTL" 2>&1)
write_cfg "  - name: extra
    type: drop"
r2=$("$LOFT_BIN" reload -c "$T_DIR/cli.yaml" 2>&1)
if [ "$r1" = "rules reloaded: 2" ] && echo "$r2" | grep -q '^rules reloaded: 2$' \
    && echo "$r2" | grep -q 'not applied (restart loft for them; it runs with the old ones): outbounds$'; then
    pass reload-says-restart-needed
else
    fail reload-says-restart-needed "rules only: '$r1'; outbound added: '$(echo "$r2" | tr '\n' '|')'"
fi
kill -TERM "$LOFT_PID"; wait "$LOFT_PID"; LOFT_PID=
bad=$(grep -v '^<[3467]>level=' "$T_DIR/journal.log" | head -2)
if [ -z "$bad" ] && grep -q '^<6>level=info event=ready ' "$T_DIR/journal.log" && echo "$inherited" | grep -q '^ts=.* level=error event=start.failed' \
    && grep -q '^<4>level=warn event=reload.restart-needed changed=outbounds' "$T_DIR/journal.log"; then
    pass log-journal-priority
else
    fail log-journal-priority "$(echo "${bad:-$(head -2 "$T_DIR/journal.log")}" | tr '\n' '|') inherited: $inherited"
fi

# --log-format json: every line one JSON object with ts, level and event; numbers are numbers.
"$LOFT_BIN" run -c "$T_DIR/cli.yaml" --log-format json >"$T_DIR/json.log" 2>&1 </dev/null &
LOFT_PID=$!
register_pid "$LOFT_PID"
for _ in $(seq 100); do grep -q '"event":"ready"' "$T_DIR/json.log" && break; sleep 0.1; done
kill -TERM "$LOFT_PID"; wait "$LOFT_PID"; LOFT_PID=
out=$(python3 - "$T_DIR/json.log" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
events = []
for l in lines:
    o = json.loads(l)
    assert isinstance(o["ts"], float) and o["level"] in ("error", "warn", "info", "debug"), l
    events.append(o["event"])
ready = [json.loads(l) for l in lines if '"event":"ready"' in l][0]
assert isinstance(ready["pid"], int) and ready["socks5"] == "on", ready
assert "stopped" in events, events
print(len(lines))
EOF
)
if [ $? -eq 0 ] && [ "${out:-0}" -ge 3 ]; then pass log-json; else fail log-json "$out $(head -2 "$T_DIR/json.log" | tr '\n' '|')"; fi
out=$("$LOFT_BIN" run -c "$T_DIR/cli.yaml" --log-format xml 2>&1); rc=$?
if [ $rc -eq 2 ] && [ "$out" = "loft: --log-format is text or json" ]; then pass log-format-refused; else fail log-format-refused "exit $rc: $out"; fi

finish
