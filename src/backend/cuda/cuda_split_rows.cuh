/* cuda_split_rows.cuh: where a value of x goes in dequant mode's split rows, the bf16 B rows gemv_dq_kernel copies
 * into its stages (gemv_split_kernel WGO writes them all; a producer that knows its consumer writes them as its
 * outputs finish: the residual's (gt_next_store), a GLU pair's (gdq_finish_glu_s), the gated delta rule's gated norm
 * (cuda_gdn_rows.cuh), the attention's output gate (its combine)). Included by cuda_gemv_finish.cuh,
 * cuda_gdn_rows.cuh and cuda_attention.cu. */
#ifndef QUILL_CUDA_SPLIT_ROWS_CUH
#define QUILL_CUDA_SPLIT_ROWS_CUH

#include "cuda_common.cuh"

/* bf16(v) as input o of row r in gemv_dq_kernel's split rows for K = 64 U (U units of 64; gt_stage WGO's layout: tile
 * r / 8, unit o / 64, row r % 8, then lane t = (o % 64) / 16's element e = o % 16 in word 8 j + 4 (e & 1) + t, half
 * (e >> 2) & 1, where k-step j = 2 (e >> 3) + ((e >> 1) & 1) (gt_kstep_e0)). */
__device__ __forceinline__ void gt_split_store(unsigned short *__restrict__ xs, int64_t U, int64_t r, int o, float v) {
    const int kk = o & 63, t = kk >> 4, e = kk & 15;
    const int word = 8 * (2 * (e >> 3) + ((e >> 1) & 1)) + 4 * (e & 1) + t;
    const int64_t at = (((r >> 3) * U + (o >> 6)) * 256 + (r & 7) * 32 + word) * 2 + ((e >> 2) & 1);
    xs[at] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
/* The bytes of the split rows of n rows for K inputs (K a multiple of 64): tiles of 8 rows, 8 x 64 bf16 a unit. */
static inline size_t gt_split_rows_bytes(int64_t K, int n) { return (size_t)((n + 7) / 8) * (size_t)(K / 64) * 1024; }

#endif
