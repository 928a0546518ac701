/* cuda_elementwise.cu: x += y, y = silu(gate) * up, x *= silu or sigmoid of a gate (glu; mul_sigmoid is its
 * sigmoid case): one thread per element; and
 * argmax per row (greedy decoding on the GPU: only the chosen ids are downloaded; chunks of a row over blocks). */
#include "cuda_common.cuh"

#define EW_THREADS 256

__global__ void add_kernel(float *x, const float *__restrict__ y, int64_t n) {
    cu_pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) x[i] += y[i];
}

qstatus cuda_add(qbackend *be, float *x, const float *y, int64_t n) {
    if (n <= 0) return Q_OK;
    CU_TRY(cu_launch(add_kernel, cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu_stream(be), x, y, n), "add");
    return Q_OK;
}

__global__ void swiglu_kernel(const float *gate, const float *up, int64_t n, float *y) {
    cu_pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) y[i] = swiglu_f(gate[i], up[i]);
}

qstatus cuda_swiglu(qbackend *be, const float *gate, const float *up, int64_t n, float *y) {
    if (n <= 0) return Q_OK;
    CU_TRY(cu_launch(swiglu_kernel, cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu_stream(be), gate, up, n, y),
           "swiglu");
    return Q_OK;
}

/* x[v][d] = act(g[v * gs + d]) * x[v][d]: the attention's output gate (mul_sigmoid), and glu_matmul's gate
 * where the matmul cannot take it (for silu the bits of swiglu_kernel, silu(g) * x). */
__global__ void glu_kernel(float *x, const float *__restrict__ g, int64_t gs, int64_t n_vec, int dim, int act) {
    cu_pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= n_vec * dim) return;
    x[i] = glu_act(g[(i / dim) * gs + i % dim], act) * x[i];
}

qstatus cuda_glu(qbackend *be, float *x, const qglu *glu, int64_t n_vec) {
    if (glu->dim <= 0 || (glu->act != QGLU_SILU && glu->act != QGLU_SIGMOID))
        return q_fail(Q_EINVAL, "cuda glu: dim %d, act %d", glu->dim, (int)glu->act);
    if (n_vec <= 0) return Q_OK;
    CU_TRY(cu_launch(glu_kernel, cu_blocks(n_vec * glu->dim, EW_THREADS), EW_THREADS, 0, cu_stream(be), x, glu->g,
                     glu->g_stride, n_vec, glu->dim, (int)glu->act),
           "glu");
    return Q_OK;
}

qstatus cuda_mul_sigmoid(qbackend *be, float *out, const float *gate, int64_t gate_stride, int64_t n_vec,
                         int dim) {
    const qglu glu = {gate, gate_stride, dim, QGLU_SIGMOID, NULL, 0.0f};
    return cuda_glu(be, out, &glu, n_vec);
}

/* Greedy choice per row (backend.h argmax): each row in chunks of AM_CHUNK columns, a block each (one block per
 * row read a 248k vocabulary at one SM's rate: ~18 us a step, ncu). Each thread keeps the first largest non-NaN
 * element of its stride, a fixed tree picks the larger value (the lower index on ties) in the block, and the
 * last of a row's blocks to finish (a ticket, as the decode matmul's split-K finish) picks among the chunks the
 * same way. The choice does not depend on the order: the sequential scan's answer whenever x[r][0] is not
 * NaN; a NaN there gives 0, as the scan. */
#define AM_THREADS 256
#define AM_CHUNK 4096

/* part: [rows][chunks] (value, index as float bits); tick: a counter per row, left at zero. */
__global__ void __launch_bounds__(AM_THREADS) argmax_kernel(const float *__restrict__ x, int n_cols,
                                                            float *__restrict__ part, unsigned *__restrict__ tick,
                                                            int32_t *__restrict__ out) {
    cu_pdl_enter();
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    __shared__ int last;
    const int row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *xr = x + (int64_t)row * n_cols;
    const int i1 = min(n_cols, (chunk + 1) * AM_CHUNK);
    float bv = 0.0f;
    int bi = -1;
#pragma unroll 4
    for (int i = chunk * AM_CHUNK + threadIdx.x; i < i1; i += AM_THREADS) {
        const float v = xr[i];
        if (v == v && (bi < 0 || v > bv)) { bv = v; bi = i; }
    }
    am_warp(bv, bi);
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < AM_THREADS / 32; w++) am_take(bv, bi, sv[w], si[w]);
        float *p = part + 2 * ((int64_t)row * chunks + chunk);
        p[0] = bv, p[1] = __int_as_float(bi);
        last = cu_ticket_take(tick + row) == (unsigned)(chunks - 1); /* the partial before it, the others' after */
    }
    __syncthreads();
    if (!last || warp != 0) return;
    bv = 0.0f, bi = -1;
    for (int c = lane; c < chunks; c += 32) {
        const float *p = part + 2 * ((int64_t)row * chunks + c);
        am_take(bv, bi, __ldcg(p), __float_as_int(__ldcg(p + 1)));
    }
    am_warp(bv, bi);
    if (lane == 0) {
        out[row] = (xr[0] != xr[0] || bi < 0) ? 0 : bi;
        tick[row] = 0; /* ready for the next call */
    }
}

qstatus cuda_argmax(qbackend *be, const float *x, int n_rows, int n_cols, int32_t *out) {
    if (n_cols <= 0 || n_rows < 0 || n_cols > 65535 * AM_CHUNK)
        return q_fail(Q_EINVAL, "cuda argmax: %d rows of %d", n_rows, n_cols);
    if (n_rows == 0) return Q_OK;
    const unsigned chunks = cu_blocks(n_cols, AM_CHUNK);
    float *part = NULL;
    unsigned *tick = NULL;
    void *pre = NULL;
    Q_TRY(cu_gemv_scratch(be, (size_t)2 * chunks * n_rows, (size_t)n_rows, 0, &part, &tick, &pre));
    CU_TRY(cu_launch(argmax_kernel, dim3((unsigned)n_rows, chunks), AM_THREADS, 0, cu_stream(be), x, n_cols, part,
                     tick, out),
           "argmax");
    return Q_OK;
}
