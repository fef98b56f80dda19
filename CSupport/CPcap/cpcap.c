#include "cpcap.h"
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cpcap_filter {
    struct bpf_program program;
};

cpcap_filter *cpcap_compile(const char *expression, int snaplen, char *error, size_t error_len) {
    if (error_len > 0) error[0] = 0;
    pcap_t *dead = pcap_open_dead(DLT_RAW, snaplen > 0 ? snaplen : 262144);
    if (!dead) {
        if (error_len > 0) snprintf(error, error_len, "libpcap could not make a handle");
        return NULL;
    }
    cpcap_filter *f = calloc(1, sizeof *f);
    if (!f) {
        pcap_close(dead);
        return NULL;
    }
    if (pcap_compile(dead, &f->program, expression, 1, PCAP_NETMASK_UNKNOWN) != 0) {
        if (error_len > 0) snprintf(error, error_len, "%s", pcap_geterr(dead));
        free(f);
        pcap_close(dead);
        return NULL;
    }
    pcap_close(dead);
    return f;
}

int cpcap_match(const cpcap_filter *f, const uint8_t *packet, uint32_t captured, uint32_t length) {
    return bpf_filter(f->program.bf_insns, packet, length, captured) != 0;
}

int cpcap_instructions(const cpcap_filter *f) { return (int)f->program.bf_len; }

void cpcap_free(cpcap_filter *f) {
    if (!f) return;
    pcap_freecode(&f->program);
    free(f);
}
