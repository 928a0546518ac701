/* cpu_quant.c: weight formats on the CPU: f16/bf16 -> f32, MLX affine codes, and dequantizing one
 * weight row to f32 (what matmul and embed build on).
 *
 * Layout (backend.h): F32/F16/BF16 rows are n_in elements; an AFFINE row is n_in*bits/32 uint32
 * words holding a little-endian bit stream (code i sits in stream bits [i*bits, (i+1)*bits), the
 * stream's bit b is bit b%8 of byte b/8), with one scale and one bias (sb_fmt) per `group`
 * consecutive inputs: value = scale * code + bias, computed in f32.
 * Invariants: AFFINE codes and all scales/biases are read byte-wise or through memcpy (rows of
 * 3/5/6-bit codes and f16 scales need not be aligned; UBSan checks); F32/F16/BF16 weights are read
 * as arrays, so cpu_weight_check demands their natural alignment (backend alloc gives 64); a row's dequantization is the same whatever row of
 * the batch asks for it. Not here: the dot products (cpu_matmul.c). */
#include "cpu_internal.h"

float cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf, or nan keeping its payload */
    } else if (exp != 0) {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign; /* +-0 */
    } else {
        /* subnormal: man * 2^-24; normalise so the leading 1 lands on bit 10 */
        int e = -14;
        while (!(man & 0x400)) {
            man <<= 1;
            e--;
        }
        man &= 0x3ff;
        bits = sign | ((uint32_t)(e + 127) << 23) | (man << 13);
    }
    return cpu_bits_to_f32(bits);
}

static int plain_fmt(qwfmt f) { return f == QW_F32 || f == QW_F16 || f == QW_BF16; }

qstatus cpu_weight_check(const qweight *W, const char *what) {
    if (!W) return q_fail(Q_EINVAL, "%s: weight is NULL", what);
    if (W->n_out <= 0 || W->n_in <= 0)
        return q_fail(Q_EINVAL, "%s: weight shape [%lld][%lld]", what, (long long)W->n_out,
                      (long long)W->n_in);
    if (!W->w) return q_fail(Q_EINVAL, "%s: weight data is NULL", what);
    if (plain_fmt(W->fmt)) {
        if ((uintptr_t)W->w % qwfmt_elem_bytes(W->fmt) != 0)
            return q_fail(Q_EINVAL, "%s: weight data is not aligned to its %zu-byte elements", what,
                          qwfmt_elem_bytes(W->fmt));
        return Q_OK;
    }
    if (W->fmt != QW_AFFINE) return q_fail(Q_EINVAL, "%s: unknown weight format %d", what, (int)W->fmt);
    int b = W->bits;
    if (b != 2 && b != 3 && b != 4 && b != 5 && b != 6 && b != 8)
        return q_fail(Q_EINVAL, "%s: affine bits %d (want 2, 3, 4, 5, 6 or 8)", what, b);
    if (W->group <= 0 || W->group % 8 != 0 || W->n_in % W->group != 0)
        return q_fail(Q_EINVAL, "%s: affine group %d (want a multiple of 8 dividing n_in %lld)", what,
                      W->group, (long long)W->n_in);
    if ((W->n_in * b) % 32 != 0)
        return q_fail(Q_EINVAL, "%s: n_in %lld * bits %d is not whole uint32 words", what,
                      (long long)W->n_in, b);
    if (!plain_fmt(W->sb_fmt))
        return q_fail(Q_EINVAL, "%s: affine scale format %d (want F32, F16 or BF16)", what, (int)W->sb_fmt);
    if (!W->scales || !W->biases) return q_fail(Q_EINVAL, "%s: affine scales or biases are NULL", what);
    return Q_OK;
}

/* Every 8 codes fill exactly `bits` bytes, and a group (a multiple of 8 inputs) starts on such a
 * block, so each block of 8 is read as one little-endian integer of `bits` bytes. One function per
 * width (AFFINE_ROW) so that the byte count and the shifts are constants: 3x faster than one
 * function with a variable width. */
#define AFFINE_BYTE_(k) \
    if ((k) < BITS_) v |= (uint64_t)blk[(k) < BITS_ ? (k) : 0] << (8 * (k));
#define AFFINE_CODE_(l) \
    dst[i + (l)] = scale * (float)(int32_t)((v >> ((l) * BITS_)) & ((1u << BITS_) - 1u)) + bias;
#define AFFINE_ROW(B)                                                                          \
    static void affine_row_##B(const qweight *W, int64_t o, float *dst) {                       \
        enum { BITS_ = B };                                                                    \
        const int64_t n_in = W->n_in, n_groups = n_in / W->group;                              \
        const unsigned char *row = (const unsigned char *)W->w + o * (n_in * B / 8);            \
        for (int64_t gi = 0; gi < n_groups; gi++) {                                            \
            float scale = cpu_load_elem(W->scales, W->sb_fmt, o * n_groups + gi);              \
            float bias = cpu_load_elem(W->biases, W->sb_fmt, o * n_groups + gi);               \
            for (int64_t i = gi * W->group; i < (gi + 1) * W->group; i += 8) {                 \
                const unsigned char *blk = row + (i / 8) * B;                                  \
                uint64_t v = 0;                                                                \
                CPU_LANES(AFFINE_BYTE_)                                                        \
                CPU_LANES(AFFINE_CODE_)                                                        \
            }                                                                                  \
        }                                                                                      \
    }
AFFINE_ROW(2)
AFFINE_ROW(3)
AFFINE_ROW(4)
AFFINE_ROW(5)
AFFINE_ROW(6)
AFFINE_ROW(8)
#undef AFFINE_ROW
#undef AFFINE_BYTE_
#undef AFFINE_CODE_

static void affine_row(const qweight *W, int64_t o, float *dst) {
    switch (W->bits) {
    case 2: affine_row_2(W, o, dst); return;
    case 3: affine_row_3(W, o, dst); return;
    case 4: affine_row_4(W, o, dst); return;
    case 5: affine_row_5(W, o, dst); return;
    case 6: affine_row_6(W, o, dst); return;
    case 8: affine_row_8(W, o, dst); return;
    }
}

void cpu_weight_row(const qweight *W, int64_t o, float *dst) {
    const int64_t n_in = W->n_in;
    switch (W->fmt) {
    case QW_F32: memcpy(dst, (const float *)W->w + o * n_in, (size_t)n_in * sizeof(float)); return;
    case QW_F16: {
        const uint16_t *p = (const uint16_t *)W->w + o * n_in; /* 2-byte aligned: cpu_weight_check */
        for (int64_t i = 0; i < n_in; i++) dst[i] = cpu_f16_to_f32(p[i]);
        return;
    }
    case QW_BF16: {
        const uint16_t *p = (const uint16_t *)W->w + o * n_in;
        int64_t i = 0;
        for (; i + 8 <= n_in; i += 8) /* blocks of 8 so that gcc -O2 vectorizes it */
            for (int l = 0; l < 8; l++) dst[i + l] = cpu_bf16_to_f32(p[i + l]);
        for (; i < n_in; i++) dst[i] = cpu_bf16_to_f32(p[i]);
        return;
    }
    case QW_AFFINE: affine_row(W, o, dst); return;
    case QW_Q8: return; /* not a weight format: cpu_weight_check refuses it */
    }
}
