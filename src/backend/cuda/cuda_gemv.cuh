/* cuda_gemv.cuh: the decode matmul on tensor cores for bf16 and MLX 4-bit affine (group 64 or 128)
 * weights: y[r][o] = sum_k x[r][k] W[o][k]. Included by cuda_gemv.cu (the op) and by
 * tests/cuda/bench_gemv.cu (which links nothing but cudart), so it holds kernels and small inline
 * host helpers only.
 *
 * Arithmetic (mma.sync m16n8k16, bf16 operands, f32 accumulators):
 * - Each f32 activation is split x = hi + lo + e with hi = bf16(x), lo = bf16(x - hi) (|e| <= 2^-17|x|).
 *   bf16 x bf16 products are exact, so the result is f32-class (relative error ~1e-6), not bf16-class.
 *   QUILL_DECODE_PRECISION=bf16 (job.in.bf16) stages x = hi, lo = 0: bf16-class, and the many-row kernel then
 *   takes tiles of 8 rows, one column a row (RT = 8), half the MMAs. A row's bits are the same either way:
 *   the lo column's sums are exactly +0, and hi + (+0) = hi (a sum that starts at +0 is never -0).
 * - W is the A operand (16 outputs per MMA). The B operand's 8 columns are 4 input rows, each as its
 *   hi column and its lo column, so one MMA applies 16 x 16 weights to both parts of 4 rows and a
 *   row's sum is (hi column) + (lo column) at the end of a unit. Lane (g = lane/4, t = lane%4) loads a
 *   contiguous piece of output rows g and g+8 (16 bytes bf16 or 8 bytes of 4-bit codes; 4-bit weights are
 *   tiled, cuda_q4_tiled.cuh, so a lane's two pieces are one 16-byte load and a warp's unit 512 bytes) and the
 *   staged activations put the matching x values in the same fragment slots: the K order inside an
 *   MMA is a fixed permutation, the same for every row.
 * - 4-bit: the weights of one "unit" (64 codes = 4 MMA k-steps) share a scale s and bias b. Codes
 *   become bf16 exactly (0x4300 | q = 128 + q, two per instruction); P = sum_k (128 + q_k) x_k comes from
 *   the MMAs (fresh accumulator per unit) and the unit is folded as acc = s*(P_hi + P_lo) + (b'*X + acc),
 *   b' = b - 128 s, X = the unit's sum of (hi + lo) in a fixed order, computed while staging (GT_OFFSET).
 *   bf16: the MMAs accumulate the hi and lo columns over the whole slice; the row's value is hi + lo at the end.
 * - QUILL_DECODE_PRECISION=dequant (DQ, with bf16 x): a 4-bit unit's weights become bf16 first, w = bf16(q s + b)
 *   rounded once (gt_dq), and its MMAs chain over the slice as bf16 weights' do: no fold per unit, so a many-row
 *   launch can keep one wgmma accumulator chain (cuda_gemv_dq.cuh) and still give every row the one-row bits.
 * - Split-K: the K units are cut into S slices, S a function of (n_out, K), the device and the weights it is grouped
 *   with only (gemv_tc_split; its group's: gemv_tc_group_splits, kept in the weight). With
 *   S > 1 each slice writes a partial and the last block of an (output block, row chunk) to arrive
 *   (a ticket counter) sums the S partials in the order s = 0..S-1; the counter is reset for the next
 *   call. A row's arithmetic depends on nothing but the weight and the row: EXACT(batch).
 * Geometry: a block is 8 warps, 128 outputs (16 per warp) x NT tiles of 4 rows x one K slice; NT (1 or
 * 2) follows n and the shared memory a slice needs, and changes only which block computes a row.
 * A weight's blocks are numbered (slice, output block, row chunk), row chunk fastest (blocks sharing
 * weights run together, so row chunks after the first read W from L2). A block stages x for its whole slice
 * in shared memory once, as ready-made B fragments (one barrier); each warp then streams its weights
 * through a register ring GT_DEPTH units deep (loads for unit u + depth go out as unit u is used), with
 * no barrier until the end. Launches of many blocks take a lean variant (GT_LEAN_BLOCKS); more than
 * GW_MIN_ROWS rows take gemv_wide_kernel (cuda_gemv_wide.cuh), which streams x through stages instead of
 * staging the slice, so a block takes more row tiles. Both compute every unit with gt_unit; in dequant mode the
 * 4-bit launches of many rows take gemv_dq_kernel (cuda_gemv_dq.cuh), the same chains on wgmma. */
#ifndef QUILL_CUDA_GEMV_CUH
#define QUILL_CUDA_GEMV_CUH

#include <string.h>

#include <algorithm>

#include "cuda_gemv_cfg.cuh"
#include "cuda_mma.cuh"
#include "cuda_wgmma.cuh" /* the mbarrier and bulk copy primitives (gt_block's copies of x) */

#define GT_OUT (GT_WARPS * 16) /* outputs per block */
#define GT_RC (4 * GT_MAX_TILES) /* most rows per block */
#define GT_MAX_SPLIT 16
#ifndef GT_BLOCKS
#define GT_BLOCKS 256 /* bf16: blocks the split aims for (tune_gemv, pipelined: faster than 512 at 1-64 rows on 3 of 4 shapes) */
#endif
#ifndef GT_BLOCKS_Q4
#define GT_BLOCKS_Q4 256 /* 4-bit: fewer, longer slices (tune_gemv: 8-15 % faster on the MLP shapes) */
#endif
#ifndef GT_MIN_SLICE
#define GT_MIN_SLICE 8 /* units a slice keeps at least */
#endif
#define GT_SMEM_MAX (100 * 1024) /* two blocks per SM */
/* Row tiles a slice's staged rows must fit: more gives long rows (the head, K = 4096 at S = 1) shorter
 * slices, so more rows share a block's weights. tune_gemv (head, pipelined, 1 / 16 / 64 rows): bf16 fit 1
 * 490 / 962 / 3437 us, fit 4 494 / 723 / 2155; 4-bit fit 1 224 / 785 / 3068, fit 2 247 / 625 / 2409, fit 4
 * 288 / 527 / 1924 (one row is the figure that matters most for 4-bit). */
#ifndef GT_FIT_TILES_BF16
#define GT_FIT_TILES_BF16 4
#endif
#ifndef GT_FIT_TILES_Q4
#define GT_FIT_TILES_Q4 2
#endif
/* Row tiles (of 4 rows) per block at most: 1 or 2 (4 for tune_gemv, with GW_MIN_ROWS 16: 16 rows staged
 * whole, session 13, mixed: 12288x4096 39.0 -> 37.3 us, the other shapes slower). Launches of more rows than
 * these take gemv_wide_kernel (cuda_gemv_wide.cuh), which fits more tiles to a block. */
#ifndef GT_MAX_TILES
#define GT_MAX_TILES 2
#endif

/* c += a b (cuda_mma.cuh's cu_mma_bf16) with the A fragment as four registers, as the units hold it. */
__device__ __forceinline__ void gt_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
    const uint32_t a[4] = {a0, a1, a2, a3};
    cu_mma_bf16(c, a, b0, b1);
}

/* c = a b + 0 (a fresh accumulator): the zero goes in as constants, so ptxas can take the zero register
 * instead of clearing four (ncu at 64 rows: a clearing IMAD per accumulator, 2 per MMA). Same bits. */
__device__ __forceinline__ void gt_mma0(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%10,%10,%10,%10};\n"
                 : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}


/* GT_OFFSET 1: the MMAs take each code as the bf16 value 128 + q (0x4300 | q, exact) and the fold takes the
 * 128 back out with the bias: s (sum (128 + q) x) + (b - 128 s) X = s (sum q x) + b X, so a pair of codes
 * costs a shift and a lop3 (16 of the unit loop's ~97 instructions were the bf16x2 fmas making q itself).
 * The unit's MMA sum is then ~8x larger than sum q x, so its f32 rounding is ~3 bits coarser (bench_gemv's
 * error column). GT_OFFSET 0: q itself, (0x4300 | q) - 128 by a bf16x2 fma. */
#ifndef GT_OFFSET
#define GT_OFFSET 1
#endif
/* Codes i and i+4 of a word as the bf16 pair 128 + q (low half = code i). The mask and the or are one lop3 (C's &
 * then | compile to two: a LOP3 takes one immediate). */
__device__ __forceinline__ uint32_t gt_codes128(uint32_t w, int i) {
    uint32_t v;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(v) : "r"(w >> (4 * i)), "r"(0x000F000Fu), "r"(0x43004300u));
    return v;
}
/* The same pair as q itself: (128 + q) - 128 by a bf16x2 fma, exact. */
__device__ __forceinline__ uint32_t gt_codes_q(uint32_t w, int i) {
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(gt_codes128(w, i)), "r"(0x3F803F80u), "r"(0xC300C300u));
    return r;
}
/* The unit's A fragments as GT_OFFSET asks. */
__device__ __forceinline__ uint32_t gt_codes(uint32_t w, int i) {
    return GT_OFFSET ? gt_codes128(w, i) : gt_codes_q(w, i);
}

/* DQ: codes i and i+4 of a word dequantized, bf16(q s + b) with s2, b2 = {s, s}, {b, b}: q exactly (gt_codes_q),
 * then one fma rounded once. The same instructions in every DQ kernel. */
__device__ __forceinline__ uint32_t gt_dq(uint32_t w, int i, uint32_t s2, uint32_t b2) {
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(gt_codes_q(w, i)), "r"(s2), "r"(b2));
    return r;
}
/* A bf16 (its bits in the low half) as the pair {b, b}. */
__device__ __forceinline__ uint32_t gt_pair(uint32_t bits) { return __byte_perm(bits, 0u, 0x1010); }
/* DQ: a unit's A fragments (rows og and og8) from its codes and the raw scale / bias bits of its quad (sb as
 * gt_sload leaves them; src: the lane holding this unit's). */
template <int WPU>
__device__ __forceinline__ void gt_dq_frags(const uint32_t (&w)[2][WPU], const uint32_t (&sb)[2], int src,
                                            uint32_t (&a)[2][8]) {
    const uint32_t sv = __shfl_sync(0xffffffffu, sb[0], src), bv = __shfl_sync(0xffffffffu, sb[1], src);
    const uint32_t s0 = gt_pair(sv), s1 = __byte_perm(sv, 0u, 0x3232); /* {s, s} of og, of og8 */
    const uint32_t b0 = gt_pair(bv), b1 = __byte_perm(bv, 0u, 0x3232);
#pragma unroll
    for (int p = 0; p < 8; p++) a[0][p] = gt_dq(w[0][p >> 2], p & 3, s0, b0), a[1][p] = gt_dq(w[1][p >> 2], p & 3, s1, b1);
}

#include "cuda_gemv_stage.cuh"

/* x by bulk copies in the one-row kernels (gt_block's XT), compiled in with GT_X_TMA 1, where QUILL_CUDA_XTMA then picks
 * the inputs that take it (gt_xtma_level). Off until it is measured on a GPU (docs/performance.md, fifty-first pass):
 * with 0 the kernels are the code they were. */
#ifndef GT_X_TMA
#define GT_X_TMA 0
#endif

#ifndef GT_KSPLIT
#define GT_KSPLIT 1 /* tune_gemv: 2-4 % faster at 1 and 64 rows than one chain of 4 */
#endif
#ifndef GT_MIN_BLOCKS
#define GT_MIN_BLOCKS 2 /* blocks per SM the register budget is sized for */
#endif
/* The lean variant of the one-tile kernel: a ring of 4 units (4-bit; bf16's is 4 already) and registers
 * for 3 blocks per SM. tune_gemv, one row, pipelined, 4-bit: 12288x4096 20.3 -> 14.8 us, the head 248 ->
 * 238; bf16: 31.3 -> 26.8, 491 -> 471; but slower on launches of one wave at 2 blocks per SM (4-bit
 * 4096x4096 8.7 -> 9.0, 4096x12288 15.4 -> 18.4; bf16 11.7 -> 12.7, 27.6 -> 33.9). So a launch takes it
 * when its blocks fill more than GT_LEAN_WAVES waves of 2 blocks per SM. Same arithmetic. */
#define GT_LEAN_BLOCKS 3
#ifndef GT_LEAN_WAVES
#define GT_LEAN_WAVES 1
#endif
/* Turns without checks (gt_turn FULL): tune_gemv measured bf16 faster with them at every row count (the
 * head 540 -> 502 us at one row, 2365 -> 980 us at 16) and 4-bit faster from 16 rows (gemv_wide_kernel
 * takes those, always with full turns); the 4-bit one-row kernel runs out of registers with both turn
 * kinds in one kernel (spills) and is slower. */
#ifndef GT_FULL_TURNS
#define GT_FULL_TURNS(Q) ((Q) == 0)
#endif

/* EF: the weights' codes, scales and biases load with an L2 evict_first policy (cu_ld_evict_first). A step streams
 * ~5 GB of weights through the 50-60 MB L2, each read once (the row chunks of a many-row launch that share them run
 * together), so with the default policy they push out what the step reads again. The many-row launches take it where
 * GT_W_EVICT is 1 (the default). Dequant mode, bf16 states, 16 / 64 streams: +3.6 / -0.7 % on the H200, +2.0 / +1.4 %
 * on an H100; split mode 4 / 16 / 64 streams +0.3-0.6 % (H200). The one-row kernels keep the plain loads: one stream
 * was within the noise either way (H100). Same values (docs/performance.md, sixty-second pass). */
#ifndef GT_W_EVICT
#define GT_W_EVICT 1
#endif
template <bool EF> __device__ __forceinline__ uint4 gt_ldw(const uint4 *p) {
    return EF ? cu_ld_evict_first(p) : __ldg(p);
}
template <bool EF> __device__ __forceinline__ uint32_t gt_ldw(const uint32_t *p) {
    return EF ? cu_ld_evict_first(p) : __ldg(p);
}

/* A warp's weights for one unit: rows og and og8 at q0 and q8 (each the lane's first byte of the unit;
 * rows are clamped into the matrix, the outputs of rows past n_out are computed and thrown away). 4-bit weights are
 * tiled (cuda_q4_tiled.cuh): the lane's 8 bytes of both rows are one 16-byte word at q0 (q8 unused). */
template <int Q, bool EF = false>
__device__ __forceinline__ void gt_wload(uint32_t (&w)[2][gt_cfg<Q>::WPU], const unsigned char *q0,
                                         const unsigned char *q8) {
    if constexpr (Q != 0) {
        const uint4 a = gt_ldw<EF>((const uint4 *)q0);
        w[0][0] = a.x, w[0][1] = a.y, w[1][0] = a.z, w[1][1] = a.w;
    } else {
        const uint4 a = gt_ldw<EF>((const uint4 *)q0), c = gt_ldw<EF>((const uint4 *)q8);
        w[0][0] = a.x, w[0][1] = a.y, w[0][2] = a.z, w[0][3] = a.w;
        w[1][0] = c.x, w[1][1] = c.y, w[1][2] = c.z, w[1][3] = c.w;
    }
}

/* 4-bit: lane t's share of the bf16 scales and biases of units u, u+1, u+2, u+3 of the slice: unit
 * ub + min(u + t, us - 1) of rows og and og8, as raw bits: sb[0] = {s(og), s(og8)}, sb[1] = {b(og), b(og8)} (low
 * half og's; s0 and b0 point at the pair of the rows' first group, cuda_q4_tiled.cuh). They become f32 where they
 * are used (after the shuffle to the quad), so no instruction waits for them here. */
template <int Q, bool EF = false>
__device__ __forceinline__ void gt_sload(uint32_t (&sb)[2], const unsigned short *s0, const unsigned short *b0, int ub,
                                         int u, int us, int t) {
    const int gi = (ub + min(u + t, us - 1)) * 64 / Q;
    sb[0] = gt_ldw<EF>((const uint32_t *)(s0 + 16 * gi)), sb[1] = gt_ldw<EF>((const uint32_t *)(b0 + 16 * gi));
}

__device__ __forceinline__ float gt_bf16(uint32_t bits) { return __uint_as_float(bits << 16); }

/* The MMAs of one unit's k-steps on one row tile (bx: its staged B fragments, lane's first). */
template <int KSU>
__device__ __forceinline__ void gt_ksteps(float (&c)[4], const uint32_t (&a)[2][2 * KSU], const uint4 *bx) {
#pragma unroll
    for (int jp = 0; jp < KSU / 2; jp++) {
        const uint4 f = bx[jp * 32];
        const int j = 2 * jp;
        gt_mma(c, a[0][2 * j], a[1][2 * j], a[0][2 * j + 1], a[1][2 * j + 1], f.x, f.y);
        gt_mma(c, a[0][2 * j + 2], a[1][2 * j + 2], a[0][2 * j + 3], a[1][2 * j + 3], f.z, f.w);
    }
}

/* THE arithmetic of one unit over nt row tiles: 4-bit folds it into acc[T][0] (output og, row 4T + t)
 * and acc[T][1] (og8); bf16 accumulates the raw MMA sums in acc[T][0..3]. bx: the unit's staged B
 * fragments of tile 0 (lane's first), xs: its X sum of tile 0 (row t); tiles are tx / tX apart.
 * RT = 8 (bf16 x, columns = rows 8T + 2t, 8T + 2t + 1): acc[T] is the MMA's C fragment, {og, og} x {2t, 2t + 1}
 * then {og8, og8}, and xs points at the X sums of rows 2t, 2t + 1; each value is what RT = 4 computes for its
 * row with lo = 0, as (P + 0) + (R + 0) = P + R. */
template <int Q, int NT, int RT = 4, bool DQ = false>
__device__ __forceinline__ void gt_unit(const uint32_t (&w)[2][gt_cfg<Q>::WPU], const uint32_t (&sb)[2], int src,
                                        const uint4 *bx, const float *xs, int tx, int tX, int nt,
                                        float (&acc)[NT][4]) {
    typedef gt_cfg<Q> C;
    uint32_t a[2][2 * C::KSU];
    float s0 = 0.0f, s1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
    if constexpr (Q != 0 && DQ) {
        gt_dq_frags<C::WPU>(w, sb, src, a);
    } else if constexpr (Q != 0) {
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int p = 0; p < 8; p++) a[r][p] = gt_codes(w[r][p >> 2], p & 3);
        const uint32_t sv = __shfl_sync(0xffffffffu, sb[0], src), bv = __shfl_sync(0xffffffffu, sb[1], src);
        s0 = gt_bf16(sv), s1 = __uint_as_float(sv & 0xFFFF0000u); /* og's half, og8's */
        b0 = gt_bf16(bv), b1 = __uint_as_float(bv & 0xFFFF0000u);
        if (GT_OFFSET) b0 = fmaf(-128.0f, s0, b0), b1 = fmaf(-128.0f, s1, b1);
    } else {
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int p = 0; p < 4; p++) a[r][p] = w[r][p];
    }
#pragma unroll
    for (int T = 0; T < NT; T++) {
        if (T >= nt) break; /* uniform */
        if constexpr (Q != 0 && !DQ) {
            float P[4];
#if GT_KSPLIT /* k-steps 0, 1 and 2, 3 in two accumulators: two MMA chains of 2 instead of one of 4 */
            float R[4];
            const uint4 f0 = bx[T * tx], f1 = bx[T * tx + 32];
            gt_mma0(P, a[0][0], a[1][0], a[0][1], a[1][1], f0.x, f0.y);
            gt_mma0(R, a[0][4], a[1][4], a[0][5], a[1][5], f1.x, f1.y);
            gt_mma(P, a[0][2], a[1][2], a[0][3], a[1][3], f0.z, f0.w);
            gt_mma(R, a[0][6], a[1][6], a[0][7], a[1][7], f1.z, f1.w);
            if constexpr (RT == 8) { /* a column a row: its sum is P + R */
#pragma unroll
                for (int c = 0; c < 4; c++) P[c] += R[c];
            }
            const float h0 = (P[0] + P[1]) + (R[0] + R[1]), h1 = (P[2] + P[3]) + (R[2] + R[3]); /* RT 4 */
#else
            P[0] = P[1] = P[2] = P[3] = 0.0f;
            gt_ksteps<C::KSU>(P, a, bx + T * tx);
            const float h0 = P[0] + P[1], h1 = P[2] + P[3]; /* RT 4 */
#endif
            if constexpr (RT == 8) { /* P = {og, og, og8, og8} x rows {2t, 2t + 1} */
                const float2 X = *(const float2 *)(xs + T * tX);
                acc[T][0] = fmaf(s0, P[0], fmaf(b0, X.x, acc[T][0]));
                acc[T][1] = fmaf(s0, P[1], fmaf(b0, X.y, acc[T][1]));
                acc[T][2] = fmaf(s1, P[2], fmaf(b1, X.x, acc[T][2]));
                acc[T][3] = fmaf(s1, P[3], fmaf(b1, X.y, acc[T][3]));
            } else {
                const float X = xs[T * tX];
                acc[T][0] = fmaf(s0, h0, fmaf(b0, X, acc[T][0]));
                acc[T][1] = fmaf(s1, h1, fmaf(b1, X, acc[T][1]));
            }
        } else {
            gt_ksteps<C::KSU>(acc[T], a, bx + T * tx);
        }
    }
}

/* One turn of a warp's register ring: units base .. base + D - 1 of its slice, each used, then its slot
 * refilled with the unit D later (and, at the end of a group of 4, the group's scales D units later).
 * q0, q8: the lane's weights of unit `base`; bx, xs: the staged fragments / X sums of unit `base`, so
 * every unit's address is a constant offset. FULL: all those units and refills exist (no checks). */
template <int Q, int NT, int D, bool FULL, int RT = 4, bool DQ = false, bool EF = false>
__device__ __forceinline__ void gt_turn(uint32_t (&w)[D][2][gt_cfg<Q>::WPU], uint32_t (&sb)[D / 4][2],
                                        const unsigned char *q0, const unsigned char *q8, const uint4 *bx,
                                        const float *xs, int tx, int tX, int nt, int base, int us,
                                        const unsigned short *s0, const unsigned short *b0, int ub, int lane,
                                        float (&acc)[NT][4]) {
    typedef gt_cfg<Q> C;
#pragma unroll
    for (int d = 0; d < D; d++) {
        if (!FULL && base + d >= us) break; /* uniform */
        gt_unit<Q, NT, RT, DQ>(w[d], sb[d / 4], (lane & ~3) | (d & 3), bx + d * C::SXU, xs + d * RT, tx, tX, nt, acc);
        if (FULL || base + d + D < us) gt_wload<Q, EF>(w[d], q0 + (d + D) * C::UB, q8 + (d + D) * C::UB);
        if constexpr (Q != 0)
            if ((d & 3) == 3 && (FULL || base + d + D - 3 < us))
                gt_sload<Q, EF>(sb[d / 4], s0, b0, ub, base + d + D - 3, us, lane & 3);
    }
}

#include "cuda_gemv_finish.cuh"
#include "cuda_gemv_trace.cuh"

/* One launch for up to GT_JOB weights that share the input rows (the projections of one block): block
 * b belongs to weight i when start[i] <= b < start[i + 1], and each weight keeps its own split, partials
 * and tickets, so its results are bitwise those of a launch of its own. */
#define GT_JOB 4
struct gt_job {
    qweight W[GT_JOB];
    float *y[GT_JOB], *part[GT_JOB];
    unsigned *tick[GT_JOB];
    int S[GT_JOB], start[GT_JOB + 1];
    int count;
    const uint4 *xs; /* x split by gemv_split_kernel (many rows), or NULL: each block stages its slice */
    gt_input in;     /* x's gate or norm, applied where x is staged or split */
    const float *Xs;
    float *ss;       /* resid_matmul (one weight): y is the residual, ss its sums of squares (gt_finish) */
    unsigned short *nx; /* with ss in dequant mode (gemv_dq_kernel), else NULL: the next norm's split rows, bf16(y nx_w)
                         * in gemv_dq_kernel's order for K = n_out (gt_next_store), written as y's rows finish */
    const float *nx_w;
    unsigned short *gx; /* a GLU pair (gemv_dq_kernel's GDQ_GLU), else NULL: W[0] and W[1] are a silu GLU's gate and up
                         * (one shape, a normalised x, all the blocks weight 0's: start[1] = start[2]); a block takes
                         * 64 outputs of each (warpgroup 0 the gate's, 1 the up's) and its cluster finish leaves
                         * bf16(silu(gate) up) in gemv_dq_kernel's split rows for K = n_out (gt_split_store) */
    int loop;        /* gemv_tc_kernel LOOP (one weight, one row chunk, no ss): block b takes the output blocks
                      * b % loop, b % loop + loop, ... of slice b / loop */
    int xtma;        /* gt_block's XT: each block's rows of x (and the norm's sums or the gates) come by bulk copies */
    int cl;          /* a one-tile staging launch in clusters of cl blocks (0: none; gt_cluster): the blocks in (weight,
                      * output block, row chunk, slice) order, and a weight of S = cl finishes in its cluster */
};

template <int NT> __device__ __forceinline__ void gt_zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int T = 0; T < NT; T++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[T][c] = 0.0f;
}

/* A block's place in a launch: its weight (from the job), K slice, output block and row chunk, and its
 * lanes' weight, scale and bias pointers at the slice's first unit. rows: rows per row chunk; vb: the block's
 * number in the launch's (weight, slice, output block, row chunk) order (blockIdx.x, except in a LOOP kernel), or
 * with s_inner in (weight, output block, row chunk, slice) order: a tile's S slices side by side (gemv_dq_kernel's
 * clusters). pair (job.gx): output blocks of 64 outputs of each of W[0] and W[1], the second warpgroup's W[1]'s. */
template <int Q> struct gt_place {
    qweight W;
    float *y, *part;
    unsigned *tick;
    int S, s, bx, ob, row0, us, ub, U, o0;
    bool wact;
    const unsigned char *p0, *p8;             /* rows og and og8 */
    const unsigned short *s0, *bb0;           /* 4-bit: their scales' and biases' pairs (cuda_q4_tiled.cuh) */
};
template <int Q>
__device__ __forceinline__ gt_place<Q> gt_locate(const gt_job &job, int n, int rows, int lane, int warp,
                                                 unsigned vb, bool s_inner = false, bool pair = false) {
    typedef gt_cfg<Q> C;
    gt_place<Q> P;
    int i = 0; /* the block's weight: constant indices only, so the job stays in parameter space */
#pragma unroll
    for (int q = 1; q < GT_JOB; q++) i += q < job.count && (int)vb >= job.start[q];
    P.W = i == 0 ? job.W[0] : i == 1 ? job.W[1] : i == 2 ? job.W[2] : job.W[3];
    P.y = i == 0 ? job.y[0] : i == 1 ? job.y[1] : i == 2 ? job.y[2] : job.y[3];
    P.part = i == 0 ? job.part[0] : i == 1 ? job.part[1] : i == 2 ? job.part[2] : job.part[3];
    P.tick = i == 0 ? job.tick[0] : i == 1 ? job.tick[1] : i == 2 ? job.tick[2] : job.tick[3];
    P.S = i == 0 ? job.S[0] : i == 1 ? job.S[1] : i == 2 ? job.S[2] : job.S[3];
    const int b0 = i == 0 ? job.start[0] : i == 1 ? job.start[1] : i == 2 ? job.start[2] : job.start[3];

    /* Index math in 32 bits (unsigned divisions: 64-bit ones were most of the block's start, ncu): outputs
     * < 2^31, units per row < 2^26, blocks < 2^31 (the launch checks); byte offsets widen at the end. */
    const unsigned n_rc = (unsigned)(n + rows - 1) / rows;
    const int n_out = (int)P.W.n_out, K = (int)P.W.n_in, ob_out = pair ? GT_OUT / 2 : GT_OUT;
    /* job.gx: the up's warpgroup takes W[1]'s data; the shapes stay W[0]'s, which the compiler knows to be uniform
     * (from W[1] the ring's index math left the uniform datapath: +7 % instructions in the unit loop, session 32) */
    if (pair && warp >= GT_WARPS / 2) P.W = job.W[1]; /* (its finish writes job.y[0] and job.y[1]) */
    P.U = K / C::UK;
    const unsigned n_ob = (unsigned)(n_out + ob_out - 1) / ob_out, per_s = n_ob * n_rc;
    const unsigned local = vb - (unsigned)b0, bxu = s_inner ? local / (unsigned)P.S : local % per_s;
    P.bx = (int)bxu, P.s = (int)(s_inner ? local % (unsigned)P.S : local / per_s);
    const int rc = (int)(bxu % n_rc);
    P.ob = (int)(bxu / n_rc);
    P.row0 = rc * rows;
    const int u_begin = (int)((unsigned)(P.s * P.U) / (unsigned)P.S);
    const int u_end = (int)((unsigned)((P.s + 1) * P.U) / (unsigned)P.S);
    P.us = u_end - u_begin, P.ub = u_begin;
    P.o0 = P.ob * ob_out + (pair ? warp % (GT_WARPS / 2) : warp) * 16;
    P.wact = P.o0 < n_out;
    const int row_bytes = Q ? K / 2 : K * 2; /* < 2^31: K < 2^30 */
    if constexpr (Q != 0) { /* tiled (cuda_q4_tiled.cuh): the warp's 16 rows are one run, rows padded to 16 */
        const int64_t o16 = min(P.o0, (int)q4t_rows(n_out) - 16); /* (an idle warp's pointers are never read) */
        P.p0 = P.p8 = (const unsigned char *)P.W.w + o16 * row_bytes + u_begin * C::UB + lane * 16;
        const int64_t g = o16 * (K / Q) + (lane >> 2) * 2;
        P.s0 = (const unsigned short *)P.W.scales + g, P.bb0 = (const unsigned short *)P.W.biases + g;
    } else {
        const int og = min(P.o0 + (lane >> 2), n_out - 1), og8 = min(P.o0 + (lane >> 2) + 8, n_out - 1);
        const int lane_off = u_begin * C::UB + (lane & 3) * (C::WPU * 4); /* the lane's first bytes of the slice */
        P.p0 = (const unsigned char *)P.W.w + (int64_t)og * row_bytes + lane_off;
        P.p8 = (const unsigned char *)P.W.w + (int64_t)og8 * row_bytes + lane_off;
        P.s0 = P.bb0 = nullptr;
    }
    return P;
}

/* The ring's first D units (and their scales): issued before the block waits for x, so that their latency
 * overlaps the staging. */
template <int Q, int D, bool EF = false>
__device__ __forceinline__ void gt_ring_start(const gt_place<Q> &P, uint32_t (&w)[D][2][gt_cfg<Q>::WPU],
                                              uint32_t (&sb)[D / 4][2], int t) {
    if (!P.wact) return;
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < P.us) gt_wload<Q, EF>(w[d], P.p0 + d * gt_cfg<Q>::UB, P.p8 + d * gt_cfg<Q>::UB);
    if constexpr (Q != 0) {
#pragma unroll
        for (int q = 0; q < D / 4; q++)
            if (4 * q < P.us) gt_sload<Q, EF>(sb[q], P.s0, P.bb0, P.ub, 4 * q, P.us, t);
    }
}

/* Block `bid` of a launch: the body of gemv_tc_kernel, which runs it with bid = blockIdx.x and wait = the
 * programmatic wait; a persistent kernel (tests/cuda/bench_persist.cu) runs several in turn, with wait = its
 * own dependency barrier. wait() is called once, after the ring's first loads and before anything another op
 * writes is read; the shared memory is free again only after a barrier. PRE: x comes split (job.xs), else
 * each block stages its slice. MINB: blocks per SM the registers are budgeted for (GT_LEAN_BLOCKS: the lean
 * variant, a shorter ring). LOOP (job.loop): the block stages its slice of x once for several output blocks,
 * the next one's first weights going out before this one's finish (the head's ~3,900 blocks each staged x;
 * session 14). done(P, last) runs after a (not LOOP) block's finish, every thread: last is the ticket's answer
 * where P.S > 1 (the block that wrote the outputs), and with P the block's place it can tell a dependent op that
 * these outputs are in (bench_persist's flags); the decode kernels pass nothing. */
struct gt_no_done {
    template <typename P> __device__ __forceinline__ void operator()(const P &, int) const {}
};
template <int Q, int NT, bool PRE, int MINB, int IN, bool LOOP, bool DQ = false, typename Wait,
          typename Done = gt_no_done>
__device__ __forceinline__ void gt_block(const float *__restrict__ x, int n, const gt_job &job, unsigned bid,
                                         Wait wait, Done done = Done()) {
    typedef gt_cfg<Q> C;
    constexpr int D = Q && MINB >= GT_LEAN_BLOCKS ? 4 : C::DEPTH; /* lean 4-bit: 4 units in flight, fewer registers */
    extern __shared__ uint4 gt_smem[];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    GT_TRACER(trace);
    trace.start();
    const int G = LOOP ? job.loop : 0, n_ob = (int)((job.W[0].n_out + GT_OUT - 1) / GT_OUT);
    unsigned vb = LOOP ? (bid / G) * n_ob + bid % G : bid;
    const bool cl = !LOOP && !PRE && Q != 0 && job.cl > 1; /* uniform */
    gt_place<Q> P = gt_locate<Q>(job, n, 4 * NT, lane, warp, vb, cl);
    const int nt = min(NT, (n - P.row0 + 3) / 4), us = P.us;

    constexpr bool EF = PRE && GT_W_EVICT; /* x split: a many-row launch */
    uint32_t w[D][2][C::WPU];
    uint32_t sb[D / 4][2];
    gt_ring_start<Q, D, EF>(P, w, sb, t);
    /* Before the wait, the norm weights this block's staging will read go to L1 (they depend on no op), so that
     * staging has one L2 round trip after the wait, not two (x and the norm's sums, then the weights). Thread i
     * takes unit i / 4 of the slice, lane i % 4. One stream, 4-bit 9B: 424.2-425.0 -> 429.0-429.5 tokens/s
     * (session 50, tests/cuda/step_cuts.sh, alternating), 421.0 / 425.8 -> 420.9 / 428.8 in a second call: within
     * 1 %, never below; the values are the same (a prefetch). */
    if constexpr (!PRE && (IN == GT_IN_NORM || IN == GT_IN_GNORM)) {
        const int64_t k = (P.ub + ((int)threadIdx.x >> 2)) * C::UK + (threadIdx.x & 3) * C::EPT;
        const float *nw = IN == GT_IN_NORM ? job.in.nw : job.in.glu.norm_w;
        const int64_t at = IN == GT_IN_NORM ? k : k % job.in.glu.dim;
        if (nw && (int)threadIdx.x < 4 * us) asm volatile("prefetch.global.L1 [%0];\n" ::"l"(nw + at));
    }
    /* XT (job.xtma): the block's rows of x (and the norm's sums or the gates) come into shared memory by bulk copies
     * (gt_copy_x), and staging reads them there: the same values. The copies go out through the SM's copy engine, so
     * they need not wait behind the ring's loads (the fifty-first pass's question). Their barrier is set up before
     * the wait. */
    constexpr bool XT = GT_X_TMA && WG_ON && !PRE && !LOOP;
    __shared__ uint64_t xbar;
    const bool xt = XT && job.xtma && ((uintptr_t)x & 15) == 0; /* uniform (job.xtma: gemv_tc_plan) */
    if (xt) {
        if (threadIdx.x == 0) wg_bar_init(cu_smem_addr(&xbar), 1), wg_bar_init_done();
        __syncthreads();
    }
    wait(); /* x, the partials and the tickets are the previous ops' */
    trace.mark(0);
    uint4 *sx = gt_smem;
    float *sX = (float *)(gt_smem + (size_t)nt * us * C::SXU);
    __shared__ float sc[4 * NT]; /* gt_norm_after (DQ): the rows' scales */
    constexpr bool MAY_SCALE = DQ && Q != 0 && !LOOP && (PRE || IN == GT_IN_NORM);
    const bool after = MAY_SCALE && gt_norm_after<Q>(job.in);
    constexpr int SH = Q ? GT_STAGE_H : 1, SH2 = SH == 4 ? 2 : SH; /* lanes a staging item (gt_stage) */
    if constexpr (PRE) {
        gt_copy<Q>(job.xs, job.Xs, P.U, P.row0, nt, P.ub, us, sx, sX);
        if (after) gt_row_scales(job.in, n, P.W.n_in, P.row0, 4 * NT, sc);
    } else {
        if (xt) { /* the copies after the X sums (4-bit) or the fragments (bf16) */
            float *xr = sX + (Q ? nt * us * 4 : 0);
            gt_copy_x<Q, IN>(x, job.in, n, P.W.n_in, P.row0, nt, P.ub, us, xr, &xbar);
            gt_stage<Q, IN, 4, false, true, SH>(xr, job.in, n, P.W.n_in, P.row0, nt, P.ub, us, sx, sX, threadIdx.x,
                                                GT_THREADS, MAY_SCALE ? sc : nullptr);
        } else {
            /* SH 4: parts of 4 where the block's items then fit its threads once, else of 2 (uniform) */
            const bool h2 = SH == 4 && min(n - P.row0, 4 * nt) * us * 16 > GT_THREADS;
            if (h2) gt_stage<Q, IN, 4, false, false, SH2>(x, job.in, n, P.W.n_in, P.row0, nt, P.ub, us, sx, sX,
                                                          threadIdx.x, GT_THREADS, MAY_SCALE ? sc : nullptr);
            if (!h2) gt_stage<Q, IN, 4, false, false, SH>(x, job.in, n, P.W.n_in, P.row0, nt, P.ub, us, sx, sX,
                                                          threadIdx.x, GT_THREADS, MAY_SCALE ? sc : nullptr);
        }
    }
    __syncthreads();
    trace.mark(1);

    for (;;) {
        float acc[NT][4];
        gt_zero(acc);
        if (P.wact) {
            /* Unit u = base + d sits in ring slot d: full turns first, then the last one or two with checks. */
            const int tx = us * C::SXU, tX = us * 4;
            int base = 0;
            for (; GT_FULL_TURNS(Q) && base + 2 * D <= us; base += D)
                gt_turn<Q, NT, D, true, 4, DQ, EF>(w, sb, P.p0 + (int64_t)base * C::UB, P.p8 + (int64_t)base * C::UB,
                                                   sx + base * C::SXU + lane, sX + base * 4 + t, tx, tX, nt, base, us,
                                                   P.s0, P.bb0, P.ub, lane, acc);
            for (; base < us; base += D)
                gt_turn<Q, NT, D, false, 4, DQ, EF>(w, sb, P.p0 + (int64_t)base * C::UB, P.p8 + (int64_t)base * C::UB,
                                                    sx + base * C::SXU + lane, sX + base * 4 + t, tx, tX, nt, base, us,
                                                    P.s0, P.bb0, P.ub, lane, acc);
        }
        trace.mark(2);
        if constexpr (!LOOP) {
            gt_finish<Q, NT, Q != 0, 4, DQ>(acc, n, P.W, P.y, P.part, P.tick, P.S, P.s, P.row0, nt, P.ob, P.o0, P.wact,
                                            lane, P.bx, &last, job.ss, after ? sc : nullptr, nullptr, nullptr,
                                            cl && P.S == job.cl);
            trace.mark(3);
            trace.write(job.W[0].w, P.W.n_out, P.W.n_in, P.S);
            done(P, P.S > 1 ? last : 1);
            return;
        }
        /* this output block's place, then the next one's (its ring out first), then this one's finish */
        const int ob = P.ob, o0 = P.o0, bx = P.bx;
        const bool wact = P.wact, more = ob + G < n_ob; /* uniform */
        if (more) {
            vb += G;
            P = gt_locate<Q>(job, n, 4 * NT, lane, warp, vb);
            gt_ring_start<Q, D, EF>(P, w, sb, t);
        }
        gt_finish<Q, NT, Q != 0, 4, DQ>(acc, n, P.W, P.y, P.part, P.tick, P.S, P.s, 0, nt, ob, o0, wact, lane, bx, &last,
                                 job.ss);
        if (!more) {
            trace.mark(3);
            trace.write(job.W[0].w, P.W.n_out, P.W.n_in, P.S);
            return;
        }
    }
}

template <int Q, int NT, bool PRE, int MINB = GT_MIN_BLOCKS, int IN = GT_IN_X, bool LOOP = false, bool DQ = false>
__global__ void __launch_bounds__(GT_THREADS, MINB)
    gemv_tc_kernel(const float *__restrict__ x, int n, const __grid_constant__ gt_job job) {
    gt_block<Q, NT, PRE, MINB, IN, LOOP, DQ>(x, n, job, blockIdx.x, [] { cu_pdl_enter(); });
}

#include "cuda_gemv_wide.cuh"
#include "cuda_gemv_dq.cuh"
#include "cuda_gemv_plan.cuh"
#include "cuda_gemv_simt.cuh"

#endif
