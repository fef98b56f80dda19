#!/usr/bin/env bash
# The Debian packages loft needs, in two lists: what building and running loft takes, and what
# the test suite and the benchmarks add (real peers and clients, the tests' PyPI packages).
# Debian 12, as root. Swift itself is expected at /opt/swift (or on PATH); it is not a Debian
# package.
#
#   scripts/deps.sh           both lists (.ci/run: everything the suite needs)
#   scripts/deps.sh --run     building and running loft only (scripts/quickstart)
#   scripts/deps.sh --test    the test and benchmark peers and the PyPI list (Tests/run runs
#                             this when one of them is missing)
#   scripts/deps.sh --test --missing   print the missing test packages, install nothing
set -eu

want_run=1 want_test=1 only_missing=
for a in "$@"; do
    case $a in
        --run) want_test= ;;
        --test) want_run= ;;
        --missing) only_missing=1 ;;
        *) echo "scripts/deps.sh: unknown argument \"$a\" (--run, --test, --missing)" >&2; exit 2 ;;
    esac
done

RUN_PACKAGES=(
    # build: lwIP, libyaml, OpenSSL (the holder's TLS), c-ares (the resolver), nghttp2 (the h2
    # carrier), ngtcp2 with its GnuTLS crypto helper (the quic carrier), nghttp3 (the h3 carrier)
    # and the Swift toolchain's needs
    liblwip-dev libyaml-dev libssl-dev libc-ares-dev libnghttp2-dev openssl pkg-config
    libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev libnghttp3-dev
    # build: QR codes of connection links (libqrencode to draw, zbar to read, libpng and libjpeg
    # for the pictures; docs/links.md)
    libqrencode-dev libzbar-dev libpng-dev libjpeg-dev
    # build: `loft capture`'s filters (libpcap compiles tcpdump expressions; docs/capture.md)
    libpcap-dev
    binutils gcc libc6-dev libstdc++-12-dev libcurl4-openssl-dev libxml2-dev libncurses-dev
    libedit2 libsqlite3-0 libpython3-dev uuid-dev zlib1g-dev tzdata git ca-certificates
    # run: namespaces, links, routes; the service units' checks
    iproute2 nftables procps psmisc coreutils util-linux
    # loft try: its web and DNS servers (python3), and the commands it prints
    python3 curl dnsutils
)
TEST_PACKAGES=(
    # tests and benchmarks: real peers and clients
    nginx-light dnsmasq-base socat iperf3 wrk curl dnsutils iputils-ping python3 tcpdump
    # resume: an SSH session kept across an outage (Tests/integration/resume.test.sh)
    openssh-server openssh-client
    # h2: nghttp against loft-front (Tests/integration/h2-interop.test.sh)
    nghttp2-client
    # SOCKS5: the peers bench/socks compares loft with, and pip for the PyPI list below
    microsocks dante-server python3-pip
    # hostile traffic: scans through the TUN
    nmap
    # vless: the VLESS server the vless outbound is tested and benchmarked against
    v2ray
    # status: --watch rendered in a real terminal
    tmux
    # links: the independent peers of the QR test (zbarimg, qrencode, ImageMagick); the
    # encrypted file's independent decryptor is PyPI's cryptography (below)
    zbar-tools qrencode imagemagick
    # service: systemd-analyze verify/security of the units, setpriv and capsh (the units'
    # capabilities), man for the generated pages
    systemd libcap2-bin man-db
    # capture: the captures read back by Debian's tshark (and tcpdump, above)
    tshark
)

# PyPI, for the python3 on PATH (the tests' clients): the SOCKS5 test's python-socks, the
# status test's Prometheus text parser, the holder interop test's WebSocket peer, the h2
# interop test's HTTP/2 peer, the quic interop test's QUIC peer (aioquic), scapy.
PYPI_PACKAGES=(
    python-socks==3.2.1
    prometheus-client
    websockets
    h2
    aioquic
    # the hostile-traffic test's packet crafting and sniffing
    scapy==2.5.0
    # the SSTP test responder's MD4 and DES (MS-CHAPv2), independent of loft's OpenSSL shim
    pycryptodome
    # the links test's independent decryptor of loft's encrypted files (docs/links.md)
    cryptography
)

if [ -n "$only_missing" ]; then
    for p in "${TEST_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
    python3 - "${PYPI_PACKAGES[@]}" <<'EOF'
import importlib.util, sys
names = {"python-socks": "python_socks", "prometheus-client": "prometheus_client", "pycryptodome": "Crypto"}
for spec in sys.argv[1:]:
    name = spec.split("==")[0]
    if importlib.util.find_spec(names.get(name, name)) is None:
        print("pypi:" + spec)
EOF
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then echo "scripts/deps.sh: run as root" >&2; exit 1; fi
PACKAGES=()
[ -n "$want_run" ] && PACKAGES+=("${RUN_PACKAGES[@]}")
[ -n "$want_test" ] && PACKAGES+=("${TEST_PACKAGES[@]}")

# Packages with a service (nginx) must not start it on install: the tests start their own
# servers inside their own namespaces. policy-rc.d 101 = "do not start", only while installing.
made_policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
fi
trap '[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d' EXIT

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${PACKAGES[@]}"
# Debian's own python3 is externally managed (PEP 668); these are test-only clients.
[ -n "$want_test" ] && python3 -m pip install --quiet --root-user-action=ignore --break-system-packages "${PYPI_PACKAGES[@]}"

if ! command -v swift >/dev/null 2>&1 && [ ! -x /opt/swift/usr/bin/swift ]; then
    echo "scripts/deps.sh: no Swift toolchain found (expected /opt/swift/usr/bin/swift)" >&2
    exit 1
fi
[ -e /dev/net/tun ] || { mkdir -p /dev/net && mknod /dev/net/tun c 10 200 && chmod 600 /dev/net/tun; }
