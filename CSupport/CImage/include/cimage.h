// libpng and libjpeg shim: the only C that includes png.h and jpeglib.h.
#ifndef CIMAGE_H
#define CIMAGE_H
#include <stddef.h>
#include <stdint.h>

/// Decodes a PNG or JPEG held in memory to 8-bit grayscale (alpha composited over white),
/// row by row, width*height bytes (free with cimage_free). At most max_pixels pixels. Returns NULL
/// with a message in err when the bytes are not a picture this reads.
uint8_t *cimage_decode_gray(const uint8_t *bytes, size_t len, size_t max_pixels, int *width, int *height,
                            char *err, size_t errlen);
void cimage_free(uint8_t *pixels);

/// Encodes width*height 8-bit grayscale pixels as a PNG in memory (free with cimage_free).
uint8_t *cimage_encode_png(const uint8_t *gray, int width, int height, size_t *out_len);

#endif
