#!/usr/bin/env python3
# Upload at a bounded rate to the tests' sha256 sink: sends FILE to HOST:PORT at about RATE
# bytes per second (64 KiB writes, paced by the clock), shuts its write side (FIN), then reads
# the reply until the server closes. Prints the reply; exits 3 if the connection broke (a
# reset seen by the app), saying where.
#   slowup.py HOST PORT FILE RATE
import socket
import sys
import time
host, port, src, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
data = open(src, "rb").read()
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.settimeout(90)
s.connect((host, port))
t0 = time.time()
sent = 0
try:
    while sent < len(data):
        n = s.send(data[sent:sent + 65536])
        sent += n
        ahead = sent / rate - (time.time() - t0)
        if ahead > 0:
            time.sleep(ahead)
    s.shutdown(socket.SHUT_WR)
    reply = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
except OSError as e:
    print("error after %d of %d bytes: %r" % (sent, len(data), e)); sys.exit(3)
sys.stdout.write(reply.decode(errors="replace"))
