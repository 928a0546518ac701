/* cuda_gemm_wgq.cuh: the prompt-row GEMM for MLX 4-bit affine weights in the split precision, on wgmma, from the
 * weights' codes: no dequantized copy of the weight is made or read.
 *
 * Arithmetic. A weight's values are w = s q + b per group (q the 4-bit code; s, b the group's scale and bias), and x
 * is split as x = x_hi + x_lo (both bf16, cuda_gemm.cu). For each K tile t of 64 values (inside one group: group %
 * 64 == 0) the tensor cores sum P_t = sum_k q_k x_hi,k + sum_k q_k x_lo,k over the tile (the codes are exact in bf16,
 * so every product is exact; f32 accumulation, a fresh accumulator each tile), and the tile is folded into the
 * output as y = s P_t + (b X_t + y), X_t = the tile's sum of x (xsum_kernel). In real arithmetic that is sum_k (s q_k +
 * b) x_k, the weight's own product, with no rounding of w to bf16 hi and lo parts.
 *
 * Work. As cuda_gemm_wg.cuh's kernel, a producer warpgroup and C consumer warpgroups of 64 rows each, over 128
 * outputs of one weight. The producer's thread 0 sends the tile's x_hi and x_lo by TMA; its 128 threads each own a
 * weight row: they copy the row's codes, scale and bias (and thread r < BM row r's X) into a ring of raw slots by
 * cp.async, WQ_RAW - 1 tiles ahead, then write the row's codes as bf16 into the stage, where TMA's 128-byte swizzle
 * would put them, with s, b and X as floats beside them; then the fence to the async proxy and the stage's full
 * barrier. A consumer runs the tile's 8 k16 steps into one of two accumulators, and while they run folds the other
 * (the tile before) into y: two accumulators and y are 192 registers a thread.
 *
 * EXACT(batch): an output is one block's sequence of tiles, each the same 8 instructions and the same fold, whatever m
 * is or which tile (large: 128 rows, small: 64) computes it, and rows never meet. */
#ifndef QUILL_CUDA_GEMM_WGQ_CUH
#define QUILL_CUDA_GEMM_WGQ_CUH

#include "cuda_gemm_wg.cuh"

#define WQ_RAW 4 /* raw slots: codes in flight WQ_RAW - 1 tiles ahead of the conversion */

/* C consumer warpgroups (64 rows each) x 128 outputs, S stages. A stage: x_hi and x_lo tiles (BM x 64 bf16 each), the
 * weight tile (128 x 64 bf16 codes), then s and b (128 floats each) and X (BM floats). A raw slot: the 128 rows' codes
 * (32 bytes each), their scale and bias words, and BM words of X. */
template <int C, int S> struct wq_tile {
    static constexpr int CW = C, BM = 64 * C, BN = 128, THREADS = 128 * (1 + C), STAGES = S;
    static constexpr int X_BYTES = BM * WG_BK * 2, W_BYTES = BN * WG_BK * 2;
    static constexpr int PAR = 2 * X_BYTES + W_BYTES, PAR_BYTES = (BN * 8 + BM * 4 + 1023) / 1024 * 1024;
    static constexpr int STAGE_BYTES = PAR + PAR_BYTES, RAW_SLOT = BN * 40 + BM * 4;
    static constexpr int SMEM = S * STAGE_BYTES + WQ_RAW * RAW_SLOT + 1024;
};
typedef wq_tile<2, 4> wq_large; /* 128 x 128: 4 stages of 49 KB and the raw slots: 223 KB, one block an SM */
typedef wq_tile<1, 4> wq_small; /* 64 x 128: 137 KB, one block an SM (the consumer's 192 accumulators) */

/* A 4-bit affine weight (n x K) as the kernel takes it: codes K / 8 words a row (element 8 i + e in word i's bits
 * 4e..4e+3), 16-byte aligned; a scale and a bias per group of `group` values of a row (group % 64 == 0, K % group
 * == 0) in sb_fmt (QW_BF16, QW_F16 or QW_F32), 4-byte aligned. */
struct wg_q4 {
    const uint32_t *codes;
    const void *scales, *biases;
    int group, sb_fmt;
};
static inline int wg_q4_ok(const wg_q4 *q, int64_t K) {
    return q->group > 0 && q->group % WG_BK == 0 && K % q->group == 0 && ((uintptr_t)q->codes & 15) == 0 &&
           ((uintptr_t)q->scales & 3) == 0 && ((uintptr_t)q->biases & 3) == 0 &&
           (q->sb_fmt == QW_BF16 || q->sb_fmt == QW_F16 || q->sb_fmt == QW_F32);
}

struct wq_job {
    CUtensorMap x[2]; /* x_hi, x_lo: boxes of BM rows x 64 */
    wg_q4 q[WG_WEIGHTS];
    const float *xs; /* m x K / 64: each row's sums of x over the K tiles */
    float *y[WG_WEIGHTS];
    int n[WG_WEIGHTS], nb0[WG_WEIGHTS + 1];
    int count;
};

/* The shared-memory accesses of the producer and the fold, at 32-bit shared addresses. */
__device__ __forceinline__ uint32_t wq_lds32(uint32_t a) {
    uint32_t v = 0;
#if WG_ON
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
#endif
    return v;
}
__device__ __forceinline__ float2 wq_lds64(uint32_t a) {
    float2 v = make_float2(0.0f, 0.0f);
#if WG_ON
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a));
#endif
    return v;
}
__device__ __forceinline__ uint4 wq_lds128(uint32_t a) {
    uint4 v = make_uint4(0, 0, 0, 0);
#if WG_ON
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
#endif
    return v;
}
__device__ __forceinline__ void wq_sts32(uint32_t a, uint32_t v) {
#if WG_ON
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(v));
#endif
}
__device__ __forceinline__ void wq_sts128(uint32_t a, uint4 v) {
#if WG_ON
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
#endif
}

/* Group g's scale or bias from the 4-byte word that holds it (its address rounded down to 4 bytes): fmt QW_BF16,
 * QW_F16 or QW_F32; a 2-byte value is the word's high half when g is odd. */
__device__ __forceinline__ float wq_sb_value(uint32_t word, int fmt, int64_t g) {
    if (fmt == QW_F32) return __uint_as_float(word);
    const uint32_t h = (g & 1) ? word >> 16 : word & 0xFFFFu;
    if (fmt == QW_BF16) return __uint_as_float(h << 16);
    return __half2float(__ushort_as_half((unsigned short)h));
}
__host__ __device__ __forceinline__ int64_t wq_sb_offset(int fmt, int64_t g) {
    return fmt == QW_F32 ? g * 4 : (g * 2) & ~(int64_t)3;
}
/* A code word's 8 codes as 8 bf16 values q (exact): 0x4300 | q is the bf16 128 + q, less 128. */
__device__ __forceinline__ uint4 wq_codes_bf16(uint32_t u) {
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t t = u >> (8 * i), v = (t & 0xFu) | ((t & 0xF0u) << 12) | 0x43004300u;
        const __nv_bfloat162 r = __hsub2(*(const __nv_bfloat162 *)&v, __floats2bfloat162_rn(128.0f, 128.0f));
        o[i] = *(const uint32_t *)&r;
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* The producer (module comment). Thread r owns weight row r of the block's 128 and, for r < BM, row r's X. */
template <class T> __device__ __forceinline__ void wq_produce(const wq_job &job, int m, int K, int row0, int wi,
                                                              int col0, uint32_t base, uint64_t *full,
                                                              uint64_t *empty) {
    constexpr int R = WQ_RAW;
    const int KT = K / WG_BK, r = threadIdx.x, n = job.n[wi];
    const wg_q4 q = job.q[wi];
    const int64_t o = col0 + r, xr = row0 + r, wpr = K / 8, gpr = K / q.group;
    const bool wrow = o < n, xrow = r < T::BM && xr < m;
    const uint32_t raw = base + (uint32_t)(T::STAGES * T::STAGE_BYTES);
    auto issue = [&](int t) {
        const uint32_t slot = raw + (uint32_t)((t % R) * T::RAW_SLOT);
        if (wrow) {
            const uint32_t *src = q.codes + o * wpr + t * 8;
            const int64_t g = o * gpr + (int64_t)t * WG_BK / q.group;
            cu_cp_async16(slot + r * 32, src, true);
            cu_cp_async16(slot + r * 32 + 16, src + 4, true);
            cu_cp_async4(slot + T::BN * 32 + r * 4, (const char *)q.scales + wq_sb_offset(q.sb_fmt, g), true);
            cu_cp_async4(slot + T::BN * 36 + r * 4, (const char *)q.biases + wq_sb_offset(q.sb_fmt, g), true);
        }
        if (xrow) cu_cp_async4(slot + T::BN * 40 + r * 4, job.xs + xr * KT + t, true);
    };
    for (int t = 0; t < R - 1; t++) { /* a group a tile, empty ones too: the wait below counts groups */
        if (t < KT) issue(t);
        cu_cp_commit();
    }
    for (int t = 0; t < KT; t++) {
        if (t + R - 1 < KT) issue(t + R - 1); /* into the slot tile t - 1 left */
        cu_cp_commit();
        cu_cp_wait<R - 1>(); /* tile t's copies have landed */
        const int s = t % T::STAGES;
        if (t >= T::STAGES) wg_bar_wait(cu_smem_addr(&empty[s]), (uint32_t)((t / T::STAGES - 1) & 1));
        const uint32_t bar = cu_smem_addr(&full[s]), st = base + (uint32_t)s * T::STAGE_BYTES;
        if (r == 0) {
            wg_bar_expect(bar, 2 * T::X_BYTES);
            wg_tma_load(st, &job.x[0], t * WG_BK, row0, bar);
            wg_tma_load(st + T::X_BYTES, &job.x[1], t * WG_BK, row0, bar);
        }
        const uint32_t slot = raw + (uint32_t)((t % R) * T::RAW_SLOT), wt = st + 2 * T::X_BYTES; /* the weight tile */
        const uint32_t par = st + T::PAR;
        float sc = 0.0f, bi = 0.0f;
        if (wrow) {
            const int64_t g = o * gpr + (int64_t)t * WG_BK / q.group;
            sc = wq_sb_value(wq_lds32(slot + T::BN * 32 + r * 4), q.sb_fmt, g);
            bi = wq_sb_value(wq_lds32(slot + T::BN * 36 + r * 4), q.sb_fmt, g);
            const uint4 u0 = wq_lds128(slot + r * 32), u1 = wq_lds128(slot + r * 32 + 16);
            const uint32_t w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
            for (int i = 0; i < 8; i++) wq_sts128(wt + cu_swz<WG_BK>(r, i), wq_codes_bf16(w[i]));
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) wq_sts128(wt + cu_swz<WG_BK>(r, i), make_uint4(0, 0, 0, 0));
        }
        wq_sts32(par + r * 4, __float_as_uint(sc));
        wq_sts32(par + T::BN * 4 + r * 4, __float_as_uint(bi));
        if (r < T::BM) wq_sts32(par + T::BN * 8 + r * 4, xrow ? wq_lds32(slot + T::BN * 40 + r * 4) : 0u);
#if WG_ON
        cu_fence_proxy_async(); /* the stores above, before wgmma reads them */
#endif
        wg_bar_arrive(bar);
    }
}

/* y += s P + b X for the consumer's accumulators p of the tile whose stage is st (module comment): d[4 j + v] is row
 * 16 warp + lane / 4 (+ 8 for v >= 2) and output 8 j + 2 (lane % 4) (+ 1 for odd v) of the consumer's 64 x 128. */
template <class T> __device__ __forceinline__ void wq_fold(float (&y)[64], const float (&p)[64], uint32_t st, int c,
                                                           int warp, int lane) {
    const uint32_t par = st + T::PAR;
    const int rr = c * 64 + warp * 16 + (lane >> 2);
    const float x0 = __uint_as_float(wq_lds32(par + T::BN * 8 + rr * 4));
    const float x1 = __uint_as_float(wq_lds32(par + T::BN * 8 + (rr + 8) * 4));
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int col = j * 8 + 2 * (lane & 3);
        const float2 s = wq_lds64(par + col * 4), b = wq_lds64(par + T::BN * 4 + col * 4);
        y[4 * j] = fmaf(s.x, p[4 * j], fmaf(b.x, x0, y[4 * j]));
        y[4 * j + 1] = fmaf(s.y, p[4 * j + 1], fmaf(b.y, x0, y[4 * j + 1]));
        y[4 * j + 2] = fmaf(s.x, p[4 * j + 2], fmaf(b.x, x1, y[4 * j + 2]));
        y[4 * j + 3] = fmaf(s.y, p[4 * j + 3], fmaf(b.y, x1, y[4 * j + 3]));
    }
}

/* A consumer's tile t: its 8 k16 steps into p (x_hi's then x_lo's, a fresh sum), committed as a group. */
template <class T>
__device__ __forceinline__ void wq_issue(float (&p)[64], int t, uint32_t base, uint64_t *full, int c) {
    const int s = t % T::STAGES;
    const uint32_t st = base + (uint32_t)s * T::STAGE_BYTES, a = st + c * 64 * 128, b = st + 2 * T::X_BYTES;
    wg_bar_wait(cu_smem_addr(&full[s]), (uint32_t)((t / T::STAGES) & 1));
    wg_fence();
#pragma unroll
    for (int k = 0; k < WG_BK / 16; k++) wg_mma(p, wg_desc(a + 32 * k), wg_desc(b + 32 * k), k > 0);
#pragma unroll
    for (int k = 0; k < WG_BK / 16; k++) wg_mma(p, wg_desc(a + T::X_BYTES + 32 * k), wg_desc(b + 32 * k));
    wg_commit();
}
/* Tile t's sums p (done) folded into y, and its stage released. */
template <class T> __device__ __forceinline__ void wq_retire(float (&y)[64], float (&p)[64], int t, uint32_t base,
                                                             uint64_t *empty, int c, int warp, int lane) {
    const int s = t % T::STAGES;
    wq_fold<T>(y, p, base + (uint32_t)s * T::STAGE_BYTES, c, warp, lane);
    if (lane == 0) wg_bar_arrive(cu_smem_addr(&empty[s]));
}

/* grid (ceil(m / T::BM) * nb0[count]), T::THREADS threads, T::SMEM bytes of dynamic shared memory. K % 64 == 0. */
template <class T> __device__ __forceinline__ void wq_gemm_body(const wq_job &job, int m, int K) {
    constexpr int CW = T::CW;
    extern __shared__ unsigned char wg_smem[];
    __shared__ __align__(8) uint64_t full[T::STAGES], empty[T::STAGES];
    const uint32_t base = (cu_smem_addr(wg_smem) + 1023u) & ~1023u;
    const int KT = K / WG_BK, wgi = threadIdx.x >> 7;
    int row0, wi, col0;
    wg_block_tile(m, T::BM, T::BN, job.nb0, job.count, &row0, &wi, &col0);
    if (threadIdx.x == 0) {
        for (int s = 0; s < T::STAGES; s++) {
            wg_bar_init(cu_smem_addr(&full[s]), 129); /* thread 0's expect_tx and the producer's 128 */
            wg_bar_init(cu_smem_addr(&empty[s]), 4 * CW);
        }
#if WG_ON
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
    }
    __syncthreads();
    if (wgi == 0) {
        if (CW == 2) wg_setmaxnreg_dec<56>();
        wq_produce<T>(job, m, K, row0, wi, col0, base, full, empty);
        return;
    }
    if (CW == 2) wg_setmaxnreg_inc<224>(); /* 128 x 56 + 256 x 224 */
    const int c = wgi - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float y[64], p0[64], p1[64];
#pragma unroll
    for (int i = 0; i < 64; i++) y[i] = 0.0f;
    /* two tiles a turn: tile t's steps run while tile t - 1's sums are folded (wait<1>: all but the last group) */
    wq_issue<T>(p0, 0, base, full, c);
    int t = 1;
    for (; t + 1 < KT; t += 2) {
        wq_issue<T>(p1, t, base, full, c);
        wg_wait<1>();
        wg_pin(p0);
        wq_retire<T>(y, p0, t - 1, base, empty, c, warp, lane);
        wq_issue<T>(p0, t + 1, base, full, c);
        wg_wait<1>();
        wg_pin(p1);
        wq_retire<T>(y, p1, t, base, empty, c, warp, lane);
    }
    if (t < KT) { /* KT even: tiles KT - 2 (in p0) and KT - 1 */
        wq_issue<T>(p1, t, base, full, c);
        wg_wait<1>();
        wg_pin(p0);
        wq_retire<T>(y, p0, t - 1, base, empty, c, warp, lane);
        wg_wait<0>();
        wg_pin(p1);
        wq_retire<T>(y, p1, t, base, empty, c, warp, lane);
    } else { /* KT odd: tile KT - 1, in p0 */
        wg_wait<0>();
        wg_pin(p0);
        wq_retire<T>(y, p0, t - 1, base, empty, c, warp, lane);
    }
    const int64_t r = row0 + c * 64 + warp * 16 + (lane >> 2);
    const int n = job.n[wi];
    float *__restrict__ out = job.y[wi];
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int64_t col = col0 + j * 8 + 2 * (lane & 3);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t rr = r + 8 * h;
            const float v0 = y[4 * j + 2 * h], v1 = y[4 * j + 2 * h + 1];
            if (rr >= m) continue;
            if (col + 1 < n && !(n & 1)) {
                *(float2 *)(out + rr * n + col) = make_float2(v0, v1);
                continue;
            }
            if (col < n) out[rr * n + col] = v0;
            if (col + 1 < n) out[rr * n + col + 1] = v1;
        }
    }
}

template <class T>
__global__ void __launch_bounds__(T::THREADS, 1) wq_gemm_kernel(const __grid_constant__ wq_job job, int m, int K) {
    wq_gemm_body<T>(job, m, K);
}

/* One launch: weights q[i] (n[i] x K) that share the rows x = x_hi + x_lo (m x K, bf16, 16-byte aligned) and their
 * tile sums xs (m x K / 64), y[i] (m x n[i], f32) = x . w_i^T in the arithmetic above. */
struct wq_args {
    const __nv_bfloat16 *x_hi, *x_lo;
    const float *xs;
    int count;
    wg_q4 q[WG_WEIGHTS];
    float *y[WG_WEIGHTS];
    int n[WG_WEIGHTS];
};

template <class T> static inline cudaError_t wq_launch(const wq_args *a, int m, int K, cudaStream_t st) {
    static int attr; /* racing first callers set the same value */
    if (!attr) {
        const cudaError_t e =
            cudaFuncSetAttribute(wq_gemm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM);
        if (e != cudaSuccess) return e;
        attr = 1;
    }
    wq_job job;
    memset(&job, 0, sizeof job);
    cudaError_t e = wg_map(&job.x[0], a->x_hi, m, K, T::BM);
    if (e == cudaSuccess) e = wg_map(&job.x[1], a->x_lo, m, K, T::BM);
    if (e != cudaSuccess) return e;
    job.xs = a->xs, job.count = a->count;
    for (int i = 0; i < a->count; i++) {
        if (!wg_q4_ok(&a->q[i], K)) return cudaErrorInvalidValue;
        job.q[i] = a->q[i], job.y[i] = a->y[i], job.n[i] = a->n[i];
        job.nb0[i + 1] = job.nb0[i] + (a->n[i] + T::BN - 1) / T::BN;
    }
    const int64_t blocks = (int64_t)((m + T::BM - 1) / T::BM) * job.nb0[a->count];
    wq_gemm_kernel<T><<<(unsigned)blocks, T::THREADS, T::SMEM, st>>>(job, m, K);
    return cudaGetLastError();
}

/* The large tile when its blocks fill at least WG_LARGE_FILL / 8 of the SMs (as wg_pick_tile), else the small one:
 * the same bits either way. QUILL_WG_TILE=large or small forces one. */
static inline cudaError_t wq_gemm(const wq_args *a, int m, int K, cudaStream_t st) {
    if (a->count < 1 || a->count > WG_WEIGHTS || K % WG_BK) return cudaErrorInvalidValue;
    int64_t nb = 0;
    for (int i = 0; i < a->count; i++) nb += (a->n[i] + wq_large::BN - 1) / wq_large::BN;
    if (wg_small_for((m + wq_large::BM - 1) / wq_large::BM * nb)) return wq_launch<wq_small>(a, m, K, st);
    return wq_launch<wq_large>(a, m, K, st);
}

#endif
