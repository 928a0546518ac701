/* cpu_attention.c: partial NeoX RoPE and causal GQA attention over per-stream K/V caches
 * (reference/qwen35-architecture.md 2.3).
 *
 * RoPE: pairs (j, j + rot/2), j < rot/2, rotate by angle pos * inv_freq[j] with inv_freq[j] =
 * 1 / theta^((2j)/rot) formed as HF does in f32 (the exponent and the quotient in f32; pow, cos and
 * sin in double, rounded to f32, which is what a correctly rounded f32 libm gives):
 * x1' = x1*cos - x2*sin, x2' = x2*cos + x1*sin. Dims rot..head_dim pass through.
 * Attention: for each seq, first copy its k, v rows into the caches at pos0.., then each (row, q
 * head) item computes scores s_j = dot(q, k_j) * scale for j = 0..p (cpu_dot), softmax with max
 * subtraction (exp in f32, the sum in double, p_j = e_j / sum in f32), and out = sum_j p_j v_j
 * accumulated in f32 in ascending j.
 * Layout: q, out [n][n_q][dim]; k, v [n][n_kv][dim]; caches [ctx][n_kv][dim] of f32 or bf16 (rows
 * rounded to nearest even as they are written, widened as they are read); q head h reads kv head
 * h / (n_q / n_kv). Invariants: all cache writes of the call finish before any read; the caller
 * guarantees every cache holds pos0 + n_rows positions.
 * EXACT(batch): an item's arithmetic depends only on its own q row and its seq's cache, never on the
 * other seqs or the thread count; tests/unit/backend/test_cpu_ops.c (attention_batch_invariant). */
#include <string.h>

#include "cpu_internal.h"

#define ROPE_MAX_HALF 512
#define ATTN_MAX_RUN 8 /* q heads an attention item takes at most (a group larger is cut in runs) */

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
    int64_t max_ctx; /* a thread's scratch: heads_per_item * max_ctx scores, then two rows of dim floats */
    int n_q, n_kv, dim;
    int heads_per_item; /* q heads of one K/V head an item takes: each cache row is widened once for all of them */
    float scale;
    float *out;
} attn_job;

/* Head kvh of cache position k as dim f32 values: the cache itself (f32) or the row decoded into buf. */
static const float *kv_at(const void *cache, qwfmt fmt, int64_t row_bytes, int64_t k, int n_kv, int kvh, int dim,
                          float *buf) {
    const unsigned char *row = (const unsigned char *)cache + k * row_bytes;
    if (fmt == QW_F32) return (const float *)row + (int64_t)kvh * dim;
    qkv_decode_head(fmt, row, n_kv, dim, kvh, buf);
    return buf;
}

/* Items are (row, run of heads_per_item q heads of one K/V head); each head's arithmetic is its own, whatever
 * the run, so the run's length (chosen from the thread count) never changes a bit. */
static void attn_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    const attn_job *j = ctx;
    const int hp = j->heads_per_item, runs = j->n_q / hp;
    float *scores = cpu_scratch_at(j->cb, thread_index), *row = scores + hp * j->max_ctx;
    const int dim = j->dim, group = j->n_q / j->n_kv;
    const int64_t kv_row = qkv_row_bytes(j->kv_fmt, j->n_kv, dim);
    for (int64_t it = begin; it < end; it++) {
        int64_t fi = it / runs;
        int h0 = (int)(it % runs) * hp, kvh = h0 / group;
        int s = cpu_seq_of(j->prefix, j->n_seqs, fi);
        const qseq *sq = &j->seqs[s];
        int64_t t = fi - j->prefix[s], r = sq->row0 + t, p = sq->pos0 + t;
        const float *qh = j->q + (r * j->n_q + h0) * dim;
        const void *kc = j->k_cache[s], *vc = j->v_cache[s];
        float m[ATTN_MAX_RUN], fsum[ATTN_MAX_RUN];
        for (int h = 0; h < hp; h++) m[h] = -INFINITY;
        for (int64_t k = 0; k <= p; k++) {
            const float *kr = kv_at(kc, j->kv_fmt, kv_row, k, j->n_kv, kvh, dim, row);
            for (int h = 0; h < hp; h++) {
                float *score = scores + h * j->max_ctx;
                score[k] = cpu_dot(qh + (int64_t)h * dim, kr, dim) * j->scale;
                if (score[k] > m[h]) m[h] = score[k];
            }
        }
        for (int h = 0; h < hp; h++) {
            float *score = scores + h * j->max_ctx;
            double sum = 0.0;
            for (int64_t k = 0; k <= p; k++) {
                score[k] = expf(score[k] - m[h]);
                sum += score[k];
            }
            fsum[h] = (float)sum;
            float *o = j->out + (r * j->n_q + h0 + h) * dim;
            for (int d = 0; d < dim; d++) o[d] = 0.0f;
        }
        for (int64_t k = 0; k <= p; k++) {
            const float *vr = kv_at(vc, j->kv_fmt, kv_row, k, j->n_kv, kvh, dim, row);
            for (int h = 0; h < hp; h++)
                cpu_axpy(j->out + (r * j->n_q + h0 + h) * dim, scores[h * j->max_ctx + k] / fsum[h], vr, dim);
        }
    }
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
    /* a K/V head's q heads in one item while that leaves two items a thread, else one head an item (decode on
     * many cores keeps its parallelism); any divisor of the group gives the same bits */
    int hp = n_q / n_kv;
    while (hp > 1 && (hp > ATTN_MAX_RUN || total * (n_q / hp) < 2 * (int64_t)cb->n_threads)) {
        do hp--;
        while ((n_q / n_kv) % hp);
    }
    Q_TRY(cpu_scratch_reserve(cb, (size_t)hp * (size_t)max_ctx + 2 * (size_t)dim));
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
