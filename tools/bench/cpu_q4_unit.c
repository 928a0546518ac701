/* tools/bench/cpu_q4_unit.c: what the CPU's one-row 4-bit matmul unit costs (cpu_simd_pairs.c's quad_fused, one input
 * row), against two other forms, on one core with the weights in L1 (docs/performance.md, fifty-second pass):
 *   today     each pair's two code words broadcast and merged (a's in lanes 0..7, b's in 8..15), shifted, masked,
 *             the weights picked from the pair's two 16-entry tables (vpermt2ps), then x * w added to the pair's sum
 *   qword     the same with the pair's words stored side by side (a layout the CPU does not have): one 64-bit
 *             broadcast, no merge; the lanes alternate a and b, so x comes duplicated (x0 x0 x1 x1 ...)
 *   multiply  the multiply and the add alone, weights already in registers: the floor of exact f32 without FMA
 * Prints ns a chunk of 4 pairs (8 weight rows x 8 inputs: 64 multiply-adds). Then the whole one-row matmul in today's
 * and the qword layout (each group's tables and prefetches ahead, as quad_fused does) over a weight
 * that stays in the caches (6144 x 1024) and one that streams from memory (the 0.8B's head, 248320 x 1024): G
 * multiply-adds a second, and whether the two layouts' outputs are the same bits. Not part of the build or the tests:
 *   gcc -O2 -std=c11 -mavx512f tools/bench/cpu_q4_unit.c -o /tmp/cpu_q4_unit && /tmp/cpu_q4_unit */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KERNEL __attribute__((noipa)) /* each call runs: no hoisting across the timing loop */
#define CHUNKS 128                   /* 1,024 inputs, as the 0.8B's hidden size */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float finish(__m512 acc[4]) {
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* Pair k's weights of chunk c from its two 16-entry tables. pa: the pair's first code bytes. Today's layout: row a's
 * word at pa + 4 c and row b's a row later, a's in lanes 0..7, b's in 8..15. qword: both words at pa + 8 c, the lanes
 * alternating a and b. */
static inline __attribute__((always_inline)) __m512 pair_weights(int qw, const unsigned char *pa, int64_t row,
                                                                 int64_t c, __m512 ta, __m512 tb) {
    const __m512i shifts = qw ? _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28)
                              : _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i b_lanes = qw ? _mm512_setr_epi32(0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16)
                               : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
    __m512i words;
    if (qw) {
        int64_t q;
        memcpy(&q, pa + 8 * c, 8);
        words = _mm512_set1_epi64(q);
    } else {
        uint32_t wa, wb;
        memcpy(&wa, pa + 4 * c, 4);
        memcpy(&wb, pa + row + 4 * c, 4);
        words = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32((int)wa), _mm512_set1_epi32((int)wb));
    }
    const __m512i index =
        _mm512_ternarylogic_epi32(_mm512_srlv_epi32(words, shifts), _mm512_set1_epi32(15), b_lanes, 0xEA);
    return _mm512_permutex2var_ps(ta, index, tb);
}
/* x's inputs 8 c .. 8 c + 7 in both halves (today), or x duplicated (qword: xd's 16 values at 16 c). */
static inline __attribute__((always_inline)) __m512 x_chunk(int qw, const float *x, int64_t c) {
    return qw ? _mm512_loadu_ps(x + 16 * c)
              : _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(x + 8 * c))));
}

/* The unit alone: pair k's codes at codes + 2 k row (row: a row's bytes), its tables tab[2 k], tab[2 k + 1]. */
static inline __attribute__((always_inline)) float unit(int qw, const unsigned char *codes, int64_t row,
                                                        const float *x, const __m512 *tab) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int c = 0; c < CHUNKS; c++) {
        const __m512 xc = x_chunk(qw, x, c);
/* unrolled, the sums stay in registers (an array indexed in a loop gcc does not unroll lives on the stack) */
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(xc, pair_weights(qw, codes + 2 * k * row, row, c, tab[2 * k],
                                                                          tab[2 * k + 1])));
    }
    return finish(acc);
}
KERNEL static float today(const unsigned char *codes, int64_t row, const float *x, const __m512 *tab) {
    return unit(0, codes, row, x, tab);
}
KERNEL static float qword(const unsigned char *codes, int64_t row, const float *xd, const __m512 *tab) {
    return unit(1, codes, row, xd, tab);
}

KERNEL static float multiply(const float *xd, const __m512 *tab) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int c = 0; c < CHUNKS; c++) {
        const __m512 xc = _mm512_loadu_ps(xd + 16 * c);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(xc, tab[k]));
    }
    return finish(acc);
}

/* The whole matmul, one input row: rows o .. o + 7 a quad, w's codes in today's layout (row after row) or, qword, pair
 * p's chunk c at w + 2 p row + 8 c; scales and biases bf16 [row][group of 64]; xd is x duplicated for qword. */
static float bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static __m512 q4_table(float s, float b) {
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(s), codes), _mm512_set1_ps(b));
}
KERNEL static void matmul(int qw, const unsigned char *w, const uint16_t *sc, const uint16_t *bi, int64_t n_in,
                          int64_t n_out, const float *x, float *y) {
    const int64_t row = n_in / 2, ng = n_in / 64;
    for (int64_t o = 0; o < n_out; o += 8) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t g = 0; g < ng; g++) {
            __m512 ta[4], tb[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const int64_t a = o + 2 * k;
                ta[k] = q4_table(bf16(sc[a * ng + g]), bf16(bi[a * ng + g]));
                tb[k] = q4_table(bf16(sc[(a + 1) * ng + g]), bf16(bi[(a + 1) * ng + g]));
                if (!qw && o + 16 < n_out) { /* two quads ahead, a line a row, as quad_fused */
                    _mm_prefetch((const char *)w + (a + 16) * row + g * 32, _MM_HINT_T0);
                    _mm_prefetch((const char *)w + (a + 17) * row + g * 32, _MM_HINT_T0);
                }
                if (qw && o + 32 < n_out) /* a line a pair, four quads ahead: its best of 1, 2, 4 and 8 quads */
                    _mm_prefetch((const char *)w + (a + 32) * row + g * 64, _MM_HINT_T0);
            }
            for (int64_t c = 8 * g; c < 8 * g + 8; c++) {
                const __m512 xc = x_chunk(qw, x, c);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++)
                    acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(xc, pair_weights(qw, w + (o + 2 * k) * row, row, c,
                                                                                  ta[k], tb[k])));
            }
        }
        for (int k = 0; k < 4; k++) { /* each row's 8 lanes in order (qword: every other lane) */
            float s[16], a = 0.0f, b = 0.0f;
            _mm512_storeu_ps(s, acc[k]);
            for (int l = 0; l < 8; l++) a += s[qw ? 2 * l : l], b += s[qw ? 2 * l + 1 : 8 + l];
            y[o + 2 * k] = a, y[o + 2 * k + 1] = b;
        }
    }
}
static void rows_table(int64_t n_in, int64_t n_out) {
    const int64_t row = n_in / 2, ng = n_in / 64;
    unsigned char *w = malloc((size_t)(n_out * row)), *wq = malloc((size_t)(n_out * row));
    uint16_t *sc = malloc((size_t)(n_out * ng) * 2), *bi = malloc((size_t)(n_out * ng) * 2);
    float *x = malloc((size_t)n_in * 4), *xd = malloc((size_t)n_in * 8), *y = malloc((size_t)n_out * 4),
          *yq = malloc((size_t)n_out * 4);
    if (!w || !wq || !sc || !bi || !x || !xd || !y || !yq) exit(1);
    for (int64_t i = 0; i < n_out * row; i++) w[i] = (unsigned char)rand();
    for (int64_t p = 0; p < n_out / 2; p++) /* qword: the pair's words side by side */
        for (int64_t c = 0; c < n_in / 8; c++) {
            memcpy(wq + 2 * p * row + 8 * c, w + 2 * p * row + 4 * c, 4);
            memcpy(wq + 2 * p * row + 8 * c + 4, w + (2 * p + 1) * row + 4 * c, 4);
        }
    for (int64_t i = 0; i < n_out * ng; i++)
        sc[i] = (uint16_t)(0x3c00 + (rand() & 255)), bi[i] = (uint16_t)(0xbc00 + (rand() & 255));
    for (int64_t i = 0; i < n_in; i++) x[i] = (float)(rand() % 1000) * 1e-3f;
    for (int64_t c = 0; c < n_in / 8; c++)
        for (int l = 0; l < 8; l++) xd[16 * c + 2 * l] = xd[16 * c + 2 * l + 1] = x[8 * c + l];
    double g[2][2];
    for (int run = 0; run < 2; run++)
        for (int qw = 0; qw < 2; qw++) {
            int reps = 0;
            const double t0 = now();
            do matmul(qw, qw ? wq : w, sc, bi, n_in, n_out, qw ? xd : x, qw ? yq : y), reps++;
            while (now() - t0 < 0.5);
            g[qw][run] = (double)(n_in * n_out) * reps / (now() - t0) / 1e9;
        }
    printf("| %lld x %lld (%.0f MB) | %.2f / %.2f | %.2f / %.2f | %s |\n", (long long)n_out, (long long)n_in,
           (double)(n_out * row) / 1e6, g[0][0], g[0][1], g[1][0], g[1][1],
           memcmp(y, yq, (size_t)n_out * 4) ? "no" : "yes");
    free(w), free(wq), free(sc), free(bi), free(x), free(xd), free(y), free(yq);
}

int main(void) {
    const int64_t row = 4 * CHUNKS, reps = 200000;
    unsigned char *codes = malloc(8 * row);
    float *x = malloc(16 * CHUNKS * sizeof(float));
    if (!codes || !x) return 1;
    for (int64_t i = 0; i < 8 * row; i++) codes[i] = (unsigned char)rand();
    for (int i = 0; i < 16 * CHUNKS; i++) x[i] = 1.0f;
    __m512 tab[8];
    for (int k = 0; k < 8; k++) tab[k] = _mm512_set1_ps(1.0f + (float)k * 1e-7f);
    float sink = 0.0f;
    printf("| form | ns a chunk of 4 pairs, two runs |\n|---|---|\n");
    const char *names[3] = {"today", "qword", "multiply"};
    double ns[3][2];
    for (int run = 0; run < 2; run++)
        for (int f = 0; f < 3; f++) {
            const double t0 = now();
            for (int64_t r = 0; r < reps; r++)
                sink += f == 0 ? today(codes, row, x, tab) : f == 1 ? qword(codes, row, x, tab) : multiply(x, tab);
            ns[f][run] = (now() - t0) / (double)(reps * CHUNKS) * 1e9;
        }
    for (int f = 0; f < 3; f++) printf("| %s | %.2f / %.2f |\n", names[f], ns[f][0], ns[f][1]);
    printf("\n| weight, one row | today, G multiply-adds a second | qword | same bits |\n|---|---|---|---|\n");
    rows_table(1024, 6144);
    rows_table(1024, 248320);
    return sink == 0.0f; /* keeps the sums alive */
}
