/* bench_ws_unit.h: what a consumer warp of bench_ws.cu does with its slice of an op: x's B fragments staged once an op
 * (after the flags of the op before), and a slot's units into its sums, as the decode kernel (bf16, 4-bit gt_unit) or
 * bench_int8_unit.h's unit (WS_INT8) computes them. Included by bench_ws.cu after its geometry (WS_*), ws_op and
 * ws_item, and by nothing else. */
#ifndef QUILL_BENCH_WS_UNIT_H
#define QUILL_BENCH_WS_UNIT_H

#include "bench_int8_unit.h"

/* A consumer's B fragments of a slice of x (its units ub .. ub + us of the op's input), and with 4-bit weights the
 * units' X sums (after the fragments, WS_MAX_US * WS_XU uint4 in). */
__device__ __forceinline__ void ws_stage_x(const ws_op &op, const ws_item &it, uint4 *xf, int lane) {
    /* x of the slice as B fragments (gt_stage, one row: hi in lanes g = 0, lo in g = 1): each lane polls the
     * flags of the output groups its own pieces lie in, all together, until they are up; then its acquire
     * fence and its loads, all out at once. Piece p: the lane t = p % 4 share of unit p / 4, WC::EPT values. */
    constexpr int E = WC::EPT;
    const int np = it.us * 4; /* at most WS_PIECES a lane */
    if (op.x_ready && WS_GLOBAL) { /* every group of x, as a norm's scale needs (the count its finishers raise) */
        while (ld_relaxed_gpu(op.x_ready + op.x_groups) < op.x_groups) ws_pause();
        cu_fence_acquire();
    } else if (op.x_ready) {
        const unsigned *f = op.x_ready + it.ub * (WC::UK / 16); /* a flag a group of 16 outputs */
        for (;;) {
            bool up = true;
#pragma unroll
            for (int q = 0; q < WS_PIECES; q++)
                if (lane + 32 * q < np) up &= ld_relaxed_gpu(f + (lane + 32 * q) * E / 16) != 0u;
            if (up) break;
            ws_pause();
        }
        cu_fence_acquire();
    }
#if WS_INT8
    /* four units a pass (gi_stage_unit8): lane l takes unit 4 p + l / 8's values 8 (l % 8) .. + 7; loads out first */
    float4 xu[WS_MAX_US / 4][2];
#pragma unroll
    for (int p = 0; p < WS_MAX_US / 4; p++) {
        const int u = 4 * p + (lane >> 3);
        const float4 *px = (const float4 *)(op.x + (it.ub + u) * 64 + (lane & 7) * 8);
        xu[p][0] = u < it.us ? __ldcg(px) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        xu[p][1] = u < it.us ? __ldcg(px + 1) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int p = 0; p < WS_MAX_US / 4; p++) {
        if (4 * p >= it.us) break; /* uniform: it.us is a multiple of 8 */
        const int u = 4 * p + (lane >> 3);
        const float v[8] = {xu[p][0].x, xu[p][0].y, xu[p][0].z, xu[p][0].w,
                            xu[p][1].x, xu[p][1].y, xu[p][1].z, xu[p][1].w};
        const float2 xe = gi_stage_unit8(v, (unsigned char *)(xf + u * WS_XU));
        if ((lane & 7) == 0) ((float2 *)(xf + WS_MAX_US * WS_XU))[u] = xe;
    }
#else
    float4 xv[WS_PIECES][E / 4];
#pragma unroll
    for (int q = 0; q < WS_PIECES; q++) {
        const float4 *px = (const float4 *)(op.x + it.ub * WC::UK + (lane + 32 * q) * E);
#pragma unroll
        for (int j = 0; j < E / 4; j++)
            xv[q][j] = lane + 32 * q < np ? __ldcg(px + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int q = 0; q < WS_PIECES; q++) {
        const int p = lane + 32 * q, u = p >> 2, t = p & 3;
        if (32 * q >= np) break; /* uniform: np is a multiple of 32 (the host checks) */
        float v[E];
#pragma unroll
        for (int j = 0; j < E / 4; j++) v[4 * j] = xv[q][j].x, v[4 * j + 1] = xv[q][j].y, v[4 * j + 2] = xv[q][j].z,
                                        v[4 * j + 3] = xv[q][j].w;
#if WS_Q
        chain_q4_piece(v, xf, (float *)(xf + WS_MAX_US * WS_XU), u, t);
#else
        float h[E];
#pragma unroll
        for (int e = 0; e < E; e++) h[e] = __bfloat162float(__float2bfloat16_rn(v[e]));
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            hi[e] = cu_pack_bf16x2(gt_part(v, h, 2 * e, 0), gt_part(v, h, 2 * e + 1, 0));
            lo[e] = cu_pack_bf16x2(gt_part(v, h, 2 * e, 1), gt_part(v, h, 2 * e + 1, 1));
        }
        xf[u * 8 + t] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        xf[u * 8 + 4 + t] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
#endif
    }
#endif
    __syncwarp();
}

/* 4-bit: what gt_unit reads as the B fragments (bx[0], bx[32]) of lanes 8-31 and the X sums of lanes t != 0, the
 * dead rows of the one-row tile: zeros (ws_kernel clears them). */
__shared__ uint4 ws_zero_f[40];
__shared__ float ws_zero_x;

/* A slot's WS_CH units into acc (lane t's column pair, or 4-bit's folded sums of rows g and g + 8), u0: the first's
 * unit in the slice. bf16: gt_unit's two MMAs a unit, written out for the slot's rows; 4-bit: gt_unit itself on the
 * lane's 16 bytes and its own scale pair (src = lane), the B fragments of lanes past 7 and the X sums of lanes t != 0
 * zeros, as gt_stage's dead rows are. WS_FREE: one xor a word instead (wrong values, the loads kept). */
__device__ __forceinline__ void ws_chunk(float (&acc)[1][4], const unsigned char *sl, const uint4 *xf, int u0,
                                         int lane) {
#if WS_Q
    const float *Xs = (const float *)(xf + WS_MAX_US * WS_XU); /* 4-bit's X sums; WS_INT8's (X, 2^E) pairs */
#pragma unroll
    for (int u = 0; u < WS_CH; u++) {
        uint32_t sb[2];
        const uint4 a = chain_slot_unit(sl, WS_CH, u, lane, sb);
        if (WS_FREE) {
            chain_free_unit(acc, a, sb);
            continue;
        }
        const int uu = u0 + u;
#if WS_INT8
        const uint2 *fb = (const uint2 *)(xf + uu * WS_XU), z = make_uint2(0u, 0u);
        int c[4] = {0, 0, 0, 0};
        gi_unit_mma(c, a.x, a.z, a.y, a.w, lane < 16 ? fb[lane] : z, lane < 16 ? fb[16 + lane] : z);
        const uint32_t rs[4] = {sb[0] & 0xFFFFu, sb[0] >> 16, sb[1] & 0xFFFFu, sb[1] >> 16};
        gi_fold(c, rs, ((const float2 *)Xs)[uu], acc[0][0], acc[0][1]);
#else
        const uint32_t w[2][2] = {{a.x, a.y}, {a.z, a.w}};
        const uint4 *bx = lane < 8 ? xf + (uu >> 2) * 64 + (uu & 3) * 8 + lane : ws_zero_f + (lane & 7);
        gt_unit<WS_Q, 1, 4, false>(w, sb, lane, bx, (lane & 3) == 0 ? Xs + uu : &ws_zero_x, 0, 0, 1, acc);
#endif
    }
#else
    sl += (lane & 3) * 16;
#pragma unroll
    for (int u = 0; u < WS_CH; u++) {
        const unsigned char *bu = sl + u / WS_BOXU * WS_BOX + u % WS_BOXU * 64;
        const int g = lane >> 2;
        const uint4 A = *(const uint4 *)(bu + g * WS_ROW), A8 = *(const uint4 *)(bu + (g + 8) * WS_ROW);
        if (WS_FREE) {
            acc[0][0] = __uint_as_float(__float_as_uint(acc[0][0]) ^ A.x ^ A.y ^ A.z ^ A.w);
            acc[0][2] = __uint_as_float(__float_as_uint(acc[0][2]) ^ A8.x ^ A8.y ^ A8.z ^ A8.w);
            continue;
        }
        const uint4 f = g < 2 ? xf[(u0 + u) * 8 + lane] : make_uint4(0u, 0u, 0u, 0u);
        gt_mma(acc[0], A.x, A8.x, A.y, A8.y, f.x, f.y);
        gt_mma(acc[0], A.z, A8.z, A.w, A8.w, f.z, f.w);
    }
#endif
}

#endif
