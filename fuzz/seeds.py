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
