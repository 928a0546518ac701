/* bench_stream.cu: how fast the one-row 4-bit decode matmul's weight loads alone can stream, against other ways of
 * reading the same bytes (docs/performance.md, forty-fifth pass). No arithmetic: every kernel xors what it loads into
 * one word a thread and stores it only if it equals a value it never takes. Built and run with nvcc alone:
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc tests/cuda/bench_stream.cu -o bench_stream
 * Kernels, each over a 4-bit weight of n_out rows of K codes (K / 2 bytes a row), in blocks of 8 warps x 16 rows, the
 * K units (64 codes, 32 bytes a row) cut into S slices, D units of loads in flight a warp:
 *   rows:    the row-major pattern (gt_wload before the tiles): lane (g, t) loads 8 bytes of rows g and g + 8 a unit, so
 *            a warp's load instruction reads 32 bytes from each of 8 rows;
 *   packed:  the same bytes laid out so that a warp's unit is 512 contiguous bytes, one 16-byte load a lane (the tiles
 *            of cuda_q4_tiled.cuh, which gt_wload reads now);
 *   copy:    every thread of a one-wave grid reads 16-byte words, grid-stride, over the whole weight.
 * Each runs at the decode kernels' occupancy (dynamic shared memory caps the blocks an SM: the lean variant's 3, the
 * default's 2) and at the occupancy its registers allow. The weights are bench_weights.h's (random codes, rotating
 * copies so that L2, 60 MB, keeps none). Each timing is one CUDA graph of LAUNCHES launches, launch i on copy
 * i % copies, replayed: bench_chain.h's median of its event-timed runs; the table gives us a launch and TB/s of code
 * bytes (scales and biases are not read). Session 47 (docs/performance.md, forty-sixth pass): the rows pattern
 * 1.6-2.2 TB/s at the kernels' occupancy, packed 2.0-3.6; that led to cuda_q4_tiled.cuh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_gemv.cuh"
#include "bench_check.h"
#include "bench_weights.h"
#include "bench_chain.h"

#define LAUNCHES 24
#define MAGIC 0x9e3779b9u

template <int D, bool PACKED>
__global__ void __launch_bounds__(256) rows_kernel(const unsigned char *__restrict__ w, int n_out, int K, int S,
                                                   unsigned *__restrict__ sink) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n_ob = n_out / 128, U = K / 64, row_bytes = K / 2;
    const int s = blockIdx.x / n_ob, ob = blockIdx.x % n_ob; /* slice-major, as gt_locate */
    const int ub = s * U / S, us = (s + 1) * U / S - ub;
    const int o0 = ob * 128 + warp * 16;
    unsigned acc = 0;
    if (PACKED) { /* the warp's 16 rows as units of 512 contiguous bytes */
        const uint4 *p = (const uint4 *)(w + (int64_t)o0 * row_bytes + (int64_t)ub * 512) + lane;
        for (int u = 0; u < us; u += D) {
            uint4 v[D];
#pragma unroll
            for (int d = 0; d < D; d++) v[d] = u + d < us ? __ldg(p + (u + d) * 32) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int d = 0; d < D; d++) acc ^= v[d].x ^ v[d].y ^ v[d].z ^ v[d].w;
        }
    } else {
        const uint2 *p0 = (const uint2 *)(w + (int64_t)(o0 + g) * row_bytes + ub * 32 + t * 8);
        const uint2 *p8 = (const uint2 *)(w + (int64_t)(o0 + g + 8) * row_bytes + ub * 32 + t * 8);
        for (int u = 0; u < us; u += D) {
            uint2 a[D], b[D];
#pragma unroll
            for (int d = 0; d < D; d++) {
                a[d] = u + d < us ? __ldg(p0 + (u + d) * 4) : make_uint2(0, 0);
                b[d] = u + d < us ? __ldg(p8 + (u + d) * 4) : make_uint2(0, 0);
            }
#pragma unroll
            for (int d = 0; d < D; d++) acc ^= a[d].x ^ a[d].y ^ b[d].x ^ b[d].y;
        }
    }
    if (acc == MAGIC) sink[blockIdx.x * 256 + threadIdx.x] = acc;
}

__global__ void __launch_bounds__(256) copy_kernel(const uint4 *__restrict__ w, int64_t n16, unsigned *__restrict__ sink) {
    unsigned acc = 0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        const uint4 a = __ldg(w + i), b = __ldg(w + i + stride), c = __ldg(w + i + 2 * stride), d = __ldg(w + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n16; i += stride) {
        const uint4 a = __ldg(w + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == MAGIC) sink[blockIdx.x * 256 + threadIdx.x] = acc;
}

int main(void) {
    const int sms = cu_sms();
    /* the 9B's one-row shapes with today's slices (GT_BLOCKS_Q4 256): gate + up as one weight, GDN in, out, down */
    const struct { const char *name; int n_out, K, S; } shapes[] = {
        {"gate+up 24576x4096", 24576, 4096, 4}, {"in 12288x4096", 12288, 4096, 4},
        {"out 4096x4096", 4096, 4096, 8},       {"down 4096x12288", 4096, 12288, 8},
        {"head 248320x4096", 248320, 4096, 1}};
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    unsigned *sink;
    CK(cudaMalloc(&sink, (size_t)1 << 24));
    /* each kernel at the occupancy the decode kernels have (dynamic shared memory caps the blocks an SM: the lean
     * variant's 3, the default's 2) and at the occupancy its registers allow */
    struct cfg { const char *name; void (*k)(const unsigned char *, int, int, int, unsigned *); int per_sm; };
    const cfg cfgs[] = {{"rows D=4, 3/SM", rows_kernel<4, false>, 3}, {"rows D=8, 2/SM", rows_kernel<8, false>, 2},
                        {"rows D=8", rows_kernel<8, false>, 0},       {"packed D=8, 2/SM", rows_kernel<8, true>, 2},
                        {"packed D=8", rows_kernel<8, true>, 0},      {"copy (one wave)", NULL, 0}};
    const int n_cfg = sizeof cfgs / sizeof cfgs[0];
    for (int c = 0; c < n_cfg; c++)
        if (cfgs[c].k) CK(cudaFuncSetAttribute(cfgs[c].k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    printf("| weight | S | blocks |");
    for (int c = 0; c < n_cfg; c++) printf(" %s |", cfgs[c].name);
    printf("\n|---|---|---|");
    for (int c = 0; c < n_cfg; c++) printf("---|");
    printf("\n");
    for (const auto &sh : shapes) {
        wset ws = make_weight(sh.n_out, sh.K, 64, 11u);
        const size_t bytes = ws.w_bytes;
        const int blocks = sh.n_out / 128 * sh.S;
        printf("| %s | %d | %d |", sh.name, sh.S, blocks);
        for (int c = 0; c < n_cfg; c++) {
            /* the launches as one graph, so that the host's launch rate does not bound the small weights */
            const size_t smem = cfgs[c].per_sm ? (size_t)(220 * 1024) / cfgs[c].per_sm : 0;
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < LAUNCHES; i++) {
                const unsigned char *w = (const unsigned char *)ws.W[i % ws.copies].w;
                if (cfgs[c].k) cfgs[c].k<<<blocks, 256, smem, st>>>(w, sh.n_out, sh.K, sh.S, sink);
                else copy_kernel<<<sms * 8, 256, 0, st>>>((const uint4 *)w, (int64_t)(bytes / 16), sink);
            }
            CK(cudaStreamEndCapture(st, &graph));
            CK(cudaGraphInstantiate(&exec, graph, 0));
            const double us = time_median(st, [&] { CK(cudaGraphLaunch(exec, st)); }) / LAUNCHES;
            CK(cudaGraphExecDestroy(exec));
            CK(cudaGraphDestroy(graph));
            printf(" %.1f us, %.2f TB/s |", us, (double)bytes / (us * 1e-6) / 1e12);
        }
        printf("\n");
        free_weight(ws);
    }
    return 0;
}
