#!/usr/bin/env bash
# `loft check` and `loft run` on good and bad configs: exit codes and file:line:column errors.
. "$(dirname "$0")/lib.sh"

cd "$T_DIR"
cat >good.yaml <<EOF2
log: info
tun:
  name: loft0
  netns: loft-app-$T_ID
  mtu: 1500
  ipv4: 198.18.0.1/30
  ipv6: fd00:18::1/126
  route-all: true
  dns: [198.18.1.2]
  icmp: reply
socks5: off
bridge: off
limits: { max-flows: 16384, connect-timeout: 10s, tcp-idle-timeout: 2h, udp-idle-timeout: 60s }
default: direct
EOF2
printf 'log: info\ntun:\n  name: loft0\n  mtux: 1500\n' >bad-key.yaml
printf 'log: info\ntun:\n  name: loft0\n  mtu: 99\n' >bad-mtu.yaml
printf 'log: loud\n' >bad-log.yaml
printf 'colour: red\n' >bad-top.yaml
printf 'tun:\n  name: loft0\n  icmp: reply\nlimits: { tcp-idle-timeout: soon }\n' >bad-duration.yaml
holder_yaml() {     # holder_yaml CARRIER CA: a loft outbound as the default
    printf 'outbounds:\n  - name: home\n    type: loft\n    server: 127.0.0.1:8443\n    carrier: %s\n    token: t\n    tls: { server-name: front.test, ca: %s }\ndefault: home\n' "$1" "$2"
}
: >ca.pem
holder_yaml ws missing-ca.pem >bad-ca.yaml
holder_yaml ws ca.pem >good-holder.yaml
holder_yaml h2 ca.pem >good-h2.yaml
holder_yaml quic ca.pem >good-quic.yaml
holder_yaml h3 ca.pem >good-h3.yaml
sstp_yaml() {       # sstp_yaml PASSWORD-LINE: an sstp outbound as the default
    printf 'outbounds:\n  - name: corp\n    type: sstp\n    server: 127.0.0.1:8443\n    user: alice\n    %s\n    tls: { server-name: vpn.test, ca: ca.pem }\n    auth: [mschapv2, pap]\ndefault: corp\n' "$1"
}
printf 'secret\n' >pw.txt
chmod 600 pw.txt   # a password file others can read gets a warning from check (docs/links.md)
sstp_yaml 'password-file: pw.txt' >good-sstp.yaml
sstp_yaml 'password-file: missing-pw.txt' >bad-sstp.yaml

if [ ! -x "$LOFT_BIN" ]; then
    for c in help version check-good check-unknown-key check-bad-mtu check-bad-log-level \
             check-unknown-top-key check-bad-duration check-missing-file run-bad-config \
             check-holder-good check-holder-h2-good check-holder-quic-good check-holder-h3-good check-missing-ca \
             check-sstp-good check-sstp-missing-password-file; do
        fail $c "no loft binary at $LOFT_BIN"
    done
    finish
fi

"$LOFT_BIN" --help >help.out 2>&1 && grep -q 'run' help.out && pass help || fail help "$(head -3 help.out | tr '\n' '|')"
"$LOFT_BIN" --version >version.out 2>&1 && [ -s version.out ] && pass version || fail version "$(head -3 version.out | tr '\n' '|')"

out=$("$LOFT_BIN" check -c good.yaml 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -qx 'good.yaml: ok'; then
    if netns_exists "loft-app-$T_ID"; then fail check-good "check created the namespace"; else pass check-good; fi
else
    fail check-good "exit $rc: $out"
fi

# check_bad NAME FILE LINE COLUMN MESSAGE: exit 2 and a stderr line "FILE:LINE:COLUMN: message",
# the message matching the extended regular expression MESSAGE (what is wrong, not only where)
check_bad() {
    local name=$1 f=$2 line=$3 col=$4 msg=$5 rc err
    "$LOFT_BIN" check -c "$f" >"$name.out" 2>"$name.err"; rc=$?
    err=$(head -3 "$name.err" | tr '\n' '|')
    if [ $rc -ne 2 ]; then fail "$name" "exit $rc (want 2): $err"
    elif ! grep -Eq "^$f:$line:$col: .+" "$name.err"; then fail "$name" "want '$f:$line:$col: ...', got: $err"
    elif ! grep -Eq "^$f:$line:$col: ($msg)" "$name.err"; then fail "$name" "want '$f:$line:$col: $msg', got: $err"
    elif [ -s "$name.out" ] && grep -q ': ok' "$name.out"; then fail "$name" "also printed ok"
    else pass "$name"; fi
}
check_bad check-unknown-key bad-key.yaml 4 3 'unknown key "mtux" in tun \(did you mean "mtu"\?'
check_bad check-bad-mtu bad-mtu.yaml 4 8 'tun.mtu must be an integer from 576 to 65535, got 99'
check_bad check-bad-log-level bad-log.yaml 1 6 'log must be error, warn, info or debug, got loud'
check_bad check-unknown-top-key bad-top.yaml 1 1 'unknown key "colour" at the top level'
check_bad check-bad-duration bad-duration.yaml 4 29 'limits.tcp-idle-timeout must be a duration .*got soon'
check_bad check-missing-ca bad-ca.yaml 2 5 'outbound "home": tls.ca missing-ca.pem: '   # the outbound: its tls.ca cannot be read
out=$("$LOFT_BIN" check -c good-holder.yaml 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -qx 'good-holder.yaml: ok'; then pass check-holder-good; else fail check-holder-good "exit $rc: $out"; fi
out=$("$LOFT_BIN" check -c good-h2.yaml 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -qx 'good-h2.yaml: ok'; then pass check-holder-h2-good; else fail check-holder-h2-good "exit $rc: $out"; fi
out=$("$LOFT_BIN" check -c good-quic.yaml 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -qx 'good-quic.yaml: ok'; then pass check-holder-quic-good; else fail check-holder-quic-good "exit $rc: $out"; fi
out=$("$LOFT_BIN" check -c good-h3.yaml 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -qx 'good-h3.yaml: ok'; then pass check-holder-h3-good; else fail check-holder-h3-good "exit $rc: $out"; fi

check_bad check-sstp-missing-password-file bad-sstp.yaml 6 20 '.*password-file'   # the password-file value
# sstp: a valid outbound (docs/sstp.md).
out=$("$LOFT_BIN" check -c good-sstp.yaml 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$out" = 'good-sstp.yaml: ok' ]; then pass check-sstp-good
else fail check-sstp-good "exit $rc: $(echo "$out" | tr '\n' '|')"; fi

"$LOFT_BIN" check -c missing.yaml >/dev/null 2>missing.err; rc=$?
if [ $rc -eq 2 ] && grep -q 'missing.yaml' missing.err; then pass check-missing-file
else fail check-missing-file "exit $rc: $(head -2 missing.err | tr '\n' '|')"; fi

# run with a bad config: exit 2 at once, the error on stderr, nothing started.
timeout 10 "$LOFT_BIN" run -c bad-mtu.yaml >run.out 2>run.err; rc=$?
if [ $rc -eq 2 ] && grep -q '^bad-mtu.yaml:4:8: ' run.err; then pass run-bad-config
else fail run-bad-config "exit $rc: $(head -2 run.err | tr '\n' '|')"; fi
finish
