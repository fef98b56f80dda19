// OpenSSL shim for loft's carriers: see include/ctls.h. The only file that includes OpenSSL.
#include "ctls.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/provider.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

struct ctls_ctx {
    SSL_CTX *ssl;
    int server;
    int verify_chain;       // client: chain and hostname are checked
    int has_pin;
    uint8_t pin[32];
    uint8_t alpn[256];      // server: accepted names, wire format
    size_t alpn_len;
    SSL_SESSION *resume;    // client with resumption: the newest session the server gave
};

struct ctls_conn {
    SSL *ssl;
    ctls_ctx *ctx;
    int shutdown_sent;
    int close_notify;       // the peer's close_notify arrived
    char err[320];
};

static void put_err(char *err, size_t errlen, const char *what) {
    if (!err || errlen == 0) return;
    unsigned long e = ERR_get_error();
    if (e) {
        char buf[200];
        ERR_error_string_n(e, buf, sizeof buf);
        snprintf(err, errlen, "%s: %s", what, buf);
    } else {
        snprintf(err, errlen, "%s", what);
    }
    ERR_clear_error();
}

static SSL_CTX *base_ctx(const SSL_METHOD *m, int allow_tls12, char *err, size_t errlen) {
    SSL_CTX *s = SSL_CTX_new(m);
    if (!s) { put_err(err, errlen, "SSL_CTX_new"); return NULL; }
    if (SSL_CTX_set_min_proto_version(s, allow_tls12 ? TLS1_2_VERSION : TLS1_3_VERSION) != 1) {
        put_err(err, errlen, allow_tls12 ? "TLS 1.2 not available" : "TLS 1.3 not available");
        SSL_CTX_free(s);
        return NULL;
    }
    // Partial writes and a buffer that may move between retries: the carrier's output buffer
    // is compacted while a write waits. Read-ahead: one recv per burst of records, not two
    // per record.
    SSL_CTX_set_mode(s, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(s, 1);
    SSL_CTX_set_default_read_buffer_len(s, 64 * 1024);
    SSL_CTX_set_options(s, SSL_OP_NO_COMPRESSION);
    return s;
}

ctls_ctx *ctls_client_ctx_new(const char *ca_file, const uint8_t *pin_sha256, int insecure,
                              int allow_tls12, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    SSL_CTX *s = base_ctx(TLS_client_method(), allow_tls12, err, errlen);
    if (!s) return NULL;
    ctls_ctx *c = calloc(1, sizeof *c);
    if (!c) { SSL_CTX_free(s); snprintf(err, errlen, "out of memory"); return NULL; }
    c->ssl = s;
    if (insecure) {
        SSL_CTX_set_verify(s, SSL_VERIFY_NONE, NULL);
        return c;
    }
    if (pin_sha256) {
        c->has_pin = 1;
        memcpy(c->pin, pin_sha256, 32);
    }
    if (ca_file) {
        if (SSL_CTX_load_verify_locations(s, ca_file, NULL) != 1) {
            char what[300];
            snprintf(what, sizeof what, "cannot load CA file %s", ca_file);
            put_err(err, errlen, what);
            ctls_ctx_free(c);
            return NULL;
        }
        c->verify_chain = 1;
    } else if (!pin_sha256) {
        if (SSL_CTX_set_default_verify_paths(s) != 1) {
            put_err(err, errlen, "cannot load the system trust store");
            ctls_ctx_free(c);
            return NULL;
        }
        c->verify_chain = 1;
    }
    SSL_CTX_set_verify(s, c->verify_chain ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    return c;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl;
    ctls_ctx *c = arg;
    if (c->alpn_len == 0) return SSL_TLSEXT_ERR_NOACK;
    unsigned char *o = NULL;
    if (SSL_select_next_proto(&o, outlen, c->alpn, (unsigned)c->alpn_len, in, inlen)
        != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = o;
    return SSL_TLSEXT_ERR_OK;
}

ctls_ctx *ctls_server_ctx_new(const char *cert_file, const char *key_file, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    SSL_CTX *s = base_ctx(TLS_server_method(), 0, err, errlen);
    if (!s) return NULL;
    ctls_ctx *c = calloc(1, sizeof *c);
    if (!c) { SSL_CTX_free(s); snprintf(err, errlen, "out of memory"); return NULL; }
    c->ssl = s;
    c->server = 1;
    char what[300];
    if (SSL_CTX_use_certificate_chain_file(s, cert_file) != 1) {
        snprintf(what, sizeof what, "cannot load certificate %s", cert_file);
        put_err(err, errlen, what);
        ctls_ctx_free(c);
        return NULL;
    }
    if (SSL_CTX_use_PrivateKey_file(s, key_file, SSL_FILETYPE_PEM) != 1) {
        snprintf(what, sizeof what, "cannot load private key %s", key_file);
        put_err(err, errlen, what);
        ctls_ctx_free(c);
        return NULL;
    }
    if (SSL_CTX_check_private_key(s) != 1) {
        put_err(err, errlen, "the private key does not match the certificate");
        ctls_ctx_free(c);
        return NULL;
    }
    // No resumption: one handshake per carrier connection, no tickets to send.
    SSL_CTX_set_num_tickets(s, 0);
    SSL_CTX_set_options(s, SSL_OP_NO_TICKET);
    SSL_CTX_set_alpn_select_cb(s, alpn_select, c);
    return c;
}

int ctls_ctx_set_alpn(ctls_ctx *ctx, const uint8_t *wire, size_t len) {
    if (len > sizeof ctx->alpn) return -1;
    if (ctx->server) {
        memcpy(ctx->alpn, wire, len);
        ctx->alpn_len = len;
        return 0;
    }
    return SSL_CTX_set_alpn_protos(ctx->ssl, wire, (unsigned)len) == 0 ? 0 : -1;
}

// A session ticket arrived: keep the newest (the reference is ours from here on).
static int new_session(SSL *ssl, SSL_SESSION *sess) {
    ctls_ctx *c = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    if (!c) return 0;
    if (c->resume) SSL_SESSION_free(c->resume);
    c->resume = sess;
    return 1;
}

int ctls_ctx_enable_resumption(ctls_ctx *ctx) {
    if (!ctx || ctx->server) return -1;
    SSL_CTX_set_app_data(ctx->ssl, ctx);
    SSL_CTX_set_session_cache_mode(ctx->ssl, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx->ssl, new_session);
    return 0;
}

int ctls_conn_close_notify(ctls_conn *c) { return c && c->close_notify ? 1 : 0; }

int ctls_conn_resumed(ctls_conn *c) { return c && SSL_session_reused(c->ssl) ? 1 : 0; }

void ctls_ctx_free(ctls_ctx *ctx) {
    if (!ctx) return;
    if (ctx->resume) SSL_SESSION_free(ctx->resume);
    SSL_CTX_free(ctx->ssl);
    free(ctx);
}

static int is_ip_literal(const char *name) {
    if (strchr(name, ':')) return 1;  // IPv6
    for (const char *p = name; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == '.')) return 0;
    return 1;
}

ctls_conn *ctls_conn_new(ctls_ctx *ctx, int fd, const char *server_name) {
    ctls_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ctx = ctx;
    c->ssl = SSL_new(ctx->ssl);
    if (!c->ssl) { free(c); return NULL; }
    if (SSL_set_fd(c->ssl, fd) != 1) { SSL_free(c->ssl); free(c); return NULL; }
    if (ctx->server) {
        SSL_set_accept_state(c->ssl);
    } else {
        SSL_set_connect_state(c->ssl);
        if (ctx->resume && SSL_SESSION_is_resumable(ctx->resume)) SSL_set_session(c->ssl, ctx->resume);
        if (server_name && *server_name) {
            int ip = is_ip_literal(server_name);
            if (!ip) SSL_set_tlsext_host_name(c->ssl, server_name);
            if (ctx->verify_chain) {
                int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), server_name)
                            : SSL_set1_host(c->ssl, server_name);
                if (ok != 1) { SSL_free(c->ssl); free(c); ERR_clear_error(); return NULL; }
            }
        }
    }
    return c;
}

void ctls_conn_free(ctls_conn *c) {
    if (!c) return;
    SSL_free(c->ssl);
    free(c);
}

// Maps an OpenSSL failure to a CTLS_ code, filling c->err on errors.
static int classify(ctls_conn *c, int ret, const char *op) {
    int e = SSL_get_error(c->ssl, ret);
    switch (e) {
    case SSL_ERROR_WANT_READ: return CTLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE: return CTLS_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN: ERR_clear_error(); c->close_notify = 1; return CTLS_CLOSED;
    case SSL_ERROR_SYSCALL: {
        int saved = errno;
        if (ERR_peek_error() == 0) {
            if (saved == 0) return CTLS_CLOSED;
            snprintf(c->err, sizeof c->err, "%s: %s", op, strerror(saved));
            return CTLS_ERROR;
        }
        break;
    }
    case SSL_ERROR_SSL: {
        unsigned long top = ERR_peek_error();
        if (ERR_GET_LIB(top) == ERR_LIB_SSL && ERR_GET_REASON(top) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
            ERR_clear_error();
            return CTLS_CLOSED;
        }
        break;
    }
    default: break;
    }
    long vr = SSL_get_verify_result(c->ssl);
    if (!c->ctx->server && vr != X509_V_OK) {
        snprintf(c->err, sizeof c->err, "certificate verify failed: %s",
                 X509_verify_cert_error_string(vr));
        ERR_clear_error();
        return CTLS_ERROR;
    }
    put_err(c->err, sizeof c->err, op);
    return CTLS_ERROR;
}

static int spki_sha256(X509 *cert, uint8_t out[32]) {
    X509_PUBKEY *pk = X509_get_X509_PUBKEY(cert);
    if (!pk) return -1;
    int n = i2d_X509_PUBKEY(pk, NULL);
    if (n <= 0) return -1;
    unsigned char *der = OPENSSL_malloc((size_t)n);
    if (!der) return -1;
    unsigned char *p = der;
    i2d_X509_PUBKEY(pk, &p);
    SHA256(der, (size_t)n, out);
    OPENSSL_free(der);
    return 0;
}

int ctls_handshake(ctls_conn *c) {
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r != 1) {
        int k = classify(c, r, "TLS handshake");
        if (k == CTLS_CLOSED) {
            snprintf(c->err, sizeof c->err, "TLS handshake: the peer closed the connection");
            return CTLS_ERROR;
        }
        return k;
    }
    if (!c->ctx->server && c->ctx->has_pin) {
        X509 *cert = SSL_get0_peer_certificate(c->ssl);
        uint8_t got[32];
        int usable = cert && spki_sha256(cert, got) == 0;
        if (ctls_pin_check(usable ? got : NULL, c->ctx->pin, c->err, sizeof c->err) != 0) return CTLS_ERROR;
    }
    return CTLS_OK;
}

int ctls_pin_check(const uint8_t *got, const uint8_t pin[32], char *err, size_t errlen) {
    if (!got) {
        snprintf(err, errlen, "certificate pin: the server sent no usable certificate");
        return -1;
    }
    if (CRYPTO_memcmp(got, pin, 32) != 0) {
        unsigned char b64[64];
        EVP_EncodeBlock(b64, got, 32);
        snprintf(err, errlen, "certificate pin mismatch: the server's key is sha256/%s", (const char *)b64);
        return -1;
    }
    return 0;
}

// Before a read or write: SSL_get_error reads the thread's error queue, so it must hold nothing
// older. Usually it is empty, and looking costs a few ns where ERR_clear_error (which walks all
// of its slots) costs about 230 (measured here, OpenSSL 3.0).
static inline void clear_errors(void) {
    if (ERR_peek_error() != 0) ERR_clear_error();
}

long ctls_read(ctls_conn *c, void *buf, size_t len) {
    clear_errors();
    size_t got = 0;
    int r = SSL_read_ex(c->ssl, buf, len, &got);
    if (r == 1) return (long)got;
    return classify(c, 0, "TLS read");
}

long ctls_write(ctls_conn *c, const void *buf, size_t len) {
    clear_errors();
    size_t put = 0;
    int r = SSL_write_ex(c->ssl, buf, len, &put);
    if (r == 1) return (long)put;
    int k = classify(c, 0, "TLS write");
    return k == CTLS_CLOSED ? CTLS_ERROR : k;
}

int ctls_shutdown(ctls_conn *c) {
    if (c->shutdown_sent) return CTLS_OK;
    ERR_clear_error();
    int r = SSL_shutdown(c->ssl);
    if (r >= 0) { c->shutdown_sent = 1; return CTLS_OK; }
    int k = classify(c, r, "TLS shutdown");
    if (k == CTLS_WANT_WRITE) return k;
    c->shutdown_sent = 1;
    return k == CTLS_WANT_READ ? CTLS_OK : CTLS_ERROR;
}

const char *ctls_conn_error(ctls_conn *c) { return c->err; }

size_t ctls_conn_alpn(ctls_conn *c, char *buf, size_t len) {
    const unsigned char *p = NULL;
    unsigned n = 0;
    SSL_get0_alpn_selected(c->ssl, &p, &n);
    if (!p || n == 0 || len == 0) { if (len) buf[0] = 0; return 0; }
    if (n >= len) n = (unsigned)len - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    return n;
}

const char *ctls_conn_version(ctls_conn *c) { return SSL_get_version(c->ssl); }
const char *ctls_conn_cipher(ctls_conn *c) { return SSL_get_cipher_name(c->ssl); }

int ctls_spki_sha256_file(const char *cert_file, uint8_t out[32], char *err, size_t errlen) {
    FILE *f = fopen(cert_file, "r");
    if (!f) { snprintf(err, errlen, "cannot open %s: %s", cert_file, strerror(errno)); return -1; }
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!x) { put_err(err, errlen, "not a PEM certificate"); return -1; }
    int r = spki_sha256(x, out);
    X509_free(x);
    if (r != 0) snprintf(err, errlen, "cannot encode the public key");
    return r;
}

void ctls_sha1(const void *data, size_t len, uint8_t out[20]) { SHA1(data, len, out); }
void ctls_sha256(const void *data, size_t len, uint8_t out[32]) { SHA256(data, len, out); }

struct ctls_sha256_ctx { EVP_MD_CTX *md; };

ctls_sha256_ctx *ctls_sha256_new(void) {
    ctls_sha256_ctx *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->md = EVP_MD_CTX_new();
    if (!h->md || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->md);
        free(h);
        return NULL;
    }
    return h;
}

void ctls_sha256_update(ctls_sha256_ctx *h, const void *data, size_t len) {
    EVP_DigestUpdate(h->md, data, len);
}

void ctls_sha256_final(ctls_sha256_ctx *h, uint8_t out[32]) {
    unsigned n = 32;
    EVP_DigestFinal_ex(h->md, out, &n);
    EVP_MD_CTX_free(h->md);
    free(h);
}

// MD4 and DES live in OpenSSL 3's legacy provider: a private library context loads it (and the
// default provider) the first time, so the global context's providers stay as they are.
// Loaded once per process (pthread_once: unit tests call in from several threads).
static EVP_MD *legacy_md4;
static EVP_CIPHER *legacy_des;
static char legacy_err[200];
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;

static void legacy_init(void) {
    OSSL_LIB_CTX *ctx = OSSL_LIB_CTX_new();
    if (!ctx) { snprintf(legacy_err, sizeof legacy_err, "cannot make an OpenSSL library context"); return; }
    if (!OSSL_PROVIDER_load(ctx, "legacy") || !OSSL_PROVIDER_load(ctx, "default")) {
        put_err(legacy_err, sizeof legacy_err, "OpenSSL's legacy provider (MD4, DES for MS-CHAPv2)");
        return;
    }
    legacy_md4 = EVP_MD_fetch(ctx, "MD4", NULL);
    legacy_des = EVP_CIPHER_fetch(ctx, "DES-ECB", NULL);
    if (!legacy_md4 || !legacy_des) put_err(legacy_err, sizeof legacy_err, "MD4 or DES-ECB from OpenSSL's legacy provider");
}

static int legacy_load(char *err, size_t errlen) {
    pthread_once(&legacy_once, legacy_init);
    if (legacy_md4 && legacy_des) return 0;
    snprintf(err, errlen, "%s", legacy_err);
    return -1;
}

int ctls_md4(const void *data, size_t len, uint8_t out[16], char *err, size_t errlen) {
    if (legacy_load(err, errlen) != 0) return -1;
    unsigned n = 16;
    if (EVP_Digest(data, len, out, &n, legacy_md4, NULL) != 1 || n != 16) {
        put_err(err, errlen, "MD4");
        return -1;
    }
    return 0;
}

int ctls_des_ecb(const uint8_t key[8], const uint8_t in[8], uint8_t out[8], char *err, size_t errlen) {
    if (legacy_load(err, errlen) != 0) return -1;
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    int n = 0, m = 0, ok = x && EVP_EncryptInit_ex2(x, legacy_des, key, NULL, NULL) == 1
        && EVP_CIPHER_CTX_set_padding(x, 0) == 1
        && EVP_EncryptUpdate(x, out, &n, in, 8) == 1
        && EVP_EncryptFinal_ex(x, out + n, &m) == 1 && n + m == 8;
    EVP_CIPHER_CTX_free(x);
    if (!ok) { put_err(err, errlen, "DES-ECB"); return -1; }
    return 0;
}

int ctls_hmac(int sha256, const void *key, size_t keylen, const void *data, size_t len, uint8_t *out) {
    unsigned n = 0;
    return HMAC(sha256 ? EVP_sha256() : EVP_sha1(), key, (int)keylen, data, len, out, &n) ? 0 : -1;
}

int ctls_conn_peer_cert_hash(ctls_conn *c, int sha256, uint8_t *out) {
    X509 *cert = SSL_get0_peer_certificate(c->ssl);
    if (!cert) return -1;
    unsigned n = 0;
    return X509_digest(cert, sha256 ? EVP_sha256() : EVP_sha1(), out, &n) == 1 ? 0 : -1;
}

int ctls_random(void *buf, size_t len) { return RAND_bytes(buf, (int)len) == 1 ? 0 : -1; }

// WebSocket masking. The key repeated to 8 bytes from `phase`; the bulk goes 64 bytes a step in
// 16-byte SSE2 vectors (the x86-64 baseline; 32-byte AVX2 ones measured slower here, the bytes
// being in cache), then 8 bytes, then single bytes. Masking in place is dst == src.
typedef uint8_t ctls_v16 __attribute__((vector_size(16)));

static inline void mask_key8(const uint8_t key[4], size_t phase, uint8_t k[8]) {
    for (int i = 0; i < 8; i++) k[i] = key[(phase + (size_t)i) & 3];
}

static size_t mask_bulk_sse2(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t k[8]) {
    ctls_v16 kv;
    for (int i = 0; i < 16; i++) kv[i] = k[i & 7];
    size_t i = 0;
    for (; i + 64 <= len; i += 64) {
        ctls_v16 a, b, c, d;
        memcpy(&a, src + i, 16); memcpy(&b, src + i + 16, 16);
        memcpy(&c, src + i + 32, 16); memcpy(&d, src + i + 48, 16);
        a ^= kv; b ^= kv; c ^= kv; d ^= kv;
        memcpy(dst + i, &a, 16); memcpy(dst + i + 16, &b, 16);
        memcpy(dst + i + 32, &c, 16); memcpy(dst + i + 48, &d, 16);
    }
    return i;
}

static void ws_mask_run(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t key[4], size_t phase) {
    uint8_t k[8];
    mask_key8(key, phase, k);
    size_t i = 0;
    // The bulk step is a multiple of 8 bytes: the key's phase is the same after it.
    if (len >= 64) i = mask_bulk_sse2(dst, src, len, k);
    uint64_t k64;
    memcpy(&k64, k, 8);
    for (; i + 8 <= len; i += 8) {
        uint64_t a;
        memcpy(&a, src + i, 8);
        a ^= k64;
        memcpy(dst + i, &a, 8);
    }
    for (; i < len; i++) dst[i] = src[i] ^ k[i & 7];
}

void ctls_ws_mask(uint8_t *p, size_t len, const uint8_t key[4], size_t phase) {
    ws_mask_run(p, p, len, key, phase);
}

void ctls_ws_mask_copy(uint8_t *restrict dst, const uint8_t *restrict src, size_t len, const uint8_t key[4],
                       size_t phase) {
    ws_mask_run(dst, src, len, key, phase);
}

// MARK: passphrase encryption (loft export --encrypt)

int ctls_pbkdf2_sha256(const uint8_t *pass, size_t passlen, const uint8_t *salt, size_t saltlen,
                       uint32_t iterations, uint8_t *key, size_t keylen) {
    if (iterations == 0 || iterations > INT32_MAX) return -1;
    return PKCS5_PBKDF2_HMAC((const char *)pass, (int)passlen, salt, (int)saltlen, (int)iterations,
                             EVP_sha256(), (int)keylen, key) == 1 ? 0 : -1;
}

static int gcm(int enc, const EVP_CIPHER *cipher, const uint8_t *key, const uint8_t nonce[12], const uint8_t *aad,
               size_t aadlen, const uint8_t *in, size_t len, uint8_t *out, uint8_t tag[16]) {
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c) return -1;
    int ok = 0, n = 0;
    if (EVP_CipherInit_ex(c, cipher, NULL, NULL, NULL, enc) != 1) goto done;
    if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) != 1) goto done;
    if (EVP_CipherInit_ex(c, NULL, NULL, key, nonce, enc) != 1) goto done;
    if (aadlen > 0 && EVP_CipherUpdate(c, NULL, &n, aad, (int)aadlen) != 1) goto done;
    if (len > 0 && EVP_CipherUpdate(c, out, &n, in, (int)len) != 1) goto done;
    if (!enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, tag) != 1) goto done;
    if (EVP_CipherFinal_ex(c, out + len, &n) != 1) goto done;
    if (enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag) != 1) goto done;
    ok = 1;
done:
    EVP_CIPHER_CTX_free(c);
    return ok ? 0 : -1;
}

int ctls_aes256gcm_seal(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad, size_t aadlen,
                        const uint8_t *in, size_t len, uint8_t *out) {
    if (len > INT32_MAX - 16) return -1;
    return gcm(1, EVP_aes_256_gcm(), key, nonce, aad, aadlen, in, len, out, out + len);
}

// Opens `in` (ciphertext, then its 16-byte tag) with `cipher`.
static int gcm_open(const EVP_CIPHER *cipher, const uint8_t *key, const uint8_t nonce[12], const uint8_t *aad,
                    size_t aadlen, const uint8_t *in, size_t len, uint8_t *out) {
    if (len < 16 || len > INT32_MAX) return -1;
    uint8_t tag[16];
    memcpy(tag, in + len - 16, 16);
    return gcm(0, cipher, key, nonce, aad, aadlen, in, len - 16, out, tag);
}

int ctls_aes256gcm_open(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad, size_t aadlen,
                        const uint8_t *in, size_t len, uint8_t *out) {
    return gcm_open(EVP_aes_256_gcm(), key, nonce, aad, aadlen, in, len, out);
}

// QUIC Initial packet protection (RFC 9001 §5).

int ctls_hkdf_extract(const uint8_t *salt, size_t saltlen, const uint8_t *ikm, size_t ikmlen, uint8_t out[32]) {
    unsigned n = 0;
    return HMAC(EVP_sha256(), salt, (int)saltlen, ikm, ikmlen, out, &n) && n == 32 ? 0 : -1;
}

int ctls_hkdf_expand_label(const uint8_t secret[32], const char *label, uint8_t *out, size_t outlen) {
    // HkdfLabel (RFC 8446 §7.1) with an empty context; outlen <= 32 needs T(1) only.
    size_t ll = strlen(label);
    if (outlen == 0 || outlen > 32 || ll > 255 - 6) return -1;
    uint8_t info[2 + 1 + 255 + 1 + 1], t[32];
    size_t i = 0;
    info[i++] = 0;
    info[i++] = (uint8_t)outlen;
    info[i++] = (uint8_t)(6 + ll);
    memcpy(info + i, "tls13 ", 6); i += 6;
    memcpy(info + i, label, ll); i += ll;
    info[i++] = 0;     // context
    info[i++] = 1;     // T(1)'s counter
    unsigned n = 0;
    if (!HMAC(EVP_sha256(), secret, 32, info, i, t, &n) || n != 32) return -1;
    memcpy(out, t, outlen);
    return 0;
}

int ctls_aes128_ecb(const uint8_t key[16], const uint8_t in[16], uint8_t out[16]) {
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    int n = 0, m = 0, ok = x && EVP_EncryptInit_ex(x, EVP_aes_128_ecb(), NULL, key, NULL) == 1
        && EVP_CIPHER_CTX_set_padding(x, 0) == 1
        && EVP_EncryptUpdate(x, out, &n, in, 16) == 1
        && EVP_EncryptFinal_ex(x, out + n, &m) == 1 && n + m == 16;
    EVP_CIPHER_CTX_free(x);
    return ok ? 0 : -1;
}

int ctls_aes128gcm_open(const uint8_t key[16], const uint8_t nonce[12], const uint8_t *aad, size_t aadlen,
                        const uint8_t *in, size_t len, uint8_t *out) {
    return gcm_open(EVP_aes_128_gcm(), key, nonce, aad, aadlen, in, len, out);
}
