/* bench_chain.h: what the chain benches (bench_persist.cu, bench_ws.cu, bench_ring.cu) share: the start of main and
 * the chain's input, the chain itself (chain_build), one lane's piece of a 4-bit x staged (chain_q4_piece), a
 * relaxed flag load, its outputs read back (in op order) and poisoned, the median of REPS event-timed runs
 * (after one more), the bitwise comparison of a mode's outputs with the stream's, the stream's and a graph's runs, and
 * the copy bandwidth (read + write) that the floors divide by; compare_close for a mode of other arithmetic, and
 * chain_q4_weight, a 4-bit weight of a chain. A chain type C has W[n][2] (qweight), count[n] (weights an op) and
 * y[n][2] (their outputs). Include after cuda_gemv.cuh and bench_weights.h. */
#ifndef QUILL_BENCH_CHAIN_H
#define QUILL_BENCH_CHAIN_H

#include <math.h>

#define REPS 20

__global__ void fill_x(float *p, int n, uint32_t seed) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = (float)(hash32((uint64_t)i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

/* The bench's start: the decode matmul's kernel attributes (gemv_tc_init: include cuda_gemv.cuh first), a stream, and
 * the chain's input x0 (4,096 values in [-1, 1)). */
static float *chain_start(cudaStream_t *st) {
    CK(gemv_tc_init());
    CK(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
    float *x0;
    CK(cudaMalloc(&x0, 4096 * sizeof(float)));
    fill_x<<<16, 256>>>(x0, 4096, 7u);
    CK(cudaGetLastError());
    return x0;
}

/* A flag another block raises, read without ordering (the reader fences once it has seen it up). */
__device__ __forceinline__ unsigned ld_relaxed_gpu(const unsigned *p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

template <typename C> static std::vector<float> outputs(const C &c, int n_ops) {
    CK(cudaDeviceSynchronize());
    std::vector<float> all;
    for (int i = 0; i < n_ops; i++)
        for (int j = 0; j < c.count[i]; j++) {
            std::vector<float> h((size_t)c.W[i][j].n_out);
            CK(cudaMemcpy(h.data(), c.y[i][j], h.size() * 4, cudaMemcpyDeviceToHost));
            all.insert(all.end(), h.begin(), h.end());
        }
    return all;
}
/* The number of values of each output in outputs()' order. */
template <typename C> static std::vector<size_t> output_sizes(const C &c, int n_ops) {
    std::vector<size_t> n;
    for (int i = 0; i < n_ops; i++)
        for (int j = 0; j < c.count[i]; j++) n.push_back((size_t)c.W[i][j].n_out);
    return n;
}
template <typename C> static void poison(const C &c, int n_ops) {
    for (int i = 0; i < n_ops; i++)
        for (int j = 0; j < c.count[i]; j++) CK(cudaMemset(c.y[i][j], 0xff, (size_t)c.W[i][j].n_out * 4));
}

template <typename F> static double time_median(cudaStream_t st, F issue) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int r = 0; r < REPS + 1; r++) {
        CK(cudaEventRecord(a, st));
        issue();
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float t;
        CK(cudaEventElapsedTime(&t, a, b));
        if (r) ms.push_back(t);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1e3;
}

static int n_fail;
static void compare(const char *mode, const std::vector<float> &ref, const std::vector<float> &got) {
    size_t bad = 0, nonfinite = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        bad += memcmp(&ref[i], &got[i], 4) != 0;
        nonfinite += !isfinite(got[i]);
    }
    if (bad || nonfinite) {
        printf("FAIL %s: %zu of %zu outputs differ from the stream's, %zu not finite\n", mode, bad, ref.size(),
               nonfinite);
        n_fail++;
    }
}
/* A mode whose arithmetic is not the stream's (another unit): each op's outputs within tol of that op's largest |ref|
 * (ops: the chain's outputs in order, n_op values each; a wrong layout or a race gives errors of order 1). */
static void compare_close(const char *mode, const std::vector<float> &ref, const std::vector<float> &got,
                          const std::vector<size_t> &n_op, double tol) {
    double worst = 0.0;
    size_t at = 0, nonfinite = 0;
    for (size_t n : n_op) {
        double big = 0.0, err = 0.0;
        for (size_t i = at; i < at + n; i++) {
            big = std::max(big, fabs((double)ref[i]));
            err = std::max(err, fabs((double)got[i] - (double)ref[i]));
            nonfinite += !isfinite(got[i]);
        }
        worst = std::max(worst, big > 0.0 ? err / big : err);
        at += n;
    }
    printf("%s: largest difference from the stream %.2e of an op's largest output\n", mode, worst);
    if (!(worst <= tol) || nonfinite) {
        printf("FAIL %s: %.2e > %.0e, %zu not finite\n", mode, worst, tol, nonfinite);
        n_fail++;
    }
}
/* The stream's own outputs must at least be finite. */
static void check_finite(const std::vector<float> &ref) {
    size_t nonfinite = 0;
    for (float v : ref) nonfinite += !isfinite(v);
    if (nonfinite) { printf("FAIL stream: %zu outputs not finite\n", nonfinite); n_fail++; }
}

/* The stream's outputs (poisoned first, then run once: *ref), its time, and a graph of its launches captured once:
 * its outputs must be the stream's, and its time. run() issues the stream's launches on st. */
template <typename C, typename R>
static void stream_and_graph(const C &c, int n_ops, cudaStream_t st, R run, std::vector<float> *ref, double *t_stream,
                             double *t_graph) {
    poison(c, n_ops);
    run();
    *ref = outputs(c, n_ops);
    check_finite(*ref);
    *t_stream = time_median(st, run);
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    run();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&exec, g, 0));
    poison(c, n_ops);
    CK(cudaGraphLaunch(exec, st));
    compare("graph", *ref, outputs(c, n_ops));
    *t_graph = time_median(st, [&] { CK(cudaGraphLaunch(exec, st)); });
}

/* A chain's 4-bit g64 weight: random codes, read in the tile order as the model's are (cuda_q4_tiled.cuh), and scales
 * and biases small enough that 32 ops in a row keep the values finite; *bytes grows by its codes, scales and biases. */
static qweight chain_q4_weight(int64_t n_out, int64_t K, uint32_t seed, size_t *bytes) {
    qweight q = {QW_AFFINE, n_out, K, NULL, NULL, NULL, QW_BF16, 4, 64, 1, 0};
    const size_t wb = (size_t)(n_out * K) / 2, sb = (size_t)(n_out * (K / 64)) * 2;
    CK(cudaMalloc(&q.w, wb));
    CK(cudaMalloc(&q.scales, sb));
    CK(cudaMalloc(&q.biases, sb));
    fill_words<<<2048, 256>>>((uint32_t *)q.w, wb / 4, seed);
    fill_bf16<<<1024, 256>>>((__nv_bfloat16 *)q.scales, sb / 2, seed + 1, 0.004f, 0.002f);
    fill_bf16<<<1024, 256>>>((__nv_bfloat16 *)q.biases, sb / 2, seed + 2, -0.03f, 0.004f);
    CK(cudaGetLastError());
    *bytes += wb + 2 * sb;
    return q;
}

/* Bytes a second of a 1 GiB device-to-device copy, read + write. */
static double copy_bandwidth(cudaStream_t st) {
    const size_t cb = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, cb));
    CK(cudaMalloc(&b, cb));
    const double copy_us = time_median(st, [&] { CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, st)); });
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * (double)cb / (copy_us * 1e-6);
}

/* The chain: `layers` layers of in_proj 12288x4096, out 4096x4096, gate + up 2 x 12288x4096 (one op of two weights)
 * and down 4096x12288, every weight its own (weight(n_out, K, seed, &c.bytes) makes it), each with its output and the
 * stream's split-K partials and tickets. Each op's x is the op before's first output (the first op's: x0). C has
 * W, count, y, part, tick ([ops][2]), x ([ops]) and bytes. */
template <typename C, typename F> static void chain_build(C &c, int layers, const float *x0, F weight) {
    const int64_t shape[4][2] = {{12288, 4096}, {4096, 4096}, {12288, 4096}, {4096, 12288}};
    for (int l = 0; l < layers; l++) {
        const int o = l * 4;
        for (int k = 0; k < 4; k++) {
            c.count[o + k] = k == 2 ? 2 : 1;
            for (int j = 0; j < c.count[o + k]; j++) {
                const int64_t n_out = shape[k][0];
                const qweight q = weight(n_out, shape[k][1], 1000u * (l + 1) + 10 * k + 5 * j, &c.bytes);
                c.W[o + k][j] = q;
                const size_t ticks = gemv_tc_ticks(&q, 1, 1, 0);
                CK(cudaMalloc(&c.y[o + k][j], (size_t)n_out * sizeof(float)));
                CK(cudaMalloc(&c.part[o + k][j], std::max<size_t>(gemv_tc_part_floats(&q, 1), 16 * n_out) * 4));
                CK(cudaMalloc(&c.tick[o + k][j], ticks * 4));
                CK(cudaMemset(c.tick[o + k][j], 0, ticks * 4));
            }
        }
        c.x[o] = l ? c.y[o - 1][0] : x0; /* in_proj: the layer before's down */
        c.x[o + 1] = c.y[o][0];          /* out: in_proj's first 4096 */
        c.x[o + 2] = c.y[o + 1][0];      /* gate + up: out */
        c.x[o + 3] = c.y[o + 2][0];      /* down: gate */
    }
    CK(cudaDeviceSynchronize());
}

/* Unit u of a ring's slot of `units` 4-bit units (their codes, 512 bytes each, then a scale record and a bias record of
 * 32 bytes each, as the tiles keep them: bench_ws's slots, bench_ring's stages): the lane's 16 bytes of codes, and in
 * sb its rows' scale pair and bias pair (gt_unit's, lane g's pair at 4 g). */
__device__ __forceinline__ uint4 chain_slot_unit(const unsigned char *slot, int units, int u, int lane,
                                                 uint32_t (&sb)[2]) {
    const int g = lane >> 2;
    sb[0] = *(const uint32_t *)(slot + units * 512 + u * 32 + 4 * g);
    sb[1] = *(const uint32_t *)(slot + units * 544 + u * 32 + 4 * g);
    return *(const uint4 *)(slot + u * 512 + lane * 16);
}
/* A unit that costs nothing (the benches' FREE modes; values wrong): its words xored into the sums, the loads kept. */
__device__ __forceinline__ void chain_free_unit(float (&acc)[1][4], uint4 a, const uint32_t (&sb)[2]) {
    acc[0][0] = __uint_as_float(__float_as_uint(acc[0][0]) ^ a.x ^ a.y ^ sb[0]);
    acc[0][1] = __uint_as_float(__float_as_uint(acc[0][1]) ^ a.z ^ a.w ^ sb[1]);
}

/* One lane's piece of a 4-bit op's x in gt_stage's form: v, the t share (16 values) of unit u, as B fragments at xf
 * (unit u's at (u / 4) 64 + (u % 4) 8: k-step pair jp 32 apart, the hi part at lane t, the lo at 4 + t) and the unit's
 * X sum (hi + lo, over the quad) into X[u] by lane t = 0. The four lanes of a quad call it together (shuffles). */
__device__ __forceinline__ void chain_q4_piece(const float (&v)[16], uint4 *xf, float *X, int u, int t) {
    float h[16];
#pragma unroll
    for (int e = 0; e < 16; e++) h[e] = __bfloat162float(__float2bfloat16_rn(v[e]));
#pragma unroll
    for (int part = 0; part < 2; part++)
#pragma unroll
        for (int jp = 0; jp < 2; jp++) {
            uint32_t b[4];
#pragma unroll
            for (int qq = 0; qq < 2; qq++) {
                const int e0 = gt_kstep_e0<64>(2 * jp + qq); /* k-step j's pairs (e0, e0 + 4), (e0 + 1, e0 + 5) */
                b[2 * qq] = cu_pack_bf16x2(gt_part(v, h, e0, part), gt_part(v, h, e0 + 4, part));
                b[2 * qq + 1] = cu_pack_bf16x2(gt_part(v, h, e0 + 1, part), gt_part(v, h, e0 + 5, part));
            }
            xf[(u >> 2) * 64 + jp * 32 + (u & 3) * 8 + part * 4 + t] = make_uint4(b[0], b[1], b[2], b[3]);
        }
    float sum = 0.0f; /* gt_stage's X sum: the lane's hi + lo in order, then over the quad */
#pragma unroll
    for (int e = 0; e < 16; e++) sum += h[e] + gt_part(v, h, e, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (t == 0) X[u] = sum;
}

#endif
