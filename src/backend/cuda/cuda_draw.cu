/* cuda_draw.cu: the op draw (backend.h): each row's sampled token by draw.h's Gumbel-max rule, on the GPU, so a
 * sampled stream downloads its id instead of a vocabulary of logits and no host sorts or sums them.
 *
 * Two launches, each over a row's chunks of DR_CHUNK columns, a block each (argmax_kernel's layout):
 * - draw_max_kernel: the row's largest finite logit, min-p's reference (the last block of a row, by a ticket,
 *   takes the largest of the chunks' maxima: a maximum does not depend on the order);
 * - draw_kernel: every chunk's best (score, index) by draw.h's draw_score, the lowest index among equal scores, and
 *   the last block of the row the best of the chunks the same way. A row at temperature <= 0 or without a finite
 *   logit takes argmax's rule instead (scores = the logits, NaNs never win, x[0] NaN gives 0).
 * The winner is the largest score whatever order the blocks and threads meet in, so the id is draw_row's on the
 * same logits (draw.h says where the host's and the GPU's logs may differ). */
#include "cuda_common.cuh"

#define DR_THREADS 256
#define DR_CHUNK 4096

__global__ void __launch_bounds__(DR_THREADS) draw_max_kernel(const float *__restrict__ x, int n_cols,
                                                              float *__restrict__ part, unsigned *__restrict__ tick,
                                                              float *__restrict__ rmax) {
    cu_pdl_enter();
    __shared__ float sm[DR_THREADS / 32];
    __shared__ int last;
    const int row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *xr = x + (int64_t)row * n_cols;
    const int i1 = min(n_cols, (chunk + 1) * DR_CHUNK);
    float m = -INFINITY; /* stays -inf where the chunk has no finite logit */
    for (int i = chunk * DR_CHUNK + threadIdx.x; i < i1; i += DR_THREADS)
        if (isfinite(xr[i])) m = fmaxf(m, xr[i]);
    m = warp_max(m);
    if (lane == 0) sm[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < DR_THREADS / 32; w++) m = fmaxf(m, sm[w]);
        part[(int64_t)row * chunks + chunk] = m;
        last = cu_ticket_take(tick + row) == (unsigned)(chunks - 1);
    }
    __syncthreads();
    if (!last || warp != 0) return;
    m = -INFINITY;
    for (int c = lane; c < chunks; c += 32) m = fmaxf(m, __ldcg(part + (int64_t)row * chunks + c));
    m = warp_max(m);
    if (lane == 0) {
        rmax[row] = m;
        tick[row] = 0; /* ready for the next launch */
    }
}

/* (s, i) replaces the best (bs, bi) if i is an index and s is larger, or equal at a lower index (am_take's rule on
 * doubles). */
__device__ __forceinline__ void dr_take(double &bs, int &bi, double s, int i) {
    if (i >= 0 && (bi < 0 || s > bs || (s == bs && i < bi))) bs = s, bi = i;
}
__device__ __forceinline__ void dr_warp(double &bs, int &bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const double os = __shfl_xor_sync(0xffffffffu, bs, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        dr_take(bs, bi, os, oi);
    }
}

/* part: [rows][chunks] (score, index) as two doubles. */
__global__ void __launch_bounds__(DR_THREADS) draw_kernel(const float *__restrict__ x, int n_cols,
                                                          const __grid_constant__ cu_tab d,
                                                          const float *__restrict__ rmax, double *__restrict__ part,
                                                          unsigned *__restrict__ tick, int32_t *__restrict__ out) {
    cu_pdl_enter();
    __shared__ double ss[DR_THREADS / 32];
    __shared__ int si[DR_THREADS / 32];
    __shared__ int last;
    const int row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *xr = x + (int64_t)row * n_cols;
    const qdraw dr = cu_tab_at<qdraw>(d, row);
    const float mx = rmax[row];
    const bool greedy = !(dr.temperature > 0.0) || mx == -INFINITY;
    const int i1 = min(n_cols, (chunk + 1) * DR_CHUNK);
    double bs = 0.0;
    int bi = -1;
    for (int i = chunk * DR_CHUNK + threadIdx.x; i < i1; i += DR_THREADS) {
        const float v = xr[i];
        if (greedy) {
            if (v == v) dr_take(bs, bi, (double)v, i);
        } else if (isfinite(v) && (double)v - (double)mx >= dr.min_rel &&
                   (bi < 0 || (double)v / dr.temperature + DRAW_G_MAX >= bs)) { /* else it cannot win: no noise */
            dr_take(bs, bi, draw_score(v, dr.temperature, dr.key, i), i);
        }
    }
    dr_warp(bs, bi);
    if (lane == 0) ss[warp] = bs, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < DR_THREADS / 32; w++) dr_take(bs, bi, ss[w], si[w]);
        double *p = part + 2 * ((int64_t)row * chunks + chunk);
        p[0] = bs, p[1] = (double)bi;
        last = cu_ticket_take(tick + row) == (unsigned)(chunks - 1);
    }
    __syncthreads();
    if (!last || warp != 0) return;
    bs = 0.0, bi = -1;
    for (int c = lane; c < chunks; c += 32) {
        const double *p = part + 2 * ((int64_t)row * chunks + c);
        dr_take(bs, bi, __ldcg(p), (int)__ldcg(p + 1));
    }
    dr_warp(bs, bi);
    if (lane == 0) {
        out[row] = greedy && (xr[0] != xr[0] || bi < 0) ? 0 : bi;
        tick[row] = 0;
    }
}

qstatus cuda_draw(qbackend *be, const float *x, int n_rows, int n_cols, const qdraw *d, int32_t *out) {
    if (n_cols <= 0 || n_rows < 0 || n_cols > 65535 * DR_CHUNK || (n_rows > 0 && !d))
        return q_fail(Q_EINVAL, "cuda draw: %d rows of %d", n_rows, n_cols);
    if (n_rows == 0) return Q_OK;
    const unsigned chunks = cu_blocks(n_cols, DR_CHUNK);
    const size_t rows = (size_t)n_rows, off_max = (rows + 1) / 2 * 2, off_draw = off_max + (chunks * rows + 1) / 2 * 2;
    float *part = NULL;
    unsigned *tick = NULL;
    void *pre = NULL;
    /* the decode matmul's scratch, as argmax's: ops run in stream order, so their uses never overlap */
    Q_TRY(cu_gemv_scratch(be, off_draw + 4 * chunks * rows, rows, 0, &part, &tick, &pre));
    cu_tab t;
    Q_TRY(cu_tab_make(be, d, rows * sizeof *d, &t));
    const dim3 grid((unsigned)n_rows, chunks);
    CU_TRY(cu_launch(draw_max_kernel, grid, DR_THREADS, 0, cu_stream(be), x, n_cols, part + off_max, tick, part),
           "draw (max)");
    CU_TRY(cu_launch(draw_kernel, grid, DR_THREADS, 0, cu_stream(be), x, n_cols, t, (const float *)part,
                     (double *)(part + off_draw), tick, out),
           "draw");
    return Q_OK;
}
