/* cuda_q4_tiled.cu: pack_weight, a 4-bit affine weight laid out in the tile order of cuda_q4_tiled.cuh. Rows that are
 * not a multiple of 16 first move to buffers padded with zero rows. Each permutation stays inside a group of 16 rows,
 * so the weight goes through a scratch buffer a run of groups at a time: the run is copied there, then each 4-byte word
 * (2-byte value) is written back to its tiled place. */
#include "cuda_backend.h"
#include "cuda_common.cuh"

#define Q4T_SCRATCH ((size_t)64 << 20)

/* Codes: word d of the run (4 bytes, tiled order) from the scratch copy of its rows (row-major, K / 2 bytes a row; a
 * tiled word's 4 bytes are 4 bytes of one row). */
__global__ void q4t_codes_kernel(uint32_t *__restrict__ dst, const unsigned char *__restrict__ src, int64_t words,
                                 int64_t K) {
    for (int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; d < words; d += (int64_t)gridDim.x * blockDim.x)
        dst[d] = *(const uint32_t *)(src + q4t_code_src(4 * d, K));
}
/* Scales or biases: value d of the run (tiled order) from the scratch copy (row-major, gpr values a row). */
__global__ void q4t_sb_kernel(unsigned short *__restrict__ dst, const unsigned short *__restrict__ src, int64_t n,
                              int64_t gpr) {
    for (int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; d < n; d += (int64_t)gridDim.x * blockDim.x)
        dst[d] = src[q4t_sb_src(d, gpr)];
}

/* One array of n_groups groups of group_bytes each, in runs that fit the scratch. */
static qstatus q4t_pack_array(cudaStream_t st, void *data, int64_t n_groups, size_t group_bytes, void *scratch,
                              int codes, int64_t K, int64_t gpr) {
    const int64_t run = (int64_t)(Q4T_SCRATCH / group_bytes);
    for (int64_t g0 = 0; g0 < n_groups; g0 += run) {
        const int64_t ng = n_groups - g0 < run ? n_groups - g0 : run;
        unsigned char *p = (unsigned char *)data + g0 * group_bytes;
        const size_t bytes = (size_t)ng * group_bytes;
        CU_TRY(cudaMemcpyAsync(scratch, p, bytes, cudaMemcpyDeviceToDevice, st), "pack_weight");
        const unsigned blocks = (unsigned)((bytes / 4 + 255) / 256 < 4096 ? (bytes / 4 + 255) / 256 : 4096);
        if (codes) q4t_codes_kernel<<<blocks, 256, 0, st>>>((uint32_t *)p, (const unsigned char *)scratch,
                                                           (int64_t)(bytes / 4), K);
        else q4t_sb_kernel<<<blocks, 256, 0, st>>>((unsigned short *)p, (const unsigned short *)scratch,
                                                   (int64_t)(bytes / 2), gpr);
        CU_LAUNCHED("pack_weight");
    }
    return Q_OK;
}

/* *p (bytes, n_out rows) moved to a zeroed buffer of `to` bytes (n_out rows padded to 16). */
static qstatus q4t_grow(qbackend *be, void **p, size_t bytes, size_t to) {
    void *q = NULL;
    Q_TRY(be->ops->alloc(be, to, &q)); /* zeroed */
    const cudaError_t e = cudaMemcpyAsync(q, *p, bytes, cudaMemcpyDeviceToDevice, cu_stream(be));
    if (e != cudaSuccess) {
        be->ops->free(be, q);
        return q_fail(Q_ECUDA, "cuda pack_weight: copy: %s", cudaGetErrorString(e));
    }
    be->ops->free(be, *p); /* (waits for the copy) */
    *p = q;
    return Q_OK;
}

qstatus cuda_pack_weight(qbackend *be, qweight *W, size_t *grown) {
    *grown = 0;
    if (W->tiled || !q4t_eligible(W)) return Q_OK; /* the other kernels read it as it is */
    const int64_t K = W->n_in, gpr = K / W->group, n_groups = q4t_rows(W->n_out) / 16;
    const size_t code_group = (size_t)K * 8, sb_group = (size_t)gpr * 16 * 2;
    if (code_group > Q4T_SCRATCH) return Q_OK; /* rows of more than 8M codes: left row-major */
    if (n_groups * 16 != W->n_out) {
        const size_t pad = (size_t)(n_groups * 16 - W->n_out);
        Q_TRY(q4t_grow(be, &W->w, (size_t)W->n_out * K / 2, (size_t)n_groups * code_group));
        Q_TRY(q4t_grow(be, &W->scales, (size_t)(W->n_out * gpr) * 2, (size_t)n_groups * sb_group));
        Q_TRY(q4t_grow(be, &W->biases, (size_t)(W->n_out * gpr) * 2, (size_t)n_groups * sb_group));
        *grown = pad * (size_t)(K / 2 + gpr * 4);
    }
    cudaStream_t st = cu_stream(be);
    void *scratch = NULL;
    const size_t want = (size_t)n_groups * code_group < Q4T_SCRATCH ? (size_t)n_groups * code_group : Q4T_SCRATCH;
    cudaError_t e = cudaMalloc(&scratch, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return q_fail(Q_ENOMEM, "cuda pack_weight: scratch of %zu bytes: %s", want, cudaGetErrorString(e));
    }
    qstatus s = q4t_pack_array(st, W->w, n_groups, code_group, scratch, 1, K, gpr);
    if (s == Q_OK) s = q4t_pack_array(st, W->scales, n_groups, sb_group, scratch, 0, K, gpr);
    if (s == Q_OK) s = q4t_pack_array(st, W->biases, n_groups, sb_group, scratch, 0, K, gpr);
    const cudaError_t se = cudaStreamSynchronize(st); /* the scratch is read until here */
    cudaFree(scratch);
    if (s != Q_OK) return s;
    if (se != cudaSuccess) return q_fail(Q_ECUDA, "cuda pack_weight: %s", cudaGetErrorString(se));
    W->tiled = 1;
    return Q_OK;
}
