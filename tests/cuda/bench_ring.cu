/* bench_ring.cu: a persistent 4-bit decode matmul chain fed by one copying thread an SM through a ring of large
 * stages, against the decode path's launches, on bench_ws.cu's chain (8 layers of in_proj 12288x4096, out 4096x4096,
 * gate + up 2 x 12288x4096, down 4096x12288, MLX 4-bit g64 in the decode path's tiles, cuda_q4_tiled.cuh; each op's x
 * the op before's first output; 1.0 GB, so L2 keeps none).
 *
 * The question (docs/performance.md, fifty-fourth pass). The loader-warp chain of bench_ws.cu streamed at 0.34 of the
 * floor with nothing to compute. There a loader warp's lanes each fed one consumer warp, 4.6 KB a slot, with an item's
 * place worked out by divisions in every lane's own loop (the lanes diverge, so the warp issues their copies one lane
 * at a time): the copies' issue, not the DRAM, bound it. Here:
 *   - an SM takes whole output groups (16 rows over all of K) of each weight, a contiguous run of groups, so its share
 *     of an op is one run of bytes in the tiles (codes, then the same run of scale and of bias records);
 *   - one thread copies the SM's runs, op after op, in stages of RB_CH units (RB_CH x 576 bytes, three bulk copies),
 *     into a ring of RB_NST stages, as soon as a stage is free: the weights depend on nothing, so it runs ahead across
 *     the ops' boundaries by up to the ring's bytes (~150 KB an SM, ~20 MB on the GPU);
 *   - RB_CW consumer warps compute with gt_unit itself. RB_EXACT=1 (the default): the decode path's K slices
 *     (gemv_tc_split), a warp a slice, its units in order, a team of S warps a group, the partials added in slice
 *     order as gt_sum_slices adds them, so every output is bitwise the stream's. RB_EXACT=0: a stage's units dealt to
 *     the warps in turn and the partials added in warp order (checked to 1e-4 of each op's largest output);
 *   - an op's consumers stage all of its x (gt_stage's B fragments and X sums, up to 48 KB for K = 12288) once the op
 *     before is done on every SM: one counter an op, raised by each SM after its groups and polled by one thread an
 *     SM (no split K across SMs, no tickets); the warps' partials are added once the SM's groups of a mat are in.
 * The SMs' extra groups (an op's groups modulo the SMs) rotate from op to op, so every SM copies about the same bytes.
 * RB_FREE=1: a unit is one xor a word (the copies and stages stay; values wrong, not checked): how fast the ring
 * streams. RB_NODEP=1: no wait for the op before (values wrong): what the op boundaries cost.
 * Prints one table: us a chain against its weight bytes over the copy bandwidth measured here. Built and run by
 * bench_ring.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_gemm_wg.cuh" /* wg_bar_*, wg_bulk_load */
#include "backend/cuda/cuda_gemv.cuh"
#include "bench_check.h"
#include "bench_weights.h"
#include "bench_chain.h"

#define LAYERS 8
#define OPS_PER_LAYER 4
#define N_OPS (LAYERS * OPS_PER_LAYER)
#define N_MATS (LAYERS * 5) /* gate and up are two */

#ifndef RB_CW
#define RB_CW 8 /* consumer warps */
#endif
#ifndef RB_CH
#define RB_CH 32 /* units a stage (a unit: 512 bytes of codes, 32 of scales, 32 of biases) */
#endif
#ifndef RB_NST
#define RB_NST 8 /* stages in the ring */
#endif
#ifndef RB_FREE
#define RB_FREE 0
#endif
#ifndef RB_NODEP
#define RB_NODEP 0
#endif
#ifndef RB_EXACT
#define RB_EXACT 1 /* 1: the decode path's slices and sums (bitwise its outputs); 0: a stage's units dealt out */
#endif
static_assert(RB_CH % RB_CW == 0, "a stage's units split evenly over the consumer warps");
static_assert(64 % RB_CH == 0, "a group's units (64 or 192) are whole stages");
#define RB_CODES (RB_CH * 512)
#define RB_STAGE (RB_CODES + RB_CH * 64)
#define RB_MAX_U 192 /* units of the longest K (12288) */
#define RB_XF (RB_MAX_U * 16)                   /* uint4 of B fragments: 256 bytes a unit */
#define RB_MAX_G 8 /* groups of a mat an SM takes at most (the host checks) */
#define RB_SMEM (RB_NST * RB_STAGE + RB_XF * 16 + RB_MAX_U * 4 + RB_MAX_G * RB_CW * 16 * 4)
#define RB_THREADS ((RB_CW + 1) * 32)

struct rb_mat {
    const unsigned char *w, *sc, *bi; /* tiles: group og's unit u at og U + u */
    const float *x;
    float *y;
    int U, groups, off, dep; /* off: the first SM of this op's extra groups; dep: the mat whose y is x (-1: none) */
    int S;                   /* RB_EXACT: the decode path's K slices (gemv_tc_split), a warp each */
};
struct rb_chain {
    rb_mat m[N_MATS];
    unsigned *done; /* a counter a mat: the SMs that have written their groups */
};
static_assert(sizeof(rb_chain) <= 4096, "the chain rides in the kernel's parameters");

/* SM s's groups of mat m: [*g0, *g1), whole groups, the remainder's extra one on SMs off .. off + rem - 1 (mod P). */
__device__ __forceinline__ void rb_range(const rb_mat &m, int s, int P, int *g0, int *g1) {
    const int r = (s + P - m.off) % P, base = m.groups / P, rem = m.groups % P;
    *g0 = r * base + min(r, rem);
    *g1 = *g0 + base + (r < rem);
}

/* The copying thread: the SM's runs of every mat in order, RB_CH units a stage. */
__device__ __forceinline__ void rb_copy(const rb_chain &ch, unsigned char *ring, uint32_t full, uint32_t empty) {
    unsigned n = 0;
    for (int i = 0; i < N_MATS; i++) {
        const rb_mat &m = ch.m[i];
        int g0, g1;
        rb_range(m, blockIdx.x, gridDim.x, &g0, &g1);
        for (size_t u = (size_t)g0 * m.U; u < (size_t)g1 * m.U; u += RB_CH, n++) {
            const int st = (int)(n % RB_NST);
            if (n >= RB_NST) wg_bar_wait_idle(empty + 8 * st, (n / RB_NST - 1) & 1);
            const uint32_t dst = (uint32_t)__cvta_generic_to_shared(ring + (size_t)st * RB_STAGE);
            wg_bar_expect(full + 8 * st, RB_STAGE);
            wg_bulk_load(dst, m.w + u * 512, RB_CODES, full + 8 * st);
            wg_bulk_load(dst + RB_CODES, m.sc + u * 32, RB_CH * 32, full + 8 * st);
            wg_bulk_load(dst + RB_CODES + RB_CH * 32, m.bi + u * 32, RB_CH * 32, full + 8 * st);
        }
    }
}

/* The consumers' own barrier (named barrier 1; the copying warp takes no part). */
__device__ __forceinline__ void rb_sync(void) { wg_named_sync<1>(RB_CW * 32); }

/* x of mat m (its U units) as gt_unit's B fragments and X sums, the consumer warps' pieces side by side. */
__device__ __forceinline__ void rb_stage_x(const rb_mat &m, uint4 *xf, float *Xs, int w, int lane) {
    for (int p = w * 32 + lane; p < m.U * 4; p += RB_CW * 32) { /* a piece: the t = p % 4 share of unit p / 4 */
        const float4 *px = (const float4 *)(m.x + (size_t)p * 16);
        float v[16];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 f = __ldcg(px + j);
            v[4 * j] = f.x, v[4 * j + 1] = f.y, v[4 * j + 2] = f.z, v[4 * j + 3] = f.w;
        }
        chain_q4_piece(v, xf, Xs, p >> 2, p & 3); /* uniform trip count: U * 4 is a multiple of 256 */
    }
}

__shared__ uint4 rb_zero_f[40]; /* the B fragments of lanes past 7 (gt_unit's dead rows) */
__shared__ float rb_zero_x;

__global__ void __launch_bounds__(RB_THREADS, 1) rb_kernel(const __grid_constant__ rb_chain ch) {
    extern __shared__ __align__(128) unsigned char rb_smem[];
    __shared__ __align__(8) unsigned long long bars[2 * RB_NST];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    const uint32_t full = (uint32_t)__cvta_generic_to_shared(bars), empty = full + 8 * RB_NST;
    if (threadIdx.x < RB_NST) wg_bar_init(full + 8 * threadIdx.x, 1), wg_bar_init(empty + 8 * threadIdx.x, RB_CW);
    if (threadIdx.x < 40) rb_zero_f[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
    if (threadIdx.x == 0) rb_zero_x = 0.0f;
    wg_bar_init_done();
    __syncthreads();
    unsigned char *ring = rb_smem;
    uint4 *xf = (uint4 *)(ring + (size_t)RB_NST * RB_STAGE);
    float *Xs = (float *)(xf + RB_XF), *red = Xs + RB_MAX_U; /* red: the warps' partials, RB_CW x 16 a group */
    if (warp == RB_CW) {
        if (lane == 0) rb_copy(ch, ring, full, empty);
        return;
    }
    const int P = gridDim.x;
    unsigned n = 0;
    const float *staged = NULL;
    for (int i = 0; i < N_MATS; i++) {
        const rb_mat &m = ch.m[i];
        int g0, g1;
        rb_range(m, blockIdx.x, P, &g0, &g1);
        if (m.x != staged && g0 < g1) {
            if (m.dep >= 0 && !RB_NODEP && warp == 0 && lane == 0) { /* one poller an SM; the barrier passes it on */
                while (ld_relaxed_gpu(ch.done + m.dep) < (unsigned)P) {
                }
                cu_fence_acquire();
            }
            rb_sync();
            rb_stage_x(m, xf, Xs, warp, lane);
            staged = m.x;
            rb_sync();
        }
        const int S = RB_EXACT ? m.S : RB_CW, teams = RB_CW / S, team = warp / S, sl = warp % S;
        const int ub = sl * m.U / S, ue = (sl + 1) * m.U / S; /* RB_EXACT: the warp's slice (gt_locate's) */
        for (int og = g0; og < g1; og++) {
            const bool mine = !RB_EXACT || (og - g0) % teams == team; /* RB_EXACT: a team of S warps a group */
            float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
            for (int c = 0; c < m.U / RB_CH; c++, n++) {
                const int st = (int)(n % RB_NST);
                wg_bar_wait(full + 8 * st, (n / RB_NST) & 1);
                const unsigned char *sp = ring + (size_t)st * RB_STAGE;
                /* the warp's units of the stage: its slice's, in order (RB_EXACT), or every RB_CW-th */
                const int u0 = RB_EXACT ? max(ub - c * RB_CH, 0) : warp;
                const int u1 = RB_EXACT ? min(ue - c * RB_CH, RB_CH) : RB_CH;
#pragma unroll 4
                for (int u = u0; mine && u < u1; u += RB_EXACT ? 1 : RB_CW) {
                    const int uu = c * RB_CH + u;
                    uint32_t sb[2];
                    const uint4 a = chain_slot_unit(sp, RB_CH, u, lane, sb);
                    if (RB_FREE) {
                        chain_free_unit(acc, a, sb);
                        continue;
                    }
                    const uint32_t wv[2][2] = {{a.x, a.y}, {a.z, a.w}};
                    const uint4 *bx = lane < 8 ? xf + (uu >> 2) * 64 + (uu & 3) * 8 + lane : rb_zero_f + (lane & 7);
                    gt_unit<64, 1, 4, false>(wv, sb, lane, bx, (lane & 3) == 0 ? Xs + uu : &rb_zero_x, 0, 0, 1, acc);
                }
                cu_fence_proxy_async(); /* this warp's reads of the stage before the copy that refills it */
                __syncwarp();
                if (lane == 0) wg_bar_arrive(empty + 8 * st);
            }
            /* the warp's partial of the group's rows g and g + 8 (lane t = 0); added once the mat is done */
            float *r = red + ((og - g0) * RB_CW + sl) * 16;
            if (mine && (lane & 3) == 0) r[g] = acc[0][0], r[g + 8] = acc[0][1];
        }
        rb_sync(); /* every warp's partials in: warp w adds those of the SM's groups w, w + RB_CW, ... in slice order
                    * (gt_sum_slices') */
        for (int og = g0 + warp; og < g1; og += RB_CW)
            if (lane < 16) {
                const float *r = red + (og - g0) * RB_CW * 16 + lane;
                float s = r[0];
                for (int k = 1; k < S; k++) s += r[k * 16];
                m.y[og * 16 + lane] = s;
            }
        rb_sync(); /* every output of the SM's groups written, then its count */
        if (warp == 0 && lane == 0) {
            cu_fence_acquire();
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(ch.done + i) : "memory");
        }
    }
}

/* ---- the chain --------------------------------------------------------------------------------------------- */
struct chain {
    qweight W[N_OPS][2];
    int count[N_OPS];
    float *y[N_OPS][2], *part[N_OPS][2];
    unsigned *tick[N_OPS][2];
    const float *x[N_OPS];
    unsigned *done;
    size_t bytes;
};

static void run_stream(const chain &c, cudaStream_t st) {
    for (int i = 0; i < N_OPS; i++) {
        const qweight *W[2] = {&c.W[i][0], &c.W[i][1]};
        float *part[2] = {c.part[i][0], c.part[i][1]};
        unsigned *tick[2] = {c.tick[i][0], c.tick[i][1]};
        CK(gemv_tc_launch_multi(64, c.x[i], 1, c.count[i], W, c.y[i], part, tick, NULL, st));
    }
}

/* The chain as the kernel's parameters: its mats in op order, each op's extra groups after the op before's. */
static void fill_rb(const chain &c, rb_chain &ch, int P) {
    memset(&ch, 0, sizeof ch);
    int k = 0, off = 0, mat_of_op[N_OPS];
    for (int i = 0; i < N_OPS; i++) {
        mat_of_op[i] = k;
        for (int j = 0; j < c.count[i]; j++, k++) {
            const qweight &q = c.W[i][j];
            rb_mat &m = ch.m[k];
            m.w = (const unsigned char *)q.w, m.sc = (const unsigned char *)q.scales;
            m.bi = (const unsigned char *)q.biases, m.x = c.x[i], m.y = c.y[i][j];
            m.U = (int)(q.n_in / 64), m.groups = (int)(q.n_out / 16), m.off = off;
            m.dep = i ? mat_of_op[i - 1] : -1; /* x is the op before's first output */
            m.S = gemv_tc_split(&q, 64);
            off = (off + m.groups % P) % P;
            if (m.U > RB_MAX_U || m.U % RB_CH || (m.groups + P - 1) / P > RB_MAX_G || (RB_EXACT && RB_CW % m.S)) {
                fprintf(stderr, "mat %d: %d units, %d groups: a shape the kernel does not take\n", k, m.U, m.groups);
                exit(2);
            }
        }
    }
    ch.done = c.done;
}

static double run_rb(const chain &c, cudaStream_t st) {
    static rb_chain ch;
    const int P = cu_sms();
    fill_rb(c, ch, P);
    CK(cudaFuncSetAttribute(rb_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, RB_SMEM));
    return time_median(st, [&] {
        CK(cudaMemsetAsync(c.done, 0, N_MATS * sizeof(unsigned), st));
        rb_kernel<<<P, RB_THREADS, RB_SMEM, st>>>(ch);
        CK(cudaGetLastError());
    });
}

int main(void) {
    cudaStream_t st;
    float *x0 = chain_start(&st);
    static chain c;
    chain_build(c, LAYERS, x0, chain_q4_weight);
    CK(cudaMalloc(&c.done, N_MATS * sizeof(unsigned)));

    const double bw = copy_bandwidth(st);
    std::vector<float> ref;
    double t_stream, t_graph;
    stream_and_graph(c, N_OPS, st, [&] { run_stream(c, st); }, &ref, &t_stream, &t_graph);

    poison(c, N_OPS);
    const double t_rb = run_rb(c, st);
    if (!RB_FREE && !RB_NODEP && RB_EXACT) compare("ring", ref, outputs(c, N_OPS));
    else if (!RB_FREE && !RB_NODEP) compare_close("ring", ref, outputs(c, N_OPS), output_sizes(c, N_OPS), 1e-4);

    const double floor_us = (double)c.bytes / bw * 1e6;
    printf("chain: %d ops (%d layers of in 12288x4096, out 4096x4096, gate + up 2 x 12288x4096, down 4096x12288), "
           "4-bit g64 in tiles, one row; %.1f MB of weights; copy bandwidth %.0f GB/s: floor %.1f us\n",
           N_OPS, LAYERS, c.bytes / 1e6, bw / 1e9, floor_us);
    printf("| mode | us a chain | us an op | floor / time |\n|---|---|---|---|\n");
    printf("| stream (the decode path's programmatic launches) | %.1f | %.2f | %.3f |\n", t_stream, t_stream / N_OPS,
           floor_us / t_stream);
    printf("| graph of the launches | %.1f | %.2f | %.3f |\n", t_graph, t_graph / N_OPS, floor_us / t_graph);
    printf("| ring: %d consumer warps, %d stages of %d units (%d bytes of shared memory), %s%s "
           "| %.1f | %.2f | %.3f |\n",
           RB_CW, RB_NST, RB_CH, RB_SMEM, RB_EXACT ? "the decode path's slices" : "units dealt to the warps",
           RB_FREE && RB_NODEP ? ", units free, no waits (values wrong)"
           : RB_FREE           ? ", units free (values wrong)"
           : RB_NODEP          ? ", no waits for the op before (values wrong)"
                               : "",
           t_rb, t_rb / N_OPS, floor_us / t_rb);
    printf(n_fail                ? "bench_ring: %d checks FAILED\n"
           : RB_FREE || RB_NODEP ? "bench_ring: the stream's outputs finite, the graph's bitwise (ring not checked)\n"
           : RB_EXACT            ? "bench_ring: every output bitwise the stream's\n"
                                 : "bench_ring: every output within 1e-4 of the stream's\n",
           n_fail);
    return n_fail ? 1 : 0;
}
