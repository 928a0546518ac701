/* bench_int8_unit.h: the exact-integer 4-bit unit that bench_gemv_int.cu prototyped (docs/performance.md, sixth and
 * nineteenth passes) and bench_ws.cu's WS_INT8 consumers take: its x staging, its MMAs and its fold. Not used by quill.
 *
 * Per unit of 64 K values (one quantisation group), x is block floating point: E chosen so that |x / 2^E| < 2^30,
 * m = rint(x / 2^E) (exact for every x within 2^-6 of the unit's largest), and m in balanced base-256 digits
 * m = d0 2^24 + d1 2^16 + d2 2^8 + d3 (int8 each). Codes q (0..15) are unpacked to u8 with masks and a shift, and
 * mma.sync m16n8k32 u8 x s8 -> s32 gives P_j = sum q d_j exactly (|P_j| <= 64 * 15 * 128) with the digits as B
 * columns 0..3. The unit's sum is then 2^E (((P0 256 + P1) 65536) + (P2 256 + P3)) in f32 and folds as
 * acc = (s 2^E) v + (b X + acc), X = the unit's sum of x. Because P_j is exact, any kernel that computes it gets the
 * same bits at any row count. Include after cuda_common.cuh. */
#ifndef QUILL_BENCH_INT8_UNIT_H
#define QUILL_BENCH_INT8_UNIT_H

#include <stdint.h>

__device__ __forceinline__ void gi_imma(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* m (|m| < 2^30) in balanced base-256 digits: m = d0 2^24 + d1 2^16 + d2 2^8 + d3. */
__device__ __forceinline__ void gi_digits(int r, int8_t (&d)[4]) {
#pragma unroll
    for (int q = 3; q >= 1; q--) {
        d[q] = (int8_t)(r & 0xff);
        r = (r - d[q]) >> 8;
    }
    d[0] = (int8_t)r; /* |r| <= 64 */
}

/* One unit of x as B fragments, by a whole warp: lane l holds values 2l, 2l + 1 (v). Fragment layout: uint2
 * ub[j * LS + L] (k-step j, lane L = 4 g + t < 16) = bytes b of digit g of the values at (2t + j) * 8 + 2b (.x) and
 * + 2b + 1 (.y). LS = 32: the MMA's whole fragment (the caller zeroes columns 4..7, lanes 16..31); LS = 16: the
 * digits' lanes only (a reader's lanes past 15 take zeros). Returns (X, 2^E) for gi_fold. */
template <int LS> __device__ __forceinline__ float2 gi_stage_unit(float2 v, unsigned char *ub) {
    const int lane = threadIdx.x & 31;
    const float mx = warp_max(fmaxf(fabsf(v.x), fabsf(v.y)));
    int ex;
    frexpf(mx, &ex); /* mx < 2^ex (mx = 0: ex = 0) */
    const int sh = 30 - ex;
    const int m[2] = {__float2int_rn(ldexpf(v.x, sh)), __float2int_rn(ldexpf(v.y, sh))};
    const float X = warp_sum(v.x + v.y);
    __syncwarp(); /* the warp's earlier stores to ub (a caller's zeroing) are done */
    const int t = lane >> 3, j = (lane >> 2) & 1, b = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int8_t d[4];
        gi_digits(m[h], d);
#pragma unroll
        for (int g = 0; g < 4; g++) ub[(j * LS + 4 * g + t) * 8 + 4 * h + b] = (unsigned char)d[g];
    }
    return make_float2(X, ldexpf(1.0f, -sh));
}

/* Four units of x at once, 8 lanes a unit, for a warp that stages many (bench_ws's consumers: gi_stage_unit's two warp
 * reductions and eight byte stores a lane a unit cost them more than their units' MMAs). Lane l holds values
 * 8 c .. 8 c + 7 of its unit (v), c = l % 8 = 2 t + j: the values of k-step j of lane t's fragment, so the lane writes
 * whole words, digit g of values h, h + 2, h + 4, h + 6 as one (LS = 16 layout, as gi_stage_unit<16>'s). The digits
 * are gi_stage_unit's; X is summed in another order (the lane's 8 in order, then over the 8 lanes). Returns
 * (X, 2^E), the same in the unit's 8 lanes. */
__device__ __forceinline__ float2 gi_stage_unit8(const float (&v)[8], unsigned char *ub) {
    const int c = (threadIdx.x & 31) & 7, t = c >> 1, j = c & 1;
    float mx = 0.0f, X = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) mx = fmaxf(mx, fabsf(v[e])), X += v[e];
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        X += __shfl_xor_sync(0xffffffffu, X, o);
    }
    int ex;
    frexpf(mx, &ex); /* mx < 2^ex (mx = 0: ex = 0) */
    const int sh = 30 - ex;
    uint32_t word[2][4] = {{0u, 0u, 0u, 0u}, {0u, 0u, 0u, 0u}}; /* [h][g] */
#pragma unroll
    for (int e = 0; e < 8; e++) {
        int8_t d[4];
        gi_digits(__float2int_rn(ldexpf(v[e], sh)), d);
#pragma unroll
        for (int g = 0; g < 4; g++) word[e & 1][g] |= (uint32_t)(unsigned char)d[g] << (8 * (e >> 1));
    }
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int g = 0; g < 4; g++) *(uint32_t *)(ub + (j * 16 + 4 * g + t) * 8 + 4 * h) = word[h][g];
    return make_float2(X, ldexpf(1.0f, -sh));
}

/* A unit's two MMAs: k-step j on the lane's code words pj (row g) and qj (row g + 8): low nibbles a0 / a1, high
 * a2 / a3; f0, f1 the k-steps' B fragments. */
__device__ __forceinline__ void gi_unit_mma(int (&c)[4], uint32_t p0, uint32_t q0, uint32_t p1, uint32_t q1, uint2 f0,
                                            uint2 f1) {
    const uint32_t M = 0x0f0f0f0fu;
    gi_imma(c, p0 & M, q0 & M, (p0 >> 4) & M, (q0 >> 4) & M, f0.x, f0.y);
    gi_imma(c, p1 & M, q1 & M, (p1 >> 4) & M, (q1 >> 4) & M, f1.x, f1.y);
}

/* A unit's digit sums (c: lane t = 0 holds digits 0, 1 of rows og and og8, lane t = 1 digits 2, 3) folded into the
 * rows' sums (lane t = 0's) with the unit's scales and biases (raw bf16 bits in the low halves of rs: s(og), s(og8),
 * b(og), b(og8)) and xe = (X, 2^E). */
__device__ __forceinline__ void gi_fold(const int (&c)[4], const uint32_t (&rs)[4], float2 xe, float &acc0,
                                        float &acc8) {
    const int q0 = c[0] * 256 + c[1], q8 = c[2] * 256 + c[3];
    const int r0 = __shfl_down_sync(0xffffffffu, q0, 1), r8 = __shfl_down_sync(0xffffffffu, q8, 1);
    const float v0 = fmaf((float)q0, 65536.0f, (float)r0), v8 = fmaf((float)q8, 65536.0f, (float)r8);
    acc0 = fmaf(__uint_as_float(rs[0] << 16) * xe.y, v0, fmaf(__uint_as_float(rs[2] << 16), xe.x, acc0));
    acc8 = fmaf(__uint_as_float(rs[1] << 16) * xe.y, v8, fmaf(__uint_as_float(rs[3] << 16), xe.x, acc8));
}

#endif
