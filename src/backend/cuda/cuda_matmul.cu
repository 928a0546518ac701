/* cuda_matmul.cu: y[n][n_out] = x[n][n_in] . W^T for f32/f16/bf16 and MLX affine weights, and the
 * embedding lookup (a dequantized row per id).
 * Algorithm (correctness first): one block of MM_THREADS per (output o, group of MM_ROWS rows).
 * Thread t sums inputs i = t, t + MM_THREADS, ... for each of its rows, reading each weight element
 * once per row group; then one fixed-order block reduction per row.
 * EXACT(batch): a row's sum depends only on MM_THREADS (fixed), never on n or on which rows share
 * the block. Floor: for decode the weight bytes once; this kernel re-reads W once per MM_ROWS rows,
 * so prefill is far from its FLOP floor (the performance issue replaces it with tensor-core GEMMs). */
#include "cuda_common.cuh"

#define MM_THREADS 256
#define MM_ROWS 8

__global__ void __launch_bounds__(MM_THREADS) matmul_kernel(const float *__restrict__ x, int n,
                                                            qweight W, float *__restrict__ y) {
    __shared__ float red[33];
    const int64_t o = blockIdx.x;
    const int r0 = blockIdx.y * MM_ROWS;
    const int64_t n_in = W.n_in;
    float acc[MM_ROWS];
#pragma unroll
    for (int r = 0; r < MM_ROWS; r++) acc[r] = 0.0f;
    for (int64_t i = threadIdx.x; i < n_in; i += MM_THREADS) {
        const float w = weight_at(W, o, i);
#pragma unroll
        for (int r = 0; r < MM_ROWS; r++)
            if (r0 + r < n) acc[r] = fmaf(w, x[(int64_t)(r0 + r) * n_in + i], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < MM_ROWS; r++) {
        if (r0 + r >= n) break; /* uniform across the block */
        const float s = block_sum(acc[r], red);
        if (threadIdx.x == 0) y[(int64_t)(r0 + r) * W.n_out + o] = s;
    }
}

static qstatus check_weight(const qweight *W, const char *op) {
    if (W->fmt == QW_AFFINE) {
        if (W->bits < 2 || W->bits > 8 || W->group <= 0 || W->n_in % W->group || (W->n_in * W->bits) % 32)
            return q_fail(Q_EINVAL, "cuda %s: bad affine weight (bits %d, group %d, n_in %lld)", op, W->bits,
                          W->group, (long long)W->n_in);
    }
    if (W->n_out > 2147483647LL) return q_fail(Q_EINVAL, "cuda %s: n_out too large", op);
    return Q_OK;
}

/* Decode rows, bf16 and 4-bit affine weights: a warp per output row, each lane streaming 16-byte
 * chunks of the row (8 bf16 values or 32 4-bit codes) and applying them to up to GV_ROWS input rows
 * at once. A row's sum: each lane's chunks c = lane, lane + 32, ... in order, each chunk's elements in
 * order, then a fixed butterfly over the warp; nothing depends on n (EXACT(batch)). */
#define GV_WARPS 8
#define GV_ROWS 8

template <int CH> /* elements per 16-byte chunk: 8 = bf16, 32 = 4-bit affine */
__global__ void __launch_bounds__(GV_WARPS * 32) gemv_kernel(const float *__restrict__ x, int n, qweight W,
                                                             float *__restrict__ y) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t o = (int64_t)blockIdx.x * GV_WARPS + warp;
    if (o >= W.n_out) return; /* whole warps */
    const int r0 = blockIdx.y * GV_ROWS;
    const int64_t K = W.n_in;
    const int64_t row_bytes = CH == 8 ? K * 2 : K / 2;
    const uint4 *wrow = (const uint4 *)((const unsigned char *)W.w + o * row_bytes);
    float acc[GV_ROWS];
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++) acc[r] = 0.0f;
    for (int64_t c = lane; c * CH < K; c += 32) {
        const uint4 raw = __ldg(wrow + c);
        float w[CH];
        if (CH == 8) {
            const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                w[2 * e] = __uint_as_float(u[e] << 16);
                w[2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
            }
        } else {
            const int64_t g = o * (K / W.group) + (c * CH) / W.group;
            const float sc = load_as_f32(W.scales, W.sb_fmt, g), bi = load_as_f32(W.biases, W.sb_fmt, g);
            const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int e = 0; e < CH; e++) /* same rounding as weight_at: no FMA */
                w[e] = __fadd_rn(__fmul_rn(sc, (float)((u[e / 8] >> (4 * (e % 8))) & 15u)), bi);
        }
#pragma unroll
        for (int r = 0; r < GV_ROWS; r++) {
            if (r0 + r >= n) break;
            const float4 *xr = (const float4 *)(x + (int64_t)(r0 + r) * K + c * CH);
            float a = acc[r];
#pragma unroll
            for (int q = 0; q < CH / 4; q++) {
                const float4 v = xr[q];
                a = fmaf(w[4 * q], v.x, a);
                a = fmaf(w[4 * q + 1], v.y, a);
                a = fmaf(w[4 * q + 2], v.z, a);
                a = fmaf(w[4 * q + 3], v.w, a);
            }
            acc[r] = a;
        }
    }
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && r0 + r < n) y[(int64_t)(r0 + r) * W.n_out + o] = s;
    }
}

/* Which decode kernel a weight takes: a property of the weight alone, so every decode row of it
 * takes the same one. */
static int gemv_chunk(const qweight *W) {
    if (W->fmt == QW_BF16 && W->n_in % 8 == 0) return 8;
    if (W->fmt == QW_AFFINE && W->bits == 4 && W->n_in % 32 == 0 && W->group % 32 == 0) return 32;
    return 0;
}

qstatus cuda_matmul(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W, "matmul"));
    const int ch = gemv_chunk(W);
    if (ch && (((uintptr_t)x | (uintptr_t)W->w) & 15)) /* never fall back: the kernel is the weight's */
        return q_fail(Q_EINVAL, "cuda matmul: activations and weights must be 16-byte aligned");
    if (ch) {
        dim3 grid(cu_blocks(W->n_out, GV_WARPS), cu_blocks(n, GV_ROWS));
        if (ch == 8) gemv_kernel<8><<<grid, GV_WARPS * 32, 0, cu_stream(be)>>>(x, n, *W, y);
        else gemv_kernel<32><<<grid, GV_WARPS * 32, 0, cu_stream(be)>>>(x, n, *W, y);
        CU_LAUNCHED("matmul (gemv)");
        return Q_OK;
    }
    dim3 grid((unsigned)W->n_out, cu_blocks(n, MM_ROWS));
    matmul_kernel<<<grid, MM_THREADS, 0, cu_stream(be)>>>(x, n, *W, y);
    CU_LAUNCHED("matmul");
    return Q_OK;
}

/* Prompt rows: a tiled SIMT GEMM. A block computes a TM x TN tile of y (rows x outputs) with 256
 * threads of 4 x 4 outputs each, staging TK-wide slices of x and of the dequantized W in shared
 * memory. Each output is one thread's fma chain over k = 0, 1, ..., n_in - 1 in order, so a row's
 * result does not depend on n or on its place in the tile (EXACT(batch), EXACT(chunk)); it differs
 * from matmul_kernel's block reduction in rounding only, and the model never mixes the two for one
 * kind of row. Floor: f32 FMA rate; the performance issue replaces it with tensor cores. */
#define TM 64
#define TN 64
#define TK 16

__global__ void __launch_bounds__(256) matmul_tiled_kernel(const float *__restrict__ x, int n, qweight W,
                                                           float *__restrict__ y) {
    __shared__ float As[TK][TM + 4], Bs[TK][TN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t row0 = (int64_t)blockIdx.y * TM, col0 = (int64_t)blockIdx.x * TN;
    const int64_t K = W.n_in;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += TK) {
#pragma unroll
        for (int e = 0; e < 4; e++) { /* 1024 elements of each tile, 4 per thread */
            const int idx = tid + e * 256, kk = idx % TK, mm = idx / TK;
            const int64_t k = k0 + kk, r = row0 + mm, c = col0 + mm;
            As[kk][mm] = (r < n && k < K) ? x[r * K + k] : 0.0f;
            Bs[kk][mm] = (c < W.n_out && k < K) ? weight_at(W, c, k) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t r = row0 + ty * 4 + i;
        if (r >= n) break;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t c = col0 + tx * 4 + j;
            if (c < W.n_out) y[r * W.n_out + c] = acc[i][j];
        }
    }
}

qstatus cuda_matmul_prefill(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W, "matmul_prefill"));
    dim3 grid(cu_blocks(W->n_out, TN), cu_blocks(n, TM));
    matmul_tiled_kernel<<<grid, 256, 0, cu_stream(be)>>>(x, n, *W, y);
    CU_LAUNCHED("matmul_prefill");
    return Q_OK;
}

__global__ void embed_kernel(qweight T, const int32_t *__restrict__ ids, float *__restrict__ y) {
    const int r = blockIdx.x;
    const int32_t id = ids[r];
    const bool ok = id >= 0 && id < T.n_out; /* the model validated ids; never read outside */
    for (int64_t i = threadIdx.x; i < T.n_in; i += blockDim.x)
        y[(int64_t)r * T.n_in + i] = ok ? weight_at(T, id, i) : 0.0f;
}

qstatus cuda_embed(qbackend *be, const qweight *table, const int32_t *ids, int n, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(table, "embed"));
    embed_kernel<<<n, 256, 0, cu_stream(be)>>>(*table, ids, y);
    CU_LAUNCHED("embed");
    return Q_OK;
}
