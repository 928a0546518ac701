/* cuda_gemv.cuh: the decode matmul on tensor cores for bf16 and MLX 4-bit affine (group 64 or 128)
 * weights: y[r][o] = sum_k x[r][k] W[o][k]. Included by cuda_gemv.cu (the op) and by
 * tests/cuda/bench_gemv.cu (which links nothing but cudart), so it holds kernels and small inline
 * host helpers only.
 *
 * Arithmetic (mma.sync m16n8k16, bf16 operands, f32 accumulators):
 * - Each f32 activation is split x = hi + lo + e with hi = bf16(x), lo = bf16(x - hi) (|e| <= 2^-18|x|);
 *   every weight fragment is multiplied by the hi part and by the lo part. bf16 x bf16 products are
 *   exact, so the result is f32-class (relative error ~1e-6), not bf16-class.
 * - W is the A operand (16 outputs per MMA), activation rows the B operand (8 rows per MMA). Lane
 *   (g = lane/4, t = lane%4) loads a contiguous piece of output rows g and g+8 (16 bytes bf16 or
 *   8 bytes of 4-bit codes) and the staged activations put the matching x values in the same
 *   fragment slots: the K order inside an MMA is a fixed permutation, the same for every row.
 * - 4-bit: the weights of one "unit" (64 codes = 4 MMA k-steps) share a scale s and bias b. Codes
 *   become bf16 exactly ((0x4300 | q) - 128 = q, two per instruction); P = sum_k q_k x_k comes from the
 *   MMAs (fresh accumulator per unit) and the unit is folded as acc = s*P + (b*X + acc), X = sum of
 *   the unit's (hi + lo), computed while staging, in a fixed order.
 * - Split-K: the K units are cut into S slices, S a function of (n_out, K) only (gemv_tc_split). With
 *   S > 1 each slice writes a partial and the last block of an (output block, row chunk) to arrive
 *   (a ticket counter) sums the S partials in the order s = 0..S-1; the counter is reset for the next
 *   call. No result depends on n or on the other rows: EXACT(batch).
 * Geometry: a block is 8 warps, 128 outputs (16 per warp) x 32 rows (4 MMA row tiles) x one K slice;
 * blockIdx.x = output block * row chunks + row chunk (blocks sharing weights run together, so
 * row chunks after the first read W from L2); blockIdx.y = slice. The block walks its slice in chunks
 * of GT_UPC units: x for the chunk is staged in shared memory (double buffered, one barrier per
 * chunk) as ready-made B fragments, and each warp's weights for the next chunk are loaded into
 * registers before the current chunk is computed. */
#ifndef QUILL_CUDA_GEMV_CUH
#define QUILL_CUDA_GEMV_CUH

#include "cuda_common.cuh"

/* Geometry; overridable (-D) only for tests/cuda/bench_gemv.sh's tuning variants. */
#ifndef GT_WARPS
#define GT_WARPS 8
#endif
#define GT_THREADS (GT_WARPS * 32)
#define GT_OUT (GT_WARPS * 16) /* outputs per block */
#define GT_RC 32               /* rows per block: 4 tiles of 8 */
#ifndef GT_UPC
#define GT_UPC 4 /* units per chunk */
#endif
#ifndef GT_MAX_SPLIT
#define GT_MAX_SPLIT 16
#endif
#ifndef GT_BLOCKS
#define GT_BLOCKS 256 /* blocks the split aims for */
#endif

/* Q = 0: bf16 (a unit is 32 values, 2 k-steps; a lane loads 16 bytes per row per unit).
 * Q = 64 or 128: 4-bit affine with that group (a unit is 64 codes, 4 k-steps; 8 bytes per lane). */
template <int Q> struct gt_cfg {
    static constexpr int UK = Q ? 64 : 32;  /* K values per unit */
    static constexpr int KSU = Q ? 4 : 2;   /* MMA k-steps per unit */
    static constexpr int EPT = Q ? 16 : 8;  /* K values per lane per unit */
    static constexpr int WPU = Q ? 2 : 4;   /* 32-bit weight words per lane per row per unit */
    static constexpr int SX_U4 = GT_UPC * KSU * GT_RC * 4; /* uint4 per staging buffer */
    static constexpr size_t SMEM = 2 * ((size_t)SX_U4 * 16 + (Q ? GT_RC * GT_UPC * 4 : 0));
};

/* A warp's weights for one chunk (registers). 4-bit: lane t holds the scale and bias of units t, t + 4,
 * ... (rows g, g+8), handed to the quad by shuffles (GT_UPC > 4 needs more than one per lane). */
#define GT_SPL ((GT_UPC + 3) / 4)
template <int Q> struct gt_wbuf {
    uint32_t w[GT_UPC][2][gt_cfg<Q>::WPU]; /* [unit][row g, row g+8][word] */
    float sc[GT_SPL][2], bi[GT_SPL][2];
};

__device__ __forceinline__ void gt_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t gt_pack(float lo_half, float hi_half) { /* exact: both are bf16 values */
    __nv_bfloat162 h = __floats2bfloat162_rn(lo_half, hi_half);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* Codes i and i+4 of a word as a bf16 pair (low half = code i): (0x4300 | q) - 128 = q exactly. */
__device__ __forceinline__ uint32_t gt_codes(uint32_t w, int i) {
    uint32_t v = ((w >> (4 * i)) & 0x000F000Fu) | 0x43004300u, r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(v), "r"(0x3F803F80u), "r"(0xC300C300u));
    return r;
}

/* Staging item i of a chunk of UPC units (rows [row0, row0 + rows), lanes t = i % 4 adjacent): its EPT
 * x values (zeros for rows >= n and units >= u_end). */
template <int Q, int UPC>
__device__ __forceinline__ void gt_xget(const float *__restrict__ x, int n, int64_t K, int row0, int items, int64_t u0,
                                        int64_t u_end, int i, float (&v)[gt_cfg<Q>::EPT]) {
    typedef gt_cfg<Q> C;
    const int t = i & 3, u = (i >> 2) % UPC, r = (i >> 2) / UPC;
    if (i < items && row0 + r < n && u0 + u < u_end) {
        const float4 *p = (const float4 *)(x + (int64_t)(row0 + r) * K + (u0 + u) * C::UK + t * C::EPT);
#pragma unroll
        for (int q = 0; q < C::EPT / 4; q++) {
            const float4 f = __ldg(p + q);
            v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < C::EPT; e++) v[e] = 0.0f;
    }
}

/* Writes item i as B fragments: sx[((u*KSU + j)*GT_RC + r)*4 + t] = {hi b0, hi b1, lo b0, lo b1} of k-step
 * j for lane (g = r % 8, t); and, 4-bit, sX[r*UPC + u] = sum over the unit of (hi + lo). All lanes of
 * the warp call it (shuffles). */
template <int Q, int UPC>
__device__ __forceinline__ void gt_xput(int items, int i, const float (&v)[gt_cfg<Q>::EPT], uint4 *sx, float *sX) {
    typedef gt_cfg<Q> C;
    const bool act = i < items;
    const int t = i & 3, u = (i >> 2) % UPC, r = (i >> 2) / UPC;
    float h[C::EPT], l[C::EPT];
#pragma unroll
    for (int e = 0; e < C::EPT; e++) {
        h[e] = __bfloat162float(__float2bfloat16_rn(v[e]));
        l[e] = __bfloat162float(__float2bfloat16_rn(v[e] - h[e]));
    }
#pragma unroll
    for (int j = 0; j < C::KSU; j++) {
        /* element pairs of k-step j's b0 and b1 (the weight side pairs them the same way) */
        const int e0 = Q ? (j & 1) * 2 + (j >> 1) * 8 : 4 * j;
        const int d = Q ? 4 : 1, e1 = Q ? e0 + 1 : e0 + 2;
        const uint4 f = make_uint4(gt_pack(h[e0], h[e0 + d]), gt_pack(h[e1], h[e1 + d]), gt_pack(l[e0], l[e0 + d]),
                                   gt_pack(l[e1], l[e1 + d]));
        if (act) sx[((u * C::KSU + j) * GT_RC + r) * 4 + t] = f;
    }
    if constexpr (Q != 0) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < C::EPT; e++) s += h[e] + l[e];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        if (act && t == 0) sX[r * UPC + u] = s;
    }
}

/* Stages x rows [row0, row0 + rows_used) for units [u0, u0 + GT_UPC) in one go. */
template <int Q>
__device__ __forceinline__ void gt_stage(const float *__restrict__ x, int n, int64_t K, int row0, int rows_used,
                                         int64_t u0, int64_t u_end, uint4 *sx, float *sX) {
    const int items = rows_used * GT_UPC * 4; /* a multiple of 4: lanes t = 0..3 are adjacent */
    for (int base = 0; base < items; base += GT_THREADS) {
        float v[gt_cfg<Q>::EPT];
        gt_xget<Q, GT_UPC>(x, n, K, row0, items, u0, u_end, base + (int)threadIdx.x, v);
        gt_xput<Q, GT_UPC>(items, base + (int)threadIdx.x, v, sx, sX);
    }
}

/* Loads a warp's weight words of one unit (rows og, og+8; nothing for rows >= n_out). */
template <int Q>
__device__ __forceinline__ void gt_wload(uint32_t (&w)[2][gt_cfg<Q>::WPU], const unsigned char *r0, int64_t row_bytes,
                                         bool vg, bool vg8, int64_t unit, int t) {
    const int64_t off = (unit * 4 + t) * (gt_cfg<Q>::WPU * 4);
    if constexpr (Q != 0) {
        if (vg) {
            const uint2 a = __ldg((const uint2 *)(r0 + off));
            w[0][0] = a.x, w[0][1] = a.y;
        }
        if (vg8) {
            const uint2 c = __ldg((const uint2 *)(r0 + 8 * row_bytes + off));
            w[1][0] = c.x, w[1][1] = c.y;
        }
    } else {
        if (vg) {
            const uint4 a = __ldg((const uint4 *)(r0 + off));
            w[0][0] = a.x, w[0][1] = a.y, w[0][2] = a.z, w[0][3] = a.w;
        }
        if (vg8) {
            const uint4 c = __ldg((const uint4 *)(r0 + 8 * row_bytes + off));
            w[1][0] = c.x, w[1][1] = c.y, w[1][2] = c.z, w[1][3] = c.w;
        }
    }
}

/* Issues the loads of a warp's weights for units [u0, u0 + nu). */
template <int Q>
__device__ __forceinline__ void gt_load(gt_wbuf<Q> &b, const qweight &W, int64_t og, bool vg, bool vg8,
                                        int64_t u0, int nu, int t) {
    const int64_t K = W.n_in;
    const int64_t row_bytes = Q ? K / 2 : K * 2;
    const unsigned char *r0 = (const unsigned char *)W.w + og * row_bytes;
#pragma unroll
    for (int u = 0; u < GT_UPC; u++) {
        if (u < nu) {
#pragma unroll
            for (int p = 0; p < gt_cfg<Q>::WPU; p++) { /* rows >= n_out: zeros */
                if (!vg) b.w[u][0][p] = 0;
                if (!vg8) b.w[u][1][p] = 0;
            }
            gt_wload<Q>(b.w[u], r0, row_bytes, vg, vg8, u0 + u, t);
        }
    }
    if constexpr (Q != 0) {
        const int64_t gpr = K / (Q ? Q : 1);
#pragma unroll
        for (int q = 0; q < GT_SPL; q++) {
            b.sc[q][0] = b.sc[q][1] = b.bi[q][0] = b.bi[q][1] = 0.0f;
            if (4 * q + t < nu) {
                const int64_t gi = (u0 + 4 * q + t) * 64 / (Q ? Q : 1);
                if (vg) {
                    b.sc[q][0] = load_as_f32(W.scales, W.sb_fmt, og * gpr + gi);
                    b.bi[q][0] = load_as_f32(W.biases, W.sb_fmt, og * gpr + gi);
                }
                if (vg8) {
                    b.sc[q][1] = load_as_f32(W.scales, W.sb_fmt, (og + 8) * gpr + gi);
                    b.bi[q][1] = load_as_f32(W.biases, W.sb_fmt, (og + 8) * gpr + gi);
                }
            }
        }
    }
}

/* THE arithmetic of one unit: its MMAs over nt row tiles into acc[tile][c]. sx/sX: the
 * staged chunk (UPC units), u: the unit's place in it; s0, s1, b0, b1: 4-bit scale and bias of rows
 * g, g+8. */
template <int Q, int UPC>
__device__ __forceinline__ void gt_unit(const uint32_t (&w)[2][gt_cfg<Q>::WPU], float s0, float s1, float b0, float b1,
                                        const uint4 *sx, const float *sX, int u, int nt, float (&acc)[4][4], int lane) {
    typedef gt_cfg<Q> C;
    const int g = lane >> 2, t = lane & 3;
    uint32_t a[2][2 * C::KSU];
    if constexpr (Q != 0) {
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int p = 0; p < 8; p++) a[r][p] = gt_codes(w[r][p >> 2], p & 3);
    } else {
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int p = 0; p < 4; p++) a[r][p] = w[r][p];
    }
#pragma unroll
    for (int tile = 0; tile < 4; tile++) {
        if (tile >= nt) break; /* uniform */
        float P[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (Q == 0) {
#pragma unroll
            for (int c = 0; c < 4; c++) P[c] = acc[tile][c];
        }
#pragma unroll
        for (int j = 0; j < C::KSU; j++) {
            const uint4 f = sx[((u * C::KSU + j) * GT_RC + tile * 8 + g) * 4 + t];
            gt_mma(P, a[0][2 * j], a[1][2 * j], a[0][2 * j + 1], a[1][2 * j + 1], f.x, f.y);
            gt_mma(P, a[0][2 * j], a[1][2 * j], a[0][2 * j + 1], a[1][2 * j + 1], f.z, f.w);
        }
        if constexpr (Q != 0) {
            const float X0 = sX[(tile * 8 + 2 * t) * UPC + u], X1 = sX[(tile * 8 + 2 * t + 1) * UPC + u];
            acc[tile][0] = fmaf(s0, P[0], fmaf(b0, X0, acc[tile][0]));
            acc[tile][1] = fmaf(s0, P[1], fmaf(b0, X1, acc[tile][1]));
            acc[tile][2] = fmaf(s1, P[2], fmaf(b1, X0, acc[tile][2]));
            acc[tile][3] = fmaf(s1, P[3], fmaf(b1, X1, acc[tile][3]));
        } else {
#pragma unroll
            for (int c = 0; c < 4; c++) acc[tile][c] = P[c];
        }
    }
}

/* MMAs of one chunk (nu units, nt row tiles) into acc[tile][c]. */
template <int Q>
__device__ __forceinline__ void gt_compute(const gt_wbuf<Q> &b, const uint4 *sx, const float *sX, int nu, int nt,
                                           float (&acc)[4][4], int lane) {
#pragma unroll
    for (int u = 0; u < GT_UPC; u++) {
        if (u >= nu) break; /* uniform */
        float s0 = 0.0f, s1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
        if constexpr (Q != 0) {
            const int src = (lane & ~3) + (u & 3);
            s0 = __shfl_sync(0xffffffffu, b.sc[u >> 2][0], src);
            s1 = __shfl_sync(0xffffffffu, b.sc[u >> 2][1], src);
            b0 = __shfl_sync(0xffffffffu, b.bi[u >> 2][0], src);
            b1 = __shfl_sync(0xffffffffu, b.bi[u >> 2][1], src);
        }
        gt_unit<Q, GT_UPC>(b.w[u], s0, s1, b0, b1, sx, sX, u, nt, acc, lane);
    }
}

/* Writes acc (the slice's sums) and, with S > 1, the last block of (output block, row
 * chunk) to arrive sums the S partials in the order s = 0..S-1 and resets the ticket. */
__device__ __forceinline__ void gt_finish(const float (&acc)[4][4], int n, const qweight &W, float *__restrict__ y,
                                          float *__restrict__ part, unsigned *__restrict__ tick, int S, int s, int row0,
                                          int nt, int64_t ob, int64_t og, bool wact, int t, int *last) {
    /* acc[tile]: {out og, row 2t}, {og, 2t+1}, {og+8, 2t}, {og+8, 2t+1} of the tile */
    float *dst = S > 1 ? part + (int64_t)s * n * W.n_out : y;
    if (wact) {
#pragma unroll
        for (int tile = 0; tile < 4; tile++) {
            if (tile >= nt) break;
            const int ra = row0 + tile * 8 + 2 * t;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int r = ra + (c & 1);
                const int64_t o = og + (c >> 1) * 8;
                if (r < n && o < W.n_out) dst[(int64_t)r * W.n_out + o] = acc[tile][c];
            }
        }
    }
    if (S == 1) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *last = atomicAdd(&tick[blockIdx.x], 1u) == (unsigned)(S - 1);
    __syncthreads();
    if (!*last) return;
    __threadfence();
    const int rows_here = min(GT_RC, n - row0);
    for (int i = threadIdx.x; i < GT_OUT * rows_here; i += GT_THREADS) {
        const int64_t o = ob * GT_OUT + (i % GT_OUT), r = row0 + i / GT_OUT;
        if (o >= W.n_out) continue;
        const int64_t idx = r * W.n_out + o, stride = (int64_t)n * W.n_out;
        float v = __ldcg(part + idx);
        for (int q = 1; q < S; q++) v += __ldcg(part + q * stride + idx);
        y[idx] = v;
    }
    if (threadIdx.x == 0) tick[blockIdx.x] = 0; /* ready for the next call */
}

template <int Q>
__global__ void __launch_bounds__(GT_THREADS, 2)
    gemv_tc_kernel(const float *__restrict__ x, int n, qweight W, float *__restrict__ y, float *__restrict__ part,
                   unsigned *__restrict__ tick, int S) {
    typedef gt_cfg<Q> C;
    extern __shared__ uint4 gt_smem[];
    uint4 *sxb[2] = {gt_smem, gt_smem + C::SX_U4};
    float *sXb[2] = {(float *)(gt_smem + 2 * C::SX_U4), (float *)(gt_smem + 2 * C::SX_U4) + GT_RC * GT_UPC};
    __shared__ int last;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n_rc = (n + GT_RC - 1) / GT_RC;
    const int rc = blockIdx.x % n_rc, ob = blockIdx.x / n_rc, s = blockIdx.y;
    const int row0 = rc * GT_RC;
    const int nt = min(4, (n - row0 + 7) / 8), rows_used = nt * 8;
    const int64_t K = W.n_in, U = K / C::UK;
    const int64_t u_begin = s * U / S, u_end = (s + 1) * U / S;
    const int nc = (int)((u_end - u_begin + GT_UPC - 1) / GT_UPC);
    const int64_t o0 = (int64_t)ob * GT_OUT + warp * 16, og = o0 + g;
    const bool vg = og < W.n_out, vg8 = og + 8 < W.n_out, wact = o0 < W.n_out;

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[i][c] = 0.0f;

    gt_wbuf<Q> wa, wb;
#define GT_NU(c) ((int)min((int64_t)GT_UPC, u_end - (u_begin + (int64_t)(c) * GT_UPC)))
    if (wact) gt_load<Q>(wa, W, og, vg, vg8, u_begin, GT_NU(0), t);
    for (int c = 0; c < nc; c += 2) {
        /* chunk c from wa (buffer 0), chunk c + 1 from wb (buffer 1); the next chunk's loads go out first */
        if (wact && c + 1 < nc) gt_load<Q>(wb, W, og, vg, vg8, u_begin + (int64_t)(c + 1) * GT_UPC, GT_NU(c + 1), t);
        gt_stage<Q>(x, n, K, row0, rows_used, u_begin + (int64_t)c * GT_UPC, u_end, sxb[0], sXb[0]);
        __syncthreads();
        if (wact) gt_compute<Q>(wa, sxb[0], sXb[0], GT_NU(c), nt, acc, lane);
        if (c + 1 >= nc) break;
        if (wact && c + 2 < nc) gt_load<Q>(wa, W, og, vg, vg8, u_begin + (int64_t)(c + 2) * GT_UPC, GT_NU(c + 2), t);
        gt_stage<Q>(x, n, K, row0, rows_used, u_begin + (int64_t)(c + 1) * GT_UPC, u_end, sxb[1], sXb[1]);
        __syncthreads();
        if (wact) gt_compute<Q>(wb, sxb[1], sXb[1], GT_NU(c + 1), nt, acc, lane);
    }
#undef GT_NU
    gt_finish(acc, n, W, y, part, tick, S, s, row0, nt, ob, og, wact, t, &last);
}

/* Which tensor-core kernel a weight takes (-1: none): a property of the weight alone. */
static inline int gemv_tc_kind(const qweight *W) {
    if (W->fmt == QW_BF16 && W->n_in % 32 == 0) return 0;
    if (W->fmt == QW_AFFINE && W->bits == 4 && (W->group == 64 || W->group == 128) && W->n_in % W->group == 0 &&
        (W->sb_fmt == QW_BF16 || W->sb_fmt == QW_F16 || W->sb_fmt == QW_F32))
        return W->group;
    return -1;
}

/* K slices: a function of the weight's shape only. Enough blocks to fill the GPU (~256), each slice
 * at least one chunk. */
static inline int gemv_tc_split(const qweight *W, int kind) {
    const int64_t U = W->n_in / (kind ? 64 : 32), ob = (W->n_out + GT_OUT - 1) / GT_OUT;
    int S = 1;
    while (S * 2 <= GT_MAX_SPLIT && ob * S < GT_BLOCKS && U / (S * 2) >= GT_UPC) S *= 2;
    return S;
}

static inline size_t gemv_tc_smem(int kind) {
    return kind == 0 ? gt_cfg<0>::SMEM : kind == 64 ? gt_cfg<64>::SMEM : gt_cfg<128>::SMEM;
}

/* Scratch a call needs: partial floats (S > 1) and ticket counters (zeroed once; each call leaves them
 * zero). */
static inline size_t gemv_tc_part_floats(const qweight *W, int n) {
    const int S = gemv_tc_split(W, gemv_tc_kind(W));
    return S > 1 ? (size_t)S * (size_t)n * (size_t)W->n_out : 0;
}
static inline size_t gemv_tc_ticks(const qweight *W, int n) {
    return (size_t)((W->n_out + GT_OUT - 1) / GT_OUT) * (size_t)((n + GT_RC - 1) / GT_RC);
}

/* Raises the dynamic shared-memory limit of the kernels (once per process and device use). */
template <typename F> static inline cudaError_t gt_attr(F *f, size_t smem, cudaError_t e) {
    return e == cudaSuccess ? cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) : e;
}
static inline cudaError_t gemv_tc_init(void) {
    cudaError_t e = gt_attr(gemv_tc_kernel<0>, gt_cfg<0>::SMEM, cudaSuccess);
    e = gt_attr(gemv_tc_kernel<64>, gt_cfg<64>::SMEM, e);
    return gt_attr(gemv_tc_kernel<128>, gt_cfg<128>::SMEM, e);
}

/* Launches the kernel of `kind` (gemv_tc_kind) on n rows; part and tick as gemv_tc_part_floats and
 * gemv_tc_ticks ask. Returns the launch error. */
static inline cudaError_t gemv_tc_launch(int kind, const float *x, int n, const qweight *W, float *y, float *part,
                                         unsigned *tick, cudaStream_t st) {
    const int S = gemv_tc_split(W, kind);
    dim3 grid((unsigned)(((W->n_out + GT_OUT - 1) / GT_OUT) * ((n + GT_RC - 1) / GT_RC)), (unsigned)S);
    const size_t smem = gemv_tc_smem(kind);
    if (kind == 0) gemv_tc_kernel<0><<<grid, GT_THREADS, smem, st>>>(x, n, *W, y, part, tick, S);
    else if (kind == 64) gemv_tc_kernel<64><<<grid, GT_THREADS, smem, st>>>(x, n, *W, y, part, tick, S);
    else gemv_tc_kernel<128><<<grid, GT_THREADS, smem, st>>>(x, n, *W, y, part, tick, S);
    return cudaGetLastError();
}

/* SIMT decode kernel for 4-bit affine weights the tensor-core kernel does not take (group 32) and bf16
 * rows whose n_in is a multiple of 8 but not of 32: a warp per output row, each lane streaming 16-byte
 * chunks of the row (8 bf16 values or 32 4-bit codes) and applying them to up to GV_ROWS input rows
 * at once. A row's sum: each lane's chunks c = lane, lane + 32, ... in order, each chunk's elements in
 * order, then a fixed butterfly over the warp; nothing depends on n (EXACT(batch)). */
#define GV_WARPS 8
#define GV_ROWS 8

template <int CH> /* elements per 16-byte chunk: 8 = bf16, 32 = 4-bit affine */
__global__ void __launch_bounds__(GV_WARPS * 32) gemv_kernel(const float *__restrict__ x, int n, qweight W,
                                                             float *__restrict__ y) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t o = (int64_t)blockIdx.x * GV_WARPS + warp;
    if (o >= W.n_out) return; /* whole warps */
    const int r0 = blockIdx.y * GV_ROWS;
    const int64_t K = W.n_in;
    const int64_t row_bytes = CH == 8 ? K * 2 : K / 2;
    const uint4 *wrow = (const uint4 *)((const unsigned char *)W.w + o * row_bytes);
    float acc[GV_ROWS];
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++) acc[r] = 0.0f;
    for (int64_t c = lane; c * CH < K; c += 32) {
        const uint4 raw = __ldg(wrow + c);
        float w[CH];
        if (CH == 8) {
            const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                w[2 * e] = __uint_as_float(u[e] << 16);
                w[2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
            }
        } else {
            const int64_t g = o * (K / W.group) + (c * CH) / W.group;
            const float sc = load_as_f32(W.scales, W.sb_fmt, g), bi = load_as_f32(W.biases, W.sb_fmt, g);
            const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int e = 0; e < CH; e++) /* same rounding as weight_at: no FMA */
                w[e] = __fadd_rn(__fmul_rn(sc, (float)((u[e / 8] >> (4 * (e % 8))) & 15u)), bi);
        }
#pragma unroll
        for (int r = 0; r < GV_ROWS; r++) {
            if (r0 + r >= n) break;
            const float4 *xr = (const float4 *)(x + (int64_t)(r0 + r) * K + c * CH);
            float a = acc[r];
#pragma unroll
            for (int q = 0; q < CH / 4; q++) {
                const float4 v = xr[q];
                a = fmaf(w[4 * q], v.x, a);
                a = fmaf(w[4 * q + 1], v.y, a);
                a = fmaf(w[4 * q + 2], v.z, a);
                a = fmaf(w[4 * q + 3], v.w, a);
            }
            acc[r] = a;
        }
    }
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && r0 + r < n) y[(int64_t)(r0 + r) * W.n_out + o] = s;
    }
}

#endif
