/* cuda_gemv_cfg.cuh: the decode matmul's block and unit constants (cuda_gemv.cuh, which includes it), on their own so
 * that a host build can take them with the staging code (tests/cuda/stage_host.cpp). */
#ifndef QUILL_CUDA_GEMV_CFG_CUH
#define QUILL_CUDA_GEMV_CFG_CUH

#define GT_WARPS 8
#define GT_THREADS (GT_WARPS * 32)
#ifndef GT_DEPTH_Q4
#define GT_DEPTH_Q4 8 /* 4-bit units in flight per warp: 128 bytes per lane */
#endif
#ifndef GT_DEPTH_BF16
#define GT_DEPTH_BF16 4 /* bf16 units in flight per warp: 128 bytes per lane */
#endif

/* Q = 0: bf16 (a unit is 32 values, 2 k-steps; a lane loads 16 bytes per row per unit).
 * Q = 64 or 128: 4-bit affine with that group (a unit is 64 codes, 4 k-steps; 8 bytes per lane). */
template <int Q> struct gt_cfg {
    static constexpr int UK = Q ? 64 : 32;          /* K values per unit */
    static constexpr int KSU = Q ? 4 : 2;           /* MMA k-steps per unit */
    static constexpr int EPT = Q ? 16 : 8;          /* K values per lane per unit */
    static constexpr int WPU = Q ? 2 : 4;           /* 32-bit weight words per lane per row per unit */
    static constexpr int UB = Q ? 512 : 64;         /* bytes from a lane's unit to its next: 4-bit tiled, a warp's
                                                       unit 512 contiguous bytes (cuda_q4_tiled.cuh); bf16 a row's 64 */
    static constexpr int DEPTH = Q ? GT_DEPTH_Q4 : GT_DEPTH_BF16; /* units in flight per warp */
    static constexpr int SXU = KSU / 2 * 32;        /* uint4 of staged B fragments per tile per unit */
};

#endif
