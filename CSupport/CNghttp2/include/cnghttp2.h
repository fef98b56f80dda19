// nghttp2 shim: the only C that includes nghttp2's headers. Plain C types only, so Swift
// imports it cleanly. One cnghttp2 is one HTTP/2 connection's framing state (client or server);
// it never touches a socket: bytes go in with cnghttp2_recv and come out through the callbacks
// during cnghttp2_send. Everything runs on the caller's (the event loop's) thread.
#ifndef CNGHTTP2_H
#define CNGHTTP2_H
#include <stddef.h>
#include <stdint.h>

typedef struct cnghttp2 cnghttp2;

/// Frame types and error codes as on the wire (RFC 9113).
enum {
    CNGHTTP2_DATA = 0, CNGHTTP2_HEADERS = 1, CNGHTTP2_RST_STREAM = 3, CNGHTTP2_SETTINGS = 4, CNGHTTP2_PING = 6,
    CNGHTTP2_GOAWAY = 7, CNGHTTP2_WINDOW_UPDATE = 8,
    CNGHTTP2_FLAG_END_STREAM = 0x1, CNGHTTP2_FLAG_ACK = 0x1,
    CNGHTTP2_NO_ERROR = 0, CNGHTTP2_PROTOCOL_ERROR = 1, CNGHTTP2_INTERNAL_ERROR = 2, CNGHTTP2_REFUSED_STREAM = 7,
    CNGHTTP2_CANCEL = 8, CNGHTTP2_ENHANCE_YOUR_CALM = 11,
};

/// What the embedder does for the connection. `u` is the pointer given to cnghttp2_new.
typedef struct {
    /// Serialized frames other than DATA payloads: copy up to len bytes out; return how many
    /// were taken (0: none fit now; cnghttp2_send stops and the rest waits for the next call).
    size_t (*send)(void *u, const uint8_t *data, size_t len);
    /// A DATA frame of `stream`: write the 9-byte header, then `length` payload bytes taken from
    /// the embedder's own bytes for that stream (the ones data_length offered). Return 0, or 1
    /// when it does not fit now (the frame is offered again later).
    int (*send_data)(void *u, int32_t stream, const uint8_t *header9, size_t length);
    /// How many payload bytes `stream` offers now, at most `max` (windows and frame size
    /// applied). 0 with *eof unset: nothing now (the stream waits for cnghttp2_resume). *eof set:
    /// the stream's last bytes (END_STREAM).
    size_t (*data_length)(void *u, int32_t stream, size_t max, int *eof);
    /// One header field of a received HEADERS block (pseudo-headers first). Return 0, or 1 to
    /// reset that stream (the rest of its block is decoded and dropped).
    int (*header)(void *u, int32_t stream, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen);
    /// A frame was received (HEADERS after its last field). error_code: RST_STREAM's and
    /// GOAWAY's. Return 0, or 1 to end the connection (cnghttp2_recv fails).
    int (*frame_received)(void *u, uint8_t type, uint8_t flags, int32_t stream, uint32_t error_code);
    /// DATA payload bytes, pointing into the bytes given to cnghttp2_recv. Return 0, or 1 to pause:
    /// cnghttp2_recv returns at once, these bytes counted as processed.
    int (*data)(void *u, int32_t stream, const uint8_t *data, size_t len);
    /// A stream is closed (both ways, or reset either way); error_code 0 for a clean end.
    void (*stream_closed)(void *u, int32_t stream, uint32_t error_code);
    /// A GOAWAY or RST_STREAM went out (error_code: ours).
    void (*frame_sent)(void *u, uint8_t type, int32_t stream, uint32_t error_code);
} cnghttp2_callbacks;

/// Our SETTINGS and the connection receive window.
typedef struct {
    uint32_t max_concurrent_streams;   // streams the peer may open (server); 0 for a client
    uint32_t initial_window;           // SETTINGS_INITIAL_WINDOW_SIZE: each stream's receive window
    uint32_t connection_window;        // the connection's receive window (WINDOW_UPDATE on stream 0)
    uint32_t max_frame_size;           // SETTINGS_MAX_FRAME_SIZE (16384 ... 16777215)
    uint32_t max_header_list;          // SETTINGS_MAX_HEADER_LIST_SIZE (advisory; enforce in header())
    int enable_connect_protocol;       // server: SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 (RFC 8441)
} cnghttp2_settings;

/// A client or server connection, its SETTINGS queued (client: after the preface). NULL when
/// out of memory or the settings are invalid.
cnghttp2 *cnghttp2_new(int server, const cnghttp2_callbacks *cb, void *u, const cnghttp2_settings *s);
void cnghttp2_free(cnghttp2 *h);

/// Feeds received bytes: returns how many were processed (fewer only after a pause), or a
/// negative nghttp2 error (the connection is over; cnghttp2_strerror says why).
long cnghttp2_recv(cnghttp2 *h, const uint8_t *data, size_t len);
/// Serializes what is due into the callbacks until nothing is left or a callback is full.
/// 0 or a negative nghttp2 error.
int cnghttp2_send(cnghttp2 *h);
/// Whether the connection still reads / has something to write (both 0: it is over).
int cnghttp2_want_read(cnghttp2 *h);
int cnghttp2_want_write(cnghttp2 *h);

/// Client: an extended CONNECT (RFC 8441) whose DATA comes from data_length/send_data. Returns
/// the stream id, or a negative error.
int32_t cnghttp2_submit_connect(cnghttp2 *h, const char *authority, const char *path, const char *protocol);
/// Server: a response with :status. with_body != 0: the stream stays open for DATA from
/// data_length/send_data; 0: HEADERS with END_STREAM (plus `extra` header pairs name,value,...).
int cnghttp2_submit_response(cnghttp2 *h, int32_t stream, int status, int with_body, const char *const *extra, size_t nextra);
/// A stream that had nothing to send (data_length returned 0) has bytes again.
int cnghttp2_resume(cnghttp2 *h, int32_t stream);
int cnghttp2_submit_rst(cnghttp2 *h, int32_t stream, uint32_t error_code);
/// GOAWAY with the last stream we processed.
int cnghttp2_submit_goaway(cnghttp2 *h, uint32_t error_code);

/// Bytes `stream` may send now: the smaller of its window and the connection's (<= 0: none).
int32_t cnghttp2_send_window(cnghttp2 *h, int32_t stream);
/// The peer's value of a SETTINGS parameter (id as on the wire).
uint32_t cnghttp2_remote_setting(cnghttp2 *h, int32_t id);

/// nghttp2's text for a library error, and the name of an HTTP/2 error code.
const char *cnghttp2_strerror(int code);
const char *cnghttp2_error_name(uint32_t error_code);
#endif
