#!/usr/bin/env bash
# Connections as links, .loft files and encrypted files (docs/links.md), through the loft binary:
# share → import of every outbound type and carrier gives back the same link; export → import of
# three connections of three types; the encrypted file against an independent decryptor written
# here from docs/links.md (Python's cryptography), both ways; bad input exits 2 with the
# configuration untouched; files with secrets are 0600 and `loft check` warns on a readable one.
# Then traffic: a vless:// link in the common form (written here from the public format, no CA:
# the system store, which SSL_CERT_FILE points at the test CA) carries a download through
# Debian's v2ray, and a loft:// link shared with its CA embedded carries one through loft-front.
. "$(dirname "$0")/lib.sh"

command -v v2ray >/dev/null || die "v2ray not installed (scripts/deps.sh)"
python3 -c 'import cryptography' 2>/dev/null || die "python3 cryptography not installed (scripts/deps.sh)"
FRONT_PORT=$((20000 + (T_ID + 11) % 20000))
while ss -Htuln "sport = :$FRONT_PORT" 2>/dev/null | grep -q .; do FRONT_PORT=$((FRONT_PORT + 1)); done
UUID=5783a3e7-e373-51cd-8642-c83782b807c5
PIN=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
W=$T_DIR/w
mkdir -p "$W"
bash "$(dirname "$0")/../interop/gen-certs.sh" "$T_DIR/fpki" >/dev/null || die "test PKI"


# --- the sharer: every outbound type, every carrier, every TLS choice ----------------------------
S=$W/sharer.yaml
{
    echo "socks5: off"
    echo "bridge: off"
    echo "outbounds:"
    for c in get ws h2 quic h3; do
        echo "  - { name: f-$c, type: loft, server: \"front.example:443\", carrier: $c, token: \"to ken/$c+&#%\", tls: { server-name: front.example, pin-sha256: $PIN }, state-file: /var/lib/loft/$c.state }"
    done
    echo "  - { name: f-quic-packet, type: loft, server: \"[fd00::7]:8443\", carrier: quic, token: t, tls: { insecure: true }, quic-max-packet: 8952 }"
    echo "  - { name: f-ca, type: loft, server: 127.0.0.1:$FRONT_PORT, carrier: h2, token: links-token, tls: { server-name: front.test, ca: $T_DIR/fpki/ca.pem } }"
    echo "  - { name: f-system, type: loft, server: front.example:443, carrier: h3, token: t, tls: { system-ca: true } }"
    echo "  - { name: v, type: vless, server: \"[2001:db8::1]:443\", uuid: $UUID, tls: { server-name: cdn.example, pin-sha256: $PIN }, alpn: [h2, http/1.1] }"
    echo "  - { name: v-plain, type: vless, server: v.example:443, uuid: $UUID, tls: { system-ca: true } }"
    echo "  - { name: gw, type: sstp, server: gw.example:443, user: \"DOMAIN\\\\me@corp\", password: \"p:a@ss% #\", tls: { insecure: true }, auth: [pap], keepalive: 45s }"
    echo "  - { name: gw-default, type: sstp, server: \"198.18.0.9:443\", user: u, password: p, tls: { ca: $T_DIR/fpki/ca.pem } }"
} >"$S"
chmod 600 "$S"
NAMES="f-get f-ws f-h2 f-quic f-h3 f-quic-packet f-ca f-system v v-plain gw gw-default"
L check -c "$S" >"$T_DIR/check.out" 2>&1 || die "the sharer config: $(cat "$T_DIR/check.out")"

# --- share → import → share: the same link, for every type and carrier ---------------------------
C=$(fresh rt)
links=()
for n in $NAMES; do links+=("$(L share "$n" -c "$S" 2>/dev/null)"); done
L import "${links[@]}" -c "$C" >"$T_DIR/import.out" 2>&1
rc=$?
bad=
i=0
for n in $NAMES; do
    again=$(L share "$n" -c "$C" 2>/dev/null)
    [ "$again" = "${links[$i]}" ] || bad="$bad $n(${links[$i]} != $again)"
    i=$((i + 1))
done
expect share-import-roundtrip "[ $rc = 0 ] && [ -z '$bad' ] && L check -c '$C' >/dev/null" \
    "rc $rc, differs:$bad; $(tail -2 "$T_DIR/import.out" | tr '\n' '|')"
expect imported-ca-file "cmp -s '$W/rt/outbounds.d/f-ca.ca.pem' '$T_DIR/fpki/ca.pem'" \
    "the CA embedded in f-ca's link is not written back as it was"
modes=$(stat -c '%a' "$W"/rt/outbounds.d/*.yaml | sort -u | tr '\n' ' ')
expect outbound-files-0600 "[ '$modes' = '600 ' ] && [ \$(stat -c %a '$W/rt/outbounds.d') = 700 ]" "modes: $modes, folder $(stat -c %a "$W/rt/outbounds.d")"
expect restart-said "grep -q 'needs a restart' '$T_DIR/import.out'" "import does not say a restart is needed"
expect main-file-kept "head -1 '$C' | grep -q '^# rt: a consumer' && grep -q '^outbound-dir: outbounds.d$' '$C'" "$(cat "$C" | tr '\n' '|')"
L share v -c "$S" >/dev/null 2>"$T_DIR/share.err"
expect share-warns-secret "grep -q 'carries the secret' '$T_DIR/share.err'" "share said: $(cat "$T_DIR/share.err")"
# From stdin: what `loft share` prints, piped.
C2=$(fresh stdin)
L share gw -c "$S" 2>/dev/null | L import - -c "$C2" >"$T_DIR/stdin.out" 2>&1; rc=$?
expect import-stdin "[ $rc = 0 ] && [ \"\$(L share gw -c '$C2' 2>/dev/null)\" = \"\$(L share gw -c '$S' 2>/dev/null)\" ]" "rc $rc: $(cat "$T_DIR/stdin.out")"
# An existing name: refused without --replace, replaced with it.
before=$(tree_state "$W/rt")
L import "${links[0]}" -c "$C" >"$T_DIR/dup.out" 2>&1; rc=$?
expect existing-name-refused "[ $rc = 2 ] && [ '$(tree_state "$W/rt")' = '$before' ] && grep -q 'already exists' '$T_DIR/dup.out'" "rc $rc: $(cat "$T_DIR/dup.out")"
L import "${links[1]}" --name f-get --replace -c "$C" >/dev/null 2>&1; rc=$?
expect replace "[ $rc = 0 ] && [ \"\$(L share f-get -c '$C' 2>/dev/null)\" = '${links[1]%#*}#f-get' ]" "rc $rc: $(L share f-get -c "$C" 2>&1)"

# --- export → import: three connections of three types, plain and encrypted -----------------------
printf 'correct horse battery staple\n' >"$W/pass"
L export f-ca v gw -c "$S" -o "$W/three.loft" >/dev/null 2>&1
L export f-ca v gw -c "$S" --encrypt --passphrase-file "$W/pass" -o "$W/three.enc" >/dev/null 2>&1; rc=$?
expect export-0600 "[ $rc = 0 ] && [ \$(stat -c %a '$W/three.enc') = 600 ] && [ \$(stat -c %a '$W/three.loft') = 600 ]" "rc $rc, modes $(stat -c %a "$W/three.enc" "$W/three.loft" 2>&1 | tr '\n' ' ')"
for kind in loft enc; do
    C=$(fresh "three-$kind")
    L import "$W/three.$kind" --passphrase-file "$W/pass" -c "$C" >/dev/null 2>&1; rc=$?
    bad=
    for n in f-ca v gw; do [ "$(L share $n -c "$C" 2>/dev/null)" = "$(L share $n -c "$S" 2>/dev/null)" ] || bad="$bad $n"; done
    expect "export-import-$kind" "[ $rc = 0 ] && [ -z '$bad' ]" "rc $rc, differ:$bad"
done

# --- the passphrase asked on a terminal (a pty), never read from the command line ------------------
cat >"$T_DIR/answer_pty.py" <<'PY'
# answer_pty.py ANSWERS... -- CMD...: runs CMD on a new pty, answering each "passphrase" prompt with the
# next answer; prints what CMD wrote there and exits with its status. Bounded: 60 s.
import os, pty, select, signal, sys, time
sep = sys.argv.index("--")
answers, cmd = sys.argv[1:sep], sys.argv[sep + 1:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
out, since, deadline = b"", b"", time.time() + 60
while True:
    if time.time() > deadline:
        os.kill(pid, signal.SIGKILL)
        break
    if not select.select([fd], [], [], 1)[0]:
        continue
    try:
        b = os.read(fd, 1024)
    except OSError:
        break
    if not b:
        break
    out += b
    since += b
    if answers and since.endswith(b": ") and b"passphrase" in since:
        os.write(fd, answers.pop(0).encode() + b"\n")
        since = b""
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
PY
python3 "$T_DIR/answer_pty.py" "tty secret" "tty secret" -- "$LOFT_BIN" export v gw -c "$S" --encrypt -o "$W/tty.enc" >"$T_DIR/tty-export.out" 2>&1; rc1=$?
C=$(fresh tty)
python3 "$T_DIR/answer_pty.py" "tty secret" -- "$LOFT_BIN" import "$W/tty.enc" -c "$C" >"$T_DIR/tty-import.out" 2>&1; rc2=$?
python3 "$T_DIR/answer_pty.py" "tty secret" "tty secreT" -- "$LOFT_BIN" export v -c "$S" --encrypt -o "$W/tty2.enc" >"$T_DIR/tty-differ.out" 2>&1; rc3=$?
expect passphrase-on-terminal "[ $rc1 = 0 ] && [ $rc2 = 0 ] && [ \"\$(L share gw -c '$C' 2>/dev/null)\" = \"\$(L share gw -c '$S' 2>/dev/null)\" ] && [ $rc3 = 2 ] && grep -q 'passphrases differ' '$T_DIR/tty-differ.out' && [ ! -e '$W/tty2.enc' ] && ! grep -q 'tty secret' '$T_DIR/tty-export.out'" \
    "export $rc1, import $rc2, differing $rc3: $(cat "$T_DIR/tty-export.out" "$T_DIR/tty-import.out" "$T_DIR/tty-differ.out" | tr '\r\n' '||')"

# --- the encrypted format against an independent implementation (docs/links.md) -----------------
cat >"$T_DIR/seal.py" <<'PY'
# docs/links.md, "The encrypted file": header (45 bytes) = "LOFTSEAL", version 1, iterations
# (u32 BE), salt (16), nonce (12), plaintext length (u32 BE); then AES-256-GCM(key, nonce,
# plaintext, associated data = the header) with the 16-byte tag at the end;
# key = PBKDF2-HMAC-SHA256(passphrase, salt, iterations, 32).
import os, struct, sys
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

def key(passphrase, salt, iterations):
    return PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=salt, iterations=iterations).derive(passphrase)

mode, path, passfile = sys.argv[1:4]
passphrase = open(passfile, "rb").read().split(b"\n")[0]
if mode == "open":
    data = open(path, "rb").read()
    assert data[:8] == b"LOFTSEAL" and data[8] == 1, "header"
    iterations, = struct.unpack(">I", data[9:13])
    salt, nonce = data[13:29], data[29:41]
    length, = struct.unpack(">I", data[41:45])
    plain = AESGCM(key(passphrase, salt, iterations)).decrypt(nonce, data[45:], data[:45])
    assert len(plain) == length
    sys.stdout.buffer.write(plain)
else:
    plain = sys.stdin.buffer.read()
    salt, nonce, iterations = os.urandom(16), os.urandom(12), 200000
    header = b"LOFTSEAL" + bytes([1]) + struct.pack(">I", iterations) + salt + nonce + struct.pack(">I", len(plain))
    open(path, "wb").write(header + AESGCM(key(passphrase, salt, iterations)).encrypt(nonce, plain, header))
PY
python3 "$T_DIR/seal.py" open "$W/three.enc" "$W/pass" >"$W/three.py-opened" 2>"$T_DIR/py.err"
expect python-decrypts-loft "cmp -s '$W/three.py-opened' '$W/three.loft'" "$(cat "$T_DIR/py.err" | tail -2)"
iters=$(python3 -c 'import struct,sys; print(struct.unpack(">I", open(sys.argv[1],"rb").read()[9:13])[0])' "$W/three.enc")
note "loft's encrypted file: $iters PBKDF2 iterations"
python3 "$T_DIR/seal.py" seal "$W/py.enc" "$W/pass" <"$W/three.loft"
C=$(fresh from-python)
L import "$W/py.enc" --passphrase-file "$W/pass" -c "$C" >"$T_DIR/pyimp.out" 2>&1; rc=$?
expect loft-decrypts-python "[ $rc = 0 ] && [ \"\$(L share v -c '$C' 2>/dev/null)\" = \"\$(L share v -c '$S' 2>/dev/null)\" ]" "rc $rc: $(cat "$T_DIR/pyimp.out")"

# --- bad input: exit 2, a clear error, the configuration untouched ---------------------------------
C=$(fresh bad)
L import "${links[8]}" -c "$C" >/dev/null 2>&1 || die "import into bad"
printf 'wrong passphrase\n' >"$W/wrong"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[60] ^= 1; open(sys.argv[2], "wb").write(b)' "$W/three.enc" "$W/changed.enc"
head -c -20 "$W/three.loft" >"$W/truncated.loft"
head -n 3 "$W/three.loft" >"$W/cut.loft"
printf 'not a link\n' >"$W/text.txt"
bad_case bad-link-malformed "column 46: expected host:port" "vless://$UUID@?security=tls"
bad_case bad-link-unknown-parameter 'column 82: unknown parameter "mux"' "vless://$UUID@h.example:443?security=tls&type=tcp&mux=1#x"
bad_case bad-link-in-batch "argument 2" "${links[0]%#*}#new-one" "loft://t@h.example:443?carrier=spdy#y"
bad_case bad-loft-truncated "truncated" "$W/truncated.loft"
bad_case bad-loft-cut "truncated" "$W/cut.loft"
bad_case bad-passphrase "wrong passphrase" "$W/three.enc" --passphrase-file "$W/wrong"
bad_case bad-changed-byte "wrong passphrase, or the file was changed" "$W/changed.enc" --passphrase-file "$W/pass"
bad_case bad-text "not a link" "$W/text.txt"

# --- loft check: a secret readable by others -------------------------------------------------------
chmod 644 "$W/bad/outbounds.d/v.yaml"
L check -c "$W/bad/main.yaml" >"$T_DIR/check644.out" 2>&1
chmod 600 "$W/bad/outbounds.d/v.yaml"
L check -c "$W/bad/main.yaml" >"$T_DIR/check600.out" 2>&1
expect check-warns-readable-secret "grep -q 'v.yaml: warning: holds a secret (outbound v.s UUID) and is readable by others (mode 0644)' '$T_DIR/check644.out' && ! grep -q warning '$T_DIR/check600.out'" \
    "0644: $(cat "$T_DIR/check644.out" | tr '\n' '|'); 0600: $(cat "$T_DIR/check600.out" | tr '\n' '|')"

# --- traffic: an imported vless:// link through v2ray, an imported loft:// link through loft-front --
topo_up
make_files 8
start_nginx 1 1024
start_v2ray $UUID 8443
cat >"$T_DIR/front.yaml" <<EOF
log: info
listen: 127.0.0.1:$FRONT_PORT
tls: { certificate: $T_DIR/fpki/server.pem, key: $T_DIR/fpki/server.key }
tokens: ["links-token"]
pool: { ipv4: 198.18.$((NET + 64)).0/24, ipv6: "fd00:$((NET + 64))::/64" }
mtu: 1400
dns: [$SRV4]
EOF
front_run "$T_DIR/front.yaml"

CFG=$(loft_config links idle=2m)
sed -i '/^default: direct$/d' "$CFG"
echo "control: $T_DIR/control.sock" >>"$CFG"
# The common form of the v2ray / Xray clients' share links: no CA, so the system store.
VLINK="vless://$UUID@$SRV4:8443?encryption=none&security=tls&sni=vless.loft.test&fp=chrome&type=tcp&headerType=none#v2ray%20test%20%F0%9F%9A%80"
L import "$VLINK" -c "$CFG" >"$T_DIR/vimp.out" 2>&1; rc1=$?
L import "$(L share f-ca -c "$S" 2>/dev/null)" --name front -c "$CFG" >"$T_DIR/fimp.out" 2>&1; rc2=$?
expect imported-for-traffic "[ $rc1 = 0 ] && [ $rc2 = 0 ] && grep -q 'imported v2ray-test (vless)' '$T_DIR/vimp.out'" \
    "$(cat "$T_DIR/vimp.out" "$T_DIR/fimp.out" | tr '\n' '|')"
printf 'rules:\n  - { action: via, outbound: front, to: ["%s/128"] }\ndefault: v2ray-test\n' "$SRV6" >>"$CFG"
L check -c "$CFG" >/dev/null 2>&1 || fail links-config "$(L check -c "$CFG" 2>&1)"
CASES="vless-link-carries loft-link-carries reload-says-restart stop"
# The system store of this loft: the test CA (OpenSSL's default paths honour SSL_CERT_FILE).
export SSL_CERT_FILE=$VLESS_CA
require_loft "$CFG" $CASES || exit 1
unset SSL_CERT_FILE
SHA=$(sha_of "$T_DIR/www/big")
got=$(in_app curl -sS -g --max-time 60 "http://$SRV4/big" 2>"$T_DIR/curl4.err" | sha256sum | cut -d' ' -f1)
expect vless-link-carries "[ '$got' = '$SHA' ]" "8 MiB through v2ray: sha $got, want $SHA: $(cat "$T_DIR/curl4.err") $(grep -i 'vless\|error' "$LOFT_LOG" | tail -2 | tr '\n' '|')"
got=$(in_app curl -sS -g --max-time 60 "http://[$SRV6]/big" 2>"$T_DIR/curl6.err" | sha256sum | cut -d' ' -f1)
expect loft-link-carries "[ '$got' = '$SHA' ]" "8 MiB through loft-front: sha $got, want $SHA: $(cat "$T_DIR/curl6.err") $(grep -i 'holder\|error' "$LOFT_LOG" | tail -2 | tr '\n' '|')"
note "status: $(L status -c "$CFG" 2>&1 | grep -E 'v2ray-test|front' | tr -s ' ' | tr '\n' '|')"
# A connection imported while loft runs: reload applies the rules and says the outbound needs a restart.
L import "sstp://u:p@gw.example:443?insecure=1#later" -c "$CFG" >/dev/null 2>&1
L reload -c "$CFG" >"$T_DIR/reload.out" 2>&1; rc=$?
expect reload-says-restart "[ $rc = 0 ] && grep -q 'rules reloaded' '$T_DIR/reload.out' && grep -q '(later) are not applied: restart loft' '$T_DIR/reload.out'" "rc $rc: $(cat "$T_DIR/reload.out")"
loft_stop_clean stop
finish
