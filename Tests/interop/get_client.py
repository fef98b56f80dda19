#!/usr/bin/env python3
# An independent CLIENT of loft-front's `get` carrier, written from docs/protocol.md (section
# 1.4, the get carrier) with Python's ssl and asyncio and nothing of loft's: HTTP/1.1 over TLS
# 1.3 (ALPN http/1.1), two connections joined by a session id: a GET whose chunked response is
# the downstream, a POST whose chunked body is the upstream. loft's frames are encoded from
# docs/protocol.md in loftwire.py; chunked coding (RFC 9112 section 7.1) is written here.
#
#   get_client.py --port P --ca CA --token T --echo-port E --closed-port C --pool4 NET
#
# Prints one "PASS name" or "FAIL name: why" line per check on stdout (the shell test counts
# them), notes on stderr. Every wait is bounded; the whole run is bounded by --deadline.
import asyncio
import ipaddress
import os
import random
import ssl
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as lw  # noqa: E402
from loftwire import emit, note  # noqa: E402

WAIT = 10.0          # seconds for any one answer from the front


def describe(f):
    if f is None:
        return "downstream ended"
    t, fl, sid, body = f
    return "%s(0x%02x) stream %d len %d" % (lw.NAMES.get(t, "?"), t, sid, len(body))


def chunk(b):
    """One chunk of a chunked body (RFC 9112 7.1): size in hex, CRLF, data, CRLF."""
    return b"%x\r\n" % len(b) + b + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


async def read_head(reader, timeout=WAIT):
    """(status, {lowercased name: [values]}) of an HTTP/1.1 response; raises on EOF/timeout."""
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    lines = raw.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ")[:2]
    if version != "HTTP/1.1":
        raise ValueError("status line %r" % lines[0])
    headers = {}
    for line in lines[1:]:
        if line:
            k, v = line.split(":", 1)
            headers.setdefault(k.strip().lower(), []).append(v.strip())
    return int(status), headers


async def tls_conn(args):
    """One TLS connection to the front: (reader, writer)."""
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", args.port, ssl=args.ctx,
                                                          server_hostname=args.server_name), WAIT)


def request(method, target, args, extra=""):
    head = "%s %s HTTP/1.1\r\nHost: %s:%d\r\n" % (method, target, args.server_name, args.port)
    if method == "POST":
        head += "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n"
    else:
        head += "Accept: application/octet-stream\r\n"
    return (head + "Cache-Control: no-cache\r\n" + extra + "\r\n").encode()


class Session:
    """One get carrier: the GET (down) and POST (up) connections of one session id. Once the GET
    is answered, a reader decodes the chunked downstream into loft frames; the front's keepalive
    PINGs are answered with PONG here, every other frame is queued for the test."""

    def __init__(self, args, sid=None):
        self.args = args
        self.sid = sid or os.urandom(16).hex()
        self.split = lw.Splitter()
        self.queue = asyncio.Queue()
        self.front_pings = 0
        self.last_chunk = False      # the downstream ended with its last chunk (not just EOF)
        self.ended = "downstream not started"
        self.reader = None
        self.rng = random.Random(7230)

    async def open_down(self):
        self.dr, self.dw = await tls_conn(self.args)
        self.dw.write(request("GET", "%s?session=%s" % (self.args.path, self.sid), self.args))
        await self.dw.drain()

    async def open_up(self):
        self.ur, self.uw = await tls_conn(self.args)
        self.uw.write(request("POST", "%s?session=%s" % (self.args.path, self.sid), self.args))
        await self.uw.drain()

    async def answered(self):
        """Reads the GET's response head and starts the reader on a 200: (status, headers)."""
        st, h = await read_head(self.dr)
        if st == 200:
            self.reader = asyncio.create_task(self._read())
        return st, h

    async def _read(self):
        try:
            while True:
                line = await self.dr.readuntil(b"\r\n")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (await self.dr.readuntil(b"\r\n")) != b"\r\n":
                        pass              # trailer fields: none expected, skipped
                    self.last_chunk = True
                    self.ended = "the downstream's last chunk"
                    break
                body = await self.dr.readexactly(size)
                if await self.dr.readexactly(2) != b"\r\n":
                    self.ended = "a chunk not followed by CRLF"
                    break
                for (t, fl, sid, b) in self.split.feed(body):
                    if t == lw.PING and fl == 0 and sid == 0 and len(b) == 8:
                        self.front_pings += 1
                        await self.send(lw.pong(struct.unpack("!Q", b)[0]))
                        continue
                    await self.queue.put((t, fl, sid, b))
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, ValueError) as e:
            self.ended = "the GET connection ended without the last chunk (%s)" % type(e).__name__
        finally:
            await self.queue.put(None)

    async def send(self, b):
        """Upstream bytes, cut into chunks of random sizes (frame and chunk boundaries need not
        match)."""
        pos = 0
        while pos < len(b):
            k = self.rng.randint(1, 20000)
            self.uw.write(chunk(b[pos:pos + k]))
            pos += k
        await self.uw.drain()

    async def next(self, timeout=WAIT):
        """The next frame (type, flags, stream, body); None once the downstream ended; raises
        asyncio.TimeoutError if nothing came."""
        item = await asyncio.wait_for(self.queue.get(), timeout)
        if item is None:
            await self.queue.put(None)
        return item

    async def end_upstream(self):
        """The last chunk on the POST: the POST's response (status) once the front answers."""
        self.uw.write(LAST_CHUNK)
        await self.uw.drain()
        st, _ = await read_head(self.ur)
        return st

    def close(self):
        for w in (getattr(self, "dw", None), getattr(self, "uw", None)):
            if w is not None:
                w.close()
        if self.reader is not None:
            self.reader.cancel()


async def until_end(s, timeout=WAIT):
    """Reads frames until the downstream ends: (frames seen, ended in time)."""
    got = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return got, False
        try:
            f = await s.next(left)
        except asyncio.TimeoutError:
            continue
        if f is None:
            return got, True
        got.append(f)


async def session(args, hello):
    """A joined session that sent `hello`: (session, first frame or an error text)."""
    s = Session(args)
    await s.open_down()
    await s.open_up()
    st, h = await s.answered()
    if st != 200:
        s.close()
        return s, "the GET was answered %d" % st
    await s.send(hello)
    try:
        f = await s.next()
    except asyncio.TimeoutError:
        return s, "no answer to HELLO within %ds" % WAIT
    return s, f


async def alive(args, label):
    """A fresh session still gets a STATUS from the pool."""
    s, f = await session(args, lw.hello(args.token, "get-interop alive"))
    s.close()
    ok = isinstance(f, tuple) and f[0] == lw.STATUS and lw.parse_status(f[3])["ipv4"].ip in args.pool4
    return emit("alive-after-" + label, ok, f if isinstance(f, str) else describe(f))


async def refused(args, name, raw, want):
    """One request on a connection of its own (`raw`, bytes): answered with status `want`."""
    r, w = await tls_conn(args)
    w.write(raw)
    await w.drain()
    try:
        st, _ = await read_head(r)
        detail = "status %d, want %d" % (st, want)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
        st, detail = None, "no answer: %s" % type(e).__name__
    w.close()
    return emit(name, st == want, detail)


async def main(args):
    # 1. the pair: TLS 1.3 with ALPN http/1.1 on both; the GET waits for its POST, then 200 chunked
    s = Session(args)
    await s.open_down()
    tls = s.dw.get_extra_info("ssl_object")
    early = None
    try:
        early = await asyncio.wait_for(s.dr.read(1), 1.0)
    except asyncio.TimeoutError:
        pass
    await s.open_up()
    tls_up = s.uw.get_extra_info("ssl_object")
    emit("get-tls13-alpn-http11", all(t.version() == "TLSv1.3" and t.selected_alpn_protocol() == "http/1.1" for t in (tls, tls_up)),
         "GET %s %s, POST %s %s" % (tls.version(), tls.selected_alpn_protocol(), tls_up.version(), tls_up.selected_alpn_protocol()))
    try:
        st, h = await s.answered()
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
        st, h = None, {}
        note("no GET response: %r" % e)
    emit("get-answered-after-post", early is None and st is not None,
         "before the POST the front sent %r; after it: status %s" % (early, st))
    emit("get-200-chunked", st == 200 and h.get("transfer-encoding") == ["chunked"] and "content-length" not in h,
         "status %s, headers %s" % (st, h))
    if st != 200:
        for n in ("hello-status", "ping-pong-same-value", "open-tcp-ok", "tcp-echo-1mib-intact", "front-grants-credit",
                  "front-respects-credit", "fin-answered-with-fin", "open-refused-open-fail", "upstream-end-post-200",
                  "upstream-end-last-chunk"):
            emit(n, False, "no get channel")
        return

    # 2. HELLO -> STATUS with the pool's first address
    await s.send(lw.hello(args.token, "get-interop/python-" + sys.version.split()[0]))
    try:
        f = await s.next()
    except asyncio.TimeoutError:
        f = None
    st = None
    if isinstance(f, tuple) and f[0] == lw.STATUS and f[1] == 0 and f[2] == 0:
        st = lw.parse_status(f[3])
    want4 = ipaddress.ip_interface("%s/%d" % (args.pool4.network_address + 2, args.pool4.prefixlen))
    emit("hello-status", st is not None and st["ipv4"] == want4 and st["instance"] != bytes(16),
         "got %s" % (describe(f) if st is None else st))

    # 3. PING -> PONG with the same value (the front's own PINGs are answered by Session)
    value = 0x0123456789ABCDEF
    await s.send(lw.ping(value))
    got = "timeout"
    try:
        while True:
            got = await s.next()
            if got is None or got[0] == lw.PONG:
                break
    except asyncio.TimeoutError:
        pass
    emit("ping-pong-same-value", isinstance(got, tuple) and got[2] == 0 and got[3] == struct.pack("!Q", value),
         "got %s" % (got if not isinstance(got, tuple) else describe(got)))

    # 4. a TCP stream to the echo server: OPEN, 1 MiB both ways under credit, FIN / FIN;
    #    OPEN_FAIL from a port that refuses
    await lw.echo_stream_checks(s, args.echo_port, args.closed_port, describe)

    # 5. the client ends the upstream (last chunk): the POST is answered 200, the downstream
    #    ends with its last chunk
    try:
        post = await s.end_upstream()
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
        post = "no answer: %s" % type(e).__name__
    emit("upstream-end-post-200", post == 200, "POST answered %s" % post)
    frames, ended = await until_end(s)
    emit("upstream-end-last-chunk", ended and s.last_chunk, "downstream: %s; frames %s" % (s.ended, [describe(x) for x in frames]))
    s.close()

    # 6. a wrong token: GOAWAY bad-token (1) on the downstream, which then ends
    s, f = await session(args, lw.hello("not-the-token", "get-interop bad token"))
    frames, ended = await until_end(s)
    frames = ([f] if isinstance(f, tuple) else []) + frames
    reasons = [lw.parse_goaway(x[3])[0] for x in frames if x[0] == lw.GOAWAY]
    emit("bad-token-goaway", reasons == [lw.GOAWAY_BAD_TOKEN] and ended,
         "GOAWAY reasons %s, downstream ended %s (%s)" % (reasons, ended, s.ended))
    s.close()

    # 7. requests the front refuses, each on a connection of its own, then a session still works
    sid = os.urandom(16).hex()
    await refused(args, "no-session-id-400", request("GET", args.path, args), 400)
    await refused(args, "short-session-id-400", request("GET", args.path + "?session=abc", args), 400)
    await refused(args, "wrong-path-404", request("GET", "/other?session=" + sid, args), 404)
    await refused(args, "put-405", request("PUT", args.path + "?session=" + sid, args), 405)
    raw = request("POST", args.path + "?session=" + sid, args).replace(b"Transfer-Encoding: chunked\r\n", b"Content-Length: 5\r\n") + b"hello"
    await refused(args, "post-not-chunked-400", raw, 400)
    # a second GET for a session that has one: 409
    s = Session(args)
    await s.open_down()
    await asyncio.sleep(0.2)
    await refused(args, "second-get-409", request("GET", "%s?session=%s" % (args.path, s.sid), args), 409)
    s.close()
    await alive(args, "refusals")

    # 8. a GET whose POST never comes: 408 when the join deadline passes (10 s)
    s = Session(args)
    await s.open_down()
    try:
        st, _ = await read_head(s.dr, 15)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
        st = "nothing: %s" % type(e).__name__
    emit("unjoined-get-408", st == 408, "the lone GET got %s" % st)
    s.close()

    # 9. a malformed chunk on the upstream, then bytes after the GET request on its connection:
    #    each a protocol error that ends the session (POST 400), with the front serving after it
    await broken(args, "malformed-chunk", "up", b"zz\r\nnot a chunk\r\n")
    await broken(args, "bytes-after-get", "down", b"GET /again HTTP/1.1\r\n\r\n")


async def broken(args, label, leg, raw):
    """A session that then gets `raw` on its `leg` connection ("up": the POST, "down": the
    GET): the POST is answered 400 and the downstream ends (case LABEL-400); a fresh session
    still gets a STATUS (alive-after-LABEL)."""
    s, f = await session(args, lw.hello(args.token, "get-interop " + label))
    w = s.uw if leg == "up" else s.dw
    w.write(raw)
    await w.drain()
    try:
        st, _ = await read_head(s.ur)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
        st = "nothing: %s" % type(e).__name__
    frames, ended = await until_end(s)
    emit(label + "-400", st == 400 and ended, "POST answered %s, downstream ended %s (%s)" % (st, ended, s.ended))
    s.close()
    await alive(args, label)


def parse_args():
    p = lw.client_arguments()
    p.add_argument("--deadline", type=float, default=150)
    a = p.parse_args()
    a.ctx = ssl.create_default_context(cafile=a.ca)
    a.ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    a.ctx.set_alpn_protocols(["http/1.1"])
    return a


if __name__ == "__main__":
    lw.run_client(main, parse_args(), "get-client-deadline")
