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
 * Work. The output is computed transposed: a consumer warpgroup's 64 weight rows are wgmma's M (A, from registers)
 * and the block's NR rows of x its N (B, from shared memory by the tensor cores), so
 * - each consumer thread makes its own A fragments from the codes: byte cq of a code word is mma.sync's pair of k
 *   slots 2 cq, 2 cq + 1 (no shuffle, no producer conversion, no bf16 weight tile in shared memory);
 * - a weight row's scale and bias belong to an accumulator row: 4 values a thread a tile, from global memory;
 * - N can be as small as a short prompt (32 rows), with NACC tiles in flight at once, each in an accumulator of its
 *   own, so that a short prompt is not one chain of dependent steps.
 * One producer thread sends each K tile's x_hi and x_lo (NR rows, 128-byte swizzle), the block's code words (64 C
 * rows x 8 words) and the tile's X (NR floats of the transposed sums) by TMA into a stage, and sleeps between its
 * tries of a stage's barrier (wg_bar_wait_idle: its spinning took issue slots from the consumers). In the 128-row tile
 * the two consumers take turns at the tensor cores (wq_loop_pp). (The first form of this kernel, session 42, had x
 * as A and a producer warpgroup writing the codes as a bf16 tile: the same bits, 1.1-1.6x the time,
 * docs/performance.md.)
 *
 * EXACT(batch): an output is one block's sequence of tiles, each the same 8 k16 steps (m64nNk16 gives the same sums
 * whatever N: bench_wgmma checks every tile against the others) and the same fold, whatever m is or which tile
 * computes it, and rows never meet. */
#ifndef QUILL_CUDA_GEMM_WGQ_CUH
#define QUILL_CUDA_GEMM_WGQ_CUH

#include "cuda_gemm_wg.cuh"

/* A 4-bit affine weight (n x K) as the kernel takes it: codes K / 8 words a row (element 8 i + e in word i's bits
 * 4e..4e+3), 16-byte aligned; a scale and a bias per group of `group` values of a row (group % 64 == 0, K % group
 * == 0) in sb_fmt (QW_BF16, QW_F16 or QW_F32), 4-byte aligned. tiled: all three in cuda_q4_tiled.cuh's order (a
 * 16-row group's codes of a K tile are then one 512-byte run, the box's rows are groups). */
struct wg_q4 {
    const uint32_t *codes;
    const void *scales, *biases;
    int group, sb_fmt, tiled;
};
static inline int wg_q4_ok(const wg_q4 *q, int64_t K) {
    return q->group > 0 && q->group % WG_BK == 0 && K % q->group == 0 && ((uintptr_t)q->codes & 15) == 0 &&
           ((uintptr_t)q->scales & 3) == 0 && ((uintptr_t)q->biases & 3) == 0 &&
           (q->sb_fmt == QW_BF16 || q->sb_fmt == QW_F16 || q->sb_fmt == QW_F32);
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

/* C consumer warpgroups (64 weight rows each) x NR rows of x, NACC tiles in flight a consumer, S stages, B blocks an
 * SM, TU K tiles a turn of the loop; PP: the two consumers take turns at the tensor cores (wq_loop_pp). A stage:
 * x_hi and x_lo (NR x 64 bf16 each, swizzled), the codes (64 C rows x 32 bytes), X (NR floats). */
template <int C, int NR, int NACC, int S, int B, int TU = 8, int PP = 0> struct wq_tile {
    static constexpr int CW = C, BO = 64 * C, ROWS = NR, ACC = NACC, STAGES = S, THREADS = 128 * (1 + C);
    static constexpr int BLOCKS = B, TURN = TU, PING = PP;
    static constexpr int X_BYTES = NR * WG_BK * 2, Q_BYTES = BO * 32, XS_BYTES = NR * 4;
    static constexpr int TX = 2 * X_BYTES + Q_BYTES + XS_BYTES;
    static constexpr int STAGE_BYTES = (TX + 1023) / 1024 * 1024;
    static constexpr int SMEM = S * STAGE_BYTES + 1024;
    /* registers: the launch's share a thread, then the producer's 40 and the consumers' rest (setmaxnreg) */
    static constexpr int R0 = (65536 / (THREADS * B)) / 8 * 8 > 255 ? 248 : (65536 / (THREADS * B)) / 8 * 8;
    static constexpr int RC0 = (R0 * THREADS - 40 * 128) / (128 * C) / 8 * 8;
    static constexpr int RC = RC0 > 240 ? 240 : RC0;
    static_assert(S > NACC && NACC <= 4 && TU % NACC == 0, "a stage for the tile made while NACC are in flight");
    static_assert(!PP || (C == 2 && NACC == 1 && S > 2), "ping-pong: two consumers, one tile each in flight");
    static_assert(SMEM <= 227 * 1024 / B, "B blocks an SM");
};

struct wq_job {
    CUtensorMap x[2];          /* x_hi, x_lo: boxes of NR rows x 64 */
    CUtensorMap q[WG_WEIGHTS]; /* codes: uint32 n x K / 8, boxes of 64 C rows x 8 words */
    CUtensorMap xs;            /* the tile sums, transposed: float KT x m (pitch xs_pitch), boxes of NR x 1 */
    wg_q4 w[WG_WEIGHTS];
    float *y[WG_WEIGHTS];
    int n[WG_WEIGHTS], nb0[WG_WEIGHTS + 1];
    int count;
    int swizzle; /* tiled codes by wq_map_tiles' swizzled map (default; QUILL_WQ_SWIZZLE=0: the plain one) */
};

/* A code word's byte (bits 0..7 of u) as the bf16x2 of its two codes, the low nibble in the low half. */
__device__ __forceinline__ uint32_t wq_pair(uint32_t u) {
    const uint32_t v = (u & 0xFu) | ((u & 0xF0u) << 12) | 0x43004300u;
    const __nv_bfloat162 r = __hsub2(*(const __nv_bfloat162 *)&v, __floats2bfloat162_rn(128.0f, 128.0f));
    return *(const uint32_t *)&r;
}

/* The consumer thread's view: weight rows lo and lo + 8 of the block's code tile (warp 16 rows, lane / 4), byte
 * lane % 4 of each code word. */
struct wq_lane {
    int rlo, cq, lane;
    int64_t olo, ohi, gpr;
    bool vlo, vhi;
    const char *sc, *bi;
    int fmt, group, tiled, swizzle;
};

/* Row o's index of group gi's scale (bias), in the weight's order. */
__device__ __forceinline__ int64_t wq_sb_index(const wq_lane &L, int64_t o, int64_t gi) {
    return q4_sb_at(L.tiled, o, gi, L.gpr);
}
/* Tile t's words holding its rows' scales and biases (global, L1; 0 past n): w[0], w[1] row lo's, w[2], w[3] row
 * lo + 8's. wq_sb_conv reads the values out of them. */
__device__ __forceinline__ void wq_sb_load(uint32_t (&w)[4], int t, const wq_lane &L) {
    const int64_t gi = (int64_t)t * WG_BK / L.group;
#define WQ_SBW(p, o, ok) ((ok) ? __ldg((const uint32_t *)((p) + wq_sb_offset(L.fmt, wq_sb_index(L, o, gi)))) : 0u)
    w[0] = WQ_SBW(L.sc, L.olo, L.vlo), w[1] = WQ_SBW(L.bi, L.olo, L.vlo);
    w[2] = WQ_SBW(L.sc, L.ohi, L.vhi), w[3] = WQ_SBW(L.bi, L.ohi, L.vhi);
#undef WQ_SBW
}
__device__ __forceinline__ void wq_sb_conv(float (&sb)[4], const uint32_t (&w)[4], int t, const wq_lane &L) {
    const int64_t gi = (int64_t)t * WG_BK / L.group;
    const int64_t ilo = wq_sb_index(L, L.olo, gi), ihi = wq_sb_index(L, L.ohi, gi);
    sb[0] = wq_sb_value(w[0], L.fmt, ilo), sb[1] = wq_sb_value(w[1], L.fmt, ilo);
    sb[2] = wq_sb_value(w[2], L.fmt, ihi), sb[3] = wq_sb_value(w[3], L.fmt, ihi);
}

/* Tile t's A fragments (a[4 j + i]: k-step j's registers, mma.sync's order: rows lo, lo + 8 at slots 2 cq, then at
 * slots 8 + 2 cq) from its stage's codes. */
template <class T>
__device__ __forceinline__ void wq_frags(uint32_t (&a)[16], int t, uint32_t base, uint64_t *full, const wq_lane &L) {
    const int s = t % T::STAGES;
    wg_bar_wait(cu_smem_addr(&full[s]), (uint32_t)((t / T::STAGES) & 1));
    const uint32_t qt = base + (uint32_t)s * T::STAGE_BYTES + 2 * T::X_BYTES;
    uint32_t lo[8], hi[8];
    if (L.tiled) { /* the group's 512 bytes: rows lo and lo + 8 (lane / 4 = g) interleaved 8 bytes at a time */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint4 v = cu_lds128(q4t_stage_piece(qt, L.rlo, j, L.swizzle));
            lo[2 * j] = v.x, lo[2 * j + 1] = v.y, hi[2 * j] = v.z, hi[2 * j + 1] = v.w;
        }
    } else {
        const uint4 l0 = cu_lds128(qt + L.rlo * 32), l1 = cu_lds128(qt + L.rlo * 32 + 16);
        const uint4 h0 = cu_lds128(qt + (L.rlo + 8) * 32), h1 = cu_lds128(qt + (L.rlo + 8) * 32 + 16);
        lo[0] = l0.x, lo[1] = l0.y, lo[2] = l0.z, lo[3] = l0.w, lo[4] = l1.x, lo[5] = l1.y, lo[6] = l1.z, lo[7] = l1.w;
        hi[0] = h0.x, hi[1] = h0.y, hi[2] = h0.z, hi[3] = h0.w, hi[4] = h1.x, hi[5] = h1.y, hi[6] = h1.z, hi[7] = h1.w;
    }
    const int sh = 8 * L.cq;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        a[4 * j] = wq_pair(lo[2 * j] >> sh);
        a[4 * j + 1] = wq_pair(hi[2 * j] >> sh);
        a[4 * j + 2] = wq_pair(lo[2 * j + 1] >> sh);
        a[4 * j + 3] = wq_pair(hi[2 * j + 1] >> sh);
    }
}

/* Tile t's A fragments and its rows' scales and biases. */
template <class T>
__device__ __forceinline__ void wq_make(uint32_t (&a)[16], float (&sb)[4], int t, uint32_t base, uint64_t *full,
                                        const wq_lane &L) {
    uint32_t w[4];
    wq_sb_load(w, t, L);
    wq_sb_conv(sb, w, t, L);
    wq_frags<T>(a, t, base, full, L);
}

/* Tile t's 8 k16 steps into p (x_hi's then x_lo's, a fresh sum), committed as a group. */
template <class T>
__device__ __forceinline__ void wq_issue(float (&p)[T::ROWS / 2], const uint32_t (&a)[16], int t, uint32_t base) {
    const uint32_t xt = base + (uint32_t)(t % T::STAGES) * T::STAGE_BYTES;
    wg_fence();
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint32_t f[4] = {a[4 * j], a[4 * j + 1], a[4 * j + 2], a[4 * j + 3]};
        wg_mma_ra<T::ROWS>(p, f, wg_desc(xt + 32 * j), j > 0);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint32_t f[4] = {a[4 * j], a[4 * j + 1], a[4 * j + 2], a[4 * j + 3]};
        wg_mma_ra<T::ROWS>(p, f, wg_desc(xt + T::X_BYTES + 32 * j), 1);
    }
    wg_commit();
}

/* y += s P + b X for tile t's sums p (done); then its stage is released. d[4 j + v] is weight row lo (+ 8 for v >=
 * 2) and x row 8 j + 2 cq (+ 1 for odd v). */
template <class T>
__device__ __forceinline__ void wq_fold(float (&y)[T::ROWS / 2], const float (&p)[T::ROWS / 2], const float (&sb)[4],
                                        int t, uint32_t base, uint64_t *empty, const wq_lane &L) {
    const int s = t % T::STAGES;
    const uint32_t xs = base + (uint32_t)s * T::STAGE_BYTES + 2 * T::X_BYTES + T::Q_BYTES;
#pragma unroll
    for (int j = 0; j < T::ROWS / 8; j++) {
        const float2 X = cu_lds64f(xs + (8 * j + 2 * L.cq) * 4);
        y[4 * j] = fmaf(sb[0], p[4 * j], fmaf(sb[1], X.x, y[4 * j]));
        y[4 * j + 1] = fmaf(sb[0], p[4 * j + 1], fmaf(sb[1], X.y, y[4 * j + 1]));
        y[4 * j + 2] = fmaf(sb[2], p[4 * j + 2], fmaf(sb[3], X.x, y[4 * j + 2]));
        y[4 * j + 3] = fmaf(sb[2], p[4 * j + 3], fmaf(sb[3], X.y, y[4 * j + 3]));
    }
    __syncwarp();
    if (L.lane == 0) wg_bar_arrive(cu_smem_addr(&empty[s]));
}

/* wgmma.wait_group with the count known once the caller's loop is unrolled. */
__device__ __forceinline__ void wq_wait(int n) {
    if (n <= 0) wg_wait<0>();
    else if (n == 1) wg_wait<1>();
    else if (n == 2) wg_wait<2>();
    else wg_wait<3>();
}

/* A consumer's K loop: y += every tile's fold. A turn takes U tiles (KT % U == 0: wq_launch), NA of them in flight
 * at once, each in an accumulator of its own, and leaves none in flight: ptxas cannot see across the loop's back edge
 * that the A registers and accumulators it carries are retired, and then serializes every wgmma (C7513 / C7514). */
template <class T>
__device__ __forceinline__ void wq_loop(float (&y)[T::ROWS / 2], int KT, uint32_t base, uint64_t *full,
                                        uint64_t *empty, const wq_lane &L) {
    constexpr int NA = T::ACC, U = T::TURN;
    float p[NA][T::ROWS / 2], sb[NA][4];
    uint32_t a[NA][16];
    for (int t0 = 0; t0 < KT; t0 += U) {
#pragma unroll
        for (int u = 0; u < U + NA - 1; u++) {
            if (u < U) {
                wq_make<T>(a[u % NA], sb[u % NA], t0 + u, base, full, L);
                wq_issue<T>(p[u % NA], a[u % NA], t0 + u, base);
            }
            const int f = u - (NA - 1); /* the tile folded now */
            if (f >= 0) {
                wq_wait(min(NA - 1, U - 1 - f));
                wg_pin(p[f % NA]);
                wq_fold<T>(y, p[f % NA], sb[f % NA], t0 + f, base, empty, L);
            }
        }
    }
}

/* The ping-pong form (T::PING: two consumers, one accumulator each). When both issue a tile's steps at once, both
 * tiles finish together and both consumers fold at once while the tensor cores idle (ncu, session 43). Here consumer
 * c issues tile t only after the other consumer has issued its tile t - 1 + c (named barriers 1 and 2; consumer 1
 * opens consumer 0's first turn), so the tensor cores run one consumer's steps while the other folds its last tile
 * and makes its next one's fragments. Same steps, same fold, same order: the same bits as wq_loop. */
template <class T>
__device__ __forceinline__ void wq_loop_pp(float (&y)[T::ROWS / 2], int KT, int c, uint32_t base, uint64_t *full,
                                           uint64_t *empty, const wq_lane &L) {
    constexpr int U = T::TURN;
    float p[T::ROWS / 2];
    uint32_t a[16], w[4];
    wq_sb_load(w, 0, L);
    if (c == 1) wg_named_arrive<1>(256);
    for (int t0 = 0; t0 < KT; t0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int t = t0 + u;
            uint32_t wn[4]; /* the next tile's scale and bias words, a tile ahead of their use: an L2 round trip */
            wq_sb_load(wn, t + 1 < KT ? t + 1 : t, L);
            wq_frags<T>(a, t, base, full, L);
            if (c == 0) wg_named_sync<1>(256);
            else wg_named_sync<2>(256);
            wq_issue<T>(p, a, t, base);
            if (c == 0) wg_named_arrive<2>(256);
            else if (t + 1 < KT) wg_named_arrive<1>(256); /* consumer 1's last one has no taker */
            float sb[4];
            wq_sb_conv(sb, w, t, L);
            wq_wait(0);
            wg_pin(p);
            wq_fold<T>(y, p, sb, t, base, empty, L);
#pragma unroll
            for (int i = 0; i < 4; i++) w[i] = wn[i];
        }
    }
}

/* grid (ceil(m / NR) * nb0[count]), T::THREADS threads, T::SMEM bytes of dynamic shared memory. K % 64 == 0. */
template <class T> __device__ __forceinline__ void wq_gemm_body(const wq_job &job, int m, int K) {
    constexpr int CW = T::CW, NR = T::ROWS;
    extern __shared__ unsigned char wg_smem[];
    __shared__ __align__(8) uint64_t full[T::STAGES], empty[T::STAGES];
    const uint32_t base = (cu_smem_addr(wg_smem) + 1023u) & ~1023u;
    const int KT = K / WG_BK, wgi = threadIdx.x >> 7;
    int row0, wi, col0;
    wg_block_tile(m, NR, T::BO, job.nb0, job.count, &row0, &wi, &col0);
    wg_stage_bars_init(full, empty, T::STAGES, 4 * CW);
    if (wgi == 0) { /* producer */
        if (T::RC > T::R0) wg_setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        for (int t = 0; t < KT; t++) {
            const int s = t % T::STAGES;
            if (t >= T::STAGES) wg_bar_wait_idle(cu_smem_addr(&empty[s]), (uint32_t)((t / T::STAGES - 1) & 1));
            const uint32_t bar = cu_smem_addr(&full[s]), st = base + (uint32_t)s * T::STAGE_BYTES;
            wg_bar_expect(bar, T::TX);
            wg_tma_load(st, &job.x[0], t * WG_BK, row0, bar);
            wg_tma_load(st + T::X_BYTES, &job.x[1], t * WG_BK, row0, bar);
            if (job.w[wi].tiled && job.swizzle)
                wg_tma_load_3d(st + 2 * T::X_BYTES, &job.q[wi], 0, 4 * t, col0 / 16, bar);
            else if (job.w[wi].tiled) wg_tma_load(st + 2 * T::X_BYTES, &job.q[wi], t * 128, col0 / 16, bar);
            else wg_tma_load(st + 2 * T::X_BYTES, &job.q[wi], t * 8, col0, bar);
            wg_tma_load(st + 2 * T::X_BYTES + T::Q_BYTES, &job.xs, row0, t, bar);
        }
        return;
    }
    if (T::RC > T::R0) wg_setmaxnreg_inc<T::RC>();
    const int c = wgi - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    wq_lane L;
    L.rlo = c * 64 + warp * 16 + (lane >> 2), L.cq = lane & 3, L.lane = lane;
    L.olo = col0 + L.rlo, L.ohi = L.olo + 8;
    const int n = job.n[wi];
    L.vlo = L.olo < n, L.vhi = L.ohi < n;
    L.sc = (const char *)job.w[wi].scales, L.bi = (const char *)job.w[wi].biases;
    L.fmt = job.w[wi].sb_fmt, L.group = job.w[wi].group, L.gpr = K / job.w[wi].group, L.tiled = job.w[wi].tiled;
    L.swizzle = job.swizzle;
    float y[NR / 2];
#pragma unroll
    for (int i = 0; i < NR / 2; i++) y[i] = 0.0f;
    if constexpr (T::PING) wq_loop_pp<T>(y, KT, c, base, full, empty, L);
    else wq_loop<T>(y, KT, base, full, empty, L);
    float *__restrict__ out = job.y[wi];
#pragma unroll
    for (int j = 0; j < NR / 8; j++) {
        const int64_t r = row0 + 8 * j + 2 * L.cq;
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const int64_t rr = r + (v & 1), o = v >= 2 ? L.ohi : L.olo;
            if (rr < m && o < n) out[rr * n + o] = y[4 * j + v];
        }
    }
}

template <class T>
__global__ void __launch_bounds__(T::THREADS, T::BLOCKS) wq_gemm_kernel(const __grid_constant__ wq_job job, int m,
                                                                       int K) {
    wq_gemm_body<T>(job, m, K);
}

/* One launch: weights q[i] (n[i] x K) that share the rows x = x_hi + x_lo (m x K, bf16, 16-byte aligned) and their
 * tile sums transposed, xs_t (K / 64 x m, xs_pitch floats a row: a multiple of 4, 16-byte aligned); y[i] (m x n[i],
 * f32) = x . w_i^T in the arithmetic above. */
struct wq_args {
    const __nv_bfloat16 *x_hi, *x_lo;
    const float *xs_t;
    int64_t xs_pitch;
    int count;
    wg_q4 q[WG_WEIGHTS];
    float *y[WG_WEIGHTS];
    int n[WG_WEIGHTS];
};

/* Tiled codes (groups of 16 rows, each a row of K / 64 runs of 512 bytes) as 128-byte rows in TMA's 128-byte swizzle:
 * a box of box_groups groups' 512 bytes of a K tile lands in the stage in the plain map's order, except that the
 * 16-byte piece p of each 128-byte row sits at p ^ (bits 7..9 of the row's shared address). Each of wq_frags's loads
 * then takes a warp's 8 pieces (4 lanes share one) from 8 different bank groups, one pass; in the plain map their
 * 64-byte stride puts them on 2, four passes. The values are the same. */
static inline cudaError_t wq_map_tiles(CUtensorMap *map, const uint32_t *codes, int64_t groups, int64_t K,
                                       int box_groups) {
    const cuuint64_t dims[3] = {32, (cuuint64_t)K / 16, (cuuint64_t)groups};
    const cuuint64_t strides[2] = {128, (cuuint64_t)K * 8};
    const cuuint32_t box[3] = {32, 4, (cuuint32_t)box_groups};
    return wg_map_nd(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, codes, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

template <class T> static inline cudaError_t wq_launch(const wq_args *a, int m, int K, cudaStream_t st) {
    static int attr; /* racing first callers set the same value */
    if (!attr) {
        const cudaError_t e =
            cudaFuncSetAttribute(wq_gemm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM);
        if (e != cudaSuccess) return e;
        attr = 1;
    }
    if (a->count < 1 || a->count > WG_WEIGHTS || K % (WG_BK * T::TURN) || a->xs_pitch < m || a->xs_pitch % 4)
        return cudaErrorInvalidValue;
    wq_job job;
    memset(&job, 0, sizeof job);
    cudaError_t e = wg_map(&job.x[0], a->x_hi, m, K, T::ROWS);
    if (e == cudaSuccess) e = wg_map(&job.x[1], a->x_lo, m, K, T::ROWS);
    if (e == cudaSuccess)
        e = wg_map_any(&job.xs, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a->xs_t, K / WG_BK, m, a->xs_pitch * 4, T::ROWS, 1,
                       CU_TENSOR_MAP_SWIZZLE_NONE);
    if (e != cudaSuccess) return e;
    job.count = a->count;
    static int swizzle = -1;
    job.swizzle = cu_env_int("QUILL_WQ_SWIZZLE", &swizzle, 1, 0, 1);
    for (int i = 0; i < a->count; i++) {
        if (!wg_q4_ok(&a->q[i], K)) return cudaErrorInvalidValue;
        if (a->q[i].tiled && job.swizzle)
            e = wq_map_tiles(&job.q[i], a->q[i].codes, q4t_rows(a->n[i]) / 16, K, T::BO / 16);
        else if (a->q[i].tiled) /* groups of 16 rows (padded), each a row of K / 64 runs of 512 bytes */
            e = wg_map_any(&job.q[i], CU_TENSOR_MAP_DATA_TYPE_UINT32, a->q[i].codes, q4t_rows(a->n[i]) / 16,
                           (int64_t)K * 2, (int64_t)K * 8, 128, T::BO / 16, CU_TENSOR_MAP_SWIZZLE_NONE);
        else
            e = wg_map_any(&job.q[i], CU_TENSOR_MAP_DATA_TYPE_UINT32, a->q[i].codes, a->n[i], K / 8, K / 2, 8, T::BO,
                           CU_TENSOR_MAP_SWIZZLE_NONE);
        if (e != cudaSuccess) return e;
        job.w[i] = a->q[i], job.y[i] = a->y[i], job.n[i] = a->n[i];
        job.nb0[i + 1] = job.nb0[i] + (a->n[i] + T::BO - 1) / T::BO;
    }
    const int64_t blocks = (int64_t)((m + T::ROWS - 1) / T::ROWS) * job.nb0[a->count];
    wq_gemm_kernel<T><<<(unsigned)blocks, T::THREADS, T::SMEM, st>>>(job, m, K);
    return cudaGetLastError();
}

/* The tiles (bench_wgmma's 4-bit table, sessions 43-44): 32 rows and 4 tiles in flight for a short prompt, 64 rows
 * and 2 where the 128-row tile's blocks would leave a third of the SMs idle, else 128 rows by 128 weight rows with
 * its consumers in ping-pong (2-7 % faster than in step at 2 tiles a turn; 5 % slower at 1); K not a multiple of 256
 * takes 128 x 128 a tile a turn, in step. Turns of 4, 4 and 2 tiles: 8 a turn was 2-20 % slower (the unrolled loop's
 * size). The same bits from each (the top comment), so the choice may follow m; QUILL_WQ_TILE=short|mid|long forces
 * one where K allows it (read once; the A/B and the sanitizer runs). */
typedef wq_tile<1, 32, 4, 6, 2, 4> wq_short;
typedef wq_tile<1, 64, 2, 5, 2, 4> wq_mid;
typedef wq_tile<2, 128, 1, 4, 1, 2, 1> wq_long;
typedef wq_tile<2, 128, 1, 4, 1, 1> wq_any;
static inline cudaError_t wq_gemm(const wq_args *a, int m, int K, cudaStream_t st) {
    static int force = -1; /* racing first callers store the same value */
    if (force < 0) {
        const char *v = getenv("QUILL_WQ_TILE");
        force = !v ? 0 : !strcmp(v, "short") ? 1 : !strcmp(v, "mid") ? 2 : !strcmp(v, "long") ? 3 : 0;
    }
    if (a->count < 1 || a->count > WG_WEIGHTS || K % WG_BK) return cudaErrorInvalidValue;
    if (K % (WG_BK * 4)) return wq_launch<wq_any>(a, m, K, st); /* 4: the short and mid tiles' turns */
    static_assert(wq_short::TURN == 4 && wq_mid::TURN == 4 && 4 % wq_long::TURN == 0, "the turns K must allow");
    int64_t nb = 0;
    for (int i = 0; i < a->count; i++) nb += (a->n[i] + wq_long::BO - 1) / wq_long::BO;
    int tile = force;
    if (!tile) {
        tile = m <= wq_short::ROWS ? 1 : 2;
        if (tile == 2 && (m + wq_long::ROWS - 1) / wq_long::ROWS * nb * 10 >= 7 * (int64_t)cu_sms()) tile = 3;
    }
    if (tile == 1) return wq_launch<wq_short>(a, m, K, st);
    if (tile == 2) return wq_launch<wq_mid>(a, m, K, st);
    return wq_launch<wq_long>(a, m, K, st);
}

#endif
