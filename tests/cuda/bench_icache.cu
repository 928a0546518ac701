/* tests/cuda/bench_icache.cu: what a kernel's first pass through its code costs when the code is not in the SM's
 * instruction caches, or not in L2 either (docs/performance.md, sixty-second pass).
 *
 * A decode step streams ~5 GB of weights through the 50-60 MB L2 and runs a dozen kernel instances between two runs of
 * the same one, so a launch may find its code in neither. This times a straight-line run of N independent FFMAs (16
 * bytes of SASS each) in every block, clock64 before and after, with the same kernel run just before it (warm) or:
 *   l2         another kernel of the same size (that one's code displaces this one's in the SMs' caches)
 *   stream     a read of MiB of a buffer with plain loads (this kernel's code leaves L2)
 *   stream_ef  the same read with an L2 evict_first policy (createpolicy + ld.global.nc.L2::cache_hint), as the
 *              many-row matmuls load their weights (cu_ld_evict_first, GT_W_EVICT)
 *   l2 + ...   the other kernel, then the read: the code in neither
 * and prints the median block's cycles for each, the median of reps runs. The FFMAs take immediates unique to each
 * (size, variant), so no two kernels share code.
 * usage: bench_icache [MiB to stream (default 512)] [reps (default 9)]
 * build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc tests/cuda/bench_icache.cu -o bench_icache */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_common.cuh" /* cu_ld_evict_first */
#include "bench_check.h"

template <bool EF> __global__ void stream_kernel(const uint4 *buf, size_t n, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = EF ? cu_ld_evict_first(buf + i) : __ldg(buf + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc; /* keeps the loads */
}

/* N FFMAs in 4 independent chains, each with its own immediate: N * 16 bytes of straight-line code. */
template <int N, int V> __global__ void probe_kernel(long long *cyc, float s) {
    float a0 = s + threadIdx.x, a1 = a0 + 1.0f, a2 = a0 + 2.0f, a3 = a0 + 3.0f;
    asm volatile("" : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3));
    const long long c0 = clock64();
    asm volatile("" : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3));
#pragma unroll
    for (int i = 0; i < N; i += 4) {
        const float k = 1.0f + (float)(V * N + i + 1) * 1.0e-7f;
        a0 = fmaf(a0, k, 0.5f), a1 = fmaf(a1, k, 0.25f), a2 = fmaf(a2, k, 0.125f), a3 = fmaf(a3, k, 0.0625f);
    }
    asm volatile("" : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3));
    const long long c1 = clock64();
    if (threadIdx.x == 0) cyc[blockIdx.x] = c1 - c0;
    if (a0 + a1 + a2 + a3 == 12345.0f) cyc[0] = -1;
}

static int g_blocks;
static long long *g_cyc;

static long long median_block() {
    std::vector<long long> h(g_blocks);
    CK(cudaMemcpy(h.data(), g_cyc, sizeof(long long) * g_blocks, cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    return h[g_blocks / 2];
}

template <int N> static void run_size(const uint4 *buf, size_t n16, unsigned *sink, int reps) {
    std::vector<long long> res[6];
    probe_kernel<N, 0><<<g_blocks, 256>>>(g_cyc, 1.0f); /* first load of the module's code */
    probe_kernel<N, 1><<<g_blocks, 256>>>(g_cyc, 1.0f);
    CK(cudaDeviceSynchronize());
    for (int r = 0; r < reps; r++) {
        for (int m = 0; m < 6; m++) {
            if (m == 0) probe_kernel<N, 0><<<g_blocks, 256>>>(g_cyc, 1.0f);
            if (m == 1 || m >= 4) probe_kernel<N, 1><<<g_blocks, 256>>>(g_cyc, 1.0f);
            if (m == 2 || m == 4) stream_kernel<false><<<1024, 256>>>(buf, n16, sink);
            if (m == 3 || m == 5) stream_kernel<true><<<1024, 256>>>(buf, n16, sink);
            probe_kernel<N, 0><<<g_blocks, 256>>>(g_cyc, 1.0f);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            res[m].push_back(median_block());
        }
    }
    printf("| %6d | %7d |", N, N * 16 / 1024);
    for (int m = 0; m < 6; m++) {
        std::sort(res[m].begin(), res[m].end());
        printf(" %9lld |", res[m][reps / 2]);
    }
    printf("\n");
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 512;
    const int reps = argc > 2 ? atoi(argv[2]) : 9;
    if (mib < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_icache [MiB to stream, >= 1] [reps, >= 1]\n");
        return 2;
    }
    int dev = 0, sms = 0, clk = 0, l2 = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    g_blocks = 2 * sms;
    const size_t bytes = mib << 20, n16 = bytes / 16;
    uint4 *buf;
    unsigned *sink;
    CK(cudaMalloc(&buf, bytes));
    CK(cudaMemset(buf, 1, bytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMalloc(&g_cyc, sizeof(long long) * g_blocks));
    printf("%s: %d SMs, L2 %d MiB, max clock %.2f GHz; stream %zu MiB; %d blocks of 256; median of %d runs\n",
           prop.name, sms, l2 >> 20, clk / 1e6, mib, g_blocks, reps);
    printf("cycles for the straight-line code, the median block:\n\n");
    printf("| FFMAs | KiB (16 B each) | warm | l2 | stream | stream_ef | l2 + stream | l2 + stream_ef |\n"
           "|---|---|---|---|---|---|---|---|\n");
    run_size<256>(buf, n16, sink, reps);
    run_size<1024>(buf, n16, sink, reps);
    run_size<4096>(buf, n16, sink, reps);
    CK(cudaFree(buf));
    CK(cudaFree(sink));
    CK(cudaFree(g_cyc));
    return 0;
}
