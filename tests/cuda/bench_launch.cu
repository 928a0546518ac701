/* bench_launch.cu: what one kernel boundary costs in a chain of dependent launches, the floor a decode step
 * of ~N small kernels cannot go under. Each row of the table is a chain of CHAIN launches of one kernel,
 * each waiting for the one before (cu_pdl_enter), timed with CUDA events around the whole chain (median
 * of 9 chains) and divided by CHAIN:
 *   empty     blocks that only wait and return
 *   norm      a row norm of 4096 floats per block (read 16 KB, block sum, write 16 KB): add_rmsnorm's shape
 * over 1, 132 and 264 blocks of 256 threads, launched plainly (pdl off), with programmatic dependent launch
 * (pdl on: quill's decode launches) and as a CUDA graph of the pdl-on chain. Launched one by one, a chain is
 * bound by the host's launch rate; the second table queues each chain behind a kernel that spins for SPIN_MS,
 * so the host is far ahead and the time from the spinner's end to the chain's end is the GPU's own cost of a
 * stream launch, with kernel parameters of 24 bytes, about a gt_job's (520) and a cu_tab's (2,072), against the
 * same chains as graphs. Built and run by tests/cuda/bench_launch.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "../../src/backend/cuda/cuda_common.cuh"

#include "bench_check.h"

enum { CHAIN = 400, DIM = 4096, REPS = 9, SPIN_MS = 4 };

__global__ void empty_kernel(float *buf) {
    cu_pdl_enter();
    if (threadIdx.x == 1023) buf[0] = 0.0f; /* never: blockDim is 256 */
}

__device__ __forceinline__ void norm_kernel_body(float *buf) {
    cu_pdl_enter();
    float *row = buf + (size_t)blockIdx.x * DIM;
    __shared__ float red[33];
    float v[DIM / 256], ss = 0.0f;
#pragma unroll
    for (int i = 0; i < DIM / 256; i++) v[i] = row[threadIdx.x + 256 * i], ss += v[i] * v[i];
    const float s = block_sum(ss, red);
    const float r = rsqrtf(s / DIM + 1e-6f);
#pragma unroll
    for (int i = 0; i < DIM / 256; i++) row[threadIdx.x + 256 * i] = v[i] * r;
}
__global__ void __launch_bounds__(256) norm_kernel(float *buf) { norm_kernel_body(buf); }

/* Kernel parameters of B bytes besides buf (B = 0: none). */
template <int B> struct blob {
    alignas(16) unsigned char b[B];
};
template <int B> __global__ void empty_param_kernel(float *buf, const __grid_constant__ blob<B> p) {
    cu_pdl_enter();
    if (threadIdx.x == 1023) buf[0] = p.b[B - 1]; /* never: blockDim is 256 */
}
template <int B> __global__ void __launch_bounds__(256) norm_param_kernel(float *buf, const __grid_constant__ blob<B> p) {
    if (threadIdx.x == 1023) buf[0] = p.b[B - 1];
    norm_kernel_body(buf);
}
__global__ void spin_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

/* one chain of CHAIN launches, plain or programmatic (pdl) */
static void chain(void (*k)(float *), int blocks, float *buf, cudaStream_t st, int pdl) {
    for (int i = 0; i < CHAIN; i++) CK(cu_launch_pdl(pdl != 0, k, dim3(blocks), dim3(256), 0, st, buf));
}

/* Microseconds per launch of a chain that issue(st) puts on the stream: median over REPS (after a warm-up),
 * timed from the chain's start, or with spin > 0 from the end of a kernel spinning that many cycles before it
 * (the host far ahead); graph: the chain captured once and replayed. */
template <typename F> static double time_chain(cudaStream_t st, F issue, bool graph, long long spin) {
    cudaGraphExec_t exec = NULL;
    if (graph) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        issue();
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&exec, g, 0));
        CK(cudaGraphDestroy(g));
    }
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int r = 0; r < REPS + 1; r++) {
        if (spin > 0) {
            spin_kernel<<<1, 32, 0, st>>>(spin);
            CK(cudaGetLastError());
        }
        CK(cudaEventRecord(a, st));
        if (graph) CK(cudaGraphLaunch(exec, st));
        else issue();
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float t;
        CK(cudaEventElapsedTime(&t, a, b));
        if (r) ms.push_back(t); /* the first is a warm-up */
    }
    std::sort(ms.begin(), ms.end());
    if (exec) CK(cudaGraphExecDestroy(exec));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return 1000.0 * ms[REPS / 2] / CHAIN;
}

/* Launched one by one: mode 0 plain, 1 programmatic, 2 a graph of the programmatic chain. */
static double per_launch(void (*k)(float *), int blocks, float *buf, cudaStream_t st, int mode) {
    return time_chain(st, [&] { chain(k, blocks, buf, st, mode != 0); }, mode == 2, 0);
}

/* The GPU's cost of a launch with the host ahead (programmatic launches of kernels with B bytes of parameters). */
template <int B>
static double queued(bool norm, int blocks, float *buf, cudaStream_t st, bool graph, long long spin) {
    blob<B> p;
    memset(&p, 0, sizeof p);
    void (*k)(float *, const blob<B>) = norm ? norm_param_kernel<B> : empty_param_kernel<B>;
    return time_chain(st, [&] {
        for (int i = 0; i < CHAIN; i++) CK(cu_launch_pdl(true, k, dim3(blocks), dim3(256), 0, st, buf, p));
    }, graph, spin);
}

int main(void) {
    float *buf;
    CK(cudaMalloc(&buf, (size_t)264 * DIM * sizeof(float)));
    CK(cudaMemset(buf, 0, (size_t)264 * DIM * sizeof(float)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("| kernel | blocks | pdl off us | pdl on us | graph (pdl) us |\n|---|---|---|---|---|\n");
    const int blocks[3] = {1, 132, 264};
    for (int kind = 0; kind < 2; kind++)
        for (int b = 0; b < 3; b++) {
            void (*k)(float *) = kind ? norm_kernel : empty_kernel;
            printf("| %s | %d | %.2f | %.2f | %.2f |\n", kind ? "norm 4096" : "empty", blocks[b],
                   per_launch(k, blocks[b], buf, st, 0), per_launch(k, blocks[b], buf, st, 1),
                   per_launch(k, blocks[b], buf, st, 2));
        }
    int dev = 0, khz = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
    const long long spin = (long long)khz * SPIN_MS; /* cycles of SPIN_MS at the base clock: at least that long */
    printf("\nHost ahead (each chain queued behind a %d ms kernel), pdl on, microseconds per launch:\n", SPIN_MS);
    printf("| kernel | blocks | params 24 B: stream / graph | 520 B | 2,072 B |\n|---|---|---|---|---|\n");
    for (int kind = 0; kind < 2; kind++)
        for (int b = 1; b < 3; b++) {
            const bool norm = kind != 0;
            printf("| %s | %d | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |\n", norm ? "norm 4096" : "empty", blocks[b],
                   queued<16>(norm, blocks[b], buf, st, false, spin), queued<16>(norm, blocks[b], buf, st, true, spin),
                   queued<512>(norm, blocks[b], buf, st, false, spin), queued<512>(norm, blocks[b], buf, st, true, spin),
                   queued<2064>(norm, blocks[b], buf, st, false, spin),
                   queued<2064>(norm, blocks[b], buf, st, true, spin));
        }
    CK(cudaFree(buf));
    return 0;
}
