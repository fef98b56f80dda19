#!/usr/bin/env python3
# An independent QUIC server (PyPI aioquic) that speaks the loft session (docs/protocol.md §1.2,
# frames from loftwire.py) to loft's holder: ALPN loft, the session on the client's stream 0;
# HELLO -> STATUS (198.18.64.2/24), PING -> PONG, every TCP stream an echo (on stream 0: OPEN
# -> OPEN_OK, DATA echoed, FIN -> FIN; on a QUIC stream of its own: the OPEN frame, OPEN_OK,
# then raw bytes echoed and FIN answered with FIN), every UDP association an echo (each DGRAM answered with the same
# payload from the destination it named, as a QUIC DATAGRAM frame). One JSON line per
# connection event goes to --results.
# With --alpn h3 it is an HTTP/3 server instead (aioquic.h3, docs/protocol.md §1.3): the session
# is the body of the extended CONNECT `:protocol loft` (answered 200), each flow the body of a
# CONNECT `loft-flow` on a request stream of its own (answered 200, then as above), DGRAMs echoed
# on the session stream (h3 has no HTTP datagrams).
#   quic_session_server.py --port P --cert C --key K --results FILE [--alpn h3]
import argparse
import asyncio
import json
import os
import struct
import sys

from aioquic.asyncio import serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.events import DatagramFrameReceived, HandshakeCompleted, StreamDataReceived

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as W  # noqa: E402

RESULTS = None


def record(**kv):
    with open(RESULTS, "a") as f:
        f.write(json.dumps(kv) + "\n")


def status_body():
    body = bytes(range(1, 17)) + struct.pack("!IIH", 10000, 64, 1400)
    body += bytes([198, 18, 64, 2, 24, 198, 18, 64, 1, 0, 0])
    return body


class Session(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.split = W.Splitter()
        self.assoc = set()
        self.tcp = set()
        self.flows = {}
        self.h3 = None

    def send0(self, b):
        if self.h3:
            self.h3.send_data(0, b, end_stream=False)
        else:
            self._quic.send_stream_data(0, b)

    def send(self, sid, b, end=False):
        if self.h3:
            self.h3.send_data(sid, b, end_stream=end)
        else:
            self._quic.send_stream_data(sid, b, end_stream=end)

    def on_frame(self, t, sid, body, via):
        if t == W.HELLO:
            v, caps, token, name = W.parse_hello(body)
            record(event="hello", version=v, token=token, client=name, alpn=self._quic.tls.alpn_negotiated)
            self.send0(W.frame(W.STATUS, 0, status_body()))
        elif t == W.RESUME:
            record(event="resume")
            self.send0(W.frame(W.STATUS, 0, status_body()))
        elif t == W.PING:
            self.send0(W.frame(W.PONG, 0, body))
        elif t == W.OPEN:
            network = body[0]
            (self.tcp if network == 6 else self.assoc).add(sid)
            record(event="open", stream=sid, network=network)
            self.send0(W.frame(W.OPEN_OK, sid))
            if network == 6:
                self.send0(W.credit(sid, 16 << 20))   # the echo reads at once: a wide window
        elif t == W.DATA and sid in self.tcp:
            for i in range(0, len(body), 65535):
                self.send0(W.data(sid, body[i:i + 65535]))
        elif t == W.FIN and sid in self.tcp:
            record(event="fin", stream=sid)
            self.send0(W.fin(sid))
        elif t == W.DGRAM and sid in self.assoc:
            record(event="dgram", stream=sid, via=via, size=len(body))
            if self.h3:
                self.send0(W.frame(W.DGRAM, sid, body))
            else:
                self._quic.send_datagram_frame(W.frame(W.DGRAM, sid, body))
        elif t == W.GOAWAY:
            record(event="goaway", reason=body[0])

    def flow_data(self, sid, data, end):
        """A TCP flow on a stream of its own: its OPEN first, answered with OPEN_OK, then every
        byte echoed, and the stream's FIN answered with ours."""
        st = self.flows.setdefault(sid, {"buf": b"", "open": False})
        if not st["open"]:
            st["buf"] += data
            b = st["buf"]
            if len(b) < 8 or len(b) < 8 + struct.unpack_from("!H", b, 6)[0]:
                return
            n = 8 + struct.unpack_from("!H", b, 6)[0]
            t, _, fsid = struct.unpack_from("!BBI", b)
            record(event="flow-open", stream=sid, type=t, frame_stream=fsid, network=b[8])
            st["open"] = True
            self.send(sid, W.frame(W.OPEN_OK, 1))
            data = b[n:]
        if data:
            self.send(sid, data)
        if end:
            record(event="flow-fin", stream=sid)
            self.send(sid, b"", end=True)

    def session_data(self, data, end):
        for t, _, sid, body in self.split.feed(data):
            self.on_frame(t, sid, body, "stream")
        if end:
            self.send(0, b"", end=True)

    def h3_event(self, e):
        if isinstance(e, HeadersReceived):
            h = dict(e.headers)
            proto = h.get(b":protocol", b"").decode()
            record(event="connect", stream=e.stream_id, method=h.get(b":method", b"").decode(), protocol=proto,
                   path=h.get(b":path", b"").decode(), authority=h.get(b":authority", b"").decode())
            ok = h.get(b":method") == b"CONNECT" and (proto == "loft" and e.stream_id == 0 or proto == "loft-flow")
            self.h3.send_headers(e.stream_id, [(b":status", b"200" if ok else b"400")], end_stream=not ok)
        elif isinstance(e, DataReceived):
            if e.stream_id == 0:
                self.session_data(e.data, e.stream_ended)
            else:
                self.flow_data(e.stream_id, e.data, e.stream_ended)

    def quic_event_received(self, e):
        if isinstance(e, HandshakeCompleted):
            record(event="handshake", alpn=e.alpn_protocol)
            if e.alpn_protocol == "h3":
                self.h3 = H3Connection(self._quic)
        if self.h3:
            for h in self.h3.handle_event(e):
                self.h3_event(h)
            self.transmit()
            return
        if isinstance(e, HandshakeCompleted):
            pass
        elif isinstance(e, StreamDataReceived):
            if e.stream_id != 0:
                self.flow_data(e.stream_id, e.data, e.end_stream)
                self.transmit()
                return
            self.session_data(e.data, e.end_stream)
        elif isinstance(e, DatagramFrameReceived):
            d = e.data
            t, _, sid, n = struct.unpack_from("!BBIH", d)
            if n + 8 == len(d):
                self.on_frame(t, sid, d[8:], "datagram")
        self.transmit()


async def main(args):
    global RESULTS
    RESULTS = args.results
    c = QuicConfiguration(is_client=False, alpn_protocols=[args.alpn], max_datagram_frame_size=65536,
                          idle_timeout=30)
    c.load_cert_chain(args.cert, args.key)
    await serve("127.0.0.1", args.port, configuration=c, create_protocol=Session)
    print("listening udp 127.0.0.1:%d alpn %s" % (args.port, args.alpn), flush=True)
    await asyncio.Future()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--alpn", default="loft", choices=["loft", "h3"])
    asyncio.run(main(ap.parse_args()))
