# The pieces the aioquic clients of loft-front share (quic_client.py, h3_client.py,
# quic_hostile.py; never run): PASS/FAIL lines, a protocol whose events wake waiters, the loft
# session read frame by frame from a stream's bytes, the QUIC client configuration with the test
# CA, a UDP echo, the command line every client takes; and for the quic carrier (ALPN loft, the
# session on stream 0): Proto (with echo_flow), hello and legit_session.
import argparse
import asyncio
import os
import socket
import sys
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, DatagramFrameReceived, StreamDataReceived, StreamReset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as W  # noqa: E402


def rss_kb(pid):
    """A process's resident set (VmRSS), in kB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def report(name, ok, why=""):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)), flush=True)


class Waiting(QuicConnectionProtocol):
    """A protocol whose subclasses set `changed` on each event; `wait` sleeps until pred holds."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.changed = asyncio.Event()

    async def wait(self, pred, timeout=10.0):
        end = time.monotonic() + timeout
        while not pred():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return pred()
        return True


class Session:
    """The loft session in the bytes `received()` returns (a stream's data or a request's body)."""

    def __init__(self, proto, received):
        self.p = proto
        self.received = received
        self.split = W.Splitter()
        self.used = 0
        self.frames = []

    async def next(self, pred, timeout=10.0):
        """The first frame (type, stream, body) matching pred, dropping others before it."""
        found = []

        def look():
            buf = self.received()
            if len(buf) > self.used:
                self.frames += self.split.feed(bytes(buf[self.used:]))
                self.used = len(buf)
            while self.frames:
                t, _, sid, body = self.frames.pop(0)
                if pred(t, sid, body):
                    found.append((t, sid, body))
                    return True
            return False
        await self.p.wait(look, timeout)
        return found[0] if found else None


def client_config(args, alpn, **options):
    """A client configuration for front.test checked against the test CA (args.ca)."""
    c = QuicConfiguration(is_client=True, alpn_protocols=list(alpn), server_name="front.test", idle_timeout=20, **options)
    c.load_verify_locations(args.ca)
    return c


def udp_echo(port):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", port))
    return u


async def serve_udp_echo(u):
    loop = asyncio.get_running_loop()
    u.setblocking(False)
    while True:
        b, a = await loop.sock_recvfrom(u, 65536)
        await loop.sock_sendto(u, b, a)


def arguments():
    """The command line every client takes; a client adds its own before parsing."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--echo-port", type=int, required=True)
    ap.add_argument("--udp-echo-port", type=int, required=True)
    return ap


# --- the quic carrier: ALPN loft, the session on the client's first bidirectional stream ------

class Proto(Waiting):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.data = {}
        self.fins = set()
        self.resets = {}
        self.datagrams = []
        self.terminated = None

    def quic_event_received(self, e):
        if isinstance(e, StreamDataReceived):
            self.data.setdefault(e.stream_id, bytearray()).extend(e.data)
            if e.end_stream:
                self.fins.add(e.stream_id)
        elif isinstance(e, StreamReset):
            self.resets[e.stream_id] = e.error_code
        elif isinstance(e, DatagramFrameReceived):
            self.datagrams.append(e.data)
        elif isinstance(e, ConnectionTerminated):
            self.terminated = e
        self.changed.set()

    def send(self, sid, b, end=False):
        self._quic.send_stream_data(sid, b, end_stream=end)
        self.transmit()

    async def echo_flow(self, port, payload, timeout):
        """A TCP flow to 127.0.0.1:port on a QUIC stream of its own: the OPEN frame, then payload
        and FIN. Returns the stream, whether it ended (FIN or reset) within timeout, and what
        came back on it."""
        fid = self._quic.get_next_available_stream_id()
        self._quic.send_stream_data(fid, W.open_tcp(1, "127.0.0.1", port) + payload, end_stream=True)
        self.transmit()
        done = await self.wait(lambda: fid in self.fins or fid in self.resets, timeout)
        return fid, done, bytes(self.data.get(fid, b""))


def config(args, alpn=("loft",)):
    return client_config(args, alpn, max_datagram_frame_size=65536)


async def hello(args, proto, token=None):
    """HELLO on stream 0: the session and its first STATUS or GOAWAY (None after 10 s)."""
    s = Session(proto, lambda: proto.data.get(0, b""))
    proto.send(0, W.hello(token or args.token, "aioquic-interop"))
    f = await s.next(lambda t, sid, b: t in (W.STATUS, W.GOAWAY))
    return s, f


async def legit_session(args, tag):
    """A new connection, HELLO → STATUS: whether the front still serves."""
    try:
        async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
            _, f = await hello(args, p)
            return f is not None and f[0] == W.STATUS
    except Exception as e:  # noqa: BLE001
        print("  # %s: %r" % (tag, e), file=sys.stderr)
        return False
