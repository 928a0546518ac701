/* cpu_gdn_chunked.c: the gated delta rule by the chunked (matrix) rule, for prefill. Math:
 * reference/qwen35-architecture.md 2.5 (HF torch_chunk_gated_delta_rule); recurrent twin in cpu_gdn.c.
 *
 * Chunks are aligned to absolute positions: chunk c covers positions [64c, 64c + 64), so a seq at
 * pos0 = 100 runs 100..127, then 128..191, ... (a shorter first and last chunk). Per chunk of L rows
 * (q, k l2-normed and q scaled as in the recurrent rule; S [dk][dv] is the state before the chunk):
 *   gam_i = g_0 + ... + g_i                         (double, in order; see below)
 *   A[i][j] = beta_i (k_i . k_j) e^(gam_i - gam_j)    j < i
 *   (I + A) U = beta V,  (I + A) W = beta e^gam K   (forward substitution, j ascending)
 *   V' = U - W S
 *   O_i = (e^gam_i q_i) S + sum_{j <= i} (q_i . k_j) e^(gam_i - gam_j) V'_j
 *   S  <- e^gam_{L-1} S + sum_j (e^(gam_{L-1} - gam_j) k_j) V'_j^T
 * Every exponent is <= 0 (g <= 0), so nothing overflows; e^gam may underflow to 0, its limit.
 * Why gam is double: with g near -8 a chunk's f32 cumsum reaches -500 and every e^(gam_i - gam_j)
 * inherits its 3e-5 rounding; measured against a double reference at dk = dv = 128, 200 rows, the
 * output error fell from 4e-6 to 2.4e-7 (the recurrent rule's own is 4e-7). Each exponent is
 * formed in double, rounded to f32, then expf'd (decay()).
 * Scratch layout: gam [C] doubles first (the scratch is 64-byte aligned), then floats Q [C][dk],
 * K [C][dk], W [C][dk], V [C][dv], U [C][dv], A [C][C], beta [C], e [C], with C = CPU_GDN_CHUNK.
 * Invariants: one thread owns the (seq, head) item, its S head and its output columns.
 * EXACT(chunk): the cut points depend only on absolute positions, so a prompt prefilled in pieces cut
 * at multiples of 64 runs the same arithmetic as in one piece. Equals the recurrent rule within
 * 1e-5 of the output scale: tests/unit/backend/test_cpu_gdn.c (chunked_vs_recurrent). */
#include "cpu_internal.h"

size_t cpu_gdn_chunked_scratch(qgdn_dims d) {
    const size_t C = CPU_GDN_CHUNK;
    return 2 * C + C * (3 * (size_t)d.k_dim + 2 * (size_t)d.v_dim) + C * C + 2 * C;
}

/* e^x for a log-decay x <= 0 formed in double: rounded to f32, then expf */
static float decay(double x) { return expf((float)x); }

/* V'_i = U_i - W_i S for rows i < L, in place in U; V is free by now and holds W_i S. */
CPU_FORCE_INLINE void apply_state(const float *W, const float *S, int L, int dk, int dv, float *V, float *U) {
    for (int i = 0; i < L; i++) {
        float *acc = V + (int64_t)i * dv, *u = U + (int64_t)i * dv;
        const float *w = W + (int64_t)i * dk;
        for (int c = 0; c < dv; c++) acc[c] = 0.0f;
        for (int m = 0; m < dk; m++) cpu_axpy(acc, w[m], S + (int64_t)m * dv, dv);
        for (int c = 0; c < dv; c++) u[c] -= acc[c];
    }
}

/* The rule's body, compiled once for each instruction set below: its loops are cpu_axpy / cpu_scale
 * (elementwise) and cpu_dot (8 lanes and a fixed tree), which compute the same bits at any vector width. */
CPU_FORCE_INLINE void chunked_head(const cpu_gdn_args *a, const qseq *sq, int h, float *S, float *scratch) {
    const qgdn_dims *d = &a->dims;
    const int C = CPU_GDN_CHUNK, dk = d->k_dim, dv = d->v_dim, Hv = d->n_v_heads;
    const int hk = h / (Hv / d->n_k_heads);
    const int64_t row = 2 * (int64_t)d->n_k_heads * dk + (int64_t)Hv * dv;
    double *gam = (double *)(void *)scratch;
    float *Q = scratch + 2 * C, *K = Q + (int64_t)C * dk, *W = K + (int64_t)C * dk;
    float *V = W + (int64_t)C * dk, *U = V + (int64_t)C * dv, *A = U + (int64_t)C * dv;
    float *bt = A + (int64_t)C * C, *e = bt + C;
    int t = 0;
    while (t < sq->n_rows) {
        int64_t p = (int64_t)sq->pos0 + t;
        int L = (int)(C - p % C);
        if (L > sq->n_rows - t) L = sq->n_rows - t;
        const int64_t r0 = (int64_t)sq->row0 + t;
        /* load the chunk */
        for (int i = 0; i < L; i++) {
            int64_t r = r0 + i;
            cpu_gdn_load_qk(a, r, hk, 0, a->q_scale, Q + (int64_t)i * dk);
            cpu_gdn_load_qk(a, r, hk, 1, 1.0f, K + (int64_t)i * dk);
            const float *v = a->qkv + r * row + 2 * (int64_t)d->n_k_heads * dk + (int64_t)h * dv;
            for (int c = 0; c < dv; c++) V[(int64_t)i * dv + c] = v[c];
            bt[i] = a->beta[r * Hv + h];
            gam[i] = (i ? gam[i - 1] : 0.0) + a->g[r * Hv + h];
        }
        /* A, strictly lower */
        for (int i = 0; i < L; i++)
            for (int j = 0; j < i; j++)
                A[i * C + j] =
                    bt[i] * cpu_dot(K + (int64_t)i * dk, K + (int64_t)j * dk, dk) * decay(gam[i] - gam[j]);
        /* U = (I + A)^-1 beta V and W = (I + A)^-1 beta e^gam K by forward substitution */
        for (int i = 0; i < L; i++) {
            float *u = U + (int64_t)i * dv, *w = W + (int64_t)i * dk;
            const float *v = V + (int64_t)i * dv, *k = K + (int64_t)i * dk;
            float eg = decay(gam[i]);
            for (int c = 0; c < dv; c++) u[c] = v[c] * bt[i];
            for (int m = 0; m < dk; m++) w[m] = (k[m] * bt[i]) * eg;
            for (int j = 0; j < i; j++) {
                float aij = A[i * C + j];
                const float *uj = U + (int64_t)j * dv, *wj = W + (int64_t)j * dk;
                cpu_axpy(u, -aij, uj, dv); /* u -= aij uj, the same bits */
                cpu_axpy(w, -aij, wj, dk);
            }
        }
        apply_state(W, S, L, dk, dv, V, U); /* U now holds V' */
        /* outputs */
        for (int i = 0; i < L; i++) {
            float *o = a->out + ((r0 + i) * Hv + h) * dv;
            const float *q = Q + (int64_t)i * dk;
            float eg = decay(gam[i]);
            for (int c = 0; c < dv; c++) o[c] = 0.0f;
            for (int m = 0; m < dk; m++) cpu_axpy(o, q[m] * eg, S + (int64_t)m * dv, dv);
            for (int j = 0; j <= i; j++) {
                float coef = cpu_dot(q, K + (int64_t)j * dk, dk) * decay(gam[i] - gam[j]);
                cpu_axpy(o, coef, U + (int64_t)j * dv, dv);
            }
        }
        /* state carried to the next chunk */
        float eL = decay(gam[L - 1]);
        for (int j = 0; j < L; j++) e[j] = decay(gam[L - 1] - gam[j]);
        for (int m = 0; m < dk; m++) {
            float *Sm = S + (int64_t)m * dv;
            cpu_scale(Sm, eL, dv);
            for (int j = 0; j < L; j++) cpu_axpy(Sm, K[(int64_t)j * dk + m] * e[j], U + (int64_t)j * dv, dv);
        }
        if (d->state_bf16) cpu_round_bf16(S, (int64_t)dk * dv); /* where a cut at this chunk would store it */
        t += L;
    }
}

CPU_SIMD_VARIANTS(chunked_head, chunked_head, (a, sq, h, S, scratch), const cpu_gdn_args *a, const qseq *sq, int h,
                  float *S, float *scratch)

void cpu_gdn_chunked_head(int simd, const cpu_gdn_args *a, const qseq *sq, int h, float *S, float *scratch) {
    chunked_head_simd(simd, a, sq, h, S, scratch);
}
