/* cuda_matmul.cu: the embedding lookup (a dequantized row per id). The decode matmul is in
 * cuda_gemv.cu, the prefill matmul in cuda_gemm.cu. */
#include "cuda_common.cuh"

static qstatus check_weight(const qweight *W, const char *op) {
    if (W->fmt == QW_AFFINE) {
        if (W->bits < 2 || W->bits > 8 || W->group <= 0 || W->n_in % W->group || (W->n_in * W->bits) % 32)
            return q_fail(Q_EINVAL, "cuda %s: bad affine weight (bits %d, group %d, n_in %lld)", op, W->bits,
                          W->group, (long long)W->n_in);
    }
    if (W->n_out > 2147483647LL) return q_fail(Q_EINVAL, "cuda %s: n_out too large", op);
    return Q_OK;
}

/* Block (r, b) writes elements b * 256 .. of row r, one each (a block per row looped over the row, each
 * iteration's loads behind the last one's store: ~13 us for a 4096-wide row, ncu). */
__global__ void embed_kernel(qweight T, const int32_t *__restrict__ ids, float *__restrict__ y) {
    cu_pdl_enter();
    const int r = blockIdx.x;
    const int64_t i = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= T.n_in) return;
    const int32_t id = ids[r];
    const bool ok = id >= 0 && id < T.n_out; /* the model validated ids; never read outside */
    y[(int64_t)r * T.n_in + i] = ok ? weight_at(T, id, i) : 0.0f;
}

qstatus cuda_embed(qbackend *be, const qweight *table, const int32_t *ids, int n, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(table, "embed"));
    if (table->n_in > 65535LL * 256) return q_fail(Q_EINVAL, "cuda embed: rows of %lld", (long long)table->n_in);
    CU_TRY(cu_launch(embed_kernel, dim3((unsigned)n, cu_blocks(table->n_in, 256)), 256, 0, cu_stream(be), *table, ids,
                     y),
           "embed");
    return Q_OK;
}
