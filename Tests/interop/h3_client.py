#!/usr/bin/env python3
# An independent HTTP/3 client (PyPI aioquic: its QUIC and its aioquic.h3 H3Connection) against
# loft-front's h3 carrier (docs/protocol.md §1.3): QUIC v1 with ALPN h3, the certificate checked
# against the test CA; the session in the body of an extended CONNECT (`:protocol loft`) on the
# first request stream, a TCP flow in the body of an extended CONNECT `loft-flow` on a request
# stream of its own, a UDP association's DGRAMs on the session stream; refusals by path and
# method. Prints one PASS/FAIL line per case.
#   h3_client.py --port P --ca CA --token T --echo-port E --udp-echo-port U
import asyncio
import os
import struct
import sys

from aioquic.asyncio import connect
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.events import StreamReset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as W  # noqa: E402
from quic_common import Session, Waiting, arguments, client_config, report, serve_udp_echo, udp_echo  # noqa: E402


class H3Proto(Waiting):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.h3 = H3Connection(self._quic)
        self.status = {}
        self.body = {}
        self.ended = set()
        self.resets = {}

    def quic_event_received(self, e):
        if isinstance(e, StreamReset):
            self.resets[e.stream_id] = e.error_code
        for h in self.h3.handle_event(e):
            if isinstance(h, HeadersReceived):
                self.status[h.stream_id] = dict(h.headers).get(b":status", b"").decode()
                if h.stream_ended:
                    self.ended.add(h.stream_id)
            elif isinstance(h, DataReceived):
                self.body.setdefault(h.stream_id, bytearray()).extend(h.data)
                if h.stream_ended:
                    self.ended.add(h.stream_id)
        self.changed.set()

    def request(self, protocol, path="/loft", method="CONNECT", body=b"", end=False):
        sid = self._quic.get_next_available_stream_id()
        h = [(b":method", method.encode()), (b":scheme", b"https"), (b":path", path.encode()),
             (b":authority", b"front.test")]
        if protocol:
            h.insert(1, (b":protocol", protocol.encode()))
        self.h3.send_headers(sid, h, end_stream=end and not body)
        if body:
            self.h3.send_data(sid, body, end_stream=end)
        self.transmit()
        return sid

    def send(self, sid, body, end=False):
        self.h3.send_data(sid, body, end_stream=end)
        self.transmit()

    def session(self, sid):
        """The loft session in the body of request stream sid."""
        return Session(self, lambda: self.body.get(sid, b""))


def config(args):
    return client_config(args, H3_ALPN)


async def main(args):
    echo_task = asyncio.ensure_future(serve_udp_echo(udp_echo(args.udp_echo_port)))
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=H3Proto) as p:
        alpn = p._quic.tls.alpn_negotiated
        report("h3-handshake-alpn-h3", alpn == "h3", "negotiated %r" % alpn)
        # the session: extended CONNECT, then HELLO in its body
        sid = p.request("loft")
        ok = await p.wait(lambda: sid in p.status)
        report("h3-connect-200", ok and p.status.get(sid) == "200", "status %r" % p.status.get(sid))
        s = p.session(sid)
        p.send(sid, W.hello(args.token, "aioquic-h3-interop"))
        f = await s.next(lambda t, x, b: t in (W.STATUS, W.GOAWAY))
        st = W.parse_status(f[2]) if f and f[0] == W.STATUS else None
        report("h3-hello-status", st is not None and str(st["ipv4"].ip).startswith("198.18.64."), "got %r" % ((f[:2] if f else None),))
        p.send(sid, W.ping(0xABCDEF))
        f = await s.next(lambda t, x, b: t == W.PONG)
        report("h3-session-ping-pong", f is not None and struct.unpack("!Q", f[2])[0] == 0xABCDEF, "no PONG")

        # a TCP flow in the body of a CONNECT loft-flow of its own: OPEN, raw bytes, END_STREAM
        payload = os.urandom(300 * 1024)
        fid = p.request("loft-flow", body=W.open_tcp(1, "127.0.0.1", args.echo_port) + payload, end=True)
        ok = await p.wait(lambda: fid in p.ended or fid in p.resets, 20)
        got = bytes(p.body.get(fid, b""))
        report("h3-flow-own-stream-echo", ok and p.status.get(fid) == "200" and got[:8] == W.frame(W.OPEN_OK, 1)
               and got[8:] == payload and fid in p.ended,
               "stream %d: status %r, %d bytes back, head %r, ended %s" % (fid, p.status.get(fid), len(got), got[:8], fid in p.ended))

        # a UDP association on the session stream (h3 has no HTTP datagrams here)
        dest = W.addr("127.0.0.1", args.udp_echo_port)
        p.send(sid, W.frame(W.OPEN, 3, bytes([17]) + dest))
        f = await s.next(lambda t, x, b: x == 3 and t in (W.OPEN_OK, W.OPEN_FAIL))
        ok = f is not None and f[0] == W.OPEN_OK
        msg = os.urandom(700)
        p.send(sid, W.frame(W.DGRAM, 3, dest + msg))
        f = await s.next(lambda t, x, b: x == 3 and t == W.DGRAM and b.endswith(msg))
        report("h3-udp-echo-on-session-stream", ok and f is not None, "OPEN_OK %s, echo %s" % (ok, f is not None))

        # refusals: another path 404, another method 405 (each END_STREAM)
        r1 = p.request("loft-flow", path="/nope")
        r2 = p.request(None, method="GET", end=True)
        ok = await p.wait(lambda: r1 in p.status and r2 in p.status)
        report("h3-refusals-404-405", ok and p.status.get(r1) == "404" and p.status.get(r2) == "405",
               "statuses %r %r" % (p.status.get(r1), p.status.get(r2)))

        # the session ends: GOAWAY and END_STREAM; the front ends its body too
        p.send(sid, W.goaway(W.GOAWAY_SHUTDOWN, "interop done"), end=True)
        ended = await p.wait(lambda: sid in p.ended, 10)
        report("h3-session-end", ended, "no END_STREAM from the front")

    # a wrong token: GOAWAY bad-token in the session's body
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=H3Proto) as p:
        sid = p.request("loft", body=W.hello("not-the-token"))
        f = await p.session(sid).next(lambda t, x, b: t in (W.STATUS, W.GOAWAY))
        report("h3-bad-token-goaway", f is not None and f[0] == W.GOAWAY and W.parse_goaway(f[2])[0] == W.GOAWAY_BAD_TOKEN,
               "got %r" % (f,))
    echo_task.cancel()


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(arguments().parse_args()), 60))
