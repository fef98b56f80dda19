#!/usr/bin/env python3
"""Writes the committed seed corpora, fuzz/corpus/<target>/: small valid inputs of each format
(packets, frames, handshakes, configs from the docs, state files) for the fuzzer to start from.
Run again after changing it: `python3 fuzz/seeds.py` (it replaces the seeds it writes)."""

import hashlib
import os
import re
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
seeds = {}


def seed(target, data):
    if isinstance(data, str):
        data = data.encode()
    seeds.setdefault(target, []).append(bytes(data))


# --- IP packets ------------------------------------------------------------------------------

def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


V4S, V4D = bytes([198, 18, 0, 2]), bytes([198, 18, 1, 2])
V6S = bytes.fromhex("fd000018000000000000000000000002")
V6D = bytes.fromhex("fd000001000000000000000000000002")


def ipv4(proto, payload, flags=0x40, frag=0):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, (flags << 8) | frag, 64, proto, 0, V4S, V4D)
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ipv6(proto, payload, ext=b""):
    first = proto if not ext else ext[0]
    body = (ext[1:] if ext else b"") + payload
    return struct.pack("!IHBB16s16s", 0x60000000, len(body), first, 64, V6S, V6D) + body


def pseudo(src, dst, proto, seg):
    if len(src) == 4:
        return src + dst + struct.pack("!BBH", 0, proto, len(seg))
    return src + dst + struct.pack("!IxxxB", len(seg), proto)


def tcp(src, dst, flags, seq=1000, ack=0, payload=b"", options=b""):
    off = (20 + len(options)) // 4
    seg = struct.pack("!HHIIBBHHH", 40000, 80, seq, ack, off << 4, flags, 65535, 0, 0) + options + payload
    c = csum(pseudo(src, dst, 6, seg) + seg)
    return seg[:16] + struct.pack("!H", c) + seg[18:]


def udp(src, dst, payload):
    seg = struct.pack("!HHHH", 40000, 53, 8 + len(payload), 0) + payload
    c = csum(pseudo(src, dst, 17, seg) + seg) or 0xFFFF
    return seg[:6] + struct.pack("!H", c) + seg[8:]


def icmp_echo(payload=b"ping"):
    m = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + payload
    return m[:2] + struct.pack("!H", csum(m)) + m[4:]


def icmp6_echo(payload=b"ping"):
    m = struct.pack("!BBHHH", 128, 0, 0, 1, 1) + payload
    c = csum(pseudo(V6S, V6D, 58, m) + m)
    return m[:2] + struct.pack("!H", c) + m[4:]


SYN4 = ipv4(6, tcp(V4S, V4D, 0x02, options=bytes([2, 4, 5, 0xb4])))
SYN6 = ipv6(6, tcp(V6S, V6D, 0x02))
ACK4 = ipv4(6, tcp(V4S, V4D, 0x10, ack=5000))
ACK4b = ipv4(6, tcp(V4S, V4D, 0x10, ack=6000))
ACK6 = ipv6(6, tcp(V6S, V6D, 0x10, ack=5000))
ACK6b = ipv6(6, tcp(V6S, V6D, 0x10, ack=7000))
packets = [
    SYN4, SYN6, ACK4, ACK6,
    ipv4(6, tcp(V4S, V4D, 0x18, ack=1, payload=b"GET / HTTP/1.1\r\n\r\n")),
    ipv4(17, udp(V4S, V4D, b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x04test\x00\x00\x01\x00\x01")),
    ipv4(17, udp(V4S, V4D, b"x" * 16), flags=0x20),     # first fragment
    ipv4(17, b"y" * 16, flags=0, frag=2),               # later fragment
    ipv4(1, icmp_echo()),
    ipv6(17, udp(V6S, V6D, b"hello")),
    ipv6(58, icmp6_echo()),
    ipv6(17, udp(V6S, V6D, b"frag"), ext=bytes([44, 17, 0, 0, 1, 0, 0, 0, 7])),   # fragment header
    ipv6(6, tcp(V6S, V6D, 0x02), ext=bytes([0, 6, 0]) + b"\x01\x04\0\0\0\0"),     # hop-by-hop
]
for p in packets:
    seed("packet", p)
for a, b in [(ACK4, ACK4b), (ACK6, ACK6b), (ACK4, ACK4), (SYN4, ACK4)]:
    seed("pure_ack", bytes([len(a)]) + a + b)


# The TUN offload header (virtio_net_hdr, little-endian) before a packet: partial checksums
# (the field holds the pseudo-header's sum) and TCP GSO segments whose piece size the payload
# exceeds.
def vnet(flags=0, gso=0, hdr_len=0, gso_size=0, start=0, offset=0):
    return struct.pack("<BBHHHH", flags, gso, hdr_len, gso_size, start, offset)


def partial(packet, start, offset, src, dst, proto):
    seg = packet[start:]
    s = sum(struct.unpack("!%dH" % (len(pseudo(src, dst, proto, seg)) // 2), pseudo(src, dst, proto, seg)))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    field = start + offset
    return packet[:field] + struct.pack("!H", s) + packet[field + 2:]


BIG4 = ipv4(6, tcp(V4S, V4D, 0x10, ack=1, payload=bytes(range(256)) * 12, options=b"\x01" * 12))
BIG6 = ipv6(6, tcp(V6S, V6D, 0x18, ack=1, payload=b"z" * 3001))
seed("virtio_net_header", vnet() + ACK4)
seed("virtio_net_header", vnet(1, 0, 0, 0, 20, 16) + partial(ACK4, 20, 16, V4S, V4D, 6))
seed("virtio_net_header", vnet(1, 1, 52, 1448, 20, 16) + partial(BIG4, 20, 16, V4S, V4D, 6))
seed("virtio_net_header", vnet(1, 4, 60, 1440, 40, 16) + partial(BIG6, 40, 16, V6S, V6D, 6))
seed("virtio_net_header", vnet(1, 0, 0, 0, 20, 6) + partial(ipv4(17, udp(V4S, V4D, b"odd")), 20, 6, V4S, V4D, 17))
seed("virtio_net_header", vnet(2, 0x81, 52, 1000) + BIG4)
seed("virtio_net_header", vnet(0, 5, 28, 500) + ipv4(17, udp(V4S, V4D, b"u" * 1200)))

# --- SOCKS5 ----------------------------------------------------------------------------------

req_v4 = b"\x05\x01\x00\x01" + V4D + b"\x00\x50"
req_dom = b"\x05\x01\x00\x03\x0cexample.test\x01\xbb"
req_v6 = b"\x05\x03\x00\x04" + V6D + b"\x00\x35"
seed("socks5_server", b"\x05\x01\x00" + req_v4)
seed("socks5_server", b"\x05\x02\x00\x02" + req_dom)
seed("socks5_server", b"\x05\x01\x00" + req_v6)
seed("socks5_server", b"\x00\x00\x00\x01" + V4D + b"\x00\x35payload")
seed("socks5_server", b"\x00\x00\x00\x03\x0cexample.test\x00\x35payload")
seed("socks5_client", b"\x05\x00\x00\x01\x7f\x00\x00\x01\x2c\x38")
seed("socks5_client", b"\x05\x05\x00\x04" + V6D + b"\x00\x00")
seed("socks5_client", b"\x00\x00\x00\x01" + V4D + b"\x00\x35answer")
seed("socks5_client", b"\x00\x00\x00\x03\x0cexample.test\x00\x35answer")

# --- loft frames (docs/protocol.md) ----------------------------------------------------------


def frame(t, stream=0, body=b""):
    return struct.pack("!BBIH", t, 0, stream, len(body)) + body


def short(s):
    s = s.encode()
    return bytes([len(s)]) + s


INSTANCE = bytes(range(1, 17))
STATUS4 = INSTANCE + struct.pack("!IIH", 15000, 1024, 1400) + bytes([198, 18, 64, 2, 24, 198, 18, 64, 1, 0]) \
    + bytes([1, 1, 198, 18, 1, 2])
STATUS6 = INSTANCE + struct.pack("!IIH", 15000, 8, 1400) + bytes([198, 18, 64, 2, 24, 198, 18, 64, 1, 1]) \
    + V6S + bytes([64]) + V6D + bytes([2, 1, 198, 18, 1, 2, 4]) + V6D
HELLO = frame(0x01, 0, bytes([1]) + struct.pack("!I", 0) + short("tok") + short("laptop"))
RESUME = frame(0x02, 0, bytes([1]) + INSTANCE + short("tok"))
OPEN_TCP = frame(0x10, 1, bytes([6, 1]) + V4D + b"\x00\x50")
OPEN_DOM = frame(0x10, 3, bytes([6, 3, 12]) + b"example.test" + b"\x01\xbb")
OPEN_UDP = frame(0x10, 5, bytes([17, 4]) + V6D + b"\x00\x35")
frames = [
    HELLO, RESUME, frame(0x03, 0, STATUS4), frame(0x03, 0, STATUS6), OPEN_TCP, OPEN_DOM, OPEN_UDP,
    frame(0x11, 1), frame(0x12, 3, b"\x05"), frame(0x13, 1, b"hello"), frame(0x14, 1), frame(0x15, 1, b"\x01"),
    frame(0x16, 1, struct.pack("!I", 65536)), frame(0x20, 5, bytes([1]) + V4D + b"\x00\x35" + b"dns"),
    frame(0x20, 5, bytes([3, 4]) + b"a.b." + b"\x00\x35"), frame(0x30, 0, struct.pack("!Q", 7)),
    frame(0x31, 0, struct.pack("!Q", 7)), frame(0x3F, 0, bytes([1]) + struct.pack("!H", 8) + b"shutdown"),
]
for f in frames:
    seed("frame_codec", f + b"\xff")
seed("frame_codec", b"".join(frames) + b"\x07")


def receive(b):
    """A client/front_session op: carrier bytes (op 0, length byte = len - 1), split as needed."""
    out = b""
    while b:
        piece, b = b[:240], b[240:]
        out += bytes([0, len(piece) - 1]) + piece
    return out


# client_session: flags, then ops (0 receive, 6 open tcp, 7 open udp, 8 read, 9 write, 10 finish/reset,
# 11 tick, 12 drain, 13 datagram, 14 reattach).
seed("client_session", b"\x00" + receive(frame(0x03, 0, STATUS4)) + b"\x06\x00\x0c\x00"
     + receive(frame(0x11, 1) + frame(0x13, 1, b"response")) + b"\x08\x00\x01\x09\x00\x10\x0a\x00\x00"
     + receive(frame(0x14, 1)) + b"\x0b\x10\x0c\x00")
seed("client_session", b"\x01" + receive(frame(0x03, 0, STATUS6)) + b"\x07\x01" + receive(frame(0x11, 1))
     + b"\x0d\x00\x02\x20" + receive(frame(0x20, 1, bytes([1]) + V4D + b"\x00\x35" + b"answer")) + b"\x0c\x00")
seed("client_session", b"\x00" + receive(frame(0x03, 0, STATUS4) + frame(0x30, 0, struct.pack("!Q", 1))
                                         + frame(0x3F, 0, bytes([1, 0, 0]))) + b"\x0e\x00")
# session_replay: ops (0-2 carrier piece, 3 open, 4 front writes, 5 client reads, 6 cut and resume,
# 7 hostile ACK, 8 hostile claim, 9 any bytes, 10 tick, 11 client writes).
seed("session_replay", b"\x00\x40\x00\x40\x03\x00\x40\x04\x80\x00\x40\x05\x40\x06\x02\x05\x01\x00\x40\x00\x40\x05\x80")
seed("session_replay", b"\x00\x40\x03\x00\x40\x0b\x40\x06\x00\x00\x01\x00\x40\x0a\x01\x01\x00\x40\x07\x01\x05")
# front_session: flags (bit 0: accept later, bit 1: no STATUS yet), then ops (0 receive, 7 accept,
# 8 refuse, 9 read, 10 write, 11 finish/reset, 12 tick, 13 drain, 14 datagram, 15 status/goaway).
seed("front_session", b"\x00" + receive(HELLO + OPEN_TCP + frame(0x13, 1, b"GET /") + frame(0x14, 1))
     + b"\x09\x00\x01\x0a\x00\x10\x0b\x00\x00\x0d\x00")
seed("front_session", b"\x01" + receive(HELLO + OPEN_DOM + OPEN_UDP) + b"\x07\x00\x08\x01\x05\x07\x02"
     + receive(frame(0x20, 5, bytes([1]) + V4D + b"\x00\x35" + b"query")) + b"\x0e\x02\x10\x0d\x00")
seed("front_session", b"\x02" + receive(RESUME) + b"\x0f\x10\x58\x00" + receive(frame(0x30, 0, struct.pack("!Q", 9)))
     + b"\x0c\x20\x0d\x00")

# quic_datagram: byte 0 even: a packet for the front's demultiplexer (an Initial as aioquic
# sends it, a short header with an 18-byte id, garbage); odd: QUIC DATAGRAM payloads, each a
# length byte (len - 1) and a DGRAM frame, into a session with association 1 and stream 3 open.
def dgram_piece(b):
    return bytes([len(b) - 1]) + b


seed("quic_datagram", b"\x00" + bytes([0x40]) + bytes(range(18)) + b"\x01\x02\x03" + b"\x00" * 40)
seed("quic_datagram", b"\x00" + bytes([0xC3, 0, 0, 0, 1, 8]) + bytes(8) + bytes([8]) + bytes(8) + b"\x00\x41\x16" + bytes(1200))
try:
    import time as _time
    from aioquic.quic.configuration import QuicConfiguration as _QC
    from aioquic.quic.connection import QuicConnection as _QConn
    _c = _QConn(configuration=_QC(is_client=True, alpn_protocols=["loft"], server_name="front.test"))
    _c.connect(("127.0.0.1", 443), now=1.0)
    for _d, _ in _c.datagrams_to_send(now=1.0):
        seed("quic_datagram", b"\x00" + _d)
except ImportError:
    pass
# quic_stateless: a UDP payload to an id the front does not know: Initials without a token,
# with a forged Retry token and with another token; short headers of 22, 21 and 1200 bytes.
seed("quic_stateless", bytes([0x40]) + bytes(range(18)) + b"\x01\x02\x03")
seed("quic_stateless", bytes([0x40]) + bytes(range(18)) + b"\x01\x02")
seed("quic_stateless", bytes([0x5F]) + bytes(range(18)) + bytes(1181))
try:
    for _tok in (None, bytes([0xB6]) + bytes(range(90)), bytes([0x36]) + bytes(60)):
        _cfg = _QC(is_client=True, alpn_protocols=["loft"], server_name="front.test")
        if _tok:
            _cfg.token = _tok
        _c = _QConn(configuration=_cfg)
        _c.connect(("127.0.0.1", 443), now=1.0)
        for _d, _ in _c.datagrams_to_send(now=1.0):
            seed("quic_stateless", _d)
except NameError:
    pass
seed("quic_datagram", b"\x02" + frame(0x10, 1, bytes([6, 1]) + V4D + b"\x00\x50") + b"raw bytes")
seed("quic_datagram", b"\x02" + frame(0x10, 1, bytes([6, 3, 12]) + b"example.test" + b"\x01\xbb"))
seed("quic_datagram", b"\x03" + frame(0x11, 1) + b"raw")
seed("quic_datagram", b"\x03" + frame(0x12, 1, b"\x05"))
DG = frame(0x20, 1, bytes([1]) + V4D + b"\x00\x35" + b"dns query")
seed("quic_datagram", b"\x01" + dgram_piece(DG) + dgram_piece(frame(0x20, 1, bytes([3, 4]) + b"a.b." + b"\x00\x35")))
seed("quic_datagram", b"\x01" + dgram_piece(DG) + dgram_piece(frame(0x20, 9, bytes([1]) + V4D + b"\x00\x35")) + dgram_piece(DG + DG))
seed("quic_datagram", b"\x01" + dgram_piece(frame(0x20, 3, bytes([1]) + V4D + b"\x00\x35")))
# preface_stream: byte 0 picks the codec (0 the client's OPEN, 1 the front's answer, 2 VLESS's response); byte 1 how it is cut
seed("preface_stream", b"\x00\x05" + frame(0x10, 1, bytes([6, 1]) + V4D + b"\x00\x50") + b"raw bytes")
seed("preface_stream", b"\x03\x00" + frame(0x10, 1, bytes([6, 3, 12]) + b"example.test" + b"\x01\xbb"))
seed("preface_stream", b"\x01\x03" + frame(0x11, 1) + b"raw")
seed("preface_stream", b"\x01\x09" + frame(0x12, 1, b"\x05"))
seed("preface_stream", b"\x02\x01\x00\x00response bytes")
seed("preface_stream", b"\x02\x04\x00\x03abcdata")


# --- HTTP/1.1 and WebSocket ------------------------------------------------------------------

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
seed("http_request", f"GET /loft HTTP/1.1\r\nHost: front.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n")
seed("http_request", "GET /loft?session=0123456789abcdef0123456789abcdef HTTP/1.1\r\nHost: front.test\r\n\r\n")
seed("http_request", "POST /loft?session=0123456789abcdef0123456789abcdef HTTP/1.1\r\nHost: front.test\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n0005\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n")
seed("http_response", f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Accept: {ACCEPT}\r\n\r\n")
seed("http_response", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCache-Control: no-store\r\n\r\n"
                      "0010\r\n0123456789abcdef\r\n0\r\n\r\n")
seed("http_response", "HTTP/1.1 409 Conflict\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")


def ws(opcode, payload, mask=None, fin=True):
    b0 = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        h = bytes([b0, (0x80 if mask else 0) | n])
    elif n <= 0xFFFF:
        h = bytes([b0, (0x80 if mask else 0) | 126]) + struct.pack("!H", n)
    else:
        h = bytes([b0, (0x80 if mask else 0) | 127]) + struct.pack("!Q", n)
    if mask:
        payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
        h += mask
    return h + payload


M = b"\x11\x22\x33\x44"
for role, mask in [("ws_server", M), ("ws_client", None)]:
    seed(role, b"\x03" + ws(2, HELLO, mask) + ws(9, b"p", mask) + ws(2, b"x" * 300, mask))
    seed(role, b"\x00" + ws(2, b"frag", mask, fin=False) + ws(0, b"ment", mask) + ws(10, b"", mask))
    seed(role, b"\xff" + ws(8, struct.pack("!H", 1000) + b"bye", mask))

# --- text values -----------------------------------------------------------------------------

pin = hashlib.sha256(b"loft").digest()
import base64
seed("base64_pin", "sha256/" + base64.b64encode(pin).decode())
seed("base64_pin", pin.hex())
seed("base64_pin", ":".join("%02X" % b for b in pin))
seed("base64_pin", KEY)
for t in ["198.18.1.2", "fd00:1::2", "::", "::ffff:1.2.3.4", "198.18.1.2:80", "[fd00::1]:53",
          "198.18.0.0/15", "fd00:64::/64", "[::1]", "example.test"]:
    seed("address_text", t)

# --- control socket and metrics --------------------------------------------------------------

for line in ["status", "status json", "status text=120", "flows json sort=age", "metrics", "path-changed", "reload"]:
    seed("control_request", b"\x00" + line.encode() + b"\n")
seed("control_request", b"\x01GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9100\r\n\r\n")
for line in ["input=tun", "input=bridge drops snaplen=128 count=10", "input=all outbound=direct flow=3 duration-ms=2000",
             "filter=tcp port 80", "input=tun filter=udp and (port 53 or port 5353)", "filter=ip6 and tcp[tcpflags] & tcp-syn != 0",
             "drops filter=not icmp"]:
    seed("capture_request", line)

# --- state files -----------------------------------------------------------------------------

seed("front_state", "loft-front-state 1\n# instance ID SLOT IPV4 IPV6|- attached | detached REMAINING-MS\nnext-slot 5\n"
                    "instance 0123456789abcdef0123456789abcdef 3 198.18.64.5 fd00:64::5 attached\n"
                    "instance fedcba9876543210fedcba9876543210 4 198.18.64.6 - detached 512000\n")
seed("front_state", "loft-front-state 1\nnext-slot 0\n")
seed("holder_state", "loft-holder-state 1\n0123456789abcdef0123456789abcdef\n")

# --- configuration files: every YAML example of the docs and the integration tests ------------


def yaml_blocks(path):
    text = open(path, encoding="utf-8").read()
    out = re.findall(r"```yaml\n(.*?)```", text, re.S)
    out += [b for b in re.findall(r"<<'?EOF'?\n(.*?)\nEOF", text, re.S) if re.search(r"^[a-z-]+:", b, re.M)]
    return out


front_keys = ("listen:", "pool:", "tokens", "state-file")
for d in ["README.md", "docs/config.md", "docs/holder.md", "docs/front.md", "docs/bridge.md"] + \
        sorted("Tests/integration/" + f for f in os.listdir(os.path.join(ROOT, "Tests/integration"))):
    p = os.path.join(ROOT, d)
    if not os.path.isfile(p):
        continue
    for block in yaml_blocks(p):
        if "$" in block:   # shell-expanded templates: not YAML as written
            block = re.sub(r"\$\{?[A-Za-z_][A-Za-z_0-9]*\}?", "x", block)
        is_front = block.lstrip().startswith("listen:") or sum(k in block for k in front_keys) >= 2
        seed("config_front" if is_front else "config_loft", block)

# --- SSTP and PPP (MS-SSTP 4.7's packets; frames as an SSTP server sends them) ---------------

def sstp_control(mtype, attrs):
    body = b"".join(struct.pack("!BBH", 0, aid, 4 + len(v)) + v for aid, v in attrs)
    return struct.pack("!BBHHH", 0x10, 1, 8 + len(body), mtype, len(attrs)) + body

def sstp_data(frame):
    return struct.pack("!BBH", 0x10, 0, 4 + len(frame)) + frame

sstp_nonce = bytes.fromhex("412B489AEBD7ECC7D08966F26BE7CD72B231A0E9210D7C91B308862B0344C435")
http_ok = b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\n"
connect_ack = sstp_control(2, [(4, b"\0\0\0\x02" + sstp_nonce)])
lcp_req = b"\xff\x03\xc0\x21" + bytes((1, 1, 0, 18, 1, 4, 5, 0xDC, 3, 5, 0xC2, 0x23, 0x81, 5, 6, 1, 2, 3, 4))
seed("sstp", http_ok + connect_ack + sstp_data(lcp_req))
seed("sstp", sstp_control(1, [(1, b"\0\x01")]))
seed("sstp", sstp_control(4, [(3, b"\0\0\0\x02" + sstp_nonce + bytes(64))]))
seed("sstp", sstp_control(5, [(2, b"\0\0\0\x01\0\0\0\x04\0\x02")]) + sstp_control(8, []) + sstp_control(6, []))
seed("sstp", b"HTTP/1.1 404 Not Found\r\n\r\n")
seed("sstp", sstp_data(b"\xff\x03\x00\x21" + bytes(20)) * 3)

def pieces(*chunks):
    out = bytes((0,))
    for c in chunks:
        out += bytes((len(c), 1)) + c
    return out

seed("sstp_client", pieces(b"HTTP/1.1 200 OK\r\n\r\n", connect_ack, sstp_data(lcp_req)))
seed("sstp_client", pieces(b"HTTP/1.1 200 OK\r\n\r\n", connect_ack,
                           sstp_data(b"\xff\x03\xc0\x21" + bytes((1, 1, 0, 8, 3, 4, 0xC0, 0x23))),
                           sstp_data(b"\xff\x03\xc0\x23" + bytes((2, 1, 0, 5, 0))),
                           sstp_data(b"\xff\x03\x80\x21" + bytes((3, 2, 0, 10, 3, 6, 198, 18, 0, 2)))))
seed("sstp_client", pieces(b"HTTP/1.1 403 Forbidden\r\n\r\n"))
seed("sstp_client", pieces(b"HTTP/1.1 200 OK\r\n\r\n", connect_ack, sstp_control(8, []), sstp_control(6, [])))

seed("ppp", lcp_req)
seed("ppp", b"\xc0\x21" + bytes((3, 1, 0, 9, 3, 5, 0xC2, 0x23, 0x81)))                   # Nak, ACFC
seed("ppp", b"\xff\x03\xc2\x23" + bytes((1, 7, 0, 25, 16)) + bytes(range(16)) + b"srv")  # MS-CHAPv2 challenge
seed("ppp", b"\xff\x03\xc2\x23" + bytes((4, 7, 0, 19)) + b"E=691 R=0 M=x")              # failure
seed("ppp", b"\xff\x03\xc0\x23" + bytes((3, 1, 0, 8, 3)) + b"bad")                      # PAP Nak
seed("ppp", b"\xff\x03\x80\x21" + bytes((3, 2, 0, 22, 3, 6, 198, 18, 0, 2, 129, 6, 198, 18, 0, 1, 131, 6, 0, 0, 0, 0)))
seed("ppp", b"\x21\x45" + bytes(19))                                                    # PFC, IPv4

# --- connection links, .loft files, encrypted files (docs/links.md) ------------------------------

UUID = "27f0a1c2-5b3e-4d6f-9a8b-0c1d2e3f4a5b"
PIN = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
LINKS = [
    "vless://%s@v.example:443?encryption=none&security=tls&sni=cdn.example&alpn=h2%%2Chttp%%2F1.1&type=tcp#My%%20Server" % UUID,
    "vless://%s@[2001:db8::1]:8443/?encryption=none&security=tls&fp=chrome&type=tcp&headerType=none&allowInsecure=1#v" % UUID,
    "loft://t0k%%2Fen@front.example:443?carrier=h3&sni=front.example&pin-sha256=%s&quic-max-packet=1350#home" % PIN,
    "loft://tok@198.18.0.7:443?carrier=ws&ca=MIIBAAAAAAAAAAAAAAAAAAAA#w",
    "sstp://me%40corp:p%3Aa%40ss@[fd00::7]:443?insecure=1&auth=pap,mschapv2&keepalive=45s#gw",
]
for link in LINKS:
    seed("link", link)
seed("connection_file", "loft-connections 1\n" + "\n".join(LINKS[:3]) + "\nend 3\n")
seed("connection_file", "loft-connections 1\n# a comment\n\n" + LINKS[4] + "\nend 1\n")
try:
    import hashlib as _h
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    plain = ("loft-connections 1\n" + LINKS[4] + "\nend 1\n").encode()
    salt, nonce, it = bytes(16), bytes(12), 100000
    header = b"LOFTSEAL" + bytes((1,)) + struct.pack(">I", it) + salt + nonce + struct.pack(">I", len(plain))
    key = _h.pbkdf2_hmac("sha256", b"fuzz", salt, it, 32)
    seed("sealed_file", header + AESGCM(key).encrypt(nonce, plain, header))
except ImportError:
    pass
seed("sealed_file", b"\x7fseal me")

# --- sniff_stream: a TCP flow's first bytes (TLS ClientHello, HTTP/1.x head) ------------------

CURL_HELLO = bytes.fromhex("1603010200010001fc030330e29fe4b40827995423f46bfecc859a498b2ea5506a92ae92fa274b9730f773207d2b48edd240e81b0647a3d887aa25b33cd4333befb98d07795f2d0443501284003e130213031301c02cc030009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d003c0035002f00ff0100017500000014001200000f7777772e6578616d706c652e6f7267000b000403000102000a00160014001d0017001e00190018010001010102010301040010000e000c02683208687474702f312e31001600000017000000310000000d002a0028040305030603080708080809080a080b080408050806040105010601030303010302040205020602002b0009080304030303020301002d00020101003300260024001d00206e3dfa9a35eee19f2d7e5efc5a6c13af864c396ccb2b12f1e13cb5dd91316265001500ae000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000")  # curl 7.88 to www.example.org, captured
seed("sniff_stream", CURL_HELLO)
_hs = CURL_HELLO[5:]
seed("sniff_stream", b"".join(bytes([0x16, 3, 1, len(p) >> 8, len(p) & 0xFF]) + p for p in (_hs[:3], _hs[3:200], _hs[200:])))
seed("sniff_stream", b"GET /x HTTP/1.1\r\nUser-Agent: t\r\nHost: Example.COM:8080\r\n\r\n")
seed("sniff_stream", b"POST / HTTP/1.0\nHost: a.b\n\n")
seed("sniff_stream", b"SSH-2.0-OpenSSH_9.2\r\n")

# --- sniff_quic: QUIC client Initials (RFC 9001 A.2; aioquic 1.7.2 v2, and a hello in two) -----

def _dgrams(*ds):
    return b"\x00" + b"".join(struct.pack("!H", len(d)) + d for d in ds)
RFC9001_A2 = bytes.fromhex("c000000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11d242b123dc9bd8bab936b47d92ec356c0bab7df5976d27cd449f63300099f3991c260ec4c60d17b31f8429157bb35a1282a643a8d2262cad67500cadb8e7378c8eb7539ec4d4905fed1bee1fc8aafba17c750e2c7ace01e6005f80fcb7df621230c83711b39343fa028cea7f7fb5ff89eac2308249a02252155e2347b63d58c5457afd84d05dfffdb20392844ae812154682e9cf012f9021a6f0be17ddd0c2084dce25ff9b06cde535d0f920a2db1bf362c23e596d11a4f5a6cf3948838a3aec4e15daf8500a6ef69ec4e3feb6b1d98e610ac8b7ec3faf6ad760b7bad1db4ba3485e8a94dc250ae3fdb41ed15fb6a8e5eba0fc3dd60bc8e30c5c4287e53805db059ae0648db2f64264ed5e39be2e20d82df566da8dd5998ccabdae053060ae6c7b4378e846d29f37ed7b4ea9ec5d82e7961b7f25a9323851f681d582363aa5f89937f5a67258bf63ad6f1a0b1d96dbd4faddfcefc5266ba6611722395c906556be52afe3f565636ad1b17d508b73d8743eeb524be22b3dcbc2c7468d54119c7468449a13d8e3b95811a198f3491de3e7fe942b330407abf82a4ed7c1b311663ac69890f4157015853d91e923037c227a33cdd5ec281ca3f79c44546b9d90ca00f064c99e3dd97911d39fe9c5d0b23a229a234cb36186c4819e8b9c5927726632291d6a418211cc2962e20fe47feb3edf330f2c603a9d48c0fcb5699dbfe5896425c5bac4aee82e57a85aaf4e2513e4f05796b07ba2ee47d80506f8d2c25e50fd14de71e6c418559302f939b0e1abd576f279c4b2e0feb85c1f28ff18f58891ffef132eef2fa09346aee33c28eb130ff28f5b766953334113211996d20011a198e3fc433f9f2541010ae17c1bf202580f6047472fb36857fe843b19f5984009ddc324044e847a4f4a0ab34f719595de37252d6235365e9b84392b061085349d73203a4a13e96f5432ec0fd4a1ee65accdd5e3904df54c1da510b0ff20dcc0c77fcb2c0e0eb605cb0504db87632cf3d8b4dae6e705769d1de354270123cb11450efc60ac47683d7b8d0f811365565fd98c4c8eb936bcab8d069fc33bd801b03adea2e1fbc5aa463d08ca19896d2bf59a071b851e6c239052172f296bfb5e72404790a2181014f3b94a4e97d117b438130368cc39dbb2d198065ae3986547926cd2162f40a29f0c3c8745c0f50fba3852e566d44575c29d39a03f0cda721984b6f440591f355e12d439ff150aab7613499dbd49adabc8676eef023b15b65bfc5ca06948109f23f350db82123535eb8a7433bdabcb909271a6ecbcb58b936a88cd4e8f2e6ff5800175f113253d8fa9ca8885c2f552e657dc603f252e1a8e308f76f0be79e2fb8f5d5fbbe2e30ecadd220723c8c0aea8078cdfcb3868263ff8f0940054da48781893a7e49ad5aff4af300cd804a6b6279ab3ff3afb64491c85194aab760d58a606654f9f4400e8b38591356fbf6425aca26dc85244259ff2b19c41b9f96f3ca9ec1dde434da7d2d392b905ddf3d1f9af93d1af5950bd493f5aa731b4056df31bd267b6b90a079831aaf579be0a39013137aac6d404f518cfd46840647e78bfe706ca4cf5e9c5453e9f7cfd2b8b4c8d169a44e55c88d4a9a7f9474241e221af44860018ab0856972e194cd934")
AIOQUIC_V2 = bytes.fromhex("d26b3343cf08163be3b65da411ad08fa78df0f09a6f79e0041f051225d8c42ce7ffccc865544503b31ca80bec6bbbfcb487ce45c1b780a9cb58021d0dd747ea1c1ad79e6efcaa93231a39006d831dbb4b0b6ecfdc74006b69dbc6ca9cdfeb851798c8d6e0be0286a02209a7907e6f0c46cab21744045316c6e74374d55bbed7bd79c2f2910535bd34e1b3ab0149f52ec98ab0944bb3a5a8978a3cd560b08fd961d563ef21f1dcfa0295af7a8ebb6e0fd019bf71493f22144134e35c978dbedc20f9b46300b374459760e5d62f24c6fffa21819b12fdbd2a7eba45a5ec32e2c71edc8611ad1f477b72bef52857abb9a5c4f93202e4360319a7f9f1e15102a4f4264749bb997b184fc648a8282953f585e9996b885768144c948ff9ae9df376f7743740f60a5ff4957140e5045c029a3c4eca5b8876fb3565fa8471a0c394c915279b008345e0daaa1e90afe4fded11eb785c108f8d311185b288bdd57604f0334f675ba912f20482833d9f2b52f05704056fdcdef1da1936dbe01530cd755f32b5e540232c26886f341ae102657dd99f815763445479ab2eddf7de8bbf3962108bf44cd1632fbaa69b757dc01e5af8509795743c60f7bdc6f4102bfcfd56ab27ec5ab2c7bea24763c8392e8aaf9ac2589c87763c9767789aabf3ddd4b639775a4fa7e044fa96fe3df8b65641ce92bb0919c763d29114b73ed817f02adfd3c38309ee4df51eecb0b1fcc30000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000")
AIOQUIC_SPLIT = [bytes.fromhex(x) for x in ['c7000000010882cd9299b2d65bf2084bbc0e3d5ff5347a004496f6f2b4bd81ba6cf433982663b654fa5620d544fd87a6655d6f18e58ef91c1da0dbf309129bb509e7881e4ec0fa395c7b39423387dee119d446f9164cdd6511f2e1848110cb3f76e54b3ecce7103203f9f3097c454977633ab4b71faf0b30ced62bec74517f8b08f5e6deee7e99fcfcdbf36be5949f35cc5f4df3f1bfa589c2267a0574dc1e9ba16a0773a8983e1c3e1e8de319d8d1f45a16a9fb485d45966e8fe9884576b3ba36fb33224f0778d7f75447e87883d2859443e7a697148a0f7f4d14fa35209a582af12adc5ddc6bd4be3b63fa3f1c6f07a99490399a35c626aa217ac6952fa01dde9441dca51d01f5b3c3af27524bb3752d000c70a9ff256b5d3aeb9ca227dcb8c50bab1b07108fc6b424ea1b3c10e5c77ba6aceef231fca36a22c9c3caf660b5e4532ec865071d7ab9b30044cf2582059ddab843453b4c05d2ff5c32e93bdc3646eb59c446359d88b41c26b0ddf31e1fb433b096741941ef3235e88e732f366d66a5f21d925524e6e4c7b27bf8b2f70c7a9b1cd24a081c7b6e7d83426f8293d82afebf561be92bac039a45f4e0f07cfaf852d33a553327fc9e22d9e36f76b2427defd0b669c7fd580ea1cfaa418e454196a025606f0085844ac6ce82e9b7389a5711e8aaa31420a41d287d849d12d70234fba9114f5adc32120b4c70d6f925f7e0ff39e995cde65f41b94393ed3545b16f892fef086df7b8f3d238e2b563642514fc3d9385f77e2c2cdeb7d313cc37b1121f70c4c3d201883f9332da6d098bfebd496cdc9d94e8a887316913d5d298381d9afa170bb9c306bba854ad45b7ab61a77555202c3598ebe7dd799a06be6c55640e3726ac1516d30d49d2fd851edda4d61488e70f2d8a7263dbacf3d31746caed99ca4b96ad71cba6a13e3b500484aa6732ce54543311444458aff9298d3e7a0e5c3d3d8a7df2f715812ea8b8dcb38a02bbf77d328ce9ca75f48374c11c33a64040f82525218f490e09428687a1c323d200f30a2712c8b2f8153c6d2d8be54bd399af06c292a5365ad1f7059b0a7de755f1f4adf5d1a2fdd5763de0020d159280cc75a37ac44776061e597eacb9b911deb754937254d15bef6689ab68f4d63ac8e89f1afb21a1760b70944e089d0c66b67c0046d0541aca58e2c1aaef12f41d8b3fc6fff17fe117ce611cd0e60b50a5782bfe1b2ac1146241473d807d7f47ca47e6fe09055efd4438501cdba8b9bfcbbf730d379e1a432aef3d754b39da335d4e255cb022e6fd2fe2063d6397e86f7756660c7bda8bbb17a7e4724c0d1c1d6de8b2c8a12ee3009e306a429425d56b0b6aefcd1404ca82b1b6472f917391c843d744f1025c9aa3abd073256baf87d320892d6de0034098bf9ecdf84f906e5e46b51aafb4b4660d922765cb36bf110cb875b1421b5da4bcbe2e4bf76998c215c4ebb7fe7b16eaab81ee354244b11b70a9861222cd949e392176d004710fb95084395c2d7f2910f9a379f1d0e54ac69b354bdaf2533214e0c3f0b96509e7a541377b9b7b0c2583979ee4eec5cffed17bbb686b8636d43fba114901e40f438def9ed3a433343d18c5021fac35349d89ec3c5f7d8668b93c249f0cd43d75f966d073557d6bdb2cdaef77a9eac159e817797dd57445d28789ee8a3de1b9e3efc03a02', 'cf000000010882cd9299b2d65bf2084bbc0e3d5ff5347a0043dfd03de01e32753647a6d61fe2042ef41d0bc955c36c3fcdc12f46e81e129dcba066d844fd30e79a08154d15c0fc7da7e9998fc4d50a7711112ed6f35b2019dd276f3fc5586c40245a46690d5c3ccd97cc2fdde4e62e9e1f95e51eecd27cab3b06bad69bf6f561d49c8c0ea62bde8027f1c708327543c79ac4f2c96e591dc4513cdf161716cc0a9468d9c8e6fa064fd1f1e5d6545b6b877046e408b3477283faeda81937473a4dc10172bb32de1aaeaf59e81f3f38a9fbf7bf804eb10343f9cd753db0aa2ce3be7be17e7114d45a5f50671deec4c8d3e0ba75f160d63a429e7805f30aae8b5b090e7b6e3ddb9d0b62fd821d7d6a228c591a24d24f764e44ba1529c22f80517d7073bc9300596f696680b8b3243cb9302dc8f12f36af20a51995dc3a0f3fca5e32e9c58d901fad054a6c46327c49156e3dd170e2a5226f2f089ebf5ec3461704c76312dde571c432e937ae4382723a4a814e99c4e5c5dfcc24a5bebe05bd7ea10f447e91a59c4c060fbd385fba6607612384ed1f77bb1c796e71f130b79c68a9918080716de2ef6baeded71e3f41ce07e0ad48ecb93ed14dffbd4074427633daa142933334d18f2f37c387ac501ada623f5bdaca711a28b5817f2537ff35c1766092bcf79eeca73ffe806febfc3d489157a18a042fe3ad3ac047c2db88683c6876b2eada4d01a3a0980eff80d15a2b9f1784c99e4e40772d7df323622f572423e854702833645450b085627945d67aae668c416d7e54477181fb83323641c1498feedc1030471255e29e98a48a39c7b44e51fc32db075ea9d644b35c39dcbca12110138c0fb5ada20206b35a16843c69d53cc0d2a2b58d86c60aa1246112a02a45a936f2067d2287aebdeb4ca40f0c05593b92f51f421bfacd5481312d645b56528dcece30ee28761e78b940f356ab9f28e16b80ba9e26d17ac6f79e5c1ed41cf70d4eca8f434880a789d4607ce3f9f2a4f6e4e4ade26e1e1543c6f948ae5fe55d6b8ab486cf67dc48b794736947c5a0dc940bc29e76f528e08a0bd81f93459c9a78e69099b096acffd0eeeb1cb551131dc4d7b27b1d177cd907bb7cad060870f4cef19383c5ea5bed977745c5be97265286fc2fe5d41fa9f1b7ac23fbc74c45acb855f0f208e98ea1413a09d575f3f7dda2550443d62556df16a10ccd3591fb13960622cda81034858809883718d6f5ed644b5b6375971ab4d4bf210f4a1867acc57810c8853e0b95267ef9c00697e1d207f9bbea48e5e2a0b5e033b739cd581209fb3d782647e2148469093fec9ef12f93efbedfab98934594f413be3243b8300030a3739ef0223ddd59b41c17dd721d457b4807a78d25f8da7b0b89168d2e4840578ec5ddca4f0ae8e2cb8ea8b0726e6d4cbb951cab51816e000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000']]
seed("sniff_quic", _dgrams(RFC9001_A2))
seed("sniff_quic", _dgrams(AIOQUIC_V2))
seed("sniff_quic", _dgrams(*AIOQUIC_SPLIT))
seed("sniff_quic", _dgrams(AIOQUIC_SPLIT[1], AIOQUIC_SPLIT[0]))
# A decrypted Initial payload (RFC 9001 A.2's, without its padding): CRYPTO, then PING, PADDING.
seed("sniff_quic", b"\x01" + bytes.fromhex(
    "060040f1010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e868"
    "04fe3a47f06a2b69484c00000413011302010000c000000010000e00000b6578"
    "616d706c652e636f6dff01000100000a00080006001d00170018001000070005"
    "04616c706e000500050100000000003300260024001d00209370b2c9caa47fba"
    "baf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b000302030400"
    "0d0010000e0403050306030203080408050806002d00020101001c0002400100"
    "3900320408ffffffffffffffff05048000ffff07048000ffff08011001048000"
    "75300901100f088394c8f03e51570806048000ffff") + b"\x01\x00\x00")
seed("sniff_quic", b"\x01" + bytes.fromhex("0300010002000102030405") + b"\x1c\x00\x00\x00")

# --- fake_dns: A/AAAA queries (dig's, with EDNS), and the pool's file ---------------------------

DIG_QUERY = bytes.fromhex("a1b20120000100000000000103777777076578616d706c65036f72670000010001"
                          "00002904d000000000000c000a0008f1e2d3c4b5a69788")
seed("fake_dns", b"\x00" + DIG_QUERY)
seed("fake_dns", b"\x00" + DIG_QUERY[:30] + b"\x1c" + DIG_QUERY[31:])
seed("fake_dns", b"\x00" + bytes.fromhex("00070100000100000000000001610865786375646564047465737400000100 01".replace(" ", "")))
seed("fake_dns", b"\x01loft-fake-ip 1 198.19.0.0/24 -\n2 y.test\n3 z.test\n1 x.test\n")
# A server's answer (www.example.org A 93.184.216.34, TTL 300), as DNSNames learns from it.
seed("fake_dns", b"\x02" + bytes.fromhex("00078180000100010000000003777777076578616d706c65036f72670000010001"
                                          "c00c000100010000012c00045db8d822"))

# --- write -----------------------------------------------------------------------------------

for target, items in sorted(seeds.items()):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.remove(os.path.join(d, f))
    for i, data in enumerate(items):
        with open(os.path.join(d, "seed-%02d" % i), "wb") as f:
            f.write(data)
    print("%-16s %3d seeds" % (target, len(items)), file=sys.stderr)
