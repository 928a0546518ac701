/* bench_ws.cu: a persistent decode matmul chain with a loader warp (warp specialisation), against the decode path's
 * launches, on a chain of dependent one-row matmuls with the 9B's layer shapes (per layer in_proj 12288x4096, out
 * 4096x4096, gate + up 2 x 12288x4096 in one op, down 4096x12288; each op's x the op before's first output; every layer
 * its own weights, so L2 keeps none): bf16 weights (3.5 GB), or with -DWS_Q=64 MLX 4-bit g64 in the decode path's
 * tiles (cuda_q4_tiled.cuh; 1.0 GB).
 *
 * The question (docs/performance.md, nineteenth, thirty-fifth and forty-sixth passes): a launch's next op cannot load
 * weights until the op before's blocks leave the SMs, though the weights depend on nothing. Here one block an SM runs
 * for the whole chain:
 *   - a loader warp whose lane c feeds consumer warp c: the weights of each of c's work items, chunk after chunk,
 *     into c's ring of WS_NST slots in shared memory, as soon as a slot is free, whatever op the item belongs to
 *     (counted on an mbarrier). bf16: tensor copies of 16 rows (or with WS_TMA=0 a bulk copy a row). 4-bit: the tiles
 *     keep an item's units as one run of bytes, and its scales and biases as two, so a chunk is three bulk copies;
 *   - WS_CW consumer warps. An item is the decode kernel's warp's share: 16 outputs of one weight over one K slice
 *     (gemv_tc_split's); consumer warp cw takes items [cw per, (cw + 1) per) of each op in turn, all of one
 *     slice. For its first item of an op the warp waits for the flags of the output groups its slice reads (set by
 *     the op before's finishing warps: no grid barrier) and makes its B fragments from x (gt_stage's values, one
 *     row); each unit is the decode kernel's arithmetic on A fragments read from the slots (bf16: gt_unit's two MMAs
 *     written out; 4-bit: gt_unit itself). The slice's partial goes out with a ticket; the warp that takes the last
 *     adds the S partials in slice order (gt_finish's sum) and raises the group's flag.
 * So every output must be bitwise the decode path's (checked after the timed runs; a missed ordering across SMs
 * would read the run before's equal values, so the check catches wrong arithmetic and shared-memory races only).
 * WS_FREE=1 replaces the unit's arithmetic by one xor a word (the loads, slots and finish stay): how fast the loader
 * streams when the consumers cost nothing. WS_NODEP=1: no consumer waits for the flags of its x (what the flags cost).
 * Both leave the values wrong, and they are not checked. WS_GLOBAL=1: a consumer waits for all of the op before (a
 * count of its groups done), as a normalised input must in the real step. WS_INT8=1 (4-bit): the consumers take
 * bench_int8_unit.h's exact-integer unit instead of gt_unit (x as int8 digits, about half the instructions a unit);
 * its values are not the decode path's bits, so they are checked against the stream's to 1e-3 of each op's largest
 * output. The consumers' staging and units: bench_ws_unit.h.
 * Prints one table: us per chain and per op against the chain's weight bytes over the copy bandwidth measured
 * here. Built and run by bench_ws.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_gemm_wg.cuh" /* wg_bar_*, wg_bulk_load (cuda_wgmma.cuh); wg_map, wg_tma_load */
#include "backend/cuda/cuda_gemv.cuh"
#include "bench_check.h"
#include "bench_weights.h"
#include "bench_chain.h"

#define LAYERS 8
#define OPS_PER_LAYER 4
#define N_OPS (LAYERS * OPS_PER_LAYER)

#ifndef WS_Q
#define WS_Q 0 /* 0: bf16 weights; 64: MLX 4-bit g64, tiled */
#endif
static_assert(WS_Q == 0 || WS_Q == 64, "bf16 or 4-bit g64");
typedef gt_cfg<WS_Q> WC; /* a unit: WC::UK values of a row */

/* The geometry (thirty-fifth pass, bf16: 8 consumer warps with rings of 2 slots of 8 units were the fastest) */
#ifndef WS_CW
#define WS_CW 8 /* consumer warps a block */
#endif
#ifndef WS_NST
#define WS_NST 2 /* slots of a consumer's ring */
#endif
#ifndef WS_CH
#define WS_CH 8 /* units a slot (bf16: 32 values, 64 bytes a row; 4-bit: 64 codes, 512 bytes of 16 rows) */
#endif
#ifndef WS_TMA
#define WS_TMA 1 /* bf16: 1, a slot is WS_CH / WS_BOXU tensor copies of 16 rows; 0, a bulk copy a row */
#endif
/* bf16: a slot is boxes of 16 rows x WS_BOXU units. Tensor copies: dense rows (a box is at most 256 values wide), so
 * the 16-byte loads of rows g and g + 1 by a lane quad meet in the same banks (2 ways). Row copies: a row is padded to
 * 4 mod 8 times 16 bytes, so they do not. 4-bit: the chunk's units (512 bytes each, a lane's 16 bytes at 16 lane),
 * then its scale records and its bias records (32 bytes a unit, a lane's pair at 4 g), as the tiles keep them. */
#define WS_BOXU (WS_TMA && WS_CH > 8 ? 8 : WS_CH)
#define WS_ROW (WS_BOXU * 64 + (WS_TMA ? 0 : 64))
#define WS_BOX (16 * WS_ROW)
#define WS_Q4_CODES (WS_CH * 512)
#define WS_SLOT (WS_Q ? WS_Q4_CODES + 2 * WS_CH * 32 : WS_CH / WS_BOXU * WS_BOX)
#define WS_SLOT_TX (WS_Q ? WS_SLOT : 16 * WS_CH * 64) /* bytes the copies of a slot bring */
#define WS_MAX_US (WS_Q ? 24 : 48) /* units of the longest slice (down: 4096x12288, 8 slices) */
#ifndef WS_INT8
#define WS_INT8 0 /* 4-bit: 1, bench_int8_unit.h's exact-integer unit (x as int8 digits), not gt_unit */
#endif
static_assert(!WS_INT8 || WS_Q == 64, "the int8 unit takes 4-bit weights");
/* A warp's B fragments. bf16 and 4-bit: lanes 0-7 (row 0's hi, lo x 4 lanes t) of 16 bytes a k-step pair; bf16 8 a
 * unit in order; 4-bit 16 a unit, units in fours of 64 (unit u's pair jp at 64 (u / 4) + 32 jp + 8 (u % 4)), so that
 * gt_unit's reads of bx[0] and bx[32] find them; then 4-bit's X sums, a float a unit. WS_INT8: gi_stage_unit8's
 * 256 bytes a unit (the digits' lanes 0-15), then (X, 2^E), a float2 a unit. */
#define WS_XU (WS_Q ? 16 : 8)
#define WS_XF (WS_MAX_US * WS_XU * 16 + (WS_INT8 ? WS_MAX_US * 8 : WS_Q ? WS_MAX_US * 4 : 0))
#define WS_SMEM (WS_CW * (WS_NST * WS_SLOT + WS_XF))
#define WS_PIECES (WS_MAX_US * 4 / 32) /* x pieces (a lane's EPT values of a unit) a lane stages at most */
#ifndef WS_FREE
#define WS_FREE 0 /* 1: a unit is one xor a word (wrong values, not checked): how fast the loader streams */
#endif
#ifndef WS_NODEP
#define WS_NODEP 0 /* 1: no consumer waits for the op before's flags (wrong values, not checked): the flags' cost */
#endif
#ifndef WS_GLOBAL
#define WS_GLOBAL 0 /* 1: a consumer waits for all of the op before (a count of its groups), as a norm's input must */
#endif
#define WS_CHECKED (!WS_FREE && !WS_NODEP)
#ifndef WS_SLEEP
#define WS_SLEEP 0 /* ns a poller sleeps between polls of the flags or of a full ring (0: it spins) */
#endif
/* Before a consumer lane frees a slot, a proxy fence orders its ld.shared reads of it (generic proxy) before the
 * tensor copy that refills it (async proxy). Without it the 12-consumer form computed wrong outputs in 5 of 28 runs;
 * with it, in none of 28, and no slower. A __syncwarp after the slot's wait instead left 3 of 28 wrong
 * (docs/performance.md, thirty-seventh pass). WS_PROXY_FENCE=0 shows the race. */
#ifndef WS_PROXY_FENCE
#define WS_PROXY_FENCE 1
#endif
__device__ __forceinline__ void ws_pause(void) {
    if (WS_SLEEP) __nanosleep(WS_SLEEP);
}

/* ---- the ops ------------------------------------------------------------------------------------------- */
struct ws_w {
    CUtensorMap map;        /* the rows in boxes of 16 x WS_BOXU units (WS_TMA) */
    const unsigned char *w; /* bf16 rows, or 4-bit tiles */
    const unsigned char *sc, *bi; /* 4-bit: the scale and bias records (bf16) */
    float *y, *part;        /* part: S x n_out */
    unsigned *tick, *ready; /* per output group of 16; ready[n_out / 16]: the groups done (WS_GLOBAL) */
    int n_out, K, S, U, items;
};
struct ws_op {
    ws_w w[2];
    int count, items, per; /* consumer warp cw takes items [cw per, (cw + 1) per): one slice (the host checks) */
    const float *x;
    const unsigned *x_ready; /* the flags of x's output groups (the op before's first weight), NULL: ready */
    unsigned x_groups;       /* their number */
};
struct ws_chain {
    ws_op op[N_OPS];
};
static_assert(sizeof(ws_chain) <= 32764, "the chain rides in the kernel's parameters");
struct ws_item {
    int w, og, s, ub, us;
};
__device__ __forceinline__ ws_item ws_locate(const ws_op &op, int j) {
    ws_item it;
    it.w = op.count > 1 && j >= op.w[0].items;
    const ws_w &W = it.w ? op.w[1] : op.w[0];
    const int local = j - (it.w ? op.w[0].items : 0), groups = W.n_out / 16;
    it.og = local % groups, it.s = local / groups;
    it.ub = (int)((unsigned)(it.s * W.U) / (unsigned)W.S); /* gt_locate's slice */
    it.us = (int)((unsigned)((it.s + 1) * W.U) / (unsigned)W.S) - it.ub;
    return it;
}

/* ---- the loader's slot test and flags (the mbarriers and bulk copies: cuda_wgmma.cuh) ---- */
__device__ __forceinline__ bool ws_test(uint32_t bar, uint32_t parity) { /* no wait */
    uint32_t done;
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return done;
}
__device__ __forceinline__ void ws_st_release(unsigned *p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* Group og's outputs are in: its flag, and with WS_GLOBAL the weight's count of groups done, both with release. */
__device__ __forceinline__ void ws_raise(const ws_w &W, int og) {
    ws_st_release(W.ready + og, 1u);
    if (WS_GLOBAL) asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(W.ready + W.n_out / 16) : "memory");
}

/* ---- the kernel ---------------------------------------------------------------------------------------- */
/* Lane c of the loader warp: consumer c's chunks in the order c takes them (op, item, chunk), each into the
 * next slot of c's ring once the consumer has freed it. */
__device__ __forceinline__ void ws_load(const ws_chain &ch, int c, unsigned char *slots, uint32_t full,
                                        uint32_t empty) {
    const int cw = blockIdx.x * WS_CW + c;
    int i = 0, j = 0, k = 0;
    const auto first = [&] { /* the first op from i on that gives this warp items */
        for (; i < N_OPS; i++)
            if ((j = cw * ch.op[i].per) < ch.op[i].items) return;
    };
    first();
    ws_item it = ws_locate(ch.op[i < N_OPS ? i : 0], j);
    for (unsigned n = 0; i < N_OPS;) {
        const int slot = (int)(n % WS_NST);
        if (n >= WS_NST && !ws_test(empty + 8 * (c * WS_NST + slot), (n / WS_NST - 1) & 1)) {
            ws_pause();
            continue;
        }
        const ws_w &W = it.w ? ch.op[i].w[1] : ch.op[i].w[0];
        const uint32_t bar = full + 8 * (c * WS_NST + slot);
        const uint32_t dst = (uint32_t)__cvta_generic_to_shared(slots + (size_t)(c * WS_NST + slot) * WS_SLOT);
        wg_bar_expect(bar, WS_SLOT_TX);
#if WS_Q
        const size_t u0 = (size_t)it.og * W.U + it.ub + k * WS_CH; /* the group's units in a run (cuda_q4_tiled.cuh) */
        wg_bulk_load(dst, W.w + u0 * 512, WS_Q4_CODES, bar);
        wg_bulk_load(dst + WS_Q4_CODES, W.sc + u0 * 32, WS_CH * 32, bar);
        wg_bulk_load(dst + WS_Q4_CODES + WS_CH * 32, W.bi + u0 * 32, WS_CH * 32, bar);
#elif WS_TMA
#pragma unroll
        for (int b = 0; b < WS_CH / WS_BOXU; b++)
            wg_tma_load(dst + b * WS_BOX, &W.map, (it.ub + k * WS_CH + b * WS_BOXU) * 32, it.og * 16, bar);
#else
        const unsigned char *src = W.w + ((size_t)it.og * 16 * W.K + (size_t)(it.ub + k * WS_CH) * 32) * 2;
#pragma unroll 4
        for (int r = 0; r < 16; r++) wg_bulk_load(dst + r * WS_ROW, src + (size_t)r * W.K * 2, WS_CH * 64, bar);
#endif
        n++;
        if (++k == it.us / WS_CH) {
            k = 0;
            if (++j >= min(ch.op[i].items, (cw + 1) * ch.op[i].per)) i++, first();
            if (i < N_OPS) it = ws_locate(ch.op[i], j);
        }
    }
}

#include "bench_ws_unit.h" /* ws_stage_x, ws_chunk */

/* Consumer warp c: its items of each op in turn. */
__device__ __forceinline__ void ws_consume(const ws_chain &ch, int c, const unsigned char *slots, uint4 *xf,
                                           uint32_t full, uint32_t empty) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int cw = blockIdx.x * WS_CW + c;
    unsigned n = 0;
    for (int i = 0; i < N_OPS; i++) {
        const ws_op &op = ch.op[i];
        int staged = -1; /* the slice (weight, s) whose x is in xf */
        for (int j = cw * op.per; j < min(op.items, (cw + 1) * op.per); j++) {
            const ws_item it = ws_locate(op, j);
            const ws_w &W = it.w ? op.w[1] : op.w[0];
            if (it.w * 64 + it.s != staged) { /* a new slice (once an op: a warp's items share one) */
                ws_stage_x(op, it, xf, lane);
                staged = it.w * 64 + it.s;
            }
            float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
            for (int cc = 0; cc < it.us / WS_CH; cc++, n++) {
                const int slot = (int)(n % WS_NST);
                wg_bar_wait(full + 8 * (c * WS_NST + slot), (n / WS_NST) & 1);
                ws_chunk(acc, slots + (size_t)(c * WS_NST + slot) * WS_SLOT, xf, cc * WS_CH, lane);
                if (WS_PROXY_FENCE) cu_fence_proxy_async();
                __syncwarp();
                if (lane == 0) wg_bar_arrive(empty + 8 * (c * WS_NST + slot));
            }
            /* the finish: row 0 is lane t = 0's (gt_finish's v0, v1: bf16's column pair, 4-bit's folded sums) */
            const int o = it.og * 16 + g;
            const float v0 = WS_Q ? acc[0][0] : acc[0][0] + acc[0][1], v1 = WS_Q ? acc[0][1] : acc[0][2] + acc[0][3];
            if (W.S == 1) {
                if (t == 0) W.y[o] = v0, W.y[o + 8] = v1;
                __syncwarp();
                if (lane == 0) ws_raise(W, it.og);
                continue;
            }
            if (t == 0) {
                W.part[(size_t)it.s * W.n_out + o] = v0;
                W.part[(size_t)it.s * W.n_out + o + 8] = v1;
            }
            __syncwarp();
            unsigned last = 0;
            if (lane == 0) last = cu_ticket_take(W.tick + it.og) == (unsigned)(W.S - 1);
            last = __shfl_sync(0xffffffffu, last, 0);
            __syncwarp();
            if (!last) continue;
            if (lane < 16) { /* gt_sum_slices: slice 0, then + slice s in order, after lane 0's acquire */
                cu_fence_acquire();
                const float *pp = W.part + it.og * 16 + lane;
                float sum = __ldcg(pp);
                for (int s = 1; s < W.S; s++) sum += __ldcg(pp + (size_t)s * W.n_out);
                W.y[it.og * 16 + lane] = sum;
            }
            __syncwarp();
            if (lane == 0) ws_raise(W, it.og);
        }
    }
}

__global__ void __launch_bounds__((WS_CW + 1) * 32, 1) ws_kernel(const __grid_constant__ ws_chain ch) {
    extern __shared__ __align__(128) unsigned char ws_smem[];
    __shared__ __align__(8) unsigned long long bars[2 * WS_CW * WS_NST];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t full = (uint32_t)__cvta_generic_to_shared(bars), empty = full + 8 * WS_CW * WS_NST;
    if (threadIdx.x < WS_CW * WS_NST) wg_bar_init(full + 8 * threadIdx.x, 1), wg_bar_init(empty + 8 * threadIdx.x, 1);
    if (threadIdx.x < 40) ws_zero_f[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
    if (threadIdx.x == 0) ws_zero_x = 0.0f;
    wg_bar_init_done();
    __syncthreads();
    unsigned char *slots = ws_smem; /* 128-byte aligned, as tensor copies want */
    uint4 *xf = (uint4 *)(slots + (size_t)WS_CW * WS_NST * WS_SLOT);
    if (warp == WS_CW) {
        if (lane < WS_CW) ws_load(ch, lane, slots, full, empty);
        return;
    }
    ws_consume(ch, warp, slots, (uint4 *)((unsigned char *)xf + (size_t)warp * WS_XF), full, empty);
}

/* ---- the chain --------------------------------------------------------------------------------------------- */
/* A weight of the chain: |y| ~ |x| so that 32 ops in a row stay finite. 4-bit: bench_chain.h's chain_q4_weight. bf16:
 * uniform of scale 1.7 / sqrt(K). */
static qweight one_weight(int64_t n_out, int64_t K, uint32_t seed, size_t *bytes) {
    if (WS_Q) return chain_q4_weight(n_out, K, seed, bytes);
    qweight q = {QW_BF16, n_out, K, NULL, NULL, NULL, QW_BF16, 0, 0, 0, 0};
    const size_t wb = (size_t)(n_out * K) * 2;
    CK(cudaMalloc(&q.w, wb));
    fill_bf16<<<2048, 256>>>((__nv_bfloat16 *)q.w, (size_t)(n_out * K), seed, 0.0f, 1.7f / sqrtf((float)K));
    CK(cudaGetLastError());
    *bytes += wb;
    return q;
}

struct chain {
    qweight W[N_OPS][2];
    int count[N_OPS];
    float *y[N_OPS][2], *part[N_OPS][2];
    unsigned *tick[N_OPS][2];                 /* the stream's tickets */
    unsigned *ws_tick[N_OPS][2], *ready[N_OPS][2]; /* ws_kernel's, a group each, in one pool zeroed before a run */
    unsigned *pool;
    size_t pool_n;
    const float *x[N_OPS];
    size_t bytes;
};

static void build(chain &c, const float *x0) {
    memset(&c, 0, sizeof c);
    chain_build(c, LAYERS, x0, one_weight);
    for (int i = 0; i < N_OPS; i++)
        for (int j = 0; j < c.count[i]; j++) c.pool_n += 2 * (size_t)c.W[i][j].n_out / 16 + 1;
    CK(cudaMalloc(&c.pool, c.pool_n * 4));
    size_t at = 0;
    for (int i = 0; i < N_OPS; i++)
        for (int j = 0; j < c.count[i]; j++) {
            const size_t groups = (size_t)c.W[i][j].n_out / 16;
            c.ws_tick[i][j] = c.pool + at, c.ready[i][j] = c.pool + at + groups;
            at += 2 * groups + 1;
        }
}

static void run_stream(const chain &c, cudaStream_t st) {
    for (int i = 0; i < N_OPS; i++) {
        const qweight *W[2] = {&c.W[i][0], &c.W[i][1]};
        float *part[2] = {c.part[i][0], c.part[i][1]};
        unsigned *tick[2] = {c.tick[i][0], c.tick[i][1]};
        CK(gemv_tc_launch_multi(WS_Q, c.x[i], 1, c.count[i], W, c.y[i], part, tick, NULL, st));
    }
}

/* The chain as the kernel's parameters; exits where a slice is one the kernel does not take. */
static void fill_ws(const chain &c, ws_chain &ch) {
    memset(&ch, 0, sizeof ch);
    for (int i = 0; i < N_OPS; i++) {
        ws_op &op = ch.op[i];
        op.count = c.count[i], op.x = c.x[i], op.x_ready = i && !WS_NODEP ? c.ready[i - 1][0] : NULL;
        op.x_groups = i ? (unsigned)(c.W[i - 1][0].n_out / 16) : 0u;
        for (int j = 0; j < c.count[i]; j++) {
            const qweight &q = c.W[i][j];
            ws_w &w = op.w[j];
            w.w = (const unsigned char *)q.w, w.y = c.y[i][j], w.part = c.part[i][j], w.tick = c.ws_tick[i][j];
            w.sc = (const unsigned char *)q.scales, w.bi = (const unsigned char *)q.biases;
            w.ready = c.ready[i][j], w.n_out = (int)q.n_out, w.K = (int)q.n_in, w.S = gemv_tc_split(&q, WS_Q);
            w.U = w.K / WC::UK, w.items = w.n_out / 16 * w.S;
            if (!WS_Q && wg_map(&w.map, (const __nv_bfloat16 *)q.w, q.n_out, q.n_in, 16, WS_BOXU * 32,
                                CU_TENSOR_MAP_SWIZZLE_NONE) != cudaSuccess) {
                fprintf(stderr, "op %d: the tensor map failed\n", i);
                exit(2);
            }
            /* whole slots, whole warps of x pieces (ws_stage_x), and x's fragments fit */
            if (w.U % w.S || (w.U / w.S) % WS_CH || (w.U / w.S) % 8 || w.U / w.S > WS_MAX_US) {
                fprintf(stderr, "op %d: slices of %d units the kernel does not take\n", i, w.U / w.S);
                exit(2);
            }
            op.items += w.items;
        }
        const int NW = cu_sms() * WS_CW;
        op.per = (op.items + NW - 1) / NW;
        for (int j = 0; j < c.count[i]; j++) /* a warp's items one slice: per divides each slice's items */
            if ((op.w[j].items / op.w[j].S) % op.per) {
                fprintf(stderr, "op %d: %d items a warp cross slices\n", i, op.per);
                exit(2);
            }
    }
}

static double run_ws(const chain &c, cudaStream_t st, bool *fits) {
    static ws_chain ch;
    fill_ws(c, ch);
    CK(cudaFuncSetAttribute(ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WS_SMEM));
    int fit = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, ws_kernel, (WS_CW + 1) * 32, WS_SMEM));
    *fits = fit >= 1;
    if (!*fits) return 0;
    const unsigned grid = (unsigned)cu_sms();
    return time_median(st, [&] {
        CK(cudaMemsetAsync(c.pool, 0, c.pool_n * 4, st));
        ws_kernel<<<grid, (WS_CW + 1) * 32, WS_SMEM, st>>>(ch);
        CK(cudaGetLastError());
    });
}
/* The flags' and tickets' reset alone (what run_ws times besides the kernel). */
static double run_resets(const chain &c, cudaStream_t st) {
    return time_median(st, [&] { CK(cudaMemsetAsync(c.pool, 0, c.pool_n * 4, st)); });
}

int main(void) {
    cudaStream_t st;
    float *x0 = chain_start(&st);
    static chain c;
    build(c, x0);

    const double bw = copy_bandwidth(st);

    std::vector<float> ref;
    double t_stream, t_graph;
    stream_and_graph(c, N_OPS, st, [&] { run_stream(c, st); }, &ref, &t_stream, &t_graph);

    poison(c, N_OPS);
    bool fits = false;
    const double t_ws = run_ws(c, st, &fits);
    if (!fits) { printf("FAIL ws_kernel: %d bytes of shared memory do not fit an SM\n", WS_SMEM); n_fail++; }
    else if (WS_CHECKED && WS_INT8)
        compare_close("ws (int8 unit)", ref, outputs(c, N_OPS), output_sizes(c, N_OPS), 1e-3);
    else if (WS_CHECKED) compare("ws", ref, outputs(c, N_OPS));
    const double t_reset = run_resets(c, st);

    const double floor_us = (double)c.bytes / bw * 1e6;
    printf("chain: %d ops (%d layers of in 12288x4096, out 4096x4096, gate + up 2 x 12288x4096, down 4096x12288), "
           "%s, one row; %.1f MB of weights; copy bandwidth %.0f GB/s: floor %.1f us\n",
           N_OPS, LAYERS, WS_Q ? "4-bit g64 in tiles" : "bf16", c.bytes / 1e6, bw / 1e9, floor_us);
    printf("| mode | us a chain | us an op | floor / time |\n|---|---|---|---|\n");
    printf("| stream (the decode path's programmatic launches) | %.1f | %.2f | %.3f |\n", t_stream, t_stream / N_OPS,
           floor_us / t_stream);
    printf("| graph of the launches | %.1f | %.2f | %.3f |\n", t_graph, t_graph / N_OPS, floor_us / t_graph);
    printf("| loader warps: %d consumer warps an SM, rings of %d slots of %d units (%d bytes), %s, polls %d ns apart%s "
           "| %.1f | %.2f | %.3f |\n", WS_CW, WS_NST, WS_CH, WS_SMEM,
           WS_INT8 ? "three bulk copies a slot, the int8 unit"
           : WS_Q  ? "three bulk copies a slot"
           : WS_TMA ? "tensor copies"
                    : "a bulk copy a row",
           WS_SLEEP,
           WS_GLOBAL           ? ", each op waits for all of the op before"
           : WS_FREE && WS_NODEP ? ", units free, no flags (values wrong, not checked)"
           : WS_FREE           ? ", units free (values wrong, not checked)"
           : WS_NODEP          ? ", no flags (values wrong, not checked)"
                               : "",
           t_ws, t_ws / N_OPS, floor_us / t_ws);
    printf("| (of which the flags' and tickets' resets before the kernel) | %.1f | | |\n", t_reset);
    printf(n_fail        ? "bench_ws: %d checks FAILED\n"
           : !WS_CHECKED ? "bench_ws: the stream's outputs finite, the graph's bitwise the stream's (ws not checked)\n"
           : WS_INT8     ? "bench_ws: every output within 1e-3 of the stream's, the graph's bitwise\n"
                         : "bench_ws: every output bitwise the stream's\n",
           n_fail);
    return n_fail ? 1 : 0;
}
