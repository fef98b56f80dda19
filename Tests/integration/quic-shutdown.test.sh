#!/usr/bin/env bash
# loft-front stopped with SIGTERM while quic and h3 sessions are attached and moving bytes
# (root, namespaces): issue 28, 1 — the front closed its UDP socket before its sessions, whose
# connections then wrote through a freed listener (SIGSEGV in 7 of 15 runs). Six rounds,
# quic and h3 in turn: front and loft (the holder, `hold: true`) started, a rate-limited
# download through the session, SIGTERM to the front while it runs.
#   quic-sigterm-exit-0       every round: the front exits 0 after event=stopped (no signal death)
#   quic-sigterm-goaway       every round: loft's holder logs the front's GOAWAY shutdown (it
#                             reached the client through the still-open socket)
#   quic-sigterm-port-free    the front's UDP port is free again at once after each exit
# Bounded: about 40 s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/holder-lib.sh"

echo "carriers: [quic, h3]" >>"$T_DIR/front.yaml"
ROUNDS=${QUIC_SHUTDOWN_ROUNDS:-6}
exits=0 goaways=0 freed=0 why=
for i in $(seq "$ROUNDS"); do
    carrier=quic; [ $((i % 2)) -eq 0 ] && carrier=h3
    : >"$FRONT_LOG"
    if ! front_start; then why+="round $i: front did not start; "; continue; fi
    cfg=$(holder_config "sd$i" "$carrier" "hold: true")
    if ! loft_start "$cfg"; then why+="round $i: loft did not start; "; front_kill; continue; fi
    LOFT_CFG=$cfg
    if ! wait_state up 15; then
        why+="round $i ($carrier): session not up ($(field 'o["detail"]')); "
        loft_stop; front_kill; continue
    fi
    in_app curl -gsS --max-time 20 -o /dev/null "http://$SRV4/slow/f$((i % 8))" 2>/dev/null &
    CURL=$!
    sleep 0.7
    kill -TERM "$FRONT_PID"
    rc=0
    wait "$FRONT_PID" || rc=$?
    if [ $rc -eq 0 ] && grep -q 'event=stopped' "$FRONT_LOG"; then exits=$((exits + 1))
    else why+="round $i ($carrier): front exit $rc $(grep -m1 -iE 'fatal|crash|signal' "$FRONT_LOG" | cut -c1-80); "; fi
    FRONT_PID=
    if python3 -c "import socket,sys; u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', int(sys.argv[1])))" "$FRONT_PORT" 2>/dev/null
    then freed=$((freed + 1)); else why+="round $i: UDP port $FRONT_PORT still bound; "; fi
    for _ in $(seq 30); do grep -q 'event=holder.goaway.*reason=shutdown' "$LOFT_LOG" && break; sleep 0.1; done
    if grep -q 'event=holder.goaway.*reason=shutdown' "$LOFT_LOG"; then goaways=$((goaways + 1))
    else why+="round $i ($carrier): no GOAWAY shutdown at loft; "; fi
    kill "$CURL" 2>/dev/null; wait "$CURL" 2>/dev/null
    loft_stop || why+="round $i: loft exit $LOFT_RC; "
done
note "$ROUNDS rounds (quic, h3 in turn): front exited 0 in $exits, GOAWAY reached loft in $goaways, UDP port free in $freed"
[ "$exits" -eq "$ROUNDS" ] && pass quic-sigterm-exit-0 || fail quic-sigterm-exit-0 "$exits of $ROUNDS: $why"
[ "$goaways" -eq "$ROUNDS" ] && pass quic-sigterm-goaway || fail quic-sigterm-goaway "$goaways of $ROUNDS: $why"
[ "$freed" -eq "$ROUNDS" ] && pass quic-sigterm-port-free || fail quic-sigterm-port-free "$freed of $ROUNDS: $why"
finish
