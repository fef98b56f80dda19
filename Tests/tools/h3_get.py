#!/usr/bin/env python3
"""An HTTP/3 server and client on aioquic, for sniff.test.sh (QUIC Initial sniffing).

  h3_get.py server HOST PORT CERT KEY FILE     answers every GET with FILE's bytes
  h3_get.py client ADDRESS PORT NAME CA [--big-hello] [--version 1|2]
        GET https://NAME/ from ADDRESS:PORT (SNI NAME, verified against CA); prints the body's
        SHA-256 and its length. --big-hello offers eight long ALPN ids besides h3, so the
        ClientHello does not fit one Initial (two datagrams). Exit 0 on a 200, 1 otherwise.
"""
import asyncio
import hashlib
import sys

from aioquic.asyncio import connect, serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent
from aioquic.quic.packet import QuicProtocolVersion


class Server(QuicConnectionProtocol):
    body = b""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)

    def quic_event_received(self, event: QuicEvent) -> None:
        for e in self.h3.handle_event(event):
            if isinstance(e, HeadersReceived) and e.stream_ended:
                self.h3.send_headers(e.stream_id, [(b":status", b"200"),
                                                   (b"content-length", str(len(self.body)).encode())])
                self.h3.send_data(e.stream_id, self.body, end_stream=True)
                self.transmit()


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.done = asyncio.get_event_loop().create_future()
        self.status = None
        self.body = b""

    def quic_event_received(self, event: QuicEvent) -> None:
        for e in self.h3.handle_event(event):
            if isinstance(e, HeadersReceived):
                self.status = dict(e.headers).get(b":status")
            if isinstance(e, DataReceived):
                self.body += e.data
            if getattr(e, "stream_ended", False) and not self.done.done():
                self.done.set_result(True)

    async def get(self, name):
        sid = self._quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", name.encode()),
                                   (b":path", b"/")], end_stream=True)
        self.transmit()
        await asyncio.wait_for(self.done, 10)


async def run_server(host, port, cert, key, path):
    Server.body = open(path, "rb").read()
    cfg = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    cfg.supported_versions = [QuicProtocolVersion.VERSION_1, QuicProtocolVersion.VERSION_2]
    cfg.load_cert_chain(cert, key)
    await serve(host, port, configuration=cfg, create_protocol=Server)
    await asyncio.Future()


async def run_client(address, port, name, ca, big, version):
    alpn = H3_ALPN + (["x%03d-" % i + "p" * 200 for i in range(8)] if big else [])
    cfg = QuicConfiguration(is_client=True, alpn_protocols=alpn, server_name=name)
    cfg.load_verify_locations(ca)
    cfg.supported_versions = [QuicProtocolVersion.VERSION_2 if version == 2 else QuicProtocolVersion.VERSION_1]
    async with connect(address, port, configuration=cfg, create_protocol=Client, wait_connected=True) as c:
        await c.get(name)
        print(hashlib.sha256(c.body).hexdigest(), len(c.body))
        return 0 if c.status == b"200" else 1


def main():
    a = sys.argv[1:]
    if a[0] == "server":
        asyncio.run(run_server(a[1], int(a[2]), a[3], a[4], a[5]))
        return 0
    big = "--big-hello" in a
    version = int(a[a.index("--version") + 1]) if "--version" in a else 1
    try:
        return asyncio.run(asyncio.wait_for(run_client(a[1], int(a[2]), a[3], a[4], big, version), 20))
    except Exception as e:  # a timeout or a refused handshake: said, exit 1
        print("error: %r" % (e,), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
