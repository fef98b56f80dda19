#include "cnghttp2.h"
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

struct cnghttp2 {
    nghttp2_session *s;
    cnghttp2_callbacks cb;
    void *u;
};

static ssize_t on_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud) {
    (void)s; (void)flags;
    cnghttp2 *h = ud;
    size_t n = h->cb.send(h->u, data, len);
    return n == 0 ? NGHTTP2_ERR_WOULDBLOCK : (ssize_t)n;
}

static int on_send_data(nghttp2_session *s, nghttp2_frame *f, const uint8_t *hd, size_t length,
                        nghttp2_data_source *src, void *ud) {
    (void)s; (void)src;
    cnghttp2 *h = ud;
    if (f->data.padlen > 0) return NGHTTP2_ERR_CALLBACK_FAILURE;  // we never pad
    return h->cb.send_data(h->u, f->hd.stream_id, hd, length) == 0 ? 0 : NGHTTP2_ERR_WOULDBLOCK;
}

static ssize_t on_read(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t max, uint32_t *flags,
                       nghttp2_data_source *src, void *ud) {
    (void)s; (void)buf; (void)src;
    cnghttp2 *h = ud;
    int eof = 0;
    size_t n = h->cb.data_length(h->u, stream, max, &eof);
    if (n > max) n = max;
    if (eof) *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (n == 0 && !eof) return NGHTTP2_ERR_DEFERRED;
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    return (ssize_t)n;
}

// Frames as large as the peer and the windows allow (not nghttp2's 16 KiB default): with
// NO_COPY nothing is staged in between, so a bigger frame costs nothing.
static ssize_t on_read_length(nghttp2_session *s, uint8_t type, int32_t stream, int32_t conn_window,
                              int32_t stream_window, uint32_t max_frame, void *ud) {
    (void)s; (void)type; (void)stream; (void)ud;
    int32_t w = conn_window < stream_window ? conn_window : stream_window;
    if (w < 0) w = 0;
    return (ssize_t)((uint32_t)w < max_frame ? (uint32_t)w : max_frame);
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
    (void)s; (void)flags;
    cnghttp2 *h = ud;
    return h->cb.header(h->u, f->hd.stream_id, name, nlen, value, vlen) == 0 ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    (void)s;
    cnghttp2 *h = ud;
    uint32_t code = 0;
    if (f->hd.type == NGHTTP2_RST_STREAM) code = f->rst_stream.error_code;
    if (f->hd.type == NGHTTP2_GOAWAY) code = f->goaway.error_code;
    return h->cb.frame_received(h->u, f->hd.type, f->hd.flags, f->hd.stream_id, code) == 0 ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data, size_t len, void *ud) {
    (void)s; (void)flags;
    cnghttp2 *h = ud;
    return h->cb.data(h->u, stream, data, len) == 0 ? 0 : NGHTTP2_ERR_PAUSE;
}

static int on_close(nghttp2_session *s, int32_t stream, uint32_t code, void *ud) {
    (void)s;
    cnghttp2 *h = ud;
    h->cb.stream_closed(h->u, stream, code);
    return 0;
}

static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    (void)s;
    cnghttp2 *h = ud;
    if (f->hd.type == NGHTTP2_GOAWAY) h->cb.frame_sent(h->u, NGHTTP2_GOAWAY, 0, f->goaway.error_code);
    else if (f->hd.type == NGHTTP2_RST_STREAM) h->cb.frame_sent(h->u, NGHTTP2_RST_STREAM, f->hd.stream_id, f->rst_stream.error_code);
    return 0;
}

cnghttp2 *cnghttp2_new(int server, const cnghttp2_callbacks *cb, void *u, const cnghttp2_settings *st) {
    cnghttp2 *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->cb = *cb;
    h->u = u;
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0) { free(h); return NULL; }
    nghttp2_session_callbacks_set_send_callback(cbs, on_send);
    nghttp2_session_callbacks_set_send_data_callback(cbs, on_send_data);
    nghttp2_session_callbacks_set_data_source_read_length_callback(cbs, on_read_length);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_option *opt;
    if (nghttp2_option_new(&opt) != 0) { nghttp2_session_callbacks_del(cbs); free(h); return NULL; }
    // Until the peer's SETTINGS arrive, assume it allows few streams (we open one).
    nghttp2_option_set_peer_max_concurrent_streams(opt, 100);
    // Bounds against floods (nghttp2's own defaults, written out): queued ACKs (PING/SETTINGS),
    // entries per SETTINGS, CONTINUATIONs per header block, stream resets per second.
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33);
    nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
    int r = server ? nghttp2_session_server_new2(&h->s, cbs, h, opt) : nghttp2_session_client_new2(&h->s, cbs, h, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (r != 0) { free(h); return NULL; }
    nghttp2_settings_entry e[6];
    size_t n = 0;
    if (server) e[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, st->max_concurrent_streams};
    else e[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_ENABLE_PUSH, 0};
    e[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, st->initial_window};
    e[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_FRAME_SIZE, st->max_frame_size};
    e[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, st->max_header_list};
    if (server && st->enable_connect_protocol) e[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1};
    if (nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, e, n) != 0
        || nghttp2_session_set_local_window_size(h->s, NGHTTP2_FLAG_NONE, 0, (int32_t)st->connection_window) != 0) {
        cnghttp2_free(h);
        return NULL;
    }
    return h;
}

void cnghttp2_free(cnghttp2 *h) {
    if (!h) return;
    if (h->s) nghttp2_session_del(h->s);
    free(h);
}

long cnghttp2_recv(cnghttp2 *h, const uint8_t *data, size_t len) { return (long)nghttp2_session_mem_recv(h->s, data, len); }
int cnghttp2_send(cnghttp2 *h) { return nghttp2_session_send(h->s); }
int cnghttp2_want_read(cnghttp2 *h) { return nghttp2_session_want_read(h->s); }
int cnghttp2_want_write(cnghttp2 *h) { return nghttp2_session_want_write(h->s); }

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME}

int32_t cnghttp2_submit_connect(cnghttp2 *h, const char *authority, const char *path, const char *protocol) {
    nghttp2_nv nv[] = {
        NV(":method", "CONNECT"), NV(":protocol", protocol), NV(":scheme", "https"),
        NV(":path", path), NV(":authority", authority),
    };
    nghttp2_data_provider dp = {.source = {.ptr = NULL}, .read_callback = on_read};
    return nghttp2_submit_request(h->s, NULL, nv, sizeof nv / sizeof nv[0], &dp, NULL);
}

int cnghttp2_submit_response(cnghttp2 *h, int32_t stream, int status, int with_body, const char *const *extra, size_t nextra) {
    char code[4];
    if (status < 100 || status > 999) return NGHTTP2_ERR_INVALID_ARGUMENT;
    code[0] = (char)('0' + status / 100); code[1] = (char)('0' + status / 10 % 10); code[2] = (char)('0' + status % 10); code[3] = 0;
    nghttp2_nv nv[9];
    size_t n = 0;
    nv[n++] = (nghttp2_nv)NV(":status", code);
    for (size_t i = 0; i + 1 < nextra * 2 && n < 9; i += 2) {
        nv[n++] = (nghttp2_nv){(uint8_t *)extra[i], (uint8_t *)extra[i + 1], strlen(extra[i]), strlen(extra[i + 1]), NGHTTP2_NV_FLAG_NONE};
    }
    nghttp2_data_provider dp = {.source = {.ptr = NULL}, .read_callback = on_read};
    return nghttp2_submit_response(h->s, stream, nv, n, with_body ? &dp : NULL);
}

int cnghttp2_resume(cnghttp2 *h, int32_t stream) { return nghttp2_session_resume_data(h->s, stream); }
int cnghttp2_submit_rst(cnghttp2 *h, int32_t stream, uint32_t code) { return nghttp2_submit_rst_stream(h->s, NGHTTP2_FLAG_NONE, stream, code); }
int cnghttp2_submit_goaway(cnghttp2 *h, uint32_t code) {
    return nghttp2_submit_goaway(h->s, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->s), code, NULL, 0);
}

int32_t cnghttp2_send_window(cnghttp2 *h, int32_t stream) {
    int32_t c = nghttp2_session_get_remote_window_size(h->s);
    int32_t s = nghttp2_session_get_stream_remote_window_size(h->s, stream);
    if (s < 0) return 0;
    return c < s ? c : s;
}

uint32_t cnghttp2_remote_setting(cnghttp2 *h, int32_t id) { return nghttp2_session_get_remote_settings(h->s, (nghttp2_settings_id)id); }
const char *cnghttp2_strerror(int code) { return nghttp2_strerror(code); }
const char *cnghttp2_error_name(uint32_t code) { return nghttp2_http2_strerror(code); }
