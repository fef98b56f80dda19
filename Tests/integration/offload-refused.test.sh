#!/usr/bin/env bash
# TUN offloads refused by the kernel (docs/netstack.md, "TUN offloads"): loft is started with a
# preloaded ioctl() that fails TUNSETOFFLOAD with EINVAL (compiled here with gcc; every other
# ioctl passes through). loft must reopen the TUN without the offload header, say so once in
# the log and in `loft status`, and carry traffic as plain packets: a 50 MiB download and
# upload, SHA-256 checked.
. "$(dirname "$0")/lib.sh"

cat >"$T_DIR/refuse.c" <<'CEOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/if_tun.h>
#include <stdarg.h>
#include <sys/ioctl.h>
int ioctl(int fd, unsigned long request, ...) {
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (request == TUNSETOFFLOAD) { errno = EINVAL; return -1; }
    static int (*real)(int, unsigned long, ...);
    if (!real) real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    return real(fd, request, arg);
}
CEOF
CASES="refused-logged-once status-says-off download-50MiB upload-50MiB loft-exit-clean"
if ! gcc -shared -fPIC -O2 -o "$T_DIR/refuse.so" "$T_DIR/refuse.c" -ldl 2>"$T_DIR/gcc.err"; then
    for c in $CASES; do fail "$c" "gcc: $(head -3 "$T_DIR/gcc.err" | tr '\n' '|')"; done
    finish
fi
REAL_LOFT=$LOFT_BIN
printf '#!/bin/sh\nLD_PRELOAD=%s exec %s "$@"\n' "$T_DIR/refuse.so" "$REAL_LOFT" >"$T_DIR/loft-refused"
chmod +x "$T_DIR/loft-refused"

topo_up
make_files 50
head -c $((50 * 1048576)) /dev/urandom >"$T_DIR/up"
start_nginx 1 64
start_sink
CFG=$(loft_config refused)
echo "control: $T_DIR/control.sock" >>"$CFG"
LOFT_BIN=$T_DIR/loft-refused
require_loft "$CFG" $CASES || finish
LOFT_BIN=$REAL_LOFT

n=$(grep -c 'event=tun.offload.unavailable' "$LOFT_LOG")
if [ "$n" = 1 ] && grep 'event=tun.offload.unavailable' "$LOFT_LOG" | grep -q 'Invalid argument'; then
    pass refused-logged-once
else
    fail refused-logged-once "$n lines: $(grep 'offload' "$LOFT_LOG" | head -3 | tr '\n' '|')"
fi
detail=$("$LOFT_BIN" status -c "$CFG" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
t = [i for i in d["inputs"] if i["name"] == "tun"][0]
print(t["detail"], "large-segments-in" in dict(t.get("counters", {})))')
case $detail in
    *"offload off (kernel refused TUNSETOFFLOAD: Invalid argument)"*False) pass status-says-off ;;
    *) fail status-says-off "$detail" ;;
esac

want=$(sha_of "$T_DIR/www/big")
got=$(in_app curl -sS --max-time 120 "http://$SRV4/big" | sha256sum | cut -d' ' -f1)
if [ "$got" = "$want" ]; then pass download-50MiB; else fail download-50MiB "sha256 $got != $want"; fi
want=$(sha_of "$T_DIR/up")
got=$(in_app timeout 120 socat -t 30 - "TCP4:$SRV4:9000" <"$T_DIR/up" | cut -d' ' -f1)
if [ "$got" = "$want" ]; then pass upload-50MiB; else fail upload-50MiB "sha256 $got != $want"; fi

loft_stop_clean loft-exit-clean
finish
