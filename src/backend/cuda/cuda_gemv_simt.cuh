/* cuda_gemv_simt.cuh: the SIMT decode matmul for weights the tensor-core kernel (cuda_gemv.cuh) does not
 * take. Included by cuda_gemv.cuh, so cuda_gemv.cu and tests/cuda/bench_gemv.cu see both. */
#ifndef QUILL_CUDA_GEMV_SIMT_CUH
#define QUILL_CUDA_GEMV_SIMT_CUH

#include "cuda_common.cuh"

/* SIMT decode kernel for 4-bit affine weights the tensor-core kernel does not take (group 32, or f16 /
 * f32 scales) and bf16 rows whose n_in is a multiple of 8 but not of 32: a warp per output row, each lane streaming 16-byte
 * chunks of the row (8 bf16 values or 32 4-bit codes) and applying them to up to GV_ROWS input rows
 * at once. A row's sum: each lane's chunks c = lane, lane + 32, ... in order, each chunk's elements in
 * order, then a fixed butterfly over the warp; nothing depends on n (EXACT(batch)). */
#define GV_WARPS 8
#define GV_ROWS 8

template <int CH> /* elements per 16-byte chunk: 8 = bf16, 32 = 4-bit affine */
__global__ void __launch_bounds__(GV_WARPS * 32) gemv_kernel(const float *__restrict__ x, int n, qweight W,
                                                             float *__restrict__ y) {
    cu_pdl_enter();
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

#endif
