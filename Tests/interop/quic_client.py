#!/usr/bin/env python3
# An independent QUIC client (PyPI aioquic) against loft-front's quic carrier: QUIC v1 with
# TLS 1.3 and ALPN `loft`, the certificate checked against the test CA, the loft session
# (docs/protocol.md, frames from loftwire.py) on the client's first bidirectional stream.
# Prints one PASS/FAIL line per case.
#   quic_client.py --port P --ca CA --token T --echo-port E --udp-echo-port U
import asyncio
import os
import socket
import struct
import sys
import time

from aioquic.quic.connection import QuicConnection

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as W  # noqa: E402
from quic_common import Proto, arguments, config, connect, hello, legit_session, report, serve_udp_echo, udp_echo  # noqa: E402


async def main(args):
    u = udp_echo(args.udp_echo_port)
    echo_task = asyncio.ensure_future(serve_udp_echo(u))

    # 1. handshake, HELLO/STATUS, PING/PONG, a TCP stream echoed, a UDP association echoed
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
        alpn = p._quic.tls.alpn_negotiated
        report("quic-handshake-alpn-loft", alpn == "loft", "negotiated %r" % alpn)
        s, f = await hello(args, p)
        ok = f is not None and f[0] == W.STATUS
        st = W.parse_status(f[2]) if ok else None
        report("quic-hello-status", ok and str(st["ipv4"].ip).startswith("198.18.64."),
               "got %r" % ((f[:2] if f else None),))
        p.send(0, W.ping(0x1234567890))
        f = await s.next(lambda t, sid, b: t == W.PONG)
        report("quic-session-ping-pong", f is not None and struct.unpack("!Q", f[2])[0] == 0x1234567890, "no PONG")

        p.send(0, W.open_tcp(1, "127.0.0.1", args.echo_port))
        f = await s.next(lambda t, sid, b: sid == 1 and t in (W.OPEN_OK, W.OPEN_FAIL))
        report("quic-open-tcp-ok", f is not None and f[0] == W.OPEN_OK, "got %r" % (f,))
        payload = os.urandom(200 * 1024)
        for i in range(0, len(payload), 16384):
            p.send(0, W.data(1, payload[i:i + 16384]))
        p.send(0, W.fin(1))
        got = bytearray()
        fin = await s.next(lambda t, sid, b: (sid == 1 and t == W.DATA and got.extend(b)) or (sid == 1 and t in (W.FIN, W.RST)), 20)
        report("quic-tcp-echo-200k", bytes(got) == payload and fin is not None and fin[0] == W.FIN,
               "echoed %d of %d bytes, end %r" % (len(got), len(payload), fin and fin[0]))

        dest = W.addr("127.0.0.1", args.udp_echo_port)
        p.send(0, W.frame(W.OPEN, 3, bytes([17]) + dest))
        f = await s.next(lambda t, sid, b: sid == 3 and t in (W.OPEN_OK, W.OPEN_FAIL))
        report("quic-open-udp-ok", f is not None and f[0] == W.OPEN_OK, "got %r" % (f,))
        # a DGRAM on the session stream (allowed: docs/protocol.md §1.2); the answer comes as a
        # QUIC DATAGRAM frame carrying one DGRAM frame
        msg = os.urandom(1000)
        p.send(0, W.frame(W.DGRAM, 3, dest + msg))
        ok = await p.wait(lambda: any(d.endswith(msg) for d in p.datagrams), 10)
        d = next((d for d in p.datagrams if d.endswith(msg)), b"")
        report("quic-udp-echo", ok and d[:8] == struct.pack("!BBIH", W.DGRAM, 0, 3, len(dest) + 1000) and d[8:8 + len(dest)] == dest,
               "QUIC datagrams received: %d" % len(p.datagrams))

        # the same association over QUIC DATAGRAM frames (RFC 9221): one DGRAM frame each way
        msg2 = os.urandom(800)
        p._quic.send_datagram_frame(W.frame(W.DGRAM, 3, dest + msg2))
        p.transmit()
        ok = await p.wait(lambda: any(d.endswith(msg2) for d in p.datagrams), 10)
        d = next((d for d in p.datagrams if d.endswith(msg2)), b"")
        report("quic-udp-echo-datagram-frames", ok and d[:8] == struct.pack("!BBIH", W.DGRAM, 0, 3, len(dest) + 800),
               "QUIC datagrams received: %d" % len(p.datagrams))

        # a TCP flow on a QUIC stream of its own (docs/protocol.md §1.2): the OPEN frame, then
        # raw bytes and FIN; back: OPEN_OK, the echo, FIN
        payload2 = os.urandom(300 * 1024)
        fid, ok, got = await p.echo_flow(args.echo_port, payload2, 20)
        report("quic-flow-own-stream-echo", ok and got[:8] == W.frame(W.OPEN_OK, 1) and got[8:] == payload2 and fid in p.fins,
               "stream %d: %d bytes back, head %r, fin %s" % (fid, len(got), got[:8], fid in p.fins))
        # one to an overlay address (not allowed): OPEN_FAIL not-allowed (2), then FIN
        fid2 = p._quic.get_next_available_stream_id()
        p._quic.send_stream_data(fid2, W.open_tcp(1, "198.18.64.9", 80))
        p.transmit()
        ok = await p.wait(lambda: fid2 in p.fins or fid2 in p.resets, 10)
        got = bytes(p.data.get(fid2, b""))
        report("quic-flow-own-stream-refused", ok and got == W.frame(W.OPEN_FAIL, 1, b"\x02") and fid2 in p.fins,
               "got %r" % ((got, fid2 in p.fins, p.resets.get(fid2)),))

        # the session ends with GOAWAY shutdown and the stream's FIN; the front answers with its FIN
        p.send(0, W.goaway(W.GOAWAY_SHUTDOWN, "interop done"), end=True)
        ended = await p.wait(lambda: 0 in p.fins or p.terminated is not None, 10)
        report("quic-session-end", ended, "no FIN / close from the front")

    # 2. a wrong token: GOAWAY bad-token on the session stream
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
        _, f = await hello(args, p, token="not-the-token")
        ok = f is not None and f[0] == W.GOAWAY and W.parse_goaway(f[2])[0] == W.GOAWAY_BAD_TOKEN
        report("quic-bad-token-goaway", ok, "got %r" % (f,))

    # 3. another ALPN: the handshake fails (the front serves loft and h3 on UDP, nothing else).
    #    Refused means the front closed the connection with TLS alert no_application_protocol
    #    (CRYPTO_ERROR 0x100 + 120, RFC 9001 §4.8); any other end (a dead front's timeout, a
    #    reset) is not it.
    made = []

    def proto(*a, **k):
        made.append(Proto(*a, **k))
        return made[-1]
    try:
        async with connect("127.0.0.1", args.port, configuration=config(args, alpn=("h2",)), create_protocol=proto) as p:
            report("quic-other-alpn-refused", False, "handshake completed with alpn %r" % p._quic.tls.alpn_negotiated)
    except ConnectionError as e:
        t = made[-1].terminated if made else None
        code = t.error_code if t is not None else None
        report("quic-other-alpn-refused", code == 0x178,
               "connection ended with %r, error code %r (want 0x178, no_application_protocol)" % (e, code))
        print("  # other ALPN: %r, %r" % (e, t), file=sys.stderr)

    # 3b. stateless resets (RFC 9000 §10.3) for short-header packets to ids the front does not
    #     know, from a raw UDP socket: smaller than the packet (at most 43 bytes, at least 21),
    #     a short header, the same token for the same id; none for a packet of 21 bytes; at most
    #     about 100 a second
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.settimeout(1.0)
    cid = os.urandom(18)

    def short(n, c=None):
        return bytes([0x40 | (os.urandom(1)[0] & 0x3F)]) + (c or cid) + os.urandom(n - 19)

    def reply():
        try:
            return r.recvfrom(2048)[0]
        except socket.timeout:
            return None
    r.sendto(short(60), ("127.0.0.1", args.port))
    a = reply()
    r.sendto(short(200), ("127.0.0.1", args.port))
    b = reply()
    r.sendto(short(200, os.urandom(18)), ("127.0.0.1", args.port))
    c = reply()
    ok = (a is not None and b is not None and c is not None and 21 <= len(a) < 60 and len(b) <= 43
          and a[0] & 0xC0 == 0x40 and a[-16:] == b[-16:] and c[-16:] != a[-16:])
    report("quic-stateless-reset", ok, "replies %r" % ([x and (len(x), x[:1].hex(), x[-16:].hex()) for x in (a, b, c)],))
    r.sendto(short(21), ("127.0.0.1", args.port))
    r.settimeout(0.5)
    report("quic-no-reset-for-21-bytes", reply() is None, "a reset answered a 21-byte packet")
    time.sleep(1.2)   # the bucket refills
    for i in range(400):
        r.sendto(short(100, os.urandom(18)), ("127.0.0.1", args.port))
    r.settimeout(0.3)
    n = 0
    while reply() is not None:
        n += 1
    print("  # 400 short headers for unknown ids in a burst: %d resets" % n, file=sys.stderr)
    report("quic-resets-rate-limited", 50 <= n <= 150, "%d resets for 400 packets" % n)
    r.close()

    # 3c. an Initial with a token that looks like the front's Retry token but is forged: no
    #     connection (the front drops it; it counts quic_tokens_invalid)
    forged = config(args)
    forged.token = bytes([0xB6]) + os.urandom(90)
    q = QuicConnection(configuration=forged)
    q.connect(("127.0.0.1", args.port), now=time.monotonic())
    fs = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fs.settimeout(1.5)
    for d, _ in q.datagrams_to_send(now=time.monotonic()):
        fs.sendto(d, ("127.0.0.1", args.port))
    try:
        got = fs.recv(2048)
    except socket.timeout:
        got = None
    fs.close()
    report("quic-forged-token-dropped", got is None, "the front answered: %r" % (got and got[:8].hex(),))

    # 4. hostile: garbage datagrams, then an Initial flood from many source ports, then a
    #    legitimate session must still come up
    g = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(3000):
        n = [0, 1, 20, 1200, 1500, 65000][i % 6]   # 0: an empty datagram (ngtcp2 asserts on one)
        b = bytearray(os.urandom(n))
        if i % 3 == 0 and b:
            b[0] |= 0xC0   # long header bits: looks like an Initial to a first glance
        g.sendto(bytes(b), ("127.0.0.1", args.port))
    g.close()
    report("quic-alive-after-garbage", await legit_session(args, "after garbage"), "no STATUS after garbage")

    # 40 flows on streams of their own at once, 1 MiB each to the echo server, beside which a
    # new session must come up (the front's memory is checked by the shell test). aioquic
    # grants flow-control credit as bytes arrive, so this cannot hold the echoes back: a reader
    # that never reads is not simulated here.
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
        _, f = await hello(args, p)
        for i in range(40):
            sid = p._quic.get_next_available_stream_id()
            p._quic.send_stream_data(sid, W.open_tcp(1, "127.0.0.1", args.echo_port) + os.urandom(1 << 20))
        p.transmit()
        await asyncio.sleep(2)
        ok = await legit_session(args, "beside 40 busy flows")
        echoed = sum(len(v) for k, v in p.data.items() if k != 0)
        print("  # 40 flows: %d bytes echoed back so far" % echoed, file=sys.stderr)
        report("quic-alive-beside-40-busy-flows", ok and f is not None and f[0] == W.STATUS, "no STATUS beside 40 busy flows")

    socks = []
    t0 = time.monotonic()
    for i in range(args.flood):
        q = QuicConnection(configuration=config(args))
        q.connect(("127.0.0.1", args.port), now=time.monotonic())
        sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for d, _ in q.datagrams_to_send(now=time.monotonic()):
            sk.sendto(d, ("127.0.0.1", args.port))
        socks.append(sk)   # kept open and never read: handshakes that never finish
    print("  # %d Initials from %d source ports in %.0f ms" % (args.flood, args.flood, (time.monotonic() - t0) * 1000),
          file=sys.stderr)
    t0 = time.monotonic()
    ok = await legit_session(args, "after flood")
    print("  # a session after the flood came up in %.0f ms" % ((time.monotonic() - t0) * 1000), file=sys.stderr)
    report("quic-alive-after-initial-flood", ok, "no STATUS during the flood")
    # past the first 32 handshakes (quic-retry: auto) the flood got Retry packets, not
    # connections: a long header of type Retry, smaller than the Initial, no state on the front
    retries = 0
    for sk in socks:
        sk.setblocking(False)
        try:
            while True:
                d = sk.recv(2048)
                if d[0] & 0xF0 == 0xF0 and len(d) < 1200:
                    retries += 1
        except BlockingIOError:
            pass
    print("  # flood: %d of %d sources got a Retry" % (retries, args.flood), file=sys.stderr)
    report("quic-flood-answered-with-retry", retries >= args.flood - 64, "%d Retry packets for %d Initials" % (retries, args.flood))

    # still under the flood's handshakes (quic-retry: auto answers with Retry): a connection
    # goes through a Retry and receives a NEW_TOKEN; the next one carries that token in its
    # Initial and gets in without a Retry
    # the same from 200 source addresses (127.1.0.0/16 is this host's too): no address is past
    # its own share, the front is past its Retry threshold, every one gets a Retry
    many = []
    for i in range(200):
        q = QuicConnection(configuration=config(args))
        q.connect(("127.0.0.1", args.port), now=time.monotonic())
        sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sk.bind(("127.1.%d.%d" % (i // 250, 1 + i % 250), 0))
        for d, _ in q.datagrams_to_send(now=time.monotonic()):
            sk.sendto(d, ("127.0.0.1", args.port))
        many.append(sk)
    await asyncio.sleep(0.5)
    got = 0
    for sk in many:
        sk.setblocking(False)
        try:
            d = sk.recv(2048)
            if d[0] & 0xF0 == 0xF0 and len(d) < 1200:
                got += 1
        except BlockingIOError:
            pass
        sk.close()
    print("  # flood from 200 addresses: %d got a Retry" % got, file=sys.stderr)
    report("quic-flood-many-addresses-retry", got >= 190, "%d of 200 got a Retry" % got)
    for i in range(4):   # back to 32 handshakes (the sessions since took their slots' places)
        q = QuicConnection(configuration=config(args))
        q.connect(("127.0.0.1", args.port), now=time.monotonic())
        sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for d, _ in q.datagrams_to_send(now=time.monotonic()):
            sk.sendto(d, ("127.0.0.1", args.port))
        socks.append(sk)
    tokens = []
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto,
                       token_handler=tokens.append) as p:
        _, f = await hello(args, p)
        first_retried = p._quic._retry_count
        await p.wait(lambda: bool(tokens), 3)
    cfg = config(args)
    cfg.token = tokens[0] if tokens else b""
    second_retried = None
    async with connect("127.0.0.1", args.port, configuration=cfg, create_protocol=Proto) as p:
        _, f2 = await hello(args, p)
        second_retried = p._quic._retry_count
    report("quic-new-token-skips-retry", first_retried == 1 and bool(tokens) and second_retried == 0
           and f2 is not None and f2[0] == W.STATUS,
           "first connection retried %r, tokens %d, second retried %r" % (first_retried, len(tokens), second_retried))
    for sk in socks:
        sk.close()
    echo_task.cancel()


if __name__ == "__main__":
    ap = arguments()
    ap.add_argument("--flood", type=int, default=400)
    asyncio.run(asyncio.wait_for(main(ap.parse_args()), 120))
