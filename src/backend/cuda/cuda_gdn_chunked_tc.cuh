/* cuda_gdn_chunked_tc.cuh: the chunked gated delta rule's matrix products on tensor cores (mma.sync m16n8k8,
 * tf32 operands split 3xTF32, f32 accumulators: f32-class, ~2^-21 per product term; bf16 prefill mode: one
 * tf32 product), included by
 * cuda_gdn_chunked.cu, which has the math and the layouts.
 * - gdn_prep_tc: the prep's A = K K^T and P = Q K^T (their lower 16 x 16 tiles, decays folded in) and the
 *   solve (I + A) [W U] = [beta e^gam K, beta V] by blocks of 16 rows.
 * - gdn_scan_tc_kernel: the scan's X = W S, O = Qg S + P V' and S = eL S + Kd^T V' per chunk.
 * Fragments come from f32 tiles in shared memory whose row strides are 4 mod 32 where rows are read along
 * k (A from row-major, B from n-major) and 8 mod 32 where they are read along the tile's columns (B from
 * row-major, A transposed): either way the 32 lanes hit 32 banks. Each operand is split where it is
 * loaded; each product keeps its big and small terms apart until its end (cu_mma_3xtf32). */
#ifndef QUILL_CUDA_GDN_CHUNKED_TC_CUH
#define QUILL_CUDA_GDN_CHUNKED_TC_CUH

#include "cuda_mma.cuh"

/* x as tf32: both parts (X3, the three-product form) or the rounded value alone (hi; lo is not set). */
template <bool X3> __device__ __forceinline__ void gdn_part(float x, uint32_t &hi, uint32_t &lo) {
    if (X3) cu_tf32_split(x, hi, lo);
    else hi = cu_tf32(x);
}

/* A fragment (rows r0..r0+15, k0..k0+7) of an f32 tile, split: p at (r0 + g, k0 + t), rows 8 apart are r8
 * floats apart and k + 4 is k4 floats on (row-major M[r][k] with stride ld: r8 = 8 ld, k4 = 4; the transpose
 * of a row-major M[k][r]: r8 = 8, k4 = 4 ld). */
template <bool X3>
__device__ __forceinline__ void gdn_a(const float *p, int r8, int k4, uint32_t (&h)[4], uint32_t (&l)[4]) {
    gdn_part<X3>(p[0], h[0], l[0]);
    gdn_part<X3>(p[r8], h[1], l[1]);
    gdn_part<X3>(p[k4], h[2], l[2]);
    gdn_part<X3>(p[r8 + k4], h[3], l[3]);
}

/* B fragment (k0..k0+7, columns n0..n0+7) of an f32 tile, split: p at (k0 + t, n0 + g), k + 4 is k4 floats on
 * (row-major B[k][n] with stride ld: k4 = 4 ld; n-major, B[k][n] = M[n][k]: k4 = 4). */
template <bool X3> __device__ __forceinline__ void gdn_b(const float *p, int k4, uint32_t (&h)[2], uint32_t (&l)[2]) {
    gdn_part<X3>(p[0], h[0], l[0]);
    gdn_part<X3>(p[k4], h[1], l[1]);
}

/* B fragment of a row-major B[k][n] kept split in shared memory: p at (k0 + t, n0 + g) of the hi part, the lo
 * part `split` words on, rows ld words apart. */
template <bool X3>
__device__ __forceinline__ void gdn_b_split(const uint32_t *p, int split, int ld, uint32_t (&h)[2], uint32_t (&l)[2]) {
    h[0] = p[0], h[1] = p[4 * ld];
    if (X3) l[0] = p[split], l[1] = p[split + 4 * ld];
}

/* Where a product's B operand comes from: f32 row-major (B_ROWS), f32 n-major (B_COLS: B[k][n] = M[n][k]),
 * or row-major kept split (B_SPLIT: B is the hi part, B + split the lo part). */
enum { B_ROWS, B_COLS, B_SPLIT };

/* acc (a 16 x 8NT tile as NT n8 fragments, big and small terms) += A[r0.., k0..k1) B[k0..k1), n0..): A
 * row-major (A_T: transposed). */
template <int NT, bool A_T, int BM, bool X3>
__device__ __forceinline__ void gdn_tile(float (&big)[NT][4], float (&small)[NT][4], const float *A, int lda,
                                         const void *B, int ldb, int split, int r0, int n0, int k0, int k1, int lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int k = k0; k < k1; k += 8) {
        uint32_t ah[4], al[4];
        if (A_T) gdn_a<X3>(A + (k + t) * lda + r0 + g, 8, 4 * lda, ah, al);
        else gdn_a<X3>(A + (r0 + g) * lda + k + t, 8 * lda, 4, ah, al);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int n = n0 + 8 * nt + g;
            uint32_t bh[2], bl[2];
            if (BM == B_SPLIT)
                gdn_b_split<X3>((const uint32_t *)B + (k + t) * ldb + n, split, ldb, bh, bl);
            else if (BM == B_COLS) gdn_b<X3>((const float *)B + n * ldb + k + t, 4, bh, bl);
            else gdn_b<X3>((const float *)B + (k + t) * ldb + n, 4 * ldb, bh, bl);
            if (X3) cu_mma_3xtf32(big[nt], small[nt], ah, al, bh, bl);
            else cu_mma_tf32(big[nt], ah, bh[0], bh[1]);
        }
    }
}

/* Offset of element c (0..3) of a lane's C fragment of the 16 x 8 tile at (r0, n0) in a row-major tile with
 * row stride ld: row r0 + g (+ 8 for c >= 2), column n0 + 2t (+ 1 for odd c). */
__device__ __forceinline__ int gdn_c_at(int r0, int n0, int c, int ld, int lane) {
    return (r0 + (lane >> 2) + 8 * (c >> 1)) * ld + n0 + 2 * (lane & 3) + (c & 1);
}

template <int NT> __device__ __forceinline__ void gdn_zero(float (&a)[NT][4], float (&b)[NT][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) a[nt][c] = b[nt][c] = 0.0f;
}

/* The prep's A (strictly lower, to shared As) and P (lower with the diagonal, to global P): the 10 lower
 * 16 x 16 tiles of each as 20 warp items, the 6 upper tiles zero. Kn, Qn: [GC][ks] with ks = 4 mod 32. Each
 * element then: P = (q_i.k_j) e^(gam_i - gam_j), A = (beta_i (k_i.k_j)) e^(gam_i - gam_j). */
template <bool X3>
__device__ __forceinline__ void gdn_prep_products_tc(const float *Kn, const float *Qn, int ks, int dk,
                                                     const double *gam, const float *bt, int L, float *As, int ast,
                                                     float *P) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    for (int it = warp; it < 20; it += GTHREADS / 32) {
        const bool is_p = it >= 10;
        int r = it % 10, rt = 0; /* r -> (row tile rt, column tile ct <= rt) */
        while (r > rt) r -= ++rt;
        const int ct = r;
        float big[2][4], small[2][4];
        gdn_zero(big, small);
        gdn_tile<2, false, B_COLS, X3>(big, small, is_p ? Qn : Kn, ks, Kn, ks, 0, 16 * rt, 16 * ct, 0, dk, lane);
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int i = 16 * rt + g + 8 * hf, j = 16 * ct + 8 * nt + 2 * t;
                float v[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float dot = big[nt][2 * hf + e] + small[nt][2 * hf + e];
                    const int jj = j + e;
                    v[e] = 0.0f;
                    if (i < L && jj <= i) {
                        const float ex = expf((float)(gam[i] - gam[jj]));
                        if (is_p) v[e] = dot * ex;
                        else if (jj < i) v[e] = (bt[i] * dot) * ex;
                    }
                }
                if (is_p) *(float2 *)&P[i * GC + j] = make_float2(v[0], v[1]);
                else *(float2 *)&As[i * ast + j] = make_float2(v[0], v[1]);
            }
    }
    for (int e = threadIdx.x; e < GC * GC; e += GTHREADS) {
        const int i = e / GC, j = e % GC;
        if ((j >> 4) > (i >> 4)) As[i * ast + j] = P[i * GC + j] = 0.0f;
    }
}

/* The solve (I + A) X = R in place for the columns of two [GC][*] matrices (Xk: dk columns, Xv: dv; row
 * stride ld), A strictly lower in As: by blocks of 16 rows, R_b -= A[b][<b] X[<b] on tensor cores (a warp
 * per 16 columns), then the 16 x 16 unit-lower diagonal block solved by forward substitution, a thread per
 * column. Ends with a barrier. */
template <bool X3>
__device__ __forceinline__ void gdn_solve_tc(const float *As, int ast, float *Xk, float *Xv, int ld, int dk, int dv) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int cols = dk + dv;
    for (int b = 0; b < GC / 16; b++) {
        const int r0 = 16 * b;
        if (b > 0) {
            for (int tile = warp; tile < cols / 16; tile += GTHREADS / 32) {
                float *X = 16 * tile < dk ? Xk + 16 * tile : Xv + (16 * tile - dk); /* dk % 16 == 0 */
                float big[2][4], small[2][4];
                gdn_zero(big, small);
                gdn_tile<2, false, B_ROWS, X3>(big, small, As, ast, X, ld, 0, r0, 0, 0, r0, lane);
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int hf = 0; hf < 2; hf++) {
                        float2 *p = (float2 *)&X[(r0 + g + 8 * hf) * ld + 8 * nt + 2 * t];
                        const float2 v = *p;
                        *p = make_float2(v.x - (big[nt][2 * hf] + small[nt][2 * hf]),
                                         v.y - (big[nt][2 * hf + 1] + small[nt][2 * hf + 1]));
                    }
            }
            __syncthreads();
        }
        for (int c = threadIdx.x; c < cols; c += GTHREADS) {
            float *X = c < dk ? Xk + c : Xv + (c - dk);
            float x[16];
#pragma unroll
            for (int r = 0; r < 16; r++) x[r] = X[(r0 + r) * ld];
#pragma unroll
            for (int r = 1; r < 16; r++) {
                const float *a = As + (r0 + r) * ast + r0;
                float s0 = x[r], s1 = 0.0f;
#pragma unroll
                for (int j = 0; j < r; j++) {
                    if (j & 1) s1 = fmaf(-a[j], x[j], s1);
                    else s0 = fmaf(-a[j], x[j], s0);
                }
                x[r] = s0 + s1;
            }
#pragma unroll
            for (int r = 0; r < 16; r++) X[(r0 + r) * ld] = x[r];
        }
        __syncthreads();
    }
}

/* The prep's steps 2-4 on tensor cores, after step 1 (Kn, Qn, gam, bt, eg, ed in shared memory; row
 * stride ks = max(dk, dv) + 4): A and P; Qg and Kd out; the right-hand sides beta e^gam K (in Kn) and
 * beta V (in Qn, V: the chunk's first value row, rows `width` apart); the solve; W and U out. */
template <bool X3>
__device__ __forceinline__ void gdn_prep_tc(float *Kn, float *Qn, int ks, float *As, const double *gam, const float *bt,
                                            const float *eg, const float *ed, int L, int dk, int dv,
                                            const float *__restrict__ V, int64_t width, float *W, float *Qg, float *Kd,
                                            float *U, float *P) {
    const int t = threadIdx.x;
    gdn_prep_products_tc<X3>(Kn, Qn, ks, dk, gam, bt, L, As, AST, P);
    __syncthreads(); /* eg, ed (step 1), Kn and Qn read by the products */
    const int mx = dk > dv ? dk : dv;
#pragma unroll 4
    for (int e = t; e < GC * mx; e += GTHREADS) { /* each element read and rewritten by one thread */
        const int i = e / mx, m = e - i * mx;
        if (m < dk) {
            const float k = Kn[i * ks + m];
            Qg[i * dk + m] = Qn[i * ks + m] * eg[i];
            Kd[i * dk + m] = k * ed[i];
            Kn[i * ks + m] = (k * bt[i]) * eg[i];
        }
        if (m < dv) Qn[i * ks + m] = i < L ? V[(int64_t)i * width + m] * bt[i] : 0.0f;
    }
    __syncthreads();
    gdn_solve_tc<X3>(As, AST, Kn, Qn, ks, dk, dv);
    for (int e = t; e < GC * mx; e += GTHREADS) {
        const int i = e / mx, m = e - i * mx;
        if (m < dk) W[i * dk + m] = Kn[i * ks + m];
        if (m < dv) U[i * dv + m] = Qn[i * ks + m];
    }
}

/* ---- the scan on tensor cores ------------------------------------------------------------------ */

#define SST (GCT + 8) /* row stride of the state tile, U and V' (read along columns) */

__device__ __forceinline__ void cp16(float *smem, const float *gmem) { cu_cp_async16(cu_smem_addr(smem), gmem, true); }

/* [GC][dk] rows of src into dst with row stride ld */
__device__ __forceinline__ void cp_rows(float *dst, int ld, const float *src, int dk) {
    const int per_row = dk >> 2;
    for (int q = threadIdx.x; q < GC * per_row; q += blockDim.x) {
        const int r = q / per_row, c4 = q - r * per_row;
        cp16(dst + r * ld + 4 * c4, src + r * dk + 4 * c4);
    }
}

static size_t scan_tc_smem(int dk) {
    return ((size_t)3 * dk * SST + 3 * (size_t)GC * SST + 2 * (size_t)GC * (dk + 4) + (size_t)GC * (dk + 8) +
            (size_t)GC * AST) *
           sizeof(float);
}

/* The scan (grid: seq segment x value head x GCT-column tile; cuda_gdn_chunked.cu), X3: three tf32 products,
 * else one; 16 warps, two stages per chunk; warp w = 8 grp + i, row tile rt = i % 4, column half n0 = 16 (i / 4):
 *   A: group 0 X = W S and V' = U - X (rows 16 rt, columns n0..), group 1 O = Qg S (the same tile);
 *   B: group 1 O += P V' and O out, group 0 S = eL S + Kd^T V' (state rows 16 i, every column).
 * S and V' are B operands of several warps, so they are kept split (tf32 hi and lo) next to S in f32.
 * Operands come through cp.async in two groups: {W, U, Qg} of the next chunk go out after stage A,
 * {P, Kd} after stage B. */
#define SCAN_TC_THREADS 512
template <bool X3>
__global__ void __launch_bounds__(SCAN_TC_THREADS, 1)
gdn_scan_tc_kernel(const gdn_seg *__restrict__ segs, const gdn_slot *__restrict__ slots, qgdn_dims d,
                   const float *__restrict__ scratch, float *__restrict__ out) {
    extern __shared__ float4 smem_f4[];
    const int dk = d.k_dim, dv = d.v_dim, Hv = d.n_v_heads;
    const int WS = dk + 4, KS8 = dk + 8, SSZ = dk * SST, VSZ = GC * SST;
    float *Sf = (float *)smem_f4; /* [dk][SST] f32, then its hi and lo parts */
    uint32_t *Sh = (uint32_t *)(Sf + SSZ), *Vh = Sh + 2 * SSZ; /* V' [GC][SST]: hi, then lo */
    float *Ub = (float *)(Vh + 2 * VSZ), *Wb = Ub + VSZ, *Qb = Wb + GC * WS, *Kb = Qb + GC * WS, *Pb = Kb + GC * KS8;
    const gdn_seg seg = segs[blockIdx.x];
    const int h = blockIdx.y, c0 = blockIdx.z * GCT;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, tq = lane & 3;
    const int grp = warp >> 3, wi = warp & 7, rt = wi & 3, n0 = 16 * (wi >> 2);
    const int64_t sf = slot_floats(dk, dv);
    /* the state tile, f32 or (d.state_bf16) bf16: rounded after every chunk, where a cut there would store it */
    float *Sg = seg.S + (int64_t)h * dk * dv + c0;
    __nv_bfloat16 *Sgb = (__nv_bfloat16 *)seg.S + (int64_t)h * dk * dv + c0;

    for (int e = t; e < dk * GCT; e += SCAN_TC_THREADS) {
        const int o = (e / GCT) * SST + e % GCT;
        const int64_t at = (int64_t)(e / GCT) * dv + (e % GCT);
        Sf[o] = d.state_bf16 ? __bfloat162float(Sgb[at]) : Sg[at];
        cu_tf32_split(Sf[o], Sh[o], Sh[SSZ + o]);
    }

    auto slot_base = [&](int s) { return scratch + ((int64_t)(seg.slot0 + s) * Hv + h) * sf; };
    auto issue_wuq = [&](int s) {
        const float *base = slot_base(s);
        cp_rows(Wb, WS, base, dk);
        cp_rows(Qb, WS, base + GC * dk, dk);
        const float *U = base + 3LL * GC * dk;
        for (int q = t; q < GC * (GCT / 4); q += SCAN_TC_THREADS) {
            const int r = q >> 3, c4 = q & 7;
            cp16(Ub + r * SST + 4 * c4, U + (int64_t)r * dv + c0 + 4 * c4);
        }
    };
    auto issue_pk = [&](int s) {
        const float *base = slot_base(s);
        cp_rows(Kb, KS8, base + 2 * GC * dk, dk);
        const float *P = base + 3LL * GC * dk + (int64_t)GC * dv;
        for (int q = t; q < GC * (GC / 4); q += SCAN_TC_THREADS) {
            const int r = q >> 4, c4 = q & 15;
            cp16(Pb + r * AST + 4 * c4, P + r * GC + 4 * c4);
        }
    };
    issue_wuq(0);
    cu_cp_commit();
    issue_pk(0);
    cu_cp_commit();

    for (int s = 0; s < seg.n_slots; s++) {
        const gdn_slot sl = slots[seg.slot0 + s];
        const float eL = slot_base(s)[sf - 4];
        cu_cp_wait<1>(); /* W, U, Qg of chunk s */
        __syncthreads();
        float big[2][4], small[2][4]; /* stage A's product: X (group 0) or O (group 1, kept for stage B) */
        gdn_zero(big, small);
        gdn_tile<2, false, B_SPLIT, X3>(big, small, grp ? Qb : Wb, WS, Sh, SST, SSZ, 16 * rt, n0, 0, dk, lane);
        if (grp == 0) { /* V' = U - X, kept split */
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int o = gdn_c_at(16 * rt, n0 + 8 * nt, c, SST, lane);
                    cu_tf32_split(Ub[o] - (big[nt][c] + small[nt][c]), Vh[o], Vh[VSZ + o]);
                }
        }
        __syncthreads(); /* V' complete; W, U, Qg free */
        if (s + 1 < seg.n_slots) issue_wuq(s + 1);
        cu_cp_commit();
        cu_cp_wait<1>(); /* P, Kd of chunk s */
        __syncthreads();
        if (grp) { /* O += P V' (P is zero right of the diagonal tile) */
            gdn_tile<2, false, B_SPLIT, X3>(big, small, Pb, AST, Vh, SST, VSZ, 16 * rt, n0, 0, 16 * (rt + 1), lane);
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int i = 16 * rt + g + 8 * hf;
                    if (i >= sl.L) continue;
                    float *o = out + ((int64_t)(sl.row0 + i) * Hv + h) * dv + c0 + n0 + 8 * nt + 2 * tq;
                    *(float2 *)o = make_float2(big[nt][2 * hf] + small[nt][2 * hf],
                                               big[nt][2 * hf + 1] + small[nt][2 * hf + 1]);
                }
        } else if (16 * wi < dk) { /* S = eL S + Kd^T V' on state rows 16 wi (no other warp touches S here) */
            float sb[4][4], ss[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    sb[nt][c] = eL * Sf[gdn_c_at(16 * wi, 8 * nt, c, SST, lane)];
                    ss[nt][c] = 0.0f;
                }
            gdn_tile<4, true, B_SPLIT, X3>(sb, ss, Kb, KS8, Vh, SST, VSZ, 16 * wi, 0, 0, GC, lane);
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int o = gdn_c_at(16 * wi, 8 * nt, c, SST, lane);
                    const float v = sb[nt][c] + ss[nt][c];
                    Sf[o] = d.state_bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
                    cu_tf32_split(Sf[o], Sh[o], Sh[SSZ + o]);
                }
        }
        __syncthreads(); /* S written; P, Kd and V' free */
        if (s + 1 < seg.n_slots) issue_pk(s + 1);
        cu_cp_commit();
    }
    cu_cp_wait<0>();
    __syncthreads();
    for (int e = t; e < dk * GCT; e += SCAN_TC_THREADS) {
        const int64_t at = (int64_t)(e / GCT) * dv + (e % GCT);
        const float v = Sf[(e / GCT) * SST + e % GCT];
        if (d.state_bf16) Sgb[at] = __float2bfloat16_rn(v); /* exact: rounded after the last chunk */
        else Sg[at] = v;
    }
}

#endif
