#!/usr/bin/env bash
# transfer.test.sh with `tun.offload: off`: the same bytes through plain MTU-sized packets
# (docs/netstack.md, "Large segments").
LOFT_TEST_OFFLOAD=off exec bash "$(dirname "$0")/transfer.test.sh"
