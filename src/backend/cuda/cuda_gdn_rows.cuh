/* cuda_gdn_rows.cuh: the gated delta rule's gated norm rows (qgdn_dims.out_norm). In dequant mode out_proj reads its
 * input, rmsnorm(out) * norm_w * silu(z) per head, as split rows (cuda_split_rows.cuh); instead of a split launch
 * after the rule (gt_stage's GNORM staging), the rule's blocks write them as each token's outputs are made. A head's
 * 128 values are divided between B = dv / (32 CP) blocks, so the B blocks of a (seq, head) run as one thread block
 * cluster (grid x = B) and trade the squares' partial sums through shared memory. Included by cuda_gdn.cu. */
#ifndef QUILL_CUDA_GDN_ROWS_CUH
#define QUILL_CUDA_GDN_ROWS_CUH

#include "cuda_split_rows.cuh"

#define GDN_ROWS_DV 128 /* a head's vector: one quad a lane of a warp, as norm_warp_kernel takes a vector of 128 */

struct gdn_rows {
    const float *z;     /* the gates [n][Hv dv], laid out as out */
    const float *w;     /* the norm's weight [dv] */
    unsigned short *xs; /* out_proj's split rows for K = Hv dv; NULL: none (the kernel's ROWS instance is not run) */
    float eps;
};

/* Token t's outputs o[e] (row `row`, columns j + e of head h, e < CP; warp 0's values) into the split rows, by every
 * thread of the block (it passes a cluster barrier), after the token's state update. qs: shared [2][8 CP], this
 * block's quad sums, double-buffered by token, so one barrier a token keeps a buffer until the other blocks have read
 * it; the caller passes one more, cu_cluster_sync_relaxed, before the block exits. The bits are gt_stage's GNORM
 * staging's: quad q's squares in norm_ss4's fma chain over its 4 values in order (a quad spans 4 / CP lanes, the chain
 * passed lane to lane), warp_sum's xor tree over the 32 quads (lane q reads quad q from block q / (8 CP) of the
 * cluster), the scale as gt_gnorm_scale's, then ((o scale) w) silu(z) rounded to bf16. Two other forms measured no
 * better at 64 seqs (docs/performance.md, thirty-third pass): the barrier split in two around the state update (12
 * bytes spilled at 80 registers), and a block a whole head (256 threads, no cluster: the rule +4.7 us a launch). */
template <int CP>
__device__ __forceinline__ void gdn_rows_token(const gdn_rows &rw, const float (&o)[CP], float *qs, int t,
                                               int64_t row, int h, int j, int n_v_heads, int warp, int lane) {
    static_assert(CP == 1 || CP == 2, "a lane's columns");
    constexpr int LPQ = 4 / CP, QB = 8 * CP; /* lanes a quad, quads a block */
    const int64_t K = (int64_t)n_v_heads * GDN_ROWS_DV, o0 = (int64_t)h * GDN_ROWS_DV + j;
    float z[CP], w[CP];
    if (warp == 0) {
#pragma unroll
        for (int e = 0; e < CP; e++) z[e] = __ldg(rw.z + row * K + o0 + e), w[e] = __ldg(rw.w + j + e);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < LPQ; i++) {
            const float prev = __shfl_up_sync(0xffffffffu, s, 1);
            if (lane % LPQ == i) {
                s = i ? prev : 0.0f;
#pragma unroll
                for (int e = 0; e < CP; e++) s = fmaf(o[e], o[e], s);
            }
        }
        if (lane % LPQ == LPQ - 1) qs[(t & 1) * QB + lane / LPQ] = s;
    }
    cu_cluster_sync();
    if (warp == 0) {
        const uint32_t at = (uint32_t)__cvta_generic_to_shared(qs + (t & 1) * QB + lane % QB);
        const float sum = warp_sum(cu_cluster_ld(cu_cluster_map(at, lane / QB)));
        const float scale = rsqrtf(sum / (float)GDN_ROWS_DV + rw.eps);
#pragma unroll
        for (int e = 0; e < CP; e++)
            gt_split_store(rw.xs, K / 64, row, (int)(o0 + e), __fmul_rn(silu_f(z[e]), o[e] * scale * w[e]));
    }
}

#endif
