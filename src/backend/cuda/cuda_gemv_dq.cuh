/* cuda_gemv_dq.cuh: the many-row decode matmul on wgmma (sm_90a) for 4-bit weights (g64, g128) in
 * QUILL_DECODE_PRECISION=dequant, included by cuda_gemv.cuh.
 *
 * In that mode every decode kernel computes a row the same way (cuda_gemv.cuh, DQ): x rounded to bf16, a unit's
 * codes made bf16 weights by gt_dq, and one chain of k16 MMAs per (output, row) over the weight's K slice, the
 * slices' partials then summed in slice order. With no fold per unit the chain can run on wgmma: one
 * wgmma.m64n(8 NT)k16 a k-step for the warpgroup's 64 outputs and all of the block's rows, its sums mma.sync's bit
 * for bit (cuda_wgmma.cuh), so a row's bits are those of the one-row kernels (EXACT(batch)). The units' A
 * fragments are made once for all the rows (the dequantisation costs a unit what it costs one row), and B comes
 * from shared memory by the tensor cores, where gemv_wide_kernel loads fragments and issues 4 mma.sync a tile.
 *
 * A block is gemv_wide_kernel's: 8 warps (2 warpgroups, 128 outputs), NT tiles of 8 rows (up to 64), one K slice.
 * Its finish sums the slices in a thread block cluster (CL, gdq_finish_cluster) where a tile's blocks fit one
 * (gdq_cluster), else as gemv_wide_kernel does (gt_finish RT = 8: wgmma's accumulators are RT = 8's acc[T][c]
 * layout). x comes split by gemv_split_kernel (RT = 8, WGO) as wgmma's B rows: per unit, the block's rows of 64 bf16 values (128 bytes
 * each), in the MMA's k-slot order (slots 2t, 2t + 1 and 2t + 8, 2t + 9 of k-step j are the words b0 and b1 that
 * lane (row, t)'s fragment holds for j), which the stage loads put in the 128-byte swizzle. */
#ifndef QUILL_CUDA_GEMV_DQ_CUH
#define QUILL_CUDA_GEMV_DQ_CUH

#include "cuda_wgmma.cuh"

/* A stage: GW_UNITS units of B, each 8 NT rows x 128 bytes (1024-aligned for the swizzle). Three stages when two
 * blocks of them fit an SM. At 8 tiles two blocks of SMEM (97 KB, plus the 1 KB a block reserves) fill the 196 KB
 * shared-memory carveout exactly, so the cluster instance must stay free of static shared memory: 256 bytes of it
 * took the launches to the 228 KB carveout (L1 28 KB instead of 60, most likely what the weights' loads then
 * missed) and 64 streams from ~9,640 to ~8,720 tokens/s (session 29, docs/performance.md). */
template <int NT> struct gdq_cfg {
    static constexpr int ROWS = 8 * NT;
    static constexpr int UNIT_BYTES = ROWS * 128;
    static constexpr int B_BYTES = GW_UNITS * UNIT_BYTES;
    static constexpr int STAGES = 3 * B_BYTES + 1024 <= 112 * 1024 ? 3 : 2;
    static constexpr int SMEM = STAGES * B_BYTES + 1024; /* + the slack that aligns the stages to 1024 */
    static_assert(SMEM <= 112 * 1024, "two blocks an SM");
    static_assert(SMEM >= GT_SS_SMEM(ROWS), "gt_finish keeps the squares of the block's rows in the stages");
};

/* The stage loads: x comes split in this kernel's order (gemv_split_kernel WGO: a tile's unit is 8 rows of 128
 * bytes, k-slot order), so a unit of a tile is 64 pieces of 16 bytes that land swizzled. A thread takes one piece
 * (row g, 16-byte chunk c) of one unit d of every tile: its shared offset (gdq_dst) and its piece of tile 0 in
 * the split rows (gdq_src) are fixed, the rest constant strides. (Gathering 4-byte words from the fragment layout
 * cost 32 copies a thread a stage and ~40 % of the kernel's instructions, ncu.) */
__device__ __forceinline__ uint32_t gdq_dst(int unit_bytes) {
    const int c = threadIdx.x & 7, g = (threadIdx.x >> 3) & 7, d = threadIdx.x >> 6;
    return d * unit_bytes + g * 128 + ((c ^ g) << 4);
}
__device__ __forceinline__ const uint4 *gdq_src(const uint4 *xs) {
    return xs + (threadIdx.x >> 6) * gt_cfg<64>::SXU + (threadIdx.x & 63);
}
/* Issues the cp.async of units [u0, u0 + uc) of the block's tiles into the stage at shared address bst (tiles >=
 * live and units >= uc: zeros); src: this thread's piece of the slice's first unit (gdq_src), ts: a tile's stride
 * in the split rows (uint4). */
template <int NT>
__device__ __forceinline__ void gdq_stage_load(uint32_t bst, const uint4 *__restrict__ src, int64_t ts, int u0, int uc,
                                               int live) {
    typedef gdq_cfg<NT> G;
    static_assert(GW_UNITS == 4 && GT_THREADS == 256 && gt_cfg<64>::SXU == 64, "a thread a piece of one unit");
    const uint32_t dst = bst + gdq_dst(G::UNIT_BYTES);
    const uint4 *s0 = src + (int64_t)u0 * gt_cfg<64>::SXU;
    const bool here = (int)(threadIdx.x >> 6) < uc;
#pragma unroll
    for (int T = 0; T < NT; T++) {
        const bool ok = here && T < live;
        cu_cp_async16(dst + T * 1024, ok ? (const void *)(s0 + T * ts) : (const void *)src, ok);
    }
}

/* Before chunk c: waits for its stage and makes the cp.async writes visible to the tensor cores' reads, then sends
 * the chunk STAGES - 1 ahead into the stage chunk c - 1 used (every warp is past it and its wgmmas: the barrier). */
template <int NT>
__device__ __forceinline__ void gdq_next(int c, int chunks, int us, uint32_t b0, const uint4 *xs, int64_t ts,
                                         int live) {
    typedef gdq_cfg<NT> G;
    cu_cp_wait<G::STAGES - 2>();
#if WG_ON
    cu_fence_proxy_async();
#endif
    __syncthreads();
    const int next = c + G::STAGES - 1;
    if (next < chunks)
        gdq_stage_load<NT>(b0 + (next % G::STAGES) * G::B_BYTES, xs, ts, next * GW_UNITS,
                           min(GW_UNITS, us - next * GW_UNITS), live);
    cu_cp_commit();
}

/* The split-K finish of a cluster (CL): the launch puts a tile's S slices side by side (gt_locate s_inner) in
 * clusters of C blocks (C: the job's largest S, which every S divides), so each (output block, row chunk) has its
 * S blocks in one cluster, at ranks r0 .. r0 + S - 1 (r0 = rank - s). Each block leaves its sums in its shared
 * memory (rows of GDQ_LD floats: the accumulators' stores free of bank conflicts), and after the cluster's
 * barrier block s sums rows [s R, s R + R) of the tile (R = 8 NT / S) over the S blocks' shared memory in slice
 * order, sum = p0, sum += p1, ... as gt_finish adds the partials, so the bits are its. With ss (resid_matmul) it
 * adds the sums to the residual and leaves its rows' sums of squares as gt_finish does (the same squares, the
 * same warp_sum, the same (q0 + q1) + (q2 + q3)). No partials in global memory, no tickets: the last block's
 * sum of the partials in gt_finish was ~55 % of the 64-row launch (the same kernel without it: 4096x4096 28.5 ->
 * 12.7 us, 12288x4096 42.4 -> 25.6). The second barrier keeps every block's shared memory until the others have
 * read it. */
#define GDQ_LD (GT_OUT + 4)
#define GDQ_MAX_CLUSTER 8 /* the portable cluster size; a job with a larger S takes gt_finish */
/* gt_norm_after's row scales (gdq_scales): in the 1024 bytes that align the stages, before them where GDQ_SC bytes lie
 * there, else after them; the cluster finish's sums start past GDQ_SC. Not static shared memory: at 8 tiles two
 * blocks of 97 KB fill the 196 KB shared carveout exactly, and 256 bytes more took the next one (228 KB), whose
 * 28 KB of L1 the weight loads then miss (64 streams 9,640 -> 8,420 tokens/s, session 29). */
#define GDQ_SC (GT_SCALE_ROWS * 4)
template <int NT> struct gdq_fin_cfg {
    static constexpr int ROWS = 8 * NT, SUMS = GDQ_SC, SQ = SUMS + ROWS * GDQ_LD * 4; /* byte offsets */
    static_assert(SQ + GT_SS_SMEM(ROWS) <= gdq_cfg<NT>::STAGES * gdq_cfg<NT>::B_BYTES,
                  "the scales, the sums and the squares fit the stages");
};
__device__ __forceinline__ float *gdq_scales(uint32_t base, uint32_t b0, int stage_bytes) {
    extern __shared__ uint4 gt_smem[];
    return (float *)((char *)gt_smem + (b0 - base >= GDQ_SC ? 0u : b0 - base + (uint32_t)stage_bytes));
}
/* The roles of gemv_dq_kernel's instances, so that each compiles only what it does: GDQ_PLAIN (x or a gate; with ss
 * the residual), GDQ_NEXT (resid_matmul writing the next norm's split rows, job.nx), GDQ_AFTER (a normalised input
 * taking the norm's scale after the product, gt_norm_after), GDQ_GLU (a GLU pair, job.gx: GDQ_AFTER's product for a
 * gate and an up, whose finish leaves the GLU's split rows; clusters only). One instance for the first three made
 * every launch slower, the head +4.4 % (session 29). */
enum { GDQ_PLAIN = 0, GDQ_NEXT = 1, GDQ_AFTER = 2, GDQ_GLU = 3 };
template <int Q> __host__ __device__ inline int gdq_role(const gt_job &job) {
    return job.gx ? GDQ_GLU : job.nx ? GDQ_NEXT : gt_norm_after<Q>(job.in) ? GDQ_AFTER : GDQ_PLAIN;
}
/* A cluster finish's first half: once every warp is done with the stages, the block's accumulators into its sums (every
 * warp, past the outputs too: the readers load whole rows and discard those outputs, never the stages' x); then the
 * cluster's barrier, and src[q]: the sums of the tile's slice-q block in the cluster's shared window (s: this
 * block's slice). */
template <int NT, int S>
__device__ __forceinline__ void gdq_share_sums(const float (&acc)[NT][4], float *sums, int s, int lane, int warp,
                                               uint32_t (&src)[S]) {
    const int g = lane >> 2, t = lane & 3;
    __syncthreads();
#pragma unroll
    for (int T = 0; T < NT; T++)
#pragma unroll
        for (int c = 0; c < 4; c++) sums[(8 * T + 2 * t + (c & 1)) * GDQ_LD + warp * 16 + g + (c >> 1) * 8] = acc[T][c];
    cu_cluster_sync();
    const int r0 = cu_cluster_rank() - s;
    const uint32_t at = cu_smem_addr(sums);
#pragma unroll
    for (int q = 0; q < S; q++) src[q] = cu_cluster_map(at, r0 + q);
}
/* The cluster finish for S blocks: each block's accumulators into its sums, then block s's rows of the tile summed
 * over the S blocks (every load out before the first add) into y (plus the residual with ss, and their squares;
 * GDQ_AFTER: times the row's scale from sc; GDQ_NEXT: the next norm's split rows too). The whole finish is an
 * instance for each S: 16 / 32 streams +1.4 / +0.8 % over one with the barriers outside the switch (session 31). */
template <int Q, int NT, int S, int ROLE>
__device__ __forceinline__ void gdq_finish_s(const float (&acc)[NT][4], int n, const gt_place<Q> &P, const gt_job &job,
                                             const float *sc, int lane, int warp) {
    typedef gdq_fin_cfg<NT> F;
    /* block s sums rows [s R, s R + R) of the tile; where S does not divide them (S = 6, gemv_tc_split) the last
     * block takes fewer, and a thread's items past its block's rows load a row of them and store nothing */
    constexpr int ROWS = 8 * NT, R = (ROWS + S - 1) / S, ITEMS = R * GT_OUT;
    constexpr int ITER = (ITEMS + GT_THREADS - 1) / GT_THREADS;
    constexpr bool EVEN = ROWS % S == 0 && ITEMS % GT_THREADS == 0;
    const int rows_here = EVEN ? R : min(R, ROWS - P.s * R);
    extern __shared__ uint4 gt_smem[];
    float *sums = (float *)((char *)gt_smem + F::SUMS), *sq = (float *)((char *)gt_smem + F::SQ);
    float *__restrict__ ss = job.ss;
    const int n_out = (int)P.W.n_out;
    const float nwv = ROLE == GDQ_NEXT ? gt_next_w(job.nx_w, P.ob, n_out) : 0.0f; /* before the barriers */
    uint32_t src[S];
    gdq_share_sums<NT, S>(acc, sums, P.s, lane, warp, src);
    float v[ITER][S];
#pragma unroll
    for (int k = 0; k < ITER; k++) {
        const int i = threadIdx.x + k * GT_THREADS, rl = P.s * R + (EVEN ? i / GT_OUT : min(i / GT_OUT, rows_here - 1));
#pragma unroll
        for (int q = 0; q < S; q++) v[k][q] = cu_cluster_ld(src[q] + (uint32_t)(rl * GDQ_LD + i % GT_OUT) * 4u);
    }
#pragma unroll
    for (int k = 0; k < ITER; k++) {
        const int i = threadIdx.x + k * GT_THREADS, r = P.row0 + P.s * R + i / GT_OUT, og = P.ob * GT_OUT + i % GT_OUT;
        float sum = v[k][0];
#pragma unroll
        for (int q = 1; q < S; q++) sum += v[k][q];
        const bool mine = EVEN || i / GT_OUT < rows_here, here = mine && r < n && og < n_out;
        if (here) {
            float *d = P.y + (int64_t)r * n_out + og;
            if (ss) sum = d[0] + sum;
            else if (ROLE == GDQ_AFTER) sum = __fmul_rn(sum, sc[r - P.row0]);
            d[0] = sum;
            if (ROLE == GDQ_NEXT) gt_next_store(job.nx, n_out / 64, r, og, sum, nwv);
        }
        if (ss && (EVEN || i < ITEMS)) sq[i] = here ? sum * sum : 0.0f;
    }
    if (ss) {
        const int first = P.row0 + P.s * R;
        __syncthreads();
        gt_store_squares(sq, min(rows_here, n - first), first, (n_out + GT_OUT - 1) / GT_OUT, P.ob, ss, lane);
    }
    cu_cluster_sync_relaxed(); /* the other blocks are done reading this one's sums */
}
/* GDQ_GLU's cluster finish for S blocks: the sums stored as gdq_finish_s stores them (columns 0-63 the gate's outputs
 * 64 ob + c, 64-127 the up's), then block s takes rows [s R, s R + R) of the tile, each thread a (row, c): the gate's
 * and the up's sums over the S blocks in slice order, each times the row's scale (GDQ_AFTER's bits), into y[0] and
 * y[1], and bf16(swiglu(gate, up)) into job.gx, what gemv_split_kernel's GLU staging makes of those two. */
template <int Q, int NT, int S>
__device__ __forceinline__ void gdq_finish_glu_s(const float (&acc)[NT][4], int n, const gt_place<Q> &P,
                                                 const gt_job &job, const float *sc, int lane, int warp) {
    typedef gdq_fin_cfg<NT> F;
    constexpr int H = GT_OUT / 2, R = 8 * NT / S, ITEMS = R * H, ITER = (ITEMS + GT_THREADS - 1) / GT_THREADS;
    static_assert(8 * NT % S == 0, "a GLU pair's slices divide the tile's rows (gemv_tc_glu_rows_ok)");
    extern __shared__ uint4 gt_smem[];
    float *sums = (float *)((char *)gt_smem + F::SUMS);
    const int n_out = (int)job.W[0].n_out;
    uint32_t src[S];
    gdq_share_sums<NT, S>(acc, sums, P.s, lane, warp, src);
    /* 16 loads out at once: with fewer, or all of them, ptxas spilled more at 8 tiles */
    constexpr int KB = ITER < 8 / S ? ITER : 8 / S > 0 ? 8 / S : 1;
#pragma unroll
    for (int k0 = 0; k0 < ITER; k0 += KB) {
        float vg[KB][S], vu[KB][S];
#pragma unroll
        for (int k = 0; k < KB; k++) {
            const int i = min((int)threadIdx.x + (k0 + k) * GT_THREADS, ITEMS - 1), rl = P.s * R + i / H;
            const uint32_t off = (uint32_t)(rl * GDQ_LD + i % H) * 4u;
#pragma unroll
            for (int q = 0; q < S; q++)
                vg[k][q] = cu_cluster_ld(src[q] + off), vu[k][q] = cu_cluster_ld(src[q] + off + H * 4);
        }
#pragma unroll
        for (int k = 0; k < KB; k++) {
            const int i = threadIdx.x + (k0 + k) * GT_THREADS, rl = P.s * R + i / H, r = P.row0 + rl;
            const int o = P.ob * H + i % H;
            float gs = vg[k][0], us = vu[k][0];
#pragma unroll
            for (int q = 1; q < S; q++) gs += vg[k][q], us += vu[k][q];
            if (k0 + k < ITER && i < ITEMS && r < n && o < n_out) {
                gs = __fmul_rn(gs, sc[rl]), us = __fmul_rn(us, sc[rl]);
                job.y[0][(int64_t)r * n_out + o] = gs;
                job.y[1][(int64_t)r * n_out + o] = us;
                gt_split_store(job.gx, n_out / 64, r, o, swiglu_f(gs, us));
            }
        }
    }
    cu_cluster_sync_relaxed(); /* the other blocks are done reading this one's sums */
}
/* The role's cluster finish for S blocks. */
template <int Q, int NT, int S, int ROLE>
__device__ __forceinline__ void gdq_finish_role_s(const float (&acc)[NT][4], int n, const gt_place<Q> &P,
                                                  const gt_job &job, const float *sc, int lane, int warp) {
    if constexpr (ROLE == GDQ_GLU) gdq_finish_glu_s<Q, NT, S>(acc, n, P, job, sc, lane, warp);
    else gdq_finish_s<Q, NT, S, ROLE>(acc, n, P, job, sc, lane, warp);
}
template <int Q, int NT, int ROLE>
__device__ __forceinline__ void gdq_finish_cluster(const float (&acc)[NT][4], int n, const gt_place<Q> &P,
                                                   const gt_job &job, const float *sc, int lane, int warp) {
    /* gemv_tc_split's S: powers of two, or 6; a cluster's at most GDQ_MAX_CLUSTER, at least 2 (gdq_cluster). A GLU
     * pair's gate and up (12288x4096 on the 9B) take powers of two. */
    switch (P.S) {
    case 2: gdq_finish_role_s<Q, NT, 2, ROLE>(acc, n, P, job, sc, lane, warp); break;
    case 4: gdq_finish_role_s<Q, NT, 4, ROLE>(acc, n, P, job, sc, lane, warp); break;
    case 6:
        if constexpr (ROLE != GDQ_GLU) gdq_finish_role_s<Q, NT, 6, ROLE>(acc, n, P, job, sc, lane, warp);
        break;
    default: gdq_finish_role_s<Q, NT, 8, ROLE>(acc, n, P, job, sc, lane, warp); break;
    }
}

/* Every warp of a warpgroup issues its wgmmas, so warps past the outputs compute on clamped rows and do not write.
 * A unit's A fragments live in one of two sets until its group completes: before a set is made again, the group
 * two units back (the one that read it) is waited for, and a chunk's last group before the barrier that lets its
 * stage be refilled. */
template <int Q, int NT, bool CL, int ROLE>
__global__ void __launch_bounds__(GT_THREADS, 2) gemv_dq_kernel(int n, const __grid_constant__ gt_job job) {
    typedef gt_cfg<Q> C;
    typedef gdq_cfg<NT> G;
    constexpr int D = GW_UNITS;
    extern __shared__ uint4 gt_smem[];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    constexpr bool SCALED = ROLE == GDQ_AFTER || ROLE == GDQ_GLU;
    static_assert(ROLE != GDQ_GLU || CL, "a GLU pair finishes in its cluster");
    const gt_place<Q> P = gt_locate<Q>(job, n, 8 * NT, lane, warp, blockIdx.x, CL, ROLE == GDQ_GLU);
    const int us = P.us, live = (n - P.row0 + 7) / 8, chunks = (us + D - 1) / D;
    const uint32_t base = cu_smem_addr(gt_smem), b0 = (base + 1023u) & ~1023u;

    uint32_t w[D][2][C::WPU];
    uint32_t sb[D / 4][2];
    gt_ring_start<Q, D, GT_W_EVICT>(P, w, sb, t);
    cu_pdl_enter(); /* x, the partials and the tickets are the previous ops' */
    const uint4 *xs = gdq_src(job.xs + ((int64_t)(P.row0 / 8) * P.U + P.ub) * C::SXU); /* tile 0's first unit */
    const int64_t ts = (int64_t)P.U * C::SXU;
#pragma unroll
    for (int c = 0; c < G::STAGES - 1; c++) {
        if (c < chunks) gdq_stage_load<NT>(b0 + c * G::B_BYTES, xs, ts, c * D, min(D, us - c * D), live);
        cu_cp_commit();
    }
    if constexpr (SCALED) /* read after the loop's barriers */
        gt_row_scales(job.in, n, job.W[0].n_in, P.row0, 8 * NT, gdq_scales(base, b0, G::STAGES * G::B_BYTES));
    float acc[NT][4];
    gt_zero(acc);
    float(&d4)[4 * NT] = reinterpret_cast<float(&)[4 * NT]>(acc);
    uint32_t a[2][2][8];
    for (int c = 0; c < chunks; c++) {
        gdq_next<NT>(c, chunks, us, b0, xs, ts, live);
        const int ubase = c * D, here = min(D, us - ubase);
        const unsigned char *q0 = P.p0 + (int64_t)ubase * C::UB, *q8 = P.p8 + (int64_t)ubase * C::UB;
        const uint32_t st = b0 + (c % G::STAGES) * G::B_BYTES;
#pragma unroll
        for (int d = 0; d < D; d++) {
            if (d >= here) break; /* uniform */
            wg_wait<1>();
            gt_dq_frags<C::WPU>(w[d], sb[d / 4], (lane & ~3) | (d & 3), a[d & 1]);
            if (ubase + d + D < us) gt_wload<Q, GT_W_EVICT>(w[d], q0 + (d + D) * C::UB, q8 + (d + D) * C::UB);
            if ((d & 3) == 3 && ubase + d + D - 3 < us)
                gt_sload<Q, GT_W_EVICT>(sb[d / 4], P.s0, P.bb0, P.ub, ubase + d + D - 3, us, t);
            const uint32_t bu = st + d * G::UNIT_BYTES;
            wg_fence();
#pragma unroll
            for (int j = 0; j < 4; j++) { /* gt_ksteps' k-step j */
                const uint32_t k[4] = {a[d & 1][0][2 * j], a[d & 1][1][2 * j], a[d & 1][0][2 * j + 1],
                                       a[d & 1][1][2 * j + 1]};
                wg_mma_ra<8 * NT>(d4, k, wg_desc(bu + 32 * j), 1);
            }
            wg_commit();
        }
        wg_wait<0>();
    }
    cu_cp_wait<0>(); /* nothing may be left in flight into shared memory at exit */
    const float *sc = SCALED ? gdq_scales(base, b0, G::STAGES * G::B_BYTES) : nullptr;
    if constexpr (CL)
        gdq_finish_cluster<Q, NT, ROLE>(acc, n, P, job, sc, lane, warp);
    else
        gt_finish<Q, NT, true, 8, true>(acc, n, P.W, P.y, P.part, P.tick, P.S, P.s, P.row0, NT, P.ob, P.o0, P.wact,
                                        lane, P.bx, &last, job.ss, sc, ROLE == GDQ_NEXT ? job.nx : nullptr,
                                        ROLE == GDQ_NEXT ? job.nx_w : nullptr);
}

#endif
