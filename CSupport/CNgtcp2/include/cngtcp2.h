#ifndef CNGTCP2_H
#define CNGTCP2_H
// The QUIC shim: ngtcp2 0.12 (the pre-1.0 API) with its GnuTLS crypto helper, behind a
// plain-C API. One `cngtcp2_conn` is one QUIC connection (client or server) with its TLS
// session; it never touches a socket or a clock: packets and timestamps come from the caller
// (LoftCarriers.QuicConnection drives it from the event loop).
#include <stddef.h>
#include <stdint.h>

/// Certificate credentials (GnuTLS), shared by every connection of a dialer or listener.
typedef struct cngtcp2_creds cngtcp2_creds;

/// Client: trust `ca_file` (PEM), or the system store when neither it nor `pin` is given;
/// `pin` is the SHA-256 of the server certificate's DER SubjectPublicKeyInfo (32 bytes);
/// `insecure` turns verification off. NULL on failure with the reason in `err`.
cngtcp2_creds *cngtcp2_client_creds_new(const char *ca_file, const uint8_t *pin, int insecure, char *err, size_t errlen);
/// Server: a PEM chain and its key.
cngtcp2_creds *cngtcp2_server_creds_new(const char *cert_file, const char *key_file, char *err, size_t errlen);
void cngtcp2_creds_free(cngtcp2_creds *c);

/// Events of one connection, called from inside cngtcp2_read / cngtcp2_write_* / cngtcp2_expire.
/// A nonzero return fails the call (NGTCP2_ERR_CALLBACK_FAILURE).
typedef struct cngtcp2_events {
    void *ctx;
    int (*handshake_done)(void *ctx);
    /// In-order stream bytes (ngtcp2 reassembles); `fin` on the last.
    int (*stream_data)(void *ctx, int64_t stream_id, const uint8_t *data, size_t len, int fin);
    /// A stream the peer opened (its first frame arrived).
    int (*stream_open)(void *ctx, int64_t stream_id);
    /// Both directions are done (or reset); `has_code`: with an application error code.
    int (*stream_close)(void *ctx, int64_t stream_id, uint64_t code, int has_code);
    /// RESET_STREAM from the peer (its sending side aborted).
    int (*stream_reset)(void *ctx, int64_t stream_id, uint64_t code);
    /// STOP_SENDING from the peer (it reads no more).
    int (*stream_stop_sending)(void *ctx, int64_t stream_id, uint64_t code);
    /// The peer acknowledged `len` more bytes of the stream (from its start, in order).
    int (*acked)(void *ctx, int64_t stream_id, uint64_t offset, uint64_t len);
    /// The peer raised a stream's flow-control limit.
    int (*stream_extended)(void *ctx, int64_t stream_id);
    /// The peer allows more bidirectional streams.
    int (*streams_extended)(void *ctx, uint64_t max_streams);
    /// A DATAGRAM frame (RFC 9221).
    int (*datagram)(void *ctx, const uint8_t *data, size_t len);
    /// Server: a connection id of ours to route by (`add` 1) or to forget (`add` 0).
    int (*cid)(void *ctx, const uint8_t *cid, size_t len, int add);
    /// Client: the result of a migration's path validation.
    int (*path_validated)(void *ctx, int ok);
    /// Client: a NEW_TOKEN from the server (RFC 9000 §8.1.3), for its next connection's Initial.
    int (*new_token)(void *ctx, const uint8_t *token, size_t len);
} cngtcp2_events;

/// Transport limits for one connection.
typedef struct cngtcp2_params {
    uint64_t max_data;            // connection receive window
    uint64_t max_stream_data;     // per stream receive window
    uint64_t max_window;          // auto-tuning cap (connection)
    uint64_t max_stream_window;   // auto-tuning cap (stream)
    uint64_t max_streams_bidi;    // streams the peer may open
    uint64_t idle_timeout_ms;
    uint64_t handshake_timeout_ms;
    uint64_t max_datagram_frame_size;  // 0: no DATAGRAM frames
    /// Client: a token from a NEW_TOKEN of an earlier connection to the same server, sent in the
    /// Initial (NULL: none). Server: unused.
    const uint8_t *token;
    size_t token_len;
    uint64_t max_streams_uni;     // unidirectional streams the peer may open (h3: 8; quic: 0)
    uint64_t max_stream_data_uni; // per unidirectional stream receive window
    /// The largest UDP payload sent, and the max_udp_payload_size announced (what this end
    /// takes). 0: CNGTCP2_DEFAULT_MAX_PACKET, packets from 1200 bytes up as path MTU discovery
    /// finds room. Above it: every packet up to this size from the start, no discovery (the
    /// path is said to carry them). Sent packets never exceed what the peer announced.
    uint64_t max_packet;
} cngtcp2_params;

/// ngtcp2 0.12's ceiling for path MTU discovery (1500 - 48: an IPv6 and UDP header), its
/// NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE (checked where the shim includes ngtcp2).
#define CNGTCP2_DEFAULT_MAX_PACKET 1452

typedef struct cngtcp2_conn cngtcp2_conn;

/// One piece of stream data (the layout of ngtcp2_vec).
typedef struct cngtcp2_vec {
    const uint8_t *base;
    size_t len;
} cngtcp2_vec;

/// Addresses are `struct sockaddr` of `len` bytes; `to` buffers hold 128 bytes (sockaddr_storage).

/// A client connection on the path local → remote, offering `alpn`; `sni` (may be NULL: an IP
/// literal) is sent and, unless insecure, checked against the certificate.
cngtcp2_conn *cngtcp2_client_new(const cngtcp2_events *ev, cngtcp2_creds *creds, const char *sni, const char *alpn,
                             const void *local, unsigned local_len,
                             const void *remote, unsigned remote_len,
                             const cngtcp2_params *params, uint64_t now_ns, char *err, size_t errlen);

/// What the first packet of an unknown connection id is: 1 an Initial to accept, 0 something
/// to drop (short header, garbage, another version). Fills the packet's DCID.
int cngtcp2_peek_initial(const uint8_t *pkt, size_t len, uint8_t *dcid, size_t *dcid_len);
/// The destination connection id of any packet (short header: `short_len` bytes); 0 or -1.
int cngtcp2_packet_dcid(const uint8_t *pkt, size_t len, size_t short_len, uint8_t *dcid, size_t *dcid_len);

/// A server connection for an accepted Initial. `secret` (32 bytes) derives stateless reset
/// tokens. The connection's ids are reported through `ev->cid` before this returns.
cngtcp2_conn *cngtcp2_server_new(const cngtcp2_events *ev, cngtcp2_creds *creds, const char *alpn,
                             const void *local, unsigned local_len,
                             const void *remote, unsigned remote_len,
                             const uint8_t *pkt, size_t pkt_len, const uint8_t *secret,
                             const cngtcp2_params *params, uint64_t now_ns, char *err, size_t errlen);
void cngtcp2_free(cngtcp2_conn *c);

/// Feeds one received UDP payload. 0, or a negative ngtcp2 error (then the connection must
/// close: cngtcp2_write_close). NGTCP2_ERR_DRAINING / CLOSING: the peer closed.
int cngtcp2_read(cngtcp2_conn *c, const void *local, unsigned local_len,
               const void *remote, unsigned remote_len,
               const uint8_t *pkt, size_t len, uint64_t now_ns);

/// Writes one packet into `dest`, with stream data of `stream_id` (-1: none) from `data`/`count`
/// iovecs, `fin` to end the stream with the last byte. `*consumed` gets the stream bytes taken
/// (-1 none). Returns the packet size (0: nothing to send), or a negative ngtcp2 error:
/// NGTCP2_ERR_STREAM_DATA_BLOCKED / STREAM_SHUT_WR / STREAM_NOT_FOUND for this stream,
/// NGTCP2_ERR_WRITE_MORE when `more` and the packet has room for another stream.
/// `to`/`to_len` get the packet's destination.
long cngtcp2_write_stream(cngtcp2_conn *c, uint8_t *dest, size_t destlen, int64_t stream_id,
                        const cngtcp2_vec *data, size_t count, int fin, int more,
                        long *consumed, void *to, unsigned *to_len, uint64_t now_ns);
/// Writes one packet holding one DATAGRAM frame; `*accepted` 1 when the datagram went in.
long cngtcp2_write_datagram(cngtcp2_conn *c, uint8_t *dest, size_t destlen, const uint8_t *data, size_t len,
                          int *accepted, void *to, unsigned *to_len, uint64_t now_ns);
/// CONNECTION_CLOSE: an application close with `app_code` when `liberr` is 0, else the
/// transport error matching the ngtcp2 error `liberr`. Returns the packet size or < 0.
long cngtcp2_write_close(cngtcp2_conn *c, uint8_t *dest, size_t destlen, uint64_t app_code, int liberr,
                       void *to, unsigned *to_len, uint64_t now_ns);

/// The next deadline (ns; UINT64_MAX: none) and running it.
uint64_t cngtcp2_expiry(cngtcp2_conn *c);
int cngtcp2_expire(cngtcp2_conn *c, uint64_t now_ns);
/// The congestion controller's pacing rate (bytes per ns; loft paces with it, ngtcp2's own
/// pacer is not used), and the size of one packet.
double cngtcp2_pacing_rate(cngtcp2_conn *c);
size_t cngtcp2_max_packet(cngtcp2_conn *c);
/// The largest packet on the current path now (1200 until path MTU discovery confirms more),
/// at most what the peer announced it takes.
size_t cngtcp2_path_max_packet(cngtcp2_conn *c);

int cngtcp2_open_bidi(cngtcp2_conn *c, int64_t *stream_id);
/// Opens a unidirectional stream of ours (h3's control and QPACK streams).
int cngtcp2_open_uni(cngtcp2_conn *c, int64_t *stream_id);
uint64_t cngtcp2_streams_bidi_left(cngtcp2_conn *c);
/// RESET_STREAM and STOP_SENDING with `code`.
int cngtcp2_shutdown_stream(cngtcp2_conn *c, int64_t stream_id, uint64_t code);
/// `n` more bytes of the stream were consumed: its and the connection's window move on.
int cngtcp2_consumed(cngtcp2_conn *c, int64_t stream_id, uint64_t n);
uint64_t cngtcp2_stream_send_room(cngtcp2_conn *c, int64_t stream_id);

int cngtcp2_handshake_done(cngtcp2_conn *c);
// Server: the client's address is validated (a token of ours, a Handshake packet from it, or
// the handshake done); always 1 on a client.
int cngtcp2_address_validated(cngtcp2_conn *c);
int cngtcp2_is_closing(cngtcp2_conn *c);   // closing or draining: nothing more to send
/// The peer's CONNECTION_CLOSE: 1 when it had one, with its code, application flag, reason.
int cngtcp2_peer_close(cngtcp2_conn *c, uint64_t *code, int *is_app, char *reason, size_t reason_len);
/// "TLS1.3 AES-128-GCM alpn=loft"
void cngtcp2_describe(cngtcp2_conn *c, char *out, size_t outlen);
/// The negotiated ALPN (empty before the handshake).
void cngtcp2_alpn(cngtcp2_conn *c, char *out, size_t outlen);
/// The peer's max_datagram_frame_size (0: it takes no datagrams).
uint64_t cngtcp2_peer_max_datagram(cngtcp2_conn *c);
/// Client: move to a new local address (a new socket): path validation runs, then `path_validated`.
int cngtcp2_migrate(cngtcp2_conn *c, const void *local, unsigned local_len,
                  const void *remote, unsigned remote_len, uint64_t now_ns);
const char *cngtcp2_strerror(int err);
/// The connection ended on a stateless reset from the peer (its token matched).
int cngtcp2_got_stateless_reset(cngtcp2_conn *c);
/// The last TLS or setup failure text of the connection (may be empty).
const char *cngtcp2_last_error(cngtcp2_conn *c);

// MARK: the front's stateless answers (no connection state is made for them)

/// The token of an Initial `pkt` from `remote`: CNGTCP2_TOKEN_NONE (none, or one that is not
/// ours or no longer good: a NEW_TOKEN token that does not verify counts as none, RFC 9000
/// §8.1.3), CNGTCP2_TOKEN_RETRY (a Retry token of ours, unexpired, for this address and this
/// destination id: the address is validated), CNGTCP2_TOKEN_REGULAR (a token of ours from a
/// NEW_TOKEN frame, unexpired, for this address: validated), CNGTCP2_TOKEN_INVALID (looks like
/// our Retry token but does not verify: forged, expired, another address). `secret` is 32
/// bytes. A server connection (cngtcp2_server_new) sends a NEW_TOKEN when its handshake completes.
int cngtcp2_initial_token(const uint8_t *pkt, size_t len, const uint8_t *secret,
                        const void *remote, unsigned remote_len, uint64_t now_ns);
/// A Retry answering the Initial `pkt` from `remote` (a token binding the address, the client's
/// original destination id and the time; a fresh 18-byte id the client moves to). Returns the
/// packet size or -1.
long cngtcp2_write_retry(uint8_t *dest, size_t destlen, const uint8_t *pkt, size_t len, const uint8_t *secret,
                       const void *remote, unsigned remote_len, uint64_t now_ns);
/// A stateless reset for the short-header packet `pkt` (its destination id `cid_len` bytes),
/// smaller than `pkt` and at most 43 bytes; 0 when `pkt` is too short to answer without
/// amplification or a loop (a reset is at least 21 bytes and must be smaller than what
/// triggered it), -1 on failure. The token is the one the connection with that id would have
/// had (derived from `secret` and the id).
long cngtcp2_write_reset(uint8_t *dest, size_t destlen, const uint8_t *pkt, size_t len, size_t cid_len,
                       const uint8_t *secret);
#define CNGTCP2_TOKEN_NONE 0
#define CNGTCP2_TOKEN_RETRY 1
#define CNGTCP2_TOKEN_INVALID (-1)
#define CNGTCP2_TOKEN_REGULAR 2
/// How long a Retry token is good for (ms).
#define CNGTCP2_RETRY_TOKEN_TIMEOUT_MS 10000
/// How long a NEW_TOKEN token is good for (ms).
#define CNGTCP2_REGULAR_TOKEN_TIMEOUT_MS 3600000

#define CNGTCP2_ERR_DRAINING (-231)
#define CNGTCP2_ERR_CLOSING (-230)
#define CNGTCP2_ERR_STREAM_DATA_BLOCKED (-210)
#define CNGTCP2_ERR_STREAM_SHUT_WR (-221)
#define CNGTCP2_ERR_STREAM_NOT_FOUND (-222)
#define CNGTCP2_ERR_WRITE_MORE (-240)
#define CNGTCP2_ERR_IDLE_CLOSE (-248)
#define CNGTCP2_ERR_STREAM_ID_BLOCKED (-208)

#endif
