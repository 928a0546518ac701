/* bench_gemv_int.cu: a measured prototype of the next decode matmul unit (docs/performance.md, session 6),
 * one row, MLX 4-bit g64 weights: an exact-integer unit on the int8 tensor cores. Built and run by
 * tests/cuda/bench_gemv_int.sh; not used by quill.
 *
 * Arithmetic: bench_int8_unit.h (x per unit as block floating point in four int8 digits, the codes as u8 on the
 * int8 tensor cores, each unit's digit sums exact).
 *
 * Kernel: blocks of 4 warps x 16 outputs, split-K into S slices (partials summed in slice order by a
 * second kernel); each block stages its slice of x as B fragments (512 bytes per unit) with (X, 2^E);
 * each warp streams its weights and scales through a register ring GI_D units deep.
 * Measured (session 6, docs/performance.md): exact and ~5x more precise than the split-bf16 unit, but at
 * one row 10-50 % slower than the tuned decode kernel (cuda_gemv.cuh) on every shape: the dequantisation's
 * instruction count is not what bounds the one-row matmul. Prints, per shape,
 * the relative error against the f64 CPU reference on 256 sampled outputs, the single-launch time
 * (events, median) and the pipelined time (20 launches back to back with programmatic launch, weight
 * copies rotating), with GB/s of weight bytes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_common.cuh"
#include "bench_check.h"
#include "bench_weights.h"
#include "bench_int8_unit.h"

#define GI_WARPS 4
#define GI_OUT (GI_WARPS * 16)
#ifndef GI_D
#define GI_D 8 /* units in flight per warp */
#endif
#ifndef GI_TWO_PHASE
#define GI_TWO_PHASE 0 /* 1: a turn's MMAs first, then its folds (measured slower: more registers, spills) */
#endif
#ifndef GI_MINB
#define GI_MINB 4 /* blocks per SM the registers are sized for */
#endif
#define GI_UNIT_BYTES (2 * 32 * 8 + 16) /* B fragments of 2 k-steps + (X, 2^E), padded to 16 bytes */

/* Stages units [u0, u0 + us) of x: warp w takes units w, w + 4, ...; lane l holds values 2l, 2l + 1. Per unit,
 * gi_stage_unit's 512 bytes of fragments (columns 4..7 zero), then (X, 2^E). */
__device__ void gi_stage(const float *__restrict__ x, int u0, int us, unsigned char *sm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int u = warp; u < us; u += GI_WARPS) {
        unsigned char *ub = sm + (size_t)u * GI_UNIT_BYTES;
        ((uint4 *)ub)[lane] = make_uint4(0u, 0u, 0u, 0u); /* 512 bytes of fragments */
        const float2 v = *(const float2 *)(x + (int64_t)(u0 + u) * 64 + 2 * lane);
        const float2 xe = gi_stage_unit<32>(v, ub);
        if (lane == 0) *(float2 *)(ub + 512) = xe;
    }
}

__global__ void __launch_bounds__(GI_WARPS * 32, GI_MINB)
    gemv_int_kernel(const float *__restrict__ x, int K, const uint32_t *__restrict__ w,
                    const uint16_t *__restrict__ sc, const uint16_t *__restrict__ bi, int n_out, int S,
                    float *__restrict__ part) {
    extern __shared__ uint4 gi_smem[];
    unsigned char *sm = (unsigned char *)gi_smem;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const unsigned n_ob = (unsigned)n_out / GI_OUT;
    const int ob = (int)(blockIdx.x % n_ob), s = (int)(blockIdx.x / n_ob);
    const int U = K / 64, u0 = s * U / S, us = (s + 1) * U / S - u0;
    const int og = ob * GI_OUT + warp * 16 + g, og8 = og + 8;
    const uint2 *w0 = (const uint2 *)(w + (int64_t)og * (K / 8) + u0 * 8) + t;
    const uint2 *w8 = (const uint2 *)(w + (int64_t)og8 * (K / 8) + u0 * 8) + t;
    const uint16_t *s0 = sc + (int64_t)og * U + u0, *s8 = sc + (int64_t)og8 * U + u0;
    const uint16_t *b0 = bi + (int64_t)og * U + u0, *b8 = bi + (int64_t)og8 * U + u0;

    uint2 rw[GI_D][2];
    uint32_t rs[GI_D][4];
#pragma unroll
    for (int d = 0; d < GI_D; d++)
        if (d < us) {
            rw[d][0] = __ldg(w0 + d * 4), rw[d][1] = __ldg(w8 + d * 4);
            rs[d][0] = __ldg(s0 + d), rs[d][1] = __ldg(s8 + d), rs[d][2] = __ldg(b0 + d), rs[d][3] = __ldg(b8 + d);
        }
    cu_pdl_enter();
    gi_stage(x, u0, us, sm);
    __syncthreads();

    float acc0 = 0.0f, acc8 = 0.0f;
    for (int base = 0; base < us; base += GI_D) {
        /* GI_TWO_PHASE: every unit's MMAs of the turn first, then every unit's combine and fold; else one
         * unit at a time. */
        int cc[GI_D][4];
#pragma unroll
        for (int d = 0; d < GI_D; d++) {
            const int u = base + d;
            if (u >= us) break;
            const unsigned char *ub = sm + (size_t)u * GI_UNIT_BYTES;
            const uint2 f0 = ((const uint2 *)ub)[lane], f1 = ((const uint2 *)ub)[32 + lane];
            cc[d][0] = cc[d][1] = cc[d][2] = cc[d][3] = 0;
            gi_unit_mma(cc[d], rw[d][0].x, rw[d][1].x, rw[d][0].y, rw[d][1].y, f0, f1); /* words 2t, 2t + 1 */
            if (u + GI_D < us) rw[d][0] = __ldg(w0 + (u + GI_D) * 4), rw[d][1] = __ldg(w8 + (u + GI_D) * 4);
#if !GI_TWO_PHASE
            gi_fold(cc[d], rs[d], *(const float2 *)(ub + 512), acc0, acc8);
            if (u + GI_D < us)
                rs[d][0] = __ldg(s0 + u + GI_D), rs[d][1] = __ldg(s8 + u + GI_D), rs[d][2] = __ldg(b0 + u + GI_D),
                rs[d][3] = __ldg(b8 + u + GI_D);
#endif
        }
#if GI_TWO_PHASE
#pragma unroll
        for (int d = 0; d < GI_D; d++) {
            const int u = base + d;
            if (u >= us) break;
            gi_fold(cc[d], rs[d], *(const float2 *)(sm + (size_t)u * GI_UNIT_BYTES + 512), acc0, acc8);
            if (u + GI_D < us)
                rs[d][0] = __ldg(s0 + u + GI_D), rs[d][1] = __ldg(s8 + u + GI_D), rs[d][2] = __ldg(b0 + u + GI_D),
                rs[d][3] = __ldg(b8 + u + GI_D);
        }
#endif
    }
    if (t == 0) part[(int64_t)s * n_out + og] = acc0, part[(int64_t)s * n_out + og8] = acc8;
}

__global__ void gemv_int_sum(const float *__restrict__ part, int n_out, int S, float *__restrict__ y) {
    cu_pdl_enter();
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n_out) return;
    float v = part[o];
    for (int s = 1; s < S; s++) v += part[(int64_t)s * n_out + o];
    y[o] = v;
}

static int split_for(int64_t n_out, int64_t K) { /* blocks near 2 per SM-ish, slices of >= 16 units */
    int S = 1;
    while ((n_out / GI_OUT) * S < 256 && K / 64 / (S * 2) >= 16) S *= 2;
    return S;
}

static void run_int(const qweight &W, const float *x, float *part, float *y) {
    const int S = split_for(W.n_out, W.n_in), U = (int)(W.n_in / 64);
    const size_t smem = (size_t)((U + S - 1) / S) * GI_UNIT_BYTES;
    const unsigned blocks = (unsigned)(W.n_out / GI_OUT) * (unsigned)S;
    CK(cu_launch(gemv_int_kernel, blocks, GI_WARPS * 32, smem, 0, x, (int)W.n_in, (const uint32_t *)W.w,
                 (const uint16_t *)W.scales, (const uint16_t *)W.biases, (int)W.n_out, S, S > 1 ? part : y));
    if (S > 1) CK(cu_launch(gemv_int_sum, (unsigned)((W.n_out + 255) / 256), 256, 0, 0, part, (int)W.n_out, S, y));
}

int main(void) {
    CK(cudaSetDevice(0));
    CK(cudaFuncSetAttribute(gemv_int_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    const int64_t shapes[4][2] = {{4096, 4096}, {12288, 4096}, {4096, 12288}, {248320, 4096}};
    const int64_t KMAX = 12288, NMAX = 248320;
    std::vector<float> hx((size_t)KMAX);
    for (size_t i = 0; i < hx.size(); i++) hx[i] = (float)(hash32(i, 77) >> 8) * (2.0f / 16777216.0f) - 1.0f;
    for (size_t i = 0; i < hx.size(); i += 97) hx[i] *= 1000.0f; /* some outliers: each unit's exponent differs */
    float *dx, *dy, *dpart;
    CK(cudaMalloc(&dx, hx.size() * 4));
    CK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dy, (size_t)NMAX * 4));
    CK(cudaMalloc(&dpart, (size_t)16 * NMAX * 4));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int fails = 0;
    printf("| shape | S | rel err | single us | pipelined us | GB/s pipelined |\n|---|---|---|---|---|---|\n");
    for (int si = 0; si < 4; si++) {
        const int64_t N = shapes[si][0], K = shapes[si][1];
        wset ws = make_weight(N, K, 64, 1000u + (uint32_t)si);
        for (int c = 0; c < ws.copies; c++) ws.W[c].tiled = 0; /* gemv_int_kernel reads its codes row-major */
        CK(cudaMemset(dy, 0xff, (size_t)N * 4)); /* NaN: unwritten outputs show */
        run_int(ws.W[0], dx, dpart, dy);
        CK(cudaDeviceSynchronize());
        std::vector<float> hy((size_t)N), wr;
        CK(cudaMemcpy(hy.data(), dy, hy.size() * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        int64_t bad = 0;
        for (int64_t o = 0; o < N; o++) bad += !isfinite(hy[(size_t)o]);
        for (int s = 0; s < 256; s++) {
            const int64_t o = s == 255 ? N - 1 : (int64_t)s * (N / 255) + (s * 7) % 13;
            weight_row(ws.W[0], o, wr);
            double ref = 0;
            for (int64_t k = 0; k < K; k++) ref += (double)wr[(size_t)k] * hx[(size_t)k];
            num = std::max(num, fabs(ref - hy[(size_t)o])), den = std::max(den, fabs(ref));
        }
        const double err = num / den;
        const int ok = err < 2e-6 && bad == 0;
        fails += !ok;
        std::vector<float> tv;
        for (int it = -3; it < 30; it++) {
            CK(cudaEventRecord(e0));
            run_int(ws.W[(it + 3) % ws.copies], dx, dpart, dy);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 0) tv.push_back(ms);
        }
        CK(cudaEventRecord(e0));
        for (int it = 0; it < 20; it++) run_int(ws.W[it % ws.copies], dx, dpart, dy);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float pms;
        CK(cudaEventElapsedTime(&pms, e0, e1));
        const double pipe_us = pms * 1000.0 / 20.0, wbytes = (double)ws.w_bytes + 2.0 * ws.sb_bytes;
        printf("| %lldx%lld | %d | %.2e%s%s | %.1f | %.1f | %.0f |\n", (long long)N, (long long)K,
               split_for(N, K), err, bad ? " UNWRITTEN" : "", ok ? "" : " FAIL", median_us(tv), pipe_us,
               wbytes / (pipe_us * 1e-6) / 1e9);
        free_weight(ws);
    }
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dpart));
    printf("%s: %d failed checks\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
