/* cuda_attention_tc.cu: the decode-row attention split (cuda_attention.cuh) on tensor cores, for bf16
 * K/V caches and head dims 64, 128 and 256.
 *
 * Work: one warp per (row, kv head, group of up to ATT_GROUP query heads, split of ATT_SPLIT keys),
 * keys in tiles of 16 through a ATC_STAGES-deep ring of shared-memory stages the warp alone fills with
 * cp.async (K and V tile side by side, rows XOR-swizzled for ldmatrix), so a tile's bytes are in
 * flight while the warp computes on the tiles before it and no block barrier is ever needed.
 *
 * Arithmetic (mma.sync m16n8k16, bf16 operands, f32 accumulators), per tile:
 * - S^T = K q^T: A = the K tile (16 keys x 16 dims per k-step, exact: the cache is bf16), B = the
 *   queries as 8 columns, head h's hi = bf16(q) in column 2h and lo = bf16(q - hi) in column 2h + 1,
 *   so a score is the sum of the two columns: f32-class (q to 2^-17), not bf16-class. The dim k-steps
 *   go round-robin into 4 accumulators (4 short MMA chains), added in a fixed order.
 * - Online softmax per head in f32 (expf, as the SIMT kernel): lane (g, t) holds head t's scores of
 *   keys g and g + 8; the tile's max and sum reduce over the 8 lanes of head t in a fixed butterfly.
 * - O^T += V^T P: A = the V tile transposed by ldmatrix (16 dims x 16 keys), B = p as columns (head
 *   h's hi and lo in columns 2h, 2h + 1, moved into place by 4 shuffles), so lane (g, t) accumulates
 *   head t's dims g and g + 8 of every 16: one MMA per 16 dims per tile and no wasted rows.
 * A row's splits and its keys' order depend only on its position, and masked keys (past the row, read
 * as zeros) score -inf: a row's result depends on nothing else in the batch (EXACT(batch, draft)).
 * Floor: the K/V bytes of the row's keys, read once for the group's heads. */
#include "cuda_attention.cuh"
#include "cuda_mma.cuh"

#define ATC_KEYS 16   /* keys per tile */
#ifndef ATC_STAGES
#define ATC_STAGES 3  /* tiles per warp: the one in use and two in flight (48 KB at dim 256) */
#endif

template <int D> struct atc_cfg {
    static constexpr int CH = D / 8;                  /* 16-byte chunks per row */
    static constexpr int TILE = ATC_KEYS * D * 2;     /* bytes of one K or V tile */
    static constexpr int STAGE = 2 * TILE;            /* K tile, then V tile */
    static constexpr int KS = D / 16;                 /* k-steps of S; 16-dim blocks of O */
};

/* Issues the cp.async of the K and V tiles of keys key0 .. key0 + 15 into stage (keys >= end: zeros). */
template <int D>
__device__ __forceinline__ void atc_load_tile(uint32_t stage, const kv_bf16 *__restrict__ kc,
                                              const kv_bf16 *__restrict__ vc, int64_t kstride, int key0, int end,
                                              int lane) {
    typedef atc_cfg<D> C;
#pragma unroll
    for (int i = 0; i < ATC_KEYS * C::CH / 32; i++) {
        const int c = lane + 32 * i, r = c / C::CH, cc = c % C::CH, key = key0 + r;
        const bool ok = key < end;
        const int64_t off = (int64_t)(ok ? key : key0) * kstride + cc * 8; /* key0 < end: always a real row */
        const uint32_t dst = stage + cu_swz<D>(r, cc);
        cu_cp_async16(dst, kc + off, ok);
        cu_cp_async16(dst + C::TILE, vc + off, ok);
    }
}

/* The bf16x2 of (a, b) (part 0) or of their remainders (part 1). */
__device__ __forceinline__ uint32_t atc_part(float a, float b, int part) {
    const uint32_t hi = cu_pack_bf16x2(a, b);
    return part ? cu_pack_bf16x2_lo(a, b, hi) : hi;
}

template <int D>
__global__ void __launch_bounds__(32)
attention_split_tc_kernel(const float *__restrict__ q, const __grid_constant__ cu_tab rows, int n_q, int n_kv,
                          float scale, int max_splits, float *__restrict__ part) {
    typedef atc_cfg<D> C;
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
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const int64_t kstride = (int64_t)n_kv * D;
    const kv_bf16 *kc = (const kv_bf16 *)rw.kc + (int64_t)kvh * D, *vc = (const kv_bf16 *)rw.vc + (int64_t)kvh * D;
    const int n_tiles = (end - start + ATC_KEYS - 1) / ATC_KEYS;
    const uint32_t sm = cu_smem_addr(atc_smem);

    /* Keys before the seq's first row of this call were written by earlier steps, which are complete once
     * the kernel before this one runs (programmatic launch: cuda_common.cuh): the first tile goes out
     * before the wait when it stops short of them. (Not the row's own position: the rows of a draft block
     * before it are written by the K/V write kernel just before this one.) */
    const bool early = start + ATC_KEYS <= rw.new0;
    if (early) atc_load_tile<D>(sm, kc, vc, kstride, start, end, lane);
    cu_pdl_enter();
    if (!early) atc_load_tile<D>(sm, kc, vc, kstride, start, end, lane);
    cu_cp_commit();
#pragma unroll
    for (int s = 1; s < ATC_STAGES - 1; s++) {
        if (s < n_tiles) atc_load_tile<D>(sm + s * C::STAGE, kc, vc, kstride, start + s * ATC_KEYS, end, lane);
        cu_cp_commit();
    }

    /* The queries as B fragments: column g is head g / 2's hi (g even) or lo (g odd) part. */
    uint32_t qb[C::KS][2];
    {
        const int hh = g >> 1;
        const float *qr = q + ((int64_t)rw.row * n_q + h0 + hh) * D + 2 * t;
#pragma unroll
        for (int j = 0; j < C::KS; j++) {
            float2 a = make_float2(0.0f, 0.0f), b = a;
            if (hh < nh) a = *(const float2 *)(qr + 16 * j), b = *(const float2 *)(qr + 16 * j + 8);
            qb[j][0] = atc_part(a.x, a.y, g & 1);
            qb[j][1] = atc_part(b.x, b.y, g & 1);
        }
    }

    float acc[C::KS][4]; /* O^T: dims 16 i + g (0, 1) and 16 i + g + 8 (2, 3), head t's hi and lo column */
#pragma unroll
    for (int i = 0; i < C::KS; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    float m = -INFINITY, l = 0.0f; /* head t's running max and sum */
    const unsigned F = 0xffffffffu;
    for (int it = 0; it < n_tiles; it++) {
        cu_cp_wait<ATC_STAGES - 2>();
        __syncwarp(); /* every lane's copies of tile it landed; every lane is done with tile it - 1 */
        const int nx = it + ATC_STAGES - 1;
        if (nx < n_tiles)
            atc_load_tile<D>(sm + (nx % ATC_STAGES) * C::STAGE, kc, vc, kstride, start + nx * ATC_KEYS, end, lane);
        cu_cp_commit();
        const uint32_t kb = sm + (it % ATC_STAGES) * C::STAGE, vb = kb + C::TILE;

        float sa[4][4] = {};
#pragma unroll
        for (int j = 0; j < C::KS; j++) { /* matrices: keys 0-7 / 8-15 (lane bit 3) x dims 16j / 16j + 8 (bit 4) */
            uint32_t a[4];
            cu_ldsm_x4(kb + cu_swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, 2 * j + (lane >> 4)), a[0], a[1], a[2], a[3]);
            cu_mma_bf16(sa[j & 3], a, qb[j][0], qb[j][1]);
        }
        float c[4];
#pragma unroll
        for (int e = 0; e < 4; e++) c[e] = (sa[0][e] + sa[1][e]) + (sa[2][e] + sa[3][e]);
        const int k0 = start + it * ATC_KEYS;
        const float s0 = k0 + g < end ? (c[0] + c[1]) * scale : -INFINITY;     /* key g, head t */
        const float s1 = k0 + g + 8 < end ? (c[2] + c[3]) * scale : -INFINITY; /* key g + 8 */
        float mt = fmaxf(s0, s1);
        mt = fmaxf(mt, __shfl_xor_sync(F, mt, 4));
        mt = fmaxf(mt, __shfl_xor_sync(F, mt, 8));
        mt = fmaxf(mt, __shfl_xor_sync(F, mt, 16));
        const float m_new = fmaxf(m, mt); /* finite: the tile holds a key <= the row's position */
        const float corr = expf(m - m_new), p0 = expf(s0 - m_new), p1 = expf(s1 - m_new);
        float ps = p0 + p1;
        ps += __shfl_xor_sync(F, ps, 4);
        ps += __shfl_xor_sync(F, ps, 8);
        ps += __shfl_xor_sync(F, ps, 16);
        l = l * corr + ps;
        m = m_new;
#pragma unroll
        for (int i = 0; i < C::KS; i++) acc[i][0] *= corr, acc[i][1] *= corr, acc[i][2] *= corr, acc[i][3] *= corr;

        /* B = P: lane (g, t) takes head g / 2's p of keys 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1) from
         * lanes (2t, g / 2) and (2t + 1, g / 2), which hold keys (2t, 2t + 8) and (2t + 1, 2t + 9). */
        const int src0 = 8 * t + (g >> 1), src1 = src0 + 4;
        const float xa = __shfl_sync(F, p0, src0), xb = __shfl_sync(F, p0, src1);
        const float xc = __shfl_sync(F, p1, src0), xd = __shfl_sync(F, p1, src1);
        const uint32_t b0 = atc_part(xa, xb, g & 1), b1 = atc_part(xc, xd, g & 1);
#pragma unroll
        for (int i = 0; i < C::KS; i++) { /* matrices: keys 0-7 / 8-15 (lane bit 4) x dims 16i / 16i + 8 (bit 3) */
            uint32_t a[4];
            cu_ldsm_x4_t(vb + cu_swz<D>((lane & 7) + (lane >> 4) * 8, 2 * i + ((lane >> 3) & 1)), a[0], a[1], a[2],
                         a[3]);
            cu_mma_bf16(acc[i], a, b0, b1);
        }
    }
    cu_cp_wait<0>(); /* nothing may be left in flight into shared memory at exit */
    if (t < nh) {
        float *o = part + (((int64_t)blockIdx.x * n_q + h0 + t) * max_splits + split) * (D + 2);
        if (g == 0) o[0] = m, o[1] = l;
#pragma unroll
        for (int i = 0; i < C::KS; i++) {
            o[2 + 16 * i + g] = acc[i][0] + acc[i][1];
            o[2 + 16 * i + g + 8] = acc[i][2] + acc[i][3];
        }
    }
}

cudaError_t cuda_att_split_tc(dim3 grid, cudaStream_t st, const float *q, const cu_tab &rows, int n_q, int n_kv,
                              int dim, float scale, int max_splits, float *part) {
    void (*k)(const float *, const cu_tab, int, int, float, int, float *) =
        dim == 64 ? attention_split_tc_kernel<64> : dim == 128 ? attention_split_tc_kernel<128>
        : dim == 256 ? attention_split_tc_kernel<256> : NULL;
    if (!k) return cudaErrorNotSupported;
    const size_t smem = (size_t)ATC_STAGES * 2 * ATC_KEYS * dim * 2;
    if (smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    return cu_launch(k, grid, 32, smem, st, q, rows, n_q, n_kv, scale, max_splits, part);
}
