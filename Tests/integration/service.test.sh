#!/usr/bin/env bash
# loft as a system service (issue 30, docs/service.md), where the test machine runs no systemd:
# - scripts/install into a scratch DESTDIR installs exactly the files it lists, keeps a user's
#   configuration, and --uninstall removes exactly those (a changed configuration is kept);
# - `systemd-analyze verify` of the installed units; `systemd-analyze security --offline=true`
#   exposure of each below its bound; each unit grants only the measured capabilities;
# - the capability each privileged call needs, measured by making it with and without;
# - the binaries under the units' restrictions (setpriv: the unit's bounding set, no new
#   privileges, the unit's user): the namespace example, SOCKS5, and a front session;
# - without CAP_NET_ADMIN (and without /dev/net/tun): exit 1, the clear message, nothing left;
# - readiness over $NOTIFY_SOCKET: READY=1 only once the TUN exists, a SOCKS5 connection
#   succeeds and the holder's session is up; WATCHDOG=1 at half WATCHDOG_USEC; STOPPING=1 on
#   SIGTERM.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

FRONT_BIN=$(dirname "$LOFT_BIN")/loft-front
NOBODY=65534
S5_PORT=$((FRONT_PORT + 1))
while ss -Htuln "sport = :$S5_PORT" 2>/dev/null | grep -q .; do S5_PORT=$((S5_PORT + 1)); done
BIG_URL=http://$SRV4/big

# --- install / uninstall --------------------------------------------------------------------

D=$T_DIR/destdir
mkdir -p "$D"
install_out=$(DESTDIR=$D LOFT_SKIP_BUILD=1 LOFT_BUILD_DIR=$(dirname "$LOFT_BIN") bash "$LOFT_REPO/scripts/install" 2>&1)
MANIFEST=$D/usr/local/share/loft/installed
listed_files() { awk '$1 == "file" || $1 == "config" {print $2}' "$MANIFEST" | sort; }
listed_dirs() { awk '$1 == "dir" {print $2}' "$MANIFEST" | sort; }
present_files() { (cd "$D" && find . -mindepth 1 ! -type d | sed 's/^\.//' | sort); }
present_dirs() { (cd "$D" && find . -mindepth 1 -type d | sed 's/^\.//' | sort); }
EXPECTED="/etc/loft/app.yaml
/etc/loft/front.yaml
/etc/loft/loft.yaml
/usr/local/bin/loft
/usr/local/bin/loft-front
/usr/local/lib/systemd/system/loft-front.service
/usr/local/lib/systemd/system/loft.service
/usr/local/lib/systemd/system/loft@.service
/usr/local/lib/sysusers.d/loft.conf
/usr/local/share/bash-completion/completions/loft
/usr/local/share/bash-completion/completions/loft-front
/usr/local/share/loft/installed
/usr/local/share/man/man1/loft-front.1
/usr/local/share/man/man1/loft.1"
if [ ! -f "$MANIFEST" ]; then
    fail install-exact-files "no manifest: $install_out"
elif [ "$(listed_files)" != "$EXPECTED" ]; then
    fail install-exact-files "listed: $(diff <(echo "$EXPECTED") <(listed_files) | grep '^[<>]' | tr '\n' ' ')"
elif [ "$(present_files)" != "$EXPECTED" ] || [ "$(present_dirs)" != "$(listed_dirs)" ]; then
    fail install-exact-files "present vs listed: $(diff <(listed_files; listed_dirs) <(present_files; present_dirs) | grep '^[<>]' | tr '\n' ' ')"
else
    pass install-exact-files
fi

# The man pages are the programs' --help text; the units name the installed binaries.
p=
for prog in loft loft-front; do
    man -l "$D/usr/local/share/man/man1/$prog.1" 2>/dev/null | grep -q "$prog run" || p+="$prog.1 lacks '$prog run';"
done
grep -q '^ExecStart=/usr/local/bin/loft run -c /etc/loft/%i.yaml$' "$D/usr/local/lib/systemd/system/loft@.service" || p+="loft@.service ExecStart;"
grep -q '@BINDIR@' "$D"/usr/local/lib/systemd/system/*.service && p+="@BINDIR@ left in a unit;"
if [ -z "$p" ]; then pass install-man-units; else fail install-man-units "$p"; fi

# The installed sysusers.d file makes the user loft-front (into a scratch root's /etc/passwd).
U=$T_DIR/users-root
mkdir -p "$U/etc"
out=$(systemd-sysusers --root="$U" "$D/usr/local/lib/sysusers.d/loft.conf" 2>&1)
if grep -q '^loft-front:x:[0-9]*:[0-9]*:loft-front:/var/lib/loft-front:/usr/sbin/nologin$' "$U/etc/passwd" 2>/dev/null; then
    pass sysusers-front-user
else
    fail sysusers-front-user "$out $(cat "$U/etc/passwd" 2>&1)"
fi

# Bash completion: the commands, and each command's options.
comp() {   # comp FILE WORD...: what completing the last word offers
    local f=$1
    shift
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); fn=$(complete -p "$1" | awk "{print \$3}"); "$fn"; echo "${COMPREPLY[*]}"' _ "$f" "$@"
}
C=$D/usr/local/share/bash-completion/completions
p=
[ "$(comp "$C/loft" loft "")" = "run check status reload path-changed exec try --help --version" ] || p+="loft: $(comp "$C/loft" loft "");"
[ "$(comp "$C/loft" loft status --w)" = "--watch --wide" ] || p+="loft status --w: $(comp "$C/loft" loft status --w);"
[ "$(comp "$C/loft" loft status --sort "")" = "bytes age up down" ] || p+="--sort;"
[ "$(comp "$C/loft-front" loft-front s)" = "stats" ] || p+="loft-front s: $(comp "$C/loft-front" loft-front s);"
if [ -z "$p" ]; then pass bash-completion; else fail bash-completion "$p"; fi

# The example configurations are valid as installed (the front's with the test's certificate).
p=
for c in loft app; do out=$("$LOFT_BIN" check "$D/etc/loft/$c.yaml" 2>&1) || p+="$out;"; done
sed -e "s|/etc/loft/front.pem|$T_DIR/pki/server.pem|" -e "s|/etc/loft/front.key|$T_DIR/pki/server.key|" \
    "$D/etc/loft/front.yaml" >"$T_DIR/front-example.yaml"
out=$("$FRONT_BIN" check "$T_DIR/front-example.yaml" 2>&1) || p+="$out;"
if [ -z "$p" ]; then pass examples-check; else fail examples-check "$p"; fi

# systemd-analyze verify: against a scratch root holding the installed files and a copy of
# the host's own unit folder (for sysinit.target and the like); man pages from the install.
if [ -f "$MANIFEST" ]; then
    V=$T_DIR/verify-root
    mkdir -p "$V/usr/lib/systemd"
    cp -a "$D/." "$V/"
    cp -a /usr/lib/systemd/system "$V/usr/lib/systemd/"
    out=$(cd "$V/usr/local/lib/systemd/system" && MANPATH=$V/usr/local/share/man \
        systemd-analyze verify --root="$V" loft.service loft@app.service loft-front.service 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && ! echo "$out" | grep -q 'loft'; then pass units-verify
    else fail units-verify "exit $rc: $(echo "$out" | grep loft | head -5 | tr '\n' '|')"; fi
    # Exposure (0 best … 10 worst) of each unit; the bounds are the values measured plus 0.2.
    p=
    for pair in loft.service:2.6 loft@app.service:4.6 loft-front.service:1.9; do
        u=${pair%%:*} bound=${pair#*:}
        score=$(systemd-analyze security --offline=true --root="$V" "$u" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
        note "$u exposure $score (bound $bound)"
        [ -n "$score" ] && awk -v s="$score" -v b="$bound" 'BEGIN { exit !(s <= b) }' || p+="$u exposure ${score:-?} > $bound;"
    done
    if [ -z "$p" ]; then pass units-security; else fail units-security "$p"; fi
else
    fail units-verify "not installed"
    fail units-security "not installed"
fi

# Each unit grants only the capabilities measured below, and the front runs as its own user.
p=
unit_caps() { sed -n "s/^$2=//p" "$D/usr/local/lib/systemd/system/$1"; }
[ "$(unit_caps loft@.service CapabilityBoundingSet)" = "CAP_NET_ADMIN CAP_SYS_ADMIN" ] || p+="loft@ bounding: $(unit_caps loft@.service CapabilityBoundingSet);"
[ "$(unit_caps loft.service CapabilityBoundingSet)" = "CAP_NET_ADMIN" ] || p+="loft bounding: $(unit_caps loft.service CapabilityBoundingSet);"
[ "$(unit_caps loft-front.service CapabilityBoundingSet)" = "CAP_NET_BIND_SERVICE" ] || p+="front bounding;"
[ "$(unit_caps loft-front.service User)" = "loft-front" ] || p+="front user;"
for u in loft.service loft@.service loft-front.service; do
    [ "$(unit_caps $u Type)" = notify ] || p+="$u not Type=notify;"
    [ "$(unit_caps $u Restart)" = on-failure ] || p+="$u Restart;"
    [ -n "$(unit_caps $u WatchdogSec)" ] || p+="$u WatchdogSec;"
done
if [ -z "$p" ]; then pass units-capabilities; else fail units-capabilities "$p"; fi

# A configuration the user already has is never overwritten, nor removed by --uninstall.
D2=$T_DIR/destdir2
mkdir -p "$D2/etc/loft"
echo "log: debug  # mine" >"$D2/etc/loft/loft.yaml"
DESTDIR=$D2 LOFT_SKIP_BUILD=1 LOFT_BUILD_DIR=$(dirname "$LOFT_BIN") bash "$LOFT_REPO/scripts/install" >/dev/null 2>&1
mine=$(cat "$D2/etc/loft/loft.yaml")
grep -q ' /etc/loft/loft.yaml' "$D2/usr/local/share/loft/installed" && mine+=" (listed)"
DESTDIR=$D2 bash "$LOFT_REPO/scripts/install" --uninstall >/dev/null 2>&1
left=$(cd "$D2" && find . -mindepth 1 | sort | tr '\n' ' ')
if [ "$mine" = "log: debug  # mine" ] && [ "$left" = "./etc ./etc/loft ./etc/loft/loft.yaml " ]; then
    pass install-keeps-user-config
else
    fail install-keeps-user-config "file: $mine; after uninstall: $left"
fi

# --uninstall removes exactly what was installed; an example changed since is kept, and said.
if [ -f "$MANIFEST" ]; then
    echo "# changed" >>"$D/etc/loft/app.yaml"
    out=$(DESTDIR=$D bash "$LOFT_REPO/scripts/install" --uninstall 2>&1)
    left=$(cd "$D" && find . -mindepth 1 | sort | tr '\n' ' ')
    if [ "$left" = "./etc ./etc/loft ./etc/loft/app.yaml " ] && echo "$out" | grep -q 'kept /etc/loft/app.yaml'; then
        pass uninstall-exact
    else
        fail uninstall-exact "left: $left; said: $(echo "$out" | tr '\n' '|')"
    fi
else
    fail uninstall-exact "not installed"
fi

# --- which call needs which capability (measured) -------------------------------------------
# Each privileged call loft makes, once with the one capability it needs and once without it
# (root otherwise, as the units run loft). The table in docs/service.md is this case's output.
CAPNS=loft-capns-$T_ID
T_NETNS+=("$CAPNS"); register netns "$CAPNS"
ip netns add "$CAPNS"
with() { setpriv --bounding-set=-all,+"$1" --inh-caps=-all --no-new-privs -- "${@:2}" >/dev/null 2>&1; }
without() { setpriv --bounding-set=-"$1" --inh-caps=-all --no-new-privs -- "${@:2}" >/dev/null 2>&1; }
TUNPY='import fcntl, struct, sys; f = open("/dev/net/tun", "rb+", buffering=0); fcntl.ioctl(f, 0x400454ca, struct.pack("16sH", sys.argv[1].encode(), 0x0001 | 0x1000))'
MARKPY='import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, 36, 7)'
BINDPY='import socket; s = socket.socket(); s.bind(("127.0.0.1", 1000 + __import__("os").getpid() % 23))'
# measure NAME CAP[,-ALT] COMMAND...: fails without CAP (and ALT, a capability the kernel takes
# instead), works with CAP alone.
measure() {
    local name=$1 cap=${2%%,*} drop=$2
    shift 2
    if without "$drop" "$@"; then echo "$name: works without ${drop//,-/ and };"; return; fi
    with "$cap" "$@" || echo "$name: fails with $cap alone;"
    local alt=${drop#$cap}
    note "capability: $name needs $cap${alt:+ (or ${alt#,-})}"
}
ip -n "$CAPNS" tuntap add dev loftcapd mode tun
p=
p+=$(measure "TUNSETIFF (create the TUN)" net_admin python3 -c "$TUNPY" loftcap0)
ncap() {   # the measured call inside the namespace: nsenter first, then setpriv
    local mode=$1 cap=$2
    shift 2
    if [ "$mode" = with ]; then nsenter --net=/run/netns/"$CAPNS" setpriv --bounding-set=-all,+"$cap" --inh-caps=-all --no-new-privs -- "$@"
    else nsenter --net=/run/netns/"$CAPNS" setpriv --bounding-set=-"$cap" --inh-caps=-all --no-new-privs -- "$@"; fi
} >/dev/null 2>&1
measure_ns() {
    local name=$1 cap=$2
    shift 2
    if ncap without "$cap" "$@"; then echo "$name: works without $cap;"; return; fi
    ncap with "$cap" "$@" || echo "$name: fails with $cap alone;"
    note "capability: $name needs $cap"
}
p+=$(measure_ns "RTM_NEWLINK (MTU, up)" net_admin ip link set loftcapd mtu 1400 up)
p+=$(measure_ns "RTM_NEWADDR (address on a link)" net_admin ip addr add 198.18.0.5/32 dev loftcapd)
p+=$(measure_ns "RTM_NEWROUTE (default route)" net_admin ip route replace default dev loftcapd)
p+=$(measure "SO_MARK (host mode's mark)" net_admin,-net_raw python3 -c "$MARKPY")
p+=$(measure "setns(CLONE_NEWNET)" sys_admin nsenter --net=/run/netns/"$CAPNS" true)
p+=$(measure "ip netns add (unshare + bind mount)" sys_admin ip netns add "loft-capns2-$T_ID")
ip netns del "loft-capns2-$T_ID" 2>/dev/null
p+=$(measure "bind below ip_unprivileged_port_start" net_bind_service python3 -c "$BINDPY")
if [ -z "$p" ]; then pass capability-measured; else fail capability-measured "$p"; fi

# --- under the units' restrictions ----------------------------------------------------------

# as_unit CAPS [USER] -- COMMAND...: the unit's bounding set (and ambient set for a user), no
# new privileges.
as_unit() {
    local caps=$1 user=$2 c b=-all a=-all
    shift 3
    for c in ${caps//,/ }; do b+=",+$c"; a+=",+$c"; done
    if [ "$user" = root ]; then
        exec setpriv --bounding-set="$b" --inh-caps=-all --no-new-privs -- "$@"
    else
        exec setpriv --reuid="$user" --regid="$user" --clear-groups --bounding-set="$b" --inh-caps="$a" \
            --ambient-caps="$a" --no-new-privs -- "$@"
    fi
}

# Without CAP_NET_ADMIN: exit 1 naming it, before anything exists.
cfg=$(loft_config nocap)
out=$(as_unit sys_admin root -- timeout 20 "$LOFT_BIN" run -c "$cfg" 2>&1 </dev/null)
rc=$?
left=$(loft_leftovers "$APP_NS" "$TUN_NAME" yes)
[ -e "/run/loft/netns-$APP_NS.lock" ] && left+="lock file;"
if [ $rc -eq 1 ] && echo "$out" | grep -q 'missing capability CAP_NET_ADMIN' && [ -z "$left" ] && ! echo "$out" | grep -q 'event='; then
    pass no-net-admin-clear-message
else
    fail no-net-admin-clear-message "exit $rc: $(echo "$out" | head -3 | tr '\n' '|') left: $left"
fi

# No /dev/net/tun (a mount namespace where /dev/net is empty): the device and the module named,
# start.failed without tun.down, the namespace loft made gone.
out=$(unshare -m sh -c "mount -t tmpfs none /dev/net && exec timeout 20 '$LOFT_BIN' run -c '$cfg'" 2>&1 </dev/null)
rc=$?
left=$(loft_leftovers "$APP_NS" "$TUN_NAME" yes)
if [ $rc -eq 1 ] && echo "$out" | grep -q '/dev/net/tun does not exist (the kernel.s tun module' \
    && ! echo "$out" | grep -q 'event=tun.down' && [ -z "$left" ]; then
    pass no-dev-net-tun
else
    fail no-dev-net-tun "exit $rc: $(echo "$out" | grep -v 'event=ready' | tail -2 | tr '\n' '|') left: $left"
fi

# The namespace example under loft@.service's capabilities: a download through the TUN.
LOFT_START_WRAP="as_unit net_admin,sys_admin root --"
cfg=$(loft_config unit-ns)
if loft_start "$cfg"; then
    caps=$(awk '/^CapEff/ {print $2}' "/proc/$LOFT_PID/status")
    got=$(in_app curl -sS -m 20 -o - "$BIG_URL" | sha256sum | cut -d' ' -f1)
    if [ "$got" = "$BIG_SHA" ] && [ "$caps" = 0000000000201000 ]; then pass unit-caps-namespace
    else fail unit-caps-namespace "sha $got (want $BIG_SHA), CapEff $caps"; fi
    loft_stop_clean unit-caps-namespace-teardown
else
    fail unit-caps-namespace "loft did not start"
fi

# SOCKS5 under loft.service's capabilities, and with none at all as nobody.
cat >"$T_DIR/s5.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$S5_PORT }
bridge: off
default: direct
control: $T_DIR/s5ctl/control.sock
EOF
mkdir -p "$T_DIR/s5ctl"
chmod 1777 "$T_DIR/s5ctl"     # root without CAP_DAC_OVERRIDE, and nobody, both create there
for who in "net_admin root" "_ $NOBODY"; do
    set -- $who
    name=unit-caps-socks5-${2/$NOBODY/nobody}
    as_unit "${1#_}" "$2" -- "$LOFT_BIN" run -c "$T_DIR/s5.yaml" >"$T_DIR/$name.log" 2>&1 </dev/null &
    pid=$!
    register_pid "$pid"; T_PIDS+=("$pid")
    for _ in $(seq 100); do grep -q 'event=ready' "$T_DIR/$name.log" && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    got=$(curl -sS -m 20 --socks5 127.0.0.1:$S5_PORT -o - "$BIG_URL" 2>&1 | sha256sum | cut -d' ' -f1)
    if [ "$got" = "$BIG_SHA" ]; then pass "$name"; else fail "$name" "$(tail -2 "$T_DIR/$name.log" | tr '\n' '|')"; fi
    kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
done

# loft-front as an unprivileged user (no capability: the test's port is above 1024), and a
# holder session through it carrying a download.
FD=$T_DIR/front-user
mkdir -p "$FD"
cp "$T_DIR/pki/server.pem" "$T_DIR/pki/server.key" "$FD/"
chown -R "$NOBODY" "$FD"
sed -e "s|$T_DIR/pki/|$FD/|g" -e "s|state-file: .*|state-file: $FD/front.state|" "$T_DIR/front.yaml" >"$FD/front.yaml"
echo "control: $FD/control.sock" >>"$FD/front.yaml"
# Its readiness too: READY=1 only once the listener accepts (checked the moment it arrives).
FNS=$FD/notify.sock
FNLOG=$T_DIR/front-notify.log
: >"$FNLOG"
python3 "$LOFT_REPO/Tests/interop/notify-listener.py" "$FNS" "$FNLOG" 30 --on-ready "ss -Htln 'sport = :$FRONT_PORT' | grep -q ." &
T_PIDS+=($!); register_pid $!
for _ in $(seq 50); do [ -S "$FNS" ] && break; sleep 0.1; done
chown "$NOBODY" "$FNS"
NOTIFY_SOCKET=$FNS WATCHDOG_USEC=2000000 as_unit "" "$NOBODY" -- "$FRONT_BIN" run -c "$FD/front.yaml" >>"$FRONT_LOG" 2>&1 </dev/null &
FRONT_PID=$!
register_pid "$FRONT_PID"; T_PIDS+=("$FRONT_PID")
for _ in $(seq 100); do ss -Htln "sport = :$FRONT_PORT" | grep -q . && break; sleep 0.1; done
for _ in $(seq 30); do grep -q 'WATCHDOG=1' "$FNLOG" && break; sleep 0.1; done
if grep -q 'READY=1|STATUS=listening on 127.0.0.1:' "$FNLOG" && grep -q 'on-ready-exit=0' "$FNLOG" && grep -q 'WATCHDOG=1' "$FNLOG"; then
    pass front-notify-ready
else
    fail front-notify-ready "$(head -3 "$FNLOG" | tr '\n' '|')"
fi
cfg=$(holder_config unit-holder ws)
if loft_start "$cfg"; then
    for _ in $(seq 100); do "$LOFT_BIN" status -c "$cfg" 2>/dev/null | grep -q 'home .* up' && break; sleep 0.1; done
    got=$(in_app curl -sS -m 20 -o - "$BIG_URL" | sha256sum | cut -d' ' -f1)
    user=$(awk '/^Uid/ {print $2}' "/proc/$FRONT_PID/status")
    if [ "$got" = "$BIG_SHA" ] && [ "$user" = "$NOBODY" ]; then pass unit-front-unprivileged
    else fail unit-front-unprivileged "sha $got, front uid $user: $(tail -2 "$FRONT_LOG" | tr '\n' '|')"; fi
    # The round trip loft status shows is the PING/PONG's (loopback: a few ms), not the
    # keepalive tick's 1000 ms it read before the holder timed PONGs on arrival.
    rtt=
    for _ in $(seq 60); do
        rtt=$("$LOFT_BIN" status --wide -c "$cfg" 2>/dev/null | grep -o 'rtt [0-9]* ms' | head -1 | awk '{print $2}')
        [ -n "$rtt" ] && break
        sleep 0.2
    done
    if [ -n "$rtt" ] && [ "$rtt" -lt 100 ]; then pass holder-rtt-measured; note "rtt on loopback: $rtt ms"
    else fail holder-rtt-measured "rtt '${rtt:-none}' ms: $("$LOFT_BIN" status -c "$cfg" 2>&1 | grep home | head -1)"; fi
    loft_stop_clean unit-front-teardown
else
    fail unit-front-unprivileged "loft did not start"
fi

# A quic holder dialling that front (whose carriers are the TCP ones): the client says no QUIC
# listener answered, not only "Connection refused".
cat >"$T_DIR/quic-none.yaml" <<EOF
log: info
socks5: off
bridge: off
outbounds:
  - name: home
    type: loft
    server: 127.0.0.1:$FRONT_PORT
    carrier: quic
    token: holder-test-token
    tls: { server-name: front.test, ca: $T_DIR/pki/ca.pem }
default: home
control: $T_DIR/quic-none.sock
EOF
"$LOFT_BIN" run -c "$T_DIR/quic-none.yaml" >"$T_DIR/quic-none.log" 2>&1 </dev/null &
qpid=$!
register_pid "$qpid"; T_PIDS+=("$qpid")
said=
for _ in $(seq 50); do
    said=$("$LOFT_BIN" status --wide -c "$T_DIR/quic-none.yaml" 2>/dev/null | grep -o 'no QUIC listener answered ([^)]*carriers?)' | head -1)
    [ -n "$said" ] && break
    sleep 0.2
done
kill -TERM "$qpid" 2>/dev/null; wait "$qpid" 2>/dev/null
if [ -n "$said" ]; then pass quic-no-listener-said
else fail quic-no-listener-said "$("$LOFT_BIN" status --wide -c "$T_DIR/quic-none.yaml" 2>&1 | grep home | head -1) $(grep -m1 'error' "$T_DIR/quic-none.log")"; fi

# --- readiness, watchdog, stopping ----------------------------------------------------------

# READY=1 arrives only when the TUN exists in the namespace, a SOCKS5 download succeeds and the
# holder's session is up: the listener runs those checks the moment READY=1 arrives.
NS=$T_DIR/notify.sock
NLOG=$T_DIR/notify.log
: >"$NLOG"
cfg=$(SOCKS_PORT=$S5_PORT holder_config notify ws)
READY_CHECK="ip -n $APP_NS link show $TUN_NAME >/dev/null && curl -sS -m 10 --socks5 127.0.0.1:$S5_PORT -o /dev/null http://$SRV4/big && '$LOFT_BIN' status -c '$cfg' | grep -q 'home .* up'"
python3 "$LOFT_REPO/Tests/interop/notify-listener.py" "$NS" "$NLOG" 60 --on-ready "$READY_CHECK" &
LPID=$!
register_pid "$LPID"; T_PIDS+=("$LPID")
for _ in $(seq 50); do [ -S "$NS" ] && break; sleep 0.1; done
export NOTIFY_SOCKET=$NS WATCHDOG_USEC=1000000
loft_start "$cfg"
started=$?
unset NOTIFY_SOCKET WATCHDOG_USEC
if [ $started -eq 0 ]; then
    for _ in $(seq 100); do grep -q 'on-ready-exit' "$NLOG" && break; sleep 0.1; done
    sleep 3
    if grep -q 'on-ready-exit=0' "$NLOG" && [ "$(grep -c 'READY=1' "$NLOG")" = 1 ] && grep 'READY=1' "$NLOG" | grep -q 'STATUS=.*home up'; then
        pass notify-ready-after-tun-socks5-session
    else
        fail notify-ready-after-tun-socks5-session "$(head -3 "$NLOG" | tr '\n' '|')"
    fi
    # WATCHDOG=1 every 500 ms (half of WATCHDOG_USEC=1 s), within 100 ms each.
    gaps=$(awk '/ WATCHDOG=1$/ { if (last) print $1 - last; last = $1 }' "$NLOG" | tr '\n' ' ')
    n=$(echo "$gaps" | wc -w)
    bad=$(echo "$gaps" | tr ' ' '\n' | awk 'NF && ($1 < 400 || $1 > 600)' | tr '\n' ' ')
    if [ "$n" -ge 4 ] && [ -z "$bad" ]; then pass notify-watchdog-interval; note "watchdog gaps ms: $gaps"
    else fail notify-watchdog-interval "gaps ms: $gaps"; fi
    kill -TERM "$LOFT_PID"
    for _ in $(seq 50); do grep -q 'STOPPING=1' "$NLOG" && break; sleep 0.1; done
    loft_stop TERM >/dev/null
    if grep -q 'STOPPING=1' "$NLOG"; then pass notify-stopping; else fail notify-stopping "$(tail -2 "$NLOG" | tr '\n' '|')"; fi
else
    fail notify-ready-after-tun-socks5-session "loft did not start"
    fail notify-watchdog-interval "loft did not start"
    fail notify-stopping "loft did not start"
fi

finish
