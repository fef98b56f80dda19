#!/usr/bin/env python3
# Sessions whose flow streams never finish their OPEN (PyPI aioquic against loft-front's quic
# carrier): each round opens --sessions authenticated sessions, each with --streams flow
# streams that carry only the first 3 bytes of an OPEN frame, and holds them; the front must
# reset every such stream once its OPEN deadline (the front's connect-timeout) passes, and give
# back what they held when the sessions close. The front's RSS is read at each round's peak
# and after its sessions closed. Run by Tests/integration/quic-partial-open.test.sh.
#   quic_partial_open.py --port P --ca CA --token T --front-pid PID [--rounds 4] [--sessions 10]
#                        [--streams 1000] [--deadline 2]
# Prints "  # round N: ..." notes and the PASS/FAIL lines of quic-partial-open-deadline and
# quic-partial-open-memory-flat.
import asyncio
import os
import sys
import time

from aioquic.asyncio import connect

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as W  # noqa: E402
from quic_common import Proto, config, hello, report, rss_kb  # noqa: E402
import argparse  # noqa: E402


async def session(args, opened, hold, results):
    async with connect("127.0.0.1", args.port, configuration=config(args), create_protocol=Proto) as p:
        _, f = await hello(args, p)
        if f is None or f[0] != W.STATUS:
            results.append(("no STATUS", 0, 0))
            opened.release()
            return
        q = p._quic
        partial = W.open_tcp(1, "127.0.0.1", 9)[:3]
        sids = []
        for _ in range(args.streams):
            sid = q.get_next_available_stream_id()
            q.send_stream_data(sid, partial)
            sids.append(sid)
            if len(sids) % 100 == 0:
                p.transmit()
                await asyncio.sleep(0)
        p.transmit()
        opened.release()
        # The front resets each stream whose OPEN is still incomplete at its deadline.
        t0 = time.monotonic()
        done = await p.wait(lambda: all(s in p.resets for s in sids), args.deadline + 8)
        took = time.monotonic() - t0
        results.append(("ok" if done else "not reset", sum(1 for s in sids if s in p.resets), took))
        await hold.wait()


async def round_(args, n):
    opened = asyncio.Semaphore(0)
    hold = asyncio.Event()
    results = []
    tasks = [asyncio.ensure_future(session(args, opened, hold, results)) for _ in range(args.sessions)]
    for _ in range(args.sessions):
        await opened.acquire()
    await asyncio.sleep(0.5)
    peak = rss_kb(args.front_pid)
    while len(results) < args.sessions and not all(t.done() for t in tasks):
        await asyncio.sleep(0.1)
    hold.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(1.5)   # the front notices the closes
    after = rss_kb(args.front_pid)
    reset = sum(r[1] for r in results)
    slowest = max((r[2] for r in results), default=0)
    print("  # round %d: %d sessions x %d partial OPENs: front RSS %d kB at the peak, %d kB after close; "
          "%d streams reset by the front, the last %.1f s after it was opened" %
          (n, args.sessions, args.streams, peak, after, reset, slowest), flush=True)
    return after, reset, all(r[0] == "ok" for r in results) and len(results) == args.sessions


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--front-pid", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--deadline", type=float, default=2.0)
    args = ap.parse_args()
    start = rss_kb(args.front_pid)
    afters, all_reset = [], True
    for n in range(1, args.rounds + 1):
        after, reset, ok = await round_(args, n)
        afters.append(after)
        all_reset = all_reset and ok
    print("  # front RSS: %d kB before, after each round %s kB" % (start, afters), flush=True)
    report("quic-partial-open-deadline", all_reset,
           "not every partial OPEN was reset by the front within its deadline + 8 s")
    # Flat: the last round ends within 4 MiB of where the first ended.
    report("quic-partial-open-memory-flat", afters[-1] - afters[0] <= 4096,
           "front RSS after each round %s kB (round %d ends %d kB above round 1)" %
           (afters, args.rounds, afters[-1] - afters[0]))


asyncio.run(main())
