#!/usr/bin/env bash
# Streams that survive a lost carrier (docs/protocol.md §8.1, replay): app namespace → TUN →
# loft → ws, get or h2 over a delay line (10 ms each way) → loft-front in the srv namespace.
# Per carrier, a 50 MiB download read at ~10 MB/s (curl --limit-rate: the backpressure reaches
# the front), a 50 MiB upload sent at ~10 MB/s, and, from 0.3 s before the break, a third 50 MiB
# download read as fast as it comes (so bytes are in flight) run while the carrier is broken
# three ways: `loft path-changed`, the front's port dropped both ways for 5 s (nftables), and
# the connection reset both ways (nftables `reject with tcp reset`). Every transfer completes
# with its SHA-256, the app sees no reset (curl and the uploader exit 0), the session resumed
# with its streams, bytes were sent again (replayed-bytes on loft or the front) and no stream
# was lost. An SSH session (openssh-server in the srv namespace, key auth made by the test)
# printing a counter every 100 ms loses no line across a 5 s outage. A front restarted from its
# state file cannot have the streams: the download is reset and loft says so once. Then the grace period: a
# front with resume-grace 3 s and an outage longer than that ends the flows with resets on both
# sides (streams-lost), frees what the parked session held (replay_held_bytes 0, no socket left
# at the destination). And the versions: loft with resume-streams off against this front, and
# loft against a front with resume-grace 0, behave as before replay (the in-flight download is
# reset, the session resumes, no protocol error).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

RATE=10000000
NFT_TABLE=loftresume$T_ID
on_cleanup "nft delete table inet $NFT_TABLE 2>/dev/null"

# loft-front runs in the srv namespace at the far end of a delay line (lib.sh line_up:
# Tests/tools/delayline.py, 10 ms each way, no loss): a carrier with bytes in flight when it
# breaks, as a real path has (on loopback nothing is ever in flight at these rates).
line_up "$SRV_NS" 10 0 --seed "$T_ID" || die "delay line"
sed -i "s|^listen: .*|listen: $LINE_FAR4:$FRONT_PORT|" "$T_DIR/front.yaml"
echo "control: $T_DIR/front-main.sock" >>"$T_DIR/front.yaml"
export FRONT_HOST=$LINE_FAR4
front_start() { front_run "${FRONT_CFG:-$T_DIR/front.yaml}" "$SRV_NS"; }
if ! front_start; then
    fail front-start "loft-front did not start"
    finish
fi
MAIN_FRONT_PID=$FRONT_PID
MAIN_FRONT_CFG=$T_DIR/front.yaml

# block PORT drop|reset: nftables in the root namespace drops, or answers with a TCP reset,
# every segment loft sends to the front's PORT and every one that comes back from it.
block() {
    local verdict=drop
    [ "$2" = reset ] && verdict="reject with tcp reset"
    nft add table inet "$NFT_TABLE" &&
    nft add chain inet "$NFT_TABLE" out "{ type filter hook output priority 0; policy accept; }" &&
    nft add chain inet "$NFT_TABLE" in "{ type filter hook input priority 0; policy accept; }" &&
    nft add rule inet "$NFT_TABLE" out ip daddr "$LINE_FAR4" tcp dport "$1" $verdict &&
    nft add rule inet "$NFT_TABLE" in ip saddr "$LINE_FAR4" tcp sport "$1" $verdict
}
unblock() { nft delete table inet "$NFT_TABLE" 2>/dev/null; }

# counter KEY: loft's home outbound counter (0 when absent).
counter() { local v; v=$(field "c.get(\"$1\", 0)"); echo "${v:-0}"; }

# transfers_start TAG: the rate-limited download and upload in the background.
transfers_start() {
    rm -f "$T_DIR/dl.$1" "$T_DIR/dl.$1.err" "$T_DIR/ul.$1"
    in_app curl -gsS --max-time 90 --limit-rate "$RATE" -o "$T_DIR/dl.$1" "http://$SRV4/big" 2>"$T_DIR/dl.$1.err" &
    DL_PID=$!
    in_app timeout 90 python3 "$LOFT_REPO/Tests/tools/slowup.py" "$SRV4" 9000 "$T_DIR/up" "$RATE" >"$T_DIR/ul.$1" 2>&1 &
    UL_PID=$!
}

# transfers_wait TAG: sets DL_RC/UL_RC and DL_OK/UL_OK (the SHA-256 matches).
transfers_wait() {
    wait "$DL_PID"; DL_RC=$?
    wait "$UL_PID"; UL_RC=$?
    DL_OK=; UL_OK=
    [ -f "$T_DIR/dl.$1" ] && [ "$(sha_of "$T_DIR/dl.$1")" = "$BIG_SHA" ] && DL_OK=1
    [ "$(cut -d' ' -f1 "$T_DIR/ul.$1" 2>/dev/null)" = "$UP_SHA" ] && UL_OK=1
    rm -f "$T_DIR/dl.$1"
}

# breaks CARRIER HOW: one break of the carrier (path-changed, drop, reset) mid-transfer.
# Case CARRIER-HOW.
breaks() {
    local carrier=$1 how=$2 name="$1-$2" l0 r0 p0 f0 lost0 t0 i
    l0=$(counter carrier-losses); r0=$(counter resumes-with-streams); p0=$(counter replayed-bytes)
    lost0=$(counter streams-lost); f0=$(front_stat replayed_bytes)
    transfers_start "$name"
    sleep 1.2
    # And a download the app reads as fast as it comes (window-bound: about 1 MiB per round trip
    # in flight), so the break always finds bytes on the way; started 0.3 s before the break.
    in_app curl -gsS --max-time 90 -o "$T_DIR/burst.$name" "http://$SRV4/big" 2>"$T_DIR/burst.$name.err" &
    BURST_PID=$!
    sleep 0.3
    t0=$(now_ms)
    case $how in
        path-changed) "$LOFT_BIN" path-changed -c "$LOFT_CFG" >/dev/null 2>&1 ;;
        drop) block "$FRONT_PORT" drop; sleep 5; unblock ;;
        reset)
            block "$FRONT_PORT" reset
            # Until loft saw its carrier end (the next segment either way is answered with a reset).
            for i in $(seq 50); do [ "$(counter carrier-losses)" -gt "$l0" ] && break; sleep 0.1; done
            sleep 0.3
            unblock ;;
    esac
    transfers_wait "$name"
    local r1 p1 f1 lost1 why= burst_rc burst_ok=
    wait "$BURST_PID"; burst_rc=$?
    [ -f "$T_DIR/burst.$name" ] && [ "$(sha_of "$T_DIR/burst.$name")" = "$BIG_SHA" ] && burst_ok=1
    rm -f "$T_DIR/burst.$name"
    [ "$burst_rc" -eq 0 ] && [ -n "$burst_ok" ] || why+="unlimited download: curl exit $burst_rc ($(tail -1 "$T_DIR/burst.$name.err")), sha256 $([ -n "$burst_ok" ] && echo ok || echo differs); "
    r1=$(counter resumes-with-streams); p1=$(counter replayed-bytes); f1=$(front_stat replayed_bytes)
    lost1=$(counter streams-lost)
    [ "$DL_RC" -eq 0 ] || why+="download: curl exit $DL_RC ($(tail -1 "$T_DIR/dl.$name.err")); "
    [ -n "$DL_OK" ] || why+="download sha256 differs; "
    [ "$UL_RC" -eq 0 ] && [ -n "$UL_OK" ] || why+="upload: exit $UL_RC, '$(head -c 120 "$T_DIR/ul.$name")'; "
    [ "$(counter carrier-losses)" -gt "$l0" ] || why+="the carrier was not lost; "
    [ "$r1" -gt "$r0" ] || why+="no resume with streams ($r0 -> $r1); "
    [ $((p1 - p0 + ${f1:-0} - ${f0:-0})) -gt 0 ] || why+="nothing replayed (loft $p0 -> $p1, front $f0 -> $f1); "
    [ "$lost1" = "$lost0" ] || why+="streams lost $lost0 -> $lost1; "
    if [ -z "$why" ]; then
        pass "$name"
        note "$name: outage handled in $(( $(now_ms) - t0 )) ms to the end of both transfers; replayed loft $((p1 - p0)) B, front $((${f1:-0} - ${f0:-0})) B"
    else
        fail "$name" "$why"
    fi
}

# --- each TCP carrier, three ways to lose it ------------------------------------------------
for carrier in ws get h2; do
    LOFT_CFG=$(holder_config "resume-$carrier" "$carrier")
    CASES="$carrier-path-changed $carrier-drop $carrier-reset $carrier-exit-clean"
    require_loft "$LOFT_CFG" $CASES || continue
    if ! wait_state up 15; then fail_all "not up: $(field 'o["detail"]')" $CASES; loft_stop; continue; fi
    for how in path-changed drop reset; do
        wait_state up 20 || note "$carrier: state $(field 'o["state"]') before $how"
        breaks "$carrier" "$how"
    done
    grep -q 'holder.protocol-error' "$LOFT_LOG" && note "protocol error in loft's log: $(grep 'holder.protocol-error' "$LOFT_LOG" | head -1)"
    loft_stop_clean "$carrier-exit-clean"
done

# --- an SSH session printing a counter survives a 5 s outage ---------------------------------
# Debian's openssh-server in the srv namespace (its own config, host key and port; key auth with
# a key made here), the client in the app namespace through loft (ws): a line every 100 ms, the
# carrier dropped both ways for 5 s in the middle. Every line arrives, in order, none twice.
ssh_counter() {
    local d=$T_DIR/ssh n=150 got lost0 r0 ssh_pid rc
    mkdir -p "$d" /run/sshd
    ssh-keygen -q -t ed25519 -N '' -f "$d/host_key" && ssh-keygen -q -t ed25519 -N '' -f "$d/id" || { fail ssh-counter-survives "ssh-keygen"; return; }
    cp "$d/id.pub" "$d/authorized_keys"
    printf '%s\n' "Port 2222" "ListenAddress $SRV4" "HostKey $d/host_key" "AuthorizedKeysFile $d/authorized_keys" \
        "PubkeyAuthentication yes" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
        "PermitRootLogin prohibit-password" "StrictModes no" "UsePAM no" "PidFile $d/sshd.pid" >"$d/sshd_config"
    bg_in "$SRV_NS" sshd /usr/sbin/sshd -D -e -f "$d/sshd_config"
    wait_listen "$SRV_NS" tcp 2222 || { fail ssh-counter-survives "sshd did not start: $(tail -3 "$T_DIR/sshd.log" | tr '\n' '|')"; return; }
    lost0=$(counter streams-lost); r0=$(counter resumes-with-streams)
    in_app timeout 60 ssh -n -i "$d/id" -p 2222 -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o LogLevel=ERROR "root@$SRV4" "i=0; while [ \$i -lt $n ]; do echo line-\$i; i=\$((i + 1)); sleep 0.1; done" \
        >"$d/out" 2>"$d/err" &
    ssh_pid=$!
    for _ in $(seq 100); do [ "$(wc -l <"$d/out")" -ge 20 ] && break; sleep 0.1; done
    block "$FRONT_PORT" drop; sleep 5; unblock
    wait "$ssh_pid"; rc=$?
    got=$(python3 -c '
import sys
lines = open(sys.argv[1]).read().split()
want = ["line-%d" % i for i in range(int(sys.argv[2]))]
bad = next((i for i, (a, b) in enumerate(zip(lines, want)) if a != b), min(len(lines), len(want)))
print("ok" if lines == want else "got %d lines; first difference at line %d" % (len(lines), bad))' "$d/out" "$n")
    if [ "$rc" -eq 0 ] && [ "$got" = ok ] && [ "$(counter resumes-with-streams)" -gt "$r0" ] && [ "$(counter streams-lost)" = "$lost0" ]; then
        pass ssh-counter-survives
        note "ssh: $n lines, one every 100 ms, a 5 s outage in the middle: all arrived in order (resumes-with-streams $r0 -> $(counter resumes-with-streams))"
    else
        fail ssh-counter-survives "ssh exit $rc ($(tail -1 "$d/err")), $got, resumes-with-streams $r0 -> $(counter resumes-with-streams), streams-lost $lost0 -> $(counter streams-lost)"
    fi
}
# front_restart_check: loft-front killed (SIGKILL) mid-download and started again from its state
# file has the instance but not the streams: the download is reset, loft says so once
# (holder.streams-lost) and the session goes on. Case front-restart-streams-lost.
front_restart_check() {
    local lost0 n0 rc
    lost0=$(counter streams-lost); n0=$(grep -c 'holder.streams-lost' "$LOFT_LOG")
    in_app curl -gsS --max-time 60 --limit-rate "$RATE" -o /dev/null "http://$SRV4/big" 2>"$T_DIR/restart.err" &
    DL_PID=$!
    sleep 1.5
    front_kill
    front_start || { fail front-restart-streams-lost "the front did not start again"; return; }
    wait "$DL_PID"; rc=$?
    if wait_state up 20 && [ "$rc" -ne 0 ] && [ "$(counter streams-lost)" -gt "$lost0" ] \
        && [ "$(grep -c 'holder.streams-lost' "$LOFT_LOG")" -eq $((n0 + 1)) ] \
        && in_app curl -gsf --max-time 10 -o /dev/null "http://$SRV4/small"; then
        pass front-restart-streams-lost
        note "front restart: $(grep 'holder.streams-lost' "$LOFT_LOG" | tail -1 | cut -c1-200)"
    else
        fail front-restart-streams-lost "curl exit $rc, streams-lost $lost0 -> $(counter streams-lost), holder.streams-lost lines $n0 -> $(grep -c 'holder.streams-lost' "$LOFT_LOG"), state $(field 'o["state"]')"
    fi
}

LOFT_CFG=$(holder_config resume-ssh ws)
if require_loft "$LOFT_CFG" ssh-counter-survives front-restart-streams-lost ssh-exit-clean; then
    if wait_state up 15; then
        if [ -x /usr/sbin/sshd ]; then ssh_counter
        else fail ssh-counter-survives "no /usr/sbin/sshd (Debian's openssh-server: scripts/deps.sh --test)"; fi
        front_restart_check
    else
        fail_all "not up: $(field 'o["detail"]')" ssh-counter-survives front-restart-streams-lost
    fi
    loft_stop_clean ssh-exit-clean
fi

# --- versions: loft without replay against this front ---------------------------------------
old_behaviour() {    # old_behaviour NAME: path-changed mid-download resets it, as before replay
    local name=$1 r0 e0 p0
    wait_state up 15 || { fail "$name" "not up: $(field 'o["detail"]')"; return; }
    r0=$(counter resumes); e0=$(front_stat protocol_errors); p0=$(front_stat sessions_parked)
    in_app curl -gsS --max-time 60 --limit-rate "$RATE" -o /dev/null "http://$SRV4/big" 2>"$T_DIR/$name.err" &
    DL_PID=$!
    sleep 1.5
    "$LOFT_BIN" path-changed -c "$LOFT_CFG" >/dev/null 2>&1
    wait "$DL_PID"; DL_RC=$?
    if wait_state up 15 && [ "$(counter resumes)" -gt "$r0" ] && [ "$DL_RC" -ne 0 ] \
        && [ "$(front_stat protocol_errors)" = "$e0" ] && [ "$(front_stat sessions_parked)" = "$p0" ] \
        && [ "$(counter resumes-with-streams)" = 0 ] && ! grep -q 'holder.protocol-error' "$LOFT_LOG" \
        && in_app curl -gsf --max-time 10 -o /dev/null "http://$SRV4/small"; then
        pass "$name"; note "$name: the in-flight download ended ($(tail -1 "$T_DIR/$name.err")), the session resumed"
    else
        fail "$name" "curl exit $DL_RC, resumes $r0 -> $(counter resumes), resumes-with-streams $(counter resumes-with-streams), front protocol_errors $e0 -> $(front_stat protocol_errors), sessions_parked $p0 -> $(front_stat sessions_parked)"
    fi
}

LOFT_CFG=$(holder_config resume-old-client ws)
sed -i 's/^    carrier: ws$/&\n    resume-streams: false/' "$LOFT_CFG"
if require_loft "$LOFT_CFG" old-client-new-front old-client-exit-clean; then
    old_behaviour old-client-new-front
    loft_stop_clean old-client-exit-clean
fi

# --- a front without replay (resume-grace 0) and a front with a short grace period ----------
OLD_PORT=$((FRONT_PORT + 1)); GRACE_PORT=$((FRONT_PORT + 2))
sed -e "s|^listen: .*|listen: $LINE_FAR4:$OLD_PORT|; s|front.state|front-old.state|; s|front-main.sock|front-old.sock|" "$MAIN_FRONT_CFG" >"$T_DIR/front-old.yaml"
echo "resume-grace: 0s" >>"$T_DIR/front-old.yaml"
sed -e "s|^listen: .*|listen: $LINE_FAR4:$GRACE_PORT|; s|front.state|front-grace.state|; s|front-main.sock|front-grace.sock|" "$MAIN_FRONT_CFG" >"$T_DIR/front-grace.yaml"
echo "resume-grace: 3s" >>"$T_DIR/front-grace.yaml"

FRONT_CFG=$T_DIR/front-old.yaml
if front_start; then
    LOFT_CFG=$(PORT=$OLD_PORT holder_config resume-old-front ws)
    if require_loft "$LOFT_CFG" new-client-old-front old-front-exit-clean; then
        old_behaviour new-client-old-front
        loft_stop_clean old-front-exit-clean
    fi
else
    fail_all "the second front did not start" new-client-old-front old-front-exit-clean
fi

FRONT_CFG=$T_DIR/front-grace.yaml
CASES="grace-over-resets-both grace-over-frees grace-exit-clean"
if front_start; then
    GRACE_FRONT_PID=$FRONT_PID
    LOFT_CFG=$(PORT=$GRACE_PORT holder_config resume-grace ws)
    if require_loft "$LOFT_CFG" $CASES; then
        wait_state up 15
        rss0=$(rss_kib "$GRACE_FRONT_PID")
        est0=$(in_srv ss -Htn state established '( sport = :80 )' | wc -l)
        lost0=$(counter streams-lost)
        in_app curl -gsS --max-time 60 --limit-rate "$RATE" -o /dev/null "http://$SRV4/big" 2>"$T_DIR/grace.err" &
        DL_PID=$!
        sleep 1.5
        est=$(in_srv ss -Htn state established '( sport = :80 )' | wc -l)
        held=$(front_stat replay_held_bytes)
        # Longer than 2 keepalive intervals (4 s: both ends notice) plus the grace period (3 s).
        block "$GRACE_PORT" drop
        t0=$(now_ms)
        for _ in $(seq 150); do [ "$(front_stat parked_expired)" -ge 1 ] && break; sleep 0.1; done
        sleep 1
        # Nothing attached, nothing parked: nothing may be held.
        held_after=$(front_stat replay_held_bytes); parked_after=$(front_stat sessions_parked_now)
        left=$(in_srv ss -Htn state established '( sport = :80 )' | wc -l)
        unblock
        wait "$DL_PID"; DL_RC=$?
        wait_state up 20
        lost1=$(counter streams-lost)
        if [ "$DL_RC" -ne 0 ] && [ "$lost1" -gt "$lost0" ] && [ "$(front_stat streams_lost)" -ge 1 ] \
            && [ "$(front_stat parked_expired)" -ge 1 ] && grep -q 'holder.streams-lost' "$LOFT_LOG"; then
            pass grace-over-resets-both
            note "grace: download ended ($(tail -1 "$T_DIR/grace.err")) after $(( $(now_ms) - t0 )) ms; loft streams-lost $lost0 -> $lost1, front streams_lost $(front_stat streams_lost)"
        else
            fail grace-over-resets-both "curl exit $DL_RC, loft streams-lost $lost0 -> $lost1, front streams_lost $(front_stat streams_lost), parked_expired $(front_stat parked_expired)"
        fi
        rss1=$(rss_kib "$GRACE_FRONT_PID")
        note "grace: front RSS ${rss0} KiB before, ${rss1} KiB after; held for replay during the transfer $held B; established at nginx $est0 before, $est during, $left after"
        if [ "$held_after" = 0 ] && [ "$parked_after" = 0 ] && [ "$left" -le "$est0" ] \
            && [ "$est" -gt "$est0" ] && [ -n "$rss1" ] && [ "$rss1" -le $((rss0 + 32768)) ]; then
            pass grace-over-frees
        else
            fail grace-over-frees "replay_held_bytes $held_after, parked now $parked_after, sockets at nginx $est0 before, $est during, $left after, RSS $rss0 -> $rss1 KiB"
        fi
        loft_stop_clean grace-exit-clean
    fi
else
    fail_all "the third front did not start" $CASES
fi

finish
