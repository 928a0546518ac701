/* cuda_attention.cuh: what the decode-row attention kernels share (cuda_attention.cu: the K/V write, the
 * SIMT split kernel and the split combine; cuda_attention_tc.cu: the tensor-core split kernel for bf16 and q8
 * caches). A decode row's keys are cut into fixed ranges of ATT_SPLIT positions (flash-decoding); each
 * split writes part[row][head][split][2 + dim] = (max, sum, unnormalised output) over its keys, and the
 * combine merges a row's splits in split order. */
#ifndef QUILL_CUDA_ATTENTION_CUH
#define QUILL_CUDA_ATTENTION_CUH

#include "cuda_kv.cuh"

#define ATT_SPLIT 256
#define ATT_GROUP 4 /* query heads of one kv head a split block serves */

typedef struct att_row {
    void *kc, *vc;  /* the row's stream caches */
    int pos;        /* the row's position */
    int row;        /* its index in the batch */
    int new0;       /* its seq's first row's position: keys >= new0 are written by this call */
} att_row;

/* QUILL_CUDA_ATT_TC=0 keeps bf16 and q8 caches on the SIMT split kernel (an A/B of the two in one build; the
 * CUDA tests check both against the CPU). Read once. */
static inline int cuda_att_tc_on(void) {
    static int on = -1;
    return cu_env_on("QUILL_CUDA_ATT_TC", &on);
}

/* QUILL_CUDA_QK_KV=0 keeps attention_gated's head norms and RoPE apart from the decode rows' K/V write (two launches:
 * an A/B of cuda_qk_norm_rope_kv in one build; the bits are the same). Read once. */
static inline int cuda_qk_kv_on(void) {
    static int on = -1;
    return cu_env_on("QUILL_CUDA_QK_KV", &on);
}

/* Launches the tensor-core split kernel over bf16 (tc) or q8 (tc8) caches for grid (rows, kv heads x head
 * groups, max_splits); cudaErrorNotSupported (nothing launched) when it does not take the head dim. out: NULL, or
 * with max_splits 1 the attention's output, written as the combine would (att_one_split). */
cudaError_t cuda_att_split_tc(dim3 grid, cudaStream_t st, const float *q, const cu_tab &rows, int n_q, int n_kv,
                              int dim, float scale, int max_splits, float *part, float *out);
cudaError_t cuda_att_split_tc8(dim3 grid, cudaStream_t st, const float *q, const cu_tab &rows, int n_q, int n_kv,
                               int dim, float scale, int max_splits, float *part, float *out);

/* cuda_norm.cu: qk_norm_rope and the K/V write of n decode rows, rows[r] batch row r's, in one launch; *done false
 * (nothing launched) where the shapes do not take it. */
qstatus cuda_qk_norm_rope_kv(qbackend *be, const qqk_prep *qk, float *q, float *k, const float *v, int n, int n_q,
                             int n_kv, int dim, const cu_tab &rows, qwfmt kv_fmt, bool *done);

/* A row's output when all its keys are in one split: the combine's sum with e_0 = exp(m_0 - m_0) = 1, so
 * fmaf(v, 1, 0) = v + 0 (the +0 turns -0 into +0, as the combine's does), over L = l_0, bit for bit. With one
 * split in the whole batch the split kernels write this and the combine is not launched: at short contexts
 * that is 8 launches a step fewer on the 9B. */
__device__ __forceinline__ float att_one_split(float v, float l) { return (v + 0.0f) / l; }

#endif
