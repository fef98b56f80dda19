#include "cqrencode.h"
#include <qrencode.h>
#include <stdlib.h>

uint8_t *cqrencode_encode(const uint8_t *data, size_t len, int level, int *width) {
    static const QRecLevel levels[] = { QR_ECLEVEL_L, QR_ECLEVEL_M, QR_ECLEVEL_Q, QR_ECLEVEL_H };
    if (level < 0 || level > 3 || len > 7089) return NULL;
    QRcode *q = QRcode_encodeData((int)len, data, 0, levels[level]);
    if (!q) return NULL;
    int w = q->width;
    uint8_t *out = malloc((size_t)w * (size_t)w);
    if (out) {
        for (int i = 0; i < w * w; i++) out[i] = q->data[i] & 1;
        *width = w;
    }
    QRcode_free(q);
    return out;
}

void cqrencode_free(uint8_t *modules) { free(modules); }
