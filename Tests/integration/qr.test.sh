#!/usr/bin/env bash
# QR codes of connection links (docs/links.md, "QR codes"), against independent peers: zbarimg
# (Debian zbar-tools) reads loft's PNG and loft's terminal drawing back to the same link;
# qrencode (Debian) makes PNGs that loft imports, also scaled, rotated 15°, blurred and with
# noise (ImageMagick); two codes side by side import two connections; a photo-like JPEG (a code
# in perspective on a busy, unevenly lit background, JPEG quality 70) imports. Pictures with no
# code, with a code that is not a link, or cut short: exit 2, the configuration untouched.
# No namespaces: files only.
. "$(dirname "$0")/lib.sh"

for t in zbarimg qrencode convert; do command -v $t >/dev/null || die "$t not installed (scripts/deps.sh)"; done
UUID=5783a3e7-e373-51cd-8642-c83782b807c5
W=$T_DIR/w
mkdir -p "$W"
zb() { zbarimg -q --raw "$1" 2>/dev/null; }

S=$W/sharer.yaml
cat >"$S" <<EOF
socks5: off
bridge: off
outbounds:
  - { name: home, type: loft, server: "front.example:443", carrier: h3, token: "s3cret/token", tls: { server-name: front.example, pin-sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 } }
  - { name: vps, type: vless, server: "vless.example:443", uuid: $UUID, tls: { server-name: cdn.example, system-ca: true }, alpn: [h2, http/1.1] }
  - { name: gw, type: sstp, server: "[fd00::7]:443", user: "me@corp", password: "p:a@ss", tls: { insecure: true } }
EOF
chmod 600 "$S"

# --- loft's PNG and terminal drawing, read by zbarimg ------------------------------------------------
# The terminal drawing back to pixels: light = block halves, dark = space (qrencode -t UTF8's convention).
cat >"$T_DIR/term2pgm.py" <<'PY'
import sys
rows = sys.stdin.read().rstrip("\n").split("\n")
grid = []
for r in rows:
    top, bottom = [], []
    for ch in r:
        top.append(255 if ch in "█▀" else 0)
        bottom.append(255 if ch in "█▄" else 0)
    grid += [top, bottom]
s = 6
w, h = len(grid[0]) * s, len(grid) * s
out = bytearray()
for row in grid:
    line = bytearray()
    for v in row:
        line += bytes([v]) * s
    out += bytes(line) * s
sys.stdout.buffer.write(b"P5 %d %d 255\n" % (w, h) + bytes(out))
PY
bad=; widest=0
for n in home vps gw; do
    link=$(L share $n -c "$S" 2>/dev/null)
    L share $n -c "$S" --png "$W/$n.png" >/dev/null 2>&1
    [ "$(zb "$W/$n.png")" = "$link" ] || bad="$bad png:$n"
    [ "$(stat -c %a "$W/$n.png")" = 600 ] || bad="$bad mode:$n"
    L share $n -c "$S" --qr >"$W/$n.txt" 2>/dev/null
    python3 "$T_DIR/term2pgm.py" <"$W/$n.txt" >"$W/$n.pgm"
    [ "$(zb "$W/$n.pgm")" = "$link" ] || bad="$bad terminal:$n"
    w=$(python3 -c 'import sys; print(max(len(l) for l in open(sys.argv[1], encoding="utf-8").read().split("\n")))' "$W/$n.txt")
    [ "$w" -gt "$widest" ] && widest=$w
    note "$n: ${#link}-character link, $w columns × $(wc -l <"$W/$n.txt") lines"
done
expect zbarimg-reads-loft "[ -z '$bad' ]" "differs:$bad"
expect terminal-fits-80 "[ $widest -le 80 ]" "the widest drawing is $widest columns"

# --- pictures made by qrencode and ImageMagick, imported by loft ---------------------------------------
VLINK="vless://$UUID@v.example:443?encryption=none&security=tls&sni=cdn.example&fp=chrome&type=tcp#phone"
SLINK="sstp://u:p@gw.example:443?insecure=1#second"
qrencode -o "$W/q.png" "$VLINK"
qrencode -o "$W/q2.png" "$SLINK"
WANT=$(L share phone -c "$(C=$(fresh want); L import "$VLINK" -c "$C" >/dev/null 2>&1; echo "$C")" 2>/dev/null)
# import_one NAME PICTURE: the picture imports as the connection "phone", the same link.
import_one() {
    local C; C=$(fresh "$1")
    L import "$2" -c "$C" >"$T_DIR/$1.out" 2>&1
    expect "$1" "[ \"\$(L share phone -c '$C' 2>/dev/null)\" = '$WANT' ]" "$(tail -2 "$T_DIR/$1.out" | tr '\n' '|')"
}
import_one qrencode-png "$W/q.png"
convert "$W/q.png" -scale 300% "$W/scaled.png"
import_one scaled "$W/scaled.png"
convert "$W/q.png" -scale 300% -background white -rotate 15 "$W/rotated.png"
import_one rotated-15 "$W/rotated.png"
convert "$W/q.png" -scale 300% -blur 0x2 "$W/blurred.png"
import_one blurred "$W/blurred.png"
convert "$W/q.png" -scale 300% -attenuate 0.8 +noise Gaussian "$W/noisy.png"
import_one noisy "$W/noisy.png"
convert "$W/q.png" -scale 300% -background white -rotate 15 -blur 0x1.5 -attenuate 0.6 +noise Gaussian "$W/all.png"
import_one scaled-rotated-blurred-noisy "$W/all.png"
# A photo: the code printed (grey ink on off-white paper), in perspective, tilted, on a busy
# plasma background, lit unevenly, soft, grainy, JPEG at quality 70.
convert "$W/q.png" -scale 600% -bordercolor white -border 40 +level 15%,88% -alpha set -virtual-pixel transparent \
    -distort Perspective '0,0 30,10  0,%h 0,%[fx:h*0.95]  %w,0 %[fx:w*0.93],0  %w,%h %w,%h' "$W/print.png"
convert -seed 7 -size 1600x1200 plasma:fractal -blur 0x2 \( "$W/print.png" -background none -rotate 12 \) \
    -gravity center -geometry +150+40 -composite \( -size 1600x1200 gradient:gray90-gray40 \) -compose multiply -composite \
    -blur 0x1.2 -attenuate 0.4 +noise Gaussian -quality 70 "$W/photo.jpg"
import_one photo-jpeg "$W/photo.jpg"
# Two codes side by side: two connections.
convert "$W/q.png" "$W/q2.png" +append "$W/two.png"
C=$(fresh two)
L import "$W/two.png" -c "$C" >"$T_DIR/two.out" 2>&1
expect two-codes-two-connections "[ \"\$(L share phone -c '$C' 2>/dev/null)\" = '$WANT' ] && [ \"\$(L share second -c '$C' 2>/dev/null)\" = '$SLINK' ]" "$(cat "$T_DIR/two.out" | tr '\n' '|')"

# --- bad pictures: exit 2, untouched --------------------------------------------------------------------
C=$(fresh bad)
L import "$VLINK" -c "$C" >/dev/null 2>&1
convert -seed 3 -size 800x600 plasma:fractal -quality 80 "$W/nocode.jpg"
qrencode -o "$W/text.png" "hello, not a link"
head -c 300 "$W/q.png" >"$W/cut.png"
bad_case picture-without-code "no QR code found" "$W/nocode.jpg"
bad_case code-not-a-link "QR code 1 of 1 is not a connection link" "$W/text.png"
bad_case picture-cut-short "PNG" "$W/cut.png"
finish
