# A named HTTPS site in the srv namespace, for the tests that reach hosts by name (sniff.test.sh,
# fakeip.test.sh). Source after lib.sh, call after start_v2ray (its CA signs the site).

# site_cert NAME...: $PKI/site.pem and site.key (PKI=$T_DIR/pki) for the NAMEs, the first the
# subject, signed by start_v2ray's CA.
site_cert() {
    PKI=$T_DIR/pki
    local san
    san=$(printf 'DNS:%s,' "$@")
    (
        cd "$PKI" || exit 1
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
            -keyout site.key -out site.csr 2>/dev/null || exit 1
        printf 'subjectAltName=%s\n' "${san%,}" >site.ext
        openssl x509 -req -in site.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile site.ext -out site.pem 2>/dev/null || exit 1
        chmod 644 ./*
    ) || die "openssl: the site certificate"
}

# start_site_nginx [http]: nginx in srv on SRV4:443 with the site certificate (and :80 with
# `http`), serving $T_DIR/www; /slow/ rate limited to 64 KB/s.
start_site_nginx() {
    local d=$T_DIR/nginx http=
    [ "${1:-}" = http ] && http="listen $SRV4:80;"
    mkdir -p "$d/tmp"
    cat >"$d/nginx.conf" <<NGINX
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log warn;
daemon off;
events { worker_connections 256; }
http {
    access_log $d/access.log;
    default_type application/octet-stream;
$(nginx_temp_paths "$d")
    server {
        $http
        listen $SRV4:443 ssl;
        ssl_certificate $PKI/site.pem;
        ssl_certificate_key $PKI/site.key;
        root $T_DIR/www;
        location /slow/ { limit_rate 64k; }
    }
}
NGINX
    bg_in "$SRV_NS" nginx nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf"
    wait_listen "$SRV_NS" tcp 443 || die "nginx did not start: $(tail -3 "$d/error.log" 2>/dev/null)"
}
