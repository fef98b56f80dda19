#!/usr/bin/env python3
# The PyPI `h2` library as the CLIENT of loft-front's h2 carrier: HTTP/2 over TLS 1.3 with ALPN
# h2, the session on an extended CONNECT (RFC 8441, :protocol loft), loft's frames encoded here
# from docs/protocol.md (loftwire.py). Then hostile HTTP/2 written byte by byte: absurd frame
# lengths, an HPACK bomb, SETTINGS and PING floods, many streams, a session never read; after
# each the front must still serve a legitimate session.
#
#   h2_client.py --port P --ca CA --token T --echo-port E [--pool4 NET]
#
# Prints one "PASS name" or "FAIL name: why" line per check on stdout, notes on stderr. Every
# wait is bounded; the whole run by --deadline.
import argparse
import hashlib
import ipaddress
import os
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loftwire as lw  # noqa: E402
from loftwire import emit, note  # noqa: E402

WAIT = 10.0


def tls_socket(args, alpn=("h2",)):
    ctx = ssl.create_default_context(cafile=args.ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols(list(alpn))
    raw = socket.create_connection(("127.0.0.1", args.port), timeout=WAIT)
    s = ctx.wrap_socket(raw, server_hostname="front.test")
    s.settimeout(WAIT)
    return s


class Client:
    """One h2 connection to the front (the h2 library does the framing)."""

    def __init__(self, args):
        self.args = args
        self.sock = tls_socket(args)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.c = h2.connection.H2Connection(config=cfg)
        self.c.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 4 << 20, h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self.c.initiate_connection()
        self.c.increment_flow_control_window(16 << 20)
        self.flush()
        self.events = []
        self.remote_settings = {}
        self.data = {}          # stream -> bytearray
        self.ended = set()
        self.reset = {}
        self.responses = {}     # stream -> headers dict
        self.goaway = None
        self.pings = []
        self.closed = False
        self.split = lw.Splitter()
        self.frames = []        # loft frames from the session stream
        self.session = None

    def flush(self):
        out = self.c.data_to_send()
        if out:
            self.sock.sendall(out)

    def pump(self, timeout=0.2):
        """Reads what arrives within timeout; False once the connection is closed."""
        if self.closed:
            return False
        self.sock.settimeout(timeout)
        try:
            b = self.sock.recv(1 << 20)
        except (socket.timeout, TimeoutError):
            return True
        except (ssl.SSLError, OSError):
            self.closed = True
            return False
        if not b:
            self.closed = True
            return False
        try:
            events = self.c.receive_data(b)
        except h2.exceptions.ProtocolError as e:
            note("h2 library refused the front's bytes:", e)
            self.closed = True
            return False
        for e in events:
            self.events.append(e)
            if isinstance(e, h2.events.RemoteSettingsChanged):
                for k, v in e.changed_settings.items():
                    self.remote_settings[int(k)] = v.new_value
            elif isinstance(e, h2.events.ResponseReceived):
                self.responses[e.stream_id] = dict(e.headers)
            elif isinstance(e, h2.events.DataReceived):
                self.data.setdefault(e.stream_id, bytearray()).extend(e.data)
                self.c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                if e.stream_id == self.session:
                    for f in self.split.feed(e.data):
                        if f[0] == lw.PING:
                            self.c.send_data(self.session, lw.frame(lw.PONG, 0, f[3]))
                        else:
                            self.frames.append(f)
            elif isinstance(e, h2.events.StreamEnded):
                self.ended.add(e.stream_id)
            elif isinstance(e, h2.events.StreamReset):
                self.reset[e.stream_id] = e.error_code
            elif isinstance(e, h2.events.PingAckReceived):
                self.pings.append(e.ping_data)
            elif isinstance(e, h2.events.ConnectionTerminated):
                self.goaway = e.error_code
        try:
            self.flush()
        except OSError:
            self.closed = True
        return True

    def until(self, cond, timeout=WAIT):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return True
            if not self.pump() and not cond():
                return cond()
        return cond()

    def request(self, headers, end_stream=False):
        sid = self.c.get_next_available_stream_id()
        self.c.send_headers(sid, headers, end_stream=end_stream)
        self.flush()
        return sid

    def connect(self, path="/loft", protocol="loft"):
        self.until(lambda: 8 in self.remote_settings)
        return self.request([(":method", "CONNECT"), (":protocol", protocol), (":scheme", "https"),
                             (":path", path), (":authority", "front.test:%d" % self.args.port)])

    def open_session(self):
        sid = self.connect()
        if not self.until(lambda: sid in self.responses or sid in self.reset or self.closed):
            raise RuntimeError("no response to the CONNECT")
        if self.responses.get(sid, {}).get(":status") != "200":
            raise RuntimeError("CONNECT answered %s" % self.responses.get(sid))
        self.session = sid
        return sid

    def send(self, b):
        """Session bytes, within the h2 windows (waits for WINDOW_UPDATE)."""
        view = memoryview(b)
        end = time.monotonic() + 60
        while view:
            n = min(len(view), self.c.local_flow_control_window(self.session), self.c.max_outbound_frame_size)
            if n <= 0:
                if time.monotonic() > end or not self.pump(0.05):
                    raise RuntimeError("send window stayed closed")
                continue
            self.c.send_data(self.session, bytes(view[:n]))
            view = view[n:]
            self.flush()

    def next_frame(self, timeout=WAIT):
        self.until(lambda: self.frames or self.closed, timeout)
        return self.frames.pop(0) if self.frames else None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def legit_session(args):
    """HELLO → STATUS on a new connection; the STATUS dict, or raises."""
    c = Client(args)
    try:
        c.open_session()
        c.send(lw.hello(args.token, "h2-interop"))
        f = c.next_frame()
        if not f or f[0] != lw.STATUS:
            raise RuntimeError("no STATUS: %s" % (f,))
        return lw.parse_status(f[3])
    finally:
        c.close()


def alive(name, args):
    try:
        st = legit_session(args)
        return emit(name, st["ipv4"] in ipaddress.ip_network(args.pool4), "ipv4 %s" % st["ipv4"])
    except Exception as e:  # noqa: BLE001
        return emit(name, False, repr(e))


def raw_conn(args):
    """TLS with ALPN h2 and the client preface plus an empty SETTINGS, nothing else."""
    s = tls_socket(args)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2frame(4, 0, 0, b""))
    return s


def h2frame(ftype, flags, stream, payload, length=None):
    n = len(payload) if length is None else length
    return struct.pack("!I", n)[1:] + bytes([ftype, flags]) + struct.pack("!I", stream) + payload


def received(s, timeout):
    """The socket's bytes as they come, for at most `timeout` seconds; then None once if the
    connection ended (EOF or an error)."""
    end = time.monotonic() + timeout
    s.settimeout(0.5)
    while time.monotonic() < end:
        try:
            b = s.recv(65536)
        except (socket.timeout, TimeoutError):
            continue
        except (ssl.SSLError, OSError):
            b = b""
        if not b:
            yield None
            return
        yield b


def read_goaway(s, timeout=5.0):
    """Reads frames until a GOAWAY (its error code) or the end; None if neither came."""
    buf = bytearray()
    for b in received(s, timeout):
        if b is None:
            return "closed"
        buf += b
        while len(buf) >= 9:
            n = int.from_bytes(buf[0:3], "big")
            if len(buf) < 9 + n:
                break
            t = buf[3]
            if t == 7:
                return struct.unpack_from("!I", buf, 9 + 4)[0]
            del buf[:9 + n]
    return None


def hpack_bomb():
    """One 4000-byte header added to the dynamic table, then referenced 4000 times (16 MB decoded)."""
    name, value = b"x-bomb", b"v" * 4000
    block = bytes([0x40, len(name)]) + name
    # value length 4000 as an HPACK integer with a 7-bit prefix
    n = len(value) - 127
    enc = bytes([0x7f])
    while n >= 128:
        enc += bytes([n % 128 + 128])
        n //= 128
    enc += bytes([n])
    block += enc + value
    pseudo = b"\x82\x87\x84"   # :method GET, :scheme https, :path /
    return pseudo + block + bytes([0x80 | 62]) * 4000


def main(args):
    deadline = time.monotonic() + args.deadline

    # --- the session over the h2 library ---
    c = Client(args)
    tls = c.sock.version()
    emit("h2-alpn-tls13", c.sock.selected_alpn_protocol() == "h2" and tls == "TLSv1.3",
         "alpn %s, %s" % (c.sock.selected_alpn_protocol(), tls))
    c.until(lambda: 8 in c.remote_settings)
    rs = c.remote_settings
    emit("settings-enable-connect-protocol", rs.get(8) == 1, "remote settings %s" % rs)
    emit("settings-windows-above-64k", rs.get(4, 65535) >= 1 << 20 and rs.get(5, 16384) >= 65536,
         "INITIAL_WINDOW_SIZE %s MAX_FRAME_SIZE %s" % (rs.get(4), rs.get(5)))
    note("front SETTINGS:", rs)
    try:
        sid = c.open_session()
        emit("extended-connect-200", True)
    except Exception as e:  # noqa: BLE001
        emit("extended-connect-200", False, repr(e))
        return
    c.send(lw.hello(args.token, "h2-interop"))
    f = c.next_frame()
    st = None
    try:
        st = lw.parse_status(f[3]) if f and f[0] == lw.STATUS else None
    except ValueError as e:
        note("bad STATUS", e)
    emit("hello-status", st is not None and st["ipv4"] in ipaddress.ip_network(args.pool4), "got %s" % (f,))
    # the connection window the front grants us beyond the 65535 default
    emit("front-connection-window", c.c.remote_flow_control_window(sid) > 1 << 20,
         "send window %d" % c.c.remote_flow_control_window(sid))
    c.c.ping(b"loftping")
    c.flush()
    emit("h2-ping-ack", c.until(lambda: b"loftping" in c.pings), "no PING ACK")
    c.send(lw.ping(0x1122334455667788))
    got = c.next_frame()
    emit("session-ping-pong", got is not None and got[0] == lw.PONG and got[3] == struct.pack("!Q", 0x1122334455667788),
         "got %s" % (got,))

    # a TCP stream with 1 MiB echoed, under the session's credit
    c.send(lw.open_tcp(1, "127.0.0.1", args.echo_port))
    f = c.next_frame()
    ok = f is not None and f[0] == lw.OPEN_OK
    emit("open-tcp-ok", ok, "got %s" % (f,))
    payload = os.urandom(1 << 20)
    sent = 0
    credit = lw.INITIAL_WINDOW
    echoed = bytearray()
    end = time.monotonic() + 60
    while len(echoed) < len(payload) and time.monotonic() < end and ok:
        while sent < len(payload) and credit > 0:
            n = min(65535, credit, len(payload) - sent)
            c.send(lw.data(1, payload[sent:sent + n]))
            sent += n
            credit -= n
        f = c.next_frame(2)
        if f is None:
            continue
        if f[0] == lw.CREDIT:
            credit += struct.unpack("!I", f[3])[0]
        elif f[0] == lw.DATA:
            echoed += f[3]
            if len(echoed) % (128 << 10) < len(f[3]):
                c.send(lw.credit(1, 128 << 10))
    emit("tcp-echo-1mib", hashlib.sha256(echoed).digest() == hashlib.sha256(payload).digest(),
         "echoed %d of %d bytes" % (len(echoed), len(payload)))
    c.send(lw.fin(1))
    f = c.next_frame()
    while f is not None and f[0] in (lw.CREDIT, lw.DATA):
        f = c.next_frame()
    emit("fin-answered-with-fin", f is not None and f[0] == lw.FIN, "got %s" % (f,))

    # END_STREAM from us ends the carrier: the front answers with its own END_STREAM
    c.c.end_stream(sid)
    c.flush()
    emit("end-stream-answered", c.until(lambda: sid in c.ended or sid in c.reset or c.closed),
         "no END_STREAM from the front")
    c.close()

    # --- refusals on one connection ---
    c = Client(args)
    c.until(lambda: 8 in c.remote_settings)
    s404 = c.request([(":method", "GET"), (":scheme", "https"), (":path", "/other"), (":authority", "front.test")], True)
    s405 = c.request([(":method", "GET"), (":scheme", "https"), (":path", "/loft"), (":authority", "front.test")], True)
    s400 = c.connect(protocol="websocket")
    c.until(lambda: all(s in c.responses or s in c.reset for s in (s404, s405, s400)))
    st = [c.responses.get(s, {}).get(":status") for s in (s404, s405, s400)]
    emit("wrong-path-404", st[0] == "404", "got %s" % st[0])
    emit("get-on-session-path-405", st[1] == "405" and c.responses[s405].get("allow") == "CONNECT", "got %s" % c.responses.get(s405))
    emit("other-protocol-400", st[2] == "400", "got %s" % st[2])
    s1 = c.open_session()
    s2 = c.connect()
    c.until(lambda: s2 in c.responses or s2 in c.reset)
    emit("second-session-429", c.responses.get(s2, {}).get(":status") == "429", "got %s" % c.responses.get(s2))
    c.send(lw.hello("not-the-token"))
    f = c.next_frame()
    reason = lw.parse_goaway(f[3])[0] if f and f[0] == lw.GOAWAY else None
    emit("bad-token-goaway", reason == lw.GOAWAY_BAD_TOKEN, "got %s" % (f,))
    emit("bad-token-stream-ends", c.until(lambda: s1 in c.ended or s1 in c.reset or c.closed), "the stream stayed open")
    c.close()
    alive("alive-after-refusals", args)

    # --- hostile input, raw bytes ---
    # want: the GOAWAY error code the case claims (RFC 9113 §7), or "any" (a GOAWAY of any code
    # or a close: garbage need not parse as a frame at all).
    PROTOCOL_ERROR, FRAME_SIZE_ERROR = 0x1, 0x6

    def hostile(name, payload, want=None):
        s = raw_conn(args)
        try:
            s.sendall(payload)
        except OSError:
            pass
        g = read_goaway(s)
        s.close()
        if want == "any":
            emit(name, g is not None, "no GOAWAY and no close")
        elif want is not None:
            emit(name, g == want, "got %r, want GOAWAY with error code %#x" % (g, want))
        note(name, "->", g)

    # a DATA frame claiming 16 MiB - 1 bytes (far above our MAX_FRAME_SIZE): FRAME_SIZE_ERROR
    hostile("absurd-frame-length", h2frame(0, 0, 1, b"", length=(1 << 24) - 1), want=FRAME_SIZE_ERROR)
    alive("alive-after-absurd-length", args)
    # HEADERS decoding to 16 MB: the stream is refused, the connection stays bounded
    s = raw_conn(args)
    bomb = hpack_bomb()
    s.sendall(h2frame(1, 0x5, 1, bomb))
    g = read_goaway(s, 2.0)
    s.close()
    note("hpack bomb (%d bytes encoded) ->" % len(bomb), g)
    alive("alive-after-hpack-bomb", args)
    # floods: 20000 SETTINGS and 20000 PINGs, without reading the ACKs
    hostile("settings-flood", h2frame(4, 0, 0, b"") * 20000)
    alive("alive-after-settings-flood", args)
    hostile("ping-flood", h2frame(6, 0, 0, b"12345678") * 20000)
    alive("alive-after-ping-flood", args)
    # many streams: 200 requests at once, far above MAX_CONCURRENT_STREAMS
    s = raw_conn(args)
    reqs = b"".join(h2frame(1, 0x5, 1 + 2 * i, b"\x82\x87\x84\x41\x0afront.test") for i in range(200))
    s.sendall(reqs)
    g = read_goaway(s, 3.0)
    s.close()
    note("200 streams ->", g)
    alive("alive-after-many-streams", args)
    # 2000 refused requests (GET /other) pipelined in one write: at most 16 are answered
    # (docs/front.md), then GOAWAY; nothing more is answered, whatever the front's reads
    s = raw_conn(args)
    s.sendall(b"".join(h2frame(1, 0x5, 1 + 2 * i, b"\x82\x87\x04\x06/other\x41\x0afront.test") for i in range(2000)))
    kinds, buf = {}, bytearray()
    for b in received(s, 5.0):
        if b is None:
            break
        buf += b
    s.close()
    while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[0:3], "big"):
        kinds[buf[3]] = kinds.get(buf[3], 0) + 1
        del buf[:9 + int.from_bytes(buf[0:3], "big")]
    note("2000 pipelined refused requests -> %d responses, %d GOAWAY, %d RST_STREAM"
         % (kinds.get(1, 0), kinds.get(7, 0), kinds.get(3, 0)))
    emit("pipelined-refusals-capped", 1 <= kinds.get(1, 0) <= 16 and kinds.get(7, 0) >= 1,
         "%d responses (at most 16), %d GOAWAY" % (kinds.get(1, 0), kinds.get(7, 0)))
    # malformed: DATA on stream 0, a PING of 7 bytes, garbage instead of a frame
    hostile("data-on-stream-0", h2frame(0, 0, 0, b"xx"), want=PROTOCOL_ERROR)
    hostile("ping-wrong-length", h2frame(6, 0, 0, b"1234567"), want=FRAME_SIZE_ERROR)
    hostile("garbage-frames", os.urandom(4096), want="any")
    alive("alive-after-malformed", args)
    # a session never read: the front fills our windows and stops
    c = Client(args)
    c.open_session()
    c.send(lw.hello(args.token, "never-reads"))
    c.send(lw.open_tcp(1, "127.0.0.1", args.echo_port))
    c.send(lw.data(1, os.urandom(60000)) * 4)
    time.sleep(1.0)
    alive("alive-beside-unread-session", args)
    c.close()
    note("left %.0f s of the deadline" % (deadline - time.monotonic()))


def hold_until_shutdown(args):
    """A session that stays open until the front shuts down (SIGTERM): then the session's GOAWAY
    shutdown, END_STREAM and HTTP/2 GOAWAY NO_ERROR must arrive, in that order of meaning."""
    c = Client(args)
    c.open_session()
    c.send(lw.hello(args.token, "shutdown-watch"))
    f = c.next_frame()
    if not f or f[0] != lw.STATUS:
        emit("shutdown-session-goaway", False, "no STATUS: %s" % (f,))
        return
    open(args.hold_until_shutdown, "w").write("ready\n")
    c.until(lambda: c.closed or c.goaway is not None and (c.session in c.ended or c.session in c.reset), 30)
    g = [lw.parse_goaway(f[3]) for f in c.frames if f[0] == lw.GOAWAY]
    emit("shutdown-session-goaway", len(g) == 1 and g[0][0] == lw.GOAWAY_SHUTDOWN, "session frames %s" % c.frames)
    emit("shutdown-end-stream", c.session in c.ended, "ended %s reset %s" % (c.ended, c.reset))
    emit("shutdown-h2-goaway", c.goaway == 0, "h2 GOAWAY %s" % c.goaway)
    c.close()


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--echo-port", type=int, required=True)
    p.add_argument("--pool4", default="198.18.64.0/24")
    p.add_argument("--deadline", type=float, default=180)
    p.add_argument("--hold-until-shutdown", metavar="READY_FILE")
    return p.parse_args()


if __name__ == "__main__":
    a = parse_args()
    hold_until_shutdown(a) if a.hold_until_shutdown else main(a)
