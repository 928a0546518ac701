/* cuda_q4_tiled.cuh: the order in which the CUDA backend keeps a 4-bit affine weight's codes, scales and biases
 * (qweight.tiled; cuda_q4_tiled.cu lays a weight out so at load).
 *
 * Why. The one-row decode matmul (cuda_gemv.cuh) gives lane (g, t) of a warp 8 bytes of output rows g and g + 8 of
 * its 16 rows for each unit of 64 codes. In the checkpoint's row-major order a warp's load then reads 32 bytes from
 * each of 8 rows: bench_stream.cu measured that pattern at 2.0-2.2 TB/s on an H200 at the kernels' occupancy, with no
 * arithmetic at all, where the same bytes read 512 contiguous bytes a warp move 2.0-3.6 TB/s (docs/performance.md,
 * forty-sixth pass). So the bytes are stored in the order the warps read them:
 * - rows padded to a multiple of 16 with zeros (codes, scales and biases; the kernels compute the padding's outputs
 *   and throw them away, as they do a part-filled block's);
 * - codes: rows in groups of 16; group G's bytes are where rows 16 G .. 16 G + 15 were, as U = K / 64
 *   units of 512 bytes, and unit u's 16 bytes at lane L = 4 g + t are row 16 G + g's bytes 32 u + 8 t .. + 7, then row
 *   16 G + g + 8's. A code's nibble inside its byte does not move.
 * - scales and biases (bf16), each on its own: group G's values are where its rows' were, as K / group records of 16,
 *   record i's pair 2 g, 2 g + 1 = the scale (bias) of group i of rows 16 G + g and 16 G + g + 8. A lane's two rows'
 *   values are one 4-byte word, a warp's four units' words 128 contiguous bytes.
 * Both are permutations inside a group of 16 rows, so a group keeps its place. */
#ifndef QUILL_CUDA_Q4_TILED_CUH
#define QUILL_CUDA_Q4_TILED_CUH

#include <stdint.h>

#include "backend/backend.h"

/* Whether the backend lays W out in tiles (a property of the weight alone). */
static inline int q4t_eligible(const qweight *W) {
    return W->fmt == QW_AFFINE && W->bits == 4 && (W->group == 64 || W->group == 128) && W->n_in % W->group == 0 &&
           W->n_out > 0 && W->n_out <= 2147483647LL - 15 && W->sb_fmt == QW_BF16 && W->scales &&
           W->biases && ((uintptr_t)W->w & 15) == 0 && ((uintptr_t)W->scales & 3) == 0 &&
           ((uintptr_t)W->biases & 3) == 0;
}

/* A tiled weight's rows, padding included. */
__host__ __device__ __forceinline__ int64_t q4t_rows(int64_t n_out) { return (n_out + 15) & ~(int64_t)15; }
/* The byte holding row o's codes k, k + 1 (k even) of a tiled weight of K codes a row. */
__host__ __device__ __forceinline__ int64_t q4t_code_byte(int64_t o, int64_t k, int64_t K) {
    const int64_t r = o & 15, kb = (k >> 1) & 31;
    return ((o >> 4) * (K >> 6) + (k >> 6)) * 512 + ((r & 7) * 4 + (kb >> 3)) * 16 + (r >> 3) * 8 + (kb & 7);
}
/* The index of row o's scale (bias) of group gi in a tiled weight of gpr groups a row. */
__host__ __device__ __forceinline__ int64_t q4t_sb_index(int64_t o, int64_t gi, int64_t gpr) {
    return (o >> 4) * 16 * gpr + gi * 16 + (o & 7) * 2 + ((o >> 3) & 1);
}
/* The same for a 4-bit weight in either order (tiled, else the checkpoint's row-major one): the byte of row o's codes
 * k, k + 1 (k even), and the index of row o's scale (bias) of group gi. */
__host__ __device__ __forceinline__ int64_t q4_code_byte_at(int tiled, int64_t o, int64_t k, int64_t K) {
    return tiled ? q4t_code_byte(o, k, K) : o * (K >> 1) + (k >> 1);
}
__host__ __device__ __forceinline__ int64_t q4_sb_at(int tiled, int64_t o, int64_t gi, int64_t gpr) {
    return tiled ? q4t_sb_index(o, gi, gpr) : o * gpr + gi;
}
/* The prompt GEMM's stage (cuda_gemm_wgq.cuh): a K tile's codes of its groups of 16 rows, group G's 512 bytes at
 * qt + 512 G (qt 1024-aligned), i.e. 4 rows of 128 bytes. Where the 16 bytes at 16 j (j < 4) of rows lo and lo + 8's
 * 64 lie (lo % 16 < 8: the pair's bytes interleaved 8 at a time, the 16-byte pieces 4 (lo % 2) + j of a 128-byte row).
 * swizzle: the codes came by TMA's 128-byte swizzle (wq_map_tiles), which puts piece p of the row at address a at
 * p ^ ((a >> 7) & 7). */
__host__ __device__ __forceinline__ uint32_t q4t_stage_piece(uint32_t qt, int lo, int j, int swizzle) {
    const uint32_t row = qt + (uint32_t)(lo >> 4) * 512 + (uint32_t)(lo & 6) * 64;
    return row + 16 * (((uint32_t)(4 * (lo & 1) + j)) ^ (swizzle ? (row >> 7) & 7 : 0));
}
/* The inverses, for laying a weight out: the row-major byte whose tiled place is byte t (of whole groups of K codes a
 * row), and the row-major index of the scale (bias) whose tiled index is t. tests/unit/backend/test_q4_tiled.c checks
 * that each undoes its reader above. */
__host__ __device__ __forceinline__ int64_t q4t_code_src(int64_t t, int64_t K) {
    const int64_t G = t / (K * 8), off = t - G * K * 8; /* a group of 16 rows: 8 K bytes */
    const int64_t lane = (off >> 4) & 31, row = (lane >> 2) + 8 * ((off >> 3) & 1);
    return (G * 16 + row) * (K / 2) + (off >> 9) * 32 + (lane & 3) * 8 + (off & 7);
}
__host__ __device__ __forceinline__ int64_t q4t_sb_src(int64_t t, int64_t gpr) {
    const int64_t G = t / (16 * gpr), j = t - G * 16 * gpr;
    return (G * 16 + ((j >> 1) & 7) + 8 * (j & 1)) * gpr + (j >> 4);
}

#endif
