/* cpu_simd.c: the level of SIMD the CPU backend takes (cpu_simd_level), and AVX2 forms of the
 * matmul's two inner loops, a weight row dequantized to f32 and four dots of one input row, taken where
 * the CPU has AVX2 (with AVX-512, cpu_simd_pairs.c takes most weights instead); the build itself
 * targets x86-64-v2, so the binary still runs where it has neither.
 *
 * Each does the scalar form's f32 operations in the same order, so its results are the same bits:
 * cpu_dot's 8 lanes are the 8 lanes of a __m256, each step a multiply then an add (the target enables
 * AVX2 without FMA, and C11 mode does not contract), the tail and the lane tree are cpu_dot's own;
 * the affine row is scale * (float)code + bias a code, as affine_row computes it. Only the speed
 * changes (docs/performance.md, the CPU pass). test_cpu_simd checks the bits against the scalar forms,
 * tails, NaN and infinities included; QUILL_CPU_SIMD=0 turns the AVX2 forms off.
 * Not here: the choice of blocks and threads (cpu_matmul.c), the formats (cpu_quant.c). */
#include <stdlib.h>

#include "cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

int cpu_simd_level(void) {
    __builtin_cpu_init();
    int level = !__builtin_cpu_supports("avx2") ? CPU_SIMD_NONE
                : !__builtin_cpu_supports("avx512f") ? CPU_SIMD_AVX2 : CPU_SIMD_AVX512;
    const char *env = getenv("QUILL_CPU_SIMD");
    if (env && !strcmp(env, "0")) level = CPU_SIMD_NONE;
    if (env && !strcmp(env, "avx2") && level > CPU_SIMD_AVX2) level = CPU_SIMD_AVX2;
    return level;
}

#define AVX2 __attribute__((target("avx2")))

/* The tail and the tree of cpu_dot, on the 8 lanes stored from a vector accumulator. */
static inline float lanes_tail_tree(float s[8], const float *a, const float *b, int64_t i, int64_t n) {
    for (int l = 0; l < 8; l++)
        if (i + l < n) s[l] += a[i + l] * b[i + l];
    return cpu_lane_tree(s);
}

AVX2 void cpu_dot4_avx2(const float *a, const float *b0, const float *b1, const float *b2, const float *b3,
                        int64_t n, float out[4]) {
    __m256 p = _mm256_setzero_ps(), q = p, r = p, t = p;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(a + i);
        p = _mm256_add_ps(p, _mm256_mul_ps(x, _mm256_loadu_ps(b0 + i)));
        q = _mm256_add_ps(q, _mm256_mul_ps(x, _mm256_loadu_ps(b1 + i)));
        r = _mm256_add_ps(r, _mm256_mul_ps(x, _mm256_loadu_ps(b2 + i)));
        t = _mm256_add_ps(t, _mm256_mul_ps(x, _mm256_loadu_ps(b3 + i)));
    }
    float s[4][8];
    _mm256_storeu_ps(s[0], p);
    _mm256_storeu_ps(s[1], q);
    _mm256_storeu_ps(s[2], r);
    _mm256_storeu_ps(s[3], t);
    const float *b[4] = {b0, b1, b2, b3};
    for (int k = 0; k < 4; k++) out[k] = lanes_tail_tree(s[k], a, b[k], i, n);
}

AVX2 float cpu_dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 p = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) p = _mm256_add_ps(p, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    float s[8];
    _mm256_storeu_ps(s, p);
    return lanes_tail_tree(s, a, b, i, n);
}

/* 8 codes of `bits` (4 or 8) bits from blk, as int32 lanes 0..7. */
static inline AVX2 __m256i codes8(const unsigned char *blk, int bits) {
    if (bits == 8) {
        long long v;
        memcpy(&v, blk, sizeof v);
        return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v));
    }
    uint32_t v;
    memcpy(&v, blk, sizeof v);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)v), shifts), _mm256_set1_epi32(15));
}

static AVX2 int weight_row_avx2(const qweight *W, int64_t o, float *dst) {
    const int64_t n_in = W->n_in;
    if (W->fmt == QW_BF16) {
        if (n_in % 8) return 0;
        const unsigned char *p = (const unsigned char *)W->w + o * n_in * 2;
        for (int64_t i = 0; i < n_in; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)(p + i * 2));
            __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(u));
        }
        return 1;
    }
    if (W->fmt != QW_AFFINE || (W->bits != 4 && W->bits != 8)) return 0;
    const int bits = W->bits, group = W->group;
    const int64_t n_groups = n_in / group;
    const unsigned char *p = (const unsigned char *)W->w + o * (n_in * bits / 8);
    for (int64_t gi = 0; gi < n_groups; gi++) {
        __m256 scale = _mm256_set1_ps(cpu_load_elem(W->scales, W->sb_fmt, o * n_groups + gi));
        __m256 bias = _mm256_set1_ps(cpu_load_elem(W->biases, W->sb_fmt, o * n_groups + gi));
        /* The rows stream from memory once a token: ask for the bytes 1 KiB ahead, a line at a time. */
        for (int k = 0; k < group * bits / 8; k += 64)
            _mm_prefetch((const char *)p + k + 1024, _MM_HINT_T0);
        for (int i = 0; i < group; i += 8, p += bits, dst += 8) {
            __m256 c = _mm256_cvtepi32_ps(codes8(p, bits));
            _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_mul_ps(scale, c), bias));
        }
    }
    return 1;
}

int cpu_weight_row_simd(int level, const qweight *W, int64_t o, float *dst) {
    return level >= CPU_SIMD_AVX2 && weight_row_avx2(W, o, dst);
}

#else /* not x86-64 with GNU C: the scalar forms everywhere */

int cpu_simd_level(void) { return CPU_SIMD_NONE; }
void cpu_dot4_avx2(const float *a, const float *b0, const float *b1, const float *b2, const float *b3, int64_t n,
                   float out[4]) {
    cpu_dot4(a, b0, b1, b2, b3, n, out);
}
float cpu_dot_avx2(const float *a, const float *b, int64_t n) { return cpu_dot(a, b, n); }
int cpu_weight_row_simd(int level, const qweight *W, int64_t o, float *dst) {
    (void)level, (void)W, (void)o, (void)dst;
    return 0;
}

#endif
