#include "cnghttp3.h"
#include <nghttp3/nghttp3.h>
#include <stdlib.h>
#include <string.h>

// One request stream's state: the header block as read, and the body buffer (a ring) whose
// bytes nghttp3 frames as DATA. nghttp3 holds pointers into the ring until it counts the bytes
// acknowledged (`acked_stream_data`); loft acknowledges as soon as QUIC took a copy.
typedef struct cnghttp3_stream {
    struct cnghttp3_stream *prev, *next;
    int64_t id;
    cnghttp3_head head;
    uint8_t *ring;
    size_t cap;
    uint64_t acked, sent, end;
    int eof;
} cnghttp3_stream;

struct cnghttp3_conn {
    nghttp3_conn *h3;
    cnghttp3_events ev;
    cnghttp3_stream *streams;
};

static cnghttp3_stream *stream_new(cnghttp3_conn *c, int64_t sid) {
    cnghttp3_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->id = sid;
    s->next = c->streams;
    if (c->streams) c->streams->prev = s;
    c->streams = s;
    return s;
}

static void stream_free(cnghttp3_conn *c, cnghttp3_stream *s) {
    if (s->prev) s->prev->next = s->next; else c->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    free(s->ring);
    free(s);
}

static cnghttp3_stream *find(cnghttp3_conn *c, int64_t sid) {
    for (cnghttp3_stream *s = c->streams; s; s = s->next) if (s->id == sid) return s;
    return NULL;
}

static int body_ring(cnghttp3_stream *s, size_t cap) {
    if (cap == 0 || s->ring) return 0;
    s->ring = malloc(cap);
    if (!s->ring) return -1;
    s->cap = cap;
    return 0;
}

#define FORWARD(x) return (x) == 0 ? 0 : NGHTTP3_ERR_CALLBACK_FAILURE

static int acked_cb(nghttp3_conn *h, int64_t sid, uint64_t n, void *ud, void *sud) {
    (void)h;
    cnghttp3_conn *c = ud;
    cnghttp3_stream *s = sud;
    if (!s) return 0;
    s->acked += n;
    if (s->acked > s->sent) s->acked = s->sent;
    FORWARD(c->ev.acked(c->ev.ctx, sid));
}

static int close_cb(nghttp3_conn *h, int64_t sid, uint64_t code, void *ud, void *sud) {
    (void)h; (void)sid; (void)code;
    if (sud) stream_free(ud, sud);
    return 0;
}

static int recv_data_cb(nghttp3_conn *h, int64_t sid, const uint8_t *data, size_t len, void *ud, void *sud) {
    (void)h; (void)sud;
    cnghttp3_conn *c = ud;
    FORWARD(c->ev.data(c->ev.ctx, sid, data, len));
}

static int begin_headers_cb(nghttp3_conn *h, int64_t sid, void *ud, void *sud) {
    cnghttp3_conn *c = ud;
    cnghttp3_stream *s = sud;
    if (!s) {
        // A request of the client's (server side).
        if (!(s = stream_new(c, sid))) return NGHTTP3_ERR_NOMEM;
        nghttp3_conn_set_stream_user_data(h, sid, s);
    }
    memset(&s->head, 0, sizeof s->head);
    return 0;
}

static void copy_field(cnghttp3_head *hd, char *dst, size_t cap, nghttp3_rcbuf *v) {
    nghttp3_vec b = nghttp3_rcbuf_get_buf(v);
    if (b.len >= cap) { hd->too_large = 1; return; }
    memcpy(dst, b.base, b.len);
    dst[b.len] = 0;
}

static int recv_header_cb(nghttp3_conn *h, int64_t sid, int32_t token, nghttp3_rcbuf *name, nghttp3_rcbuf *value,
                          uint8_t flags, void *ud, void *sud) {
    (void)h; (void)sid; (void)name; (void)flags; (void)ud;
    cnghttp3_stream *s = sud;
    if (!s) return 0;
    cnghttp3_head *hd = &s->head;
    if (++hd->fields > 100) { hd->too_large = 1; return 0; }
    switch (token) {
    case NGHTTP3_QPACK_TOKEN__METHOD: copy_field(hd, hd->method, sizeof hd->method, value); break;
    case NGHTTP3_QPACK_TOKEN__PROTOCOL: copy_field(hd, hd->protocol, sizeof hd->protocol, value); break;
    case NGHTTP3_QPACK_TOKEN__PATH: copy_field(hd, hd->path, sizeof hd->path, value); break;
    case NGHTTP3_QPACK_TOKEN__AUTHORITY: copy_field(hd, hd->authority, sizeof hd->authority, value); break;
    case NGHTTP3_QPACK_TOKEN__STATUS: {
        nghttp3_vec b = nghttp3_rcbuf_get_buf(value);
        int st = 0;
        for (size_t i = 0; i < b.len && i < 3; i++) st = st * 10 + (b.base[i] - '0');
        hd->status = st;
        break;
    }
    default: break;
    }
    return 0;
}

static int end_headers_cb(nghttp3_conn *h, int64_t sid, int fin, void *ud, void *sud) {
    (void)h;
    cnghttp3_conn *c = ud;
    cnghttp3_stream *s = sud;
    if (!s) return 0;
    FORWARD(c->ev.headers(c->ev.ctx, sid, s, &s->head, fin));
}

static int end_stream_cb(nghttp3_conn *h, int64_t sid, void *ud, void *sud) {
    (void)h; (void)sud;
    cnghttp3_conn *c = ud;
    FORWARD(c->ev.end_stream(c->ev.ctx, sid));
}

// nghttp3 asks for the stream's reading to stop, or for the stream to be reset.
static int stop_cb(nghttp3_conn *h, int64_t sid, uint64_t code, void *ud, void *sud) {
    (void)h; (void)sud;
    cnghttp3_conn *c = ud;
    FORWARD(c->ev.reset(c->ev.ctx, sid, code, 1));
}

static int reset_cb(nghttp3_conn *h, int64_t sid, uint64_t code, void *ud, void *sud) {
    (void)h; (void)sud;
    cnghttp3_conn *c = ud;
    FORWARD(c->ev.reset(c->ev.ctx, sid, code, 0));
}

static nghttp3_ssize read_data(nghttp3_conn *h, int64_t sid, nghttp3_vec *vec, size_t veccnt, uint32_t *pflags,
                               void *ud, void *sud) {
    (void)h; (void)sid; (void)ud;
    cnghttp3_stream *s = sud;
    if (!s) { *pflags |= NGHTTP3_DATA_FLAG_EOF; return 0; }
    size_t unsent = (size_t)(s->end - s->sent);
    if (unsent == 0) {
        if (s->eof) { *pflags |= NGHTTP3_DATA_FLAG_EOF; return 0; }
        return NGHTTP3_ERR_WOULDBLOCK;
    }
    size_t start = (size_t)(s->sent % s->cap);
    size_t first = unsent < s->cap - start ? unsent : s->cap - start;
    vec[0].base = s->ring + start;
    vec[0].len = first;
    nghttp3_ssize n = 1;
    size_t total = first;
    if (first < unsent && veccnt > 1) {
        vec[1].base = s->ring;
        vec[1].len = unsent - first;
        total += unsent - first;
        n = 2;
    }
    s->sent += total;
    if (s->eof && s->sent == s->end) *pflags |= NGHTTP3_DATA_FLAG_EOF;
    return n;
}

cnghttp3_conn *cnghttp3_new(int server, const cnghttp3_events *ev, uint64_t max_bidi) {
    cnghttp3_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ev = *ev;
    nghttp3_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.acked_stream_data = acked_cb;
    cb.stream_close = close_cb;
    cb.recv_data = recv_data_cb;
    cb.begin_headers = begin_headers_cb;
    cb.recv_header = recv_header_cb;
    cb.end_headers = end_headers_cb;
    cb.end_stream = end_stream_cb;
    cb.stop_sending = stop_cb;
    cb.reset_stream = reset_cb;
    nghttp3_settings st;
    nghttp3_settings_default(&st);
    st.max_field_section_size = 16384;
    st.qpack_max_dtable_capacity = 0;
    st.qpack_encoder_max_dtable_capacity = 0;
    st.qpack_blocked_streams = 0;
    st.enable_connect_protocol = server ? 1 : 0;
    int rv = server ? nghttp3_conn_server_new(&c->h3, &cb, &st, NULL, c)
                    : nghttp3_conn_client_new(&c->h3, &cb, &st, NULL, c);
    if (rv != 0) { free(c); return NULL; }
    if (server) nghttp3_conn_set_max_client_streams_bidi(c->h3, max_bidi);
    return c;
}

void cnghttp3_free(cnghttp3_conn *c) {
    if (!c) return;
    nghttp3_conn_del(c->h3);
    while (c->streams) stream_free(c, c->streams);
    free(c);
}

int cnghttp3_bind(cnghttp3_conn *c, int64_t control, int64_t enc, int64_t dec) {
    int rv = nghttp3_conn_bind_control_stream(c->h3, control);
    if (rv == 0) rv = nghttp3_conn_bind_qpack_streams(c->h3, enc, dec);
    return rv;
}

int64_t cnghttp3_read(cnghttp3_conn *c, int64_t sid, const uint8_t *data, size_t len, int fin) {
    return nghttp3_conn_read_stream(c->h3, sid, data, len, fin);
}

int64_t cnghttp3_writev(cnghttp3_conn *c, int64_t *sid, int *fin, cnghttp3_vec *vec, size_t veccnt) {
    return nghttp3_conn_writev_stream(c->h3, sid, fin, (nghttp3_vec *)vec, veccnt);
}

int cnghttp3_written(cnghttp3_conn *c, int64_t sid, size_t n) {
    int rv = nghttp3_conn_add_write_offset(c->h3, sid, n);
    if (rv == 0 && n > 0) rv = nghttp3_conn_add_ack_offset(c->h3, sid, n);
    return rv;
}

void cnghttp3_block(cnghttp3_conn *c, int64_t sid) { nghttp3_conn_block_stream(c->h3, sid); }
int cnghttp3_unblock(cnghttp3_conn *c, int64_t sid) { return nghttp3_conn_unblock_stream(c->h3, sid); }

static nghttp3_nv nv(const char *n, const char *v) {
    nghttp3_nv x = { (uint8_t *)n, (uint8_t *)v, strlen(n), strlen(v), NGHTTP3_NV_FLAG_NONE };
    return x;
}

cnghttp3_stream *cnghttp3_connect(cnghttp3_conn *c, int64_t sid, const char *protocol, const char *path, const char *authority, size_t cap) {
    cnghttp3_stream *s = stream_new(c, sid);
    if (!s || body_ring(s, cap) != 0) { if (s) stream_free(c, s); return NULL; }
    nghttp3_nv h[] = { nv(":method", "CONNECT"), nv(":protocol", protocol), nv(":scheme", "https"),
                       nv(":path", path), nv(":authority", authority) };
    nghttp3_data_reader dr = { read_data };
    int rv = nghttp3_conn_submit_request(c->h3, sid, h, 5, &dr, s);
    if (rv != 0) { stream_free(c, s); return NULL; }
    return s;
}

int cnghttp3_respond(cnghttp3_conn *c, cnghttp3_stream *s, int status, size_t cap) {
    int64_t sid = s->id;
    if (body_ring(s, cap) != 0) return NGHTTP3_ERR_NOMEM;
    char st[8];
    st[0] = (char)('0' + status / 100 % 10); st[1] = (char)('0' + status / 10 % 10); st[2] = (char)('0' + status % 10); st[3] = 0;
    nghttp3_nv h[] = { nv(":status", st), nv("allow", "CONNECT") };
    nghttp3_data_reader dr = { read_data };
    return nghttp3_conn_submit_response(c->h3, sid, h, status == 405 ? 2 : 1, cap > 0 ? &dr : NULL);
}

size_t cnghttp3_body_room(cnghttp3_conn *c, cnghttp3_stream *s) {
    (void)c;
    if (!s->ring || s->eof) return 0;
    return s->cap - (size_t)(s->end - s->acked);
}

size_t cnghttp3_body_unsent(cnghttp3_conn *c, cnghttp3_stream *s) {
    (void)c;
    return (size_t)(s->end - s->sent);
}

size_t cnghttp3_body_write(cnghttp3_conn *c, cnghttp3_stream *s, const uint8_t *data, size_t len) {
    if (!s->ring || s->eof) return 0;
    size_t room = s->cap - (size_t)(s->end - s->acked);
    size_t n = len < room ? len : room;
    if (n == 0) return 0;
    size_t at = (size_t)(s->end % s->cap);
    size_t first = n < s->cap - at ? n : s->cap - at;
    memcpy(s->ring + at, data, first);
    if (first < n) memcpy(s->ring, data + first, n - first);
    s->end += n;
    nghttp3_conn_resume_stream(c->h3, s->id);
    return n;
}

void cnghttp3_body_end(cnghttp3_conn *c, cnghttp3_stream *s) {
    if (s->eof) return;
    s->eof = 1;
    nghttp3_conn_resume_stream(c->h3, s->id);
}

void cnghttp3_close_stream(cnghttp3_conn *c, int64_t sid, uint64_t code) {
    if (nghttp3_conn_close_stream(c->h3, sid, code) != 0) {
        cnghttp3_stream *s = find(c, sid);
        if (s) stream_free(c, s);
    }
}

const char *cnghttp3_strerror(int64_t rv) { return nghttp3_strerror((int)rv); }
