/* cpu_gdn.c: the Gated DeltaNet ops: causal depthwise conv1d + SiLU, the gates (beta, g), and the
 * gated delta rule by the recurrent rule (token by token); the chunked rule is in cpu_gdn_chunked.c.
 * Math: reference/qwen35-architecture.md 2.4.
 *
 * conv1d_silu: per channel c, y[t][c] = silu(sum_j w[c][j] * x'[t+j][c]) with x' = the seq's state
 * (K-1 rows, oldest first) followed by its rows; the sum runs j = 0..K-1 in f32. Afterwards the
 * state holds the last K-1 rows of x' (so a seq shorter than K-1 keeps part of the old state).
 * y must not alias x. Items are blocks of channels: one thread does all seqs of a channel, outputs first,
 * then the state, so the state is never read after it is overwritten.
 * gdn_gates: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias), softplus(x) = x for x > 20
 * else log1p(exp(x)) (torch F.softplus).
 * Recurrent rule per token, S [dk][dv] of v head h, k/q head h / (Hv/Hk):
 *   q = l2norm(q) * dk^-0.5, k = l2norm(k), l2norm(x) = x * (1 / sqrtf(sum x^2 + 1e-6))
 *   S = exp(g) S; kv = S^T k; d = beta (v - kv); S += k d^T; o = S^T q
 * all f32, sums over i (the dk index) in ascending order.
 * Invariants: items are (seq, v head) pairs; an item owns its S head and its output columns.
 * EXACT(batch): a seq's outputs and states do not depend on the other seqs in the call or on the
 * thread count. EXACT(draft): the recurrent rule over k rows equals k calls of one row each.
 * tests/unit/backend/test_cpu_gdn.c. */
#include "cpu_internal.h"

typedef struct conv_job {
    cpu_backend *cb;
    const float *x;
    const qseq *seqs;
    int n_seqs;
    float *const *state;
    const float *w;
    int channels, kernel;
    float *y;
} conv_job;

/* Items are blocks of CONV_BLOCK channels (1 KiB of each row), so that a thread reads the rows' lines once, not once a
 * channel, in runs the prefetchers follow (blocks of one line a row, rows 24 KiB apart on the 0.8B, took 4.7 % of its
 * prefill; these 2.0 %); each channel's arithmetic is the same whatever the block. A block's weights are
 * first laid out by tap (scratch: wt[k][i] = w[(c0 + i) K + k]), so that every tap is a run over the block's
 * channels, contiguous in x, y and wt: a loop the compiler makes vectors of, with each channel's sum still taken
 * k = 0..K-1 in order. */
#define CONV_BLOCK 256

static void conv_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    const conv_job *j = ctx;
    const int K = j->kernel, ch = j->channels;
    float *wt = cpu_scratch_at(j->cb, thread_index);
    for (int64_t blk = begin; blk < end; blk++) {
        const int64_t c0 = blk * CONV_BLOCK;
        const int nc = (int)(c0 + CONV_BLOCK < ch ? CONV_BLOCK : ch - c0);
        for (int k = 0; k < K; k++)
            for (int i = 0; i < nc; i++) wt[k * CONV_BLOCK + i] = j->w[(c0 + i) * K + k];
        for (int s = 0; s < j->n_seqs; s++) {
            const qseq *sq = &j->seqs[s];
            if (sq->n_rows == 0) continue;
            float *st = K > 1 ? j->state[s] : NULL; /* K == 1: no state, maybe no state array */
            const float *xs = j->x + (int64_t)sq->row0 * ch;
            /* row i of x' from channel c0 on: i < K-1 from the state, else row i-(K-1) of the seq */
#define XP_ROW(i) ((i) < K - 1 ? st + (int64_t)(i) * ch + c0 : xs + (int64_t)((i) - (K - 1)) * ch + c0)
            for (int t = 0; t < sq->n_rows; t++) {
                float acc[CONV_BLOCK];
                for (int i = 0; i < CONV_BLOCK; i++) acc[i] = 0.0f;
                for (int k = 0; k < K; k++) {
                    const float *xr = XP_ROW(t + k), *wk = wt + k * CONV_BLOCK;
                    /* a whole block's loop has a constant count, which -O2 makes vectors of; the other loop
                     * alone stays scalar (2.9 % of the 0.8B's prefill against 2.0 %) */
                    if (nc == CONV_BLOCK)
                        for (int i = 0; i < CONV_BLOCK; i++) acc[i] += wk[i] * xr[i];
                    else
                        for (int i = 0; i < nc; i++) acc[i] += wk[i] * xr[i];
                }
                float *yt = j->y + ((int64_t)sq->row0 + t) * ch + c0;
                for (int i = 0; i < nc; i++) yt[i] = cpu_silu(acc[i]);
            }
            for (int i = 0; i < K - 1; i++) { /* reads ahead of i */
                const float *src = XP_ROW(sq->n_rows + i);
                memmove(st + (int64_t)i * ch + c0, src, (size_t)nc * sizeof(float));
            }
#undef XP_ROW
        }
    }
}

qstatus cpu_conv1d_silu(qbackend *be, const float *x, const qseq *seqs, int n_seqs, float *const *state,
                        const float *w, int channels, int kernel, float *y) {
    if (channels <= 0 || kernel <= 0)
        return q_fail(Q_EINVAL, "conv1d_silu: channels %d, kernel %d", channels, kernel);
    if (n_seqs < 0) return q_fail(Q_EINVAL, "conv1d_silu: n_seqs %d", n_seqs);
    cpu_backend *cb = cpu_impl(be);
    int64_t *prefix;
    Q_TRY(cpu_index_reserve(cb, (size_t)n_seqs + 1, &prefix));
    Q_TRY(cpu_seqs_check(seqs, n_seqs, prefix, "conv1d_silu"));
    if (prefix[n_seqs] == 0) return Q_OK;
    if (!x || !w || !y) return q_fail(Q_EINVAL, "conv1d_silu: NULL pointer");
    if (x == y) return q_fail(Q_EINVAL, "conv1d_silu: y must not alias x");
    for (int s = 0; s < n_seqs; s++)
        if (seqs[s].n_rows > 0 && kernel > 1 && (!state || !state[s]))
            return q_fail(Q_EINVAL, "conv1d_silu: seq %d has no conv state", s);
    Q_TRY(cpu_scratch_reserve(cb, (size_t)kernel * CONV_BLOCK));
    conv_job job = {cb, x, seqs, n_seqs, state, w, channels, kernel, y};
    int64_t per_block = prefix[n_seqs] * kernel * CONV_BLOCK;
    q_parallel_for(cb->pool, (channels + CONV_BLOCK - 1) / CONV_BLOCK, per_block >= 4096 ? 1 : 4096 / per_block + 1,
                   conv_range, &job);
    return Q_OK;
}

typedef struct gates_job {
    const float *a, *b, *A_log, *dt_bias;
    int heads;
    float *g, *beta;
} gates_job;

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void gates_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const gates_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        int h = (int)(i % j->heads);
        j->beta[i] = cpu_sigmoid(j->b[i]);
        j->g[i] = -expf(j->A_log[h]) * softplus(j->a[i] + j->dt_bias[h]);
    }
}

qstatus cpu_gdn_gates(qbackend *be, const float *a, const float *b, int64_t n, int heads, const float *A_log,
                      const float *dt_bias, float *g, float *beta) {
    if (n < 0 || heads <= 0) return q_fail(Q_EINVAL, "gdn_gates: n %lld, heads %d", (long long)n, heads);
    if (n == 0) return Q_OK;
    if (!a || !b || !A_log || !dt_bias || !g || !beta) return q_fail(Q_EINVAL, "gdn_gates: NULL pointer");
    gates_job job = {a, b, A_log, dt_bias, heads, g, beta};
    q_parallel_for(cpu_impl(be)->pool, n * heads, 4096, gates_range, &job);
    return Q_OK;
}

void cpu_gdn_load_qk(const cpu_gdn_args *a, int64_t r, int hk, int which, float scale, float *dst) {
    const qgdn_dims *d = &a->dims;
    const int64_t row = 2 * (int64_t)d->n_k_heads * d->k_dim + (int64_t)d->n_v_heads * d->v_dim;
    const float *src = a->qkv + r * row + ((int64_t)which * d->n_k_heads + hk) * d->k_dim;
    float inv = 1.0f / sqrtf(cpu_dot(src, src, d->k_dim) + 1e-6f);
    if (which == 0) {
        for (int i = 0; i < d->k_dim; i++) dst[i] = (src[i] * inv) * scale;
    } else {
        for (int i = 0; i < d->k_dim; i++) dst[i] = src[i] * inv;
    }
}

/* One value head of one seq, token by token (S f32; with dims.state_bf16 rounded to bf16 after every token, as
 * storing it would). scratch: q[dk], k[dk], kv[dv]. Compiled for each instruction set below (elementwise
 * loops: the same bits at any vector width). */
CPU_FORCE_INLINE void recurrent_head(const cpu_gdn_args *a, const qseq *sq, int h, float *S, float *scratch) {
    const qgdn_dims *d = &a->dims;
    const int dk = d->k_dim, dv = d->v_dim, Hv = d->n_v_heads;
    const int hk = h / (Hv / d->n_k_heads);
    const int64_t row = 2 * (int64_t)d->n_k_heads * dk + (int64_t)Hv * dv;
    float *q = scratch, *k = q + dk, *kv = k + dk;
    for (int t = 0; t < sq->n_rows; t++) {
        int64_t r = (int64_t)sq->row0 + t;
        cpu_gdn_load_qk(a, r, hk, 0, a->q_scale, q);
        cpu_gdn_load_qk(a, r, hk, 1, 1.0f, k);
        const float *v = a->qkv + r * row + 2 * (int64_t)d->n_k_heads * dk + (int64_t)h * dv;
        float decay = expf(a->g[r * Hv + h]), beta = a->beta[r * Hv + h];
        for (int j = 0; j < dv; j++) kv[j] = 0.0f;
        for (int i = 0; i < dk; i++) { /* S = decay S; kv = S^T k */
            float *Si = S + (int64_t)i * dv;
            cpu_scale(Si, decay, dv);
            cpu_axpy(kv, k[i], Si, dv);
        }
        for (int j = 0; j < dv; j++) kv[j] = (v[j] - kv[j]) * beta; /* kv now holds d */
        float *o = a->out + (r * Hv + h) * dv;
        for (int j = 0; j < dv; j++) o[j] = 0.0f;
        for (int i = 0; i < dk; i++) { /* S += k d^T; o = S^T q */
            float *Si = S + (int64_t)i * dv;
            cpu_axpy(Si, k[i], kv, dv);
            cpu_axpy(o, q[i], Si, dv);
        }
        if (d->state_bf16) cpu_round_bf16(S, (int64_t)dk * dv);
    }
}

CPU_SIMD_VARIANTS(recurrent_head, recurrent_head, (a, sq, h, S, scratch), const cpu_gdn_args *a, const qseq *sq, int h,
                  float *S, float *scratch)

typedef struct gd_job {
    cpu_backend *cb;
    cpu_gdn_args args;
    const qseq *seqs;
    float *const *S;
    size_t work; /* scratch floats the rule takes; a bf16 state's head in f32 follows them */
} gd_job;

static void gd_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    const gd_job *j = ctx;
    const int Hv = j->args.dims.n_v_heads;
    const int64_t head_floats = (int64_t)j->args.dims.k_dim * j->args.dims.v_dim;
    const int bf16 = j->args.dims.state_bf16;
    float *scratch = cpu_scratch_at(j->cb, thread_index), *Sf = scratch + j->work;
    for (int64_t it = begin; it < end; it++) {
        int s = (int)(it / Hv), h = (int)(it % Hv);
        const qseq *sq = &j->seqs[s];
        if (sq->n_rows == 0) continue;
        uint16_t *Sb = bf16 ? (uint16_t *)(void *)j->S[s] + h * head_floats : NULL;
        float *Sh = bf16 ? Sf : j->S[s] + h * head_floats;
        if (bf16)
            for (int64_t i = 0; i < head_floats; i++) Sf[i] = cpu_bf16_to_f32(Sb[i]);
        if (sq->chunked) cpu_gdn_chunked_head(j->cb->simd, &j->args, sq, h, Sh, scratch);
        else recurrent_head_simd(j->cb->simd, &j->args, sq, h, Sh, scratch);
        if (bf16) /* exact: the rule left every value a bf16 */
            for (int64_t i = 0; i < head_floats; i++) Sb[i] = cpu_f32_to_bf16(Sf[i]);
    }
}

qstatus cpu_gated_delta(qbackend *be, const float *qkv, const float *g, const float *beta, const qseq *seqs,
                        int n_seqs, float *const *S, qgdn_dims dims, float *out) {
    if (dims.n_k_heads <= 0 || dims.n_v_heads <= 0 || dims.k_dim <= 0 || dims.v_dim <= 0 ||
        dims.n_v_heads % dims.n_k_heads != 0)
        return q_fail(Q_EINVAL, "gated_delta: Hk %d, Hv %d, dk %d, dv %d (Hv must be a multiple of Hk)",
                      dims.n_k_heads, dims.n_v_heads, dims.k_dim, dims.v_dim);
    if (n_seqs < 0) return q_fail(Q_EINVAL, "gated_delta: n_seqs %d", n_seqs);
    cpu_backend *cb = cpu_impl(be);
    int64_t *prefix;
    Q_TRY(cpu_index_reserve(cb, (size_t)n_seqs + 1, &prefix));
    Q_TRY(cpu_seqs_check(seqs, n_seqs, prefix, "gated_delta"));
    if (prefix[n_seqs] == 0) return Q_OK;
    if (!qkv || !g || !beta || !out || !S) return q_fail(Q_EINVAL, "gated_delta: NULL pointer");
    size_t need = 2 * (size_t)dims.k_dim + (size_t)dims.v_dim;
    for (int s = 0; s < n_seqs; s++) {
        if (seqs[s].n_rows == 0) continue;
        if (!S[s]) return q_fail(Q_EINVAL, "gated_delta: seq %d has no state", s);
        if (seqs[s].chunked && cpu_gdn_chunked_scratch(dims) > need) need = cpu_gdn_chunked_scratch(dims);
    }
    const size_t work = (need + 15) & ~(size_t)15; /* the f32 head 64-byte aligned, as the scratch */
    Q_TRY(cpu_scratch_reserve(cb, work + (dims.state_bf16 ? (size_t)dims.k_dim * dims.v_dim : 0)));
    gd_job job = {cb, {qkv, g, beta, dims, (float)(1.0 / sqrt((double)dims.k_dim)), out}, seqs, S, work};
    q_parallel_for(cb->pool, (int64_t)n_seqs * dims.n_v_heads, 1, gd_range, &job);
    return Q_OK;
}
