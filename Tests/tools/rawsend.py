# One IP packet (scapy) out of a raw socket, as the sending namespace's kernel routes it: the
# hostile packet tools' one sender (Tests/tools/hostile_battery.py, hostile.test.sh's packet
# tool). A packet whose header has no address to go to is sent to the default server.
import socket

from scapy.all import IP, IPv6


class RawSender:
    def __init__(self, default4, default6):
        self.default4, self.default6 = default4, default6
        self.raw4 = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.raw6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)

    def send(self, pkt):
        """True once the kernel took it; False when it refused it (the caller counts: not sent)."""
        b = bytes(pkt)
        try:
            if b[0] >> 4 == 6:
                self.raw6.sendto(b, (str(pkt[IPv6].dst) if IPv6 in pkt else self.default6, 0))
            else:
                self.raw4.sendto(b, (str(pkt[IP].dst) if IP in pkt else self.default4, 0))
            return True
        except OSError:
            return False
