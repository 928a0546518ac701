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
 * K [C][dk], W [C][dk], V [C][dv], U [C][dv], A [C][C], beta [C], e [C], with C = CPU_GDN_CHUNK. Once
 * the substitution is done A takes the outputs' coefficients and V takes W S; once V' is made W takes the state
 * update's coefficients, transposed ([dk][C]).
 * Subnormals flush to zero here (MXCSR FTZ + DAZ, set for the call; the caller's modes restored). With strong
 * decays (g near -5 a row, as in the synthetic 0.8B and 9B) the e^(gam_i - gam_j) of far rows and their products
 * fall below 2^-126, and each multiply that makes or takes a subnormal costs a microcode assist: the rule ran 10x
 * slower (121 against 11 ms a layer of 512 rows, g uniform in [-4, 0]). What the flush changes is below 1.2e-38
 * in magnitude; on the 0.8B and on nine shapes of random inputs every output bit stayed the same.
 * Invariants: one thread owns the (seq, head) item, its S head and its output columns.
 * EXACT(chunk): the cut points depend only on absolute positions, so a prompt prefilled in pieces cut
 * at multiples of 64 runs the same arithmetic as in one piece. Equals the recurrent rule within
 * 1e-5 of the output scale: tests/unit/backend/test_cpu_gdn.c (chunked_vs_recurrent). */
#include "cpu_blocks.h"

size_t cpu_gdn_chunked_scratch(qgdn_dims d) {
    const size_t C = CPU_GDN_CHUNK;
    return 2 * C + C * (3 * (size_t)d.k_dim + 2 * (size_t)d.v_dim) + C * C + 2 * C;
}

/* e^x for a log-decay x <= 0 formed in double: rounded to f32, then expf */
static float decay(double x) { return expf((float)x); }

/* Row i of Y (i < L) += sum over j < i (j <= i with inclusive) of X[i][j] Z[j], in j order. Z may be Y itself
 * (the forward substitution: rows j < i are final when row i takes them). Rows go in blocks of 4: a block takes
 * every earlier block's rows at once, then the triangle inside it row by row. */
CPU_FORCE_INLINE void lower_accumulate(int vec, float *Y, int64_t ldy, const float *X, int64_t ldx, const float *Z,
                                       int64_t ldz, int L, int inclusive, int n) {
    for (int i0 = 0; i0 < L; i0 += BLOCK_ROWS) {
        const int rows = L - i0 < BLOCK_ROWS ? L - i0 : BLOCK_ROWS;
        rows_accumulate(vec, Y + i0 * ldy, ldy, X + i0 * ldx, ldx, rows, Z, ldz, 0, i0, n);
        for (int r = 0; r < rows; r++)
            rows_accumulate(vec, Y + (i0 + r) * ldy, ldy, X + (i0 + r) * ldx, ldx, 1, Z, ldz, i0, i0 + r + inclusive,
                            n);
    }
}

/* The rule's body, compiled once for each instruction set below with its vector width vec: its loops are the
 * products above, cpu_scale (elementwise) and cpu_dot (8 lanes and a fixed tree), which compute the same bits at
 * any vector width. */
CPU_FORCE_INLINE void chunked_head(int vec, const cpu_gdn_args *a, const qseq *sq, int h, float *S, float *scratch) {
    const qgdn_dims *d = &a->dims;
    const int C = CPU_GDN_CHUNK, dk = d->k_dim, dv = d->v_dim, Hv = d->n_v_heads;
    const int hk = h / (Hv / d->n_k_heads);
    const int64_t row = 2 * (int64_t)d->n_k_heads * dk + (int64_t)Hv * dv, ldo = (int64_t)Hv * dv;
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
            memcpy(V + (int64_t)i * dv, v, (size_t)dv * sizeof *V);
            bt[i] = a->beta[r * Hv + h];
            gam[i] = (i ? gam[i - 1] : 0.0) + a->g[r * Hv + h];
        }
        /* -A, strictly lower: A[i][j] = beta_i (k_i . k_j) e^(gam_i - gam_j), negated for the substitution */
        for (int i = 0; i < L; i++) {
            float *Ai = A + (int64_t)i * C;
            dots_against(K + (int64_t)i * dk, K, dk, i, dk, Ai);
            for (int j = 0; j < i; j++) Ai[j] = -(bt[i] * Ai[j] * decay(gam[i] - gam[j]));
        }
        /* U = (I + A)^-1 beta V and W = (I + A)^-1 beta e^gam K by forward substitution: u_i -= a_ij u_j */
        for (int i = 0; i < L; i++) {
            float *u = U + (int64_t)i * dv, *w = W + (int64_t)i * dk;
            const float *v = V + (int64_t)i * dv, *k = K + (int64_t)i * dk;
            float eg = decay(gam[i]);
            for (int c = 0; c < dv; c++) u[c] = v[c] * bt[i];
            for (int m = 0; m < dk; m++) w[m] = (k[m] * bt[i]) * eg;
        }
        lower_accumulate(vec, U, dv, A, C, U, dv, L, 0, dv);
        lower_accumulate(vec, W, dk, A, C, W, dk, L, 0, dk);
        /* V' = U - W S, in U; V is free by now and takes W S */
        memset(V, 0, (size_t)L * dv * sizeof *V);
        rows_accumulate(vec, V, dv, W, dk, L, S, dv, 0, dk, dv);
        for (int64_t c = 0; c < (int64_t)L * dv; c++) U[c] -= V[c];
        /* outputs: O_i = (e^gam_i q_i) S + sum_{j <= i} (q_i . k_j) e^(gam_i - gam_j) V'_j; the coefficients in A */
        for (int i = 0; i < L; i++) {
            float *Pi = A + (int64_t)i * C, *q = Q + (int64_t)i * dk;
            dots_against(q, K, dk, i + 1, dk, Pi);
            for (int j = 0; j <= i; j++) Pi[j] = Pi[j] * decay(gam[i] - gam[j]);
            const float eg = decay(gam[i]);
            for (int m = 0; m < dk; m++) q[m] = q[m] * eg;
            float *o = a->out + (r0 + i) * ldo + (int64_t)h * dv;
            for (int c = 0; c < dv; c++) o[c] = 0.0f;
        }
        float *O = a->out + r0 * ldo + (int64_t)h * dv;
        rows_accumulate(vec, O, ldo, Q, dk, L, S, dv, 0, dk, dv);
        lower_accumulate(vec, O, ldo, A, C, U, dv, L, 1, dv);
        /* state carried to the next chunk: S_m = e^gam_{L-1} S_m + sum_j (k_j[m] e^(gam_{L-1} - gam_j)) V'_j, the
         * coefficients transposed into W (free by now) */
        float eL = decay(gam[L - 1]);
        for (int j = 0; j < L; j++) e[j] = decay(gam[L - 1] - gam[j]);
        for (int m = 0; m < dk; m++)
            for (int j = 0; j < L; j++) W[(int64_t)m * C + j] = K[(int64_t)j * dk + m] * e[j];
        cpu_scale(S, eL, (int64_t)dk * dv);
        rows_accumulate(vec, S, dv, W, C, dk, U, dv, 0, L, dv);
        if (d->state_bf16) cpu_round_bf16(S, (int64_t)dk * dv); /* where a cut at this chunk would store it */
        t += L;
    }
}

CPU_VEC_VARIANTS(chunked_head, chunked_head, (a, sq, h, S, scratch), const cpu_gdn_args *a, const qseq *sq, int h,
                 float *S, float *scratch)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6); bits 0..5 are the sticky exception flags,
 * which the arithmetic inside may raise and keeps. */
#define CSR_FLUSH_SUBNORMALS 0x8040u
#define CSR_FLAGS 0x3fu

void cpu_gdn_chunked_head(int simd, const cpu_gdn_args *a, const qseq *sq, int h, float *S, float *scratch) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | CSR_FLUSH_SUBNORMALS);
    chunked_head_simd(simd, a, sq, h, S, scratch);
    _mm_setcsr((csr & ~CSR_FLAGS) | (_mm_getcsr() & CSR_FLAGS));
}
#else
void cpu_gdn_chunked_head(int simd, const cpu_gdn_args *a, const qseq *sq, int h, float *S, float *scratch) {
    chunked_head_simd(simd, a, sq, h, S, scratch);
}
#endif
