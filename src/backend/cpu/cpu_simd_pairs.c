/* cpu_simd_pairs.c: the matmul over a range of weight rows with AVX-512, two weight rows in each
 * 512-bit register: lanes 0..7 are row a's 8 dot-product lanes, lanes 8..15 row b's. cpu_dot's lanes
 * are 8 wide, so a 512-bit register cannot hold 16 inputs of one row without changing the order of
 * the sums; it can hold two rows' 8, each half doing exactly what one 256-bit register does. So every
 * output has the scalar form's bits (test_cpu_simd), and the multiplies and adds are half as many.
 *
 * Up to 4 input rows (decode, a few streams): the pair's codes become f32 weights in registers and meet every
 * row at once, with no scratch. More input rows (prefill, many streams): a quad of 8 weight rows is dequantized
 * into scratch as pairs, chunk-interleaved ([n_in / 8][2][8] floats a pair), and every input row of a block runs
 * over it while it is in L1 (32 KiB at n_in 1024) or L2; the blocks of input rows (1.5 MiB) stay in L2 from one
 * quad to the next. Four pairs go at once, each with its own sum, so that no add waits for the one before; rows
 * missing at the end of a range are stood in for by the last row, their outputs dropped.
 * Takes 4- and 8-bit AFFINE and BF16 weights with n_in % 8 == 0 (cpu_pairs_take); the rest stay with
 * cpu_matmul.c's blocks. Not here: the choice of the level (cpu_simd.c), threads (cpu_matmul.c). */
#include "cpu_internal.h"

int cpu_pairs_take(const qweight *W) {
    if (W->n_in % 8) return 0;
    return W->fmt == QW_BF16 || (W->fmt == QW_AFFINE && (W->bits == 4 || W->bits == 8));
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))

/* Lanes 0..7 = a, lanes 8..15 = b. */
static inline AVX512 __m512 halves(float a, float b) {
    return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

/* The weight formats the pairs take, as compile-time constants of each kernel below. */
enum { PAIR_BF16, PAIR_Q4, PAIR_Q8 };

static inline int pair_kind(const qweight *W) {
    return W->fmt == QW_BF16 ? PAIR_BF16 : W->bits == 4 ? PAIR_Q4 : PAIR_Q8;
}

/* Inputs 8c..8c+7 of rows a and b (bytes ra, rb) as f32 weights: scale * code + bias for AFFINE, the bits shifted
 * for BF16. For 8 bits, scale and bias are the pair's (halves()): the codes widened, then the multiply and the add.
 * For 4 bits, scale and bias are row a's and row b's 16 possible weights of the group (q4_table()), and the codes
 * pick them (one permute, with code | 16 in lanes 8..15 choosing b's): the same values, made once a group rather
 * than once a chunk. */
static inline __attribute__((always_inline)) AVX512 __m512 pair_chunk(int kind, const unsigned char *ra,
                                                                      const unsigned char *rb, int64_t c,
                                                                      __m512 scale, __m512 bias) {
    if (kind == PAIR_BF16) {
        __m128i ha = _mm_loadu_si128((const __m128i *)(ra + c * 16)), hb = _mm_loadu_si128((const __m128i *)(rb + c * 16));
        __m512i u = _mm512_cvtepu16_epi32(_mm256_inserti128_si256(_mm256_castsi128_si256(ha), hb, 1));
        return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    }
    __m512i codes;
    if (kind == PAIR_Q8) {
        __m128i both = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(ra + c * 8)),
                                          _mm_loadl_epi64((const __m128i *)(rb + c * 8)));
        codes = _mm512_cvtepu8_epi32(both);
    } else {
        uint32_t wa, wb;
        memcpy(&wa, ra + c * 4, 4);
        memcpy(&wb, rb + c * 4, 4);
        const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i b_half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
        __m512i words = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32((int)wa), _mm512_set1_epi32((int)wb));
        /* (words >> shift) & 15 | b_half in one ternary op: 0xEA is (A & B) | C */
        __m512i index =
            _mm512_ternarylogic_epi32(_mm512_srlv_epi32(words, shifts), _mm512_set1_epi32(15), b_half, 0xEA);
        return _mm512_permutex2var_ps(scale, index, bias);
    }
    return _mm512_add_ps(_mm512_mul_ps(scale, _mm512_cvtepi32_ps(codes)), bias);
}

/* A row's 16 possible 4-bit weights in a group, scale * code + bias for codes 0..15: pair_chunk's arithmetic. */
static inline AVX512 __m512 q4_table(float scale, float bias) {
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(scale), codes), _mm512_set1_ps(bias));
}

/* cpu_dot's lane tree on each half of acc: out[0] row a, out[1] row b. */
static inline AVX512 void pair_trees(__m512 acc, float out[2]) {
    float s[16];
    _mm512_storeu_ps(s, acc);
    out[0] = cpu_lane_tree(s);
    out[1] = cpu_lane_tree(s + 8);
}

static inline int64_t row_len(const qweight *W) { return W->fmt == QW_BF16 ? W->n_in * 2 : W->n_in * W->bits / 8; }
static inline const unsigned char *row_bytes(const qweight *W, int64_t o) {
    return (const unsigned char *)W->w + o * row_len(W);
}

/* Both halves of a 512-bit register get x's inputs 8c..8c+7. */
static inline AVX512 __m512 x_chunk(const float *x, int64_t c) {
    __m256 v = _mm256_loadu_ps(x + 8 * c);
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(v)));
}

/* Four pairs at a time (8 weight rows, rows[2k] and rows[2k + 1] in pair k): four independent sums, so
 * that an add's latency does not set the pace. */
#define PAIR_EACH(X) X(0) X(1) X(2) X(3)

/* Walks the rows group by group (BF16: one group of every input), loading each pair's scale and bias
 * once a group; BODY sees the chunk index c and, for pair k, the chunk's weights w##k. KIND is a
 * constant. */
#define FOR_QUAD_CHUNKS(KIND, W, rows, BODY)                                                              \
    do {                                                                                                  \
        const int kind_ = (KIND);                                                                         \
        const int64_t per_group_ = kind_ == PAIR_BF16 ? (W)->n_in / 8 : (W)->group / 8;                    \
        const int64_t n_groups_ = (W)->n_in / 8 / per_group_;                                             \
        const int64_t next_ = 16 * row_len(W), group_bytes_ = row_len(W) / n_groups_;                       \
        PAIR_DECL_(0) PAIR_DECL_(1) PAIR_DECL_(2) PAIR_DECL_(3)                                           \
        for (int64_t g_ = 0; g_ < n_groups_; g_++) {                                                      \
            if ((KIND) != PAIR_BF16) { PAIR_EACH(PAIR_GROUP_) }                                           \
            PAIR_EACH(PAIR_PREFETCH_)                                                                     \
            for (int64_t c = g_ * per_group_; c < (g_ + 1) * per_group_; c++) {                           \
                PAIR_EACH(PAIR_CHUNK_)                                                                    \
                BODY                                                                                      \
            }                                                                                             \
        }                                                                                                 \
    } while (0)
#define PAIR_DECL_(k)                                                                                     \
    const unsigned char *ra##k = row_bytes(W, rows[2 * (k)]), *rb##k = row_bytes(W, rows[2 * (k) + 1]);  \
    __m512 scale##k = _mm512_setzero_ps(), bias##k = _mm512_setzero_ps();
#define PAIR_GROUP_(k)                                                                                    \
    {                                                                                                     \
        const float sa_ = cpu_load_elem(W->scales, W->sb_fmt, rows[2 * (k)] * n_groups_ + g_);            \
        const float sb_ = cpu_load_elem(W->scales, W->sb_fmt, rows[2 * (k) + 1] * n_groups_ + g_);        \
        const float ba_ = cpu_load_elem(W->biases, W->sb_fmt, rows[2 * (k)] * n_groups_ + g_);            \
        const float bb_ = cpu_load_elem(W->biases, W->sb_fmt, rows[2 * (k) + 1] * n_groups_ + g_);        \
        scale##k = kind_ == PAIR_Q4 ? q4_table(sa_, ba_) : halves(sa_, sb_);                              \
        bias##k = kind_ == PAIR_Q4 ? q4_table(sb_, bb_) : halves(ba_, bb_);                               \
    }
/* The bytes of the rows two quads on at this group, a line a row: 8 streams of a few bytes a chunk are more than
 * the hardware's prefetchers follow (measured: one stream 14.9 -> 18.5 tokens/s on the 0.8B). */
#define PAIR_PREFETCH_(k)                                                                                 \
    _mm_prefetch((const char *)ra##k + next_ + g_ * group_bytes_, _MM_HINT_T0);                          \
    _mm_prefetch((const char *)rb##k + next_ + g_ * group_bytes_, _MM_HINT_T0);
#define PAIR_CHUNK_(k) __m512 w##k = pair_chunk(kind_, ra##k, rb##k, c, scale##k, bias##k);

/* y for 8 rows and R (1..FUSED_ROWS) input rows x + r ldx, from the codes (no scratch): each chunk of weights is
 * made once and meets every input row while in registers (R x 4 sums). Each row's sums are the ones quad_dot
 * makes from the scratch, in the same order: the same bits. KIND and R are constants of each copy below. */
#define FUSED_ROWS 4
static inline __attribute__((always_inline)) AVX512 void quad_fused_body(int KIND, int R, const qweight *W,
                                                                        const int64_t rows[8], const float *x,
                                                                        int64_t ldx, float *y, int64_t ldy,
                                                                        int live) {
    __m512 acc[FUSED_ROWS][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        for (int k = 0; k < 4; k++) acc[r][k] = _mm512_setzero_ps();
    FOR_QUAD_CHUNKS(KIND, W, rows, {
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            __m512 xc = x_chunk(x + r * ldx, c);
            acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_mul_ps(xc, w0));
            acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_mul_ps(xc, w1));
            acc[r][2] = _mm512_add_ps(acc[r][2], _mm512_mul_ps(xc, w2));
            acc[r][3] = _mm512_add_ps(acc[r][3], _mm512_mul_ps(xc, w3));
        }
    });
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        float out[8];
        for (int k = 0; k < 4; k++) pair_trees(acc[r][k], out + 2 * k);
        memcpy(y + r * ldy, out, (size_t)live * sizeof(float));
    }
}

/* For each kind: the fused dots for 1..4 input rows; and 8 rows dequantized into dst as 4 chunk-interleaved
 * pairs, [4][n_in / 8][2][8]. */
#define QUAD_KERNELS(KIND)                                                                               \
    static AVX512 void quad_fused_##KIND(int R, const qweight *W, const int64_t rows[8], const float *x,   \
                                         int64_t ldx, float *y, int64_t ldy, int live) {                  \
        switch (R) {                                                                                     \
        case 1: quad_fused_body(KIND, 1, W, rows, x, ldx, y, ldy, live); return;                          \
        case 2: quad_fused_body(KIND, 2, W, rows, x, ldx, y, ldy, live); return;                          \
        case 3: quad_fused_body(KIND, 3, W, rows, x, ldx, y, ldy, live); return;                          \
        default: quad_fused_body(KIND, 4, W, rows, x, ldx, y, ldy, live); return;                         \
        }                                                                                                \
    }                                                                                                    \
    static AVX512 void quad_rows_##KIND(const qweight *W, const int64_t rows[8], float *dst) {            \
        const int64_t pair_ = 2 * W->n_in;                                                               \
        FOR_QUAD_CHUNKS(KIND, W, rows, {                                                                  \
            _mm512_storeu_ps(dst + 16 * c, w0);                                                           \
            _mm512_storeu_ps(dst + pair_ + 16 * c, w1);                                                   \
            _mm512_storeu_ps(dst + 2 * pair_ + 16 * c, w2);                                               \
            _mm512_storeu_ps(dst + 3 * pair_ + 16 * c, w3);                                               \
        });                                                                                               \
    }
QUAD_KERNELS(PAIR_BF16)
QUAD_KERNELS(PAIR_Q4)
QUAD_KERNELS(PAIR_Q8)
#undef QUAD_KERNELS

static AVX512 void quad_fused(int R, const qweight *W, const int64_t rows[8], const float *x, int64_t ldx, float *y,
                              int64_t ldy, int live) {
    switch (pair_kind(W)) {
    case PAIR_BF16: quad_fused_PAIR_BF16(R, W, rows, x, ldx, y, ldy, live); return;
    case PAIR_Q4: quad_fused_PAIR_Q4(R, W, rows, x, ldx, y, ldy, live); return;
    default: quad_fused_PAIR_Q8(R, W, rows, x, ldx, y, ldy, live); return;
    }
}

static AVX512 void quad_rows(const qweight *W, const int64_t rows[8], float *dst) {
    switch (pair_kind(W)) {
    case PAIR_BF16: quad_rows_PAIR_BF16(W, rows, dst); return;
    case PAIR_Q4: quad_rows_PAIR_Q4(W, rows, dst); return;
    default: quad_rows_PAIR_Q8(W, rows, dst); return;
    }
}

/* Dots of R (1..DOT_ROWS) input rows x + r n_in with the 4 interleaved pairs at p (8 weight rows): out[r][8]. The
 * rows share each load of the scratch; each row's sums are its own, in the same order either way. 4 rows take 16
 * sums, 4 weights and x in 21 of the 32 registers; against 2 rows, one thread at 512 rows went from 40 to 48 G
 * multiply-adds a second at 1024 inputs and from 31-35 to 43-49 at 2560-12288 (the scratch, from L2 past 1024
 * inputs, is read half as often); 6 rows gave the same as 4. */
#define DOT_ROWS 4
static inline __attribute__((always_inline)) AVX512 void quad_dot_rows(int R, const float *x, const float *p,
                                                                      int64_t n_in, float out[DOT_ROWS][8]) {
    const float *p0 = p, *p1 = p + 2 * n_in, *p2 = p + 4 * n_in, *p3 = p + 6 * n_in;
    __m512 a[DOT_ROWS][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) a[r][k] = _mm512_setzero_ps();
    for (int64_t c = 0; c < n_in / 8; c++) {
        const __m512 w0 = _mm512_loadu_ps(p0 + 16 * c), w1 = _mm512_loadu_ps(p1 + 16 * c);
        const __m512 w2 = _mm512_loadu_ps(p2 + 16 * c), w3 = _mm512_loadu_ps(p3 + 16 * c);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 xc = x_chunk(x + r * n_in, c);
            a[r][0] = _mm512_add_ps(a[r][0], _mm512_mul_ps(xc, w0));
            a[r][1] = _mm512_add_ps(a[r][1], _mm512_mul_ps(xc, w1));
            a[r][2] = _mm512_add_ps(a[r][2], _mm512_mul_ps(xc, w2));
            a[r][3] = _mm512_add_ps(a[r][3], _mm512_mul_ps(xc, w3));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) pair_trees(a[r][k], out[r] + 2 * k);
}
static AVX512 void quad_dot(int R, const float *x, const float *p, int64_t n_in, float out[DOT_ROWS][8]) {
    switch (R) {
    case 1: quad_dot_rows(1, x, p, n_in, out); return;
    case 2: quad_dot_rows(2, x, p, n_in, out); return;
    case 3: quad_dot_rows(3, x, p, n_in, out); return;
    default: quad_dot_rows(DOT_ROWS, x, p, n_in, out); return;
    }
}

/* The input rows of the scratch path's blocks: 1.5 MiB of them, in L2 (2 MiB a core here) with the quad, and at
 * least 128, so that a quad is dequantized again at most once every 128 rows. One thread, 512 rows, G multiply-adds
 * a second (the fifty-third pass in docs/performance.md): at 2560 inputs 37-38 unblocked -> 48-49; at 9216 and
 * 12288 inputs unblocked 47-49 / 43-50, blocks of 40 / 32 rows (1.5 MiB alone) 46 / 42-45, of 128 rows 47 / 46-47. */
#define ROW_BLOCK_BYTES (3 << 19)
#define ROW_BLOCK_MIN 128
static int64_t row_block(int64_t n_in) {
    int64_t rows = ROW_BLOCK_BYTES / (n_in * (int64_t)sizeof(float));
    return rows < ROW_BLOCK_MIN ? ROW_BLOCK_MIN : rows - rows % DOT_ROWS;
}

/* The 8 rows from o0 on, the ones past end replaced by end - 1 (their outputs are not kept). */
static int quad_rows_at(int64_t o0, int64_t end, int64_t rows[8]) {
    for (int k = 0; k < 8; k++) rows[k] = o0 + k < end ? o0 + k : end - 1;
    return (int)(end - o0 < 8 ? end - o0 : 8);
}

AVX512 void cpu_matmul_pairs(const qweight *W, const float *x, int n, float *y, int64_t begin, int64_t end,
                             float *scratch) {
    const int64_t n_in = W->n_in, n_out = W->n_out;
    int64_t rows[8];
    /* Up to 4 rows (decode, a few streams) the codes meet every row in registers. Past that the scratch is
     * faster (measured at 8 / 16 streams on the 0.8B 4-bit: 57 / 69 tokens/s against 55 / 59 fused 4 rows at a
     * time): a quad made once serves all the rows, from L1. */
    if (n <= FUSED_ROWS) {
        for (int64_t o0 = begin; o0 < end; o0 += 8) {
            int live = quad_rows_at(o0, end, rows);
            quad_fused(n, W, rows, x, n_in, y + o0, n_out, live);
        }
        return;
    }
    /* a quad dequantized once, then every input row of a block over it, DOT_ROWS rows at a time. The block is the
     * input rows that fit ROW_BLOCK_BYTES, so that they stay in L2 from one quad to the next rather than coming again
     * from L3 or memory for each; a quad is then dequantized once a block. */
    const int64_t block = row_block(n_in);
    for (int64_t r0 = 0; r0 < n; r0 += block) {
        const int64_t r1 = r0 + block < n ? r0 + block : n;
        for (int64_t o0 = begin; o0 < end; o0 += 8) {
            int live = quad_rows_at(o0, end, rows);
            quad_rows(W, rows, scratch);
            for (int64_t r = r0; r < r1; r += DOT_ROWS) {
                const int R = (int)(r1 - r < DOT_ROWS ? r1 - r : DOT_ROWS);
                float out[DOT_ROWS][8];
                quad_dot(R, x + r * n_in, scratch, n_in, out);
                for (int i = 0; i < R; i++) memcpy(y + (r + i) * n_out + o0, out[i], (size_t)live * sizeof(float));
            }
        }
    }
}

#else

void cpu_matmul_pairs(const qweight *W, const float *x, int n, float *y, int64_t begin, int64_t end,
                      float *scratch) {
    (void)W, (void)x, (void)n, (void)y, (void)begin, (void)end, (void)scratch; /* cpu_simd_level is NONE here */
}

#endif
