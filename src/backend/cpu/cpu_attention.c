/* cpu_attention.c: partial NeoX RoPE and causal GQA attention over per-stream K/V caches
 * (reference/qwen35-architecture.md 2.3).
 *
 * RoPE: pairs (j, j + rot/2), j < rot/2, rotate by angle pos * inv_freq[j] with inv_freq[j] =
 * 1 / theta^((2j)/rot) formed as HF does in f32 (the exponent and the quotient in f32; pow, cos and
 * sin in double, rounded to f32, which is what a correctly rounded f32 libm gives):
 * x1' = x1*cos - x2*sin, x2' = x2*cos + x1*sin. Dims rot..head_dim pass through.
 * Attention: for each seq, first copy its k, v rows into the caches at pos0.., then each q head of each
 * row computes scores s_j = dot(q, k_j) * scale for j = 0..p (cpu_dot), softmax with max subtraction
 * (exp in f32, the sum in double, p_j = e_j / sum in f32), and out = sum_j p_j v_j accumulated in f32
 * in ascending j. An item is up to ATTN_ROWS rows of a seq and a run of q heads sharing a K/V head (attn_items),
 * which share each widened tile of the cache.
 * Layout: q, out [n][n_q][dim]; k, v [n][n_kv][dim]; caches [ctx][n_kv][dim] of f32 or bf16 (rows
 * rounded to nearest even as they are written, widened as they are read); q head h reads kv head
 * h / (n_q / n_kv). Invariants: all cache writes of the call finish before any read; the caller
 * guarantees every cache holds pos0 + n_rows positions.
 * EXACT(batch): a row's arithmetic depends only on its own q row and its seq's cache, never on the rows or heads
 * beside it in an item, the other seqs or the thread count; tests/unit/backend/test_cpu_attention.c (batch, thread
 * counts), test_cpu_simd.c (against the contract written out). */
#include <string.h>

#include "cpu_blocks.h"

#define ROPE_MAX_HALF 512
#define ATTN_MAX_RUN 8 /* q heads an attention item takes at most (a group larger is cut in runs) */
#define ATTN_TILE 64   /* cache positions widened at a time */
#define ATTN_ROWS 8    /* rows of a seq an attention item takes (each tile widened once for them) */

typedef struct rope_job {
    float *x;
    int n_heads, head_dim, rot_dim;
    const int32_t *pos;
    float theta;
} rope_job;

static void rope_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const rope_job *j = ctx;
    const int half = j->rot_dim / 2;
    float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    for (int64_t r = begin; r < end; r++) {
        float p = (float)j->pos[r];
        for (int i = 0; i < half; i++) {
            float e = (float)(2 * i) / (float)j->rot_dim;
            float inv = 1.0f / (float)pow((double)j->theta, (double)e);
            float ang = p * inv;
            cs[i] = (float)cos((double)ang);
            sn[i] = (float)sin((double)ang);
        }
        for (int h = 0; h < j->n_heads; h++) {
            float *x = j->x + (r * j->n_heads + h) * (int64_t)j->head_dim;
            for (int i = 0; i < half; i++) {
                float x1 = x[i], x2 = x[i + half];
                x[i] = x1 * cs[i] - x2 * sn[i];
                x[i + half] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
}

qstatus cpu_rope(qbackend *be, float *x, int n, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
                 float theta) {
    if (n < 0 || n_heads <= 0 || head_dim <= 0)
        return q_fail(Q_EINVAL, "rope: n %d, n_heads %d, head_dim %d", n, n_heads, head_dim);
    if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_dim)
        return q_fail(Q_EINVAL, "rope: rot_dim %d (want even, 0 < rot_dim <= head_dim %d)", rot_dim, head_dim);
    if (rot_dim / 2 > ROPE_MAX_HALF)
        return q_fail(Q_EUNSUPPORTED, "rope: rot_dim %d above %d", rot_dim, 2 * ROPE_MAX_HALF);
    if (!(theta > 0.0f)) return q_fail(Q_EINVAL, "rope: theta %g", (double)theta);
    if (n == 0) return Q_OK;
    if (!x || !pos) return q_fail(Q_EINVAL, "rope: NULL pointer");
    rope_job job = {x, n_heads, head_dim, rot_dim, pos, theta};
    q_parallel_for(cpu_impl(be)->pool, n, 8, rope_range, &job);
    return Q_OK;
}

typedef struct attn_job {
    cpu_backend *cb;
    const float *q;
    const qseq *seqs;
    int n_seqs;
    const int64_t *blocks; /* [n_seqs + 1]: the item blocks before each seq's (ATTN_ROWS rows a block) */
    void *const *k_cache, *const *v_cache;
    qwfmt kv_fmt;
    int64_t max_ctx; /* a thread's scratch: ATTN_ROWS x heads_per_item x max_ctx scores, then ATTN_TILE rows of dim
                      * floats */
    int n_q, n_kv, dim;
    int heads_per_item; /* q heads of one K/V head an item takes: each cache row is widened once for all of them */
    float scale;
    float *out;
} attn_job;

/* n bf16 values (unaligned) as f32, 8 at a time: the bits shifted up, as cpu_bf16_to_f32. With AVX2 and up (vec 8,
 * 16) each value goes above a zero half by an interleave (gcc 12: two unpacks and a permute), not by the conversion
 * (four shuffles and a shift); SSE keeps the conversion, which gcc does not turn into loose words. */
typedef uint16_t bf16x8 __attribute__((vector_size(16)));
typedef uint16_t bf16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
CPU_FORCE_INLINE void widen_bf16(int vec, const unsigned char *src, float *dst, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        bf16x8 h;
        memcpy(&h, src + 2 * d, sizeof h);
        if (vec >= 8) {
            const bf16x8 z = {0};
            const bf16x16 w = __builtin_shufflevector(z, h, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
            memcpy(dst + d, &w, sizeof w);
        } else {
            const u32x8 w = __builtin_convertvector(h, u32x8) << 16;
            memcpy(dst + d, &w, sizeof w);
        }
    }
    for (; d < n; d++) dst[d] = cpu_bf16_to_f32(cpu_load_u16(src + 2 * d));
}

/* n int8 codes times the row's scale, 8 at a time: qkv_decode_head's (float)code * scale. */
typedef int8_t i8x8 __attribute__((vector_size(8)));
typedef float f32x8 __attribute__((vector_size(32)));
CPU_FORCE_INLINE void widen_q8(const unsigned char *codes, float scale, float *dst, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        i8x8 c;
        memcpy(&c, codes + d, sizeof c);
        const f32x8 w = __builtin_convertvector(c, f32x8) * scale;
        memcpy(dst + d, &w, sizeof w);
    }
    for (; d < n; d++) dst[d] = (float)(int8_t)codes[d] * scale;
}

/* Head kvh of cache positions k0..k0+count-1 as rows of dim f32 values, *ld apart: the cache itself (f32) or the
 * rows widened into tile. */
CPU_FORCE_INLINE const float *kv_tile(int vec, const void *cache, qwfmt fmt, int64_t row_bytes, int64_t k0, int count,
                                      int n_kv, int kvh, int dim, float *tile, int64_t *ld) {
    const unsigned char *rows = (const unsigned char *)cache + k0 * row_bytes;
    *ld = dim;
    if (fmt == QW_F32) {
        *ld = row_bytes / (int64_t)sizeof(float);
        return (const float *)rows + (int64_t)kvh * dim;
    } else if (fmt == QW_BF16) {
        for (int i = 0; i < count; i++)
            widen_bf16(vec, rows + i * row_bytes + (int64_t)kvh * dim * 2, tile + (int64_t)i * dim, dim);
    } else if (fmt == QW_Q8) { /* a row: n_kv * dim codes, then n_kv f32 scales */
        for (int i = 0; i < count; i++) {
            const unsigned char *row = rows + i * row_bytes;
            float scale;
            memcpy(&scale, row + (int64_t)n_kv * dim + 4 * (int64_t)kvh, sizeof scale);
            widen_q8(row + (int64_t)kvh * dim, scale, tile + (int64_t)i * dim, dim);
        }
    } else {
        for (int i = 0; i < count; i++)
            qkv_decode_head(fmt, rows + i * row_bytes, n_kv, dim, kvh, tile + (int64_t)i * dim);
    }
    return tile;
}

/* How many of the count positions from k0 position p attends to (0: none). */
CPU_FORCE_INLINE int attended(int64_t p, int64_t k0, int count) {
    return p < k0 ? 0 : p + 1 - k0 < count ? (int)(p + 1 - k0) : count;
}

/* Rows r0 .. r0 + nr - 1 of seq s (consecutive positions p0 ..) with the run of hp q heads from h0, which share K/V
 * head kvh. The cache goes by in tiles of ATTN_TILE positions, each widened once for the rows and the run (a row
 * takes the tile's positions up to its own); the scores are cpu_dot's (dots_heads: four positions at a time, for two
 * or four of the run's heads at once) and the weighted sum of values is the run of cpu_axpy calls it was
 * (rows_accumulate), bit for bit. So each row's arithmetic is its own, whatever rows and heads share its tiles. */
CPU_FORCE_INLINE void attn_rows(int vec, const attn_job *j, int s, int64_t r0, int64_t p0, int nr, int h0,
                                float *scratch) {
    const int hp = j->heads_per_item, dim = j->dim, kvh = h0 / (j->n_q / j->n_kv);
    const int64_t kv_row = qkv_row_bytes(j->kv_fmt, j->n_kv, dim), ctx = j->max_ctx, last = p0 + nr - 1;
    float *tile = scratch + (int64_t)ATTN_ROWS * hp * ctx; /* scratch: row i's head h's scores at (i hp + h) ctx */
    float m[ATTN_ROWS][ATTN_MAX_RUN];
    int64_t ld;
    for (int i = 0; i < nr; i++)
        for (int h = 0; h < hp; h++) m[i][h] = -INFINITY;
    for (int64_t k0 = 0; k0 <= last; k0 += ATTN_TILE) {
        const int count = attended(last, k0, ATTN_TILE);
        const float *keys = kv_tile(vec, j->k_cache[s], j->kv_fmt, kv_row, k0, count, j->n_kv, kvh, dim, tile, &ld);
        for (int i = 0; i < nr; i++) {
            const int n = attended(p0 + i, k0, count);
            if (!n) continue;
            float *sc = scratch + (int64_t)i * hp * ctx + k0;
            dots_heads(vec, j->q + ((r0 + i) * j->n_q + h0) * dim, dim, hp, keys, ld, n, dim, sc, ctx);
            for (int h = 0; h < hp; h++)
                for (int t = 0; t < n; t++) {
                    sc[h * ctx + t] = sc[h * ctx + t] * j->scale;
                    if (sc[h * ctx + t] > m[i][h]) m[i][h] = sc[h * ctx + t];
                }
        }
    }
    for (int i = 0; i < nr; i++)
        for (int h = 0; h < hp; h++) { /* softmax: exp in f32, the sum in double, then each weight over the sum */
            float *score = scratch + ((int64_t)i * hp + h) * ctx;
            double sum = 0.0;
            for (int64_t k = 0; k <= p0 + i; k++) {
                score[k] = expf(score[k] - m[i][h]);
                sum += score[k];
            }
            const float fsum = (float)sum;
            for (int64_t k = 0; k <= p0 + i; k++) score[k] = score[k] / fsum;
        }
    for (int i = 0; i < nr; i++) memset(j->out + ((r0 + i) * j->n_q + h0) * dim, 0, (size_t)hp * dim * sizeof(float));
    for (int64_t k0 = 0; k0 <= last; k0 += ATTN_TILE) {
        const int count = attended(last, k0, ATTN_TILE);
        const float *values = kv_tile(vec, j->v_cache[s], j->kv_fmt, kv_row, k0, count, j->n_kv, kvh, dim, tile, &ld);
        for (int i = 0; i < nr; i++) {
            const int n = attended(p0 + i, k0, count);
            if (!n) continue;
            rows_accumulate(vec, j->out + ((r0 + i) * j->n_q + h0) * dim, dim, scratch + (int64_t)i * hp * ctx + k0,
                            ctx, hp, values, ld, 0, n, dim);
        }
    }
}

/* Items are (a block of up to ATTN_ROWS rows of one seq, run of heads_per_item q heads of one K/V head): block i of
 * seq s is item block blocks[s] + i. */
CPU_FORCE_INLINE void attn_items(int vec, const attn_job *j, int64_t begin, int64_t end, float *scratch) {
    const int runs = j->n_q / j->heads_per_item;
    for (int64_t it = begin; it < end; it++) {
        const int64_t bi = it / runs;
        const int s = cpu_seq_of(j->blocks, j->n_seqs, bi);
        const int64_t t = (bi - j->blocks[s]) * ATTN_ROWS, left = j->seqs[s].n_rows - t;
        attn_rows(vec, j, s, j->seqs[s].row0 + t, j->seqs[s].pos0 + t, left < ATTN_ROWS ? (int)left : ATTN_ROWS,
                  (int)(it % runs) * j->heads_per_item, scratch);
    }
}

CPU_VEC_VARIANTS(attn_items, attn_items, (j, begin, end, scratch), const attn_job *j, int64_t begin, int64_t end,
                 float *scratch)

static void attn_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    const attn_job *j = ctx;
    attn_items_simd(j->cb->simd, j, begin, end, cpu_scratch_at(j->cb, thread_index));
}

qstatus cpu_attention(qbackend *be, const float *q, const float *k, const float *v, const qseq *seqs,
                      int n_seqs, void *const *k_cache, void *const *v_cache, qwfmt kv_fmt, int n_q, int n_kv,
                      int dim, float scale, float *out) {
    if (n_q <= 0 || n_kv <= 0 || dim <= 0 || n_q % n_kv != 0)
        return q_fail(Q_EINVAL, "attention: n_q %d, n_kv %d, dim %d (n_q must be a multiple of n_kv)", n_q,
                      n_kv, dim);
    const int64_t row_bytes = qkv_row_bytes(kv_fmt, n_kv, dim);
    if (!row_bytes) return q_fail(Q_EINVAL, "attention: K/V cache format %d with dim %d", (int)kv_fmt, dim);
    cpu_backend *cb = cpu_impl(be);
    int64_t *prefix;
    if (n_seqs < 0) return q_fail(Q_EINVAL, "attention: n_seqs %d", n_seqs);
    Q_TRY(cpu_index_reserve(cb, 2 * ((size_t)n_seqs + 1), &prefix));
    Q_TRY(cpu_seqs_check(seqs, n_seqs, prefix, "attention"));
    int64_t *blocks = prefix + n_seqs + 1;
    blocks[0] = 0;
    for (int s = 0; s < n_seqs; s++) blocks[s + 1] = blocks[s] + (seqs[s].n_rows + ATTN_ROWS - 1) / ATTN_ROWS;
    int64_t total = prefix[n_seqs], max_ctx = 0;
    if (total == 0) return Q_OK;
    if (!q || !k || !v || !out || !k_cache || !v_cache) return q_fail(Q_EINVAL, "attention: NULL pointer");
    for (int s = 0; s < n_seqs; s++) {
        if (seqs[s].n_rows == 0) continue;
        if (!k_cache[s] || !v_cache[s]) return q_fail(Q_EINVAL, "attention: seq %d has no K/V cache", s);
        int64_t ctx = (int64_t)seqs[s].pos0 + seqs[s].n_rows;
        if (ctx > max_ctx) max_ctx = ctx;
    }
    /* a K/V head's q heads in one item (its cache read once a step) while that leaves an item a thread, else fewer
     * (decode on many cores keeps its parallelism); any divisor of the group gives the same bits. Measured on 2
     * threads, the 0.8B at 4,096 positions: a thread's K/V heads read once (one item each) against twice (two
     * items each), 20 against 19 tokens/s. */
    int hp = n_q / n_kv;
    while (hp > 1 && (hp > ATTN_MAX_RUN || blocks[n_seqs] * (n_q / hp) < (int64_t)cb->n_threads)) {
        do hp--;
        while ((n_q / n_kv) % hp);
    }
    Q_TRY(cpu_scratch_reserve(cb, ATTN_ROWS * (size_t)hp * (size_t)max_ctx + ATTN_TILE * (size_t)dim));
    /* the new rows go into the caches first: row t of a seq attends to rows 0..t of this call too */
    const int64_t width = (int64_t)n_kv * dim;
    for (int s = 0; s < n_seqs; s++) {
        for (int t = 0; t < seqs[s].n_rows; t++) {
            int64_t r = (int64_t)seqs[s].row0 + t, p = (int64_t)seqs[s].pos0 + t;
            qkv_encode_row(kv_fmt, k + r * width, n_kv, dim, (unsigned char *)k_cache[s] + p * row_bytes);
            qkv_encode_row(kv_fmt, v + r * width, n_kv, dim, (unsigned char *)v_cache[s] + p * row_bytes);
        }
    }
    attn_job job = {cb, q, seqs, n_seqs, blocks, k_cache, v_cache, kv_fmt, max_ctx, n_q, n_kv, dim, hp, scale, out};
    int64_t per_item = max_ctx * dim * hp * (total < ATTN_ROWS ? total : ATTN_ROWS);
    const int64_t items = blocks[n_seqs] * (n_q / hp);
    q_parallel_for(cb->pool, items, per_item >= 16384 ? 1 : 16384 / per_item + 1, attn_range, &job);
    return Q_OK;
}
