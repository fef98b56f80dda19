// OpenSSL shim: the only C that includes OpenSSL headers. Plain C types only, so Swift imports
// it cleanly. Every function is called from the event-loop thread; nothing here blocks except
// the file reads in the context constructors (done at start-up).
#ifndef CTLS_H
#define CTLS_H
#include <stddef.h>
#include <stdint.h>

/// Results of ctls_handshake / ctls_read / ctls_write / ctls_shutdown. Non-negative values of
/// read/write are byte counts.
enum {
    CTLS_OK = 0,
    CTLS_WANT_READ = -1,   // retry when the fd is readable
    CTLS_WANT_WRITE = -2,  // retry when the fd is writable
    CTLS_CLOSED = -3,      // the peer closed (close_notify or EOF)
    CTLS_ERROR = -4,       // fatal; ctls_conn_error() says why
};

typedef struct ctls_ctx ctls_ctx;
typedef struct ctls_conn ctls_conn;

/// A client context, TLS 1.3 only (or 1.2 and up: allow_tls12). Verification, in this order of precedence:
///   insecure != 0: no verification at all (only when the configuration says so);
///   otherwise, if ca_file is non-NULL: the chain must verify against that PEM file and the
///     certificate must match the server name given to ctls_conn_new (DNS name or IP literal);
///   if pin_sha256 is non-NULL (32 bytes): the SHA-256 of the server certificate's DER
///     SubjectPublicKeyInfo must equal it (checked after the handshake, before any data);
///     with a pin and no ca_file the chain is not checked (a pinned self-signed certificate);
///   neither ca_file nor pin: the system trust store and the hostname check.
/// allow_tls12: TLS 1.2 is accepted too (servers loft does not control: SSTP's); otherwise
/// TLS 1.3 only.
/// Returns NULL on failure with a message in err.
ctls_ctx *ctls_client_ctx_new(const char *ca_file, const uint8_t *pin_sha256, int insecure,
                              int allow_tls12, char *err, size_t errlen);

/// A server context, TLS 1.3 only, with a PEM certificate chain and private key.
ctls_ctx *ctls_server_ctx_new(const char *cert_file, const char *key_file, char *err, size_t errlen);

/// ALPN in wire format (length-prefixed names). Client: the list offered. Server: the names
/// accepted, in preference order; a client offering none of them fails the handshake, a
/// client offering no ALPN at all is accepted. Returns 0 or -1.
int ctls_ctx_set_alpn(ctls_ctx *ctx, const uint8_t *wire, size_t len);

void ctls_ctx_free(ctls_ctx *ctx);

/// Client: resume TLS sessions. The newest session ticket a server sends on any connection of
/// this context is kept and offered by every later connection (a full handshake when the server
/// declines it). Every connection of the context must go to the same server name. Returns 0 or -1.
int ctls_ctx_enable_resumption(ctls_ctx *ctx);

/// 1 if the peer ended with close_notify (CTLS_CLOSED after it is a clean end; without it, the
/// connection was cut: EOF with no alert).
int ctls_conn_close_notify(ctls_conn *c);

/// 1 if the connection's handshake resumed a session.
int ctls_conn_resumed(ctls_conn *c);

/// A connection over the connected, nonblocking socket fd (not owned: the caller closes it).
/// server_name: client only, the SNI (sent when it is not an IP literal) and the name the
/// certificate must match; NULL on the server side.
ctls_conn *ctls_conn_new(ctls_ctx *ctx, int fd, const char *server_name);
void ctls_conn_free(ctls_conn *c);

int ctls_handshake(ctls_conn *c);
/// Bytes read (> 0) or a CTLS_ code (never 0).
long ctls_read(ctls_conn *c, void *buf, size_t len);
/// Bytes written (> 0, possibly fewer than len) or a CTLS_ code. After CTLS_WANT_WRITE the
/// next call must pass the same bytes again (the buffer may move, it may be longer).
long ctls_write(ctls_conn *c, const void *buf, size_t len);
/// Sends close_notify once (does not wait for the peer's). CTLS_OK, CTLS_WANT_WRITE, CTLS_ERROR.
int ctls_shutdown(ctls_conn *c);
/// The last error's text ("" when none).
const char *ctls_conn_error(ctls_conn *c);
/// The negotiated ALPN name copied into buf (NUL-terminated); its length, 0 when none.
size_t ctls_conn_alpn(ctls_conn *c, char *buf, size_t len);
/// "TLSv1.3" and the cipher suite name, for logs.
const char *ctls_conn_version(ctls_conn *c);
const char *ctls_conn_cipher(ctls_conn *c);

/// SHA-256 of the DER SubjectPublicKeyInfo of the first certificate in a PEM file (the value a
/// client pins). 0 or -1 with a message in err.
int ctls_spki_sha256_file(const char *cert_file, uint8_t out[32], char *err, size_t errlen);

/// The one certificate-pin check, for TLS over TCP (ctls_handshake) and QUIC (CNgtcp2's
/// GnuTLS verify callback): `got` is the SHA-256 of the server certificate's DER
/// SubjectPublicKeyInfo, NULL when the server sent no usable certificate. 0 when it equals
/// `pin` (compared in constant time); else -1 with the reason in err, which names the
/// server's key as a pin (`sha256/BASE64`).
int ctls_pin_check(const uint8_t *got, const uint8_t pin[32], char *err, size_t errlen);

/// Digests and randomness.
void ctls_sha1(const void *data, size_t len, uint8_t out[20]);
void ctls_sha256(const void *data, size_t len, uint8_t out[32]);
typedef struct ctls_sha256_ctx ctls_sha256_ctx;
ctls_sha256_ctx *ctls_sha256_new(void);
void ctls_sha256_update(ctls_sha256_ctx *h, const void *data, size_t len);
/// Writes the digest and frees h.
void ctls_sha256_final(ctls_sha256_ctx *h, uint8_t out[32]);
/// MS-CHAPv2's primitives (RFC 2759), which OpenSSL 3 keeps in its legacy provider: MD4 and
/// single-block DES-ECB with an 8-byte key (parity bits ignored). Both are fetched from a private
/// library context that loads the legacy and default providers once; 0, or -1 when the provider
/// is missing (the message in err).
int ctls_md4(const void *data, size_t len, uint8_t out[16], char *err, size_t errlen);
int ctls_des_ecb(const uint8_t key[8], const uint8_t in[8], uint8_t out[8], char *err, size_t errlen);
/// HMAC with SHA-1 (sha256 == 0, 20 bytes out) or SHA-256 (32 bytes out). 0 or -1.
int ctls_hmac(int sha256, const void *key, size_t keylen, const void *data, size_t len, uint8_t *out);
/// The digest of the peer's certificate (the whole DER), SHA-1 (sha256 == 0, 20 bytes) or
/// SHA-256 (32 bytes): SSTP's crypto binding names the server certificate by it. 0 or -1.
int ctls_conn_peer_cert_hash(ctls_conn *c, int sha256, uint8_t *out);
/// Cryptographically strong random bytes; 0 or -1.
int ctls_random(void *buf, size_t len);

/// WebSocket masking (RFC 6455 5.3), in place: byte i of p is XORed with key[(phase + i) % 4].
/// Plain C here because it is on the data path and C at -O0 is fast enough in debug builds.
void ctls_ws_mask(uint8_t *p, size_t len, const uint8_t key[4], size_t phase);
/// The same masking while copying: dst[i] = src[i] ^ key[(phase + i) % 4] (one pass over the
/// bytes instead of a copy and then a mask). dst and src must not overlap.
void ctls_ws_mask_copy(uint8_t *restrict dst, const uint8_t *restrict src, size_t len, const uint8_t key[4],
                       size_t phase);

/// PBKDF2-HMAC-SHA256 (RFC 8018) of pass with salt, iterations rounds, into key (keylen bytes).
/// Returns 0, or -1 on failure. Blocks for as long as the iterations take: only the command-line
/// tools (loft export / import) call it, never the event loop.
int ctls_pbkdf2_sha256(const uint8_t *pass, size_t passlen, const uint8_t *salt, size_t saltlen,
                       uint32_t iterations, uint8_t *key, size_t keylen);

/// AES-256-GCM with a 12-byte nonce and a 16-byte tag. seal: out gets len bytes of ciphertext
/// followed by the tag (len + 16). open: in is ciphertext followed by the tag (len >= 16), out
/// gets len - 16 bytes. Both return 0; open returns -1 when the tag does not match (a wrong key
/// or a changed byte of in or aad), and nothing in out is to be used then.
int ctls_aes256gcm_seal(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad, size_t aadlen,
                        const uint8_t *in, size_t len, uint8_t *out);
int ctls_aes256gcm_open(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad, size_t aadlen,
                        const uint8_t *in, size_t len, uint8_t *out);

/// QUIC Initial packet protection (RFC 9001 §5, QUIC v1 and v2): HKDF-Extract with SHA-256
/// (out: 32 bytes); HKDF-Expand-Label with an empty context (the "tls13 " prefix added here),
/// outlen 1 … 32; one AES-128-ECB block (the header protection mask); AES-128-GCM open (in is
/// ciphertext then the 16-byte tag, out gets len - 16 bytes). Each returns 0, or -1 (open: the
/// tag does not match).
int ctls_hkdf_extract(const uint8_t *salt, size_t saltlen, const uint8_t *ikm, size_t ikmlen, uint8_t out[32]);
int ctls_hkdf_expand_label(const uint8_t secret[32], const char *label, uint8_t *out, size_t outlen);
int ctls_aes128_ecb(const uint8_t key[16], const uint8_t in[16], uint8_t out[16]);
int ctls_aes128gcm_open(const uint8_t key[16], const uint8_t nonce[12], const uint8_t *aad, size_t aadlen,
                        const uint8_t *in, size_t len, uint8_t *out);

#endif
