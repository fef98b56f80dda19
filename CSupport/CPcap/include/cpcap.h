// libpcap shim: the only C that includes pcap.h. loft uses libpcap for one thing: compiling a
// capture filter (tcpdump's expression language) into a BPF program and running it on raw IP
// packets in loft's own capture path (`loft capture`, docs/capture.md). No device is opened.
#ifndef CPCAP_H
#define CPCAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct cpcap_filter cpcap_filter;

/// `expression` compiled for raw IP packets (LINKTYPE_RAW) cut at `snaplen` bytes. NULL on an
/// error, with libpcap's message in `error` (at most `error_len` bytes, NUL-terminated).
cpcap_filter *cpcap_compile(const char *expression, int snaplen, char *error, size_t error_len);

/// 1 when the packet (`captured` bytes of it here, `length` on the wire) matches, else 0.
int cpcap_match(const cpcap_filter *f, const uint8_t *packet, uint32_t captured, uint32_t length);

/// The BPF program's instruction count (for tests and logs).
int cpcap_instructions(const cpcap_filter *f);

void cpcap_free(cpcap_filter *f);

#endif
