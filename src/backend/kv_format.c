/* kv_format.c: the K/V cache row formats (backend.h qkv_row_bytes): their sizes and the reference encoding
 * and decoding. The CPU backend stores and reads rows through these; the CUDA kernels compute the same
 * bits (cuda_kv.cuh), which the CUDA tests check byte for byte. */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_internal.h"

#define Q8_TINY 1e-30f /* a head whose largest magnitude is below this is stored as zeros */

int64_t qkv_row_bytes(qwfmt fmt, int n_kv, int dim) {
    if (n_kv <= 0 || dim <= 0) return 0;
    switch (fmt) {
    case QW_F32: return (int64_t)n_kv * dim * 4;
    case QW_BF16: return (int64_t)n_kv * dim * 2;
    case QW_Q8: return dim % 16 ? 0 : ((int64_t)n_kv * (dim + 4) + 15) & ~(int64_t)15;
    default: return 0;
    }
}

void qkv_q8_encode_head(const float *x, int dim, int8_t *codes, float *scale) {
    float amax = 0.0f;
    int bad = 0;
    for (int d = 0; d < dim; d++) {
        const float a = fabsf(x[d]);
        bad |= !(a <= 3.40282347e38f); /* inf or NaN */
        if (a > amax) amax = a;
    }
    if (bad || amax < Q8_TINY) {
        memset(codes, 0, (size_t)dim);
        *scale = bad ? NAN : 0.0f;
        return;
    }
    const float inv = 127.0f / amax;
    for (int d = 0; d < dim; d++) {
        float c = rintf(x[d] * inv); /* |x| <= amax: |c| <= 127 but for the rounding of inv */
        codes[d] = (int8_t)(c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c);
    }
    *scale = amax / 127.0f;
}

void qkv_encode_row(qwfmt fmt, const float *x, int n_kv, int dim, void *row) {
    const int64_t n = (int64_t)n_kv * dim;
    if (fmt == QW_F32) {
        memcpy(row, x, (size_t)n * sizeof(float));
    } else if (fmt == QW_BF16) {
        uint16_t *h = row;
        for (int64_t i = 0; i < n; i++) h[i] = cpu_f32_to_bf16(x[i]);
    } else if (fmt == QW_Q8) {
        unsigned char *b = row;
        float *scales = (float *)(b + n);
        for (int h = 0; h < n_kv; h++) qkv_q8_encode_head(x + (int64_t)h * dim, dim, (int8_t *)b + (int64_t)h * dim,
                                                        &scales[h]);
        memset(b + n + 4 * n_kv, 0, (size_t)(qkv_row_bytes(fmt, n_kv, dim) - n - 4 * n_kv));
    }
}

void qkv_decode_head(qwfmt fmt, const void *row, int n_kv, int dim, int h, float *out) {
    const int64_t off = (int64_t)h * dim;
    if (fmt == QW_F32) {
        memcpy(out, (const float *)row + off, (size_t)dim * sizeof(float));
    } else if (fmt == QW_BF16) {
        const uint16_t *b = (const uint16_t *)row + off;
        for (int d = 0; d < dim; d++) out[d] = cpu_bf16_to_f32(b[d]);
    } else if (fmt == QW_Q8) {
        const int8_t *c = (const int8_t *)row + off;
        float s;
        memcpy(&s, (const unsigned char *)row + (int64_t)n_kv * dim + 4 * h, sizeof s);
        for (int d = 0; d < dim; d++) out[d] = (float)c[d] * s;
    }
}
