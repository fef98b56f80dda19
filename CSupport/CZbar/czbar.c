#include "czbar.h"
#include <stdlib.h>
#include <string.h>
#include <zbar.h>

int czbar_scan(const uint8_t *gray, int width, int height, czbar_found found, void *ctx) {
    if (width <= 0 || height <= 0) return -1;
    zbar_image_scanner_t *s = zbar_image_scanner_create();
    if (!s) return -1;
    zbar_image_scanner_set_config(s, ZBAR_NONE, ZBAR_CFG_ENABLE, 0);
    zbar_image_scanner_set_config(s, ZBAR_QRCODE, ZBAR_CFG_ENABLE, 1);
    // Binary data as it is (zbar would otherwise guess a text encoding and convert).
    zbar_image_scanner_set_config(s, ZBAR_QRCODE, ZBAR_CFG_BINARY, 1);
    zbar_image_t *img = zbar_image_create();
    size_t size = (size_t)width * (size_t)height;
    uint8_t *copy = malloc(size);
    if (!img || !copy) { free(copy); if (img) zbar_image_destroy(img); zbar_image_scanner_destroy(s); return -1; }
    memcpy(copy, gray, size);
    zbar_image_set_format(img, zbar_fourcc('Y', '8', '0', '0'));
    zbar_image_set_size(img, (unsigned)width, (unsigned)height);
    zbar_image_set_data(img, copy, size, zbar_image_free_data);
    int n = zbar_scan_image(s, img);
    int count = 0;
    if (n > 0) {
        for (const zbar_symbol_t *sym = zbar_image_first_symbol(img); sym; sym = zbar_symbol_next(sym)) {
            if (zbar_symbol_get_type(sym) != ZBAR_QRCODE) continue;
            found(ctx, (const uint8_t *)zbar_symbol_get_data(sym), zbar_symbol_get_data_length(sym));
            count++;
        }
    }
    zbar_image_destroy(img);
    zbar_image_scanner_destroy(s);
    return n < 0 ? -1 : count;
}
