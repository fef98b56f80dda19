// libqrencode shim: the only C that includes qrencode.h.
#ifndef CQRENCODE_H
#define CQRENCODE_H
#include <stddef.h>
#include <stdint.h>

/// The QR code of `len` bytes of `data` (8-bit mode), error correction level 0 L, 1 M, 2 Q, 3 H,
/// the smallest version that fits. Returns width*width bytes, 1 for a dark module, row by row
/// (free with cqrencode_free), and the width in *width; NULL when the data does not fit any version.
uint8_t *cqrencode_encode(const uint8_t *data, size_t len, int level, int *width);
void cqrencode_free(uint8_t *modules);

#endif
