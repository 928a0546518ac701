/* tools/bench/cpu_q4_unit.c: what the CPU's one-row 4-bit matmul unit costs (cpu_simd_pairs.c's quad_fused, one input
 * row), against two other forms, on one core with the weights in L1 (docs/performance.md, fifty-second pass):
 *   today     each pair's two code words broadcast and merged (a's in lanes 0..7, b's in 8..15), shifted, masked,
 *             the weights picked from the pair's two 16-entry tables (vpermt2ps), then x * w added to the pair's sum
 *   qword     the same with the pair's words stored side by side (a layout the CPU does not have): one 64-bit
 *             broadcast, no merge; the lanes alternate a and b, so x comes duplicated (x0 x0 x1 x1 ...)
 *   multiply  the multiply and the add alone, weights already in registers: the floor of exact f32 without FMA
 * Prints ns a chunk of 4 pairs (8 weight rows x 8 inputs: 64 multiply-adds). Not part of the build or the tests:
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

/* codes: row r's chunk c at codes + r * row + 4 c */
KERNEL static float today(const unsigned char *codes, int64_t row, const float *x, const __m512 *tab) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i b_half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
    for (int c = 0; c < CHUNKS; c++) {
        const __m512 xc = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(x + 8 * c))));
#pragma GCC unroll 4 /* the sums stay in registers (an array indexed in a loop gcc does not unroll lives on the stack) */
        for (int k = 0; k < 4; k++) {
            uint32_t wa, wb;
            memcpy(&wa, codes + 2 * k * row + 4 * c, 4);
            memcpy(&wb, codes + (2 * k + 1) * row + 4 * c, 4);
            const __m512i words =
                _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32((int)wa), _mm512_set1_epi32((int)wb));
            const __m512i index =
                _mm512_ternarylogic_epi32(_mm512_srlv_epi32(words, shifts), _mm512_set1_epi32(15), b_half, 0xEA);
            const __m512 w = _mm512_permutex2var_ps(tab[2 * k], index, tab[2 * k + 1]);
            acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(xc, w));
        }
    }
    return finish(acc);
}

/* codes: pair k's chunk c, a's word then b's, at codes + k * pair + 8 c; xd: x duplicated */
KERNEL static float qword(const unsigned char *codes, int64_t pair, const float *xd, const __m512 *tab) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    const __m512i shifts = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
    const __m512i b_odd = _mm512_setr_epi32(0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16);
    for (int c = 0; c < CHUNKS; c++) {
        const __m512 xc = _mm512_loadu_ps(xd + 16 * c);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            int64_t q;
            memcpy(&q, codes + k * pair + 8 * c, 8);
            const __m512i index = _mm512_ternarylogic_epi32(_mm512_srlv_epi32(_mm512_set1_epi64(q), shifts),
                                                            _mm512_set1_epi32(15), b_odd, 0xEA);
            const __m512 w = _mm512_permutex2var_ps(tab[2 * k], index, tab[2 * k + 1]);
            acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(xc, w));
        }
    }
    return finish(acc);
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
                sink += f == 0 ? today(codes, row, x, tab) : f == 1 ? qword(codes, 2 * row, x, tab) : multiply(x, tab);
            ns[f][run] = (now() - t0) / (double)(reps * CHUNKS) * 1e9;
        }
    for (int f = 0; f < 3; f++) printf("| %s | %.2f / %.2f |\n", names[f], ns[f][0], ns[f][1]);
    return sink == 0.0f; /* keeps the sums alive */
}
