/* cuda_gemv_wide.cuh: the decode matmul for many rows (more than GW_MIN_ROWS: aggregate decode, draft
 * blocks), included by cuda_gemv.cuh. Same arithmetic per row as gemv_tc_kernel, so a row's bits do not
 * depend on which of the two ran it (EXACT(batch)): each unit through gt_unit, units folded in order
 * within the weight's K slices (gemv_tc_split, a function of the weight only), the slices' partials summed
 * in slice order by gt_finish.
 *
 * What differs is the organisation. gemv_tc_kernel stages a block's whole slice of x before it starts,
 * so the shared memory bounds its rows (4 tiles of 4 rows on the MLP shapes at 64 rows: the weights are
 * read once per 16 rows, and ncu counted ~57 instructions per tile and unit, most of them per-unit
 * overhead that 4 tiles share). Here the block's x (split once by gemv_split_kernel) streams through a
 * ring of shared-memory stages by cp.async, GW_UNITS units per stage (one turn of the weight ring), so a
 * block takes up to GW_MAX_TILES tiles: the dequantisation, scale shuffles and loop control of a unit are
 * shared by 8 tiles, and the weights are read once per 32 rows. Tiles past the rows are zeros (no per-tile
 * checks); their outputs are not written. Measured (docs/performance.md, seventh pass): the head and bf16
 * weights gain most; on the 4-bit MLP shapes the per-tile work of the f32-class fold sets the time.
 * RT: rows per tile, 4 (each row's hi and lo columns) or 8 (QUILL_DECODE_PRECISION=bf16: a column a row), so
 * with bf16 x a unit's MMAs, fold and fragment loads serve twice the rows, and a block up to 8 x 8 rows. */
#ifndef QUILL_CUDA_GEMV_WIDE_CUH
#define QUILL_CUDA_GEMV_WIDE_CUH

#include "cuda_mma.cuh"

#ifndef GW_MIN_ROWS
#define GW_MIN_ROWS 8 /* more rows than this take gemv_wide_kernel (at most 4 * GT_MAX_TILES) */
#endif
#ifndef GW_MAX_TILES
#define GW_MAX_TILES 8 /* row tiles per block at most: 4, 8 or 16 (tune_gemv, 64 rows: 8 beat 16 on 3 of 4 shapes) */
#endif
#define GW_UNITS 4 /* units per stage: one turn of the weight ring */
#ifndef GW_FEW_BLOCKS
#define GW_FEW_BLOCKS 2 /* blocks per SM the registers of a block of at most 2 tiles are budgeted for */
#endif
#define GW_SMEM_MAX (227 * 1024)

/* A stage: the x fragments of NT tiles x GW_UNITS units ([T][d][SXU] uint4), then (4-bit) their X sums
 * ([T][d], RT rows each: XP uint4). Three stages when two blocks of three stages fit an SM, else two. */
template <int Q, int NT, int RT> struct gw_cfg {
    static constexpr int XP = RT / 4;
    static constexpr int FRAG_U4 = NT * GW_UNITS * gt_cfg<Q>::SXU;
    static constexpr int STAGE_U4 = FRAG_U4 + (Q ? NT * GW_UNITS * XP : 0);
    static constexpr int STAGE_BYTES = STAGE_U4 * 16;
    static constexpr int STAGES = 3 * STAGE_BYTES <= 112 * 1024 ? 3 : 2;
    static constexpr int SMEM = STAGES * STAGE_BYTES;
    static constexpr int MIN_BLOCKS = NT <= 2 ? GW_FEW_BLOCKS : SMEM <= 112 * 1024 ? 2 : 1;
    static_assert(SMEM >= GT_SS_SMEM(RT * NT), "gt_finish keeps the squares of the block's rows in the stages");
};

/* Issues the cp.async of units [u0, u0 + uc) of the block's tiles into the stage at shared address st
 * (tiles >= live and units >= uc: zeros). xs, Xs: tile 0's unit 0 of the slice in the split rows; U: units
 * per row. Piece p of the stage's fragments is tile p / TU, piece p % TU of the tile's units (the split
 * rows hold a tile's units contiguously), so every thread's pieces are constant strides apart (a loop
 * over tiles and pieces was a third of the kernel's instructions, ncu). */
template <int Q, int NT, int RT>
__device__ __forceinline__ void gw_stage_load(uint32_t st, const uint4 *__restrict__ xs, const float *__restrict__ Xs,
                                              int64_t U, int u0, int uc, int live) {
    typedef gt_cfg<Q> C;
    constexpr int TU = GW_UNITS * C::SXU; /* a tile's pieces in a stage: 256 (4-bit) or 128 (bf16) */
    static_assert(NT * TU % GT_THREADS == 0, "whole pieces per thread");
    const int64_t ts = U * C::SXU; /* a tile's stride in the split rows */
    const uint4 *src = xs + (int64_t)u0 * C::SXU;
    const int have = uc * C::SXU;
#pragma unroll
    for (int k = 0; k < NT * TU / GT_THREADS; k++) {
        const int p = (int)(threadIdx.x % GT_THREADS) + k * GT_THREADS, T = p / TU, j = p % TU; /* constants */
        const bool ok = T < live && j < have;
        cu_cp_async16(st + 16u * p, ok ? src + T * ts + j : xs, ok);
    }
    if constexpr (Q != 0) {
        typedef gw_cfg<Q, NT, RT> G;
        static_assert(NT * GW_UNITS * G::XP <= GT_THREADS, "a piece of X sums per thread at most");
        const int i = threadIdx.x, T = i / (GW_UNITS * G::XP), d = i / G::XP % GW_UNITS, h = i % G::XP;
        const bool ok = T < live && d < uc;
        if (i < NT * GW_UNITS * G::XP)
            cu_cp_async16(st + 16u * (G::FRAG_U4 + i), ok ? Xs + ((int64_t)T * U + u0 + d) * RT + 4 * h : Xs, ok);
    }
}

/* Before chunk c: waits for its stage, then sends the chunk STAGES - 1 ahead into the stage chunk c - 1
 * used (every warp is past it: the barrier). */
template <int Q, int NT, int RT>
__device__ __forceinline__ void gw_next(int c, int chunks, int us, const uint4 *xs, const float *Xs, int64_t U,
                                        int live) {
    typedef gw_cfg<Q, NT, RT> G;
    extern __shared__ uint4 gt_smem[];
    cu_cp_wait<G::STAGES - 2>(); /* this thread's copies of chunk c are in */
    __syncthreads();             /* everyone's are, and everyone is done with chunk c - 1's stage */
    const int next = c + G::STAGES - 1;
    if (next < chunks)
        gw_stage_load<Q, NT, RT>(cu_smem_addr(gt_smem + (next % G::STAGES) * G::STAGE_U4), xs, Xs, U,
                                 next * GW_UNITS, min(GW_UNITS, us - next * GW_UNITS), live);
    cu_cp_commit();
}

/* The warp's turn over chunk c's units (gemv_tc_kernel's gt_turn with the stage as the staged x). */
template <int Q, int NT, int RT, bool FULL, bool DQ>
__device__ __forceinline__ void gw_turn(int c, const gt_place<Q> &P, uint32_t (&w)[GW_UNITS][2][gt_cfg<Q>::WPU],
                                        uint32_t (&sb)[GW_UNITS / 4][2], int lane, float (&acc)[NT][4]) {
    typedef gt_cfg<Q> C;
    typedef gw_cfg<Q, NT, RT> G;
    constexpr int D = GW_UNITS;
    extern __shared__ uint4 gt_smem[];
    const uint4 *st = gt_smem + (c % G::STAGES) * G::STAGE_U4;
    const int base = c * D;
    gt_turn<Q, NT, D, FULL, RT, DQ, GT_W_EVICT>(w, sb, P.p0 + (int64_t)base * C::UB, P.p8 + (int64_t)base * C::UB,
                                                st + lane, (const float *)(st + G::FRAG_U4) + (lane & 3) * (RT / 4),
                                                D * C::SXU, D * RT, NT, base, P.us, P.s0, P.bb0, P.ub, lane, acc);
}

template <int Q, int NT, int RT, bool DQ = false>
__global__ void __launch_bounds__(GT_THREADS, gw_cfg<Q, NT, RT>::MIN_BLOCKS)
    gemv_wide_kernel(int n, const __grid_constant__ gt_job job) {
    typedef gt_cfg<Q> C;
    typedef gw_cfg<Q, NT, RT> G;
    constexpr int D = GW_UNITS;
    static_assert(D % 4 == 0, "4-bit scales load for groups of 4 units (gt_sload)");
    extern __shared__ uint4 gt_smem[];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    const gt_place<Q> P = gt_locate<Q>(job, n, RT * NT, lane, warp, blockIdx.x);
    const int us = P.us, live = (n - P.row0 + RT - 1) / RT, chunks = (us + D - 1) / D;

    uint32_t w[D][2][C::WPU];
    uint32_t sb[D / 4][2];
    gt_ring_start<Q, D, GT_W_EVICT>(P, w, sb, t);
    cu_pdl_enter(); /* x, the partials and the tickets are the previous ops' */
    const int64_t first = (int64_t)(P.row0 / RT) * P.U + P.ub; /* tile 0's first unit in the split rows */
    const uint4 *xs = job.xs + first * C::SXU;
    const float *Xs = job.Xs + first * RT;
#pragma unroll
    for (int c = 0; c < G::STAGES - 1; c++) {
        if (c < chunks)
            gw_stage_load<Q, NT, RT>(cu_smem_addr(gt_smem + c * G::STAGE_U4), xs, Xs, P.U, c * D, min(D, us - c * D),
                                     live);
        cu_cp_commit();
    }
    __shared__ float sc[GT_SCALE_ROWS]; /* gt_norm_after (DQ): read after the loop's barriers */
    const bool after = DQ && gt_norm_after<Q>(job.in);
    if (after) gt_row_scales(job.in, n, P.W.n_in, P.row0, RT * NT, sc);

    float acc[NT][4];
    gt_zero(acc);
    /* Chunk c is unit turn c: full turns (every unit and refill exists) first, then the last one or two. */
    int c = 0;
    for (; (c + 2) * D <= us; c++) {
        gw_next<Q, NT, RT>(c, chunks, us, xs, Xs, P.U, live);
        if (P.wact) gw_turn<Q, NT, RT, true, DQ>(c, P, w, sb, lane, acc);
    }
    for (; c < chunks; c++) {
        gw_next<Q, NT, RT>(c, chunks, us, xs, Xs, P.U, live);
        if (P.wact) gw_turn<Q, NT, RT, false, DQ>(c, P, w, sb, lane, acc);
    }
    cu_cp_wait<0>(); /* nothing may be left in flight into shared memory at exit */
    gt_finish<Q, NT, true, RT, DQ>(acc, n, P.W, P.y, P.part, P.tick, P.S, P.s, P.row0, NT, P.ob, P.o0, P.wact, lane,
                                   P.bx, &last, job.ss, after ? sc : nullptr);
}

#endif
