/* cuda_head_sketch.cuh: the greedy id of one row from an 8-bit sketch of a bf16 lm_head, the same id as the full head's
 * logits and argmax (cuda_head.cu's op; tests/cuda/bench_head.cu). Included by both, so kernels only.
 *
 * A sketch row keeps int8 codes q and an f32 scale s per group of HS_GROUP values (w = s q + d, d the rounding) and
 * A = ||s q||_2, B = ||d||_2, each rounded up. The row h is cut the same way at run time in int16 (h = t p + e), so in
 * real arithmetic
 *   w . h = sum_g s_g t_g (q_g . p_g) + (s q) . e + d . h,   |(s q) . e| <= A ||e||,   |d . h| <= B ||h||,
 * the first term integer dots (dp2a) scaled per group. bound = A ||e|| + B ||h|| + HS_MARGIN (A + B) ||h||, the margin
 * covering the f32 roundings of this estimate and of the head's own logits (both ~1e-5 of ||w|| ||h|| at most, the
 * margin 2.4e-4). Where the head's matmul takes x rounded to bf16 (QUILL_DECODE_PRECISION bf16 or dequant), h is that
 * rounded x. L* = the largest est - bound: the row with the largest logit has its bound interval reach L*, and a row
 * whose est + bound < L* has a logit below it, so it is neither the argmax nor tied with it. The candidates (est +
 * bound >= L*) get their logits from their bf16 rows by the head's own matmul (the same K slices: the same bits), and
 * the first largest of those is the head's argmax. Where that cannot be decided here (h not finite, more than HS_CAP
 * candidates) the id is -1 and the caller runs the full head. */
#ifndef QUILL_CUDA_HEAD_SKETCH_CUH
#define QUILL_CUDA_HEAD_SKETCH_CUH

#include <limits.h>

#include "cuda_common.cuh"

#define HS_GROUP 64
#define HS_CAP 512                 /* candidates computed from their rows at most */
#define HS_MARGIN (1.0f / 4096.0f) /* of (A + B) ||h|| */
#define HS_MAX_K 8192              /* the codes of h in shared memory: 16 KB */

/* K a sketch takes: whole 512-value passes of a warp (16 codes a lane), at most HS_MAX_K. */
static inline bool hs_k_ok(int64_t K) { return K > 0 && K % 512 == 0 && K <= HS_MAX_K; }

/* One group of 64 values, two a lane (v0, v1), cut to codes of at most lim: the group's scale s (its largest magnitude
 * over lim; 1 where that is 0 or not finite), the lane's codes and their roundings v - s q (exact in f64). */
struct hs_cut {
    float s, q0, q1;
    double e0, e1;
};
__device__ __forceinline__ hs_cut hs_cut_group(float v0, float v1, float lim) {
    const float mx = warp_max(fmaxf(fabsf(v0), fabsf(v1)));
    hs_cut c;
    c.s = mx > 0.0f && isfinite(mx) ? mx / lim : 1.0f;
    c.q0 = fminf(fmaxf(rintf(v0 / c.s), -lim), lim), c.q1 = fminf(fmaxf(rintf(v1 / c.s), -lim), lim);
    c.e0 = (double)v0 - (double)c.s * c.q0, c.e1 = (double)v1 - (double)c.s * c.q1; /* a float times a small integer */
    return c;
}
/* sqrt(x) rounded up (a hair more: the f64 sum's own rounding). */
__device__ __forceinline__ float hs_norm_up(double x) { return __double2float_ru(sqrt(x) * (1.0 + 1e-12)); }
/* Floats as ints in the same order (for atomicMax), and back. */
__device__ __forceinline__ int hs_key(float f) {
    const int i = __float_as_int(f);
    return i >= 0 ? i : i ^ 0x7fffffff;
}
__device__ __forceinline__ float hs_val(int k) { return __int_as_float(k >= 0 ? k : k ^ 0x7fffffff); }

/* The sketch of W [V][K] (bf16): a warp a row, two values a lane a group. bad: raised where a row is not finite
 * (then no sketch is used). ab: [V][2] = A, B. */
__global__ void hs_build_kernel(const __nv_bfloat16 *__restrict__ W, int64_t V, int K, int8_t *__restrict__ q,
                                float *__restrict__ sw, float *__restrict__ ab, unsigned *bad) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= V) return;
    const int G = K / HS_GROUP;
    double aa = 0.0, bb = 0.0;
    bool fin = true;
    for (int g = 0; g < G; g++) {
        const __nv_bfloat162 w2 = ((const __nv_bfloat162 *)(W + r * K + (int64_t)g * HS_GROUP))[lane];
        const float w0 = __bfloat162float(w2.x), w1 = __bfloat162float(w2.y);
        fin &= isfinite(w0) && isfinite(w1);
        const hs_cut c = hs_cut_group(w0, w1, 127.0f);
        const double v0 = (double)c.s * c.q0, v1 = (double)c.s * c.q1;
        aa += v0 * v0 + v1 * v1, bb += c.e0 * c.e0 + c.e1 * c.e1;
        char2 c2;
        c2.x = (signed char)c.q0, c2.y = (signed char)c.q1;
        ((char2 *)(q + r * K + (int64_t)g * HS_GROUP))[lane] = c2;
        if (lane == 0) sw[r * G + g] = c.s;
    }
    aa = warp_sum(aa), bb = warp_sum(bb);
    if (!__all_sync(0xffffffffu, fin) && lane == 0) atomicOr(bad, 1u);
    if (lane == 0) ab[2 * r] = hs_norm_up(aa), ab[2 * r + 1] = hs_norm_up(bb);
}

/* A call's scratch (device): h's codes and scales, ||e||, ||h|| and whether h can be decided on, the rows' upper
 * bounds, L*, the candidates and their gathered rows and logits. */
struct hs_work {
    int16_t *p;          /* [K] */
    float *t;            /* [K / HS_GROUP] */
    float *info;         /* [0] ||e|| (up), [1] ||h|| (up), [2] nonzero: h not usable */
    float *upper;        /* [V] */
    int *lstar;          /* L* as hs_key */
    unsigned *count;     /* candidates found (may pass HS_CAP) */
    int *cand;           /* [HS_CAP] */
    __nv_bfloat16 *rows; /* [HS_CAP][K], zeroed at creation */
    float *y;            /* [HS_CAP] */
};

/* h (K values) in int16 a group, its norms; resets L* and the count. One block of 1024. bf16x: the head's matmul takes
 * x rounded to bf16 (QUILL_DECODE_PRECISION bf16 or dequant), so the bounds are of that x's products. */
__global__ void __launch_bounds__(1024) hs_quantize_kernel(const float *__restrict__ h, int K, int bf16x, hs_work w) {
    cu_pdl_enter();
    __shared__ double se[32], sh[32];
    __shared__ unsigned bad;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) bad = 0, *w.lstar = INT_MIN, *w.count = 0;
    __syncthreads();
    double ee = 0.0, hh = 0.0;
    for (int g = warp; g < K / HS_GROUP; g += 32) {
        float h0 = h[g * HS_GROUP + 2 * lane], h1 = h[g * HS_GROUP + 2 * lane + 1];
        if (bf16x) h0 = __bfloat162float(__float2bfloat16_rn(h0)), h1 = __bfloat162float(__float2bfloat16_rn(h1));
        if (!isfinite(h0) || !isfinite(h1)) bad = 1;
        const hs_cut c = hs_cut_group(h0, h1, 32767.0f);
        ee += c.e0 * c.e0 + c.e1 * c.e1, hh += (double)h0 * h0 + (double)h1 * h1;
        short2 p2;
        p2.x = (short)c.q0, p2.y = (short)c.q1;
        ((short2 *)(w.p + g * HS_GROUP))[lane] = p2;
        if (lane == 0) w.t[g] = c.s;
    }
    ee = warp_sum(ee), hh = warp_sum(hh);
    if (lane == 0) se[warp] = ee, sh[warp] = hh;
    __syncthreads();
    if (warp == 0) {
        ee = warp_sum(se[lane]), hh = warp_sum(sh[lane]);
        if (lane == 0) {
            const float en = hs_norm_up(ee), hn = hs_norm_up(hh);
            w.info[0] = en, w.info[1] = hn;
            w.info[2] = bad || !(hn < 1e30f) ? 1.0f : 0.0f; /* (huge rows could overflow the bounds) */
        }
    }
}

__device__ __forceinline__ uint4 hs_ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
/* 16 codes of a sketch row dotted with 16 int16 codes of h (h0: values 0-7, h1: 8-15), as an integer. */
__device__ __forceinline__ int hs_dot16(uint4 c, uint4 h0, uint4 h1) {
    int d = __dp2a_lo((int)h0.x, (int)c.x, 0);
    d = __dp2a_hi((int)h0.y, (int)c.x, d);
    d = __dp2a_lo((int)h0.z, (int)c.y, d);
    d = __dp2a_hi((int)h0.w, (int)c.y, d);
    d = __dp2a_lo((int)h1.x, (int)c.z, d);
    d = __dp2a_hi((int)h1.y, (int)c.z, d);
    d = __dp2a_lo((int)h1.z, (int)c.w, d);
    return __dp2a_hi((int)h1.w, (int)c.w, d);
}

/* Every row's estimate and bound: a warp a row (lane: 16 codes at 512-value strides, HS_PASSES at a time), upper[r]
 * out and the largest lower bound into L*. Blocks of 256. */
#define HS_PASSES 8
__global__ void __launch_bounds__(256, 4) hs_sketch_kernel(const int8_t *__restrict__ q, const float *__restrict__ sw,
                                                        const float *__restrict__ ab, int64_t V, int K, hs_work w) {
    __shared__ __align__(16) int16_t sp[HS_MAX_K];
    __shared__ float st[HS_MAX_K / HS_GROUP];
    __shared__ float bm[8];
    const int lane = threadIdx.x & 31, G = K / HS_GROUP, P = K / 512;
    cu_pdl_enter();
    for (int i = threadIdx.x; i < K / 8; i += blockDim.x) ((uint4 *)sp)[i] = ((const uint4 *)w.p)[i];
    for (int i = threadIdx.x; i < G; i += blockDim.x) st[i] = w.t[i];
    const float en = w.info[0], hn = w.info[1];
    __syncthreads();
    float lmax = -INFINITY;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5); r < V; r += warps) {
        const uint4 *row = (const uint4 *)(q + r * K);
        const float *srow = sw + r * G;
        float acc = 0.0f;
        for (int i0 = 0; i0 < P; i0 += HS_PASSES) {
            uint4 c[HS_PASSES];
            float s[HS_PASSES]; /* the scales go out with the codes (in the loop below, each load waited in turn) */
#pragma unroll
            for (int i = 0; i < HS_PASSES; i++)
                if (i0 + i < P)
                    c[i] = hs_ld_stream(row + (i0 + i) * 32 + lane), s[i] = __ldg(srow + (i0 + i) * 8 + lane / 4);
#pragma unroll
            for (int i = 0; i < HS_PASSES; i++) {
                if (i0 + i >= P) break;
                const int k = (i0 + i) * 512 + lane * 16;
                const uint4 *hp = (const uint4 *)(sp + k);
                acc = fmaf((float)hs_dot16(c[i], hp[0], hp[1]), s[i] * st[k / HS_GROUP], acc);
            }
        }
        acc = warp_sum(acc);
        const float a = __ldg(ab + 2 * r), b = __ldg(ab + 2 * r + 1);
        const float bound = a * en + b * hn + HS_MARGIN * (a + b) * hn;
        if (lane == 0) w.upper[r] = acc + bound;
        lmax = fmaxf(lmax, acc - bound);
    }
    lmax = warp_max(lmax);
    if (lane == 0) bm[threadIdx.x >> 5] = lmax;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = bm[0];
        for (int i = 1; i < (int)(blockDim.x >> 5); i++) m = fmaxf(m, bm[i]);
        atomicMax(w.lstar, hs_key(m));
    }
}

/* The candidates: rows whose upper bound reaches L* (in any order; the count may pass HS_CAP). */
__global__ void hs_compact_kernel(int64_t V, hs_work w) {
    cu_pdl_enter();
    const float L = hs_val(*w.lstar);
    if (!isfinite(L)) return; /* no count: undecided */
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < V; r += (int64_t)gridDim.x * blockDim.x)
        if (w.upper[r] >= L) {
            const unsigned i = atomicAdd(w.count, 1u);
            if (i < HS_CAP) w.cand[i] = (int)r;
        }
}

/* The candidates' bf16 rows side by side (block j: candidate j; blocks past the count leave their row). */
__global__ void hs_gather_kernel(const __nv_bfloat16 *__restrict__ W, int K, hs_work w) {
    cu_pdl_enter();
    const unsigned n = min(*w.count, (unsigned)HS_CAP);
    if (blockIdx.x >= n) return;
    const uint4 *src = (const uint4 *)(W + (int64_t)w.cand[blockIdx.x] * K);
    uint4 *dst = (uint4 *)(w.rows + (int64_t)blockIdx.x * K);
    for (int i = threadIdx.x; i < K / 8; i += blockDim.x) dst[i] = src[i];
}

/* The first largest of the candidates' logits (argmax's am_take), as its row: -1 where undecided. One block of 256. */
__global__ void hs_pick_kernel(hs_work w, int32_t *out) {
    cu_pdl_enter();
    __shared__ float sv[8];
    __shared__ int si[8];
    const unsigned n = *w.count;
    bool ok = n > 0 && n <= HS_CAP && w.info[2] == 0.0f, fin = true;
    float bv = 0.0f;
    int bi = -1;
    for (unsigned j = threadIdx.x; ok && j < n; j += blockDim.x) {
        fin &= isfinite(w.y[j]);
        am_take(bv, bi, w.y[j], w.cand[j]);
    }
    ok = __syncthreads_and(fin) && ok; /* a logit that is not finite: the full head's argmax decides */
    am_warp(bv, bi);
    if ((threadIdx.x & 31) == 0) sv[threadIdx.x >> 5] = bv, si[threadIdx.x >> 5] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < (int)(blockDim.x >> 5); i++) am_take(bv, bi, sv[i], si[i]);
        *out = ok && bi >= 0 ? bi : -1;
    }
}

#endif
