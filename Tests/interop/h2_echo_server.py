#!/usr/bin/env python3
# The PyPI `h2` library as the SERVER for loft's h2 carrier client: a TLS (ALPN h2) server that
# allows extended CONNECT, answers the session's CONNECT with 200 and echoes every DATA byte on
# that stream back as it came. Per connection it records the client's SETTINGS and connection
# window, the CONNECT's headers, the session bytes received, whether the client acknowledged
# our h2 PING, and how the stream and the connection ended.
#
#   h2_echo_server.py serve --port P --cert server.pem --key server.key --results FILE
#       one JSON line per finished connection is appended to FILE
#   h2_echo_server.py check --results FILE --token T --host HOST
#       prints "PASS name" / "FAIL name: why" lines about what loft's client did
import json
import os
import socket
import ssl
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as lw  # noqa: E402


def serve_one(sock, args, lock):
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions
    import h2.settings

    rec = {"settings": {}, "window_increments": 0, "headers": None, "received": "", "ping_ack": False,
           "end_stream": False, "reset": None, "goaway": None, "alpn": sock.selected_alpn_protocol(), "error": None}
    cfg = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    c = h2.connection.H2Connection(config=cfg)
    c.local_settings = h2.settings.Settings(client=False, initial_values={
        h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1, h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 4})
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    received = bytearray()
    session = None
    end = time.monotonic() + 20
    sock.settimeout(0.5)
    try:
        while time.monotonic() < end:
            try:
                b = sock.recv(65536)
            except (socket.timeout, TimeoutError):
                continue
            if not b:
                break
            for e in c.receive_data(b):
                if isinstance(e, h2.events.RemoteSettingsChanged):
                    for k, v in e.changed_settings.items():
                        rec["settings"][str(int(k))] = v.new_value
                elif isinstance(e, h2.events.WindowUpdated) and e.stream_id == 0:
                    rec["window_increments"] += e.delta
                elif isinstance(e, h2.events.RequestReceived):
                    rec["headers"] = [[k, v] for k, v in e.headers]
                    session = e.stream_id
                    c.send_headers(session, [(":status", "200")])
                    c.ping(b"h2interp")
                elif isinstance(e, h2.events.DataReceived):
                    c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                    if e.stream_id == session and e.data:
                        received += e.data
                        if c.state_machine.state != h2.connection.ConnectionState.CLOSED:
                            c.send_data(session, e.data)
                elif isinstance(e, h2.events.PingAckReceived):
                    rec["ping_ack"] = e.ping_data == b"h2interp"
                elif isinstance(e, h2.events.StreamEnded):
                    rec["end_stream"] = True
                    if c.state_machine.state != h2.connection.ConnectionState.CLOSED:
                        c.end_stream(e.stream_id)
                elif isinstance(e, h2.events.StreamReset):
                    rec["reset"] = int(e.error_code)
                elif isinstance(e, h2.events.ConnectionTerminated):
                    rec["goaway"] = int(e.error_code)
            out = c.data_to_send()
            if out:
                sock.sendall(out)
    except (h2.exceptions.ProtocolError, OSError, ssl.SSLError) as e:
        rec["error"] = repr(e)
    finally:
        try:
            sock.close()
        except OSError:
            pass
    rec["received"] = received.hex()
    with lock:
        with open(args.results, "a") as f:
            f.write(json.dumps(rec) + "\n")


def serve(args):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(args.cert, args.key)
    ctx.set_alpn_protocols(["h2"])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", args.port))
    srv.listen(16)
    lock = threading.Lock()
    while True:
        c, _ = srv.accept()
        try:
            c.settimeout(10)
            t = ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError):
            c.close()
            continue
        threading.Thread(target=serve_one, args=(t, args, lock), daemon=True).start()


def check(args):
    def emit(name, ok, why=""):
        print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why or "failed")), flush=True)

    names = ["alpn-h2", "client-settings", "connect-request-headers", "client-answers-h2-ping", "hello-in-data",
             "goaway-protocol-error-after-echo", "client-ends-stream-after-goaway", "redial-sends-hello"]
    try:
        recs = [json.loads(l) for l in open(args.results) if l.strip()]
    except OSError:
        recs = []
    if not recs:
        for n in names:
            emit(n, False, "no connection from loft reached the h2 server")
        return
    r = recs[0]
    emit("alpn-h2", r["alpn"] == "h2", "alpn %s" % r["alpn"])
    st = r["settings"]
    emit("client-settings", st.get("2") == 0 and st.get("4", 0) >= 1 << 20 and r["window_increments"] >= 1 << 20,
         "settings %s, connection window increments %d" % (st, r["window_increments"]))
    h = dict(r["headers"] or [])
    want = {":method": "CONNECT", ":protocol": "loft", ":scheme": "https", ":path": "/loft", ":authority": args.host}
    bad = ["%s=%r" % (k, h.get(k)) for k, v in want.items() if h.get(k) != v]
    emit("connect-request-headers", r["headers"] is not None and not bad, "; ".join(bad) or "no CONNECT")
    emit("client-answers-h2-ping", r["ping_ack"], "no PING ACK")
    frames = lw.Splitter().feed(bytes.fromhex(r["received"]))
    why = ""
    if not frames or frames[0][0] != lw.HELLO:
        why = "first frame %s" % (frames[0][:2] if frames else None,)
    else:
        v, _, token, name = lw.parse_hello(frames[0][3])
        if v != 1 or token != args.token or not name.startswith("loft/"):
            why = "HELLO version %d token %r name %r" % (v, token, name)
    emit("hello-in-data", not why, why)
    # The HELLO echoed back is a HELLO at the client: protocol error, GOAWAY reason 3.
    g = [f for f in frames if f[0] == lw.GOAWAY]
    emit("goaway-protocol-error-after-echo", len(g) == 1 and lw.parse_goaway(g[0][3])[0] == lw.GOAWAY_PROTOCOL_ERROR,
         "frames %s" % [lw.NAMES.get(f[0], f[0]) for f in frames])
    emit("client-ends-stream-after-goaway", r["end_stream"] or r["reset"] is not None,
         "end_stream %s reset %s goaway %s error %s" % (r["end_stream"], r["reset"], r["goaway"], r["error"]))
    if len(recs) < 2:
        emit("redial-sends-hello", False, "only %d connection(s) reached the server" % len(recs))
    else:
        fr = lw.Splitter().feed(bytes.fromhex(recs[1]["received"]))
        emit("redial-sends-hello", bool(fr) and fr[0][0] == lw.HELLO, "second connection's first frame %s" % (fr[:1],))


def main():
    a = lw.echo_server_arguments()
    serve(a) if a.cmd == "serve" else check(a)


if __name__ == "__main__":
    main()
