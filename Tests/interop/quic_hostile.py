#!/usr/bin/env python3
# Hostile QUIC clients (PyPI aioquic) against loft-front's quic carrier; one PASS/FAIL line per
# case. Run by Tests/integration/quic-hostile.test.sh against a front with keepalive 1s.
#   quic_hostile.py --port P --ca CA --token T --front-pid PID --source-port S --echo-port E
#                   --udp-echo-port U [--flows 200]
# - quic-unread-flows-memory-bounded: a client that opens --flows flows on streams of their own
#   to a source that sends 4 MiB on each, and never reads them (it never raises a stream's or
#   the connection's flow-control window: aioquic's window updates are switched off on that
#   connection): the front's RSS grows by at most 48 MiB (QuicLimits.sendBudget, 16 MiB per
#   connection, not 1 MiB per flow);
# - quic-max-streams-is-stream-limit: the front's max-streams (250) + 1 is the client's
#   initial_max_streams_bidi;
# - quic-legit-beside-unread-flows: meanwhile a new session comes up and echoes a flow;
# - quic-keepalive-expiry: a client that says HELLO and then nothing: the front ends the
#   connection after 2 keepalive intervals;
# - quic-datagram-bad-length: a QUIC DATAGRAM whose DGRAM frame claims more bytes than it has:
#   the session ends (protocol error), the front serves the next one;
# - quic-oversize-dgram-back-on-stream: a 60 000-byte UDP datagram, too big for any QUIC
#   DATAGRAM, sent as a DGRAM on the session stream to a UDP echo: the echo comes back whole,
#   on the session stream.
import asyncio
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as W  # noqa: E402
from quic_common import Proto, arguments, config, connect, hello, legit_session, report, rss_kb, serve_udp_echo, udp_echo  # noqa: E402


def source_server(port, per_conn, stop):
    """Accepts connections and writes `per_conn` bytes on each (as far as the peer takes)."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(512)
    ls.settimeout(0.2)
    chunk = os.urandom(65536)

    def feed(c):
        c.settimeout(15)
        sent = 0
        try:
            while sent < per_conn and not stop.is_set():
                sent += c.send(chunk[:min(65536, per_conn - sent)])
        except OSError:
            pass
        stop.wait(30)
        c.close()
    while not stop.is_set():
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        threading.Thread(target=feed, args=(c,), daemon=True).start()
    ls.close()


async def main(args):
    stop = threading.Event()
    threading.Thread(target=source_server, args=(args.source_port, 4 << 20, stop), daemon=True).start()
    u = udp_echo(args.udp_echo_port)
    echo_task = asyncio.ensure_future(serve_udp_echo(u))
    await asyncio.sleep(0.2)
    rss0 = rss_kb(args.front_pid)

    # 1. flows opened and never read
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
        _, f = await hello(args, p)
        up = f is not None and f[0] == W.STATUS
        q = p._quic
        # the front's max-streams (250 in the test's config) is QUIC's stream limit: 250 flow
        # streams besides the session stream
        report("quic-max-streams-is-stream-limit", q._remote_max_streams_bidi == 251,
               "initial_max_streams_bidi %d" % q._remote_max_streams_bidi)
        q._write_stream_limits = lambda *a, **k: None          # never MAX_STREAM_DATA
        q._write_connection_limits = lambda *a, **k: None      # never MAX_DATA (nor MAX_STREAMS)
        for i in range(args.flows):
            sid = q.get_next_available_stream_id()
            q.send_stream_data(sid, W.open_tcp(1, "127.0.0.1", args.source_port))
        p.transmit()
        peak = rss0
        for _ in range(8):
            await asyncio.sleep(0.5)
            peak = max(peak, rss_kb(args.front_pid))
        got = sum(len(v) for k, v in p.data.items() if k != 0)
        print("  # %d unread flows: front RSS %d kB -> peak %d kB; the client got %d bytes (its windows)"
              % (args.flows, rss0, peak, got), file=sys.stderr)
        report("quic-unread-flows-memory-bounded", up and peak - rss0 < 48 * 1024,
               "front RSS %d kB -> %d kB (allowed +48 MiB), session up %s" % (rss0, peak, up))

        # 2. a legitimate session beside them: HELLO/STATUS and a flow echoed
        ok = False
        try:
            async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p2:
                _, f2 = await hello(args, p2)
                payload = os.urandom(100 * 1024)
                _, done, back = await p2.echo_flow(args.echo_port, payload, 15)
                ok = f2 is not None and f2[0] == W.STATUS and done and back[8:] == payload
        except Exception as e:  # noqa: BLE001
            print("  # legit beside unread flows: %r" % e, file=sys.stderr)
        report("quic-legit-beside-unread-flows", ok, "no STATUS or no echo beside the unread flows")
    stop.set()

    # 3. HELLO, then silence: the front (keepalive 1s) ends the connection after 2 intervals
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
        _, f = await hello(args, p)
        t0 = time.monotonic()
        ended = await p.wait(lambda: p.terminated is not None or 0 in p.fins or 0 in p.resets, 8)
        print("  # silent client ended by the front after %.1f s" % (time.monotonic() - t0), file=sys.stderr)
        report("quic-keepalive-expiry", f is not None and f[0] == W.STATUS and ended, "still open after 8 s")

    # 4. a DATAGRAM whose DGRAM frame claims 1000 bytes and has 10: the session ends
    dest = W.addr("127.0.0.1", args.udp_echo_port)
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
        s, f = await hello(args, p)
        p.send(0, W.frame(W.OPEN, 3, bytes([17]) + dest))
        ok_open = await s.next(lambda t, sid, b: sid == 3 and t == W.OPEN_OK) is not None
        p._quic.send_datagram_frame(struct.pack("!BBIH", W.DGRAM, 0, 3, 1000) + dest + b"0123456789")
        p.transmit()
        g = await s.next(lambda t, sid, b: t == W.GOAWAY, 5)
        ended = g is not None or await p.wait(lambda: p.terminated is not None, 3)
        report("quic-datagram-bad-length", ok_open and ended,
               "open %s, GOAWAY %r, terminated %r" % (ok_open, g and g[2][:1], p.terminated))
    report("quic-alive-after-bad-datagram", await legit_session(args, "after bad datagram"), "no STATUS")

    # 5. a 60 000-byte datagram on the session stream, echoed back on the session stream
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
        s, f = await hello(args, p)
        p.send(0, W.frame(W.OPEN, 3, bytes([17]) + dest))
        ok_open = await s.next(lambda t, sid, b: sid == 3 and t == W.OPEN_OK) is not None
        big = os.urandom(60000)
        p.send(0, W.frame(W.DGRAM, 3, dest + big))
        d = await s.next(lambda t, sid, b: t == W.DGRAM and sid == 3 and b.endswith(big), 10)
        report("quic-oversize-dgram-back-on-stream", ok_open and d is not None,
               "open %s; QUIC datagrams received %d" % (ok_open, len(p.datagrams)))
    echo_task.cancel()


if __name__ == "__main__":
    ap = arguments()
    ap.add_argument("--front-pid", type=int, required=True)
    ap.add_argument("--source-port", type=int, required=True)
    ap.add_argument("--flows", type=int, default=200)
    asyncio.run(asyncio.wait_for(main(ap.parse_args()), 90))
