#include "cimage.h"
#include <stdio.h>   // before jpeglib.h, which uses FILE
#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

void cimage_free(uint8_t *pixels) { free(pixels); }

// MARK: PNG

static uint8_t *png_gray(const uint8_t *bytes, size_t len, size_t max_pixels, int *w, int *h, char *err, size_t errlen) {
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&image, bytes, len)) {
        snprintf(err, errlen, "PNG: %s", image.message);
        return NULL;
    }
    if ((size_t)image.width * image.height > max_pixels || image.width == 0 || image.height == 0) {
        snprintf(err, errlen, "PNG: %ux%u pixels is more than this reads", image.width, image.height);
        png_image_free(&image);
        return NULL;
    }
    image.format = PNG_FORMAT_GRAY;   // alpha composited over the background below
    uint8_t *out = malloc(PNG_IMAGE_SIZE(image));
    if (!out) { png_image_free(&image); snprintf(err, errlen, "out of memory"); return NULL; }
    png_color white = { 255, 255, 255 };
    if (!png_image_finish_read(&image, &white, out, 0, NULL)) {
        snprintf(err, errlen, "PNG: %s", image.message);
        free(out);
        png_image_free(&image);
        return NULL;
    }
    *w = (int)image.width;
    *h = (int)image.height;
    return out;
}

uint8_t *cimage_encode_png(const uint8_t *gray, int width, int height, size_t *out_len) {
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    image.width = (png_uint_32)width;
    image.height = (png_uint_32)height;
    image.format = PNG_FORMAT_GRAY;
    png_alloc_size_t size = 0;
    if (!png_image_write_to_memory(&image, NULL, &size, 0, gray, 0, NULL)) return NULL;
    uint8_t *out = malloc(size);
    if (!out) return NULL;
    if (!png_image_write_to_memory(&image, out, &size, 0, gray, 0, NULL)) { free(out); return NULL; }
    *out_len = size;
    return out;
}

// MARK: JPEG

struct jerr { struct jpeg_error_mgr pub; jmp_buf jump; char msg[JMSG_LENGTH_MAX]; };

static void jpeg_fail(j_common_ptr c) {
    struct jerr *e = (struct jerr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jump, 1);
}

static void jpeg_quiet(j_common_ptr c, int level) { (void)c; (void)level; }

static uint8_t *jpeg_gray(const uint8_t *bytes, size_t len, size_t max_pixels, int *w, int *h, char *err, size_t errlen) {
    struct jpeg_decompress_struct c;
    struct jerr e;
    uint8_t *volatile out = NULL;
    c.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = jpeg_fail;
    e.pub.emit_message = jpeg_quiet;
    if (setjmp(e.jump)) {
        snprintf(err, errlen, "JPEG: %s", e.msg);
        jpeg_destroy_decompress(&c);
        free(out);
        return NULL;
    }
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, bytes, (unsigned long)len);
    jpeg_read_header(&c, TRUE);
    if ((size_t)c.image_width * c.image_height > max_pixels) {
        snprintf(err, errlen, "JPEG: %ux%u pixels is more than this reads", c.image_width, c.image_height);
        jpeg_destroy_decompress(&c);
        return NULL;
    }
    c.out_color_space = JCS_GRAYSCALE;
    jpeg_start_decompress(&c);
    size_t stride = c.output_width;
    out = malloc(stride * c.output_height);
    if (!out) { jpeg_destroy_decompress(&c); snprintf(err, errlen, "out of memory"); return NULL; }
    while (c.output_scanline < c.output_height) {
        JSAMPROW row = out + (size_t)c.output_scanline * stride;
        jpeg_read_scanlines(&c, &row, 1);
    }
    *w = (int)c.output_width;
    *h = (int)c.output_height;
    jpeg_finish_decompress(&c);
    jpeg_destroy_decompress(&c);
    return out;
}

uint8_t *cimage_decode_gray(const uint8_t *bytes, size_t len, size_t max_pixels, int *width, int *height,
                            char *err, size_t errlen) {
    static const uint8_t png_magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    if (len >= 8 && memcmp(bytes, png_magic, 8) == 0) return png_gray(bytes, len, max_pixels, width, height, err, errlen);
    if (len >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return jpeg_gray(bytes, len, max_pixels, width, height, err, errlen);
    snprintf(err, errlen, "not a PNG or JPEG picture");
    return NULL;
}
