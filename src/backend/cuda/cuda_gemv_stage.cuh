/* cuda_gemv_stage.cuh: how x enters the decode matmul (cuda_gemv.cuh, which includes it): each f32 value split
 * into bf16 hi and lo parts laid out as ready-made MMA B fragments, by each block for its K slice (gt_stage) or
 * once for every block (gemv_split_kernel, whose layout the blocks copy: gt_copy), gated (qglu) or normalised
 * (qnorm) on the way where the op asks for it; with GT_X_TMA, the block's rows first by bulk copies (gt_copy_x). */
#ifndef QUILL_CUDA_GEMV_STAGE_CUH
#define QUILL_CUDA_GEMV_STAGE_CUH

/* A gated input (op glu_matmul, GLU): x[v][d] enters as act(g[v * g_stride + d]) * x[v][d] (backend.h's qglu),
 * the product rounded on its own, as cuda_swiglu (silu) and cuda_glu / cuda_mul_sigmoid (sigmoid) round it, so
 * the staged values are bitwise those of the two launches it replaces. The plan checks the layout
 * (gemv_tc_glu_ok: a lane's 16 or 8 values lie in one vector). */
/* A normalised input (op norm_matmul_multi, NORM): x is the residual and enters as x * scale * w, the scale
 * from the producer's sums of squares (backend.h's qnorm; gt_norm_scale adds them in one fixed order). */
/* A gated-norm input (a qglu with norm_w, GNORM: the GDN's output norm, vectors of 128): x enters as
 * ((x * scale) * norm_w) * silu(g), the scale from the vector's sum of squares in the tree norm_warp_kernel
 * adds it in (gt_gnorm_scale), so the staged values are bitwise cuda_gated_rmsnorm's. */
/* Loads of what the op before wrote (x, the gates): through the non-coherent cache, or with GT_X_COHERENT from
 * L2 (ld.global.cg), as a kernel that reads what other blocks of the same launch wrote must (bench_persist). */
#ifndef GT_X_COHERENT
#define GT_X_COHERENT 0
#endif
template <typename T> __device__ __forceinline__ T gt_ldx(const T *p) { return GT_X_COHERENT ? __ldcg(p) : __ldg(p); }

/* bf16x, the decode precision (cu_decode_precision): 0 split, 1 bf16 x, GT_DQ bf16 x and 4-bit weights dequantized
 * before their MMAs (cuda_gemv.cuh's DQ; bf16 weights compute as in bf16). */
#define GT_DQ 2
enum { GT_IN_X = 0, GT_IN_GLU = 1, GT_IN_NORM = 2, GT_IN_GNORM = 3 }; /* the input, gated, normalised, both */
struct gt_input {
    qglu glu;               /* GT_IN_GLU (act 0, as zeroed: not gated) */
    const float *ss, *nw;   /* GT_IN_NORM (ss NULL: not normalised): sums of squares [n][parts], weights [K] */
    float eps;
    int parts;
    int bf16; /* QUILL_DECODE_PRECISION=bf16: x enters as bf16(x), its lo part 0 (cuda_gemv.cuh); GT_DQ: dequant */
};
__host__ __device__ inline int gt_in_kind(const gt_input &in) {
    return in.glu.act ? (in.glu.norm_w ? GT_IN_GNORM : GT_IN_GLU) : in.ss ? GT_IN_NORM : GT_IN_X;
}
/* A normalised input in dequant mode on 4-bit weights (Q != 0) takes the norm's scale after the product: x enters as
 * bf16(x * w) and each row's sum (the slices' partials added in order) is multiplied by the row's scale where it is
 * written (gt_finish, gdq_cluster_sum; the scales from gt_row_scales). x * w needs nothing but the value itself, so
 * the residual's producer can write the consumer's split rows as its outputs finish (gt_next_store) and the
 * consumer needs no split launch. Every kernel of the mode does the same (EXACT(batch)); the mode's bits are its own. */
template <int Q> __host__ __device__ inline bool gt_norm_after(const gt_input &in) {
    return Q != 0 && in.bf16 == GT_DQ && in.ss;
}
#define GT_GNORM_DIM 128 /* the gated norm's vectors: a warp's 8 (4-bit) or 16 (bf16) consecutive items */
/* The norm's scale of row r (r < 0: none, the lane only takes part), by the four lanes t of a staging item
 * together: lane t sums parts t, t + 4, ... in order (its loads out at once), and the four sums are added as
 * (s0 + s1) + (s2 + s3), the same in every lane, block and row count. (One lane summing all the parts in
 * order, a chain of dependent loads, cost the 9B's gate + up launch ~3 us, session 12.) */
__device__ __forceinline__ float gt_norm_scale(const gt_input &in, int r, int t, int64_t K, const float *ss_rows = nullptr,
                                              int row0 = 0) {
    float sum = 0.0f;
    if (r >= 0) { /* ss_rows: the block's copy of rows row0.. (gt_stage's XSM), else in.ss */
        const float *ss = ss_rows ? ss_rows + (int64_t)(r - row0) * in.parts : in.ss + (int64_t)r * in.parts;
#pragma unroll 8
        for (int p = t; p < in.parts; p += 4) sum += ss[p];
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    return rsqrtf(sum / (float)K + in.eps);
}
/* gt_norm_after: the scales of the block's rows row0 .. row0 + rows - 1 into sc (shared; rows <= GT_SCALE_ROWS), four
 * lanes a row as gt_norm_scale, before the barrier that precedes the block's loop; rows past n take a scale unused. */
#define GT_SCALE_ROWS 64
__device__ __forceinline__ void gt_row_scales(const gt_input &in, int n, int64_t K, int row0, int rows, float *sc) {
    const int lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i - lane < 4 * rows; i += blockDim.x) { /* warp-uniform: gt_norm_scale shuffles */
        const int j = i >> 2, r = row0 + j;
        const float s = gt_norm_scale(in, i < 4 * rows && r < n ? r : -1, i & 3, K);
        if (i < 4 * rows && (i & 3) == 0) sc[j] = s;
    }
}
/* The gated norm's scale of the 128-value vector whose EPL values this lane holds (zeros where the item is not
 * live), by the items of the vector together: its 32 quads' squares (norm_ss4's fma chains) added in warp_sum's
 * xor tree over quads, as norm_warp_kernel adds them for a vector of 128. A vector's items are consecutive
 * lanes (the plan checks that slices start and end on vectors), so quad q ^ o is a quad of this lane or of lane ^ m:
 * an item's quads lie in its H lanes (lane bits 2 and 3 tell its parts apart where H > 1, gt_stage), its lanes t are
 * lane bits 0 and 1, and the vector's next unit is 4 H lanes on. The tree's pairs, so its bits, do not depend on H. */
template <int EPL, int H = 1> __device__ __forceinline__ float gt_gnorm_scale(const float (&v)[EPL], float eps) {
    constexpr int QPL = EPL / 4, QPI = QPL * H; /* quads per lane, per item */
    float q[QPL];
#pragma unroll
    for (int a = 0; a < QPL; a++) {
        float s = 0.0f;
#pragma unroll
        for (int e = 4 * a; e < 4 * a + 4; e++) s = fmaf(v[e], v[e], s);
        q[a] = s;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        if (o >= QPL) { /* another lane's: another part of the item, or item ^ d (its t bits, then its unit's) */
            const int d = o / QPI, m = o < QPI ? 4 * (o / QPL) : d < 4 ? d : d * H;
#pragma unroll
            for (int a = 0; a < QPL; a++) q[a] += __shfl_xor_sync(0xffffffffu, q[a], m);
        } else {
            float n[QPL];
#pragma unroll
            for (int a = 0; a < QPL; a++) n[a] = q[a] + q[a ^ o];
#pragma unroll
            for (int a = 0; a < QPL; a++) q[a] = n[a];
        }
    }
    return rsqrtf(q[0] / (float)GT_GNORM_DIM + eps);
}

/* Stages x rows [row0, row0 + RT nt) for units [u0, u0 + us) as B fragments. For tile T, unit u and
 * lane L = (g, t) of the MMA: column g is row row0 + 4T + g/2, its hi part (g even) or lo part (g odd),
 * at the K values lane t's weights hold; sx[((T*us + u)*KSU/2 + jp)*32 + L] = {b0, b1 of k-step 2jp,
 * b0, b1 of k-step 2jp + 1}. 4-bit: sX[(T*us + u)*4 + g/2] = the unit's sum of (hi + lo) for that row.
 * With in.bf16, x is its hi part (lo = 0). RT = 8 (the many-row kernel with bf16 x): column g is row
 * row0 + 8T + g, hi only, and sX[(T*us + u)*8 + g]; the same values and sums as RT = 4 with in.bf16.
 * Item i = (T, row r of the tile, u, t), t fastest: one item loads its 16 (4-bit) or 8 (bf16) values of
 * x once and writes both the hi and the lo column. The caller's threads take items i0, i0 + stride, ...
 * (whole warps: i0 % 32 = lane, stride % 32 = 0).
 * H = 1: the items of rows past n (3 of 4 at one row) are whole warps that only write zeros (the split rows, which
 * every block copies). H = 2 or 4 (the one-row kernels, 4-bit): there are no such items, and an item's values are
 * split over H lanes, lane bits 2 (and 3) telling its parts hp apart: part hp loads values 16 hp / H .. of the 16.
 * With H = 2 part hp writes fragment jp = hp of both columns; with H = 4 parts 2 jp and 2 jp + 1 swap values and
 * write fragment jp's hi and lo column. At one row that puts the work of 1-4 warps a block on 2-8. The columns of
 * rows past n are then whatever the shared memory held: an MMA's columns do not mix, and nothing reads those rows'
 * sums (gt_finish writes rows < n only). Every value and sum is H = 1's: the X sum's chain runs through the parts
 * in order. */
/* x's hi part (part 0, h[e] = bf16(x)) or lo part (part 1, bf16(x - hi)) as f32 */
template <int N> __device__ __forceinline__ float gt_part(const float (&v)[N], const float (&h)[N], int e, int part) {
    return part ? __bfloat162float(__float2bfloat16_rn(v[e] - h[e])) : h[e];
}
#define GT_STAGE_ITEMS(rt) ((rt) * 4) /* items per (tile, unit): rt rows x 4 lanes t */
#ifndef GT_STAGE_H
/* the one-row 4-bit kernels' lanes an item (gt_block): 4 splits each item in four where a block's items then fit its
 * threads once, else in two; 2 always in two; 1 as the split rows. One stream, 4-bit 9B, H100 (docs/performance.md,
 * fifty-ninth pass): 1 405.5-409.1, 2 418.9-421.1, 4 421.1-423.4 tokens/s. */
#define GT_STAGE_H 4
#endif
/* The lane's first value of k-step j's b0 (its pairs: e0 and e0 + 4 for 4-bit, e0 and e0 + 1 bf16; b1 the next
 * ones): the K order the weight side's loads give each MMA. */
template <int Q> __device__ __forceinline__ int gt_kstep_e0(int j) { return Q ? (j & 1) * 2 + (j >> 1) * 8 : 4 * j; }
/* The layout of a block's copies (XSM; gt_copy_x writes it, gt_stage reads it): its rows row0 .. row0 + rows - 1
 * (rows = min(n - row0, 4 nt)) of x's slice of us units, row after row, then the same rows of the norm's sums
 * (parts a row) or of the gates' slice (the slice's values a row). Returns where the sums or the gates start. */
template <int Q> __device__ __forceinline__ int64_t gt_xsm_second(int n, int row0, int nt, int us) {
    return (int64_t)min(n - row0, 4 * nt) * us * gt_cfg<Q>::UK;
}
/* sc (NORM, gt_norm_after): where the rows' scales go ([r - row0], from the items of unit 0), computed as the other
 * items' loads go out; NULL where nothing reads them (the split rows). XSM: x is the block's copies in shared memory
 * (gt_xsm_second's layout), not the rows in global memory. */
template <int Q, int IN, int RT = 4, bool WGO = false, bool XSM = false, int H = 1>
__device__ __forceinline__ void gt_stage(const float *__restrict__ x, const gt_input &in, int n, int64_t K, int row0,
                                         int nt, int64_t u0, int us, uint4 *sx, float *sX, int i0, int stride,
                                         float *sc = nullptr) {
    typedef gt_cfg<Q> C;
    static_assert(!XSM || RT == 4, "the copies are of the one-row kernels' tiles of 4 rows");
    static_assert(H == 1 || ((H == 2 || H == 4) && Q != 0 && RT == 4 && !WGO), "split items: one-row 4-bit kernels");
    constexpr int EPL = C::EPT / H, JPL = H <= 2 ? C::KSU / 2 / H : 1; /* a lane's values; its fragments (H <= 2) */
    /* < 2^31: checked where the split rows are launched; H > 1: the rows < n only */
    const int items = H == 1 ? nt * us * GT_STAGE_ITEMS(RT) : min(n - row0, nt * RT) * us * 4 * H;
    const int lane = i0 & 31;
    for (int i = i0; i - lane < items; i += stride) { /* warp-uniform: the shuffles below need the whole warp */
        const int t = i & 3, hp = (i >> 2) & (H - 1), ru = (i >> 2) / H, u = ru % us, Tr = ru / us, T = Tr / RT,
                  rr = Tr % RT;
        const int r = row0 + RT * T + rr;
        const bool live = i < items && r < n; /* uniform over the 4 H lanes of (T, r, u) */
        float v[EPL], h[EPL]; /* x and its hi part; lo = bf16(v - h) where it is used */
        float scale = 0.0f;
        const int64_t k = (u0 + u) * C::UK + t * C::EPT + hp * EPL;
        /* 4-bit: x first, then the norm's scale, whose loads and shuffles overlap x's (x loaded after the scale's
         * shuffles waited for them: 4 streams +2.4 %, session 14); bf16 after it (with the gates and weights also
         * first the bf16 lean kernels spilled: one stream -2.5 %); GNORM's scale needs x first. The gates and norm
         * weights after the scale. */
        constexpr bool X_FIRST = Q != 0 || IN == GT_IN_GNORM;
        const auto load_x = [&]() {
#pragma unroll
            for (int e = 0; e < EPL; e++) v[e] = 0.0f;
            if (!live) return;
            const float4 *p = XSM ? (const float4 *)(x + (int64_t)(r - row0) * us * C::UK + (k - u0 * C::UK))
                                  : (const float4 *)(x + (int64_t)r * K + k);
#pragma unroll
            for (int q = 0; q < EPL / 4; q++) {
                const float4 f = XSM ? p[q] : gt_ldx(p + q);
                v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
            }
        };
        if constexpr (X_FIRST) load_x();
        if constexpr (IN == GT_IN_NORM) {
            const bool after = gt_norm_after<Q>(in); /* uniform; x * 1 * w = x * w, the scale after the product */
            const float *ss_rows = XSM ? x + gt_xsm_second<Q>(n, row0, nt, us) : nullptr;
            if (!after || sc) scale = gt_norm_scale(in, live ? r : -1, t, K, ss_rows, row0);
            if (after && sc && live && u == 0 && t == 0 && hp == 0) sc[r - row0] = scale;
            if (after) scale = 1.0f;
        }
        if constexpr (!X_FIRST) load_x();
        if constexpr (IN == GT_IN_GNORM) scale = gt_gnorm_scale<EPL, H>(v, in.glu.norm_eps);
        if (live) {
            if constexpr (IN == GT_IN_GLU || IN == GT_IN_GNORM) {
                const qglu &glu = in.glu;
                const int kk = (int)k, dim = glu.dim; /* < 2^31: K is (gt_locate) */
                const int64_t vec = (int64_t)r * (K / dim) + kk / dim;
                const float4 *gp = XSM ? (const float4 *)(x + gt_xsm_second<Q>(n, row0, nt, us) +
                                                          (int64_t)(r - row0) * us * C::UK + (k - u0 * C::UK))
                                       : (const float4 *)(glu.g + vec * glu.g_stride + kk % dim);
                const float4 *wp = (const float4 *)(glu.norm_w + kk % dim); /* GNORM */
#pragma unroll
                for (int q = 0; q < EPL / 4; q++) {
                    const float4 f = XSM ? gp[q] : gt_ldx(gp + q);
                    if constexpr (IN == GT_IN_GNORM) { /* norm_scale4, then the gate, as norm_warp_kernel */
                        const float4 w = __ldg(wp + q);
                        v[4 * q] = v[4 * q] * scale * w.x, v[4 * q + 1] = v[4 * q + 1] * scale * w.y;
                        v[4 * q + 2] = v[4 * q + 2] * scale * w.z, v[4 * q + 3] = v[4 * q + 3] * scale * w.w;
                    }
                    v[4 * q] = __fmul_rn(glu_act(f.x, glu.act), v[4 * q]);
                    v[4 * q + 1] = __fmul_rn(glu_act(f.y, glu.act), v[4 * q + 1]);
                    v[4 * q + 2] = __fmul_rn(glu_act(f.z, glu.act), v[4 * q + 2]);
                    v[4 * q + 3] = __fmul_rn(glu_act(f.w, glu.act), v[4 * q + 3]);
                }
            }
            if constexpr (IN == GT_IN_NORM) {
                const float4 *wp = (const float4 *)(in.nw + k);
#pragma unroll
                for (int q = 0; q < EPL / 4; q++) {
                    const float4 f = __ldg(wp + q);
                    v[4 * q] = v[4 * q] * scale * f.x, v[4 * q + 1] = v[4 * q + 1] * scale * f.y;
                    v[4 * q + 2] = v[4 * q + 2] * scale * f.z, v[4 * q + 3] = v[4 * q + 3] * scale * f.w;
                }
            }
#pragma unroll
            for (int e = 0; e < EPL; e++) h[e] = __bfloat162float(__float2bfloat16_rn(v[e]));
        }
        const bool hi_only = RT == 8 || in.bf16; /* x is its hi part: the lo columns are zeros */
        if (WGO && i < items) { /* wgmma's rows: words 8 j + t (b0 of k-step j) and 8 j + 4 + t (b1) of row rr */
            static_assert(!WGO || (Q != 0 && RT == 8), "wgmma order: 4-bit units, tiles of 8 rows");
            uint32_t *row = (uint32_t *)(sx + (size_t)(T * us + u) * C::SXU) + rr * 32 + t;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int e0 = gt_kstep_e0<Q>(j);
                row[8 * j] = live ? cu_pack_bf16x2(h[e0], h[e0 + 4]) : 0u;
                row[8 * j + 4] = live ? cu_pack_bf16x2(h[e0 + 1], h[e0 + 5]) : 0u;
            }
        } else if (H == 4) { /* lanes hp and hp + 1 (hp even) hold values 0-3 and 4-7 of fragment hp / 2's pairs: each
                              * sends the other the part it lacks, then the first writes the hi column, the second lo */
            const int role = hp & 1;
            float send[EPL], got[EPL];
#pragma unroll
            for (int e = 0; e < EPL; e++) send[e] = !live ? 0.0f : role ? h[e] : gt_part(v, h, e, 1);
#pragma unroll
            for (int e = 0; e < EPL; e++) got[e] = __shfl_xor_sync(0xffffffffu, send[e], 4);
            if (live) {
                uint32_t b[4]; /* words {b0, b1} of k-steps 2 jp and 2 jp + 1: pairs (c, c + 4), c = 0..3 */
#pragma unroll
                for (int c = 0; c < 4; c++)
                    b[c] = !role     ? cu_pack_bf16x2(h[c], got[c])
                           : hi_only ? 0u
                                     : cu_pack_bf16x2(got[c], gt_part(v, h, c, 1));
                sx[((size_t)(T * us + u) * (C::KSU / 2) + (hp >> 1)) * 32 + (2 * rr + role) * 4 + t] =
                    make_uint4(b[0], b[1], b[2], b[3]);
            }
        } else if (H == 1 ? i < items : live) {
            const int tu = T * us + u;
#pragma unroll
            for (int part = 0; part < 8 / RT; part++) { /* hi (g = 2 rr), then lo (g = 2 rr + 1); RT 8: hi (g = rr) */
                const int L = (RT == 8 ? rr : 2 * rr + part) * 4 + t;
#pragma unroll
                for (int jl = 0; jl < JPL; jl++) {
                    const int jp = hp * JPL + jl;
                    uint32_t b[4] = {0u, 0u, 0u, 0u};
                    if (live && !(part && hi_only)) {
#pragma unroll
                        for (int q = 0; q < 2; q++) { /* k-step j's element pairs, paired as the weight side pairs them */
                            const int j = 2 * jl + q; /* the lane's own k-steps: its values' indices */
                            const int e0 = gt_kstep_e0<Q>(j);
                            const int d = Q ? 4 : 1, e1 = Q ? e0 + 1 : e0 + 2;
                            b[2 * q] = cu_pack_bf16x2(gt_part(v, h, e0, part), gt_part(v, h, e0 + d, part));
                            b[2 * q + 1] = cu_pack_bf16x2(gt_part(v, h, e1, part), gt_part(v, h, e1 + d, part));
                        }
                    }
                    sx[((size_t)tu * (C::KSU / 2) + jp) * 32 + L] = make_uint4(b[0], b[1], b[2], b[3]);
                }
            }
        }
        if constexpr (Q != 0) {
            float sum = 0.0f;
            if constexpr (H == 1) {
                if (live) {
#pragma unroll
                    for (int e = 0; e < EPL; e++) sum += h[e] + (hi_only ? 0.0f : gt_part(v, h, e, 1));
                }
            } else { /* the same chain, through the item's H lanes in turn: lane hp goes on from lane hp - 1's sum */
                float a[EPL];
#pragma unroll
                for (int e = 0; e < EPL; e++) a[e] = live ? h[e] + (hi_only ? 0.0f : gt_part(v, h, e, 1)) : 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; e++) sum += a[e];
#pragma unroll
                for (int q = 1; q < H; q++) {
                    const float before = __shfl_up_sync(0xffffffffu, sum, 4);
                    if (hp == q) {
                        sum = before;
#pragma unroll
                        for (int e = 0; e < EPL; e++) sum += a[e];
                    }
                }
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            if (H == 1 ? i < items && t == 0 : live && t == 0 && hp == H - 1) sX[(T * us + u) * RT + rr] = sum;
        }
    }
}

/* XT: the block's rows of x's slice (units u0 .. u0 + us - 1) to xr, then the same rows of the norm's sums (NORM) or
 * of the gates' slice (GLU, GNORM: one copy a row, or a piece a vector the slice touches where the gates are strided,
 * gt_xtma_pieces), in gt_xsm_second's layout, all completing on bar, issued by the lanes of warp 0; every thread then
 * waits for them. The plan checked the sizes and the alignment of all but x (gt_block checks x's). */
__host__ __device__ inline int gt_xtma_pieces(const qglu &glu, int64_t k0, int64_t len) {
    return glu.g_stride == glu.dim ? 1 : (int)((k0 + len - 1) / glu.dim - k0 / glu.dim + 1);
}
template <int Q, int IN>
__device__ __forceinline__ void gt_copy_x(const float *x, const gt_input &in, int n, int64_t K, int row0, int nt,
                                          int64_t u0, int us, float *xr, uint64_t *bar) {
    typedef gt_cfg<Q> C;
    const int rows = min(n - row0, 4 * nt);
    const int64_t k0 = u0 * C::UK, len = (int64_t)us * C::UK; /* the slice's values a row */
    const bool gated = IN == GT_IN_GLU || IN == GT_IN_GNORM;
    const int pieces = gated ? gt_xtma_pieces(in.glu, k0, len) : IN == GT_IN_NORM, per_row = 1 + pieces;
    const uint32_t xb = (uint32_t)len * 4, sb = IN == GT_IN_NORM ? (uint32_t)in.parts * 4 : gated ? xb : 0;
    const uint32_t b = cu_smem_addr(bar);
    float *second = xr + gt_xsm_second<Q>(n, row0, nt, us); /* the sums' or the gates' rows */
    if (threadIdx.x < 32) {
        wg_fence_proxy_async_global(); /* each lane's copies read what it acquired at the wait */
        if (threadIdx.x == 0) wg_bar_expect(b, (uint32_t)rows * (xb + sb));
        __syncwarp();
        for (int j = threadIdx.x; j < rows * per_row; j += 32) {
            const int r = j / per_row, c = j % per_row;
            const int64_t gr = row0 + r;
            if (c == 0) {
                wg_bulk_load(cu_smem_addr(xr + r * len), x + gr * K + k0, xb, b);
            } else if constexpr (IN == GT_IN_NORM) {
                wg_bulk_load(cu_smem_addr(second + r * in.parts), in.ss + gr * in.parts, sb, b);
            } else if constexpr (gated) { /* the slice's gates: one run, or vector v's values [lo, hi) */
                const int64_t dim = in.glu.dim;
                int64_t lo = k0, hi = k0 + len;
                const float *src = in.glu.g + gr * K + k0; /* g_stride == dim: the gates' rows are x's shape */
                if (in.glu.g_stride != dim) {
                    const int64_t v = k0 / dim + (c - 1);
                    lo = max(k0, v * dim), hi = min(k0 + len, (v + 1) * dim);
                    src = in.glu.g + (gr * (K / dim) + v) * in.glu.g_stride + (lo - v * dim);
                }
                wg_bulk_load(cu_smem_addr(second + r * len + (lo - k0)), src, (uint32_t)(hi - lo) * 4, b);
            }
        }
    }
    wg_bar_wait(b, 0);
}

/* Many rows: x split once for every block (gemv_split_kernel, all tiles and units in gt_stage's layout
 * with us = U, tiles of RT rows) and each block copies its slice; the values are gt_stage's, so results do not
 * change. */
/* WGO: in the order gemv_dq_kernel's stages take (each tile's unit: 8 rows of 64 bf16 in the MMA's k-slot order,
 * row after row), not as fragments. */
template <int Q, int IN, int RT, bool WGO = false>
__global__ void __launch_bounds__(256) gemv_split_kernel(const float *__restrict__ x, const gt_input in, int n,
                                                         int64_t K, uint4 *__restrict__ xs, float *__restrict__ Xs) {
    cu_pdl_enter();
    const int nt = (n + RT - 1) / RT;
    gt_stage<Q, IN, RT, WGO>(x, in, n, K, 0, nt, 0, (int)(K / gt_cfg<Q>::UK), xs, Xs,
                        (int)(blockIdx.x * blockDim.x + threadIdx.x), (int)(gridDim.x * blockDim.x));
}

/* A block's slice of the split rows: tiles row0/4 .. + nt, units [u0, u0 + us) of U. */
template <int Q>
__device__ __forceinline__ void gt_copy(const uint4 *__restrict__ xs, const float *__restrict__ Xs, int64_t U, int row0,
                                        int nt, int64_t u0, int us, uint4 *sx, float *sX) {
    typedef gt_cfg<Q> C;
    for (int T = 0; T < nt; T++) {
        const int64_t tu0 = (int64_t)(row0 / 4 + T) * U + u0;
        const uint4 *src = xs + tu0 * C::SXU;
        uint4 *dst = sx + (size_t)T * us * C::SXU;
        for (int i = threadIdx.x; i < us * C::SXU; i += GT_THREADS) dst[i] = __ldg(src + i);
        if constexpr (Q != 0)
            for (int i = threadIdx.x; i < us * 4; i += GT_THREADS) sX[T * us * 4 + i] = __ldg(Xs + tu0 * 4 + i);
    }
}

#endif
