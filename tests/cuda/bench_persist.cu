/* bench_persist.cu: what the kernel boundaries of a one-row decode step cost, measured on a chain of dependent
 * 4-bit (MLX g64) matmuls with the 9B's layer shapes: per layer in_proj 12288x4096, out 4096x4096, gate + up
 * 2 x 12288x4096 (one launch), down 4096x12288, each op's x the op before's y, every layer its own weights (L2
 * keeps none). The same ops run several ways:
 *   stream:     one programmatic launch per op (the decode path's launches: gemv_tc_launch_multi), and the same
 *               with every op on the kernel budgeted for 3 or 4 blocks an SM;
 *   graph:      those launches captured once and replayed;
 *   persistent: one kernel of 2 or 3 blocks an SM, each block taking the op's blocks b, b + grid, ... in turn
 *               (gt_block, the decode kernel's body), an op's blocks waiting on a counter that the op before's
 *               blocks raise, after their ring's first loads (where the programmatic wait sits); and the same
 *               with no work, the waits alone;
 *   run-ahead:  one kernel whose blocks take the weights through shared memory, loaded AH_SLOTS - 1 chunks ahead
 *               of the dependencies (ahead_kernel; AH_CH, AH_SLOTS, AH_BLOCKS pick its geometry at build time);
 *   flow:       the stream's launches with no griddepcontrol.wait: none at all (wrong values: the most that
 *               overlapping the ops can give), or each block polling flags for the outputs its K slice reads.
 * Every op's output must be bitwise the stream's (the no-wait flow's excepted). Prints one table: us per chain and per
 * op, against the chain's weight bytes over the copy bandwidth measured here. Built and run by bench_persist.sh
 * (docs/performance.md, nineteenth and forty-fourth passes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define GT_X_COHERENT 1 /* the persistent kernel reads x that other blocks of it wrote */
#include "backend/cuda/cuda_gemv.cuh"
#include "bench_check.h"
#include "bench_weights.h"
#include "bench_chain.h"

#define LAYERS 8
#define OPS_PER_LAYER 4
#define N_OPS (LAYERS * OPS_PER_LAYER)

/* ---- the persistent chain -------------------------------------------------------------------------- */
struct pk_op {
    gt_job job;
    const float *x;
    unsigned blocks;
};

/* Thread 0 waits until *c >= target (relaxed loads, then one acquire fence), then the block passes a barrier:
 * what the op's blocks wrote before raising c is visible to every thread (the barrier carries thread 0's
 * acquire to the others). */
__device__ __forceinline__ void pk_wait(const unsigned *c, unsigned target) {
    if (threadIdx.x == 0) {
        while (ld_relaxed_gpu(c) < target) {
        }
        cu_fence_acquire();
    }
    __syncthreads();
}
/* After a barrier (every thread's stores before it), thread 0 raises *c with release. */
__device__ __forceinline__ void pk_signal(unsigned *c) {
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(c) : "memory");
}

/* The ops ride in the kernel's parameters (constant cache, which no acquire invalidates). A first version read
 * them from global memory, where every wait's acquire sends a block's next job back to L2: it took the same time. */
struct pk_chain {
    pk_op op[N_OPS];
};
/* WORK 0: the blocks only wait and signal (the barriers alone). */
template <int MINB, bool WORK>
__global__ void __launch_bounds__(GT_THREADS, MINB)
    chain_kernel(const __grid_constant__ pk_chain ch, unsigned *done) {
    for (int i = 0; i < N_OPS; i++) {
        const pk_op &op = ch.op[i];
        for (unsigned vb = blockIdx.x; vb < op.blocks; vb += gridDim.x) {
            const auto wait = [&] {
                if (i > 0) pk_wait(done + i - 1, ch.op[i - 1].blocks);
            };
            if constexpr (WORK) gt_block<64, 1, false, MINB, GT_IN_X, false>(op.x, 1, op.job, vb, wait);
            else wait();
            pk_signal(done + i);
        }
    }
}

/* ---- the run-ahead chain: weights through shared memory, loaded ahead of the dependencies -------------- */
/* AH_BLOCKS blocks an SM. A block's work is a list of granules: (op, block of the op, chunk of AH_CH units of its slice),
 * in op order. Its shared memory holds AH_SLOTS granules of weights (codes, scales, biases of 128 rows); the loads
 * of the granule AH_SLOTS - 1 ahead go out (cp.async) before the block waits for this granule's op's inputs, so
 * the DRAM keeps streaming the next op's weights through the barriers, the stagings and the finishes. The unit
 * arithmetic is gt_unit's on the same words in the same order, so the bits are the stream's. */
#ifndef AH_CH
#define AH_CH 16
#endif
#ifndef AH_SLOTS
#define AH_SLOTS 2
#endif
#ifndef AH_BLOCKS
#define AH_BLOCKS 1 /* blocks an SM */
#endif
#define AH_ROWS GT_OUT
#define AH_SLOT_BYTES (AH_ROWS * AH_CH * (32 + 4)) /* codes, then scales, then biases */
#define AH_X_BYTES (24 * 1040)                    /* the staged x of the longest slice (24 units) */

struct ah_cursor {
    int i, c;
    unsigned vb;
    bool ok;
};
/* Chunks of a slice of us units. */
__device__ __forceinline__ int ah_chunks(int us) { return (us + AH_CH - 1) / AH_CH; }
__device__ __forceinline__ ah_cursor ah_first_from(const pk_chain &ch, int i) {
    for (; i < N_OPS; i++)
        if (blockIdx.x < ch.op[i].blocks) return {i, 0, blockIdx.x, true};
    return {N_OPS, 0, 0, false};
}
__device__ __forceinline__ ah_cursor ah_next(const pk_chain &ch, ah_cursor k) {
    if (k.c + 1 < ah_chunks(gt_locate<64>(ch.op[k.i].job, 1, 4, 0, 0, k.vb).us)) return {k.i, k.c + 1, k.vb, true};
    if (k.vb + gridDim.x < ch.op[k.i].blocks) return {k.i, 0, k.vb + gridDim.x, true};
    return ah_first_from(ch, k.i + 1);
}

/* Issues the granule's loads into slot (nothing where the list has ended) and commits one group. The weights are
 * tiled (cuda_q4_tiled.cuh), and the slot keeps their order: each of the block's AH_GROUPS groups of 16 rows holds
 * the chunk's units as one run of cu x 512 bytes, and its scales (biases) as one run of cu records of 32 bytes (group
 * 64: a record a unit); a warp's group is its own run, its lanes' 16-byte words in different banks. */
#define AH_GROUPS (AH_ROWS / 16)
__device__ __forceinline__ void ah_load(const pk_chain &ch, ah_cursor k, unsigned char *slot) {
    if (k.ok) {
        const gt_place<64> P = gt_locate<64>(ch.op[k.i].job, 1, 4, 0, 0, k.vb);
        const int u0 = P.ub + k.c * AH_CH, cu = min(AH_CH, P.us - k.c * AH_CH);
        const int U = (int)P.W.n_in / 64, last = (int)(q4t_rows(P.W.n_out) / 16) - 1;
        const uint32_t base = cu_smem_addr(slot);
        for (int p = threadIdx.x; p < AH_GROUPS * cu * 32; p += GT_THREADS) { /* 16-byte pieces of codes */
            const int gr = p / (cu * 32), j = p % (cu * 32), G = min(P.ob * AH_GROUPS + gr, last);
            cu_cp_async16(base + (uint32_t)(gr * AH_CH * 512 + j * 16),
                          (const unsigned char *)P.W.w + ((int64_t)G * U + u0) * 512 + j * 16, true);
        }
        for (int p = threadIdx.x; p < 2 * AH_GROUPS * cu * 2; p += GT_THREADS) { /* scales, then biases */
            const int pieces = AH_GROUPS * cu * 2, which = p / pieces, gr = p % pieces / (cu * 2), j = p % (cu * 2);
            const int G = min(P.ob * AH_GROUPS + gr, last);
            const unsigned short *sb = (const unsigned short *)(which ? P.W.biases : P.W.scales);
            cu_cp_async16(base + (uint32_t)(AH_ROWS * AH_CH * (32 + 2 * which) + gr * AH_CH * 32 + j * 16),
                          sb + ((int64_t)G * U + u0) * 16 + j * 8, true);
        }
    }
    cu_cp_commit();
}

__global__ void __launch_bounds__(GT_THREADS, AH_BLOCKS) ahead_kernel(const __grid_constant__ pk_chain ch, unsigned *done) {
    typedef gt_cfg<64> C;
    extern __shared__ uint4 gt_smem[];
    __shared__ int last;
    unsigned char *slots = (unsigned char *)gt_smem + AH_X_BYTES;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    ah_cursor k = ah_first_from(ch, 0), ahead = k;
#pragma unroll
    for (int a = 0; a < AH_SLOTS - 1; a++) {
        ah_load(ch, ahead, slots + a * AH_SLOT_BYTES);
        if (ahead.ok) ahead = ah_next(ch, ahead);
    }
    uint4 *sx = gt_smem;
    float *sX = NULL; /* the staged x's sums, after its fragments */
    float acc[1][4];
    gt_place<64> P;
    for (int g = 0; k.ok; g++) {
        ah_load(ch, ahead, slots + ((g + AH_SLOTS - 1) % AH_SLOTS) * AH_SLOT_BYTES);
        if (ahead.ok) ahead = ah_next(ch, ahead);
        if (k.c == 0) { /* a new block of an op: its inputs, then x */
            P = gt_locate<64>(ch.op[k.i].job, 1, 4, lane, warp, k.vb);
            if (k.i > 0) pk_wait(done + k.i - 1, ch.op[k.i - 1].blocks);
            sX = (float *)(sx + (size_t)P.us * C::SXU);
            gt_stage<64, GT_IN_X>(ch.op[k.i].x, ch.op[k.i].job.in, 1, P.W.n_in, 0, 1, P.ub, P.us, sx, sX, threadIdx.x,
                                  GT_THREADS);
            gt_zero(acc);
        }
        cu_cp_wait<AH_SLOTS - 1>();
        __syncthreads(); /* the granule's weights and the staged x are in */
        const unsigned char *slot = slots + (g % AH_SLOTS) * AH_SLOT_BYTES;
        const int cu = min(AH_CH, P.us - k.c * AH_CH), ul0 = k.c * AH_CH;
        if (P.wact) {
            /* the warp's group: its codes, and its lane's pair of scales (biases) in each unit's record */
            const uint4 *codes = (const uint4 *)(slot + warp * AH_CH * 512) + lane;
            const uint32_t *sc = (const uint32_t *)(slot + AH_ROWS * AH_CH * 32 + warp * AH_CH * 32) + (lane >> 2);
            const uint32_t *bi = sc + AH_ROWS * AH_CH / 2;
            uint32_t sb[2];
            uint4 a = codes[0]; /* the next unit's words are read from shared memory while this one is used */
            for (int u = 0; u < cu; u++) {
                if ((u & 3) == 0) {
                    const int uu = min(u + t, cu - 1);
                    sb[0] = sc[uu * 8], sb[1] = bi[uu * 8];
                }
                uint32_t w[2][2];
                w[0][0] = a.x, w[0][1] = a.y, w[1][0] = a.z, w[1][1] = a.w;
                if (u + 1 < cu) a = codes[(u + 1) * 32];
                gt_unit<64, 1, 4>(w, sb, (lane & ~3) | (u & 3), sx + (ul0 + u) * C::SXU + lane, sX + (ul0 + u) * 4 + t,
                                  P.us * C::SXU, P.us * 4, 1, acc);
            }
        }
        __syncthreads(); /* the slot is free for the loads issued next turn */
        if (k.c + 1 == ah_chunks(P.us)) {
            gt_finish<64, 1, true>(acc, 1, P.W, P.y, P.part, P.tick, P.S, P.s, P.row0, 1, P.ob, P.o0, P.wact, lane,
                                   P.bx, &last, NULL);
            pk_signal(done + k.i);
        }
        k = ah_next(ch, k);
    }
    cu_cp_wait<0>();
}

/* ---- the chain's ops ------------------------------------------------------------------------------- */

struct chain {
    qweight W[N_OPS][2];
    int count[N_OPS];
    float *y[N_OPS][2];
    const float *x[N_OPS];
    float *part[N_OPS][2]; /* each op its own: the flow modes run several at once */
    unsigned *tick[N_OPS][2];
    unsigned *flag[N_OPS]; /* the flow modes: weight 0's output blocks done (the run's epoch) */
    size_t bytes;
};

static void build(chain &c, const float *x0) {
    memset(&c, 0, sizeof c);
    chain_build(c, LAYERS, x0, chain_q4_weight);
    for (int i = 0; i < N_OPS; i++) {
        const size_t nf = (size_t)(c.W[i][0].n_out + GT_OUT - 1) / GT_OUT;
        CK(cudaMalloc(&c.flag[i], nf * sizeof(unsigned)));
        CK(cudaMemset(c.flag[i], 0, nf * sizeof(unsigned)));
    }
    CK(cudaDeviceSynchronize());
}

static void plan(const chain &c, int i, gt_plan *pl) {
    const qweight *W[2] = {&c.W[i][0], &c.W[i][1]};
    CK(gemv_tc_plan(64, 1, c.count[i], W, c.y[i], c.part[i], c.tick[i], NULL, gt_extra(), pl));
    pl->job.xtma = 0; /* x is written by other blocks of the same launch: read by loads (GT_X_COHERENT), not copies */
}

static void run_stream(const chain &c, cudaStream_t st) {
    for (int i = 0; i < N_OPS; i++) {
        const qweight *W[2] = {&c.W[i][0], &c.W[i][1]};
        CK(gemv_tc_launch_multi(64, c.x[i], 1, c.count[i], W, c.y[i], c.part[i], c.tick[i], NULL, st));
    }
}

/* The same launches, every op on the one-tile kernel budgeted for MINB blocks an SM (the decode path takes 3 for
 * launches of more than a wave at 2, else 2): at 3 or 4 the next op's blocks can be resident beside the running
 * ones, and their first weight loads go out before the op before ends. */
template <int MINB> static void run_stream_minb(const chain &c, cudaStream_t st) {
    for (int i = 0; i < N_OPS; i++) {
        gt_plan pl;
        plan(c, i, &pl);
        CK(cu_launch(gemv_tc_kernel<64, 1, false, MINB, GT_IN_X, false>, pl.blocks, GT_THREADS, pl.smem, st, c.x[i], 1,
                     pl.job));
    }
}

/* ---- the flow: programmatic launches whose blocks do not wait for the whole grid before them ------------------
 * FLAGS 0: no wait at all (griddepcontrol.launch_dependents only): the values are wrong, and the time is what the
 * launches take when nothing holds one op's blocks back for the op before: the most that overlapping the ops can give.
 * FLAGS 1: a block waits only for the output blocks of the op before that its K slice reads (their flags, raised with
 * release by the block that wrote those outputs, each run its own epoch), so the values are the stream's; TRIG_FIRST
 * lets the next launch start before the block has seen them, else after. Each op has its own partials and tickets
 * (plan), since several ops run at once. */
template <int MINB, bool FLAGS, bool TRIG_FIRST>
__global__ void __launch_bounds__(GT_THREADS, MINB)
    flow_kernel(const float *__restrict__ x, const __grid_constant__ gt_job job, const unsigned *in_flags,
                unsigned *out_flags, unsigned epoch) {
    const auto trigger = [] { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); };
    const auto wait = [&] {
        if (TRIG_FIRST) trigger();
        if (FLAGS && in_flags) {
            const gt_place<64> P = gt_locate<64>(job, 1, 4, 0, 0, blockIdx.x);
            const int f0 = P.ub * 64 / GT_OUT, f1 = ((P.ub + P.us) * 64 + GT_OUT - 1) / GT_OUT;
            if ((int)threadIdx.x < f1 - f0) {
                while (ld_relaxed_gpu(in_flags + f0 + threadIdx.x) != epoch) {
                }
                cu_fence_acquire();
            }
            __syncthreads();
        }
        if (!TRIG_FIRST) trigger();
    };
    const auto done = [&](const gt_place<64> &P, int last) {
        if (!FLAGS || !last || P.y != job.y[0]) return; /* block-uniform */
        __syncthreads();
        if (threadIdx.x == 0)
            asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(out_flags + P.ob), "r"(epoch) : "memory");
    };
    gt_block<64, 1, false, MINB, GT_IN_X, false>(x, 1, job, blockIdx.x, wait, done);
}

template <bool FLAGS, bool TRIG_FIRST> static void flow_attrs(void) {
    CK(cudaFuncSetAttribute(flow_kernel<GT_MIN_BLOCKS, FLAGS, TRIG_FIRST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            GT_SMEM_MAX));
    CK(cudaFuncSetAttribute(flow_kernel<GT_LEAN_BLOCKS, FLAGS, TRIG_FIRST>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, GT_SMEM_MAX));
}
/* One run of the chain; each op on the blocks per SM the decode path would take (gt_launch_q). */
template <bool FLAGS, bool TRIG_FIRST> static void run_flow(const chain &c, unsigned epoch, cudaStream_t st) {
    for (int i = 0; i < N_OPS; i++) {
        gt_plan pl;
        plan(c, i, &pl);
        const bool lean = gt_use_lean(pl.blocks);
        const unsigned *in = i ? c.flag[i - 1] : NULL;
        CK(cu_launch_pdl(true,
                         lean ? flow_kernel<GT_LEAN_BLOCKS, FLAGS, TRIG_FIRST> : flow_kernel<GT_MIN_BLOCKS, FLAGS, TRIG_FIRST>,
                         pl.blocks, GT_THREADS, pl.smem, st, c.x[i], pl.job, in, c.flag[i], epoch));
    }
}

/* The chain's ops as one kernel's parameters (a static: 16 KB); returns the largest shared memory a job asks. */
static size_t fill_chain(const chain &c, pk_chain &ch) {
    size_t smem = 0;
    for (int i = 0; i < N_OPS; i++) {
        gt_plan pl;
        plan(c, i, &pl);
        if (pl.job.loop || pl.nt != 1) { fprintf(stderr, "op %d: not a plain one-tile launch\n", i); exit(2); }
        ch.op[i].job = pl.job, ch.op[i].x = c.x[i], ch.op[i].blocks = pl.blocks;
        smem = std::max(smem, pl.smem);
    }
    return smem;
}

/* Times k<<<grid>>>(ch, done), the counters zeroed before each run. grid: per_sm blocks on every SM, all of them
 * resident (the blocks wait on each other: one left out would deadlock them), else the bench stops. */
static double time_resident(void (*k)(pk_chain, unsigned *), const char *name, int per_sm, size_t smem,
                            const pk_chain &ch, unsigned *done, cudaStream_t st, unsigned *grid_out) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int fit = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, GT_THREADS, smem));
    if (fit < per_sm) { fprintf(stderr, "%s: %d blocks an SM fit, not %d\n", name, fit, per_sm); exit(2); }
    const unsigned grid = (unsigned)(per_sm * cu_sms());
    *grid_out = grid;
    return time_median(st, [&] {
        CK(cudaMemsetAsync(done, 0, N_OPS * sizeof(unsigned), st));
        k<<<grid, GT_THREADS, smem, st>>>(ch, done);
        CK(cudaGetLastError());
    });
}

template <int MINB, bool WORK>
static double run_persist(const chain &c, unsigned *done, cudaStream_t st, unsigned *grid_out) {
    static pk_chain ch;
    const size_t smem = fill_chain(c, ch);
    return time_resident(chain_kernel<MINB, WORK>, "chain_kernel", MINB, smem, ch, done, st, grid_out);
}

static double run_ahead(const chain &c, unsigned *done, cudaStream_t st, unsigned *grid_out) {
    static pk_chain ch;
    fill_chain(c, ch);
    for (int i = 0; i < N_OPS; i++) {
        const int U = (int)(c.W[i][0].n_in / 64);
        for (int j = 0; j < c.count[i]; j++) {
            const int S = ch.op[i].job.S[j];
            if (U % S || (U / S) % 8 || U / S > 24) {
                fprintf(stderr, "op %d: slices the run-ahead kernel does not take\n", i);
                exit(2);
            }
        }
    }
    return time_resident(ahead_kernel, "ahead_kernel", AH_BLOCKS, AH_X_BYTES + AH_SLOTS * AH_SLOT_BYTES, ch, done,
                         st, grid_out);
}

int main(void) {
    cudaStream_t st;
    float *x0 = chain_start(&st);
    chain c;
    build(c, x0);

    const double bw = copy_bandwidth(st); /* for the floor */

    std::vector<float> ref;
    double t_stream, t_graph;
    stream_and_graph(c, N_OPS, st, [&] { run_stream(c, st); }, &ref, &t_stream, &t_graph);

    CK(cudaFuncSetAttribute(gemv_tc_kernel<64, 1, false, 4, GT_IN_X, false>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, GT_SMEM_MAX));
    poison(c, N_OPS);
    run_stream_minb<3>(c, st);
    compare("stream, 3 an SM", ref, outputs(c, N_OPS));
    const double t_s3 = time_median(st, [&] { run_stream_minb<3>(c, st); });
    poison(c, N_OPS);
    run_stream_minb<4>(c, st);
    compare("stream, 4 an SM", ref, outputs(c, N_OPS));
    const double t_s4 = time_median(st, [&] { run_stream_minb<4>(c, st); });

    unsigned epoch = 0; /* the flow modes' runs */
    flow_attrs<false, false>();
    flow_attrs<true, false>();
    flow_attrs<true, true>();
    const double t_nw = time_median(st, [&] { run_flow<false, false>(c, ++epoch, st); });
    poison(c, N_OPS);
    run_flow<true, false>(c, ++epoch, st);
    compare("flow, flags", ref, outputs(c, N_OPS));
    const double t_fl = time_median(st, [&] { run_flow<true, false>(c, ++epoch, st); });
    poison(c, N_OPS);
    run_flow<true, true>(c, ++epoch, st);
    compare("flow, flags, next launch first", ref, outputs(c, N_OPS));
    const double t_ft = time_median(st, [&] { run_flow<true, true>(c, ++epoch, st); });

    unsigned *done;
    CK(cudaMalloc(&done, N_OPS * sizeof(unsigned)));
    unsigned g2 = 0, g3 = 0, ge = 0, ga = 0;
    poison(c, N_OPS);
    const double t_p2 = run_persist<2, true>(c, done, st, &g2);
    compare("persist 2", ref, outputs(c, N_OPS));
    poison(c, N_OPS);
    const double t_p3 = run_persist<3, true>(c, done, st, &g3);
    compare("persist 3", ref, outputs(c, N_OPS));
    const double t_pe = run_persist<2, false>(c, done, st, &ge);
    poison(c, N_OPS);
    const double t_ah = run_ahead(c, done, st, &ga);
    compare("run-ahead", ref, outputs(c, N_OPS));

    const double floor_us = (double)c.bytes / bw * 1e6;
    printf("chain: %d ops (%d layers of in 12288x4096, out 4096x4096, gate + up 2 x 12288x4096, down 4096x12288), "
           "4-bit g64, one row; %.1f MB of weights; copy bandwidth %.0f GB/s: floor %.1f us\n",
           N_OPS, LAYERS, c.bytes / 1e6, bw / 1e9, floor_us);
    printf("| mode | grid | us a chain | us an op | floor / time |\n|---|---|---|---|---|\n");
    printf("| stream (programmatic launches) | - | %.1f | %.2f | %.2f |\n", t_stream, t_stream / N_OPS, floor_us / t_stream);
    printf("| graph of the launches | - | %.1f | %.2f | %.2f |\n", t_graph, t_graph / N_OPS, floor_us / t_graph);
    printf("| stream, every op on the 3-an-SM kernel | - | %.1f | %.2f | %.2f |\n", t_s3, t_s3 / N_OPS, floor_us / t_s3);
    printf("| stream, every op on a 4-an-SM kernel | - | %.1f | %.2f | %.2f |\n", t_s4, t_s4 / N_OPS, floor_us / t_s4);
    printf("| stream, no wait for the op before (wrong values: the most overlap can give) | - | %.1f | %.2f | %.2f |\n",
           t_nw, t_nw / N_OPS, floor_us / t_nw);
    printf("| stream, a block waits for its slice's inputs only (flags) | - | %.1f | %.2f | %.2f |\n", t_fl,
           t_fl / N_OPS, floor_us / t_fl);
    printf("| the same, the next launch let go before the flags | - | %.1f | %.2f | %.2f |\n", t_ft, t_ft / N_OPS,
           floor_us / t_ft);
    printf("| persistent, 2 blocks an SM | %u | %.1f | %.2f | %.2f |\n", g2, t_p2, t_p2 / N_OPS, floor_us / t_p2);
    printf("| persistent, 3 blocks an SM | %u | %.1f | %.2f | %.2f |\n", g3, t_p3, t_p3 / N_OPS, floor_us / t_p3);
    printf("| persistent, 2 blocks an SM, no work (the waits alone) | %u | %.1f | %.2f | - |\n", ge, t_pe, t_pe / N_OPS);
    printf("| run-ahead: weights through shared memory, %d slots of %d units | %d | %.1f | %.2f | %.2f |\n", AH_SLOTS,
           AH_CH, ga, t_ah, t_ah / N_OPS, floor_us / t_ah);
    printf(n_fail ? "bench_persist: %d checks FAILED\n" : "bench_persist: every output bitwise the stream's\n", n_fail);
    return n_fail ? 1 : 0;
}
