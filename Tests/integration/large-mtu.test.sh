#!/usr/bin/env bash
# transfer.test.sh at TUN MTU 65535: segments of up to 64 KiB through loft (docs/netstack.md,
# "Large segments"), the app's large MSS, and an 8000-byte UDP datagram each way.
LOFT_TRANSFER_MTU=65535 exec bash "$(dirname "$0")/transfer.test.sh"
