/* cuda_attention_tc.cu: the decode-row attention split (cuda_attention.cuh) on tensor cores, for bf16 and q8
 * K/V caches and head dims 64, 128 and 256.
 *
 * Work: one warp per (row, kv head, group of up to ATT_GROUP query heads, split of ATT_SPLIT keys),
 * keys in tiles of 16 through a ATC_STAGES-deep ring of shared-memory stages the warp alone fills with
 * cp.async (K and V tile side by side, rows XOR-swizzled), so a tile's bytes are in flight while the warp
 * computes on the tiles before it and no block barrier is ever needed.
 *
 * Arithmetic (mma.sync m16n8k16, bf16 operands, f32 accumulators), per tile:
 * - S^T = K q^T: A = the K tile (16 keys x 16 dims per k-step, exact: bf16 values, or q8 codes, which bf16
 *   holds exactly), B = the queries as 8 columns, head h's hi = bf16(q) in column 2h and lo = bf16(q - hi) in
 *   column 2h + 1, so a score is the sum of the two columns: f32-class (q to 2^-17), not bf16-class. The dim
 *   k-steps go round-robin into 4 accumulators (4 short MMA chains), added in a fixed order. q8: the sum times
 *   the key's scale.
 * - Online softmax per head in f32 (expf, as the SIMT kernel): lane (g, t) holds head t's scores of
 *   keys g and g + 8; the tile's max and sum reduce over the 8 lanes of head t in a fixed butterfly.
 * - O^T += V^T P: A = the V tile transposed (16 dims x 16 keys), B = p as columns (head h's hi and lo in
 *   columns 2h, 2h + 1, moved into place by 4 shuffles; q8: p times the key's V scale), so lane (g, t)
 *   accumulates head t's outputs of two dims per 16: one MMA per 16 dims per tile and no wasted rows.
 * The formats differ in how a tile reaches the fragments (atc_bf16, atc_q8 below): bf16 tiles by ldmatrix in
 * the dims' order; q8 tiles by 16-byte shared loads, the codes widened to bf16 in registers, the MMA's k slots
 * (K) and output rows (V) mapped to dims so that a lane's codes are contiguous bytes.
 * A row's splits and its keys' order depend only on its position, and masked keys (past the row, read
 * as zeros) score -inf: a row's result depends on nothing else in the batch (EXACT(batch, draft)).
 * Floor: the K/V bytes of the row's keys, read once for the group's heads. */
#include "cuda_attention.cuh"
#include "cuda_mma.cuh"

#define ATC_KEYS 16   /* keys per tile */
#ifndef ATC_STAGES
#define ATC_STAGES 3  /* bf16: tiles per warp, the one in use and two in flight (48 KB at dim 256) */
#endif
#ifndef ATC_Q8_WARPS
#define ATC_Q8_WARPS 4 /* q8: warps per split, each a quarter of its keys (see atc_q8) */
#endif
#ifndef ATC_Q8_STAGES
#define ATC_Q8_STAGES 2 /* q8: each warp's ring (3 blocks of 4 warps an SM at dim 256) */
#endif

/* The bf16x2 of (a, b) (part 0) or of their remainders (part 1). */
__device__ __forceinline__ uint32_t atc_part(float a, float b, int part) {
    const uint32_t hi = cu_pack_bf16x2(a, b);
    return part ? cu_pack_bf16x2_lo(a, b, hi) : hi;
}

/* bf16 caches: the K and V tiles [16 keys][D] as the cache holds them, rows swizzled for ldmatrix. */
template <int D> struct atc_bf16 {
    typedef kv_bf16 T;
    static constexpr int CH = D / 8;              /* 16-byte chunks per row */
    static constexpr int TILE = ATC_KEYS * D * 2; /* bytes of one K or V tile */
    static constexpr int STAGE = 2 * TILE;        /* K tile, then V tile */
    static constexpr int STAGES = ATC_STAGES, WARPS = 1;

    /* The cp.async of keys key0 .. key0 + 15 (keys >= end: zeros); kc, vc: the kv head's first row. */
    static __device__ __forceinline__ void load(uint32_t stage, const T *kc, const T *vc, int64_t kstride, int n_kv,
                                                int kvh, int key0, int end, int lane) {
        (void)n_kv, (void)kvh;
#pragma unroll
        for (int i = 0; i < ATC_KEYS * CH / 32; i++) {
            const int c = lane + 32 * i, r = c / CH, cc = c % CH, key = key0 + r;
            const bool ok = key < end;
            const int64_t off = (int64_t)(ok ? key : key0) * kstride + cc * 8; /* key0 < end: always a real row */
            const uint32_t dst = stage + cu_swz<D>(r, cc);
            cu_cp_async16(dst, kc + off, ok);
            cu_cp_async16(dst + TILE, vc + off, ok);
        }
    }
    /* k-step j's query B fragment from head row qh (lane t's dims 16 j + 2t, + 1 and 16 j + 2t + 8, + 9). */
    static __device__ __forceinline__ void q_frag(const float *qh, int j, int t, bool live, int part, uint32_t (&b)[2]) {
        float2 x = make_float2(0.0f, 0.0f), y = x;
        if (live) x = *(const float2 *)(qh + 16 * j + 2 * t), y = *(const float2 *)(qh + 16 * j + 2 * t + 8);
        b[0] = atc_part(x.x, x.y, part);
        b[1] = atc_part(y.x, y.y, part);
    }
    /* S^T for the tile: sa[j & 3] += K_j q_j^T. Matrices: keys 0-7 / 8-15 (lane bit 3) x dims 16j / 16j + 8. */
    template <int KS>
    static __device__ __forceinline__ void scores(uint32_t kb, const uint32_t (&qb)[KS][2], int lane, float (&sa)[4][4]) {
#pragma unroll
        for (int j = 0; j < KS; j++) {
            uint32_t a[4];
            cu_ldsm_x4(kb + cu_swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, 2 * j + (lane >> 4)), a[0], a[1], a[2], a[3]);
            cu_mma_bf16(sa[j & 3], a, qb[j][0], qb[j][1]);
        }
    }
    static __device__ __forceinline__ float key_scale(uint32_t, int, int) { return 1.0f; }
    static __device__ __forceinline__ float val_scale(uint32_t, int, int) { return 1.0f; }
    /* O^T += V^T P. Matrices: keys 0-7 / 8-15 (lane bit 4) x dims 16i / 16i + 8 (bit 3). */
    template <int KS>
    static __device__ __forceinline__ void pv(uint32_t vb, uint32_t b0, uint32_t b1, int lane, float (&acc)[KS][4]) {
#pragma unroll
        for (int i = 0; i < KS; i++) {
            uint32_t a[4];
            cu_ldsm_x4_t(vb + cu_swz<D>((lane & 7) + (lane >> 4) * 8, 2 * i + ((lane >> 3) & 1)), a[0], a[1], a[2],
                         a[3]);
            cu_mma_bf16(acc[i], a, b0, b1);
        }
    }
    /* The dims of acc[i][0..1] (half 0) and acc[i][2..3] (half 1) for lane row g. */
    static __device__ __forceinline__ int out_dim(int i, int g, int half) { return 16 * i + g + 8 * half; }
};

/* 16 bytes of shared memory at addr as four words XOR 0x80808080 (each q8 code byte as code + 128). */
__device__ __forceinline__ uint4 atc_q8_lds(uint32_t addr) {
    const uint4 u = cu_lds128(addr);
    return make_uint4(u.x ^ 0x80808080u, u.y ^ 0x80808080u, u.z ^ 0x80808080u, u.w ^ 0x80808080u);
}

/* bf16x2 of the q8 codes in byte ka of xa (low half) and byte kb of xb, both words as atc_q8_lds gives them
 * (each byte u = code + 128): the float 2^23 + u less 2^23 + 128 is the code exactly, and its bf16 is its top half. */
__device__ __forceinline__ uint32_t atc_q8_pair(uint32_t xa, int ka, uint32_t xb, int kb) {
    const float fa = __fsub_rn(__uint_as_float(__byte_perm(xa, 0x4B000000u, 0x7650 | ka)), 8388736.0f);
    const float fb = __fsub_rn(__uint_as_float(__byte_perm(xb, 0x4B000000u, 0x7650 | kb)), 8388736.0f);
    return __byte_perm(__float_as_uint(fa), __float_as_uint(fb), 0x7632);
}

/* q8 caches: K and V tiles of codes [16 keys][D bytes], then the 16 keys' K scales and V scales.
 * K: k-step j = 4m + i takes lane t's k slots 2t, 2t + 1, 2t + 8, 2t + 9 as dims 64m + 16t + 4i + 0..3, so lane
 * (g, t) reads 16 bytes of rows g and g + 8 per 4 k-steps (q's B fragment follows the same dims).
 * V: output row g of block i is dim (D / 8) g + 2i, row g + 8 the dim after it, so lane (g, t) reads D / 8
 * bytes of key rows 2t, 2t + 1, 2t + 8, 2t + 9 for all blocks. The swizzles keep each quarter warp's 16-byte
 * reads on distinct banks. A tile costs ~4x the instructions of a bf16 one (the widening), so one warp a split
 * ran latency-bound (32k, one stream: 276 tokens/s against bf16's 335): a split takes WARPS warps, each its
 * own consecutive share of the keys with a ring of two stages, merged in warp order at the end. */
template <int D> struct atc_q8 {
    typedef kv_q8 T;
    static constexpr int CH = D / 16;          /* 16-byte chunks per row */
    static constexpr int TILE = ATC_KEYS * D;  /* bytes of one K or V tile of codes */
    static constexpr int STAGE = 2 * TILE + 2 * ATC_KEYS * 4;
    static constexpr int STAGES = ATC_Q8_STAGES, WARPS = ATC_Q8_WARPS;
    static constexpr int VW = D / 32;          /* 32-bit words of a lane's share of a V row */

    static __device__ __forceinline__ int swz_k(int r, int c) { return D >= 128 ? c ^ ((r & 1) << 2) : c; }
    static __device__ __forceinline__ int swz_v(int r, int c) {
        const int u = (r >> 1) & 3;
        return D == 256 ? c ^ ((u & 1) | ((u & 2) << 1)) : D == 128 ? c ^ (2 * u) : c;
    }
    static __device__ __forceinline__ void load(uint32_t stage, const T *kc, const T *vc, int64_t kstride, int n_kv,
                                                int kvh, int key0, int end, int lane) {
#pragma unroll
        for (int i = 0; i < ATC_KEYS * CH / 32; i++) {
            const int c = lane + 32 * i, r = c / CH, cc = c % CH, key = key0 + r;
            const bool ok = key < end;
            const int64_t off = (int64_t)(ok ? key : key0) * kstride + cc * 16;
            cu_cp_async16(stage + r * D + 16 * swz_k(r, cc), kc + off, ok);
            cu_cp_async16(stage + TILE + r * D + 16 * swz_v(r, cc), vc + off, ok);
        }
        /* lane l < 16: key l's K scale; the others key l - 16's V scale (after the position's n_kv code rows) */
        const int r = lane & 15, key = key0 + r;
        const bool ok = key < end;
        const T *row = (lane < 16 ? kc : vc) - (int64_t)kvh * D + (int64_t)(ok ? key : key0) * kstride;
        cu_cp_async4(stage + 2 * TILE + 4 * lane, (const float *)(row + (int64_t)n_kv * D) + kvh, ok);
    }
    static __device__ __forceinline__ void q_frag(const float *qh, int j, int t, bool live, int part, uint32_t (&b)[2]) {
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (live) x = *(const float4 *)(qh + 64 * (j >> 2) + 16 * t + 4 * (j & 3));
        b[0] = atc_part(x.x, x.y, part);
        b[1] = atc_part(x.z, x.w, part);
    }
    template <int KS>
    static __device__ __forceinline__ void scores(uint32_t kb, const uint32_t (&qb)[KS][2], int lane, float (&sa)[4][4]) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int m = 0; m < D / 64; m++) {
            const uint4 r0 = atc_q8_lds(kb + g * D + 16 * swz_k(g, 4 * m + t));
            const uint4 r8 = atc_q8_lds(kb + (g + 8) * D + 16 * swz_k(g + 8, 4 * m + t));
            const uint32_t w0[4] = {r0.x, r0.y, r0.z, r0.w}, w8[4] = {r8.x, r8.y, r8.z, r8.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t x0 = w0[i], x8 = w8[i];
                const uint32_t a[4] = {atc_q8_pair(x0, 0, x0, 1), atc_q8_pair(x8, 0, x8, 1), atc_q8_pair(x0, 2, x0, 3),
                                       atc_q8_pair(x8, 2, x8, 3)};
                const int j = 4 * m + i;
                cu_mma_bf16(sa[j & 3], a, qb[j][0], qb[j][1]);
            }
        }
    }
    static __device__ __forceinline__ float scale_at(uint32_t stage, int which, int key) {
        float v;
        asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(stage + 2 * TILE + 64 * which + 4 * key));
        return v;
    }
    static __device__ __forceinline__ float key_scale(uint32_t kb, int key, int) { return scale_at(kb, 0, key); }
    static __device__ __forceinline__ float val_scale(uint32_t kb, int key, int) { return scale_at(kb, 1, key); }
    /* vb: the V tile (the stage's K tile + TILE) */
    template <int KS>
    static __device__ __forceinline__ void pv(uint32_t vb, uint32_t b0, uint32_t b1, int lane, float (&acc)[KS][4]) {
        const int g = lane >> 2, t = lane & 3;
        uint32_t x[4][VW]; /* rows 2t, 2t + 1, 2t + 8, 2t + 9: the lane's D / 8 bytes, as atc_q8_lds gives them */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int r = 2 * t + (k & 1) + 8 * (k >> 1);
            if constexpr (VW >= 4) {
#pragma unroll
                for (int h = 0; h < VW / 4; h++) {
                    const uint4 u = atc_q8_lds(vb + r * D + 16 * swz_v(r, (VW / 4) * g + h));
                    x[k][4 * h] = u.x, x[k][4 * h + 1] = u.y, x[k][4 * h + 2] = u.z, x[k][4 * h + 3] = u.w;
                }
            } else { /* dim 64: 8 bytes */
                asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(x[k][0]), "=r"(x[k][1]) : "r"(vb + r * D + 8 * g));
                x[k][0] ^= 0x80808080u, x[k][1] ^= 0x80808080u;
            }
        }
#pragma unroll
        for (int i = 0; i < KS; i++) {
            const int w = i >> 1, b = 2 * (i & 1);
            const uint32_t a[4] = {atc_q8_pair(x[0][w], b, x[1][w], b), atc_q8_pair(x[0][w], b + 1, x[1][w], b + 1),
                                   atc_q8_pair(x[2][w], b, x[3][w], b), atc_q8_pair(x[2][w], b + 1, x[3][w], b + 1)};
            cu_mma_bf16(acc[i], a, b0, b1);
        }
    }
    static __device__ __forceinline__ int out_dim(int i, int g, int half) { return (D / 8) * g + 2 * i + half; }
};

/* Shared memory of a block: each warp's ring, which the merge of a split's warps reuses. */
template <int D, typename F> struct atc_smem_cfg {
    static constexpr int RING = F::STAGES * F::STAGE;
    static constexpr int MERGE = F::WARPS > 1 ? F::WARPS * ATT_GROUP * (D + 2) * 4 : 0;
    static constexpr int BYTES = F::WARPS * RING > MERGE ? F::WARPS * RING : MERGE;
};

template <int D, typename F>
__global__ void __launch_bounds__(32 * F::WARPS)
attention_split_tc_kernel(const float *__restrict__ q, const __grid_constant__ cu_tab rows, int n_q, int n_kv,
                          float scale, int max_splits, float *__restrict__ part, float *__restrict__ out1) {
    typedef typename F::T T;
    constexpr int KS = D / 16; /* k-steps of S; 16-dim blocks of O */
    extern __shared__ uint4 atc_smem[];
    const att_row rw = cu_tab_at<att_row>(rows, blockIdx.x);
    const int G = n_q / n_kv, groups = (G + ATT_GROUP - 1) / ATT_GROUP;
    const int kvh = blockIdx.y / groups, g0 = (blockIdx.y % groups) * ATT_GROUP;
    const int h0 = kvh * G + g0, nh = min(ATT_GROUP, G - g0);
    const int split = blockIdx.z, start = split * ATT_SPLIT, end = min(rw.pos + 1, start + ATT_SPLIT);
    if (start > rw.pos) {
        cu_pdl_enter();
        return;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t kstride = kv_stride<T>(n_kv, D);
    const T *kc = (const T *)rw.kc + (int64_t)kvh * D, *vc = (const T *)rw.vc + (int64_t)kvh * D;
    /* this warp's keys [ws, we) of the split: all of it, or its share of WARPS consecutive ones */
    constexpr int WK = ATT_SPLIT / F::WARPS, STAGES = F::STAGES;
    static_assert(ATT_SPLIT % (F::WARPS * ATC_KEYS) == 0, "whole tiles per warp");
    const int ws = start + warp * WK, we = min(end, ws + WK);
    const int n_tiles = we > ws ? (we - ws + ATC_KEYS - 1) / ATC_KEYS : 0;
    const uint32_t sm = cu_smem_addr(atc_smem) + warp * atc_smem_cfg<D, F>::RING;

    /* Keys before the seq's first row of this call were written by earlier steps, which are complete once
     * the kernel before this one runs (programmatic launch: cuda_common.cuh): the first tile goes out
     * before the wait when it stops short of them. (Not the row's own position: the rows of a draft block
     * before it are written by the K/V write kernel just before this one.) */
    const bool early = ws + ATC_KEYS <= rw.new0 && n_tiles > 0;
    if (early) F::load(sm, kc, vc, kstride, n_kv, kvh, ws, we, lane);
    cu_pdl_enter();
    if (!early && n_tiles > 0) F::load(sm, kc, vc, kstride, n_kv, kvh, ws, we, lane);
    cu_cp_commit();
#pragma unroll
    for (int s = 1; s < STAGES - 1; s++) {
        if (s < n_tiles) F::load(sm + s * F::STAGE, kc, vc, kstride, n_kv, kvh, ws + s * ATC_KEYS, we, lane);
        cu_cp_commit();
    }

    /* The queries as B fragments: column g is head g / 2's hi (g even) or lo (g odd) part. */
    uint32_t qb[KS][2];
    {
        const int hh = g >> 1;
        const float *qh = q + ((int64_t)rw.row * n_q + h0 + hh) * D;
#pragma unroll
        for (int j = 0; j < KS; j++) F::q_frag(qh, j, t, hh < nh, g & 1, qb[j]);
    }

    float acc[KS][4]; /* O^T: head t's hi and lo columns of output rows g (0, 1) and g + 8 (2, 3) of each block */
#pragma unroll
    for (int i = 0; i < KS; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    float m = -INFINITY, l = 0.0f; /* head t's running max and sum */
    const unsigned FULL = 0xffffffffu;
    for (int it = 0; it < n_tiles; it++) {
        cu_cp_wait<STAGES - 2>();
        __syncwarp(); /* every lane's copies of tile it landed; every lane is done with tile it - 1 */
        const int nx = it + STAGES - 1;
        if (nx < n_tiles)
            F::load(sm + (nx % STAGES) * F::STAGE, kc, vc, kstride, n_kv, kvh, ws + nx * ATC_KEYS, we, lane);
        cu_cp_commit();
        const uint32_t kb = sm + (it % STAGES) * F::STAGE, vb = kb + F::TILE;

        float sa[4][4] = {};
        F::template scores<KS>(kb, qb, lane, sa);
        float c[4];
#pragma unroll
        for (int e = 0; e < 4; e++) c[e] = (sa[0][e] + sa[1][e]) + (sa[2][e] + sa[3][e]);
        const int k0 = ws + it * ATC_KEYS;
        const float s0 = k0 + g < we ? (c[0] + c[1]) * F::key_scale(kb, g, 0) * scale : -INFINITY; /* key g, head t */
        const float s1 = k0 + g + 8 < we ? (c[2] + c[3]) * F::key_scale(kb, g + 8, 0) * scale : -INFINITY;
        float mt = fmaxf(s0, s1);
        mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, 4));
        mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, 8));
        mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, 16));
        const float m_new = fmaxf(m, mt); /* finite: the tile holds a key <= the row's position */
        const float corr = expf(m - m_new), p0 = expf(s0 - m_new), p1 = expf(s1 - m_new);
        float ps = p0 + p1;
        ps += __shfl_xor_sync(FULL, ps, 4);
        ps += __shfl_xor_sync(FULL, ps, 8);
        ps += __shfl_xor_sync(FULL, ps, 16);
        l = l * corr + ps;
        m = m_new;
#pragma unroll
        for (int i = 0; i < KS; i++) acc[i][0] *= corr, acc[i][1] *= corr, acc[i][2] *= corr, acc[i][3] *= corr;

        /* B = P (q8: p v_scale): lane (g, t) takes head g / 2's values of keys 2t, 2t + 1 (b0) and 2t + 8, 2t + 9
         * (b1) from lanes (2t, g / 2) and (2t + 1, g / 2), which hold keys (2t, 2t + 8) and (2t + 1, 2t + 9). */
        const float v0 = p0 * F::val_scale(kb, g, 0), v1 = p1 * F::val_scale(kb, g + 8, 0);
        const int src0 = 8 * t + (g >> 1), src1 = src0 + 4;
        const float xa = __shfl_sync(FULL, v0, src0), xb = __shfl_sync(FULL, v0, src1);
        const float xc = __shfl_sync(FULL, v1, src0), xd = __shfl_sync(FULL, v1, src1);
        const uint32_t b0 = atc_part(xa, xb, g & 1), b1 = atc_part(xc, xd, g & 1);
        F::template pv<KS>(vb, b0, b1, lane, acc);
    }
    cu_cp_wait<0>(); /* nothing may be left in flight into shared memory at exit (or before the merge) */
    /* One warp a split: its (m, l, output) per head go to the split's partials. Several: to shared memory (the
     * rings', once every warp is past its own), [warp][head][2 + D] (a warp with no keys: m = -inf, l = 0,
     * zeros), and the block merges them in warp order. */
    float *out = part + (((int64_t)blockIdx.x * n_q + h0) * max_splits + split) * (D + 2); /* head h0's split */
    const int64_t hstride = (int64_t)max_splits * (D + 2);
    float *mo = (float *)atc_smem;
    if constexpr (F::WARPS > 1) __syncthreads();
    if (F::WARPS == 1 && out1 && t < nh) { /* one split: the final output (att_one_split) */
        float *o = out1 + ((int64_t)rw.row * n_q + h0 + t) * D;
#pragma unroll
        for (int i = 0; i < KS; i++) {
            o[F::out_dim(i, g, 0)] = att_one_split(acc[i][0] + acc[i][1], l);
            o[F::out_dim(i, g, 1)] = att_one_split(acc[i][2] + acc[i][3], l);
        }
    } else if (F::WARPS > 1 || t < nh) {
        float *o = F::WARPS > 1 ? mo + (warp * ATT_GROUP + t) * (D + 2) : out + t * hstride;
        if (g == 0) o[0] = m, o[1] = l;
#pragma unroll
        for (int i = 0; i < KS; i++) {
            o[2 + F::out_dim(i, g, 0)] = acc[i][0] + acc[i][1];
            o[2 + F::out_dim(i, g, 1)] = acc[i][2] + acc[i][3];
        }
    }
    if constexpr (F::WARPS > 1) {
        __syncthreads();
        for (int x = threadIdx.x; x < nh * (D + 1); x += 32 * F::WARPS) { /* (head, 0: m and l | 1 + d: dim d) */
            const int hh = x / (D + 1), d = x % (D + 1);
            float M = mo[hh * (D + 2)];
            for (int w = 1; w < F::WARPS; w++) M = fmaxf(M, mo[(w * ATT_GROUP + hh) * (D + 2)]); /* warp 0: finite */
            float v = 0.0f, L = 0.0f;
            for (int w = 0; w < F::WARPS; w++) {
                const float *ow = mo + (w * ATT_GROUP + hh) * (D + 2), e = expf(ow[0] - M);
                v = fmaf(d ? ow[1 + d] : ow[1], e, v); /* no keys: l = 0, zeros, exp(-inf) = 0 */
                if (out1) L = fmaf(ow[1], e, L);      /* item d = 0's v: the same sum */
            }
            if (out1) { /* one split: the final output (att_one_split) */
                if (d) out1[((int64_t)rw.row * n_q + h0 + hh) * D + d - 1] = att_one_split(v, L);
                continue;
            }
            float *oh = out + hh * hstride;
            if (d) oh[1 + d] = v;
            else oh[0] = M, oh[1] = v;
        }
    }
}

template <template <int> class F>
static cudaError_t att_split_tc_launch(dim3 grid, cudaStream_t st, const float *q, const cu_tab &rows, int n_q,
                                       int n_kv, int dim, float scale, int max_splits, float *part, float *out) {
    void (*k)(const float *, const cu_tab, int, int, float, int, float *, float *) =
        dim == 64 ? attention_split_tc_kernel<64, F<64>> : dim == 128 ? attention_split_tc_kernel<128, F<128>>
        : dim == 256 ? attention_split_tc_kernel<256, F<256>> : NULL;
    if (!k) return cudaErrorNotSupported;
    const size_t smem = dim == 64 ? atc_smem_cfg<64, F<64>>::BYTES : dim == 128 ? atc_smem_cfg<128, F<128>>::BYTES
                                                                    : atc_smem_cfg<256, F<256>>::BYTES;
    if (smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    return cu_launch(k, grid, 32 * F<64>::WARPS, smem, st, q, rows, n_q, n_kv, scale, max_splits, part, out);
}

cudaError_t cuda_att_split_tc(dim3 grid, cudaStream_t st, const float *q, const cu_tab &rows, int n_q, int n_kv,
                              int dim, float scale, int max_splits, float *part, float *out) {
    return att_split_tc_launch<atc_bf16>(grid, st, q, rows, n_q, n_kv, dim, scale, max_splits, part, out);
}

cudaError_t cuda_att_split_tc8(dim3 grid, cudaStream_t st, const float *q, const cu_tab &rows, int n_q, int n_kv,
                               int dim, float scale, int max_splits, float *part, float *out) {
    return att_split_tc_launch<atc_q8>(grid, st, q, rows, n_q, n_kv, dim, scale, max_splits, part, out);
}
