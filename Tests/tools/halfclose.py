#!/usr/bin/env python3
# Client for the tests' sha256 sink (and any server that answers after the client's FIN): sends
# FILE (or, for "-", a short probe line) to HOST:PORT, shuts its write side (FIN), then reads
# the reply until the server closes. Prints the reply; exits 3 if the connection broke.
#   halfclose.py HOST PORT FILE|-
import socket
import sys
import time
host, port, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = open(src, "rb").read() if src != "-" else b"half-close probe\n"
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.settimeout(60)
s.connect((host, port))
s.sendall(data)
s.shutdown(socket.SHUT_WR)          # half-close: no more data from us
t0 = time.time()
reply = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
except OSError as e:
    print("error after half-close: %r (got %r)" % (e, reply)); sys.exit(3)
sys.stdout.write(reply.decode(errors="replace"))
