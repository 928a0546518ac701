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
 * in ascending j. An item is a row and a run of q heads sharing a K/V head (attn_items).
 * Layout: q, out [n][n_q][dim]; k, v [n][n_kv][dim]; caches [ctx][n_kv][dim] of f32 or bf16 (rows
 * rounded to nearest even as they are written, widened as they are read); q head h reads kv head
 * h / (n_q / n_kv). Invariants: all cache writes of the call finish before any read; the caller
 * guarantees every cache holds pos0 + n_rows positions.
 * EXACT(batch): an item's arithmetic depends only on its own q row and its seq's cache, never on the
 * other seqs or the thread count; tests/unit/backend/test_cpu_attention.c (batch, thread counts). */
#include <string.h>

#include "cpu_blocks.h"

#define ROPE_MAX_HALF 512
#define ATTN_MAX_RUN 8 /* q heads an attention item takes at most (a group larger is cut in runs) */
#define ATTN_TILE 64   /* cache positions widened at a time */

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
    const int64_t *prefix;
    void *const *k_cache, *const *v_cache;
    qwfmt kv_fmt;
    int64_t max_ctx; /* a thread's scratch: heads_per_item * max_ctx scores, then ATTN_TILE rows of dim floats */
    int n_q, n_kv, dim;
    int heads_per_item; /* q heads of one K/V head an item takes: each cache row is widened once for all of them */
    float scale;
    float *out;
} attn_job;

/* n bf16 values (unaligned) as f32, 8 at a time: the bits shifted up, as cpu_bf16_to_f32. */
typedef uint16_t bf16x8 __attribute__((vector_size(16)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
CPU_FORCE_INLINE void widen_bf16(const unsigned char *src, float *dst, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        bf16x8 h;
        memcpy(&h, src + 2 * d, sizeof h);
        const u32x8 w = __builtin_convertvector(h, u32x8) << 16;
        memcpy(dst + d, &w, sizeof w);
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
CPU_FORCE_INLINE const float *kv_tile(const void *cache, qwfmt fmt, int64_t row_bytes, int64_t k0, int count, int n_kv,
                                      int kvh, int dim, float *tile, int64_t *ld) {
    const unsigned char *rows = (const unsigned char *)cache + k0 * row_bytes;
    *ld = dim;
    if (fmt == QW_F32) {
        *ld = row_bytes / (int64_t)sizeof(float);
        return (const float *)rows + (int64_t)kvh * dim;
    } else if (fmt == QW_BF16) {
        for (int i = 0; i < count; i++)
            widen_bf16(rows + i * row_bytes + (int64_t)kvh * dim * 2, tile + (int64_t)i * dim, dim);
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

/* Items are (row, run of heads_per_item q heads of one K/V head); each head's arithmetic is its own, whatever
 * the run, so the run's length (chosen from the thread count) never changes a bit. The cache goes by in tiles of
 * ATTN_TILE positions, each widened once for the run; the scores are cpu_dot's (dots_against, four positions at
 * a time) and the weighted sum of values is the run of cpu_axpy calls it was (rows_accumulate), bit for bit. */
CPU_FORCE_INLINE void attn_items(int vec, const attn_job *j, int64_t begin, int64_t end, float *scratch) {
    const int hp = j->heads_per_item, runs = j->n_q / hp;
    float *scores = scratch, *tile = scores + hp * j->max_ctx;
    const int dim = j->dim, group = j->n_q / j->n_kv;
    const int64_t kv_row = qkv_row_bytes(j->kv_fmt, j->n_kv, dim);
    for (int64_t it = begin; it < end; it++) {
        int64_t fi = it / runs;
        int h0 = (int)(it % runs) * hp, kvh = h0 / group;
        int s = cpu_seq_of(j->prefix, j->n_seqs, fi);
        const qseq *sq = &j->seqs[s];
        int64_t t = fi - j->prefix[s], r = sq->row0 + t, p = sq->pos0 + t, ld;
        const float *qh = j->q + (r * j->n_q + h0) * dim;
        float *o = j->out + (r * j->n_q + h0) * dim; /* the run's heads' outputs, dim apart */
        float m[ATTN_MAX_RUN];
        for (int h = 0; h < hp; h++) m[h] = -INFINITY;
        for (int64_t k0 = 0; k0 <= p; k0 += ATTN_TILE) {
            const int count = p + 1 - k0 < ATTN_TILE ? (int)(p + 1 - k0) : ATTN_TILE;
            const float *keys = kv_tile(j->k_cache[s], j->kv_fmt, kv_row, k0, count, j->n_kv, kvh, dim, tile, &ld);
            for (int h = 0; h < hp; h++) {
                float *score = scores + h * j->max_ctx + k0;
                dots_against(qh + (int64_t)h * dim, keys, ld, count, dim, score);
                for (int i = 0; i < count; i++) {
                    score[i] = score[i] * j->scale;
                    if (score[i] > m[h]) m[h] = score[i];
                }
            }
        }
        for (int h = 0; h < hp; h++) { /* softmax: exp in f32, the sum in double, then each weight over the sum */
            float *score = scores + h * j->max_ctx;
            double sum = 0.0;
            for (int64_t k = 0; k <= p; k++) {
                score[k] = expf(score[k] - m[h]);
                sum += score[k];
            }
            const float fsum = (float)sum;
            for (int64_t k = 0; k <= p; k++) score[k] = score[k] / fsum;
        }
        memset(o, 0, (size_t)hp * dim * sizeof *o);
        for (int64_t k0 = 0; k0 <= p; k0 += ATTN_TILE) {
            const int count = p + 1 - k0 < ATTN_TILE ? (int)(p + 1 - k0) : ATTN_TILE;
            const float *values = kv_tile(j->v_cache[s], j->kv_fmt, kv_row, k0, count, j->n_kv, kvh, dim, tile, &ld);
            rows_accumulate(vec, o, dim, scores + k0, j->max_ctx, hp, values, ld, 0, count, dim);
        }
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
    Q_TRY(cpu_index_reserve(cb, (size_t)n_seqs + 1, &prefix));
    Q_TRY(cpu_seqs_check(seqs, n_seqs, prefix, "attention"));
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
    while (hp > 1 && (hp > ATTN_MAX_RUN || total * (n_q / hp) < (int64_t)cb->n_threads)) {
        do hp--;
        while ((n_q / n_kv) % hp);
    }
    Q_TRY(cpu_scratch_reserve(cb, (size_t)hp * (size_t)max_ctx + ATTN_TILE * (size_t)dim));
    /* the new rows go into the caches first: row t of a seq attends to rows 0..t of this call too */
    const int64_t width = (int64_t)n_kv * dim;
    for (int s = 0; s < n_seqs; s++) {
        for (int t = 0; t < seqs[s].n_rows; t++) {
            int64_t r = (int64_t)seqs[s].row0 + t, p = (int64_t)seqs[s].pos0 + t;
            qkv_encode_row(kv_fmt, k + r * width, n_kv, dim, (unsigned char *)k_cache[s] + p * row_bytes);
            qkv_encode_row(kv_fmt, v + r * width, n_kv, dim, (unsigned char *)v_cache[s] + p * row_bytes);
        }
    }
    attn_job job = {cb, q, seqs, n_seqs, prefix, k_cache, v_cache, kv_fmt, max_ctx, n_q, n_kv, dim, hp, scale, out};
    int64_t per_item = max_ctx * dim * hp;
    q_parallel_for(cb->pool, total * (n_q / hp), per_item >= 16384 ? 1 : 16384 / per_item + 1, attn_range, &job);
    return Q_OK;
}
