/* cuda_gemv_plan.cuh: the host side of the decode matmul (cuda_gemv.cuh): which kernel a weight takes,
 * the K split and row tiles (functions of the weight's shape and n only), the scratch a call needs, and the
 * launch of up to GT_JOB weights that share x. Included at the end of cuda_gemv.cuh. */
#ifndef QUILL_CUDA_GEMV_PLAN_CUH
#define QUILL_CUDA_GEMV_PLAN_CUH

/* Which tensor-core kernel a weight takes (-1: none): a property of the weight alone. */
static inline int gemv_tc_kind(const qweight *W) {
    if (W->fmt == QW_BF16 && W->n_in % 32 == 0) return 0;
    /* 4-bit tiled (cuda_q4_tiled.cuh's q4t_eligible: group 64 or 128, bf16 scales, MLX's); f16 / f32 scales and
     * untiled weights take the SIMT kernel */
    if (W->fmt == QW_AFFINE && W->tiled) return W->group;
    return -1;
}

static inline int gemv_tc_unit_k(int kind) { return kind ? 64 : 32; }
/* Staged bytes of one tile of rt rows and one unit: the B fragments and (4-bit) the rows' X sums. */
static inline size_t gemv_tc_tile_unit_bytes(int kind, int rt = 4) {
    return kind ? (size_t)gt_cfg<64>::SXU * 16 + (size_t)rt * sizeof(float) : (size_t)gt_cfg<0>::SXU * 16;
}

/* Units a 4-bit weight's slice keeps at least in dequant mode, where the many-row kernel (gemv_dq_kernel) is what the
 * mode is for: fewer, longer slices, so a launch's clusters fit one wave (a 4096x4096 weight: 4 slices of 16 units,
 * 128 blocks in clusters of 4, where 8 slices of 8 took 256 blocks in clusters of 8, 240 of which fit at once). The
 * one-row kernels of the mode take the same slices (EXACT(batch)). QUILL_CUDA_DQ_MIN_SLICE overrides it (an A/B in
 * one build; the bits change with it). Read once. */
#ifndef GT_MIN_SLICE_DQ
#define GT_MIN_SLICE_DQ 16
#endif
static inline bool gt_dq_weight(int kind) { /* a 4-bit weight in dequant mode */
    static int mode = -1; /* racing first callers compute the same value */
    static const char *bad;
    /* the mode's code: a bad value fails where the matmul reads it (cu_decode_precision) */
    return kind && cu_precision_code("QUILL_DECODE_PRECISION", &mode, &bad, 1) == GT_DQ;
}
static inline int gt_min_slice(int kind) {
    static int dq = -1;
    return gt_dq_weight(kind) ? cu_env_int("QUILL_CUDA_DQ_MIN_SLICE", &dq, GT_MIN_SLICE_DQ, 1, 1024) : GT_MIN_SLICE;
}
static inline int gdq_fit_blocks(void);

/* The units of W's longest slice of S (gt_locate's slices differ by at most one unit). */
static inline int64_t gemv_tc_slice_units(const qweight *W, int kind, int S) {
    return (W->n_in / gemv_tc_unit_k(kind) + S - 1) / S;
}

/* K slices: a function of the weight's shape (and the decode precision; in dequant mode the device's room for
 * clusters of 8 too) only. Enough blocks to fill the GPU about twice (GT_BLOCKS), each slice at least gt_min_slice
 * units, and always few enough units per slice that GT_FIT_TILES_* tiles of staged rows fit the shared memory. */
static inline int gemv_tc_split(const qweight *W, int kind) {
    if (W->split > 0) return W->split; /* its group's (gemv_tc_group_splits) */
    const int64_t U = W->n_in / gemv_tc_unit_k(kind), ob = (W->n_out + GT_OUT - 1) / GT_OUT;
    const size_t tub = gemv_tc_tile_unit_bytes(kind);
    const int64_t aim = kind ? GT_BLOCKS_Q4 : GT_BLOCKS, fit = kind ? GT_FIT_TILES_Q4 : GT_FIT_TILES_BF16;
    const int min_slice = gt_min_slice(kind);
    int S = 1;
    while (S < GT_MAX_SPLIT &&
           ((size_t)gemv_tc_slice_units(W, kind, S) * tub * fit > GT_SMEM_MAX ||
            (ob * S < aim && U / (S * 2) >= min_slice)))
        S *= 2;
    /* Dequant mode: a launch of one tile (up to 64 rows) finishes in clusters of S, and fewer clusters of 8 fit at
     * once than blocks alone (30 on the H200: 240 blocks of 264). Where 8 slices would need more than fit (the 9B's
     * down projection, 4096x12288: 32 clusters, whose last 2 waited for the first to end, ncu) and the units divide
     * by 6 into slices of at least min_slice, 6 slices take the whole launch in one wave (192 blocks of 32 units,
     * clusters of 6 at every row count: gdq_cluster_fits). QUILL_CUDA_DQ_SIX=0 keeps 8 (an A/B in one build; the
     * bits change with it). */
    static int six = -1;
    if (S == GDQ_MAX_CLUSTER && U % 6 == 0 && U / 6 >= min_slice && gt_dq_weight(kind) &&
        cu_env_on("QUILL_CUDA_DQ_SIX", &six) && gdq_fit_blocks() > 0 && ob * S > gdq_fit_blocks())
        S = 6;
    return S;
}

/* Shared memory of a block with nt row tiles: nt staged tiles of the weight's longest slice (of S slices; 0: W's). */
static inline size_t gemv_tc_smem(const qweight *W, int kind, int nt, int S = 0) {
    if (S <= 0) S = gemv_tc_split(W, kind);
    return (size_t)gemv_tc_slice_units(W, kind, S) * gemv_tc_tile_unit_bytes(kind) * (size_t)nt;
}

/* Row tiles per block for n rows: as many as n needs (1 or 2) while the staged slice fits. */
static inline int gemv_tc_tiles(const qweight *W, int kind, int n) {
    int nt = 1;
    while (nt < GT_MAX_TILES && nt * 4 < n && gemv_tc_smem(W, kind, nt * 2) <= GT_SMEM_MAX) nt *= 2;
    return nt;
}

/* Scratch a call needs: partial floats (S > 1) and ticket counters (zeroed once; each call leaves them
 * zero). */
static inline size_t gemv_tc_part_floats(const qweight *W, int n) {
    const int S = gemv_tc_split(W, gemv_tc_kind(W));
    return S > 1 ? (size_t)S * (size_t)n * (size_t)W->n_out : 0;
}
/* Rows per tile of a launch on n rows: 8 in the many-row kernel with bf16 x (bf16x: QUILL_DECODE_PRECISION=bf16,
 * cuda_gemv.cuh), else 4 (a row's hi and lo columns; with bf16 x, lo = 0). */
static inline int gemv_tc_tile_rows(int n, int bf16x) { return n > GW_MIN_ROWS && bf16x ? 8 : 4; }

/* Tiles of 8 rows a many-row block takes at most: 4 (tune_gemv, 64 rows, 4-bit: the MLP shapes 10-17 % faster
 * than 8, whose kernel spills), but 8 for weights larger than L2 (the head: 4 % slower with 4, the second row
 * chunk reading it from DRAM again) and for 4-bit weights in dequant mode (gemv_dq_kernel: a unit's A fragments
 * serve all 64 rows). */
#ifndef GW_RT8_TILES
#define GW_RT8_TILES 4
#endif
#define GW_HUGE_BYTES ((int64_t)64 << 20)

/* Row tiles of a launch for count weights sharing n rows. Many rows (gemv_wide_kernel): enough for n, up
 * to GW_MAX_TILES (tiles of 4 rows) or the above (of 8). Else the fewest any of the weights takes, so every
 * block's staged slice fits (a launch of one weight: that weight's own). */
static inline int gemv_tc_job_tiles(int kind, int n, int count, const qweight *const *W, int bf16x) {
    if (n > GW_MIN_ROWS) {
        const int rt = gemv_tc_tile_rows(n, bf16x);
        int most = GW_MAX_TILES;
        if (rt == 8) { /* gt_launch_q's instances: 2, 4, 8 */
            most = kind != 0 && bf16x == GT_DQ ? 8 : std::min(GW_RT8_TILES, 8);
            for (int i = 0; i < count; i++) {
                const int64_t bytes = kind ? W[i]->n_out * W[i]->n_in / 2 : W[i]->n_out * W[i]->n_in * 2;
                if (bytes > GW_HUGE_BYTES) most = 8;
            }
        }
        int nt = rt == 8 ? 2 : 4;
        while (nt < most && nt * rt < n) nt *= 2;
        return nt;
    }
    int nt = GT_MAX_TILES;
    for (int i = 0; i < count; i++) nt = min(nt, gemv_tc_tiles(W[i], kind, n));
    return nt;
}

/* Ticket counters W needs on n rows in a launch of nt row tiles (gemv_tc_job_tiles): one per (output
 * block, row chunk). */
static inline size_t gemv_tc_ticks(const qweight *W, int n, int nt, int bf16x) {
    const int rows = gemv_tc_tile_rows(n, bf16x) * nt;
    return (size_t)((W->n_out + GT_OUT - 1) / GT_OUT) * (size_t)((n + rows - 1) / rows);
}

/* More rows than GT_PRE_ROWS: x is split once per launch into `pre` (gemv_tc_pre_bytes), not by every
 * block (at 64 rows the blocks' staging was ~40 % of the kernel's instructions). */
#define GT_PRE_ROWS 4
static_assert(GW_MIN_ROWS >= GT_PRE_ROWS, "the wide kernel reads x split by gemv_split_kernel");
static_assert(GW_MIN_ROWS <= 4 * GT_MAX_TILES, "gemv_tc_kernel takes at most GT_MAX_TILES tiles of 4 rows");
static inline size_t gemv_tc_pre_bytes(const qweight *W, int n, int bf16x) {
    const int kind = gemv_tc_kind(W), rt = gemv_tc_tile_rows(n, bf16x);
    if (n <= GT_PRE_ROWS || kind < 0) return 0;
    return (size_t)((n + rt - 1) / rt) * (size_t)(W->n_in / gemv_tc_unit_k(kind)) * gemv_tc_tile_unit_bytes(kind, rt);
}

/* QUILL_CUDA_GEMV_LOOP=0 keeps launches of many blocks at one output block a block (gemv_tc_kernel LOOP; an A/B
 * of the two in one build, the bits are the same). Read once. Launches of a plain x on one 4-bit weight with at
 * least GT_LOOP_WAVES waves of blocks loop (the head). */
#ifndef GT_LOOP_WAVES
#define GT_LOOP_WAVES 4
#endif
static inline int gt_loop_on(void) {
    static int on = -1;
    return cu_env_on("QUILL_CUDA_GEMV_LOOP", &on);
}

/* QUILL_CUDA_XTMA: which one-row kernels take x by bulk copies (gt_block's XT, in a build with GT_X_TMA 1): 0 none (x
 * loaded as before), 1 plain and normalised x, 2 (default) gated x too. An A/B in one build; the bits are the same.
 * Read once. */
static inline int gt_xtma_level(void) {
    static int level = -1;
    return GT_X_TMA ? cu_env_int("QUILL_CUDA_XTMA", &level, 2, 0, 2) : 0;
}

/* QUILL_CUDA_GEMV_LEAN=0 keeps every one-tile launch on the default variant (an A/B of the two in one build;
 * the bits are the same). Read once. */
static inline int gt_lean_on(void) {
    static int on = -1;
    return cu_env_on("QUILL_CUDA_GEMV_LEAN", &on);
}

/* Whether a one-tile launch of `blocks` takes the lean variant (GT_LEAN_BLOCKS an SM) rather than the default
 * (GT_MIN_BLOCKS): past GT_LEAN_WAVES waves of the default, even where the lean variant's last wave is the emptier
 * (the 9B's GDN in, 528 blocks: in two full waves at 2 an SM the 4-bit step was 1.7 % slower, session 45). */
static inline bool gt_use_lean(unsigned blocks) {
    return gt_lean_on() && blocks > (unsigned)(GT_LEAN_WAVES * GT_MIN_BLOCKS * cu_sms());
}

/* A group of 4-bit weights that always go out together (backend.h's group_weights): where their one-row launch takes
 * the lean variant and more than one wave of it, the largest splits are halved, largest first (then the weight of
 * more output blocks, then the first), until it takes one: the 9B's gate + up 768 -> 384 blocks, its GDN in 528 ->
 * 396 on 132 SMs. The tail of a second wave costs more than the longer slices (docs/performance.md, fifty-sixth
 * pass; bf16's gate + up in one wave was slower, the thirty-seventh). A split stays a power of two of at least 2
 * whose slice fits the shared memory as gemv_tc_split's do. Fills S[i] and returns 1 where that fits the group in
 * one wave; else 0 (each weight keeps its own). QUILL_CUDA_GROUP_SPLIT=0: 0 always (an A/B in one build; the bits
 * change with it). */
static inline int gemv_tc_group_splits(int count, const qweight *const *W, int *S) {
    static int on = -1;
    const int kind = gemv_tc_kind(W[0]);
    if (count < 2 || count > GT_JOB || kind <= 0 || !cu_env_on("QUILL_CUDA_GROUP_SPLIT", &on)) return 0;
    int64_t blocks = 0, ob[GT_JOB];
    for (int i = 0; i < count; i++) {
        if (gemv_tc_kind(W[i]) != kind || W[i]->n_in != W[0]->n_in || W[i]->split > 0) return 0;
        S[i] = gemv_tc_split(W[i], kind), ob[i] = (W[i]->n_out + GT_OUT - 1) / GT_OUT;
        blocks += ob[i] * S[i];
    }
    const int64_t slots = (int64_t)GT_LEAN_BLOCKS * cu_sms();
    if (blocks > 0xffffffffLL || !gt_use_lean((unsigned)blocks) || blocks <= slots) return 0;
    const size_t room = GT_SMEM_MAX / (gemv_tc_tile_unit_bytes(kind) * GT_FIT_TILES_Q4);
    while (blocks > slots) {
        int b = -1;
        for (int i = 0; i < count; i++)
            if (S[i] >= 4 && (S[i] & (S[i] - 1)) == 0 && (size_t)gemv_tc_slice_units(W[i], kind, S[i] / 2) <= room &&
                (b < 0 || S[i] > S[b] || (S[i] == S[b] && ob[i] > ob[b])))
                b = i;
        if (b < 0) return 0;
        blocks -= ob[b] * (S[b] / 2), S[b] /= 2;
    }
    return 1;
}

/* The one-tile kernel that stages its own x, of input kind `in` (gt_in_kind). */
typedef void (*kernel_fn)(const float *, int, const gt_job);
template <int Q, int MINB, bool DQ = false> static inline kernel_fn gt_staging_kernel(int in) {
    return in == GT_IN_GLU     ? gemv_tc_kernel<Q, 1, false, MINB, GT_IN_GLU, false, DQ>
           : in == GT_IN_NORM  ? gemv_tc_kernel<Q, 1, false, MINB, GT_IN_NORM, false, DQ>
           : in == GT_IN_GNORM ? gemv_tc_kernel<Q, 1, false, MINB, GT_IN_GNORM, false, DQ>
                               : gemv_tc_kernel<Q, 1, false, MINB, GT_IN_X, false, DQ>;
}
/* The split-once kernel of input kind `in` and RT rows a tile (the 4-bit groups share one layout: Q = 64). */
typedef void (*split_fn)(const float *, const gt_input, int, int64_t, uint4 *, float *);
template <int Q, int RT, bool WGO = false> static inline split_fn gt_split_kernel_rt(int in) {
    return in == GT_IN_GLU     ? gemv_split_kernel<Q, GT_IN_GLU, RT, WGO>
           : in == GT_IN_NORM  ? gemv_split_kernel<Q, GT_IN_NORM, RT, WGO>
           : in == GT_IN_GNORM ? gemv_split_kernel<Q, GT_IN_GNORM, RT, WGO>
                               : gemv_split_kernel<Q, GT_IN_X, RT, WGO>;
}
/* wgo: for gemv_dq_kernel (gdq_wgmma) */
template <int Q> static inline split_fn gt_split_kernel(int in, int rt, bool wgo = false) {
    if constexpr (Q != 0)
        if (wgo) return gt_split_kernel_rt<Q, 8, true>(in);
    return rt == 8 ? gt_split_kernel_rt<Q, 8>(in) : gt_split_kernel_rt<Q, 4>(in);
}

/* Raises the dynamic shared-memory limit of the kernels (once per process and device use). */
template <typename F> static inline cudaError_t gt_attr(F *f, cudaError_t e) {
    return e == cudaSuccess ? cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, GT_SMEM_MAX) : e;
}
template <int Q, bool DQ = false> static inline cudaError_t gt_attr_q(cudaError_t e) {
    if constexpr (Q != 0) e = gt_attr(gemv_tc_kernel<Q, 1, false, GT_MIN_BLOCKS, GT_IN_X, true, DQ>, e);
    for (int in = GT_IN_X; in <= GT_IN_GNORM; in++)
        e = gt_attr(gt_staging_kernel<Q, GT_MIN_BLOCKS, DQ>(in), gt_attr(gt_staging_kernel<Q, GT_LEAN_BLOCKS, DQ>(in), e));
    e = gt_attr(gemv_tc_kernel<Q, 1, true, GT_MIN_BLOCKS, GT_IN_X, false, DQ>, e);
#if GT_MAX_TILES >= 4
    e = gt_attr(gemv_tc_kernel<Q, 4, true, GT_MIN_BLOCKS, GT_IN_X, false, DQ>, e);
#endif
    return gt_attr(gemv_tc_kernel<Q, 2, true, GT_MIN_BLOCKS, GT_IN_X, false, DQ>, e);
}
template <int Q, int NT, int RT, bool DQ = false> static inline cudaError_t gw_attr(cudaError_t e) {
    typedef gw_cfg<Q, NT, RT> G;
    static_assert(G::SMEM <= GW_SMEM_MAX, "a wide block's stages must fit an SM");
    return e == cudaSuccess ? cudaFuncSetAttribute(gemv_wide_kernel<Q, NT, RT, DQ>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM)
                            : e;
}
template <int Q> static inline cudaError_t gw_attr_q(cudaError_t e) {
    e = gw_attr<Q, 8, 8>(gw_attr<Q, 4, 8>(gw_attr<Q, 2, 8>(e)));
    return gw_attr<Q, 16, 4>(gw_attr<Q, 8, 4>(gw_attr<Q, 4, 4>(e)));
}
/* Dequant mode's many-row kernels: gemv_dq_kernel, and gemv_wide_kernel's DQ form where the code has no wgmma. */
template <int Q, int NT, int ROLE> static inline cudaError_t gdq_attr_role(cudaError_t e) {
    if constexpr (ROLE != GDQ_GLU) /* a GLU pair only in clusters (gemv_tc_glu_rows_ok) */
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(gemv_dq_kernel<Q, NT, false, ROLE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     gdq_cfg<NT>::SMEM);
    return e == cudaSuccess ? cudaFuncSetAttribute(gemv_dq_kernel<Q, NT, true, ROLE>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, gdq_cfg<NT>::SMEM)
                            : e;
}
template <int Q, int NT> static inline cudaError_t gdq_attr(cudaError_t e) {
    e = gw_attr<Q, NT, 8, true>(e);
    e = gdq_attr_role<Q, NT, GDQ_AFTER>(gdq_attr_role<Q, NT, GDQ_NEXT>(gdq_attr_role<Q, NT, GDQ_PLAIN>(e)));
    return gdq_attr_role<Q, NT, GDQ_GLU>(e);
}
template <int Q> static inline cudaError_t gdq_attr_q(cudaError_t e) {
    return gdq_attr<Q, 8>(gdq_attr<Q, 4>(gdq_attr<Q, 2>(gt_attr_q<Q, true>(e))));
}
static inline cudaError_t gemv_tc_init(void) {
    cudaError_t e = gt_attr_q<128>(gt_attr_q<64>(gt_attr_q<0>(cudaSuccess)));
    e = gw_attr_q<128>(gw_attr_q<64>(gw_attr_q<0>(e)));
    return gdq_attr_q<128>(gdq_attr_q<64>(e));
}

template <int Q, int NT, int RT, bool DQ = false>
static inline cudaError_t gw_launch(unsigned blocks, cudaStream_t st, int n, const gt_job &job) {
    return cu_launch(gemv_wide_kernel<Q, NT, RT, DQ>, blocks, GT_THREADS, gw_cfg<Q, NT, RT>::SMEM, st, n, job);
}
/* Dequant mode, many rows (tiles of 8): on wgmma where the build's code for the device has it (x then split in its
 * order), else the wide kernel's DQ form (the same bits). */
static inline bool gdq_wgmma(int n, int bf16x) { return n > GW_MIN_ROWS && bf16x == GT_DQ && wg_available(); }
#include "cuda_gemv_clusters.cuh"
template <int Q, int NT, int ROLE>
static inline cudaError_t gdq_launch_role(unsigned blocks, cudaStream_t st, int n, const gt_job &job) {
    if (const int c = gdq_cluster(job, NT))
        return cu_launch_ex(cu_pdl_on(), c, gemv_dq_kernel<Q, NT, true, ROLE>, blocks, GT_THREADS, gdq_cfg<NT>::SMEM, st,
                            n, job);
    if constexpr (ROLE == GDQ_GLU)
        return cudaErrorInvalidValue; /* the plan checked gdq_cluster */
    else
        return cu_launch(gemv_dq_kernel<Q, NT, false, ROLE>, blocks, GT_THREADS, gdq_cfg<NT>::SMEM, st, n, job);
}
template <int Q, int NT> static inline cudaError_t gdq_launch(unsigned blocks, cudaStream_t st, int n, const gt_job &job) {
    if (!gdq_wgmma(n, GT_DQ)) return gw_launch<Q, NT, 8, true>(blocks, st, n, job);
    switch (gdq_role<Q>(job)) {
    case GDQ_NEXT: return gdq_launch_role<Q, NT, GDQ_NEXT>(blocks, st, n, job);
    case GDQ_AFTER: return gdq_launch_role<Q, NT, GDQ_AFTER>(blocks, st, n, job);
    case GDQ_GLU: return gdq_launch_role<Q, NT, GDQ_GLU>(blocks, st, n, job);
    default: return gdq_launch_role<Q, NT, GDQ_PLAIN>(blocks, st, n, job);
    }
}
template <int Q, bool DQ = false>
static inline cudaError_t gt_launch_q(int nt, int rt, unsigned blocks, size_t smem, cudaStream_t st, const float *x,
                                      int n, const gt_job &job, bool fresh = false) {
    if (n > GW_MIN_ROWS) {
        static_assert(GW_MAX_TILES <= 16, "gemv_wide_kernel instances: 4, 8, 16 tiles of 4 rows; 2, 4, 8 of 8");
        if constexpr (DQ) /* bf16 x: tiles of 8 */
            return nt == 2 ? gdq_launch<Q, 2>(blocks, st, n, job) : nt == 4 ? gdq_launch<Q, 4>(blocks, st, n, job)
                                                                             : gdq_launch<Q, 8>(blocks, st, n, job);
        if (rt == 8)
            return nt == 2 ? gw_launch<Q, 2, 8>(blocks, st, n, job) : nt == 4 ? gw_launch<Q, 4, 8>(blocks, st, n, job)
                                                                               : gw_launch<Q, 8, 8>(blocks, st, n, job);
        return nt == 4 ? gw_launch<Q, 4, 4>(blocks, st, n, job) : nt == 8 ? gw_launch<Q, 8, 4>(blocks, st, n, job)
                                                                          : gw_launch<Q, 16, 4>(blocks, st, n, job);
    }
    /* x staged by each block (n <= 4: nt = 1) as it is, gated or normalised (a template parameter: a run-time
     * branch in the staging once cost the bf16 kernel ~1.8x, session 3), or split once */
    kernel_fn k = nt == 1 ? gemv_tc_kernel<Q, 1, true, GT_MIN_BLOCKS, GT_IN_X, false, DQ>
                          : gemv_tc_kernel<Q, 2, true, GT_MIN_BLOCKS, GT_IN_X, false, DQ>;
#if GT_MAX_TILES >= 4
    if (nt == 4) k = gemv_tc_kernel<Q, 4, true, GT_MIN_BLOCKS, GT_IN_X, false, DQ>;
#endif
    if constexpr (Q != 0)
        if (job.loop)
            return cu_launch(gemv_tc_kernel<Q, 1, false, GT_MIN_BLOCKS, GT_IN_X, true, DQ>, blocks, GT_THREADS, smem, st,
                             x, n, job);
    if (!job.xs) { /* more than a wave at the budget's blocks per SM: the lean variant */
        const kernel_fn lean = gt_staging_kernel<Q, GT_LEAN_BLOCKS, DQ>(gt_in_kind(job.in));
        k = gt_use_lean(blocks) ? lean : gt_staging_kernel<Q, GT_MIN_BLOCKS, DQ>(gt_in_kind(job.in));
        /* the cluster finish where the launch's clusters fit one wave, on the lean variant if only it places them */
        if (const int c = Q != 0 ? gt_cluster(job, n) : 0) {
            const size_t sm = std::max(smem, GT_CL_SMEM(4));
            const bool fit = gt_cluster_blocks(k, c, sm) >= blocks;
            if (fit || (k != lean && gt_cluster_level() >= 2 && gt_cluster_blocks(lean, c, sm) >= blocks)) {
                gt_job jc = job;
                jc.cl = c;
                return cu_launch_ex(cu_pdl_on() && !fresh, c, fit ? k : lean, blocks, GT_THREADS, sm, st, x, n, jc);
            }
        }
    }
    return cu_launch_pdl(cu_pdl_on() && !fresh, k, blocks, GT_THREADS, smem, st, x, n, job);
}

/* Whether x can enter W's tensor-core kernels gated by glu: whole 16-value pieces of a vector, gates 16-byte
 * aligned; with a norm (GNORM), vectors of GT_GNORM_DIM, norm weights 16-byte aligned, and every K slice
 * starting and ending on a vector (gt_gnorm_scale: a vector's items are consecutive lanes). */
static inline bool gemv_tc_glu_ok(const qglu &glu, const qweight *W) {
    const int64_t n_in = W->n_in;
    const bool ok = (glu.act == QGLU_SILU || glu.act == QGLU_SIGMOID) && glu.dim > 0 && glu.dim % 16 == 0 &&
                    n_in % glu.dim == 0 && glu.g_stride % 4 == 0 && glu.g_stride >= glu.dim &&
                    cu_aligned16(glu.g);
    if (!ok || !glu.norm_w) return ok;
    const int kind = gemv_tc_kind(W);
    if (kind < 0) return false;
    const int64_t upv = GT_GNORM_DIM / gemv_tc_unit_k(kind), U = n_in / gemv_tc_unit_k(kind);
    return glu.act == QGLU_SILU && glu.dim == GT_GNORM_DIM && glu.g_stride == glu.dim &&
           cu_aligned16(glu.norm_w) && U % (upv * gemv_tc_split(W, kind)) == 0;
}

/* Whether a resid_matmul of W on n rows can write the next norm's split rows as it finishes (gt_job nx): in dequant
 * mode, where both it and its consumers take gemv_dq_kernel (4-bit, many rows), with whole units of 64 outputs. The
 * bytes they take: gemv_dq_kernel's split rows for K = n_out. */
static inline bool gemv_tc_next_ok(int kind, const qweight *W, int n, int bf16x) {
    return kind != 0 && gdq_wgmma(n, bf16x) && W->n_out % 64 == 0;
}
static_assert(gt_cfg<64>::SXU * 16 == 1024, "gt_split_rows_bytes: a unit of 8 rows is 1024 bytes");
static inline size_t gemv_tc_next_bytes(const qweight *W, int n) { return gt_split_rows_bytes(W->n_out, n); }

/* Whether a norm_matmul_multi of W[0], W[1] (a silu GLU's gate and up, qnorm glu_pair) on n rows can run as a GLU pair
 * (gt_job gx) that leaves the GLU's product as the next matmul's split rows: in dequant mode on gemv_dq_kernel, one
 * shape, whole units of 64 outputs, and a finish in clusters (gdq_cluster's rule for a job of two weights of one S).
 * The bytes they take: gemv_tc_next_bytes(W[0], n). */
static inline bool gemv_tc_glu_rows_ok(int kind, const qweight *const *W, int n, int bf16x) {
    const qweight *a = W[0], *b = W[1];
    if (kind == 0 || !gdq_wgmma(n, bf16x) || a->n_out % 64 || a->n_out != b->n_out || a->n_in != b->n_in ||
        a->fmt != b->fmt || a->sb_fmt != b->sb_fmt || a->group != b->group || gemv_tc_kind(b) != kind)
        return false;
    const int S = gemv_tc_split(a, kind); /* (a power of two: the pair's finish divides the tile's rows by it) */
    return (S & (S - 1)) == 0 && gdq_cluster_fits(S, gemv_tc_job_tiles(kind, n, 2, W, bf16x));
}

/* Whether x can enter the tensor-core kernels normalised by nm (qnorm): the norm weights' 16-byte loads. */
static inline bool gemv_tc_norm_ok(const qnorm &nm) { return nm.ss && cu_aligned16(nm.w); }

/* What a launch does besides the product (gemv_tc_launch_multi): x gated (glu) or normalised (norm), and the
 * residual boundary's producer (ss: y[0] is the residual; one weight). NULL: nothing. bf16x: x rounded to bf16
 * (QUILL_DECODE_PRECISION=bf16), or GT_DQ (=dequant). */
struct gt_extra {
    const qglu *glu;
    const qnorm *norm;
    float *ss;
    int bf16x;
    unsigned short *nx;   /* with ss: the next norm's split rows to write (gt_job), with nx_w; NULL: none */
    const float *nx_w;
    const void *xs_ready; /* with norm or glu: x's split rows as a producer left them (nx, gr: no split launch) */
    unsigned short *gx;   /* with norm, two weights: a GLU pair's split rows to write (gt_job, gemv_tc_glu_rows_ok) */
    int split;            /* one weight: its K slices (another weight's gemv_tc_split, so its rows' bits); 0: its own */
    int fresh;            /* W was written by the op before (gathered rows): a plain launch, so that no block loads
                           * its first weights before that op is done (one row tile staged by each block) */
};

/* A launch of the kernel of `kind` (gemv_tc_kind; the same for every weight) on n rows for count <= GT_JOB
 * weights sharing x (gated or normalised as ex says: gemv_tc_glu_ok, gemv_tc_norm_ok); part[i] and tick[i] as
 * gemv_tc_part_floats and gemv_tc_ticks (with this launch's gemv_tc_job_tiles: a weight that alone would take
 * more tiles has more row chunks here) ask for W[i], pre as gemv_tc_pre_bytes asks. gemv_tc_plan fills it (the
 * job, its blocks, row tiles and shared memory) or returns cudaErrorInvalidValue; split: the blocks of the
 * gemv_split_kernel that splits x into pre first (0: none). */
struct gt_plan {
    gt_job job;
    int nt, rt, split;
    unsigned blocks;
    size_t smem;
};
static inline cudaError_t gemv_tc_plan(int kind, int n, int count, const qweight *const *W, float *const *y,
                                       float *const *part, unsigned *const *tick, void *pre, const gt_extra &ex,
                                       gt_plan *pl) {
    if (count < 1 || count > GT_JOB || (ex.glu && ex.norm)) return cudaErrorInvalidValue;
    gt_job &job = pl->job;
    memset(pl, 0, sizeof *pl);
    if (ex.glu) {
        for (int i = 0; i < count; i++)
            if (!gemv_tc_glu_ok(*ex.glu, W[i])) return cudaErrorInvalidValue;
        job.in.glu = *ex.glu;
    }
    if (ex.norm) {
        if (!gemv_tc_norm_ok(*ex.norm)) return cudaErrorInvalidValue;
        job.in.ss = ex.norm->ss, job.in.nw = ex.norm->w, job.in.eps = ex.norm->eps;
        job.in.parts = (int)((W[0]->n_in + QNORM_PART - 1) / QNORM_PART);
    }
    if (ex.ss) {
        if (count != 1) return cudaErrorInvalidValue;
        job.ss = ex.ss;
        job.nx = ex.nx, job.nx_w = ex.nx_w;
        if (ex.nx && (!gemv_tc_next_ok(kind, W[0], n, ex.bf16x) || !ex.nx_w)) return cudaErrorInvalidValue;
    }
    if (ex.gx) {
        if (count != 2 || !ex.norm || !gemv_tc_glu_rows_ok(kind, W, n, ex.bf16x)) return cudaErrorInvalidValue;
        job.gx = ex.gx;
    }
    job.in.bf16 = ex.bf16x;
    const int rt = gemv_tc_tile_rows(n, ex.bf16x);
    if (ex.xs_ready) { /* a producer's rows: gemv_dq_kernel's order (a norm's scale after the product) */
        if (!(ex.norm || ex.glu) || kind == 0 || !gdq_wgmma(n, ex.bf16x)) return cudaErrorInvalidValue;
        job.xs = (const uint4 *)ex.xs_ready;
    } else if (gemv_tc_pre_bytes(W[0], n, ex.bf16x) > 0) {
        const int64_t U = W[0]->n_in / gemv_tc_unit_k(kind), tiles = (n + rt - 1) / rt;
        const int64_t items = tiles * U * GT_STAGE_ITEMS(rt);
        if (!pre || items > 2147483647LL) return cudaErrorInvalidValue;
        const size_t sxu = (size_t)tiles * (size_t)U * (kind ? gt_cfg<64>::SXU : gt_cfg<0>::SXU);
        job.xs = (const uint4 *)pre;
        job.Xs = (const float *)((const uint4 *)pre + sxu);
        pl->split = (int)std::min<int64_t>((items + 255) / 256, 4096);
    }
    const int nt = gemv_tc_job_tiles(kind, n, count, W, ex.bf16x);
    size_t smem = 0;
    int64_t blocks = 0, us_max = 0;
    for (int i = 0; i < count; i++) {
        job.W[i] = *W[i], job.y[i] = y[i], job.part[i] = part[i], job.tick[i] = tick[i];
        job.S[i] = ex.split > 0 && count == 1 ? ex.split : gemv_tc_split(W[i], kind);
        job.start[i] = (int)blocks;
        if (job.gx && i == 1) break; /* the pair's blocks are all weight 0's, each 64 outputs of both */
        const int64_t ob_out = job.gx ? GT_OUT / 2 : GT_OUT;
        blocks += ((W[i]->n_out + ob_out - 1) / ob_out) * ((n + rt * nt - 1) / (rt * nt)) * job.S[i];
        smem = std::max(smem, gemv_tc_smem(W[i], kind, nt, job.S[i]));
        us_max = std::max(us_max, gemv_tc_slice_units(W[i], kind, job.S[i]));
    }
    if (blocks > 2147483647LL) return cudaErrorInvalidValue;
    job.start[count] = (int)blocks;
    job.count = count;
    /* One 4-bit weight of many blocks on a plain x (the head): a wave of blocks, each looping over output blocks
     * (tune_gemv, pipelined, one row: 4-bit head 220.4 -> 207.9 us, bf16 469.1 -> 476.1, so 4-bit only) */
    const int64_t slots = (int64_t)GT_MIN_BLOCKS * cu_sms(), n_ob = (W[0]->n_out + GT_OUT - 1) / GT_OUT;
    if (kind != 0 && count == 1 && !job.ss && !job.xs && gt_in_kind(job.in) == GT_IN_X && n <= 4 && gt_loop_on() &&
        blocks >= GT_LOOP_WAVES * slots) {
        job.loop = (int)std::min<int64_t>(n_ob, std::max<int64_t>(1, slots / job.S[0]));
        blocks = (int64_t)job.loop * job.S[0];
    }
    /* x by bulk copies (gt_block's XT): its rows' slices, then the norm's sums or the gates' slices, after the staged
     * fragments (gt_copy_x; the gates in at most 16 pieces a row, 16-byte aligned as gemv_tc_glu_ok checked) */
    const int in_kind = gt_in_kind(job.in), level = gt_xtma_level();
    const bool gated = in_kind == GT_IN_GLU || in_kind == GT_IN_GNORM;
    const int64_t len = us_max * gemv_tc_unit_k(kind); /* a row's values of the longest slice */
    const bool in_ok = in_kind == GT_IN_X || (in_kind == GT_IN_NORM && job.in.parts % 4 == 0 && cu_aligned16(job.in.ss)) ||
                       (gated && level >= 2 && (job.in.glu.g_stride == job.in.glu.dim ||
                                                 (len + job.in.glu.dim - 1) / job.in.glu.dim + 1 <= 16));
    if (!job.xs && !job.loop && n <= GW_MIN_ROWS && level >= 1 && in_ok) {
        const int64_t rows = std::min(n, 4 * nt);
        const int64_t second = in_kind == GT_IN_NORM ? job.in.parts : gated ? len : 0;
        const size_t with_x = smem + (size_t)(rows * (len + second)) * sizeof(float);
        if (with_x <= GT_SMEM_MAX) job.xtma = 1, smem = with_x;
    }
    if (job.ss) smem = std::max(smem, GT_SS_SMEM(rt * nt)); /* gt_finish's squares (the wide kernel's stages hold them) */
    if (ex.fresh && (n > GT_PRE_ROWS || pl->split || job.xs || job.loop)) return cudaErrorInvalidValue;
    pl->nt = nt, pl->rt = rt, pl->blocks = (unsigned)blocks, pl->smem = smem;
    return cudaSuccess;
}

/* Plans (gemv_tc_plan) and launches; returns the launch error. */
static inline cudaError_t gemv_tc_launch_multi(int kind, const float *x, int n, int count, const qweight *const *W,
                                               float *const *y, float *const *part, unsigned *const *tick, void *pre,
                                               cudaStream_t st, const gt_extra &ex = gt_extra()) {
    gt_plan pl;
    cudaError_t e = gemv_tc_plan(kind, n, count, W, y, part, tick, pre, ex, &pl);
    if (e != cudaSuccess) return e;
    const gt_job &job = pl.job;
    if (pl.split) {
        const int in = gt_in_kind(job.in);
        const bool wgo = kind != 0 && gdq_wgmma(n, ex.bf16x);
        const split_fn split = kind == 0 ? gt_split_kernel<0>(in, pl.rt) : gt_split_kernel<64>(in, pl.rt, wgo);
        e = cu_launch(split, (unsigned)pl.split, 256, 0, st, x, job.in, n, W[0]->n_in, (uint4 *)pre, (float *)job.Xs);
        if (e != cudaSuccess) return e;
    }
    const bool dq = ex.bf16x == GT_DQ; /* bf16 weights: as in bf16 mode */
    if (kind == 0) return gt_launch_q<0>(pl.nt, pl.rt, pl.blocks, pl.smem, st, x, n, job, ex.fresh);
    if (kind == 64)
        return dq ? gt_launch_q<64, true>(pl.nt, pl.rt, pl.blocks, pl.smem, st, x, n, job, ex.fresh)
                  : gt_launch_q<64>(pl.nt, pl.rt, pl.blocks, pl.smem, st, x, n, job, ex.fresh);
    return dq ? gt_launch_q<128, true>(pl.nt, pl.rt, pl.blocks, pl.smem, st, x, n, job, ex.fresh)
              : gt_launch_q<128>(pl.nt, pl.rt, pl.blocks, pl.smem, st, x, n, job, ex.fresh);
}

static inline cudaError_t gemv_tc_launch(int kind, const float *x, int n, const qweight *W, float *y, float *part,
                                         unsigned *tick, void *pre, cudaStream_t st, int bf16x = 0) {
    gt_extra ex = gt_extra();
    ex.bf16x = bf16x;
    return gemv_tc_launch_multi(kind, x, n, 1, &W, &y, &part, &tick, pre, st, ex);
}

#endif
