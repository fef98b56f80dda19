#!/usr/bin/env python3
"""systemd's side of sd_notify(3) for the tests: binds an AF_UNIX datagram socket at PATH and
writes each message it receives to LOG as one line, "<monotonic ms> <message, newlines as |>".
With --on-ready CMD, CMD runs (sh -c) the moment READY=1 arrives, before the next message is
read, and its exit status is logged as "<ms> on-ready-exit=<status>". Stops after SECONDS."""
import argparse, socket, subprocess, time

p = argparse.ArgumentParser()
p.add_argument("path"); p.add_argument("log"); p.add_argument("seconds", type=float)
p.add_argument("--on-ready")
a = p.parse_args()
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(a.path)
end = time.monotonic() + a.seconds
with open(a.log, "a", buffering=1) as f:
    while time.monotonic() < end:
        s.settimeout(max(0.05, end - time.monotonic()))
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        now = time.monotonic_ns() // 1000000
        text = d.decode(errors="replace")
        f.write("%d %s\n" % (now, text.replace("\n", "|")))
        if a.on_ready and "READY=1" in text.split("\n"):
            rc = subprocess.run(["sh", "-c", a.on_ready]).returncode
            f.write("%d on-ready-exit=%d\n" % (time.monotonic_ns() // 1000000, rc))
