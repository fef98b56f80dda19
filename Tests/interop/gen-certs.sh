#!/usr/bin/env bash
# Makes a throwaway test PKI in DIR with the openssl CLI: a CA (ca.pem), a server certificate
# signed by it for DNS:front.test, DNS:localhost and IP:127.0.0.1 (server.pem, server.key), and
# an unrelated CA (other-ca.pem) for the wrong-CA tests. EC P-256 keys, valid 2 days.
#   Tests/interop/gen-certs.sh DIR
set -eu
dir=${1:?usage: gen-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
q() { "$@" >/dev/null 2>&1 || { echo "gen-certs: $* failed" >&2; "$@"; exit 1; }; }
q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=loft test CA" -keyout ca.key -out ca.pem \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=other test CA" -keyout other-ca.key -out other-ca.pem \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
q openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=front.test" -keyout server.key -out server.csr
cat >server.ext <<'EXT'
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:front.test,DNS:localhost,IP:127.0.0.1
EXT
q openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile server.ext -out server.pem
rm -f server.csr server.ext ca.srl
echo "$dir"
