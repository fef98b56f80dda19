#!/usr/bin/env python3
# The PyPI `websockets` library as the CLIENT of loft-front's ws carrier: RFC 6455 over TLS 1.3,
# binary messages, and loft's frames encoded here from docs/protocol.md (loftwire.py).
#
#   ws_client.py --port P --ca CA --token T --echo-port E --closed-port C [expected overlay...]
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

import websockets
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as lw  # noqa: E402
from loftwire import emit, note  # noqa: E402

WAIT = 10.0          # seconds for any one answer from the front


class Conn:
    """One websocket to the front and the loft frames read from it. The front's keepalive
    PINGs are answered with PONG here; every other frame is queued for the test."""

    def __init__(self, ws):
        self.ws = ws
        self.split = lw.Splitter()
        self.queue = asyncio.Queue()
        self.closed = False
        self.text_messages = 0
        self.front_pings = 0
        self.goaway_at = None
        self.end_delay = None
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, args):
        ws = await websockets.connect(args.url, ssl=args.ctx, server_hostname=args.server_name,
                                      open_timeout=WAIT, close_timeout=5, ping_interval=None,
                                      max_size=None)
        return cls(ws)

    async def _read(self):
        try:
            async for msg in self.ws:
                if isinstance(msg, str):
                    self.text_messages += 1
                    continue
                for (t, fl, sid, body) in self.split.feed(msg):
                    if t == lw.PING and fl == 0 and sid == 0 and len(body) == 8:
                        self.front_pings += 1
                        try:
                            await self.ws.send(lw.frame(lw.PONG, 0, body))
                        except ConnectionClosed:
                            pass
                        continue
                    await self.queue.put((t, fl, sid, body))
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            await self.queue.put(None)

    async def send(self, b):
        await self.ws.send(b)

    async def next(self, timeout=WAIT):
        """The next frame (type, flags, stream, body); None once the websocket closed;
        raises asyncio.TimeoutError if nothing came."""
        if self.closed and self.queue.empty():
            return None
        item = await asyncio.wait_for(self.queue.get(), timeout)
        if item is None:
            await self.queue.put(None)   # stays closed for later calls
        return item

    async def wait_closed(self, timeout=WAIT):
        try:
            await asyncio.wait_for(self.reader, timeout)
        except asyncio.TimeoutError:
            return False
        return True

    @property
    def ended(self):
        """What ended the carrier, for a failure message."""
        return "websocket closed (code %d)" % self.close_code

    @property
    def close_code(self):
        """The code of the Close frame the front sent (1006: none, the TCP/TLS just ended)."""
        rcvd = getattr(self.ws.protocol, "close_rcvd", None)
        return rcvd.code if rcvd is not None else 1006

    async def close(self):
        try:
            await self.ws.close()
        except Exception:  # lint: ok: closing after the verdict; wait_closed follows
            pass
        await self.wait_closed(5)


def describe(f):
    if f is None:
        return "websocket closed"
    t, fl, sid, body = f
    return "%s(0x%02x) stream %d len %d" % (lw.NAMES.get(t, "?"), t, sid, len(body))


async def handshake(args, frame_bytes):
    """Opens a websocket, sends one handshake frame and returns (conn, first frame)."""
    c = await Conn.open(args)
    await c.send(frame_bytes)
    try:
        f = await c.next()
    except asyncio.TimeoutError:
        f = "timeout"
    return c, f


async def expect_status(args, frame_bytes):
    """(conn, status dict) or (conn, error text)."""
    c, f = await handshake(args, frame_bytes)
    if f == "timeout":
        return c, "no answer within %ds" % WAIT
    if f is None or f[0] != lw.STATUS:
        extra = ""
        if f is not None and f[0] == lw.GOAWAY:
            extra = " %r" % (lw.parse_goaway(f[3]),)
        return c, "expected STATUS, got %s%s" % (describe(f), extra)
    if f[1] != 0 or f[2] != 0:
        return c, "STATUS with flags %d stream %d" % (f[1], f[2])
    try:
        return c, lw.parse_status(f[3])
    except Exception as e:
        return c, "STATUS does not decode: %s" % e


async def expect_goaway(c, reason, timeout=WAIT):
    """Reads until the websocket closes: (ok, detail). ok when a GOAWAY with `reason` came
    and the front then closed the websocket with a Close frame."""
    got = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False, "websocket still open %ds later; frames %s" % (timeout, got)
        try:
            f = await c.next(left)
        except asyncio.TimeoutError:
            continue
        if f is None:
            break
        if f[0] == lw.GOAWAY:
            c.goaway_at = time.monotonic()
            try:
                got.append(lw.parse_goaway(f[3]))
            except Exception as e:
                return False, "GOAWAY does not decode: %s" % e
        else:
            got.append(describe(f))
    # How long after its GOAWAY the front took to end the TCP connection (RFC 6455 7.1.1: once
    # it has sent and received a Close, the server closes the TCP connection first).
    try:
        await asyncio.wait_for(c.ws.wait_closed(), 5)
    except asyncio.TimeoutError:
        pass
    if c.goaway_at is not None:
        c.end_delay = time.monotonic() - c.goaway_at
    reasons = [g[0] for g in got if isinstance(g, tuple)]
    if reason not in reasons:
        return False, "wanted GOAWAY reason %d, got %s, close code %d" % (reason, got, c.close_code)
    if c.close_code == 1006:
        return False, "GOAWAY %s but the websocket ended without a Close frame" % got
    return True, "GOAWAY %s, close %d" % (got, c.close_code)


async def alive(args, label):
    """A fresh HELLO on a new websocket still gets a STATUS from the pool."""
    c, s = await expect_status(args, lw.hello(args.token, "ws-interop alive"))
    await c.close()
    if isinstance(s, str):
        return emit("alive-after-" + label, False, s)
    return emit("alive-after-" + label, s["ipv4"].ip in args.pool4, "ipv4 %s not in %s" % (s["ipv4"], args.pool4))


async def malformed(args, label, setup_hello, bad, expect):
    """Sends `bad` (bytes: one binary message; str: one text message) and checks the front
    ends that session cleanly: `expect` is ("goaway", reason) or ("close", codes)."""
    name = "malformed-" + label
    if setup_hello:
        c, s = await expect_status(args, lw.hello(args.token, "ws-interop " + label))
        if isinstance(s, str):
            await c.close()
            return emit(name, False, "no session to break: " + s)
    else:
        c = await Conn.open(args)
    try:
        await c.send(bad)
    except ConnectionClosed as e:
        await c.close()
        return emit(name, False, "could not send: %s" % e)
    ok, detail = False, ""
    if expect[0] == "goaway":
        ok, detail = await expect_goaway(c, expect[1])
    else:
        done = await c.wait_closed(WAIT)
        got = []
        while not c.queue.empty():
            f = c.queue.get_nowait()
            if f is not None:
                got.append(describe(f))
        ok = done and c.close_code in expect[1]
        detail = "closed %s, close code %d, frames %s" % (done, c.close_code, got)
    note(name, detail)
    await c.close()
    emit(name, ok, detail)
    await alive(args, label)


async def main(args):
    # 1. the upgrade and HELLO -> STATUS
    try:
        c = await Conn.open(args)
    except Exception as e:
        emit("ws-upgrade-tls13", False, "websockets.connect failed: %r" % e)
        return
    sslobj = c.ws.transport.get_extra_info("ssl_object")
    tlsv = sslobj.version() if sslobj else None
    resp = c.ws.response
    emit("ws-upgrade-tls13", resp.status_code == 101 and tlsv == "TLSv1.3"
         and not resp.headers.get("Sec-WebSocket-Extensions"),
         "status %s, TLS %s, extensions %r" % (resp.status_code, tlsv, resp.headers.get("Sec-WebSocket-Extensions")))
    await c.send(lw.hello(args.token, "ws-interop/websockets-" + websockets.__version__))
    try:
        f = await c.next()
    except asyncio.TimeoutError:
        f = "timeout"
    st = None
    if f not in ("timeout", None) and f[0] == lw.STATUS and f[1] == 0 and f[2] == 0:
        try:
            st = lw.parse_status(f[3])
        except Exception as e:
            emit("hello-status", False, "STATUS does not decode: %s" % e)
    if st is None:
        emit("hello-status", False, "wanted STATUS, got %s" % (f if f == "timeout" else describe(f)))
        for n in ("status-instance-id", "status-ipv4-from-pool", "status-ipv6-from-pool", "status-mtu",
                  "status-dns", "status-keepalive-max-streams"):
            emit(n, False, "no STATUS")
        await c.close()
        return
    emit("hello-status", True)
    note("STATUS", {k: (v.hex() if isinstance(v, bytes) else str(v)) for k, v in st.items()})
    iid = st["instance"]
    emit("status-instance-id", len(iid) == 16 and iid != bytes(16), "instance %s" % iid.hex())
    want4 = ipaddress.ip_interface("%s/%d" % (args.pool4.network_address + 2, args.pool4.prefixlen))
    emit("status-ipv4-from-pool", st["ipv4"] == want4 and st["gateway4"] == args.pool4.network_address + 1,
         "ipv4 %s gateway %s, want %s gateway %s" % (st["ipv4"], st["gateway4"], want4, args.pool4.network_address + 1))
    want6 = ipaddress.ip_interface("%s/%d" % (args.pool6.network_address + 2, args.pool6.prefixlen))
    emit("status-ipv6-from-pool", st["ipv6"] == want6 and st["gateway6"] == args.pool6.network_address + 1,
         "ipv6 %s gateway %s, want %s" % (st["ipv6"], st["gateway6"], want6))
    emit("status-mtu", st["mtu"] == args.mtu, "mtu %d, want %d" % (st["mtu"], args.mtu))
    emit("status-dns", st["dns"] == args.dns, "dns %s, want %s" % (st["dns"], args.dns))
    emit("status-keepalive-max-streams", st["keepalive_ms"] == args.keepalive_ms and st["max_streams"] == args.max_streams,
         "keepalive_ms %d max_streams %d, want %d %d" % (st["keepalive_ms"], st["max_streams"], args.keepalive_ms, args.max_streams))

    # 2. PING -> PONG with the same value (the front's own PINGs are answered by Conn)
    value = 0x0123456789ABCDEF
    await c.send(lw.ping(value))
    got = None
    try:
        while True:
            f = await c.next()
            if f is None or (f[0] == lw.PONG):
                got = f
                break
    except asyncio.TimeoutError:
        got = "timeout"
    emit("ping-pong-same-value", isinstance(got, tuple) and got[2] == 0 and got[3] == struct.pack("!Q", value),
         "got %s" % (got if not isinstance(got, tuple) else "%s %s" % (describe(got), got[3].hex())))
    # RFC 6455 control frames: a websocket Ping is answered with a Pong by loft's carrier.
    try:
        waiter = await c.ws.ping(b"loft-ws-interop")
        latency = await asyncio.wait_for(waiter, 5)
        emit("ws-control-ping-pong", True)
        note("ws ping rtt %.1f ms" % (latency * 1000))
    except Exception as e:
        emit("ws-control-ping-pong", False, "no Pong: %r" % e)

    # 3. a TCP stream to the echo server: OPEN, 1 MiB both ways with flow control, FIN / FIN;
    #    OPEN_FAIL from a port that refuses
    await lw.echo_stream_checks(c, args.echo_port, args.closed_port, describe)
    await c.ws.close()
    await c.wait_closed(5)
    emit("ws-close-handshake", c.close_code == 1000, "the front answered our Close with %d" % c.close_code)

    # 4. RESUME on a second websocket: the same instance and addresses
    c2, s2 = await expect_status(args, lw.resume(iid, args.token))
    if isinstance(s2, str):
        emit("resume-same-instance", False, s2)
        emit("resume-same-addresses", False, s2)
        emit("resumed-session-carries-stream", False, s2)
    else:
        emit("resume-same-instance", s2["instance"] == iid, "instance %s, want %s" % (s2["instance"].hex(), iid.hex()))
        same = all(s2[k] == st[k] for k in ("ipv4", "gateway4", "ipv6", "gateway6", "mtu", "dns"))
        emit("resume-same-addresses", same, "after RESUME %s %s, before %s %s" % (s2["ipv4"], s2["ipv6"], st["ipv4"], st["ipv6"]))
        # Stream ids start at 1 again on the new attachment.
        msg = b"after resume " * 100
        await c2.send(lw.open_tcp(1, "127.0.0.1", args.echo_port) + lw.data(1, msg) + lw.fin(1))
        r = await bulk_echo_small(c2, 1)
        emit("resumed-session-carries-stream", r == (True, msg), "got %r" % (r,))
        # RESUME again while c2 is attached: c2 gets GOAWAY superseded and is closed.
        c3, s3 = await expect_status(args, lw.resume(iid, args.token))
        ok, detail = await expect_goaway(c2, lw.GOAWAY_SUPERSEDED)
        ok = ok and not isinstance(s3, str) and s3["instance"] == iid
        emit("resume-supersedes-attached", ok, detail if isinstance(s3, dict) else s3)
        await c3.close()
    await c2.close()
    c4 = await Conn.open(args)
    await c4.send(lw.resume(os.urandom(16), args.token))
    ok, detail = await expect_goaway(c4, lw.GOAWAY_UNKNOWN_INSTANCE)
    emit("resume-unknown-instance", ok, detail)
    await c4.close()

    # 5. a wrong token: GOAWAY bad-token (1), then the front closes
    c5 = await Conn.open(args)
    await c5.send(lw.hello("not-the-token", "ws-interop bad token"))
    ok, detail = await expect_goaway(c5, lw.GOAWAY_BAD_TOKEN)
    emit("bad-token-goaway", ok, detail)
    # The front started the close handshake after its GOAWAY and websockets answered at once.
    emit("front-ends-tcp-after-close-handshake", c5.end_delay is not None and c5.end_delay < 1.0,
         "the TCP/TLS connection ended %s s after the front's GOAWAY and Close (websockets answered the "
         "Close at once; loft-front's WSCarrier.closeWaitMs is 2 s)" % ("%.2f" % c5.end_delay if c5.end_delay else "never"))
    await c5.close()

    # 6. malformed input: each ends that session cleanly, and a fresh HELLO is served after it
    await malformed(args, "text-message", True, "HELLO as text", ("close", (1003, 1002, 1007)))
    await malformed(args, "unknown-type", True, lw.frame(0x7E, 0, b"\x00\x01"), ("goaway", lw.GOAWAY_PROTOCOL_ERROR))
    garbage = bytearray(random.Random(1).randbytes(4096))
    garbage[1] = 0xA5          # flags must be 0: refused on the header whatever the type byte is
    await malformed(args, "garbage", False, bytes(garbage), ("goaway", lw.GOAWAY_PROTOCOL_ERROR))
    await malformed(args, "hello-twice", True, lw.hello(args.token, "again"), ("goaway", lw.GOAWAY_PROTOCOL_ERROR))
    await malformed(args, "bad-length-ping", True, lw.frame(lw.PING, 0, b"\x00" * 7), ("goaway", lw.GOAWAY_PROTOCOL_ERROR))
    await malformed(args, "version-2", False, lw.hello(args.token, "v2", version=2),
                    ("goaway", lw.GOAWAY_UNSUPPORTED_VERSION))


async def bulk_echo_small(c, stream):
    """After OPEN+DATA+FIN in one message: (fin seen, bytes) from OPEN_OK to FIN."""
    out = bytearray()
    try:
        while True:
            f = await c.next()
            if f is None:
                return ("closed", bytes(out))
            t, fl, sid, body = f
            if t == lw.OPEN_OK and sid == stream:
                continue
            if t == lw.DATA and sid == stream:
                out += body
            elif t == lw.FIN and sid == stream:
                return (True, bytes(out))
            elif t == lw.CREDIT:
                continue
            else:
                return (describe(f), bytes(out))
    except asyncio.TimeoutError:
        return ("timeout", bytes(out))


def parse_args():
    p = lw.client_arguments()
    p.add_argument("--pool6", type=ipaddress.ip_network, required=True)
    p.add_argument("--mtu", type=int, required=True)
    p.add_argument("--dns", required=True, help="comma-separated, in order")
    p.add_argument("--keepalive-ms", type=int, required=True)
    p.add_argument("--max-streams", type=int, required=True)
    p.add_argument("--deadline", type=float, default=150)
    a = p.parse_args()
    a.dns = [ipaddress.ip_address(x) for x in a.dns.split(",")]
    a.url = "wss://127.0.0.1:%d%s" % (a.port, a.path)
    a.ctx = ssl.create_default_context(cafile=a.ca)
    a.ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return a


if __name__ == "__main__":
    lw.run_client(main, parse_args(), "ws-client-deadline")
