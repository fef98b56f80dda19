#!/usr/bin/env bash
# The SOCKS5 server (issue 3) with real clients: curl --socks5 / --socks5-hostname downloads
# (SHA-256 checked, IPv4 and IPv6 destinations, a name that resolves on the host), python-socks
# TCP, UDP ASSOCIATE DNS queries to dnsmasq (IPv4, IPv6 and domain destinations), every
# bad-input case's exact reply byte, every outbound failure's reply code, the handshake
# deadline, the client limit (128) with 129 clients, real clients served among 1,200 silent
# connections, and the UDP association's life tied to its control connection. No TUN: loft runs with only socks5 on, in the root namespace.
. "$(dirname "$0")/lib.sh"
shopt -s extglob

# A test-unique port pair (TCP and UDP, same number) that nothing uses.
S5_PORT=$((20000 + T_ID % 20000))
while ss -Htuln "sport = :$S5_PORT" 2>/dev/null | grep -q .; do S5_PORT=$((S5_PORT + 1)); done
S5=127.0.0.1:$S5_PORT
HOSTS_TAG="loft-test-$T_ID"
NAME4=srv.loft.test
NAME6=srv6.loft.test
UNREACH_HOST=198.18.$NET.98      # route type unreachable: EHOSTUNREACH at once
UNREACH_NET=198.18.$NET.97       # policy rule unreachable: ENETUNREACH at once
DROP_DST=198.18.$NET.96          # a loft drop rule
BLACKHOLE_PORT=81                # srv drops SYNs to it: the connect deadline

topo_up
make_files 50
start_nginx 1 4096
start_dns
start_sink

# The host resolves the test names (for --socks5-hostname and domain requests); removed on exit.
printf '%s %s # %s\n%s %s # %s\n' "$SRV4" "$NAME4" "$HOSTS_TAG" "$SRV6" "$NAME6" "$HOSTS_TAG" >>/etc/hosts
on_cleanup "sed -i '/# $HOSTS_TAG\$/d' /etc/hosts"
ip route add unreachable "$UNREACH_HOST/32" && on_cleanup "ip route del unreachable $UNREACH_HOST/32"
ip rule add to "$UNREACH_NET/32" unreachable && on_cleanup "ip rule del to $UNREACH_NET/32 unreachable"
in_srv nft -f - <<EOF || die "nft in srv"
table inet loft_s5 {
    chain in {
        type filter hook input priority 0;
        tcp dport $BLACKHOLE_PORT drop
    }
}
EOF

cat >"$T_DIR/s5.yaml" <<EOF
log: info
socks5: { listen: $S5, max-clients: 128 }
bridge: off
# A control socket of its own: `loft status` must ask this loft, not whichever answers on the default.
control: $T_DIR/s5.sock
rules:
  - { action: drop, to: [$DROP_DST/32] }
default: direct
limits: { max-flows: 16384, connect-timeout: 3s, tcp-idle-timeout: 2h, udp-idle-timeout: 60s }
EOF

# Raw SOCKS5 clients: python3 s5.py CASE ARGS... prints what it saw; exit 0 = as expected.
cat >"$T_DIR/s5.py" <<'EOF'
import socket, struct, sys, time, hashlib, os

PROXY = ("127.0.0.1", int(sys.argv[1]))
case = sys.argv[2]
args = sys.argv[3:]

def ctl(timeout=10):
    s = socket.create_connection(PROXY, timeout=timeout)
    return s

def recv_exact(s, n):
    out = b""
    while len(out) < n:
        try:
            c = s.recv(n - len(out))
        except ConnectionResetError:
            break
        if not c:
            break
        out += c
    return out

def until_close(s, limit=1 << 20):
    out = b""
    try:
        while len(out) < limit:
            c = s.recv(65536)
            if not c:
                return out, "eof"
            out += c
    except ConnectionResetError:
        return out, "reset"
    except socket.timeout:
        return out, "open"
    return out, "more"

def addr(host, port):
    try:
        return b"\x01" + socket.inet_pton(socket.AF_INET, host) + struct.pack(">H", port)
    except OSError:
        pass
    try:
        return b"\x04" + socket.inet_pton(socket.AF_INET6, host) + struct.pack(">H", port)
    except OSError:
        return b"\x03" + bytes([len(host)]) + host.encode() + struct.pack(">H", port)

def greet(s):
    s.sendall(b"\x05\x01\x00")
    r = recv_exact(s, 2)
    if r != b"\x05\x00":
        fail("method selection %r" % r)

def read_reply(s):
    head = recv_exact(s, 4)
    if len(head) < 4:
        return None, None, head
    n = {1: 4 + 2, 4: 16 + 2}.get(head[3])
    if n is None:
        return head[1], None, head
    rest = recv_exact(s, n)
    a = rest[:-2]
    host = socket.inet_ntop(socket.AF_INET if head[3] == 1 else socket.AF_INET6, a)
    return head[1], (host, struct.unpack(">H", rest[-2:])[0]), head + rest

def request(s, cmd, host, port):
    s.sendall(b"\x05" + bytes([cmd]) + b"\x00" + addr(host, port))
    return read_reply(s)

def ok(msg=""):
    print(msg); sys.exit(0)

def fail(msg):
    print(msg); sys.exit(1)

def dns_query(name, qtype):
    qid = os.getpid() & 0xFFFF
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", qtype, 1)
    return qid, q

def dns_answers(resp, qtype):
    # Walk past the question, collect A/AAAA rdata.
    qd, an = struct.unpack(">HH", resp[4:8])
    i = 12
    for _ in range(qd):
        while resp[i] != 0:
            i += 1 + resp[i]
        i += 5
    out = []
    for _ in range(an):
        if resp[i] & 0xC0 == 0xC0:
            i += 2
        else:
            while resp[i] != 0:
                i += 1 + resp[i]
            i += 1
        t, _c, _ttl, rdlen = struct.unpack(">HHIH", resp[i:i + 10])
        i += 10
        rd = resp[i:i + rdlen]
        i += rdlen
        if t == qtype:
            out.append(socket.inet_ntop(socket.AF_INET if t == 1 else socket.AF_INET6, rd))
    return out

def udp_header(host, port, frag=0):
    return b"\x00\x00" + bytes([frag]) + addr(host, port)

def associate(named_port=0):
    c = ctl()
    greet(c)
    code, bnd, raw = request(c, 3, "0.0.0.0", named_port)
    if code != 0:
        fail("UDP ASSOCIATE reply 0x%02x (%r)" % (code or 0, raw))
    return c, bnd

def udp_exchange(u, bnd, host, port, name, qtype, frag=0, timeout=3):
    qid, q = dns_query(name, qtype)
    u.settimeout(timeout)
    u.sendto(udp_header(host, port, frag) + q, bnd)
    try:
        data, src = u.recvfrom(65536)
    except socket.timeout:
        return None
    if src != bnd:
        fail("reply from %r, not the relay %r" % (src, bnd))
    if data[:3] != b"\x00\x00\x00":
        fail("reply header %r" % data[:3])
    atyp = data[3]
    hl = {1: 10, 4: 22}.get(atyp)
    if hl is None:
        fail("reply ATYP %d" % atyp)
    return dns_answers(data[hl:], qtype)

if case == "reply":                         # reply HEX-REQUEST: greeting, then raw request bytes
    s = ctl()
    greet(s)
    s.sendall(bytes.fromhex(args[0]))
    code, bnd, raw = read_reply(s)
    rest, how = until_close(s)
    print("%02x" % code if code is not None else "none", raw.hex(), how)
    sys.exit(0)

if case == "greeting":                      # greeting HEX: raw greeting, what came back
    s = ctl()
    s.sendall(bytes.fromhex(args[0]))
    data, how = until_close(s)
    print(data.hex() or "-", how)
    sys.exit(0)

if case == "connect":                       # connect HOST PORT: the reply code and bound
    s = ctl(20)
    greet(s)
    t0 = time.time()
    code, bnd, raw = request(s, 1, args[0], int(args[1]))
    print("%02x" % code if code is not None else "none", "%.1f" % (time.time() - t0), raw.hex())
    sys.exit(0)

if case == "pipelined":                     # greeting + request + HTTP request in one write
    s = ctl()
    host = args[0]
    s.sendall(b"\x05\x01\x00" + b"\x05\x01\x00" + addr(host, 80) +
              b"GET /small HTTP/1.0\r\nHost: x\r\n\r\n")
    if recv_exact(s, 2) != b"\x05\x00":
        fail("method selection")
    code, bnd, raw = read_reply(s)
    if code != 0:
        fail("reply 0x%02x" % code)
    body, how = until_close(s, 1 << 24)
    body = body.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in body else b""
    print(hashlib.sha256(body).hexdigest())
    sys.exit(0)

if case == "halfclose":                     # halfclose HOST: data, FIN, the sink's hash comes back
    s = ctl(30)
    greet(s)
    code, bnd, raw = request(s, 1, args[0], 9000)
    if code != 0:
        fail("reply 0x%02x" % code)
    data = os.urandom(3 << 20)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    reply, how = until_close(s)
    want = hashlib.sha256(data).hexdigest()
    got = reply.decode(errors="replace").split(" ")[0]
    if got == want and how == "eof":
        ok()
    fail("sink said %r (%s), want %s" % (reply[:80], how, want))

if case == "silent":                        # silent [PARTIAL-HEX]: seconds until loft closes us
    s = ctl(30)
    if args:
        s.sendall(bytes.fromhex(args[0]))
    t0 = time.time()
    data, how = until_close(s)
    print("%.1f" % (time.time() - t0), how, data.hex() or "-")
    sys.exit(0)

if case == "udp-dns":                       # udp-dns HOST NAME QTYPE WANT
    c, bnd = associate()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    qtype = int(args[2])
    got = udp_exchange(u, bnd, args[0], 53, args[1], qtype)
    if got is None:
        fail("no DNS reply through the association")
    if args[3] in got:
        ok(",".join(got))
    fail("answers %r, want %s" % (got, args[3]))

if case == "udp-frag":                      # FRAG != 0 is dropped, FRAG = 0 then works
    c, bnd = associate()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    got = udp_exchange(u, bnd, args[0], 53, args[1], 1, frag=1, timeout=1.5)
    if got is not None:
        fail("a FRAG=1 datagram was relayed: %r" % got)
    got = udp_exchange(u, bnd, args[0], 53, args[1], 1)
    if not got:
        fail("FRAG=0 after the fragment: no reply")
    ok()

if case == "udp-foreign":                   # a named source port; another port is dropped
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))
    c, bnd = associate(u.getsockname()[1])
    got = udp_exchange(other, bnd, args[0], 53, args[1], 1, timeout=1.5)
    if got is not None:
        fail("a datagram from another port was relayed")
    got = udp_exchange(u, bnd, args[0], 53, args[1], 1)
    if not got:
        fail("the named port got no reply")
    ok()

if case == "udp-lifetime":                  # the association ends with its control connection
    c, bnd = associate()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    if not udp_exchange(u, bnd, args[0], 53, args[1], 1):
        fail("no reply while the control connection is open")
    c.close()
    time.sleep(0.3)
    got = udp_exchange(u, bnd, args[0], 53, args[1], 1, timeout=1.5)
    if got is not None:
        fail("still relayed after the control connection closed")
    ok()

if case == "slowloris":                     # slowloris ROUNDS SILENT HOST: real clients among silent ones
    rounds, per_round, host = int(args[0]), int(args[1]), args[2]
    silent, good, t0 = [], 0, time.time()
    for r in range(rounds):
        for i in range(per_round):          # connections that never send a byte
            try:
                silent.append(ctl(2))
            except OSError:
                pass
        try:
            s = ctl(3)
            greet(s)
            code, bnd, raw = request(s, 1, host, 80)
            if code == 0:
                s.sendall(b"GET /small HTTP/1.0\r\nHost: x\r\n\r\n")
                body, how = until_close(s, 1 << 20)
                if body.startswith(b"HTTP/1.1 200") and len(body.split(b"\r\n\r\n", 1)[1]) == 4096:
                    good += 1
            s.close()
        except (OSError, TypeError, ValueError):
            pass
        if time.time() - t0 > 60:
            break
    for s in silent:
        s.close()
    print("%d of %d real clients served among %d silent connections in %.1f s"
          % (good, rounds, len(silent), time.time() - t0))
    if good != rounds:
        fail("only %d of %d real clients served" % (good, rounds))
    ok()

if case == "limit":                         # limit N HOST: N tunnels work, N+1st refused at once
    n = int(args[0])
    host = args[1]
    held = []
    for i in range(n):
        s = ctl()
        greet(s)
        code, bnd, raw = request(s, 1, host, 80)
        if code != 0:
            fail("client %d: reply 0x%02x" % (i + 1, code or 0))
        held.append(s)
    t0 = time.time()
    try:
        extra = ctl(5)
        try:
            extra.sendall(b"\x05\x01\x00")
        except OSError:
            pass
        data, how = until_close(extra)
    except ConnectionResetError:
        data, how = b"", "reset"    # reset before connect() even returned
    dt = time.time() - t0
    if data or how not in ("eof", "reset") or dt > 2:
        fail("client %d: got %r, %s after %.1f s (want closed at once)" % (n + 1, data, how, dt))
    for i, s in enumerate(held):
        s.sendall(b"GET /small HTTP/1.0\r\nHost: x\r\n\r\n")
    bad = 0
    for i, s in enumerate(held):
        body, how = until_close(s, 1 << 20)
        if not body.startswith(b"HTTP/1.1 200") or len(body.split(b"\r\n\r\n", 1)[1]) != 4096:
            bad += 1
        s.close()
    if bad:
        fail("%d of the first %d clients failed after the refusal" % (bad, n))
    time.sleep(0.3)
    s = ctl()
    greet(s)
    code, bnd, raw = request(s, 1, host, 80)
    if code != 0:
        fail("after the %d closed, a new client got 0x%02x" % (n, code or 0))
    ok("refused in %.2f s" % dt)

fail("unknown case " + case)
EOF

cat >"$T_DIR/pysocks.py" <<'EOF'
import sys, hashlib
from python_socks.sync import Proxy
proxy = Proxy.from_url("socks5://127.0.0.1:%s" % sys.argv[1], rdns=sys.argv[4] == "rdns")
s = proxy.connect(dest_host=sys.argv[2], dest_port=80, timeout=10)
s.sendall(("GET /%s HTTP/1.0\r\nHost: x\r\n\r\n" % sys.argv[3]).encode())
data = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    data += c
print(hashlib.sha256(data.split(b"\r\n\r\n", 1)[1]).hexdigest())
EOF

# loft with only socks5: ready, and the listener up.
CASES="curl-socks5-v4 curl-socks5-v6 curl-socks5-hostname-v4 curl-socks5-hostname-v6 python-socks-ip
python-socks-rdns pipelined-data half-close udp-dns-v4 udp-dns-v6 udp-dns-domain udp-frag-dropped
udp-foreign-source-dropped udp-dies-with-control greeting-bad-version greeting-no-method
greeting-zero-methods request-bad-version bind-0x07 unknown-command-0x07 atyp-0x08 empty-domain-0x01
refused-0x05 host-unreachable-0x04 network-unreachable-0x03 timeout-0x06 drop-rule-0x02
resolve-failed-0x04 connect-bound-address handshake-deadline-silent handshake-deadline-half-request
client-limit-129 slowloris-served direct-counts-socks5 counters-and-exit"
if ! loft_start_host "$T_DIR/s5.yaml" "$T_DIR/loft.log"; then
    for c in $CASES; do fail "$c" "loft did not start"; done
    finish
fi

py() { timeout 60 python3 "$T_DIR/s5.py" "$S5_PORT" "$@" 2>&1; }

# The deadline cases run in the background from the start (10 s each, alongside the rest).
py silent >"$T_DIR/silent.out" &
SILENT_PID=$!
py silent 0501000501 >"$T_DIR/half.out" &
HALF_PID=$!

BIG_SHA=$(sha_of "$T_DIR/www/big")
SMALL_SHA=$(sha_of "$T_DIR/www/small")

curl_case() {       # curl_case NAME MODE URL
    local name=$1 mode=$2 url=$3 out=$T_DIR/dl t0 got
    t0=$(now_ms)
    if ! curl -gsS --max-time 120 "$mode" "$S5" -o "$out" "$url" 2>"$T_DIR/curl.err"; then
        fail "$name" "curl $mode $url: $(tail -1 "$T_DIR/curl.err")"; return
    fi
    got=$(sha_of "$out")
    if [ "$got" = "$BIG_SHA" ]; then
        pass "$name"; note "$name: 50 MiB in $(( $(now_ms) - t0 )) ms"
    else
        fail "$name" "sha256 $got != served $BIG_SHA ($(stat -c %s "$out") bytes)"
    fi
    rm -f "$out"
}

curl_case curl-socks5-v4 --socks5 "http://$SRV4/big"
curl_case curl-socks5-v6 --socks5 "http://[$SRV6]/big"
curl_case curl-socks5-hostname-v4 --socks5-hostname "http://$NAME4/big"
curl_case curl-socks5-hostname-v6 --socks5-hostname "http://$NAME6/big"

expect_out() {      # expect_out NAME WANT CMD...: PASS if CMD's output is exactly WANT
    local name=$1 want=$2 out
    shift 2
    out=$("$@")
    if [ "$out" = "$want" ]; then pass "$name"; else fail "$name" "got '${out:0:200}', want '$want'"; fi
}

expect_out python-socks-ip "$SMALL_SHA" timeout 30 python3 "$T_DIR/pysocks.py" "$S5_PORT" "$SRV4" small ip
expect_out python-socks-rdns "$SMALL_SHA" timeout 30 python3 "$T_DIR/pysocks.py" "$S5_PORT" "$NAME4" small rdns
expect_out pipelined-data "$SMALL_SHA" py pipelined "$SRV4"
check half-close py halfclose "$SRV4"

check udp-dns-v4 py udp-dns "$SRV4" "$DNS_NAME" 1 "$DNS_A"
check udp-dns-v6 py udp-dns "$SRV6" "$DNS_NAME" 28 "$DNS_AAAA"
check udp-dns-domain py udp-dns "$NAME4" "$DNS_NAME" 1 "$DNS_A"
check udp-frag-dropped py udp-frag "$SRV4" "$DNS_NAME"
check udp-foreign-source-dropped py udp-foreign "$SRV4" "$DNS_NAME"
check udp-dies-with-control py udp-lifetime "$SRV4" "$DNS_NAME"

# Bad input: the exact bytes that come back, and how the connection ends.
expect_match() {    # expect_match NAME GLOB CMD...: PASS if CMD's output matches GLOB
    local name=$1 want=$2 out
    shift 2
    out=$("$@")
    # shellcheck disable=SC2053
    if [[ $out == $want ]]; then pass "$name"; else fail "$name" "got '${out:0:200}', want '$want'"; fi
}
expect_match greeting-bad-version "- @(eof|reset)" py greeting 040100
expect_out greeting-no-method "05ff eof" py greeting 05020102
expect_out greeting-zero-methods "05ff eof" py greeting 0500
S5_V4_80=$(printf '01%s0050' "$(printf '%02x' ${SRV4//./ })")
expect_match request-bad-version "none  @(eof|reset)" py reply "0401000150"
expect_out bind-0x07 "07 05070001000000000000 eof" py reply "050200$S5_V4_80"
expect_out unknown-command-0x07 "07 05070001000000000000 eof" py reply "050900$S5_V4_80"
expect_out atyp-0x08 "08 05080001000000000000 eof" py reply "05010009"
expect_out empty-domain-0x01 "01 05010001000000000000 eof" py reply "05010003000050"

# Outbound failures: the reply code (and, for the deadline, that it took connect-timeout).
code_of() { py connect "$@" | cut -d' ' -f1; }
expect_out refused-0x05 05 code_of "$SRV4" 9
expect_out host-unreachable-0x04 04 code_of "$UNREACH_HOST" 80
expect_out network-unreachable-0x03 03 code_of "$UNREACH_NET" 80
r=$(py connect "$SRV4" "$BLACKHOLE_PORT")
case $r in
    "06 "[23].*|"06 4.0"*) pass timeout-0x06 ;;
    *) fail timeout-0x06 "got '$r', want 06 after the 3 s connect-timeout" ;;
esac
expect_out drop-rule-0x02 02 code_of "$DROP_DST" 80
expect_out resolve-failed-0x04 04 code_of no-such-name.invalid 80
# The CONNECT reply: 0x00 and an IPv4 bound address (the outbound's local one is not exposed
# by the direct outbound yet, so 0.0.0.0:0).
r=$(py connect "$SRV4" 80)
case $r in "00 "*" 050000"01*) pass connect-bound-address ;; *) fail connect-bound-address "got '$r'" ;; esac

# Handshake deadline (10 s): the silent client and the half-sent request were closed by loft.
wait "$SILENT_PID" "$HALF_PID"
for pair in "handshake-deadline-silent:silent" "handshake-deadline-half-request:half"; do
    name=${pair%%:*}
    r=$(cat "$T_DIR/${pair#*:}.out")
    secs=${r%% *}
    case $r in
        9.*|10.*|11.*)
            case $r in *" eof "*|*" reset "*) pass "$name" ;; *) fail "$name" "got '$r'" ;; esac ;;
        *) fail "$name" "got '$r', want closed after ~10 s" ;;
    esac
done

check client-limit-129 py limit 128 "$SRV4"

# Slowloris: 30 silent connections before each of 40 real clients (1,200 against a table of
# 128): each real client gets a slot by evicting the longest-waiting silent one.
out=$(py slowloris 40 30 "$SRV4" 2>&1)
if [ $? -eq 0 ]; then pass slowloris-served; else fail slowloris-served "$out"; fi
note "slowloris: $(echo "$out" | head -1)"

# The direct outbound counts at its own sockets, so the SOCKS5 flows above are in its row:
# the four 50 MiB curl downloads alone are 200 MiB down; every flow has ended by now.
row=$("$LOFT_BIN" status -c "$T_DIR/s5.yaml" --json | python3 -c '
import json, sys
o = [o for o in json.load(sys.stdin)["outbounds"] if o["name"] == "direct"][0]
print(o["flows_total"], o["live_flows"], o["bytes_down"], o["bytes_up"])' 2>&1)
set -- $row
if [ "${1:-0}" -ge 4 ] 2>/dev/null && [ "${3:-0}" -ge $((4 * 50 * 1048576)) ] && [ "${4:-0}" -gt 0 ]; then
    pass direct-counts-socks5; note "direct: flows, live, bytes down, bytes up: $row"
else
    fail direct-counts-socks5 "direct row: '$row'"
fi

# loft exits 0 on SIGTERM, and its counters saw the refusal and the dropped datagrams.
if loft_stop TERM; then
    line=$(grep 'event=socks5.stopped' "$LOFT_LOG")
    if echo "$line" | grep -q 'refused=1 ' && echo "$line" | grep -Eq 'udp_drops=[1-9]'; then
        pass counters-and-exit
    else
        fail counters-and-exit "counters: $line"
    fi
else
    fail counters-and-exit "loft exit status $LOFT_RC: $(tail -3 "$LOFT_LOG" | tr '\n' '|')"
fi
finish
