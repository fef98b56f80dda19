// The QUIC shim (see include/cngtcp2.h): ngtcp2 0.12 and its GnuTLS crypto helper.
#include "cngtcp2.h"
#include "ctls.h"

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <gnutls/gnutls.h>
#include <gnutls/crypto.h>
#include <gnutls/x509.h>
#include <gnutls/abstract.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

_Static_assert(sizeof(cngtcp2_vec) == sizeof(ngtcp2_vec), "cngtcp2_vec is ngtcp2_vec");

// TLS 1.3 only, the ciphers and groups QUIC uses; no middlebox compatibility mode (RFC 9001 §8.4).
static const char *PRIORITY =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"
    "-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1:%DISABLE_TLS13_COMPAT_MODE";

struct cngtcp2_creds {
    gnutls_certificate_credentials_t cred;
    int server;
    int insecure;
    int has_ca;
    int has_pin;
    uint8_t pin[32];
};

struct cngtcp2_conn {
    ngtcp2_conn *conn;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    cngtcp2_events ev;
    cngtcp2_creds *creds;
    char verify_name[256];
    uint8_t secret[32];
    int server;
    int got_reset;
    // Server: the client's address is validated (RFC 9000 §8.1): its Initial carried a token
    // of ours that verified, or a Handshake packet of its decrypted (only the client can make
    // one: it needs the keys from our Initial).
    int address_validated;
    // The timestamp of the packet being read (ns, the caller's clock): what a callback inside
    // ngtcp2_conn_read_pkt that needs the time (the NEW_TOKEN's) reads.
    uint64_t now;
    char err[256];
};

static void set_err(char *err, size_t n, const char *what, int rv) {
    if (err && n) snprintf(err, n, "%s: %s", what, gnutls_strerror(rv));
}

// MARK: credentials

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) { return ((cngtcp2_conn *)ref->user_data)->conn; }

// The client's check of the server certificate: the chain against the trust store (unless only
// a pin is given), then the pin.
static int verify_peer(gnutls_session_t s) {
    ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(s);
    cngtcp2_conn *c = ref->user_data;
    cngtcp2_creds *cr = c->creds;
    if (cr->insecure) return 0;
    if (cr->has_ca || !cr->has_pin) {
        unsigned status = 0;
        int rv = gnutls_certificate_verify_peers3(s, c->verify_name[0] ? c->verify_name : NULL, &status);
        if (rv < 0) { snprintf(c->err, sizeof c->err, "certificate: %s", gnutls_strerror(rv)); return -1; }
        if (status != 0) {
            gnutls_datum_t out = {0};
            gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0);
            snprintf(c->err, sizeof c->err, "certificate verify failed: %s", out.data ? (char *)out.data : "?");
            gnutls_free(out.data);
            return -1;
        }
    }
    if (cr->has_pin) {
        // The key's SHA-256 here (GnuTLS), the check itself in CTLS: one pin policy and one
        // message for TLS over TCP and QUIC.
        unsigned n = 0;
        const gnutls_datum_t *certs = gnutls_certificate_get_peers(s, &n);
        int rv = certs && n > 0 ? 0 : -1;
        gnutls_datum_t der = {0};
        if (rv == 0) {
            gnutls_pubkey_t pk;
            gnutls_pubkey_init(&pk);
            rv = gnutls_pubkey_import_x509_raw(pk, &certs[0], GNUTLS_X509_FMT_DER, 0);
            if (rv >= 0) rv = gnutls_pubkey_export2(pk, GNUTLS_X509_FMT_DER, &der);
            gnutls_pubkey_deinit(pk);
        }
        uint8_t got[32];
        if (rv >= 0) {
            gnutls_hash_fast(GNUTLS_DIG_SHA256, der.data, der.size, got);
            gnutls_free(der.data);
        }
        if (ctls_pin_check(rv >= 0 ? got : NULL, cr->pin, c->err, sizeof c->err) != 0) return -1;
    }
    return 0;
}

cngtcp2_creds *cngtcp2_client_creds_new(const char *ca_file, const uint8_t *pin, int insecure, char *err, size_t errlen) {
    cngtcp2_creds *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    int rv = gnutls_certificate_allocate_credentials(&c->cred);
    if (rv < 0) { set_err(err, errlen, "credentials", rv); free(c); return NULL; }
    c->insecure = insecure;
    if (pin) { c->has_pin = 1; memcpy(c->pin, pin, 32); }
    if (ca_file) {
        rv = gnutls_certificate_set_x509_trust_file(c->cred, ca_file, GNUTLS_X509_FMT_PEM);
        if (rv <= 0) {
            if (err) snprintf(err, errlen, "CA file %s: %s", ca_file, rv == 0 ? "no certificate" : gnutls_strerror(rv));
            cngtcp2_creds_free(c);
            return NULL;
        }
        c->has_ca = 1;
    } else if (!pin && !insecure) {
        rv = gnutls_certificate_set_x509_system_trust(c->cred);
        if (rv < 0) { set_err(err, errlen, "system trust store", rv); cngtcp2_creds_free(c); return NULL; }
    }
    gnutls_certificate_set_verify_function(c->cred, verify_peer);
    return c;
}

cngtcp2_creds *cngtcp2_server_creds_new(const char *cert_file, const char *key_file, char *err, size_t errlen) {
    cngtcp2_creds *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->server = 1;
    int rv = gnutls_certificate_allocate_credentials(&c->cred);
    if (rv < 0) { set_err(err, errlen, "credentials", rv); free(c); return NULL; }
    rv = gnutls_certificate_set_x509_key_file(c->cred, cert_file, key_file, GNUTLS_X509_FMT_PEM);
    if (rv < 0) { set_err(err, errlen, "certificate/key", rv); cngtcp2_creds_free(c); return NULL; }
    return c;
}

void cngtcp2_creds_free(cngtcp2_creds *c) {
    if (!c) return;
    gnutls_certificate_free_credentials(c->cred);
    free(c);
}

// MARK: callbacks into the embedder

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
    (void)ctx;
    gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

static int new_cid_cb(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *ud) {
    (void)conn;
    cngtcp2_conn *c = ud;
    if (gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, cidlen) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    cid->datalen = cidlen;
    if (ngtcp2_crypto_generate_stateless_reset_token(token, c->secret, sizeof c->secret, cid) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    if (c->ev.cid && c->ev.cid(c->ev.ctx, cid->data, cid->datalen, 1) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int remove_cid_cb(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud) {
    (void)conn;
    cngtcp2_conn *c = ud;
    if (c->ev.cid) c->ev.cid(c->ev.ctx, cid->data, cid->datalen, 0);
    return 0;
}

#define FORWARD(call) do { if ((call) != 0) return NGTCP2_ERR_CALLBACK_FAILURE; return 0; } while (0)

static int handshake_completed_cb(ngtcp2_conn *conn, void *ud) {
    cngtcp2_conn *c = ud;
    if (c->server) {
        // A token for the client's next connection from this address (it skips the Retry).
        uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN];
        const ngtcp2_path *p = ngtcp2_conn_get_path(conn);
        ngtcp2_ssize n = ngtcp2_crypto_generate_regular_token(token, c->secret, sizeof c->secret, p->remote.addr,
                                                              p->remote.addrlen, c->now);
        if (n > 0) (void)ngtcp2_conn_submit_new_token(conn, token, (size_t)n);
    }
    if (!c->ev.handshake_done) return 0;
    FORWARD(c->ev.handshake_done(c->ev.ctx));
}

static int recv_stream_data_cb(ngtcp2_conn *conn, uint32_t flags, int64_t sid, uint64_t offset,
                               const uint8_t *data, size_t len, void *ud, void *sud) {
    (void)conn; (void)offset; (void)sud;
    cngtcp2_conn *c = ud;
    FORWARD(c->ev.stream_data(c->ev.ctx, sid, data, len, (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0));
}

static int stream_open_cb(ngtcp2_conn *conn, int64_t sid, void *ud) {
    (void)conn;
    cngtcp2_conn *c = ud;
    FORWARD(c->ev.stream_open(c->ev.ctx, sid));
}

static int stream_close_cb(ngtcp2_conn *conn, uint32_t flags, int64_t sid, uint64_t code, void *ud, void *sud) {
    (void)sud;
    cngtcp2_conn *c = ud;
    // ngtcp2 does not raise the peer's stream limit by itself: one stream of the peer's closed,
    // one more may open (MAX_STREAMS), so at most initial_max_streams_bidi are open at once.
    int peer_bidi = (sid & 3) == (ngtcp2_conn_is_server(conn) ? 0 : 1);
    if (peer_bidi) ngtcp2_conn_extend_max_streams_bidi(conn, 1);
    FORWARD(c->ev.stream_close(c->ev.ctx, sid, code, (flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) != 0));
}

static int stream_reset_cb(ngtcp2_conn *conn, int64_t sid, uint64_t final_size, uint64_t code, void *ud, void *sud) {
    (void)conn; (void)final_size; (void)sud;
    cngtcp2_conn *c = ud;
    FORWARD(c->ev.stream_reset(c->ev.ctx, sid, code));
}

static int stream_stop_sending_cb(ngtcp2_conn *conn, int64_t sid, uint64_t code, void *ud, void *sud) {
    (void)conn; (void)sud;
    cngtcp2_conn *c = ud;
    FORWARD(c->ev.stream_stop_sending(c->ev.ctx, sid, code));
}

static int acked_cb(ngtcp2_conn *conn, int64_t sid, uint64_t offset, uint64_t len, void *ud, void *sud) {
    (void)conn; (void)sud;
    cngtcp2_conn *c = ud;
    FORWARD(c->ev.acked(c->ev.ctx, sid, offset, len));
}

static int extend_stream_cb(ngtcp2_conn *conn, int64_t sid, uint64_t max, void *ud, void *sud) {
    (void)conn; (void)max; (void)sud;
    cngtcp2_conn *c = ud;
    FORWARD(c->ev.stream_extended(c->ev.ctx, sid));
}

static int extend_streams_cb(ngtcp2_conn *conn, uint64_t max, void *ud) {
    (void)conn;
    cngtcp2_conn *c = ud;
    FORWARD(c->ev.streams_extended(c->ev.ctx, max));
}

static int recv_datagram_cb(ngtcp2_conn *conn, uint32_t flags, const uint8_t *data, size_t len, void *ud) {
    (void)conn; (void)flags;
    cngtcp2_conn *c = ud;
    FORWARD(c->ev.datagram(c->ev.ctx, data, len));
}

static int path_validation_cb(ngtcp2_conn *conn, uint32_t flags, const ngtcp2_path *path,
                              ngtcp2_path_validation_result res, void *ud) {
    (void)conn; (void)flags; (void)path;
    cngtcp2_conn *c = ud;
    if (!c->ev.path_validated) return 0;
    FORWARD(c->ev.path_validated(c->ev.ctx, res == NGTCP2_PATH_VALIDATION_RESULT_SUCCESS));
}

static int recv_new_token_cb(ngtcp2_conn *conn, const ngtcp2_vec *token, void *ud) {
    (void)conn;
    cngtcp2_conn *c = ud;
    if (!c->ev.new_token) return 0;
    FORWARD(c->ev.new_token(c->ev.ctx, token->base, token->len));
}

static int recv_stateless_reset_cb(ngtcp2_conn *conn, const ngtcp2_pkt_stateless_reset *sr, void *ud) {
    (void)conn;
    (void)sr;
    ((cngtcp2_conn *)ud)->got_reset = 1;
    return 0;
}

static int recv_crypto_data_cb(ngtcp2_conn *conn, ngtcp2_crypto_level level, uint64_t offset, const uint8_t *data,
                               size_t len, void *ud) {
    if (level == NGTCP2_CRYPTO_LEVEL_HANDSHAKE) ((cngtcp2_conn *)ud)->address_validated = 1;
    return ngtcp2_crypto_recv_crypto_data_cb(conn, level, offset, data, len, ud);
}

static void fill_callbacks(ngtcp2_callbacks *cb, int server) {
    memset(cb, 0, sizeof *cb);
    if (server) {
        cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
    } else {
        cb->client_initial = ngtcp2_crypto_client_initial_cb;
        cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
        cb->recv_new_token = recv_new_token_cb;
    }
    cb->recv_crypto_data = recv_crypto_data_cb;
    cb->encrypt = ngtcp2_crypto_encrypt_cb;
    cb->decrypt = ngtcp2_crypto_decrypt_cb;
    cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
    cb->update_key = ngtcp2_crypto_update_key_cb;
    cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
    cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
    cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
    cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
    cb->rand = rand_cb;
    cb->get_new_connection_id = new_cid_cb;
    cb->remove_connection_id = remove_cid_cb;
    cb->handshake_completed = handshake_completed_cb;
    cb->recv_stream_data = recv_stream_data_cb;
    cb->stream_open = stream_open_cb;
    cb->stream_close = stream_close_cb;
    cb->stream_reset = stream_reset_cb;
    cb->stream_stop_sending = stream_stop_sending_cb;
    cb->acked_stream_data_offset = acked_cb;
    cb->extend_max_stream_data = extend_stream_cb;
    cb->extend_max_local_streams_bidi = extend_streams_cb;
    cb->recv_datagram = recv_datagram_cb;
    cb->path_validation = path_validation_cb;
    cb->recv_stateless_reset = recv_stateless_reset_cb;
}

_Static_assert(CNGTCP2_DEFAULT_MAX_PACKET == NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE,
               "the header's default packet size is ngtcp2's path MTU discovery ceiling");

static void fill_settings(ngtcp2_settings *s, ngtcp2_transport_params *tp, const cngtcp2_params *p, uint64_t now) {
    ngtcp2_settings_default(s);
    s->initial_ts = now;
    // BBR, not CUBIC: ngtcp2 0.12's CUBIC (and Reno) stop growing the window at 2.89 x the
    // highest delivery rate x min_rtt. Where the round trip is mostly the two ends' scheduling
    // (loopback, a LAN: min_rtt 30-70 us, smoothed 150-400 us) that cap held the window at
    // 42-85 KB in slow start with no loss, and the sender waited (docs/holder.md, figures).
    s->cc_algo = NGTCP2_CC_ALGO_BBR;
    s->max_window = p->max_window;
    uint64_t packet = p->max_packet ? p->max_packet : CNGTCP2_DEFAULT_MAX_PACKET;
    s->max_tx_udp_payload_size = (size_t)packet;
    if (packet > CNGTCP2_DEFAULT_MAX_PACKET) {
        // ngtcp2 0.12 probes no size above 1452: a larger one is used as given, from the start.
        s->no_tx_udp_payload_size_shaping = 1;
        s->no_pmtud = 1;
    }
    s->max_stream_window = p->max_stream_window;
    if (p->handshake_timeout_ms) s->handshake_timeout = p->handshake_timeout_ms * NGTCP2_MILLISECONDS;
    ngtcp2_transport_params_default(tp);
    tp->initial_max_data = p->max_data;
    tp->initial_max_stream_data_bidi_local = p->max_stream_data;
    tp->initial_max_stream_data_bidi_remote = p->max_stream_data;
    tp->initial_max_stream_data_uni = p->max_stream_data_uni;
    tp->initial_max_streams_bidi = p->max_streams_bidi;
    tp->initial_max_streams_uni = p->max_streams_uni;
    tp->max_idle_timeout = p->idle_timeout_ms * NGTCP2_MILLISECONDS;
    tp->max_datagram_frame_size = p->max_datagram_frame_size;
    tp->max_udp_payload_size = packet;
    tp->active_connection_id_limit = 4;
}

static int setup_tls(cngtcp2_conn *c, int server, const char *alpn, const char *sni, char *err, size_t errlen) {
    unsigned flags = server ? (GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET) : GNUTLS_CLIENT;
    int rv = gnutls_init(&c->tls, flags | GNUTLS_ENABLE_EARLY_DATA | GNUTLS_NO_END_OF_EARLY_DATA);
    if (rv < 0) { set_err(err, errlen, "gnutls_init", rv); c->tls = NULL; return -1; }
    const char *where = NULL;
    if ((rv = gnutls_priority_set_direct(c->tls, PRIORITY, &where)) < 0) { set_err(err, errlen, "priority", rv); return -1; }
    rv = server ? ngtcp2_crypto_gnutls_configure_server_session(c->tls) : ngtcp2_crypto_gnutls_configure_client_session(c->tls);
    if (rv != 0) { if (err) snprintf(err, errlen, "ngtcp2 crypto setup failed"); return -1; }
    gnutls_session_set_ptr(c->tls, &c->ref);
    if ((rv = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, c->creds->cred)) < 0) {
        set_err(err, errlen, "credentials", rv);
        return -1;
    }
    // `alpn` may list several, comma-separated (the front: "loft,h3").
    gnutls_datum_t proto[4];
    unsigned nproto = 0;
    for (const char *p = alpn; *p && nproto < 4;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        proto[nproto].data = (unsigned char *)p;
        proto[nproto].size = (unsigned)n;
        nproto++;
        p += n + (e ? 1 : 0);
    }
    if ((rv = gnutls_alpn_set_protocols(c->tls, proto, nproto, GNUTLS_ALPN_MANDATORY)) < 0) {
        set_err(err, errlen, "alpn", rv);
        return -1;
    }
    if (!server && sni && sni[0]) gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, sni, strlen(sni));
    return 0;
}

static cngtcp2_conn *conn_alloc(const cngtcp2_events *ev, cngtcp2_creds *creds) {
    cngtcp2_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ev = *ev;
    c->creds = creds;
    c->ref.get_conn = get_conn;
    c->ref.user_data = c;
    return c;
}

static ngtcp2_path make_path(const void *l, unsigned ll, const void *r, unsigned rl) {
    ngtcp2_path p;
    memset(&p, 0, sizeof p);
    p.local.addr = (ngtcp2_sockaddr *)l;
    p.local.addrlen = ll;
    p.remote.addr = (ngtcp2_sockaddr *)r;
    p.remote.addrlen = rl;
    return p;
}

cngtcp2_conn *cngtcp2_client_new(const cngtcp2_events *ev, cngtcp2_creds *creds, const char *sni, const char *alpn,
                             const void *local, unsigned local_len,
                             const void *remote, unsigned remote_len,
                             const cngtcp2_params *params, uint64_t now, char *err, size_t errlen) {
    cngtcp2_conn *c = conn_alloc(ev, creds);
    if (!c) return NULL;
    if (sni) snprintf(c->verify_name, sizeof c->verify_name, "%s", sni);
    gnutls_rnd(GNUTLS_RND_RANDOM, c->secret, sizeof c->secret);
    ngtcp2_cid dcid, scid;
    dcid.datalen = 18;
    scid.datalen = 18;
    gnutls_rnd(GNUTLS_RND_RANDOM, dcid.data, dcid.datalen);
    gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen);
    ngtcp2_callbacks cb;
    fill_callbacks(&cb, 0);
    ngtcp2_settings s;
    ngtcp2_transport_params tp;
    fill_settings(&s, &tp, params, now);
    if (params->token && params->token_len) {
        s.token.base = (uint8_t *)params->token;
        s.token.len = params->token_len;
    }
    ngtcp2_path path = make_path(local, local_len, remote, remote_len);
    int rv = ngtcp2_conn_client_new(&c->conn, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &cb, &s, &tp, NULL, c);
    if (rv != 0) {
        if (err) snprintf(err, errlen, "ngtcp2_conn_client_new: %s", ngtcp2_strerror(rv));
        c->conn = NULL;
        cngtcp2_free(c);
        return NULL;
    }
    // With an IP literal nothing is sent as SNI; the certificate is still checked for it.
    int literal = sni && (strchr(sni, ':') || strspn(sni, "0123456789.") == strlen(sni));
    if (setup_tls(c, 0, alpn, literal ? NULL : sni, err, errlen) != 0) { cngtcp2_free(c); return NULL; }
    ngtcp2_conn_set_tls_native_handle(c->conn, c->tls);
    return c;
}

int cngtcp2_peek_initial(const uint8_t *pkt, size_t len, uint8_t *dcid, size_t *dcid_len) {
    ngtcp2_pkt_hd hd;
    if (len == 0) return 0;   // ngtcp2 asserts on empty input (an empty UDP datagram)
    if (ngtcp2_accept(&hd, pkt, len) != 0) return 0;
    if (hd.dcid.datalen > NGTCP2_MAX_CIDLEN) return 0;
    memcpy(dcid, hd.dcid.data, hd.dcid.datalen);
    *dcid_len = hd.dcid.datalen;
    return 1;
}

int cngtcp2_packet_dcid(const uint8_t *pkt, size_t len, size_t short_len, uint8_t *dcid, size_t *dcid_len) {
    ngtcp2_version_cid vc;
    if (len == 0) return -1;  // ngtcp2 asserts on empty input (an empty UDP datagram)
    int rv = ngtcp2_pkt_decode_version_cid(&vc, pkt, len, short_len);
    if (rv != 0 || vc.dcidlen > NGTCP2_MAX_CIDLEN) return -1;
    memcpy(dcid, vc.dcid, vc.dcidlen);
    *dcid_len = vc.dcidlen;
    return 0;
}

// MARK: stateless answers

static int check_token(const ngtcp2_pkt_hd *hd, const uint8_t *secret, const void *remote, unsigned remote_len,
                       uint64_t now, ngtcp2_cid *odcid) {
    if (hd->token.len == 0) return CNGTCP2_TOKEN_NONE;
    if (hd->token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR) {
        return ngtcp2_crypto_verify_regular_token(hd->token.base, hd->token.len, secret, 32,
                                                  (const ngtcp2_sockaddr *)remote, remote_len,
                                                  CNGTCP2_REGULAR_TOKEN_TIMEOUT_MS * NGTCP2_MILLISECONDS, now) == 0
                   ? CNGTCP2_TOKEN_REGULAR : CNGTCP2_TOKEN_NONE;
    }
    if (hd->token.base[0] != NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) return CNGTCP2_TOKEN_NONE;
    if (ngtcp2_crypto_verify_retry_token(odcid, hd->token.base, hd->token.len, secret, 32, hd->version,
                                         (const ngtcp2_sockaddr *)remote, remote_len, &hd->dcid,
                                         CNGTCP2_RETRY_TOKEN_TIMEOUT_MS * NGTCP2_MILLISECONDS, now) != 0)
        return CNGTCP2_TOKEN_INVALID;
    return CNGTCP2_TOKEN_RETRY;
}

int cngtcp2_initial_token(const uint8_t *pkt, size_t len, const uint8_t *secret,
                        const void *remote, unsigned remote_len, uint64_t now) {
    ngtcp2_pkt_hd hd;
    if (len == 0 || ngtcp2_accept(&hd, pkt, len) != 0) return CNGTCP2_TOKEN_INVALID;
    ngtcp2_cid odcid;
    return check_token(&hd, secret, remote, remote_len, now, &odcid);
}

long cngtcp2_write_retry(uint8_t *dest, size_t destlen, const uint8_t *pkt, size_t len, const uint8_t *secret,
                       const void *remote, unsigned remote_len, uint64_t now) {
    ngtcp2_pkt_hd hd;
    if (len == 0 || ngtcp2_accept(&hd, pkt, len) != 0) return -1;
    ngtcp2_cid scid;
    scid.datalen = 18;
    if (gnutls_rnd(GNUTLS_RND_NONCE, scid.data, scid.datalen) != 0) return -1;
    uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN];
    ngtcp2_ssize tlen = ngtcp2_crypto_generate_retry_token(token, secret, 32, hd.version, (const ngtcp2_sockaddr *)remote,
                                                           remote_len, &scid, &hd.dcid, now);
    if (tlen < 0) return -1;
    // The Retry goes to the client's source id, from the new id, naming the id it first used.
    ngtcp2_ssize n = ngtcp2_crypto_write_retry(dest, destlen, hd.version, &hd.scid, &scid, &hd.dcid, token, (size_t)tlen);
    return n < 0 ? -1 : (long)n;
}

long cngtcp2_write_reset(uint8_t *dest, size_t destlen, const uint8_t *pkt, size_t len, size_t cid_len,
                       const uint8_t *secret) {
    // RFC 9000 §10.3: at least 5 bytes before the 16-byte token; smaller than the packet that
    // triggered it, so two endpoints can never reset each other forever.
    const size_t min = NGTCP2_MIN_STATELESS_RESET_RANDLEN + NGTCP2_STATELESS_RESET_TOKENLEN;
    if (len == 0 || (pkt[0] & 0x80) || cid_len > NGTCP2_MAX_CIDLEN || len < 1 + cid_len || len <= min) return 0;
    size_t size = len - 1;
    if (size > 43) size = 43;
    if (size > destlen) return -1;
    ngtcp2_cid cid;
    cid.datalen = cid_len;
    memcpy(cid.data, pkt + 1, cid_len);
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN];
    if (ngtcp2_crypto_generate_stateless_reset_token(token, secret, 32, &cid) != 0) return -1;
    uint8_t rnd[43];
    size_t randlen = size - NGTCP2_STATELESS_RESET_TOKENLEN;
    if (gnutls_rnd(GNUTLS_RND_NONCE, rnd, randlen) != 0) return -1;
    ngtcp2_ssize n = ngtcp2_pkt_write_stateless_reset(dest, destlen, token, rnd, randlen);
    return n < 0 ? -1 : (long)n;
}

cngtcp2_conn *cngtcp2_server_new(const cngtcp2_events *ev, cngtcp2_creds *creds, const char *alpn,
                             const void *local, unsigned local_len,
                             const void *remote, unsigned remote_len,
                             const uint8_t *pkt, size_t pkt_len, const uint8_t *secret,
                             const cngtcp2_params *params, uint64_t now, char *err, size_t errlen) {
    ngtcp2_pkt_hd hd;
    if (ngtcp2_accept(&hd, pkt, pkt_len) != 0) {
        if (err) snprintf(err, errlen, "not an acceptable Initial");
        return NULL;
    }
    cngtcp2_conn *c = conn_alloc(ev, creds);
    if (!c) return NULL;
    memcpy(c->secret, secret, sizeof c->secret);
    c->server = 1;
    ngtcp2_cid scid;
    scid.datalen = 18;
    gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen);
    ngtcp2_callbacks cb;
    fill_callbacks(&cb, 1);
    ngtcp2_settings s;
    ngtcp2_transport_params tp;
    fill_settings(&s, &tp, params, now);
    // Only a token that verifies marks the address validated (ngtcp2 then lifts the 3x
    // anti-amplification limit): a Retry token names the original destination id and the id
    // the Retry gave out; anything else is as no token.
    ngtcp2_cid odcid;
    int token = check_token(&hd, secret, remote, remote_len, now, &odcid);
    c->address_validated = token == CNGTCP2_TOKEN_RETRY || token == CNGTCP2_TOKEN_REGULAR;
    if (token == CNGTCP2_TOKEN_RETRY) {
        s.token = hd.token;
        tp.original_dcid = odcid;
        tp.retry_scid = hd.dcid;
        tp.retry_scid_present = 1;
    } else {
        if (token == CNGTCP2_TOKEN_REGULAR) s.token = hd.token;
        tp.original_dcid = hd.dcid;
    }
    tp.stateless_reset_token_present = 1;
    ngtcp2_crypto_generate_stateless_reset_token(tp.stateless_reset_token, c->secret, sizeof c->secret, &scid);
    ngtcp2_path path = make_path(local, local_len, remote, remote_len);
    int rv = ngtcp2_conn_server_new(&c->conn, &hd.scid, &scid, &path, hd.version, &cb, &s, &tp, NULL, c);
    if (rv != 0) {
        if (err) snprintf(err, errlen, "ngtcp2_conn_server_new: %s", ngtcp2_strerror(rv));
        c->conn = NULL;
        cngtcp2_free(c);
        return NULL;
    }
    if (setup_tls(c, 1, alpn, NULL, err, errlen) != 0) { cngtcp2_free(c); return NULL; }
    ngtcp2_conn_set_tls_native_handle(c->conn, c->tls);
    // Packets reach the connection by its own id and, until the client switches, by the
    // client's original destination id.
    if (c->ev.cid) {
        c->ev.cid(c->ev.ctx, scid.data, scid.datalen, 1);
        c->ev.cid(c->ev.ctx, hd.dcid.data, hd.dcid.datalen, 1);
    }
    return c;
}

void cngtcp2_free(cngtcp2_conn *c) {
    if (!c) return;
    if (c->conn) ngtcp2_conn_del(c->conn);
    if (c->tls) gnutls_deinit(c->tls);
    free(c);
}

// MARK: packets

int cngtcp2_read(cngtcp2_conn *c, const void *local, unsigned local_len,
               const void *remote, unsigned remote_len,
               const uint8_t *pkt, size_t len, uint64_t now) {
    if (len == 0) return 0;   // an empty UDP datagram carries nothing (and ngtcp2 asserts on it)
    ngtcp2_path path = make_path(local, local_len, remote, remote_len);
    ngtcp2_pkt_info pi = {0};
    c->now = now;
    return ngtcp2_conn_read_pkt(c->conn, &path, &pi, pkt, len, now);
}

static void copy_to(const ngtcp2_path_storage *ps, void *to, unsigned *to_len) {
    if (!to) return;
    size_t n = ps->path.remote.addrlen;
    if (n > sizeof(struct sockaddr_storage)) n = sizeof(struct sockaddr_storage);
    memcpy(to, ps->path.remote.addr, n);
    *to_len = (unsigned)n;
}

long cngtcp2_write_stream(cngtcp2_conn *c, uint8_t *dest, size_t destlen, int64_t sid,
                        const cngtcp2_vec *data, size_t count, int fin, int more,
                        long *consumed, void *to, unsigned *to_len, uint64_t now) {
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    uint32_t flags = (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0) | (more ? NGTCP2_WRITE_STREAM_FLAG_MORE : 0);
    ngtcp2_ssize n = -1;
    ngtcp2_ssize w = ngtcp2_conn_writev_stream(c->conn, &ps.path, &pi, dest, destlen, &n, flags, sid,
                                               (const ngtcp2_vec *)data, count, now);
    *consumed = (long)n;
    if (w > 0) copy_to(&ps, to, to_len);
    return (long)w;
}

long cngtcp2_write_datagram(cngtcp2_conn *c, uint8_t *dest, size_t destlen, const uint8_t *data, size_t len,
                          int *accepted, void *to, unsigned *to_len, uint64_t now) {
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    ngtcp2_vec v = { (uint8_t *)data, len };
    *accepted = 0;
    ngtcp2_ssize w = ngtcp2_conn_writev_datagram(c->conn, &ps.path, &pi, dest, destlen, accepted,
                                                 NGTCP2_WRITE_DATAGRAM_FLAG_NONE, 0, &v, 1, now);
    if (w > 0) copy_to(&ps, to, to_len);
    return (long)w;
}

long cngtcp2_write_close(cngtcp2_conn *c, uint8_t *dest, size_t destlen, uint64_t app_code, int liberr,
                       void *to, unsigned *to_len, uint64_t now) {
    ngtcp2_connection_close_error ccerr;
    ngtcp2_connection_close_error_default(&ccerr);
    if (liberr == NGTCP2_ERR_CRYPTO) {
        ngtcp2_connection_close_error_set_transport_error_tls_alert(&ccerr, ngtcp2_conn_get_tls_alert(c->conn), NULL, 0);
    } else if (liberr != 0) {
        ngtcp2_connection_close_error_set_transport_error_liberr(&ccerr, liberr, NULL, 0);
    } else {
        ngtcp2_connection_close_error_set_application_error(&ccerr, app_code, NULL, 0);
    }
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    ngtcp2_ssize w = ngtcp2_conn_write_connection_close(c->conn, &ps.path, &pi, dest, destlen, &ccerr, now);
    if (w > 0) copy_to(&ps, to, to_len);
    return (long)w;
}

uint64_t cngtcp2_expiry(cngtcp2_conn *c) { return ngtcp2_conn_get_expiry(c->conn); }
int cngtcp2_expire(cngtcp2_conn *c, uint64_t now) { return ngtcp2_conn_handle_expiry(c->conn, now); }
double cngtcp2_pacing_rate(cngtcp2_conn *c) {
    ngtcp2_conn_stat st;
    ngtcp2_conn_get_conn_stat(c->conn, &st);
    return st.pacing_rate;
}
size_t cngtcp2_max_packet(cngtcp2_conn *c) { return ngtcp2_conn_get_max_tx_udp_payload_size(c->conn); }
size_t cngtcp2_path_max_packet(cngtcp2_conn *c) {
    size_t n = ngtcp2_conn_get_path_max_tx_udp_payload_size(c->conn);
    const ngtcp2_transport_params *p = ngtcp2_conn_get_remote_transport_params(c->conn);
    if (p && p->max_udp_payload_size && p->max_udp_payload_size < n) n = (size_t)p->max_udp_payload_size;
    return n;
}

// MARK: streams

int cngtcp2_open_bidi(cngtcp2_conn *c, int64_t *sid) { return ngtcp2_conn_open_bidi_stream(c->conn, sid, NULL); }
int cngtcp2_open_uni(cngtcp2_conn *c, int64_t *sid) { return ngtcp2_conn_open_uni_stream(c->conn, sid, NULL); }
uint64_t cngtcp2_streams_bidi_left(cngtcp2_conn *c) { return ngtcp2_conn_get_streams_bidi_left(c->conn); }
int cngtcp2_shutdown_stream(cngtcp2_conn *c, int64_t sid, uint64_t code) { return ngtcp2_conn_shutdown_stream(c->conn, sid, code); }

int cngtcp2_consumed(cngtcp2_conn *c, int64_t sid, uint64_t n) {
    int rv = ngtcp2_conn_extend_max_stream_offset(c->conn, sid, n);
    ngtcp2_conn_extend_max_offset(c->conn, n);
    return rv == NGTCP2_ERR_STREAM_NOT_FOUND ? 0 : rv;
}

uint64_t cngtcp2_stream_send_room(cngtcp2_conn *c, int64_t sid) {
    uint64_t s = ngtcp2_conn_get_max_stream_data_left(c->conn, sid);
    uint64_t d = ngtcp2_conn_get_max_data_left(c->conn);
    return s < d ? s : d;
}

// MARK: state

int cngtcp2_handshake_done(cngtcp2_conn *c) { return ngtcp2_conn_get_handshake_completed(c->conn); }
int cngtcp2_address_validated(cngtcp2_conn *c) {
    return !c->server || c->address_validated || ngtcp2_conn_get_handshake_completed(c->conn);
}
int cngtcp2_is_closing(cngtcp2_conn *c) {
    return ngtcp2_conn_is_in_closing_period(c->conn) || ngtcp2_conn_is_in_draining_period(c->conn);
}

int cngtcp2_peer_close(cngtcp2_conn *c, uint64_t *code, int *is_app, char *reason, size_t reason_len) {
    ngtcp2_connection_close_error e;
    ngtcp2_conn_get_connection_close_error(c->conn, &e);
    *code = e.error_code;
    *is_app = e.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION;
    if (reason && reason_len) {
        size_t n = e.reasonlen < reason_len - 1 ? e.reasonlen : reason_len - 1;
        if (n) memcpy(reason, e.reason, n);
        reason[n] = 0;
    }
    return 1;
}

void cngtcp2_alpn(cngtcp2_conn *c, char *out, size_t outlen) {
    gnutls_datum_t p = {0};
    out[0] = 0;
    if (c->tls && gnutls_alpn_get_selected_protocol(c->tls, &p) == 0) {
        size_t n = p.size < outlen - 1 ? p.size : outlen - 1;
        memcpy(out, p.data, n);
        out[n] = 0;
    }
}

void cngtcp2_describe(cngtcp2_conn *c, char *out, size_t outlen) {
    char alpn[64];
    cngtcp2_alpn(c, alpn, sizeof alpn);
    const char *cipher = c->tls ? gnutls_cipher_get_name(gnutls_cipher_get(c->tls)) : NULL;
    snprintf(out, outlen, "QUICv1 TLSv1.3 %s%s%s", cipher ? cipher : "?", alpn[0] ? " alpn=" : "", alpn);
}

uint64_t cngtcp2_peer_max_datagram(cngtcp2_conn *c) {
    const ngtcp2_transport_params *p = ngtcp2_conn_get_remote_transport_params(c->conn);
    return p ? p->max_datagram_frame_size : 0;
}

int cngtcp2_migrate(cngtcp2_conn *c, const void *local, unsigned local_len,
                  const void *remote, unsigned remote_len, uint64_t now) {
    ngtcp2_path path = make_path(local, local_len, remote, remote_len);
    return ngtcp2_conn_initiate_migration(c->conn, &path, now);
}

const char *cngtcp2_strerror(int err) { return ngtcp2_strerror(err); }
const char *cngtcp2_last_error(cngtcp2_conn *c) { return c->err; }

int cngtcp2_got_stateless_reset(cngtcp2_conn *c) { return c->got_reset; }
