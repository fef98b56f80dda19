# loft session frames (docs/protocol.md, version 1) written from the spec, independently of
# Sources/LoftProtocol: used by the interop scripts to speak to loft-front and to check what
# loft's holder sends. All integers big-endian; every frame is an 8-byte header
# (type u8, flags u8, stream u32, length u16) and `length` body bytes.
import ipaddress
import struct

HELLO, RESUME, STATUS = 0x01, 0x02, 0x03
OPEN, OPEN_OK, OPEN_FAIL, DATA, FIN, RST, CREDIT = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16
DGRAM, PING, PONG, GOAWAY = 0x20, 0x30, 0x31, 0x3F
NAMES = {HELLO: "HELLO", RESUME: "RESUME", STATUS: "STATUS", OPEN: "OPEN", OPEN_OK: "OPEN_OK",
         OPEN_FAIL: "OPEN_FAIL", DATA: "DATA", FIN: "FIN", RST: "RST", CREDIT: "CREDIT",
         DGRAM: "DGRAM", PING: "PING", PONG: "PONG", GOAWAY: "GOAWAY"}

GOAWAY_SHUTDOWN, GOAWAY_BAD_TOKEN, GOAWAY_UNSUPPORTED_VERSION, GOAWAY_PROTOCOL_ERROR = 0, 1, 2, 3
GOAWAY_UNKNOWN_INSTANCE, GOAWAY_OVERLOADED, GOAWAY_SUPERSEDED = 4, 5, 6

VERSION = 1
HEADER = 8
INITIAL_WINDOW = 262144


def frame(ftype, stream, body=b"", flags=0):
    return struct.pack("!BBIH", ftype, flags, stream, len(body)) + body


def short(s):
    b = s.encode()
    assert len(b) <= 255
    return bytes([len(b)]) + b


def hello(token, client_name="", caps=0, version=VERSION):
    return frame(HELLO, 0, bytes([version]) + struct.pack("!I", caps) + short(token) + short(client_name))


def resume(instance_id, token, version=VERSION):
    assert len(instance_id) == 16
    return frame(RESUME, 0, bytes([version]) + instance_id + short(token))


def addr(host, port):
    """SOCKS5 address: ATYP 1 / 4 for IP literals, 3 for a name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        n = host.encode()
        return bytes([3, len(n)]) + n + struct.pack("!H", port)
    return bytes([1 if ip.version == 4 else 4]) + ip.packed + struct.pack("!H", port)


def open_tcp(stream, host, port):
    return frame(OPEN, stream, bytes([6]) + addr(host, port))


def data(stream, payload):
    assert 1 <= len(payload) <= 65535
    return frame(DATA, stream, payload)


def fin(stream):
    return frame(FIN, stream)


def credit(stream, increment):
    return frame(CREDIT, stream, struct.pack("!I", increment))


def ping(value):
    return frame(PING, 0, struct.pack("!Q", value))


def pong(value):
    return frame(PONG, 0, struct.pack("!Q", value))


def goaway(reason, text=""):
    t = text.encode()
    return frame(GOAWAY, 0, bytes([reason]) + struct.pack("!H", len(t)) + t)


class Splitter:
    """Cuts a byte stream into frames (frame boundaries need not match message boundaries)."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, b):
        self.buf += b
        out = []
        while len(self.buf) >= HEADER:
            t, fl, sid, ln = struct.unpack_from("!BBIH", self.buf)
            if len(self.buf) < HEADER + ln:
                break
            out.append((t, fl, sid, bytes(self.buf[HEADER:HEADER + ln])))
            del self.buf[:HEADER + ln]
        return out


def parse_hello(body):
    """(version, caps, token, client name); raises ValueError on a malformed body."""
    if len(body) < 7:
        raise ValueError("HELLO body of %d bytes" % len(body))
    v = body[0]
    caps = struct.unpack_from("!I", body, 1)[0]
    p = 5
    n = body[p]; token = body[p + 1:p + 1 + n].decode(); p += 1 + n
    n = body[p]; name = body[p + 1:p + 1 + n].decode(); p += 1 + n
    if p != len(body):
        raise ValueError("HELLO body has %d bytes after the client name" % (len(body) - p))
    return v, caps, token, name


def parse_goaway(body):
    """(reason, text)."""
    if len(body) < 3:
        raise ValueError("GOAWAY body of %d bytes" % len(body))
    reason = body[0]
    n = struct.unpack_from("!H", body, 1)[0]
    if 3 + n != len(body):
        raise ValueError("GOAWAY text length %d but body %d" % (n, len(body)))
    return reason, body[3:].decode()


def parse_status(body):
    """A dict of the STATUS fields; raises ValueError when the layout does not add up."""
    if len(body) < 37:
        raise ValueError("STATUS body of %d bytes" % len(body))
    s = {}
    s["instance"] = body[0:16]
    s["keepalive_ms"], s["max_streams"], s["mtu"] = struct.unpack_from("!IIH", body, 16)
    p = 26
    s["ipv4"] = ipaddress.ip_interface("%s/%d" % (ipaddress.IPv4Address(body[p:p + 4]), body[p + 4]))
    s["gateway4"] = ipaddress.IPv4Address(body[p + 5:p + 9])
    p += 9
    flags = body[p]; p += 1
    if flags & ~1:
        raise ValueError("STATUS flags 0x%02x" % flags)
    s["ipv6"] = s["gateway6"] = None
    if flags & 1:
        s["ipv6"] = ipaddress.ip_interface("%s/%d" % (ipaddress.IPv6Address(body[p:p + 16]), body[p + 16]))
        s["gateway6"] = ipaddress.IPv6Address(body[p + 17:p + 33])
        p += 33
    count = body[p]; p += 1
    dns = []
    for _ in range(count):
        atyp = body[p]
        if atyp == 1:
            dns.append(ipaddress.IPv4Address(body[p + 1:p + 5])); p += 5
        elif atyp == 4:
            dns.append(ipaddress.IPv6Address(body[p + 1:p + 17])); p += 17
        else:
            raise ValueError("STATUS dns ATYP %d" % atyp)
    if p != len(body):
        raise ValueError("STATUS body has %d bytes after the dns list" % (len(body) - p))
    s["dns"] = dns
    return s
