/* cuda_gdn_chunked.cu: the gated delta rule by the chunked rule, for prompt seqs (qseq.chunked = 1).
 * Math and chunking as the CPU twin (cpu_gdn_chunked.c, reference/qwen35-architecture.md 2.5): chunks
 * of GC = 64 rows aligned to absolute positions, per chunk of L rows with S [dk][dv] before it:
 *   gam_i = g_0 + ... + g_i (double, in order), A[i][j] = beta_i (k_i.k_j) e^(gam_i - gam_j), j < i
 *   (I + A) U = beta V, (I + A) W = beta e^gam K (forward substitution by blocks of 16 rows)
 *   V' = U - W S;  O = (e^gam Q) S + P V' with P[i][j] = (q_i.k_j) e^(gam_i - gam_j), j <= i
 *   S <- e^gam_{L-1} S + (e^(gam_{L-1} - gam) K)^T V'
 * Two kernels per window of chunks:
 *   prep (grid: chunk slot x value head, fully parallel): everything that does not depend on S:
 *     W, U, Qg = e^gam Q, Kd = e^(gam_L - gam) K, P (masked, decays folded in), e^gam_L; written to
 *     scratch, rows >= L zero.
 *   scan (grid: seq segment x value head x 32-column tile of dv): the state's columns are
 *     independent given k, beta, g (column j of V', O and the new S needs column j of S and of U only),
 *     so a block carries its [dk][32] state tile in shared memory across the chunks of its segment:
 *     X = W S, V' = U - X, O = Qg S + P V', S = eL S + Kd^T V'; operands come through cp.async, the
 *     next chunk's while this one's products run.
 * Every matrix product runs on tensor cores (cuda_gdn_chunked_tc.cuh: mma.sync m16n8k8 with tf32 operands);
 * the norms, decays, masks and the 16 x 16 diagonal blocks of the solve on CUDA cores.
 * A window holds at most GDN_SCRATCH_BUDGET bytes of prep output; the state goes to global memory in
 * f32 between windows, so the bits do not depend on where windows fall.
 * EXACT(chunk): cut points depend only on absolute positions, and each chunk's arithmetic depends only
 * on its rows and the state before it, so a prompt cut at multiples of 64 gives the same bits.
 * EXACT(batch): no reduction spans seqs; the window split only moves the state through memory.
 * Accuracy: f32-class (three tf32 products per product, gam in double, as on the CPU); vs the CPU chunked
 * rule ~5e-7 relative: tests/cuda/test_cuda_seq_ops.c (test_gdn_chunked). QUILL_PREFILL_PRECISION=bf16
 * takes one tf32 product (~5e-4). Needs dk and dv multiples of 32 up to 128 (cuda_gdn_chunked_ok); other
 * shapes run the recurrent rule.
 * Per chunk and value head (dk = dv = 128): prep ~1.4 M MAC (A, P: the lower 16 x 16 tiles of 64x64x128
 * products; the solve's off-diagonal blocks 0.4 M, its diagonal blocks 0.1 M); scan 0.92 M MAC per 32-column
 * tile (3.7 M per head). */
#include <math.h>
#include <stdlib.h>

#include "cuda_flash_prefill.h"
#include "cuda_mma.cuh"

#define GC 64                 /* chunk rows */
#define GCT 32                /* value columns per scan block */
#define GDK_MAX 128           /* largest dk */
#define GTHREADS 256          /* the prep kernel (the scan: SCAN_TC_THREADS) */
#define GDN_SCRATCH_BUDGET ((size_t)128 << 20)

typedef struct gdn_slot {
    int row0, L; /* the chunk's rows [row0, row0 + L) of the batch */
} gdn_slot;

typedef struct gdn_seg {
    float *S;          /* the seq's state [Hv][dk][dv] */
    int slot0, n_slots; /* window-relative slots, consecutive chunks of the seq */
} gdn_seg;

/* floats of prep output per (slot, value head): W, Qg, Kd [GC][dk], U [GC][dv], P [GC][GC], eL (+3) */
static __host__ __device__ __forceinline__ int64_t slot_floats(int dk, int dv) {
    return 3LL * GC * dk + (int64_t)GC * dv + GC * GC + 4;
}

int cuda_gdn_chunked_ok(qgdn_dims d) {
    return d.k_dim % 32 == 0 && d.k_dim <= GDK_MAX && d.v_dim % GCT == 0 && d.v_dim > 0 && d.v_dim <= GDK_MAX &&
           d.n_k_heads > 0 && d.n_v_heads % d.n_k_heads == 0;
}

/* ---- prep --------------------------------------------------------------------------------------- */

#define AST 68 /* row stride of A in shared memory (16-byte rows) */

#include "cuda_gdn_chunked_tc.cuh"

static size_t prep_smem(int dk, int dv) {
    return (size_t)2 * GC * ((dk > dv ? dk : dv) + 4) * sizeof(float) + (size_t)GC * AST * sizeof(float) +
           (size_t)GC * sizeof(double) + (size_t)3 * GC * sizeof(float);
}

/* Two blocks per SM (~100 registers, 86 KB of shared memory each): the second block's phases fill the first
 * one's latency. */
#ifndef GDN_PREP_BLOCKS
#define GDN_PREP_BLOCKS 2
#endif
/* X3: three tf32 products (f32-class), else one (bf16 prefill mode). */
template <bool X3>
__global__ void __launch_bounds__(GTHREADS, GDN_PREP_BLOCKS)
gdn_prep_kernel(const float *__restrict__ qkv, const float *__restrict__ g, const float *__restrict__ beta,
                const gdn_slot *__restrict__ slots, qgdn_dims d, float qscale, float *__restrict__ scratch) {
    extern __shared__ double smem_d[];
    const int dk = d.k_dim, dv = d.v_dim, Hv = d.n_v_heads, Hk = d.n_k_heads;
    const int KS = (dk > dv ? dk : dv) + 4; /* Kn, Qn row stride (4 mod 32: fragments); Qn later holds [GC][dv] */
    double *gam = smem_d;
    float *Kn = (float *)(gam + GC), *Qn = Kn + GC * KS, *As = Qn + GC * KS;
    float *bt = As + GC * AST, *eg = bt + GC, *ed = eg + GC;
    const int h = blockIdx.y, hk = h / (Hv / Hk);
    const int row0 = slots[blockIdx.x].row0, L = slots[blockIdx.x].L;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int64_t width = 2LL * Hk * dk + (int64_t)Hv * dv;
    float *W = scratch + ((int64_t)blockIdx.x * Hv + h) * slot_floats(dk, dv);
    float *Qg = W + GC * dk, *Kd = Qg + GC * dk, *U = Kd + GC * dk, *P = U + GC * dv, *eLp = P + GC * GC;

    /* 1. q, k rows l2-normed (q also scaled), as the CPU: x * (1 / sqrtf(sum x^2 + 1e-6)); unrolled so that a
     * warp's rows load together */
#pragma unroll 4
    for (int ii = 0; ii < GC / (GTHREADS / 32); ii++) {
        const int i = warp + ii * (GTHREADS / 32);
        if (i < L) {
            const float *row = qkv + (int64_t)(row0 + i) * width;
            const float *qh = row + (int64_t)hk * dk, *kh = row + (int64_t)(Hk + hk) * dk;
            float qv[GDK_MAX / 32], kv[GDK_MAX / 32], qq = 0.0f, kk = 0.0f;
#pragma unroll
            for (int u = 0; u < GDK_MAX / 32; u++) {
                const int m = lane + 32 * u;
                qv[u] = m < dk ? qh[m] : 0.0f;
                kv[u] = m < dk ? kh[m] : 0.0f;
                qq = fmaf(qv[u], qv[u], qq);
                kk = fmaf(kv[u], kv[u], kk);
            }
            const float qi = 1.0f / sqrtf(warp_sum(qq) + 1e-6f), ki = 1.0f / sqrtf(warp_sum(kk) + 1e-6f);
#pragma unroll
            for (int u = 0; u < GDK_MAX / 32; u++) {
                const int m = lane + 32 * u;
                if (m < dk) {
                    Qn[i * KS + m] = (qv[u] * qi) * qscale;
                    Kn[i * KS + m] = kv[u] * ki;
                }
            }
        } else {
            for (int m = lane; m < dk; m += 32) Qn[i * KS + m] = Kn[i * KS + m] = 0.0f;
        }
    }
    if (t < GC) { /* g staged in ed, loaded in parallel: thread 0 loading them in its loop left the block waiting */
        bt[t] = t < L ? beta[(int64_t)(row0 + t) * Hv + h] : 0.0f;
        ed[t] = t < L ? g[(int64_t)(row0 + t) * Hv + h] : 0.0f;
    }
    __syncthreads();
    if (t == 0) { /* the cumulative log-decay in double, in order (as the CPU) */
        double acc = 0.0;
        for (int i = 0; i < GC; i++) {
            if (i < L) acc += (double)ed[i];
            gam[i] = acc;
        }
    }
    __syncthreads();
    if (t < GC) {
        eg[t] = t < L ? expf((float)gam[t]) : 0.0f;
        ed[t] = t < L ? expf((float)(gam[L - 1] - gam[t])) : 0.0f;
    }
    if (t == 0) eLp[0] = expf((float)gam[L - 1]);

    /* 2-4 on tensor cores: A and P, Qg and Kd, the solve for W and U */
    const float *V = qkv + (int64_t)row0 * width + 2LL * Hk * dk + (int64_t)h * dv;
    gdn_prep_tc<X3>(Kn, Qn, KS, As, gam, bt, eg, ed, L, dk, dv, V, width, W, Qg, Kd, U, P);
}

/* ---- host --------------------------------------------------------------------------------------- */

qstatus cuda_gdn_chunked(qbackend *be, const float *qkv, const float *g, const float *beta, const qseq *seqs,
                         int n_seqs, float *const *S, qgdn_dims d, float *out) {
    /* slots: every chunk of every chunked seq, seq by seq, in order */
    int64_t n_slots = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (!seqs[s].chunked || seqs[s].n_rows <= 0) continue;
        if (!S || !S[s]) return q_fail(Q_EINVAL, "cuda gated_delta: seq %d has no state", s);
        const int64_t first = seqs[s].pos0 / GC, last = ((int64_t)seqs[s].pos0 + seqs[s].n_rows - 1) / GC;
        n_slots += last - first + 1;
    }
    if (n_slots == 0) return Q_OK;
    const size_t slot_bytes = (size_t)slot_floats(d.k_dim, d.v_dim) * d.n_v_heads * sizeof(float);
    int64_t win = (int64_t)(GDN_SCRATCH_BUDGET / slot_bytes);
    if (win < 1) win = 1;
    if (win > n_slots) win = n_slots;
    const int64_t n_win = (n_slots + win - 1) / win;
    gdn_slot *slot = (gdn_slot *)malloc((size_t)n_slots * sizeof *slot);
    int *slot_seq = (int *)malloc((size_t)n_slots * sizeof *slot_seq);
    gdn_seg *seg = (gdn_seg *)malloc((size_t)(n_seqs + n_win) * sizeof *seg);
    int64_t *seg_at = (int64_t *)malloc((size_t)(n_win + 1) * sizeof *seg_at);
    if (!slot || !slot_seq || !seg || !seg_at) {
        free(slot); free(slot_seq); free(seg); free(seg_at);
        return q_fail(Q_ENOMEM, "cuda gated_delta: out of memory");
    }
    int64_t k = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (!seqs[s].chunked || seqs[s].n_rows <= 0) continue;
        for (int t = 0; t < seqs[s].n_rows;) {
            int L = GC - (int)(((int64_t)seqs[s].pos0 + t) % GC);
            if (L > seqs[s].n_rows - t) L = seqs[s].n_rows - t;
            slot[k] = (gdn_slot){seqs[s].row0 + t, L};
            slot_seq[k++] = s;
            t += L;
        }
    }
    /* segments: runs of one seq's slots inside one window */
    int64_t n_seg = 0;
    for (int64_t w = 0; w < n_win; w++) {
        seg_at[w] = n_seg;
        const int64_t a = w * win, b = a + win < n_slots ? a + win : n_slots;
        for (int64_t i = a; i < b; i++) {
            if (i == a || slot_seq[i] != slot_seq[i - 1])
                seg[n_seg++] = (gdn_seg){S[slot_seq[i]], (int)(i - a), 0};
            seg[n_seg - 1].n_slots++;
        }
    }
    seg_at[n_win] = n_seg;
    void *slot_dev = NULL, *seg_dev = NULL;
    qstatus st = cu_stage(be, slot, (size_t)n_slots * sizeof *slot, &slot_dev);
    if (st == Q_OK) st = cu_stage(be, seg, (size_t)n_seg * sizeof *seg, &seg_dev);
    float *scr = NULL;
    if (st == Q_OK) st = cu_att_scratch(be, (size_t)win * slot_bytes, &scr);
    free(slot); free(slot_seq); free(seg);
    if (st != Q_OK) { free(seg_at); return st; }
    const bool x3 = cuda_flash_precision() == FLASH_SPLIT; /* bf16 prefill mode: one tf32 product */
    void (*prep)(const float *, const float *, const float *, const gdn_slot *, qgdn_dims, float, float *) =
        x3 ? gdn_prep_kernel<true> : gdn_prep_kernel<false>;
    void (*scan)(const gdn_seg *, const gdn_slot *, qgdn_dims, const float *, float *) =
        x3 ? gdn_scan_tc_kernel<true> : gdn_scan_tc_kernel<false>;
    const size_t sm1 = prep_smem(d.k_dim, d.v_dim), sm2 = scan_tc_smem(d.k_dim);
    cudaError_t e = cudaFuncSetAttribute(prep, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm1);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(scan, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm2);
    if (e != cudaSuccess) { free(seg_at); CU_TRY(e, "gated_delta chunked smem"); }
    const float qscale = (float)(1.0 / sqrt((double)d.k_dim)); /* as the CPU */
    for (int64_t w = 0; w < n_win; w++) {
        const int64_t a = w * win, nw = (a + win < n_slots ? a + win : n_slots) - a;
        const gdn_slot *sl = (const gdn_slot *)slot_dev + a;
        prep<<<dim3((unsigned)nw, (unsigned)d.n_v_heads), GTHREADS, sm1, cu_stream(be)>>>(
            qkv, g, beta, sl, d, qscale, scr);
        e = cudaGetLastError();
        if (e != cudaSuccess) break;
        scan<<<dim3((unsigned)(seg_at[w + 1] - seg_at[w]), (unsigned)d.n_v_heads, (unsigned)(d.v_dim / GCT)),
                          SCAN_TC_THREADS, sm2, cu_stream(be)>>>((const gdn_seg *)seg_dev + seg_at[w], sl, d, scr, out);
        e = cudaGetLastError();
        if (e != cudaSuccess) break;
    }
    free(seg_at);
    CU_TRY(e, "gated_delta chunked");
    return Q_OK;
}
