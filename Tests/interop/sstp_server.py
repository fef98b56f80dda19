#!/usr/bin/env python3
"""A minimal SSTP server (MS-SSTP) for loft's tests: TLS, the SSTP_DUPLEX_POST request, Call
Connect, PPP (LCP; MS-CHAPv2 or PAP; IPCP with an address and DNS), the crypto binding checked,
and IP packets routed through a TUN device in its own namespace. One asyncio loop; MD4 and DES
from pycryptodome, HMAC/SHA from Python's hashlib: an implementation independent of loft's.

    sstp_server.py --listen ADDR:PORT --cert C --key K --user U --password P --auth mschapv2|pap
                   --tun NAME --local A --client-address B --dns D [--mru N] [--ipv6cp] [--tls12]

The TUN gets A peer B (point-to-point); the client is given B by IPCP and D as its DNS.
--ipv6cp: IPV6CP too (RFC 5072): the server's interface identifier is ::1 (fe80::1 on its TUN);
the client's first identifier is Nak'ed with ::2, so the client's link-local is fe80::2; IPv6
packets (PPP protocol 0x0057) pass through the TUN like IPv4, but only once the client has
answered a Neighbor Solicitation for fe80::2 (sent to its solicited-node address without a
link-layer option, every 0.5 s, at most 20 times) with a valid Neighbor Advertisement, as a host
behind SoftEther's hub (which bridges the link onto Ethernet) resolves it: nd-ok, or nd-bad WHY.
Prints one line per event (ready, tls VERSION, auth-ok, auth-failed, binding-ok, binding-bad, up, up6, nd-ok,
closed).
Hostile modes (issue 28), each for every session:
  --flood echo|reject:N   once up, send N LCP Echo-Requests of 4000 bytes (echo) or N frames of
                          an unknown PPP protocol of 4000 bytes (reject: each draws a
                          Protocol-Reject), and stop reading the connection (flood-done N)
  --renegotiate-ms MS     MS after up, an LCP Configure-Request again (renegotiation)
  --nak-all               Nak every LCP Configure-Request of the client (MRU 1400/1401 in turn),
                          never Ack; counts them (lcp-requests N once per 10)
  --offer-address A       IPCP hands out A (the TUN's peer stays --client-address)
SIGUSR1 mutes the current session (it keeps the connection and reads, but sends nothing more:
no echo answers, no packets), for the client's keepalive; the next session is not muted."""

import argparse, asyncio, fcntl, hashlib, hmac, os, signal, ssl, struct, subprocess, sys

from Crypto.Cipher import DES
from Crypto.Hash import MD4

LCP, PAP, CHAP, IPCP, IPV4, IPV6CP, IPV6 = 0xC021, 0xC023, 0xC223, 0x8021, 0x0021, 0x8057, 0x0057
IID_SERVER, IID_CLIENT = bytes(7) + b"\x01", bytes(7) + b"\x02"
LL_SERVER, LL_CLIENT = b"\xfe\x80" + bytes(6) + IID_SERVER, b"\xfe\x80" + bytes(6) + IID_CLIENT


def icmp6_sum(src, dst, icmp):
    """The ICMPv6 checksum (RFC 4443 2.3) over the pseudo-header; 0 when `icmp` carries a valid one."""
    d = src + dst + struct.pack("!IxxxB", len(icmp), 58) + icmp + (b"\0" if len(icmp) % 2 else b"")
    s = sum(struct.unpack("!%dH" % (len(d) // 2), d))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def log(*a):
    print(*a, flush=True)


# --- MS-CHAPv2 (RFC 2759) and MPPE keys (RFC 3079), the server's side -------------------------

def nt_hash(password):
    return MD4.new(password.encode("utf-16-le")).digest()


def des_key(k7):
    b = int.from_bytes(k7, "big")
    return bytes(((b >> (56 - 7 * (i + 1))) & 0x7F) << 1 for i in range(8))


def challenge_hash(peer, auth, user):
    return hashlib.sha1(peer + auth + user).digest()[:8]


def nt_response(auth, peer, user, password):
    c = challenge_hash(peer, auth, user)
    z = nt_hash(password) + bytes(5)
    return b"".join(DES.new(des_key(z[i:i + 7]), DES.MODE_ECB).encrypt(c) for i in (0, 7, 14))


def authenticator_response(password, nt, peer, auth, user):
    hh = MD4.new(nt_hash(password)).digest()
    d = hashlib.sha1(hh + nt + b"Magic server to client signing constant").digest()
    d = hashlib.sha1(d + challenge_hash(peer, auth, user) + b"Pad to make it do more than one iteration").digest()
    return "S=" + d.hex().upper()


def server_hlak(password, nt):
    hh = MD4.new(nt_hash(password)).digest()
    mk = hashlib.sha1(hh + nt + b"This is the MPPE Master Key").digest()[:16]
    def key(magic):
        return hashlib.sha1(mk + bytes(40) + magic + b"\xf2" * 40).digest()[:16]
    send = key(b"On the client side, this is the receive key; on the server side, it is the send key.")
    recv = key(b"On the client side, this is the send key; on the server side, it is the receive key.")
    return recv + send     # MS-SSTP 3.2.5.2: server HLAK = MasterReceiveKey | MasterSendKey


# --- wire helpers ------------------------------------------------------------------------------

def control(mtype, attrs=()):
    body = b"".join(struct.pack("!BBH", 0, aid, 4 + len(v)) + v for aid, v in attrs)
    return struct.pack("!BBHHH", 0x10, 1, 8 + len(body), mtype, len(attrs)) + body


def data(frame):
    return struct.pack("!BBH", 0x10, 0, 4 + len(frame)) + frame


def ppp(proto, code, ident, payload=b""):
    return data(b"\xff\x03" + struct.pack("!H", proto) + struct.pack("!BBH", code, ident, 4 + len(payload)) + payload)


def options(raw):
    out, i = [], 0
    while i + 2 <= len(raw):
        t, n = raw[i], raw[i + 1]
        if n < 2 or i + n > len(raw):
            return None
        out.append((t, raw[i + 2:i + n]))
        i += n
    return out if i == len(raw) else None


def enc(opts):
    return b"".join(bytes((t, 2 + len(v))) + v for t, v in opts)


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, 0x400454CA, struct.pack("16sH", name.encode(), 0x0001 | 0x1000))   # TUNSETIFF, IFF_TUN|IFF_NO_PI
    return fd


class Session:
    def __init__(self, args, reader, writer, tun, cert_der):
        self.a, self.r, self.w, self.tun, self.cert_der = args, reader, writer, tun, cert_der
        self.nonce = os.urandom(32)
        self.ident = 0
        self.auth = args.auth
        self.lcp_ours = self.lcp_theirs = False
        self.ipcp_ours = self.ipcp_theirs = False
        self.authed = False
        self.hlak = bytes(32)
        self.challenge = os.urandom(16)
        self.up = False
        self.muted = False
        self.v6_ours = self.v6_theirs = self.v6_naked = self.up6 = False
        self.nd_ok, self.nd_tries, self.v6_held = False, 0, 0
        self.reading = True
        self.lcp_requests = 0

    def next_id(self):
        self.ident = (self.ident + 1) & 0xFF
        return self.ident

    def send(self, b):
        if not self.muted:
            self.w.write(b)

    def lcp_request(self):
        auth = b"\xc2\x23\x81" if self.auth == "mschapv2" else b"\xc0\x23"
        self.lcp_id = self.next_id()
        self.send(ppp(LCP, 1, self.lcp_id, enc([(1, struct.pack("!H", self.a.mru)), (3, auth),
                                                 (5, os.urandom(4))])))

    def ipcp_request(self):
        self.ipcp_id = self.next_id()
        self.send(ppp(IPCP, 1, self.ipcp_id, enc([(3, bytes(map(int, self.a.local.split("."))))])))
        if self.a.ipv6cp:
            self.ipv6cp_id = self.next_id()
            self.send(ppp(IPV6CP, 1, self.ipv6cp_id, enc([(1, IID_SERVER)])))

    async def run(self):
        head = await self.r.readuntil(b"\r\n\r\n")
        if not head.startswith(b"SSTP_DUPLEX_POST /sra_{BA195980-CD49-458b-9E23-C84EE0ADCD75}/ HTTP/1.1\r\n"):
            self.send(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            return
        self.send(b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\nServer: loft-test-sstp\r\n\r\n")
        while True:
            h = await self.r.readexactly(4)
            if h[0] != 0x10:
                log("bad-version", h[0])
                return
            n = ((h[2] & 0x0F) << 8) | h[3]
            body = await self.r.readexactly(n - 4)
            if h[1] & 1:
                if not self.on_control(body):
                    return
            else:
                self.on_frame(body)
            await self.w.drain()
            if not self.reading:         # --flood: the client's bytes pile up unread
                await asyncio.Event().wait()

    def on_control(self, b):
        mtype, count = struct.unpack("!HH", b[:4])
        if mtype == 1:        # Call Connect Request
            self.send(control(2, [(4, b"\0\0\0\x02" + self.nonce)]))
            self.lcp_request()
        elif mtype == 4:      # Call Connected
            attr = b[4:]
            value = attr[4:]
            proto, nonce, cert_hash, mac = value[3], value[4:36], value[36:68], value[68:100]
            ok = proto == 2 and nonce == self.nonce and cert_hash == hashlib.sha256(self.cert_der).digest()
            cmk = hmac.new(self.hlak, b"SSTP inner method derived CMK" + bytes((32, 0, 1)), hashlib.sha256).digest()
            zeroed = struct.pack("!BBHHH", 0x10, 1, 112, 4, 1) + attr[:4] + value[:68] + bytes(32)
            ok = ok and hmac.compare_digest(hmac.new(cmk, zeroed, hashlib.sha256).digest(), mac)
            log("binding-ok" if ok else "binding-bad")
            if not ok:
                self.send(control(5, [(2, b"\0\0\0\x03\0\0\0\x07")]))   # Call Abort, invalid frame
                return False
        elif mtype == 6:      # Call Disconnect
            self.send(control(7))
            log("disconnected")
            return False
        elif mtype == 8:
            self.send(control(9))
        return True

    def on_frame(self, f):
        if f[:2] == b"\xff\x03":
            f = f[2:]
        proto = struct.unpack("!H", f[:2])[0]
        p = f[2:]
        if proto == IPV6 and self.up6 and len(p) >= 64 and p[6] == 58 and p[40] == 136:
            self.on_advertisement(p)
            return
        if proto == IPV4 or (proto == IPV6 and self.up6):
            if self.up:
                try:
                    os.write(self.tun, p)
                except OSError:
                    pass
            return
        code, ident, n = struct.unpack("!BBH", p[:4])
        payload = p[4:n]
        if proto == LCP:
            self.on_lcp(code, ident, payload)
        elif proto == CHAP and code == 2:
            self.on_chap(ident, payload)
        elif proto == PAP and code == 1:
            u = payload[1:1 + payload[0]]
            pw = payload[2 + payload[0]:2 + payload[0] + payload[1 + payload[0]]]
            if self.auth == "pap" and u == self.a.user.encode() and pw == self.a.password.encode():
                self.send(ppp(PAP, 2, ident, b"\x02ok"))
                self.authed = True
                log("auth-ok pap")
                self.ipcp_request()
            else:
                self.send(ppp(PAP, 3, ident, b"\x0dBad password!"))
                log("auth-failed pap")
        elif proto == IPCP:
            self.on_ipcp(code, ident, payload)
        elif proto == IPV6CP and self.a.ipv6cp and self.authed:
            self.on_ipv6cp(code, ident, payload)

    def on_lcp(self, code, ident, payload):
        if code == 1 and self.a.nak_all:
            self.lcp_requests += 1
            if self.lcp_requests % 10 == 0:
                log("lcp-requests", self.lcp_requests)
            self.send(ppp(LCP, 3, ident, enc([(1, struct.pack("!H", 1400 + self.lcp_requests % 2))])))
            return
        if code == 1:
            self.send(ppp(LCP, 2, ident, payload))
            self.lcp_theirs = True
        elif code == 2 and ident == self.lcp_id:
            self.lcp_ours = True
        elif code == 3 and ident == self.lcp_id:
            for t, v in options(payload) or []:
                if t == 3 and v == b"\xc0\x23" and "pap" in self.a.allow:
                    self.auth = "pap"
                if t == 3 and v == b"\xc2\x23\x81" and "mschapv2" in self.a.allow:
                    self.auth = "mschapv2"
            self.lcp_request()
            return
        elif code == 9:
            self.send(ppp(LCP, 10, ident, b"\0\0\0\0" + payload[4:]))
        elif code == 5:
            self.send(ppp(LCP, 6, ident))
        if code in (1, 2) and self.lcp_ours and self.lcp_theirs and not hasattr(self, "challenged"):
            self.challenged = True
            if self.auth == "mschapv2":
                self.send(ppp(CHAP, 1, 7, bytes((16,)) + self.challenge + b"loft-test"))

    def on_chap(self, ident, payload):
        value = payload[1:1 + payload[0]]
        name = payload[1 + payload[0]:]
        peer, nt = value[:16], value[24:48]
        if name == self.a.user.encode() and nt == nt_response(self.challenge, peer, name, self.a.password):
            resp = authenticator_response(self.a.password, nt, peer, self.challenge, name)
            self.send(ppp(CHAP, 3, ident, (resp + " M=Welcome").encode()))
            self.hlak = server_hlak(self.a.password, nt)
            self.authed = True
            log("auth-ok mschapv2")
            self.ipcp_request()
        else:
            self.send(ppp(CHAP, 4, ident, b"E=691 R=0 C=" + os.urandom(16).hex().upper().encode() + b" V=3 M=Authentication failure"))
            log("auth-failed mschapv2")

    def on_ipcp(self, code, ident, payload):
        if not self.authed:
            return
        want = {3: bytes(map(int, (self.a.offer_address or self.a.client_address).split("."))),
                129: bytes(map(int, self.a.dns.split(".")))}
        if code == 1:
            opts = options(payload) or []
            reject = [(t, v) for t, v in opts if t not in (3, 129, 131)]
            if reject:
                self.send(ppp(IPCP, 4, ident, enc(reject)))
                return
            nak = [(t, want.get(t, want[129])) for t, v in opts if v != want.get(t, want[129])]
            if nak:
                self.send(ppp(IPCP, 3, ident, enc(nak)))
                return
            self.send(ppp(IPCP, 2, ident, payload))
            self.ipcp_theirs = True
        elif code == 2 and ident == self.ipcp_id:
            self.ipcp_ours = True
        if self.ipcp_ours and self.ipcp_theirs and not self.up:
            self.up = True
            log("up", self.a.offer_address or self.a.client_address)
            if self.a.flood:
                asyncio.get_running_loop().create_task(self.flood())
            if self.a.renegotiate_ms:
                asyncio.get_running_loop().call_later(self.a.renegotiate_ms / 1000, self.renegotiate)

    def renegotiate(self):
        if not self.w.is_closing():
            log("renegotiate")
            self.lcp_request()

    async def flood(self):
        kind, n = self.a.flood.split(":")
        self.reading = False
        body = os.urandom(3996)
        for i in range(int(n)):
            if kind == "echo":
                self.send(ppp(LCP, 9, i & 0xFF, b"\0\0\0\0" + body))
            else:
                self.send(data(b"\xff\x03\x82\x81" + body))
            if i % 256 == 255:
                try:
                    await self.w.drain()
                except (ConnectionError, ssl.SSLError):
                    log("flood-cut", i + 1)
                    return
        try:
            await self.w.drain()
        except (ConnectionError, ssl.SSLError):
            log("flood-cut", n)
            return
        log("flood-done", n)

    def on_ipv6cp(self, code, ident, payload):
        if code == 1:
            opts = options(payload) or []
            reject = [(t, v) for t, v in opts if t != 1 or len(v) != 8]
            if reject:
                self.send(ppp(IPV6CP, 4, ident, enc(reject)))
                return
            iid = dict(opts).get(1)
            if not self.v6_naked or iid != IID_CLIENT:       # the first one, and any other: ::2
                self.v6_naked = True
                self.send(ppp(IPV6CP, 3, ident, enc([(1, IID_CLIENT)])))
                return
            self.send(ppp(IPV6CP, 2, ident, payload))
            self.v6_theirs = True
        elif code == 2 and ident == self.ipv6cp_id:
            self.v6_ours = True
        if self.v6_ours and self.v6_theirs and not self.up6:
            self.up6 = True
            log("up6 fe80::2")
            self.solicit()

    # --- Neighbor Discovery (RFC 4861) for the client's address, as SoftEther's hub hosts do it

    def solicit(self):
        if self.nd_ok or not self.up6 or self.nd_tries >= 20 or self.w.is_closing():
            return
        self.nd_tries += 1
        src, dst = LL_SERVER, b"\xff\x02" + bytes(9) + b"\x01\xff" + LL_CLIENT[13:]
        icmp = bytes((135, 0, 0, 0, 0, 0, 0, 0)) + LL_CLIENT
        icmp = icmp[:2] + struct.pack("!H", icmp6_sum(src, dst, icmp)) + icmp[4:]
        self.send(data(b"\xff\x03\x00\x57" + struct.pack("!IHBB", 0x60000000, len(icmp), 58, 255) + src + dst + icmp))
        asyncio.get_running_loop().call_later(0.5, self.solicit)

    def on_advertisement(self, p):
        icmp = p[40:]
        why = None
        if p[7] != 255:
            why = "hop limit %d" % p[7]
        elif icmp6_sum(p[8:24], p[24:40], icmp) != 0:
            why = "checksum"
        elif icmp[1] != 0 or len(icmp) < 24 or icmp[8:24] != LL_CLIENT:
            why = "code or target"
        elif p[8:24] != LL_CLIENT or p[24:40] != LL_SERVER or not icmp[4] & 0x40:
            why = "addresses or Solicited flag"
        if why:
            log("nd-bad", why)
        elif not self.nd_ok:
            self.nd_ok = True
            log("nd-ok")

    def tun_readable(self):
        try:
            while True:
                p = os.read(self.tun, 65536)
                if not p or len(p) > 4087:
                    continue
                if self.up and p[0] >> 4 == 4:
                    self.send(data(b"\xff\x03\x00\x21" + p))
                elif self.up6 and p[0] >> 4 == 6:
                    if self.nd_ok:
                        self.send(data(b"\xff\x03\x00\x57" + p))
                    else:
                        self.v6_held += 1      # no neighbour entry for the client yet: dropped
        except BlockingIOError:
            pass


async def main():
    ap = argparse.ArgumentParser()
    for k in ("listen", "cert", "key", "user", "password", "tun", "local", "client-address", "dns"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--auth", default="mschapv2")
    ap.add_argument("--allow", default="mschapv2,pap")
    ap.add_argument("--mru", type=int, default=1500)
    ap.add_argument("--ipv6cp", action="store_true")
    ap.add_argument("--flood", default="")
    ap.add_argument("--renegotiate-ms", type=int, default=0)
    ap.add_argument("--nak-all", action="store_true")
    ap.add_argument("--offer-address", default="")
    ap.add_argument("--tls12", action="store_true", help="TLS 1.2 at most (as Windows servers before 2022)")
    a = ap.parse_args()
    a.allow = a.allow.split(",")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    if a.tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    cert_der = ssl.PEM_cert_to_DER_cert(open(a.cert).read().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n")
    tun = open_tun(a.tun)
    subprocess.run(["ip", "addr", "add", a.local, "peer", a.client_address, "dev", a.tun], check=True)
    subprocess.run(["ip", "link", "set", a.tun, "up", "mtu", str(a.mru)], check=True)
    if a.ipv6cp:
        subprocess.run(["ip", "-6", "addr", "add", "fe80::1/64", "dev", a.tun, "nodad"], check=True)
    loop = asyncio.get_running_loop()
    current = {}

    def mute():
        if current.get("s"):
            current["s"].muted = True
            log("muted")
    loop.add_signal_handler(signal.SIGUSR1, mute)

    async def handle(reader, writer):
        log("tls", writer.get_extra_info("ssl_object").version())
        old = current.get("s")
        if old:
            old.w.close()
        s = Session(a, reader, writer, tun, cert_der)
        current["s"] = s
        loop.add_reader(tun, s.tun_readable)
        try:
            await s.run()
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            if current.get("s") is s:
                loop.remove_reader(tun)
                current.pop("s")
            log("closed")
            writer.close()

    host, port = a.listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port), ssl=ctx)
    log("ready")
    async with server:
        await server.serve_forever()


asyncio.run(main())
