/* cuda_head.cu: ops head_sketch_make, head_sketch_free and head_argmax: one row's greedy id from an 8-bit sketch of a
 * bf16 lm_head (cuda_head_sketch.cuh says why it is the head's own argmax). The sketch reads ~53 % of the head's bytes
 * (codes, a scale a group of 64, two bounds a row); the few rows it cannot rule out are gathered and multiplied in the
 * head's own K slices (cuda_matmul_like), so their logits are bitwise the head's. */
#include "cuda_backend.h"
#include "cuda_head_sketch.cuh"

struct cu_head_sketch {
    int8_t *q;  /* [V][K] */
    float *sw;  /* [V][K / HS_GROUP] */
    float *ab;  /* [V][2] */
    void *work; /* hs_work's buffers, one allocation */
    hs_work w;
    int64_t V;
    int K;
};

static void sketch_free(struct cu_head_sketch *h) {
    if (!h) return;
    cudaFree(h->q);
    cudaFree(h->sw);
    cudaFree(h->ab);
    cudaFree(h->work);
    free(h);
}

void cuda_head_sketch_free(qbackend *be, void *sketch) {
    (void)be;
    sketch_free((struct cu_head_sketch *)sketch);
}

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

qstatus cuda_head_sketch_make(qbackend *be, const qweight *W, void **sketch, int64_t *bytes) {
    *sketch = NULL, *bytes = 0;
    if (W->fmt != QW_BF16 || !hs_k_ok(W->n_in) || W->n_out <= 0 || W->n_out > INT_MAX) return Q_OK;
    const int64_t V = W->n_out;
    const int K = (int)W->n_in, G = K / HS_GROUP;
    struct cu_head_sketch *h = (struct cu_head_sketch *)calloc(1, sizeof *h);
    if (!h) return q_fail(Q_ENOMEM, "cuda head sketch: out of memory");
    h->V = V, h->K = K;
    /* the call's scratch: p, t, info, upper, lstar + count, cand, rows, y (each 256-byte aligned) */
    const size_t parts[9] = {(size_t)K * 2, (size_t)G * 4, 16, (size_t)V * 4, 8, 0, (size_t)HS_CAP * 4,
                             (size_t)HS_CAP * K * 2, (size_t)HS_CAP * 4};
    size_t off[9], work = 0;
    for (int i = 0; i < 9; i++) off[i] = work, work += up256(parts[i]);
    unsigned *bad = NULL;
    cudaError_t e = cudaMalloc((void **)&h->q, (size_t)(V * K));
    if (e == cudaSuccess) e = cudaMalloc((void **)&h->sw, (size_t)(V * G) * 4);
    if (e == cudaSuccess) e = cudaMalloc((void **)&h->ab, (size_t)V * 8);
    if (e == cudaSuccess) e = cudaMalloc(&h->work, work);
    if (e == cudaSuccess) e = cudaMalloc((void **)&bad, sizeof *bad);
    if (e == cudaSuccess) e = cudaMemset(h->work, 0, work); /* the gathered rows past a call's count stay zero */
    if (e == cudaSuccess) e = cudaMemset(bad, 0, sizeof *bad);
    if (e == cudaSuccess) {
        hs_build_kernel<<<(unsigned)((V + 7) / 8), 256, 0, cu_stream(be)>>>((const __nv_bfloat16 *)W->w, V, K, h->q,
                                                                            h->sw, h->ab, bad);
        e = cudaGetLastError();
    }
    unsigned got_bad = 0;
    if (e == cudaSuccess) e = cudaMemcpyAsync(&got_bad, bad, sizeof got_bad, cudaMemcpyDeviceToHost, cu_stream(be));
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu_stream(be));
    cudaFree(bad);
    if (e != cudaSuccess) {
        sketch_free(h);
        return q_fail(Q_ECUDA, "cuda head sketch (%lld x %d): %s", (long long)V, K, cudaGetErrorString(e));
    }
    if (got_bad) { /* a value that is not finite: the full head decides every id */
        sketch_free(h);
        return Q_OK;
    }
    char *base = (char *)h->work;
    h->w.p = (int16_t *)(base + off[0]), h->w.t = (float *)(base + off[1]), h->w.info = (float *)(base + off[2]);
    h->w.upper = (float *)(base + off[3]), h->w.lstar = (int *)(base + off[4]);
    h->w.count = (unsigned *)(base + off[4] + 4);
    h->w.cand = (int *)(base + off[6]), h->w.rows = (__nv_bfloat16 *)(base + off[7]), h->w.y = (float *)(base + off[8]);
    *sketch = h;
    *bytes = (int64_t)(V * K) + (int64_t)(V * G) * 4 + V * 8 + (int64_t)work;
    return Q_OK;
}

qstatus cuda_head_argmax(qbackend *be, const float *x, const qweight *W, const void *sketch, int32_t *out) {
    const struct cu_head_sketch *h = (const struct cu_head_sketch *)sketch;
    if (!h || W->fmt != QW_BF16 || W->n_out != h->V || W->n_in != h->K)
        return q_fail(Q_EINVAL, "cuda head_argmax: the sketch is not this weight's");
    cudaStream_t st = cu_stream(be);
    int dev = 0, sms = 0;
    CU_TRY(cudaGetDevice(&dev), "head_argmax");
    CU_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "head_argmax");
    int bf16x = 0;
    Q_TRY(cu_decode_precision(&bf16x));
    CU_TRY(cu_launch(hs_quantize_kernel, 1, 1024, 0, st, x, h->K, bf16x != 0, h->w), "head_argmax (h)");
    CU_TRY(cu_launch(hs_sketch_kernel, (unsigned)(4 * sms), 256, 0, st, (const int8_t *)h->q, (const float *)h->sw,
                     (const float *)h->ab, h->V, h->K, h->w),
           "head_argmax (sketch)");
    CU_TRY(cu_launch(hs_compact_kernel, (unsigned)(2 * sms), 256, 0, st, h->V, h->w), "head_argmax (candidates)");
    CU_TRY(cu_launch(hs_gather_kernel, HS_CAP, 128, 0, st, (const __nv_bfloat16 *)W->w, h->K, h->w),
           "head_argmax (rows)");
    const qweight rows = {QW_BF16, HS_CAP, h->K, h->w.rows, NULL, NULL, QW_BF16, 0, 0, 0};
    Q_TRY(cuda_matmul_like(be, x, 1, &rows, h->w.y, W));
    CU_TRY(cu_launch(hs_pick_kernel, 1, 256, 0, st, h->w, out), "head_argmax (pick)");
    return Q_OK;
}

qstatus cuda_head_sketch_candidates(qbackend *be, const void *sketch, unsigned *n) {
    const struct cu_head_sketch *h = (const struct cu_head_sketch *)sketch;
    CU_TRY(cudaMemcpyAsync(n, h->w.count, sizeof *n, cudaMemcpyDeviceToHost, cu_stream(be)), "head sketch count");
    CU_TRY(cudaStreamSynchronize(cu_stream(be)), "head sketch count");
    return Q_OK;
}
