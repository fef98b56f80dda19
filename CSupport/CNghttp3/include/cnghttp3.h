#ifndef CNGHTTP3_H
#define CNGHTTP3_H
// Thin shim over nghttp3 (0.8): HTTP/3 framing and QPACK for loft's h3 carrier. The QUIC
// streams themselves are QuicConnection's; this only turns request-stream bodies into HTTP/3
// stream bytes and back. Nothing here touches a socket or a clock.
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct cnghttp3_conn cnghttp3_conn;
/// One request stream's state (its header block, its body buffer); valid until cnghttp3_close_stream.
typedef struct cnghttp3_stream cnghttp3_stream;

/// One request's or response's header block, as far as loft reads it.
typedef struct cnghttp3_head {
    int status;              // response :status (client), 0 on a request
    char method[16];
    char protocol[32];       // :protocol (extended CONNECT, RFC 9220)
    char path[256];
    char authority[256];
    int too_large;           // a field did not fit, or more than 100 fields
    size_t fields;
} cnghttp3_head;

typedef struct cnghttp3_events {
    void *ctx;
    /// A request stream's header block ended (fin: END_STREAM came with it).
    int (*headers)(void *ctx, int64_t sid, cnghttp3_stream *s, const cnghttp3_head *head, int fin);
    /// Body bytes of a request stream.
    int (*data)(void *ctx, int64_t sid, const uint8_t *data, size_t len);
    /// The peer ended its body (after the last `data`).
    int (*end_stream)(void *ctx, int64_t sid);
    /// nghttp3 asks for the stream to be reset (`stop_only` 0), or only for its reading to stop
    /// (`stop_only` 1: the rest of the peer's body is not wanted).
    int (*reset)(void *ctx, int64_t sid, uint64_t code, int stop_only);
    /// A body buffer has room again (bytes handed to QUIC).
    int (*acked)(void *ctx, int64_t sid);
} cnghttp3_events;

typedef struct cnghttp3_vec { const uint8_t *base; size_t len; } cnghttp3_vec;

/// nghttp3 connection; SETTINGS: no QPACK dynamic table, header sections up to 16 384 bytes,
/// ENABLE_CONNECT_PROTOCOL 1 (server). `max_bidi`: the client's request streams (server).
cnghttp3_conn *cnghttp3_new(int server, const cnghttp3_events *ev, uint64_t max_bidi);
void cnghttp3_free(cnghttp3_conn *c);
/// Our control and QPACK encoder/decoder unidirectional streams.
int cnghttp3_bind(cnghttp3_conn *c, int64_t control, int64_t qpack_enc, int64_t qpack_dec);
/// Bytes received on a QUIC stream (`fin`: the last). <0: a connection error (nghttp3's).
int64_t cnghttp3_read(cnghttp3_conn *c, int64_t sid, const uint8_t *data, size_t len, int fin);
/// The next bytes nghttp3 wants on a QUIC stream: `*sid` -1 when none.
int64_t cnghttp3_writev(cnghttp3_conn *c, int64_t *sid, int *fin, cnghttp3_vec *vec, size_t veccnt);
/// `n` of those bytes were taken by QUIC (and are held there until acknowledged).
int cnghttp3_written(cnghttp3_conn *c, int64_t sid, size_t n);
void cnghttp3_block(cnghttp3_conn *c, int64_t sid);
int cnghttp3_unblock(cnghttp3_conn *c, int64_t sid);
/// Client: an extended CONNECT on `sid` with a body buffer of `cap` bytes.
cnghttp3_stream *cnghttp3_connect(cnghttp3_conn *c, int64_t sid, const char *protocol, const char *path, const char *authority, size_t cap);
/// Server: a response; `cap` > 0: a body of up to `cap` buffered bytes follows, 0: END_STREAM.
int cnghttp3_respond(cnghttp3_conn *c, cnghttp3_stream *s, int status, size_t cap);
/// Body bytes to send: copies what fits the stream's buffer, returns the count.
size_t cnghttp3_body_write(cnghttp3_conn *c, cnghttp3_stream *s, const uint8_t *data, size_t len);
size_t cnghttp3_body_room(cnghttp3_conn *c, cnghttp3_stream *s);
/// Bytes in the body buffer not yet handed to QUIC.
size_t cnghttp3_body_unsent(cnghttp3_conn *c, cnghttp3_stream *s);
/// Ends the body (END_STREAM after the buffered bytes).
void cnghttp3_body_end(cnghttp3_conn *c, cnghttp3_stream *s);
/// nghttp3 forgets the stream (QUIC is done with it, or reset it).
void cnghttp3_close_stream(cnghttp3_conn *c, int64_t sid, uint64_t code);
const char *cnghttp3_strerror(int64_t rv);

#endif
