/* cpu_blocks.h: register-blocked kernels with the scalar forms' bits, for the CPU ops whose loops are runs of
 * cpu_axpy and cpu_dot (the chunked gated delta rule, attention). Each is always inline and takes the vector
 * width as a constant, so an op's body compiled once an instruction set (CPU_VEC_VARIANTS) gets the registers of
 * that set, while every element's sums keep the scalar order: the same bits at any width (test_cpu_simd). */
#ifndef QUILL_CPU_BLOCKS_H
#define QUILL_CPU_BLOCKS_H

#include "cpu_internal.h"

/* Y[r][c] = Y[r][c] + X[r][m] * B[m][c] over m = m0..m1-1 in order: what a run of cpu_axpy calls computes,
 * element for element (the chunked rule's products, attention's weighted sum of values). Here it is blocked in
 * registers: 4 rows of Y by two vectors of columns stay in 8 registers while m runs, so B's row is loaded once for
 * 4 rows and Y not at all, where the axpy form loads and stores Y at every m. Each element's sums are the axpy
 * form's, in its order: the same bits at any block or vector width. The vectors are GCC vector extensions as wide
 * as the instruction set's registers (VEC is 4, 8 or 16 floats: SSE, AVX2, AVX-512), one kernel a width. */
#define BLOCK_ROWS 4
#define BLOCK_KERNEL(VEC)                                                                                          \
    typedef float vec##VEC __attribute__((vector_size(4 * VEC)));                                                  \
    CPU_FORCE_INLINE void block_accumulate_##VEC(float *Y, int64_t ldy, const float *X, int64_t ldx, int rows,     \
                                                 const float *B, int64_t ldb, int m0, int m1) {                    \
        vec##VEC acc[BLOCK_ROWS][2] = {{{0}}}; /* rows past `rows` stay unused */                                  \
        _Pragma("GCC unroll 4") for (int r = 0; r < BLOCK_ROWS; r++) if (r < rows) {                               \
            memcpy(&acc[r][0], Y + r * ldy, sizeof acc[r][0]);                                                     \
            memcpy(&acc[r][1], Y + r * ldy + VEC, sizeof acc[r][1]);                                               \
        }                                                                                                          \
        for (int m = m0; m < m1; m++) {                                                                            \
            vec##VEC b0, b1;                                                                                       \
            memcpy(&b0, B + m * ldb, sizeof b0);                                                                   \
            memcpy(&b1, B + m * ldb + VEC, sizeof b1);                                                             \
            _Pragma("GCC unroll 4") for (int r = 0; r < BLOCK_ROWS; r++) if (r < rows) {                           \
                const float x = X[r * ldx + m];                                                                    \
                acc[r][0] = acc[r][0] + x * b0;                                                                    \
                acc[r][1] = acc[r][1] + x * b1;                                                                    \
            }                                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 4") for (int r = 0; r < BLOCK_ROWS; r++) if (r < rows) {                               \
            memcpy(Y + r * ldy, &acc[r][0], sizeof acc[r][0]);                                                     \
            memcpy(Y + r * ldy + VEC, &acc[r][1], sizeof acc[r][1]);                                               \
        }                                                                                                          \
    }
BLOCK_KERNEL(4)
BLOCK_KERNEL(8)
BLOCK_KERNEL(16)

/* One block of `rows` <= 4 rows by 2 * vec columns (vec a constant of each instruction set's copy). */
CPU_FORCE_INLINE void block_accumulate(int vec, float *Y, int64_t ldy, const float *X, int64_t ldx, int rows,
                                       const float *B, int64_t ldb, int m0, int m1) {
    if (vec == 16) block_accumulate_16(Y, ldy, X, ldx, rows, B, ldb, m0, m1);
    else if (vec == 8) block_accumulate_8(Y, ldy, X, ldx, rows, B, ldb, m0, m1);
    else block_accumulate_4(Y, ldy, X, ldx, rows, B, ldb, m0, m1);
}

/* Y[r][0..n) += sum over m0 <= m < m1 of X[r][m] B[m][0..n), r < rows, in the axpy form's order and bits. Column
 * blocks outside, so a block's strip of B stays in L1 for every row. */
CPU_FORCE_INLINE void rows_accumulate(int vec, float *Y, int64_t ldy, const float *X, int64_t ldx, int rows,
                                      const float *B, int64_t ldb, int m0, int m1, int n) {
    int c = 0;
    for (; c + 2 * vec <= n; c += 2 * vec)
        for (int r = 0; r < rows; r += BLOCK_ROWS) {
            if (rows - r >= BLOCK_ROWS) /* the common case, with its row count a constant */
                block_accumulate(vec, Y + r * ldy + c, ldy, X + r * ldx, ldx, BLOCK_ROWS, B + c, ldb, m0, m1);
            else
                block_accumulate(vec, Y + r * ldy + c, ldy, X + r * ldx, ldx, rows - r, B + c, ldb, m0, m1);
        }
    for (int r = 0; r < rows && c < n; r++)
        for (int m = m0; m < m1; m++)
            for (int cc = c; cc < n; cc++) Y[r * ldy + cc] += X[r * ldx + m] * B[m * ldb + cc];
}

/* cpu_dot's 8 lanes as one vector (two SSE registers in the SSE copy): lane l sums a[i] b[i] for i = l mod 8 in
 * order, the tail's elements going to lanes 0.., then cpu_lane_tree. So out[k] == cpu_dot(a, rows[k]) bit
 * for bit; four rows at a time share a's loads and keep four sums going. */
typedef float lanes8 __attribute__((vector_size(32)));
CPU_FORCE_INLINE void dots_against(const float *a, const float *rows, int64_t ld, int count, int n, float *out) {
    const int whole = n & ~7;
    for (int k = 0; k < count; k += 4) {
        const int in_group = count - k < 4 ? count - k : 4;
        const float *b = rows + (int64_t)k * ld;
        lanes8 s[4] = {{0}};
        for (int i = 0; i < whole; i += 8) {
            lanes8 x;
            memcpy(&x, a + i, sizeof x);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                lanes8 y;
                memcpy(&y, b + (g < in_group ? g : 0) * ld + i, sizeof y); /* a short group repeats row 0 */
                s[g] = s[g] + x * y;
            }
        }
        for (int g = 0; g < in_group; g++) {
            float l[8];
            memcpy(l, &s[g], sizeof l);
            for (int i = whole; i < n; i++) l[i - whole] += a[i] * b[g * ld + i];
            out[k + g] = cpu_lane_tree(l);
        }
    }
}

/* dots_against for two q heads a and b at once: each row's loads serve both (out_a[k], out_b[k]: cpu_dot's bits). */
CPU_FORCE_INLINE void dots_two(const float *a, const float *b, const float *rows, int64_t ld, int count, int n,
                               float *out_a, float *out_b) {
    const int whole = n & ~7;
    for (int k = 0; k < count; k += 4) {
        const int in_group = count - k < 4 ? count - k : 4;
        const float *r = rows + (int64_t)k * ld;
        lanes8 sa[4] = {{0}}, sb[4] = {{0}};
        for (int i = 0; i < whole; i += 8) {
            lanes8 xa, xb;
            memcpy(&xa, a + i, sizeof xa);
            memcpy(&xb, b + i, sizeof xb);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                lanes8 y;
                memcpy(&y, r + (g < in_group ? g : 0) * ld + i, sizeof y);
                sa[g] = sa[g] + xa * y;
                sb[g] = sb[g] + xb * y;
            }
        }
        for (int g = 0; g < in_group; g++) {
            float la[8], lb[8];
            memcpy(la, &sa[g], sizeof la);
            memcpy(lb, &sb[g], sizeof lb);
            for (int i = whole; i < n; i++) {
                la[i - whole] += a[i] * r[g * ld + i];
                lb[i - whole] += b[i] * r[g * ld + i];
            }
            out_a[k + g] = cpu_lane_tree(la);
            out_b[k + g] = cpu_lane_tree(lb);
        }
    }
}

/* AVX-512: heads in pairs, a pair's 8 lanes each as the halves of one 16-float vector ([h | h + 1]) against a row's 8
 * values in both halves, np pairs (1 or 2) x 4 rows a pass. q: np * 2 heads, ldq apart; out: a head's scores ldo
 * apart. Each lane's sum is dots_against's: the same bits. */
typedef float lanes16 __attribute__((vector_size(64)));
CPU_FORCE_INLINE void dots_pairs(const float *q, int64_t ldq, int np, const float *rows, int64_t ld, int count, int n,
                                 float *out, int64_t ldo) {
    const int whole = n & ~7;
    for (int k = 0; k < count; k += 4) {
        const int in_group = count - k < 4 ? count - k : 4;
        const float *r = rows + (int64_t)k * ld;
        lanes16 s[2][4] = {{{0}}};
        for (int i = 0; i < whole; i += 8) {
            lanes16 x[2];
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++)
                if (p < np) {
                    lanes8 lo, hi;
                    memcpy(&lo, q + 2 * p * ldq + i, sizeof lo);
                    memcpy(&hi, q + (2 * p + 1) * ldq + i, sizeof hi);
                    x[p] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
                }
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                lanes8 y8;
                memcpy(&y8, r + (g < in_group ? g : 0) * ld + i, sizeof y8);
                const lanes16 y = __builtin_shufflevector(y8, y8, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 2
                for (int p = 0; p < 2; p++)
                    if (p < np) s[p][g] = s[p][g] + x[p] * y;
            }
        }
        for (int p = 0; p < np; p++)
            for (int g = 0; g < in_group; g++)
                for (int half = 0; half < 2; half++) {
                    const float *qh = q + (2 * p + half) * ldq;
                    float l[8];
                    memcpy(l, (char *)&s[p][g] + 32 * half, sizeof l);
                    for (int i = whole; i < n; i++) l[i - whole] += qh[i] * r[g * ld + i];
                    out[(2 * p + half) * ldo + k + g] = cpu_lane_tree(l);
                }
    }
}

/* out[h ldo + k] = cpu_dot(q + h ldq, rows + k ld, n) for h < heads, k < count: several q heads against the same rows
 * (a K/V head's group in attention), the rows loaded once for 2 or 4 heads; the same bits as dots_against a head. */
CPU_FORCE_INLINE void dots_heads(int vec, const float *q, int64_t ldq, int heads, const float *rows, int64_t ld,
                                 int count, int n, float *out, int64_t ldo) {
    int h = 0;
    if (vec == 16) {
        for (; h + 4 <= heads; h += 4) dots_pairs(q + h * ldq, ldq, 2, rows, ld, count, n, out + h * ldo, ldo);
        for (; h + 2 <= heads; h += 2) dots_pairs(q + h * ldq, ldq, 1, rows, ld, count, n, out + h * ldo, ldo);
    } else {
        for (; h + 2 <= heads; h += 2)
            dots_two(q + h * ldq, q + (h + 1) * ldq, rows, ld, count, n, out + h * ldo, out + (h + 1) * ldo);
    }
    for (; h < heads; h++) dots_against(q + h * ldq, rows, ld, count, n, out + h * ldo);
}

/* name##_simd(int simd, params...): body(vec, args...) compiled for SSE (vec 4), AVX2 (8) and AVX-512 (16), the
 * widest the level allows taken. ARGS is the parenthesised argument list, as for CPU_SIMD_VARIANTS. */
#define CPU_SPLICE_(...) __VA_ARGS__
#if defined(__x86_64__) && defined(__GNUC__)
#define CPU_TARGET_AVX512 __attribute__((target("avx512f")))
#define CPU_VEC_VARIANTS(name, body, ARGS, ...)                                                     \
    static void name##_sse(__VA_ARGS__) { body(4, CPU_SPLICE_ ARGS); }                              \
    static CPU_TARGET_AVX2 void name##_avx2(__VA_ARGS__) { body(8, CPU_SPLICE_ ARGS); }             \
    static CPU_TARGET_AVX512 void name##_avx512(__VA_ARGS__) { body(16, CPU_SPLICE_ ARGS); }        \
    static void name##_simd(int simd, __VA_ARGS__) {                                                \
        if (simd >= CPU_SIMD_AVX512) name##_avx512 ARGS;                                            \
        else if (simd >= CPU_SIMD_AVX2) name##_avx2 ARGS;                                           \
        else name##_sse ARGS;                                                                       \
    }
#else
#define CPU_VEC_VARIANTS(name, body, ARGS, ...)                                                     \
    static void name##_simd(int simd, __VA_ARGS__) {                                                \
        (void)simd;                                                                                 \
        body(4, CPU_SPLICE_ ARGS);                                                                  \
    }
#endif

#endif
