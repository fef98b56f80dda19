# loft session frames (docs/protocol.md, version 1) written from the spec, independently of
# Sources/LoftProtocol: used by the interop scripts to speak to loft-front and to check what
# loft's holder sends. All integers big-endian; every frame is an 8-byte header
# (type u8, flags u8, stream u32, length u16) and `length` body bytes.
import argparse
import asyncio
import hashlib
import ipaddress
import os
import random
import struct
import sys
import time

HELLO, RESUME, STATUS = 0x01, 0x02, 0x03
OPEN, OPEN_OK, OPEN_FAIL, DATA, FIN, RST, CREDIT = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16
DGRAM, PING, PONG, GOAWAY = 0x20, 0x30, 0x31, 0x3F
NAMES = {HELLO: "HELLO", RESUME: "RESUME", STATUS: "STATUS", OPEN: "OPEN", OPEN_OK: "OPEN_OK",
         OPEN_FAIL: "OPEN_FAIL", DATA: "DATA", FIN: "FIN", RST: "RST", CREDIT: "CREDIT",
         DGRAM: "DGRAM", PING: "PING", PONG: "PONG", GOAWAY: "GOAWAY"}

GOAWAY_SHUTDOWN, GOAWAY_BAD_TOKEN, GOAWAY_UNSUPPORTED_VERSION, GOAWAY_PROTOCOL_ERROR = 0, 1, 2, 3
GOAWAY_UNKNOWN_INSTANCE, GOAWAY_OVERLOADED, GOAWAY_SUPERSEDED = 4, 5, 6

VERSION = 1
HEADER = 8
INITIAL_WINDOW = 262144


def emit(name, ok, why=""):
    """One verdict on stdout as the shell tests read it: "PASS name" or "FAIL name: why"."""
    if ok:
        print("PASS %s" % name, flush=True)
    else:
        print("FAIL %s: %s" % (name, why or "failed"), flush=True)
    return ok


def note(*a):
    """A note on stderr ("  # ..."), shown by the shell test."""
    print("  #", *a, file=sys.stderr, flush=True)


def client_arguments():
    """The arguments every client of loft-front here takes (its port, session path, CA, TLS
    name, token, the TCP echo's port and a port where nothing listens, the pool's IPv4 network);
    the caller adds its own and parses."""
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/loft")
    p.add_argument("--ca", required=True)
    p.add_argument("--server-name", default="front.test")
    p.add_argument("--token", required=True)
    p.add_argument("--echo-port", type=int, required=True)
    p.add_argument("--closed-port", type=int, required=True)
    p.add_argument("--pool4", type=ipaddress.ip_network, required=True)
    return p


def echo_server_arguments():
    """The parsed arguments of an echo server loft's client is tested against: `serve --port P
    --cert PEM --key KEY --results FILE` (one JSON line per connection into FILE) or `check
    --results FILE --token T --host HOST` (its verdicts on what loft sent)."""
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--results", required=True)
    c = sub.add_parser("check")
    c.add_argument("--results", required=True)
    c.add_argument("--token", required=True)
    c.add_argument("--host", required=True)
    return p.parse_args()


def frame(ftype, stream, body=b"", flags=0):
    return struct.pack("!BBIH", ftype, flags, stream, len(body)) + body


def short(s):
    b = s.encode()
    assert len(b) <= 255
    return bytes([len(b)]) + b


def hello(token, client_name="", caps=0, version=VERSION):
    return frame(HELLO, 0, bytes([version]) + struct.pack("!I", caps) + short(token) + short(client_name))


def resume(instance_id, token, version=VERSION):
    assert len(instance_id) == 16
    return frame(RESUME, 0, bytes([version]) + instance_id + short(token))


def addr(host, port):
    """SOCKS5 address: ATYP 1 / 4 for IP literals, 3 for a name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        n = host.encode()
        return bytes([3, len(n)]) + n + struct.pack("!H", port)
    return bytes([1 if ip.version == 4 else 4]) + ip.packed + struct.pack("!H", port)


def open_tcp(stream, host, port):
    return frame(OPEN, stream, bytes([6]) + addr(host, port))


def data(stream, payload):
    assert 1 <= len(payload) <= 65535
    return frame(DATA, stream, payload)


def fin(stream):
    return frame(FIN, stream)


def credit(stream, increment):
    return frame(CREDIT, stream, struct.pack("!I", increment))


def ping(value):
    return frame(PING, 0, struct.pack("!Q", value))


def pong(value):
    return frame(PONG, 0, struct.pack("!Q", value))


def goaway(reason, text=""):
    t = text.encode()
    return frame(GOAWAY, 0, bytes([reason]) + struct.pack("!H", len(t)) + t)


class Splitter:
    """Cuts a byte stream into frames (frame boundaries need not match message boundaries)."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, b):
        self.buf += b
        out = []
        while len(self.buf) >= HEADER:
            t, fl, sid, ln = struct.unpack_from("!BBIH", self.buf)
            if len(self.buf) < HEADER + ln:
                break
            out.append((t, fl, sid, bytes(self.buf[HEADER:HEADER + ln])))
            del self.buf[:HEADER + ln]
        return out


def parse_hello(body):
    """(version, caps, token, client name); raises ValueError on a malformed body."""
    if len(body) < 7:
        raise ValueError("HELLO body of %d bytes" % len(body))
    v = body[0]
    caps = struct.unpack_from("!I", body, 1)[0]
    p = 5
    n = body[p]; token = body[p + 1:p + 1 + n].decode(); p += 1 + n
    n = body[p]; name = body[p + 1:p + 1 + n].decode(); p += 1 + n
    if p != len(body):
        raise ValueError("HELLO body has %d bytes after the client name" % (len(body) - p))
    return v, caps, token, name


def parse_goaway(body):
    """(reason, text)."""
    if len(body) < 3:
        raise ValueError("GOAWAY body of %d bytes" % len(body))
    reason = body[0]
    n = struct.unpack_from("!H", body, 1)[0]
    if 3 + n != len(body):
        raise ValueError("GOAWAY text length %d but body %d" % (n, len(body)))
    return reason, body[3:].decode()


def parse_status(body):
    """A dict of the STATUS fields; raises ValueError when the layout does not add up."""
    if len(body) < 37:
        raise ValueError("STATUS body of %d bytes" % len(body))
    s = {}
    s["instance"] = body[0:16]
    s["keepalive_ms"], s["max_streams"], s["mtu"] = struct.unpack_from("!IIH", body, 16)
    p = 26
    s["ipv4"] = ipaddress.ip_interface("%s/%d" % (ipaddress.IPv4Address(body[p:p + 4]), body[p + 4]))
    s["gateway4"] = ipaddress.IPv4Address(body[p + 5:p + 9])
    p += 9
    flags = body[p]; p += 1
    if flags & ~1:
        raise ValueError("STATUS flags 0x%02x" % flags)
    s["ipv6"] = s["gateway6"] = None
    if flags & 1:
        s["ipv6"] = ipaddress.ip_interface("%s/%d" % (ipaddress.IPv6Address(body[p:p + 16]), body[p + 16]))
        s["gateway6"] = ipaddress.IPv6Address(body[p + 17:p + 33])
        p += 33
    count = body[p]; p += 1
    dns = []
    for _ in range(count):
        atyp = body[p]
        if atyp == 1:
            dns.append(ipaddress.IPv4Address(body[p + 1:p + 5])); p += 5
        elif atyp == 4:
            dns.append(ipaddress.IPv6Address(body[p + 1:p + 17])); p += 17
        else:
            raise ValueError("STATUS dns ATYP %d" % atyp)
    if p != len(body):
        raise ValueError("STATUS body has %d bytes after the dns list" % (len(body) - p))
    s["dns"] = dns
    return s


async def bulk_echo(c, stream, payload, describe):
    """Sends `payload` on an open stream in DATA frames of at most 16 KiB within the send
    credit (cut into carrier messages of random sizes, not on frame boundaries), reads the
    echo back granting CREDIT as docs/protocol.md section 6 says, then FIN; returns a dict.
    `c` is a client's connection: `await c.send(bytes)`, `await c.next(timeout)` (a frame, or
    None once the carrier ended), `c.ended` (what ended it) and `c.front_pings`; `describe`
    names a frame."""
    r = {"received": bytearray(), "credits": 0, "granted": 0, "overrun": None, "fin": False,
         "data_after_fin": False, "error": None, "pings": 0}
    state = {"credit": INITIAL_WINDOW}
    credit_event = asyncio.Event()
    rng = random.Random(6455)

    async def sender():
        off = 0
        while off < len(payload):
            while state["credit"] == 0:
                credit_event.clear()
                await credit_event.wait()
            batch = bytearray()
            while off < len(payload) and state["credit"] > 0 and len(batch) < 96 * 1024:
                n = min(16384, state["credit"], len(payload) - off)
                batch += data(stream, payload[off:off + n])
                off += n
                state["credit"] -= n
            pos = 0
            while pos < len(batch):
                k = rng.randint(1, 40000)
                await c.send(bytes(batch[pos:pos + k]))
                pos += k
        await c.send(fin(stream))

    task = asyncio.create_task(sender())
    front_credit = INITIAL_WINDOW   # what the front may still send us
    unacked = 0                        # read since our last CREDIT
    half = INITIAL_WINDOW // 2
    deadline = time.monotonic() + 60
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                r["error"] = "timeout: %d of %d bytes back, fin %s" % (len(r["received"]), len(payload), r["fin"])
                break
            if task.done() and task.exception() is not None:
                r["error"] = "sender: %r" % task.exception()
                break
            try:
                f = await c.next(min(left, 1.0))
            except asyncio.TimeoutError:
                continue
            if f is None:
                r["error"] = "%s after %d bytes" % (c.ended, len(r["received"]))
                break
            t, fl, sid, body = f
            if t == CREDIT and sid == stream:
                inc = struct.unpack("!I", body)[0]
                r["credits"] += 1
                r["granted"] += inc
                state["credit"] += inc
                credit_event.set()
            elif t == DATA and sid == stream:
                if r["fin"]:
                    r["data_after_fin"] = True
                front_credit -= len(body)
                if front_credit < 0 and r["overrun"] is None:
                    r["overrun"] = "front sent %d bytes beyond our credit at offset %d" % (-front_credit, len(r["received"]))
                r["received"] += body
                unacked += len(body)
                if unacked >= half and not r["fin"]:
                    await c.send(credit(stream, unacked))
                    front_credit += unacked
                    unacked = 0
            elif t == FIN and sid == stream:
                r["fin"] = True
                if len(r["received"]) >= len(payload):
                    break
            else:
                r["error"] = "unexpected %s" % describe(f)
                if t == GOAWAY:
                    r["error"] += " %r" % (parse_goaway(body),)
                break
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:  # lint: ok: cancelling the sender after the verdict
                pass
    r["pings"] = c.front_pings
    return r


async def echo_stream_checks(c, echo_port, closed_port, describe):
    """On a session (`c` as for bulk_echo): OPEN stream 1 to the TCP echo on 127.0.0.1:echo_port
    (open-tcp-ok), 1 MiB through it both ways under credit with FIN / FIN (tcp-echo-1mib-intact:
    the same bytes back, compared by SHA-256; front-grants-credit, front-respects-credit,
    fin-answered-with-fin), then OPEN stream 3 to closed_port, where nothing listens: OPEN_FAIL
    refused (5) (open-refused-open-fail)."""
    await c.send(open_tcp(1, "127.0.0.1", echo_port))
    try:
        f = await c.next()
    except asyncio.TimeoutError:
        f = "timeout"
    if emit("open-tcp-ok", isinstance(f, tuple) and f[0] == OPEN_OK and f[2] == 1 and f[3] == b"",
            "got %s" % (f if f == "timeout" else describe(f))):
        payload = os.urandom(1 << 20)
        t0 = time.monotonic()
        r = await bulk_echo(c, 1, payload, describe)
        note("1 MiB echo in %.2f s, %d CREDIT frames from the front (%d bytes), %d front PINGs"
             % (time.monotonic() - t0, r["credits"], r["granted"], r["pings"]))
        sent, back = hashlib.sha256(payload).hexdigest(), hashlib.sha256(bytes(r["received"])).hexdigest()
        emit("tcp-echo-1mib-intact", r["error"] is None and back == sent,
             r["error"] or "%d bytes back, sha256 %s, sent %s" % (len(r["received"]), back, sent))
        emit("front-grants-credit", r["granted"] >= len(payload) - INITIAL_WINDOW,
             "%d CREDIT frames, %d bytes granted, needed %d" % (r["credits"], r["granted"], len(payload) - INITIAL_WINDOW))
        emit("front-respects-credit", r["overrun"] is None, r["overrun"])
        emit("fin-answered-with-fin", r["fin"] and not r["data_after_fin"],
             "fin %s, data after fin %s" % (r["fin"], r["data_after_fin"]))
    else:
        for n in ("tcp-echo-1mib-intact", "front-grants-credit", "front-respects-credit", "fin-answered-with-fin"):
            emit(n, False, "stream not opened")
    await c.send(open_tcp(3, "127.0.0.1", closed_port))
    try:
        f = await c.next()
    except asyncio.TimeoutError:
        f = "timeout"
    emit("open-refused-open-fail", isinstance(f, tuple) and f[0] == OPEN_FAIL and f[2] == 3 and f[3] == b"\x05",
         "got %s %s" % (f if f == "timeout" else describe(f), f[3].hex() if isinstance(f, tuple) else ""))


def run_client(main, args, deadline_case):
    """Runs the coroutine main(args) within args.deadline seconds; past it, FAIL deadline_case
    and exit 1."""
    try:
        asyncio.run(asyncio.wait_for(main(args), args.deadline))
    except asyncio.TimeoutError:
        emit(deadline_case, False, "the client did not finish within %ds" % args.deadline)
        sys.exit(1)
