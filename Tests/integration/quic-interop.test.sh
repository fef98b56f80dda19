#!/usr/bin/env bash
# The quic carrier against an independent QUIC implementation (PyPI aioquic). Loopback only, no
# namespaces. Tests/interop/quic_client.py as the CLIENT of loft-front: QUIC v1 + TLS 1.3 with
# ALPN loft (certificate checked against the test CA), HELLO -> STATUS on the first
# bidirectional stream, session PING/PONG, a TCP stream echoed (200 KiB, FIN/FIN), a UDP
# association echoed (a DGRAM on the session stream, and one as a QUIC DATAGRAM frame answered
# as one), a TCP flow on a QUIC stream of its own (OPEN, OPEN_OK, 300 KiB echoed raw, FIN) and
# one refused (OPEN_FAIL not-allowed, FIN), GOAWAY + the stream's FIN, 40 flows of 1 MiB at
# once beside a new session, a wrong token (GOAWAY bad-token), another
# ALPN (handshake refused); stateless resets from a raw socket (short headers to unknown ids:
# a reset smaller than the packet, the same token for the same id, none for 21 bytes, about 100
# a second), an Initial with a forged Retry token (no answer); then hostile input: 3000 garbage
# datagrams (empty ones among them) and an Initial flood from 400 source ports that never finish
# their handshake, answered past the first 32 with Retry packets (quic-retry: auto), then 200
# Initials from 200 source addresses (127.1.0.0/16), each answered with a Retry, then a client
# that received a NEW_TOKEN comes back with it and skips the Retry: a
# legitimate session still comes up (through a Retry), the front's memory stays bounded and its
# counters say what happened.
# 1b. Tests/interop/h3_client.py (aioquic's QUIC and its aioquic.h3 H3Connection) as the CLIENT
#    of the same front's h3 carrier (ALPN h3 on the same UDP port): the session's extended
#    CONNECT (:protocol loft) answered 200, HELLO -> STATUS and PING/PONG in its body, a TCP flow
#    in a CONNECT loft-flow of its own (OPEN, 300 KiB echoed raw, END_STREAM), a UDP
#    association's DGRAM echoed on the session stream, 404 and 405 refusals, the session's end,
#    a wrong token (GOAWAY bad-token).
# 2. loft's holder (SOCKS5 input only) against Tests/interop/quic_session_server.py, an aioquic
#    SERVER that speaks the session: ALPN loft, HELLO on stream 0, its STATUS taken (up), a TCP
#    flow through SOCKS5 on a QUIC stream of its own (OPEN first, OPEN_OK, then raw bytes:
#    1 MiB echoed, SHA-256), UDP ASSOCIATE datagrams echoed, the holder's DGRAMs after the first
#    arriving as QUIC DATAGRAM frames.
# 3. loft's holder over h3 against the same aioquic server in its HTTP/3 mode (aioquic.h3): the
#    session's extended CONNECT and HELLO, a TCP flow in a CONNECT loft-flow of its own (1 MiB
#    echoed, SHA-256), UDP datagrams echoed on the session stream.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/quic-lib.sh"

TOKEN=interop-token-$T_ID
CASES="quic-handshake-alpn-loft quic-hello-status quic-session-ping-pong quic-open-tcp-ok quic-tcp-echo-200k
quic-open-udp-ok quic-udp-echo quic-udp-echo-datagram-frames quic-flow-own-stream-echo quic-flow-own-stream-refused quic-session-end quic-bad-token-goaway quic-other-alpn-refused
quic-stateless-reset quic-no-reset-for-21-bytes quic-resets-rate-limited quic-forged-token-dropped
quic-alive-after-garbage quic-alive-beside-40-busy-flows quic-alive-after-initial-flood quic-flood-answered-with-retry quic-flood-many-addresses-retry quic-new-token-skips-retry
h3-handshake-alpn-h3 h3-connect-200 h3-hello-status h3-session-ping-pong h3-flow-own-stream-echo
h3-udp-echo-on-session-stream h3-refusals-404-405 h3-session-end h3-bad-token-goaway"
SHELL_CASES="front-quic-counters front-memory-bounded front-exit-clean"

# Five free loopback ports: the front's (TCP and UDP), the TCP echo's, the UDP echo's, the
# aioquic server's, loft's SOCKS5.
interop_ports FRONT_PORT ECHO_PORT UDP_ECHO_PORT SERVER_PORT SOCKS_PORT
certs

front_yaml "quic, h3" "pool: { ipv4: 198.18.64.0/24 }" "keepalive: 10s"

front_up $CASES $SHELL_CASES || finish
rss0=$(rss_kib "$FRONT_PID")

t0=$(now_ms)
timeout -k 5 150 python3 "$INTEROP/quic_client.py" --port "$FRONT_PORT" --ca "$T_DIR/certs/ca.pem" --token "$TOKEN" \
    --echo-port "$ECHO_PORT" --udp-echo-port "$UDP_ECHO_PORT" >"$T_DIR/client.out" 2>"$T_DIR/client.err" </dev/null &
CPID=$!; T_PIDS+=("$CPID"); register_pid "$CPID"
wait "$CPID"
note "aioquic client: $(( $(now_ms) - t0 )) ms"
t0=$(now_ms)
timeout -k 5 70 python3 "$INTEROP/h3_client.py" --port "$FRONT_PORT" --ca "$T_DIR/certs/ca.pem" --token "$TOKEN" \
    --echo-port "$ECHO_PORT" --udp-echo-port "$UDP_ECHO_PORT" >>"$T_DIR/client.out" 2>>"$T_DIR/client.err" </dev/null &
CPID=$!; T_PIDS+=("$CPID"); register_pid "$CPID"
wait "$CPID"
note "aioquic h3 client: $(( $(now_ms) - t0 )) ms"
client_results $CASES

front_stats
if [ "$(sv sessions_opened)" -ge 3 ] && [ "$(sv refused_bad_token)" = 2 ] && [ "$(sv requests_rejected)" = 2 ] && [ "$(sv quic_packets_dropped)" -ge 2900 ] \
    && [ "$(sv quic_retries)" -ge 500 ] && [ "$(sv quic_tokens_validated)" -ge 3 ] && [ "$(sv quic_tokens_invalid)" -ge 1 ] \
    && [ "$(sv quic_resets)" -ge 50 ] && [ "$(sv streams_opened)" -ge 2 ] && [ "$(sv datagrams_down)" -ge 2 ]; then
    pass front-quic-counters
    note "front: sessions_opened $(sv sessions_opened), quic_packets_dropped $(sv quic_packets_dropped), quic_retries $(sv quic_retries), quic_tokens_validated $(sv quic_tokens_validated), quic_tokens_invalid $(sv quic_tokens_invalid), quic_resets $(sv quic_resets), handshakes_evicted $(sv handshakes_evicted), handshakes_failed $(sv handshakes_failed)"
else
    fail front-quic-counters "$(echo "$stats" | tr '\n' ' ')"
fi
rss1=$(rss_kib "$FRONT_PID")
if [ -n "$rss1" ] && [ "$rss1" -lt $((rss0 + 65536)) ]; then pass front-memory-bounded; note "front RSS ${rss0} kB -> ${rss1} kB"
else fail front-memory-bounded "front RSS ${rss0} kB -> ${rss1} kB (allowed +64 MiB)"; fi

front_exit_clean

# aioquic_holder SUFFIX CARRIER SERVER_PORT SOCKS_PORT [SERVER_ARG...]: Tests/interop/
# quic_session_server.py on SERVER_PORT (what it saw in RESULTS=$T_DIR/serverSUFFIX.jsonl, its log
# in serverSUFFIX.log) and loft's holder over CARRIER to it with only a SOCKS5 input on
# SOCKS_PORT (config loftSUFFIX.yaml, log loftSUFFIX.log, control CTL), then the holder's state
# in $state once up (or after 10 s).
aioquic_holder() {
    local sfx=$1 carrier=$2 server_port=$3 socks_port=$4
    shift 4
    RESULTS=$T_DIR/server$sfx.jsonl
    : >"$RESULTS"
    python3 "$INTEROP/quic_session_server.py" --port "$server_port" --cert "$T_DIR/certs/server.pem" \
        --key "$T_DIR/certs/server.key" --results "$RESULTS" "$@" >"$T_DIR/server$sfx.log" 2>&1 </dev/null &
    SPID=$!; T_PIDS+=("$SPID"); register_pid "$SPID"
    CTL=/run/loft/quic-interop$sfx-$$.sock
    on_cleanup "rm -f $CTL"
    cat >"$T_DIR/loft$sfx.yaml" <<EOF
log: info
socks5: { listen: 127.0.0.1:$socks_port }
bridge: off
outbounds:
  - { name: home, type: loft, server: 127.0.0.1:$server_port, carrier: $carrier, token: t, tls: { server-name: front.test, ca: $T_DIR/certs/ca.pem } }
default: home
control: $CTL
EOF
    for _ in $(seq 100); do grep -q listening "$T_DIR/server$sfx.log" && break; sleep 0.1; done
    LOFT_LOG=$T_DIR/loft$sfx.log
    "$LOFT_BIN" run -c "$T_DIR/loft$sfx.yaml" >"$LOFT_LOG" 2>&1 </dev/null &
    LOFT_PID=$!; register_pid "$LOFT_PID"
    state=
    for _ in $(seq 100); do
        state=$("$LOFT_BIN" status --json -c "$T_DIR/loft$sfx.yaml" 2>/dev/null | python3 -c '
import json, sys; d = json.load(sys.stdin); print(next(o for o in d["outbounds"] if o["name"] == "home")["state"])' 2>/dev/null)
        [ "$state" = up ] && break
        sleep 0.1
    done
}

# --- 2. loft's holder -> an aioquic server that speaks the session ---------------------------
aioquic_holder "" quic "$SERVER_PORT" "$SOCKS_PORT"
ev() { python3 - "$RESULTS" "$@" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(sum(1 for r in rows if all(str(r.get(k)) == v for k, v in (a.split("=", 1) for a in sys.argv[2:]))))
PYEOF
}
if [ "$(ev event=handshake alpn=loft)" -ge 1 ]; then pass holder-quic-handshake-alpn-loft
else fail holder-quic-handshake-alpn-loft "server saw: $(head -c 300 "$RESULTS")"; fi
if [ "$(ev event=hello version=1 token=t)" -ge 1 ]; then pass holder-hello-on-stream-0
else fail holder-hello-on-stream-0 "server saw: $(head -c 300 "$RESULTS")"; fi
if [ "$state" = up ]; then pass holder-up-on-aioquic-status
else fail holder-up-on-aioquic-status "state $state: $(grep holder "$LOFT_LOG" | tail -2 | tr '\n' '|')"; fi

# socks_run PORT OUT: 1 MiB TCP echo and 5 UDP datagrams through the holder's SOCKS5 PORT.
socks_run() {
timeout 30 python3 - "$1" >"$2" 2>&1 <<'PYEOF'
import hashlib, os, socket, struct, sys, threading
port = int(sys.argv[1])
def greet(s):
    s.sendall(b"\x05\x01\x00"); assert s.recv(2) == b"\x05\x00"
def reply(s):
    h = s.recv(4); n = {1: 4, 4: 16}[h[3]]; b = s.recv(n + 2)
    return h[1], (socket.inet_ntop(socket.AF_INET if h[3] == 1 else socket.AF_INET6, b[:n]), struct.unpack("!H", b[n:])[0])
# TCP: 1 MiB through the holder, echoed by the server
s = socket.create_connection(("127.0.0.1", port)); s.settimeout(20); greet(s)
s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("198.18.99.7") + struct.pack("!H", 7))
code, _ = reply(s)
data = os.urandom(1 << 20)
def send():
    s.sendall(data); s.shutdown(socket.SHUT_WR)
threading.Thread(target=send, daemon=True).start()
got = bytearray()
while True:
    b = s.recv(65536)
    if not b: break
    got += b
print("tcp", code, len(got), hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest())
# UDP ASSOCIATE: 5 datagrams, each echoed
c = socket.create_connection(("127.0.0.1", port)); c.settimeout(10); greet(c)
c.sendall(b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00")
code, bnd = reply(c)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
ok = 0
for i in range(5):
    msg = os.urandom(300 + i)
    u.sendto(b"\x00\x00\x00\x01" + socket.inet_aton("198.18.99.8") + struct.pack("!H", 9) + msg, bnd)
    try:
        r, _ = u.recvfrom(65536)
        if r[10:] == msg: ok += 1
    except socket.timeout:
        pass
print("udp", code, ok)
PYEOF
}
socks_run "$SOCKS_PORT" "$T_DIR/socks.out"
read -r _ tcode tlen tsha <<<"$(grep '^tcp' "$T_DIR/socks.out")"
read -r _ ucode uok <<<"$(grep '^udp' "$T_DIR/socks.out")"
if [ "$tcode" = 0 ] && [ "$tlen" = 1048576 ] && [ "$tsha" = True ] && [ "$(ev event=flow-fin)" -ge 1 ]; then pass holder-tcp-echo-1mib
else fail holder-tcp-echo-1mib "reply $tcode, $tlen bytes back, sha $tsha: $(tail -2 "$T_DIR/socks.out" | tr '\n' '|')"; fi
if [ "$ucode" = 0 ] && [ "$uok" = 5 ]; then pass holder-udp-echo
else fail holder-udp-echo "reply $ucode, $uok of 5 echoed: $(tail -2 "$T_DIR/socks.out" | tr '\n' '|')"; fi
nd=$(ev event=dgram via=datagram); ns=$(ev event=dgram via=stream)
if [ "$nd" -ge 4 ]; then pass holder-datagram-frames-to-server; note "server got DGRAMs: $nd as QUIC DATAGRAM frames, $ns on stream 0"
else fail holder-datagram-frames-to-server "DGRAMs as QUIC DATAGRAM frames: $nd, on stream 0: $ns"; fi
if [ "$(ev event=flow-open type=16 frame_stream=1 network=6)" -ge 1 ] && [ "$(ev event=open network=6)" = 0 ]; then pass holder-tcp-flow-on-own-stream
else fail holder-tcp-flow-on-own-stream "flows on own streams: $(ev event=flow-open), TCP OPENs on stream 0: $(ev event=open network=6)"; fi
if loft_stop TERM && [ ! -e "$CTL" ]; then pass loft-exit-clean
else fail loft-exit-clean "exit status $LOFT_RC after SIGTERM: $(tail -2 "$LOFT_LOG" | tr '\n' '|')"; fi
# --- 3. loft's holder over h3 -> the aioquic server in its HTTP/3 mode ------------------------
interop_ports H3_SERVER_PORT H3_SOCKS_PORT
aioquic_holder -h3 h3 "$H3_SERVER_PORT" "$H3_SOCKS_PORT" --alpn h3
if [ "$(ev event=handshake alpn=h3)" -ge 1 ] && [ "$(ev event=connect stream=0 method=CONNECT protocol=loft path=/loft)" -ge 1 ] \
    && [ "$(ev event=hello version=1 token=t)" -ge 1 ] && [ "$state" = up ]; then pass holder-h3-connect-hello-up
else fail holder-h3-connect-hello-up "state $state; server saw: $(head -c 400 "$RESULTS")"; fi
socks_run "$H3_SOCKS_PORT" "$T_DIR/socks-h3.out"
read -r _ tcode tlen tsha <<<"$(grep '^tcp' "$T_DIR/socks-h3.out")"
read -r _ ucode uok <<<"$(grep '^udp' "$T_DIR/socks-h3.out")"
if [ "$tcode" = 0 ] && [ "$tlen" = 1048576 ] && [ "$tsha" = True ] && [ "$(ev event=connect protocol=loft-flow)" -ge 1 ] \
    && [ "$(ev event=flow-fin)" -ge 1 ] && [ "$(ev event=open network=6)" = 0 ]; then pass holder-h3-tcp-flow-on-own-request-stream
else fail holder-h3-tcp-flow-on-own-request-stream "reply $tcode, $tlen bytes back, sha $tsha, loft-flow CONNECTs $(ev event=connect protocol=loft-flow): $(tail -2 "$T_DIR/socks-h3.out" | tr '\n' '|')"; fi
if [ "$ucode" = 0 ] && [ "$uok" = 5 ] && [ "$(ev event=dgram via=stream)" -ge 5 ]; then pass holder-h3-udp-echo-on-session-stream
else fail holder-h3-udp-echo-on-session-stream "reply $ucode, $uok of 5 echoed, DGRAMs on the session stream: $(ev event=dgram via=stream)"; fi
if loft_stop TERM && [ ! -e "$CTL" ]; then pass loft-h3-exit-clean
else fail loft-h3-exit-clean "exit status $LOFT_RC after SIGTERM: $(tail -2 "$LOFT_LOG" | tr '\n' '|')"; fi
finish
