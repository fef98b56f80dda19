#!/usr/bin/env python3
"""Load through a SOCKS5 server for bench/holder's peer part, every byte checked.

    socks_load.py down SOCKS_PORT HOST PORT SECONDS FILE
        GET /big from the web server at HOST:PORT over one keep-alive connection through the
        SOCKS5 server on 127.0.0.1:SOCKS_PORT, again and again until SECONDS have passed (the
        transfer under way is finished); each body's SHA-256 compared with FILE's.
    socks_load.py up SOCKS_PORT HOST PORT SECONDS FILE
        FILE sent to this script's sink at HOST:PORT over one connection, again and again: each
        upload its length (8 bytes, big-endian) then its bytes; the sink's hex SHA-256 of them
        (one line) read back and compared. No half-close: v2ray ends a connection whose client
        closes its write side before the answer is back.
    socks_load.py sink HOST PORT
        That sink, listening on HOST:PORT, a thread per connection.

Prints one JSON line: bytes (bodies or uploads completed and checked), seconds (from the first
byte sent to the end of the last transfer), transfers, bad (checks that failed), error (the
first failure, or null). Bounded: it gives up after SECONDS + 60 s in all. No authentication,
IPv4 destinations only.
"""
import hashlib
import json
import socket
import struct
import sys
import time

CHUNK = 1 << 20


def socks_connect(port, host, dport, timeout):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"\x05\x01\x00")
    if recv_exact(s, 2) != b"\x05\x00":
        raise OSError("SOCKS5: no acceptable method")
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(host) + struct.pack("!H", dport))
    head = recv_exact(s, 4)
    if head[1] != 0:
        raise OSError("SOCKS5: reply %d" % head[1])
    recv_exact(s, {1: 4, 4: 16}.get(head[3], 0) + 2)
    return s


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise OSError("connection closed after %d of %d bytes" % (len(b), n))
        b += c
    return b


def download(s, host, want, buf):
    """One GET /big on s; True when the body's SHA-256 is FILE's. Returns (ok, body bytes)."""
    s.sendall(b"GET /big HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(4096)
        if not c:
            raise OSError("connection closed in the response head")
        head += c
    head, rest = head.split(b"\r\n\r\n", 1)
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status + b" ":
        raise OSError("HTTP: %r" % status)
    length = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    if length is None:
        raise OSError("HTTP: no Content-Length")
    h = hashlib.sha256(rest)
    got = len(rest)
    view = memoryview(buf)
    while got < length:
        n = s.recv_into(view, min(len(buf), length - got))
        if n == 0:
            raise OSError("connection closed after %d of %d body bytes" % (got, length))
        h.update(view[:n])
        got += n
    return h.hexdigest() == want, length


def upload(s, data, want):
    """One upload on s; (True when the sink's SHA-256 is FILE's, what the sink answered)."""
    s.sendall(struct.pack("!Q", len(data)))
    s.sendall(data)
    reply = b""
    while not reply.endswith(b"\n"):
        c = s.recv(128)
        if not c:
            raise OSError("the sink closed the connection (answer so far %r)" % reply[:80])
        reply += c
        if len(reply) > 128:
            break
    got = reply.strip().decode(errors="replace")
    return got == want, got


def sink(host, port):
    import threading

    def serve(c):
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        try:
            while True:
                head = b""
                while len(head) < 8:
                    x = c.recv(8 - len(head))
                    if not x:
                        return
                    head += x
                left = struct.unpack("!Q", head)[0]
                h = hashlib.sha256()
                while left:
                    n = c.recv_into(view, min(len(buf), left))
                    if n == 0:
                        return
                    h.update(view[:n])
                    left -= n
                c.sendall(h.hexdigest().encode() + b"\n")
        except OSError:
            pass
        finally:
            c.close()

    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(64)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def main():
    if sys.argv[1] == "sink":
        return sink(sys.argv[2], int(sys.argv[3]))
    mode, port, host, dport, seconds, path = sys.argv[1:7]
    port, dport, seconds = int(port), int(dport), float(seconds)
    data = open(path, "rb").read()
    want = hashlib.sha256(data).hexdigest()
    deadline = time.monotonic() + seconds + 60
    out = {"bytes": 0, "seconds": 0.0, "transfers": 0, "bad": 0, "error": None}
    t0 = time.monotonic()
    try:
        if mode == "down":
            buf = bytearray(CHUNK)
            s = socks_connect(port, host, dport, 30)
            try:
                while True:
                    s.settimeout(max(1.0, deadline - time.monotonic()))
                    ok, n = download(s, host, want, buf)
                    out["transfers"] += 1
                    if ok:
                        out["bytes"] += n
                    else:
                        out["bad"] += 1
                        out["error"] = out["error"] or "download %d: SHA-256 differs" % out["transfers"]
                    if time.monotonic() - t0 >= seconds:
                        break
            finally:
                s.close()
        elif mode == "up":
            s = socks_connect(port, host, dport, 30)
            try:
                while True:
                    s.settimeout(max(1.0, deadline - time.monotonic()))
                    ok, got = upload(s, data, want)
                    out["transfers"] += 1
                    if ok:
                        out["bytes"] += len(data)
                    else:
                        out["bad"] += 1
                        out["error"] = out["error"] or "upload %d: the sink answered %r" % (out["transfers"], got[:80])
                    if time.monotonic() - t0 >= seconds:
                        break
            finally:
                s.close()
        else:
            raise SystemExit("mode: down or up, not %r" % mode)
    except (OSError, ValueError) as e:
        out["error"] = "%s after %d transfers: %s" % (mode, out["transfers"], e)
    out["seconds"] = round(time.monotonic() - t0, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
