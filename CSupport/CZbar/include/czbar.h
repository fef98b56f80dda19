// zbar shim: the only C that includes zbar.h.
#ifndef CZBAR_H
#define CZBAR_H
#include <stddef.h>
#include <stdint.h>

/// Called once per QR code found, with its bytes.
typedef void (*czbar_found)(void *ctx, const uint8_t *data, size_t len);

/// Scans a width*height 8-bit grayscale image (row by row) for QR codes (only QR: other
/// symbologies are off). Returns the number found, or -1 on failure.
int czbar_scan(const uint8_t *gray, int width, int height, czbar_found found, void *ctx);

#endif
