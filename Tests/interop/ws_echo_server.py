#!/usr/bin/env python3
# The PyPI `websockets` library as the SERVER for loft's ws carrier client: a TLS echo server
# (every binary message is sent back as it came) that records, per connection, the upgrade
# request, the messages as websockets delivered them, the raw bytes the client sent (after
# TLS), and the close code the client sent.
#
#   ws_echo_server.py serve --port P --cert server.pem --key server.key --results FILE
#       one JSON line per finished connection is appended to FILE
#   ws_echo_server.py check --results FILE --token T --host HOST
#       prints "PASS name" / "FAIL name: why" lines about what loft's client did
import asyncio
import base64
import binascii
import json
import os
import ssl
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as lw  # noqa: E402


# --- serve ------------------------------------------------------------------------------------

def make_tap():
    from websockets.asyncio.server import ServerConnection

    class Tap(ServerConnection):
        """Keeps a copy of every byte received from the client, as TLS delivered them."""

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.raw = bytearray()

        def data_received(self, data):
            self.raw += data
            super().data_received(data)

    return Tap


async def serve(args):
    from websockets.asyncio.server import serve as ws_serve
    from websockets.exceptions import ConnectionClosed

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(args.cert, args.key)
    counter = [0]

    def process_request(connection, request):
        connection.request_record = {"path": request.path, "headers": [[k, v] for k, v in request.headers.raw_items()]}
        return None

    async def handler(ws):
        counter[0] += 1
        n = counter[0]
        messages = []
        # An RFC 6455 Ping first: loft's carrier must answer with a Pong carrying the same bytes
        # (websockets matches the payload). The HELLO that is already on its way waits in
        # websockets' buffer.
        pong = None
        try:
            waiter = await ws.ping(b"loft-interop-%d" % n)
            pong = await asyncio.wait_for(waiter, 5)
        except (asyncio.TimeoutError, ConnectionClosed) as e:
            pong = repr(e)
        try:
            async for msg in ws:
                if isinstance(msg, str):
                    messages.append({"type": "text", "hex": msg.encode().hex()})
                    continue
                messages.append({"type": "binary", "hex": msg.hex()})
                await ws.send(msg)
        except ConnectionClosed:
            pass
        try:
            await asyncio.wait_for(ws.wait_closed(), 5)
        except asyncio.TimeoutError:
            pass
        rcvd = ws.protocol.close_rcvd
        sslobj = ws.transport.get_extra_info("ssl_object") if ws.transport else None
        rec = {"n": n, "pong": pong if isinstance(pong, str) else "ok", "request": getattr(ws, "request_record", None), "messages": messages,
               "close_rcvd": rcvd.code if rcvd is not None else None,
               "tls": sslobj.version() if sslobj else None,
               "raw": bytes(ws.raw).hex()}
        with open(args.results, "a") as f:
            f.write(json.dumps(rec) + "\n")

    async with ws_serve(handler, "127.0.0.1", args.port, ssl=ctx, process_request=process_request,
                        create_connection=make_tap(), ping_interval=None, max_size=None):
        print("listening 127.0.0.1:%d" % args.port, flush=True)
        await asyncio.Future()


# --- check ------------------------------------------------------------------------------------

def raw_frames(raw):
    """Parses the client's bytes on our own (RFC 6455 5.2): the HTTP request, then frames.
    Returns (frames, messages, error): frames as dicts; messages reassembled and unmasked."""
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        return [], [], "no end of the HTTP request in %d bytes" % len(raw)
    p = end + 4
    frames, messages, partial = [], [], None
    while p < len(raw):
        if len(raw) - p < 2:
            return frames, messages, "%d stray bytes at the end" % (len(raw) - p)
        b0, b1 = raw[p], raw[p + 1]
        fin, rsv, op, masked, ln = b0 >> 7, (b0 >> 4) & 7, b0 & 15, b1 >> 7, b1 & 127
        q = p + 2
        if ln == 126:
            ln = struct.unpack_from("!H", raw, q)[0]; q += 2
        elif ln == 127:
            ln = struct.unpack_from("!Q", raw, q)[0]; q += 8
        key = raw[q:q + 4] if masked else b"\0\0\0\0"
        if masked:
            q += 4
        body = bytes(raw[q + i] ^ key[i % 4] for i in range(min(ln, len(raw) - q)))
        if len(body) < ln:
            return frames, messages, "frame cut short"
        frames.append({"fin": fin, "rsv": rsv, "opcode": op, "masked": bool(masked), "length": ln})
        if op in (1, 2):
            partial = (op, bytearray(body))
        elif op == 0 and partial is not None:
            partial[1].extend(body)
        if op in (0, 1, 2) and fin and partial is not None:
            messages.append({"type": "binary" if partial[0] == 2 else "text", "hex": bytes(partial[1]).hex()})
            partial = None
        p = q + ln
    return frames, messages, None


def check(args):
    recs = []
    with open(args.results) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    recs.sort(key=lambda r: r["n"])

    def emit(name, ok, why=""):
        print("PASS %s" % name if ok else "FAIL %s: %s" % (name, why or "failed"), flush=True)

    if not recs:
        for n in ("upgrade-request-headers", "client-answers-ws-ping", "hello-binary-message", "client-frames-masked",
                  "goaway-protocol-error-after-echo", "client-close-after-goaway", "redial-sends-hello"):
            emit(n, False, "no connection from loft reached the websockets server")
        return
    r = recs[0]
    req = r["request"] or {"path": None, "headers": []}
    h = {}
    for k, v in req["headers"]:
        h.setdefault(k.lower(), []).append(v)

    def one(k):
        v = h.get(k, [])
        return v[0] if len(v) == 1 else None
    problems = []
    if req["path"] != "/loft":
        problems.append("path %r" % req["path"])
    if (one("upgrade") or "").lower() != "websocket":
        problems.append("Upgrade %r" % h.get("upgrade"))
    if "upgrade" not in [t.strip().lower() for t in (one("connection") or "").split(",")]:
        problems.append("Connection %r" % h.get("connection"))
    if one("sec-websocket-version") != "13":
        problems.append("Sec-WebSocket-Version %r" % h.get("sec-websocket-version"))
    try:
        if len(base64.b64decode(one("sec-websocket-key") or "", validate=True)) != 16:
            problems.append("Sec-WebSocket-Key not 16 bytes")
    except binascii.Error:
        problems.append("Sec-WebSocket-Key %r not base64" % h.get("sec-websocket-key"))
    if one("host") != args.host:
        problems.append("Host %r, want %r" % (h.get("host"), args.host))
    if "sec-websocket-extensions" in h or "sec-websocket-protocol" in h:
        problems.append("offers extensions/subprotocols %r %r" % (h.get("sec-websocket-extensions"), h.get("sec-websocket-protocol")))
    if r["tls"] != "TLSv1.3":
        problems.append("TLS %r" % r["tls"])
    emit("upgrade-request-headers", not problems, "; ".join(problems))

    emit("client-answers-ws-ping", r.get("pong") == "ok", "no Pong for our Ping: %s" % r.get("pong"))

    msgs = r["messages"]

    def frames_of(m):
        sp = lw.Splitter()
        fr = sp.feed(bytes.fromhex(m["hex"]))
        return fr, len(sp.buf)

    # The first message: binary, exactly one loft HELLO (version 1, token as configured).
    why = ""
    if not msgs:
        why = "no message"
    elif msgs[0]["type"] != "binary":
        why = "first message is %s" % msgs[0]["type"]
    else:
        fr, left = frames_of(msgs[0])
        if not fr or fr[0][0] != lw.HELLO:
            why = "first frame %s" % ((fr[0][0], fr[0][1], fr[0][2]) if fr else "none (%d bytes)" % left)
        else:
            t, fl, sid, body = fr[0]
            try:
                v, caps, token, name = lw.parse_hello(body)
                if fl != 0 or sid != 0 or v != 1 or token != args.token:
                    why = "flags %d stream %d version %d token %r" % (fl, sid, v, token)
                else:
                    print("  # HELLO version %d caps %d token %r client %r; %d frames, %d bytes left in message 1"
                          % (v, caps, token, name, len(fr), left), file=sys.stderr)
            except Exception as e:
                why = "HELLO does not decode: %s" % e
    emit("hello-binary-message", not why, why)

    frames, rmsgs, err = raw_frames(bytes.fromhex(r["raw"]))
    unmasked = [f for f in frames if not f["masked"]]
    ok = err is None and frames and not unmasked and rmsgs == msgs and all(f["rsv"] == 0 for f in frames)
    emit("client-frames-masked", ok, "raw parse error %s, %d frames, %d unmasked, messages agree %s"
         % (err, len(frames), len(unmasked), rmsgs == msgs))
    print("  # client frames: %s" % [(f["opcode"], f["length"], f["masked"]) for f in frames], file=sys.stderr)

    # The echoed HELLO is a protocol error at loft's client: the next message is its GOAWAY
    # protocol-error, then its Close.
    why = ""
    if len(msgs) < 2:
        why = "only %d messages" % len(msgs)
    elif msgs[1]["type"] != "binary":
        why = "second message is %s" % msgs[1]["type"]
    else:
        fr, left = frames_of(msgs[1])
        if not fr or fr[0][0] != lw.GOAWAY:
            why = "second message starts with %s" % (hex(fr[0][0]) if fr else "no frame")
        else:
            reason, text = lw.parse_goaway(fr[0][3])
            print("  # GOAWAY reason %d %r" % (reason, text), file=sys.stderr)
            if reason != lw.GOAWAY_PROTOCOL_ERROR or fr[0][1] != 0 or fr[0][2] != 0:
                why = "GOAWAY reason %d text %r" % (reason, text)
    emit("goaway-protocol-error-after-echo", not why, why)
    closes = [f for f in frames if f["opcode"] == 8]
    emit("client-close-after-goaway", len(msgs) == 2 and r["close_rcvd"] == 1000 and len(closes) == 1
         and frames[-1]["opcode"] == 8,
         "%d messages, close code %r, %d Close frames" % (len(msgs), r["close_rcvd"], len(closes)))

    # The redial: a later connection starts over with HELLO (no STATUS was ever received).
    if len(recs) < 2:
        emit("redial-sends-hello", False, "only %d connection(s) reached the server" % len(recs))
    else:
        m2 = recs[1]["messages"]
        fr = frames_of(m2[0])[0] if m2 and m2[0]["type"] == "binary" else []
        emit("redial-sends-hello", bool(fr) and fr[0][0] == lw.HELLO,
             "second connection's first frame %s" % (hex(fr[0][0]) if fr else m2[:1]))


def main():
    a = lw.echo_server_arguments()
    if a.cmd == "serve":
        asyncio.run(serve(a))
    else:
        check(a)


if __name__ == "__main__":
    main()
