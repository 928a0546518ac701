/* cuda_gdn_chunked.cu: the gated delta rule by the chunked rule, for prompt seqs (qseq.chunked = 1).
 * Math and chunking as the CPU twin (cpu_gdn_chunked.c, reference/qwen35-architecture.md 2.5): chunks
 * of GC = 64 rows aligned to absolute positions, per chunk of L rows with S [dk][dv] before it:
 *   gam_i = g_0 + ... + g_i (double, in order), A[i][j] = beta_i (k_i.k_j) e^(gam_i - gam_j), j < i
 *   (I + A) U = beta V, (I + A) W = beta e^gam K (forward substitution, j ascending)
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
 *     next chunk's W/U while O and the state update run.
 * A window holds at most GDN_SCRATCH_BUDGET bytes of prep output; the state goes to global memory in
 * f32 between windows, so the bits do not depend on where windows fall.
 * EXACT(chunk): cut points depend only on absolute positions, and each chunk's arithmetic depends only
 * on its rows and the state before it, so a prompt cut at multiples of 64 gives the same bits.
 * EXACT(batch): no reduction spans seqs; the window split only moves the state through memory.
 * Accuracy: f32 throughout (gam in double, as on the CPU); vs the CPU chunked rule ~1e-6 relative:
 * tests/cuda/test_cuda_ops.c (test_gdn_chunked). Needs dk and dv multiples of 32 up to 128
 * (cuda_gdn_chunked_ok); other shapes run the recurrent rule.
 * Per chunk and value head (dk = dv = 128): prep ~1.6 M FMA (A, P as full 64x64x128 products, the
 * substitution 2016 FMA per column); scan 0.92 M FMA per 32-column tile (3.7 M per head). */
#include <math.h>
#include <stdlib.h>

#include "cuda_flash_prefill.h"
#include "cuda_mma.cuh"

#define GC 64                 /* chunk rows */
#define GCT 32                /* value columns per scan block */
#define GDK_MAX 128           /* largest dk */
#define GTHREADS 256          /* both kernels */
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
           d.n_k_heads > 0 &&
           d.n_v_heads % d.n_k_heads == 0;
}

/* ---- prep --------------------------------------------------------------------------------------- */

#define AST 68 /* row stride of A in shared memory (16-byte rows) */

__device__ __forceinline__ void cp16(float *smem, const float *gmem) { cu_cp_async16(cu_smem_addr(smem), gmem, true); }
#define cp_commit cu_cp_commit
#define cp_wait cu_cp_wait

/* [GC][dk] rows of src into dst with row stride ld */
__device__ __forceinline__ void cp_rows(float *dst, int ld, const float *src, int dk) {
    const int per_row = dk >> 2;
    for (int q = threadIdx.x; q < GC * per_row; q += blockDim.x) {
        const int r = q / per_row, c4 = q - r * per_row;
        cp16(dst + r * ld + 4 * c4, src + r * dk + 4 * c4);
    }
}

#include "cuda_gdn_chunked_tc.cuh"

static size_t prep_smem(int dk, int dv) {
    return (size_t)2 * GC * ((dk > dv ? dk : dv) + 4) * sizeof(float) + (size_t)GC * AST * sizeof(float) +
           (size_t)GC * sizeof(double) + (size_t)4 * GC * sizeof(float);
}

/* Two blocks per SM: the register cap (128) spills ~600 bytes, and the layer still runs faster than with one
 * block per SM and no spills (bench_gdn, 1 x 4096: 1.75 -> 1.56-1.64 ms), the second block's phases filling the
 * first one's latency. */
#ifndef GDN_PREP_BLOCKS
#define GDN_PREP_BLOCKS 2
#endif
/* TC: steps 2-4 on tensor cores (gdn_prep_tc; X3: three tf32 products, else one), else the SIMT steps below. */
template <bool TC, bool X3>
__global__ void __launch_bounds__(GTHREADS, GDN_PREP_BLOCKS)
gdn_prep_kernel(const float *__restrict__ qkv, const float *__restrict__ g, const float *__restrict__ beta,
                const gdn_slot *__restrict__ slots, qgdn_dims d, float qscale, float *__restrict__ scratch) {
    extern __shared__ double smem_d[];
    const int dk = d.k_dim, dv = d.v_dim, Hv = d.n_v_heads, Hk = d.n_k_heads;
    /* Kn, Qn row stride: TC reads fragments (4 mod 32) and keeps the solve's [GC][dv] in Qn, SIMT reads columns */
    const int KS = TC ? (dk > dv ? dk : dv) + 4 : dk + 1;
    double *gam = smem_d;
    float *Kn = (float *)(gam + GC), *Qn = Kn + GC * KS, *As = Qn + GC * KS;
    float *bt = As + GC * AST, *eg = bt + GC, *ed = eg + GC, *misc = ed + GC;
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
    if (t == 0) misc[0] = expf((float)gam[L - 1]);

    /* 2. A (strictly lower, to shared memory) and P (lower with diagonal, to scratch): 4x4 per thread,
     * rows ty + 16a, columns tx + 16b */
    if constexpr (TC) {
        const float *V = qkv + (int64_t)row0 * width + 2LL * Hk * dk + (int64_t)h * dv;
        gdn_prep_tc<X3>(Kn, Qn, KS, As, gam, bt, eg, ed, L, dk, dv, V, width, W, Qg, Kd, U, P);
        if (t == 0) eLp[0] = misc[0];
        return;
    } else {
        const int tx = t & 15, ty = t >> 4;
        float aa[4][4], pp[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) aa[a][b] = pp[a][b] = 0.0f;
        for (int m = 0; m < dk; m++) {
            float ki[4], qi[4], kj[4];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                ki[a] = Kn[(ty + 16 * a) * KS + m];
                qi[a] = Qn[(ty + 16 * a) * KS + m];
                kj[a] = Kn[(tx + 16 * a) * KS + m];
            }
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b <= a; b++) { /* b > a: j > i, above the diagonal */
                    aa[a][b] = fmaf(ki[a], kj[b], aa[a][b]);
                    pp[a][b] = fmaf(qi[a], kj[b], pp[a][b]);
                }
        }
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int i = ty + 16 * a, j = tx + 16 * b;
                float av = 0.0f, pv = 0.0f;
                if (i < L && j <= i) {
                    const float e = expf((float)(gam[i] - gam[j]));
                    pv = pp[a][b] * e;
                    if (j < i) av = (bt[i] * aa[a][b]) * e;
                }
                As[i * AST + j] = av;
                P[i * GC + j] = pv;
            }
        if (t < GC) /* columns 64..67 of A: read by the float4 loads below, always zero */
            for (int j = GC; j < AST; j++) As[t * AST + j] = 0.0f;
    }
    __syncthreads();

    /* 3. forward substitution, one column per thread: U columns 0..dv-1 from beta V, W columns from
     * beta e^gam K; x_i = init_i - sum_{j<i} A[i][j] x_j (two partial sums: even and odd groups of 4) */
    for (int col = t; col < dv + dk; col += GTHREADS) {
        const bool is_u = col < dv;
        const int m = is_u ? col : col - dv;
        const float *vcol = qkv + (int64_t)row0 * width + 2LL * Hk * dk + (int64_t)h * dv + m;
        float x[GC]; /* the right-hand side first, zero past L; then solved in place, row by row */
#pragma unroll
        for (int i = 0; i < GC; i++) {
            x[i] = 0.0f;
            if (i < L) x[i] = is_u ? vcol[(int64_t)i * width] * bt[i] : (Kn[i * KS + m] * bt[i]) * eg[i];
        }
#pragma unroll
        for (int i = 1; i < GC; i++) {
            float s0 = x[i], s1 = 0.0f;
#pragma unroll
            for (int j = 0; j < i; j += 4) { /* A[i][j..j+3] is zero from column i on; x[j >= i] is finite */
                const float4 a4 = *(const float4 *)&As[i * AST + j];
                if ((j >> 2) & 1) {
                    s1 = fmaf(-a4.x, x[j], s1);
                    s1 = fmaf(-a4.y, x[j + 1], s1);
                    s1 = fmaf(-a4.z, x[j + 2], s1);
                    s1 = fmaf(-a4.w, x[j + 3], s1);
                } else {
                    s0 = fmaf(-a4.x, x[j], s0);
                    s0 = fmaf(-a4.y, x[j + 1], s0);
                    s0 = fmaf(-a4.z, x[j + 2], s0);
                    s0 = fmaf(-a4.w, x[j + 3], s0);
                }
            }
            x[i] = s0 + s1; /* rows past L: 0 + 0 */
        }
        float *dst = is_u ? U + m : W + m;
        const int ld = is_u ? dv : dk;
#pragma unroll
        for (int i = 0; i < GC; i++) dst[(int64_t)i * ld] = x[i];
    }

    /* 4. Qg = e^gam Q, Kd = e^(gam_L - gam) K (zero rows past L), e^gam_L */
    for (int e = t; e < GC * dk; e += GTHREADS) {
        const int i = e / dk, m = e - i * dk;
        Qg[e] = Qn[i * KS + m] * eg[i];
        Kd[e] = Kn[i * KS + m] * ed[i];
    }
    if (t == 0) eLp[0] = misc[0];
}

/* ---- scan --------------------------------------------------------------------------------------- */

static size_t scan_smem(int dk) {
    return ((size_t)dk * GCT + 2 * (size_t)GC * GCT + 3 * (size_t)GC * (dk + 4) + (size_t)GC * AST) * sizeof(float);
}

/* acc[i][c] += sum over k = 0, 4, 8, ... < K (then k + 0..3 in order) of A[r_i][k] * B[k][cx + c], for the two
 * rows r0, r1 of this thread and its 4 columns: the scan's three products (W.S, Qg.S, P.V'), one fixed
 * fma order each. */
__device__ __forceinline__ void rows2_times_tile(float (&acc)[2][4], const float *A, int as, int r0, int r1,
                                                 const float *B, int bs, int cx, int K) {
#pragma unroll 4
    for (int k = 0; k < K; k += 4) {
        const float4 a0 = *(const float4 *)&A[r0 * as + k], a1 = *(const float4 *)&A[r1 * as + k];
        const float xa[4] = {a0.x, a0.y, a0.z, a0.w}, xb[4] = {a1.x, a1.y, a1.z, a1.w};
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float4 b4 = *(const float4 *)&B[(k + u) * bs + cx];
            const float bv[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
            for (int c = 0; c < 4; c++) {
                acc[0][c] = fmaf(xa[u], bv[c], acc[0][c]);
                acc[1][c] = fmaf(xb[u], bv[c], acc[1][c]);
            }
        }
    }
}

__global__ void __launch_bounds__(GTHREADS, 1)
gdn_scan_kernel(const gdn_seg *__restrict__ segs, const gdn_slot *__restrict__ slots, qgdn_dims d,
                const float *__restrict__ scratch, float *__restrict__ out) {
    extern __shared__ float4 smem_f4[];
    const int dk = d.k_dim, dv = d.v_dim, Hv = d.n_v_heads;
    const int WS = dk + 4; /* W, Qg, Kd row stride */
    float *Ss = (float *)smem_f4; /* [dk][GCT] */
    float *Vs = Ss + dk * GCT, *Ub = Vs + GC * GCT, *Wb = Ub + GC * GCT, *Qb = Wb + GC * WS, *Kb = Qb + GC * WS;
    float *Pb = Kb + GC * WS; /* [GC][AST] */
    const gdn_seg seg = segs[blockIdx.x];
    const int h = blockIdx.y, c0 = blockIdx.z * GCT;
    const int t = threadIdx.x, tx = t & 7, ty = t >> 3, cx = 4 * tx;
    const int na = dk >> 5; /* state rows per thread: ty + 32a, a < na */
    const int64_t sf = slot_floats(dk, dv);
    float *Sg = seg.S + (int64_t)h * dk * dv + c0;

    for (int e = t; e < dk * GCT; e += GTHREADS) Ss[e] = Sg[(int64_t)(e / GCT) * dv + (e % GCT)];

    /* operand loads for chunk s: group WU (W, U tile), group QP (Qg, P), group K (Kd) */
    auto issue_wu = [&](int s) {
        const float *base = scratch + ((int64_t)(seg.slot0 + s) * Hv + h) * sf;
        cp_rows(Wb, WS, base, dk);
        const float *U = base + 3LL * GC * dk;
        for (int q = t; q < GC * (GCT / 4); q += GTHREADS) {
            const int r = q >> 3, c4 = q & 7;
            cp16(Ub + r * GCT + 4 * c4, U + (int64_t)r * dv + c0 + 4 * c4);
        }
    };
    auto issue_qp = [&](int s) {
        const float *base = scratch + ((int64_t)(seg.slot0 + s) * Hv + h) * sf;
        cp_rows(Qb, WS, base + GC * dk, dk);
        const float *P = base + 3LL * GC * dk + (int64_t)GC * dv;
        for (int q = t; q < GC * (GC / 4); q += GTHREADS) {
            const int r = q >> 4, c4 = q & 15;
            cp16(Pb + r * AST + 4 * c4, P + r * GC + 4 * c4);
        }
    };
    auto issue_k = [&](int s) {
        const float *base = scratch + ((int64_t)(seg.slot0 + s) * Hv + h) * sf;
        cp_rows(Kb, WS, base + 2 * GC * dk, dk);
    };
    issue_wu(0);
    cp_commit();
    issue_qp(0);
    cp_commit();
    issue_k(0);
    cp_commit();

    const int r0 = ty, r1 = ty + 32; /* this thread's chunk rows for X and O */
    for (int s = 0; s < seg.n_slots; s++) {
        const gdn_slot sl = slots[seg.slot0 + s];
        const float eL = scratch[((int64_t)(seg.slot0 + s) * Hv + h) * sf + sf - 4];
        cp_wait<2>(); /* W, U of chunk s */
        __syncthreads();
        /* X = W S; V' = U - X */
        {
            float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            rows2_times_tile(acc, Wb, WS, r0, r1, Ss, GCT, cx, dk);
            const float4 u0 = *(const float4 *)&Ub[r0 * GCT + cx], u1 = *(const float4 *)&Ub[r1 * GCT + cx];
            *(float4 *)&Vs[r0 * GCT + cx] = make_float4(u0.x - acc[0][0], u0.y - acc[0][1], u0.z - acc[0][2], u0.w - acc[0][3]);
            *(float4 *)&Vs[r1 * GCT + cx] = make_float4(u1.x - acc[1][0], u1.y - acc[1][1], u1.z - acc[1][2], u1.w - acc[1][3]);
        }
        __syncthreads(); /* V' complete; W, U free */
        if (s + 1 < seg.n_slots) issue_wu(s + 1);
        cp_commit();
        cp_wait<2>(); /* Qg, P of chunk s */
        __syncthreads();
        /* O = Qg S + P V' */
        {
            float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            rows2_times_tile(acc, Qb, WS, r0, r1, Ss, GCT, cx, dk);
            rows2_times_tile(acc, Pb, AST, r0, r1, Vs, GCT, cx, GC);
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                const int i = rr ? r1 : r0;
                if (i < sl.L) {
                    float *o = out + ((int64_t)(sl.row0 + i) * Hv + h) * dv + c0 + cx;
#pragma unroll
                    for (int c = 0; c < 4; c++) o[c] = acc[rr][c];
                }
            }
        }
        cp_wait<1>(); /* Kd of chunk s */
        __syncthreads();
        /* S = eL S + Kd^T V' */
        {
            float acc[GDK_MAX / 32][4];
#pragma unroll
            for (int a = 0; a < GDK_MAX / 32; a++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[a][c] = a < na ? eL * Ss[(ty + 32 * a) * GCT + cx + c] : 0.0f;
#pragma unroll 4
            for (int i = 0; i < GC; i++) {
                const float4 v4 = *(const float4 *)&Vs[i * GCT + cx];
                const float vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                for (int a = 0; a < GDK_MAX / 32; a++) {
                    if (a < na) {
                        const float kd = Kb[i * WS + ty + 32 * a];
#pragma unroll
                        for (int c = 0; c < 4; c++) acc[a][c] = fmaf(kd, vv[c], acc[a][c]);
                    }
                }
            }
            __syncthreads(); /* every read of S, Qg, P, Kd, V' in this chunk is done */
#pragma unroll
            for (int a = 0; a < GDK_MAX / 32; a++)
                if (a < na) *(float4 *)&Ss[(ty + 32 * a) * GCT + cx] = make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
        }
        if (s + 1 < seg.n_slots) issue_qp(s + 1);
        cp_commit();
        if (s + 1 < seg.n_slots) issue_k(s + 1);
        cp_commit();
    }
    cp_wait<0>();
    __syncthreads();
    for (int e = t; e < dk * GCT; e += GTHREADS) Sg[(int64_t)(e / GCT) * dv + (e % GCT)] = Ss[e];
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
    static int tc_env = -1; /* QUILL_GDN_TC=0: the SIMT products (an A/B in one build) */
    const bool tc = cu_env_on("QUILL_GDN_TC", &tc_env);
    const bool x3 = cuda_flash_precision() == FLASH_SPLIT; /* bf16 mode: one tf32 product */
    void (*prep)(const float *, const float *, const float *, const gdn_slot *, qgdn_dims, float, float *) =
        !tc ? gdn_prep_kernel<false, true> : x3 ? gdn_prep_kernel<true, true> : gdn_prep_kernel<true, false>;
    void (*scan)(const gdn_seg *, const gdn_slot *, qgdn_dims, const float *, float *) =
        !tc ? gdn_scan_kernel : x3 ? gdn_scan_tc_kernel<true> : gdn_scan_tc_kernel<false>;
    const size_t sm1 = prep_smem(d.k_dim, d.v_dim), sm2 = tc ? scan_tc_smem(d.k_dim) : scan_smem(d.k_dim);
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
                          tc ? SCAN_TC_THREADS : GTHREADS, sm2, cu_stream(be)>>>((const gdn_seg *)seg_dev + seg_at[w], sl, d, scr, out);
        e = cudaGetLastError();
        if (e != cudaSuccess) break;
    }
    free(seg_at);
    CU_TRY(e, "gated_delta chunked");
    return Q_OK;
}
