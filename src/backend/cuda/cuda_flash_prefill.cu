/* cuda_flash_prefill.cu: causal GQA attention for prompt rows (seqs with chunked = 1) on tensor cores,
 * FlashAttention-2 style, for head dims 64, 128 and 256.
 *
 * Work: a CTA of 8 warps per (query tile, kv head). The tile packs FA_BM = 128 rows: P = 128 / G
 * consecutive positions times the G = n_q / n_kv query heads that share the kv head (packed row
 * r = t * G + g: position t of the tile, head kvh * G + g), so each K/V tile is read once for all of
 * them. Warp w owns packed rows 16w..16w+15 and holds their output (16 x dim f32) in registers.
 * Keys go in tiles of FA_BN = 32 positions aligned to absolute multiples of 32, in increasing order
 * from position 0, through shared memory: the cache rows (f32, bf16 or q8) are loaded into registers one stage
 * ahead (V while S = Q K^T runs, the next K while O += P V runs), converted to bf16 (and, in split
 * mode, the bf16 remainder), and stored swizzled for ldmatrix. S and P V are mma.sync m16n8k16 bf16
 * with f32 accumulators; the softmax is online, in f32, per row, scores in log2 units.
 *
 * Precision (QUILL_PREFILL_PRECISION, read once): "bf16" rounds q, k, p, v to bf16; "split" (the
 * default) writes each as hi = bf16(x), lo = bf16(x - hi) and sums hi*hi + lo*hi + hi*lo per product
 * (about 1e-5 relative against the f32 CPU reference).
 *
 * EXACTNESS. A row's arithmetic depends only on its query, its position and its stream's cache: the
 * key tiles it sees are the same absolute tiles in the same order whatever call or query tile it
 * lands in, every product is an mma element (row-independent), and every softmax step is written
 * with explicit round-to-nearest intrinsics (no compiler contraction choices that could differ
 * between the two rows a lane holds). A tile past a row's own position (the tile holds later rows)
 * is fully masked for that row: its scores are -inf, so the max is unchanged, the correction is
 * exactly 1 (taken as 1 when the max did not move, never computed), p = exp2(-inf) = 0, and the
 * products 0 * v add +-0 to the accumulators, which leaves every non-zero value as it was; the final
 * "+ 0.0f" makes a zero's sign independent of those visits too. A warp skips a tile that is past all
 * of its rows, which is the same identity. Key positions at or past the call's end are never read
 * (zeros in shared memory) and always masked. So EXACT(chunk) and EXACT(batch) hold for any cut.
 *
 * Shared memory: Q 128 x dim bf16 (x2 in split mode) + K and V 32 x dim (x2): 192 KiB for dim 256
 * in split mode, 96 KiB in bf16 mode; where the device offers less, cuda_flash_supported says no and
 * the caller keeps the per-row kernel. Grid: n_kv x ceil(n_rows / P) CTAs, the longest (last) query
 * tiles first; offsets are int64. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_flash_prefill.h"
#include "cuda_kv.cuh"
#include "cuda_mma.cuh"

#define FA_BM 128 /* packed query rows per CTA */
#define FA_BN 32  /* key positions per tile */
#define FA_BN_DB 64 /* the same, double-buffered form */
#define FA_THREADS 256

__device__ __forceinline__ float fa_exp2(float x) { /* exp2(-inf) = 0 */
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Stores 8 floats (a, b) as bf16 chunk cc of row r of hi (and their remainders in lo). */
template <int D, bool SPLIT>
__device__ __forceinline__ void fa_store8(unsigned char *hi, unsigned char *lo, int r, int cc, float4 a, float4 b) {
    uint4 h;
    h.x = cu_pack_bf16x2(a.x, a.y);
    h.y = cu_pack_bf16x2(a.z, a.w);
    h.z = cu_pack_bf16x2(b.x, b.y);
    h.w = cu_pack_bf16x2(b.z, b.w);
    const uint32_t o = cu_swz<D>(r, cc);
    *(uint4 *)(hi + o) = h;
    if (SPLIT) {
        uint4 l;
        l.x = cu_pack_bf16x2_lo(a.x, a.y, h.x);
        l.y = cu_pack_bf16x2_lo(a.z, a.w, h.y);
        l.z = cu_pack_bf16x2_lo(b.x, b.y, h.z);
        l.w = cu_pack_bf16x2_lo(b.z, b.w, h.w);
        *(uint4 *)(lo + o) = l;
    }
}

/* Loads this thread's chunks of the key tile at key0 (positions >= end read as zeros) as f32. */
template <int D, typename T>
__device__ __forceinline__ void fa_load_tile(const T *__restrict__ base, int key0, int end, int n_kv, int kvh,
                                             float4 *st) {
    constexpr int CH = D / 8, CHT = FA_BN * CH / FA_THREADS;
#pragma unroll
    for (int i = 0; i < CHT; i++) {
        const int c = threadIdx.x + FA_THREADS * i, r = c / CH, cc = c % CH, key = key0 + r;
        if (key < end) {
            const T *row = base + key * kv_stride<T>(n_kv, D);
            float e[8];
            kv_get8(row + kvh * D + cc * 8, kv_scale(row, n_kv, D, kvh), e);
            st[2 * i] = make_float4(e[0], e[1], e[2], e[3]);
            st[2 * i + 1] = make_float4(e[4], e[5], e[6], e[7]);
        } else {
            st[2 * i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            st[2 * i + 1] = st[2 * i];
        }
    }
}

template <int D, bool SPLIT>
__device__ __forceinline__ void fa_store_tile(unsigned char *hi, unsigned char *lo, const float4 *st) {
    constexpr int CH = D / 8, CHT = FA_BN * CH / FA_THREADS;
#pragma unroll
    for (int i = 0; i < CHT; i++) {
        const int c = threadIdx.x + FA_THREADS * i;
        fa_store8<D, SPLIT>(hi, lo, c / CH, c % CH, st[2 * i], st[2 * i + 1]);
    }
}

/* Key tile width: FA_BN, or FA_BN_DB for the double-buffered form. */
template <bool DB> struct fa_bn { static constexpr int BN = DB ? FA_BN_DB : FA_BN; };

/* DB (bf16 mode on a bf16 cache, where its shared memory fits): the key tiles come by cp.async straight into
 * two buffers (the cache's bits are the tile's: nothing to convert), one barrier per tile with the next
 * tile's copies in flight, and tiles of FA_BN_DB keys (no register staging leaves room for the wider S).
 * Otherwise the rows go through registers (converted; in split mode also the remainders), one buffer. */
template <int D, bool SPLIT, typename T, bool DB>
__global__ void __launch_bounds__(FA_THREADS, 1)
flash_prefill_kernel(const float *__restrict__ q, int row0, int n_rows, int pos0, const T *__restrict__ kc,
                     const T *__restrict__ vc, int n_q, int n_kv, int G, int P, int n_qt, float sl2,
                     float *__restrict__ out) {
    static_assert(!DB || (!SPLIT && sizeof(T) == 2), "the double-buffered form copies bf16 rows as they are");
    constexpr int BN = fa_bn<DB>::BN;
    constexpr int CH = D / 8, CHT = FA_BN * CH / FA_THREADS, NT = D / 8, SN = BN / 8;
    constexpr int QB = FA_BM * D * 2, KB = BN * D * 2, PARTS = SPLIT ? 2 : 1;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    unsigned char *sQh = fa_smem, *sQl = fa_smem + QB;
    unsigned char *sKh = fa_smem + PARTS * QB, *sKl = sKh + KB;
    unsigned char *sVh = sKh + PARTS * KB, *sVl = sVh + KB;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kvh = (int)(blockIdx.x % (unsigned)n_kv);
    const int qt = n_qt - 1 - (int)(blockIdx.x / (unsigned)n_kv); /* the longest tiles first */
    const int t0 = qt * P, n_pos = min(P, n_rows - t0), n_packed = n_pos * G;
    const int end = pos0 + n_rows;                  /* keys < end exist */
    const int n_kt = (pos0 + t0 + n_pos - 1) / BN + 1; /* tiles up to the CTA's last row */

    /* The Q tile, zeros past the packed rows in use. */
    for (int c = tid; c < FA_BM * CH; c += FA_THREADS) {
        const int r = c / CH, cc = c % CH;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
        if (r < n_packed) {
            const float4 *p = (const float4 *)(q + ((int64_t)(row0 + t0 + r / G) * n_q + kvh * G + r % G) * D + cc * 8);
            a = __ldg(p);
            b = __ldg(p + 1);
        }
        fa_store8<D, SPLIT>(sQh, sQl, r, cc, a, b);
    }

    /* This lane's two rows (ra = fragment rows 0..7, rb = 8..15) and the warp's last position. */
    const int ra = warp * 16 + (lane >> 2), rb = ra + 8;
    const int pos_a = ra < n_packed ? pos0 + t0 + ra / G : INT_MAX; /* unused rows: unmasked, dropped */
    const int pos_b = rb < n_packed ? pos0 + t0 + rb / G : INT_MAX;
    const int w_last = warp * 16 < n_packed ? pos0 + t0 + (min(warp * 16 + 15, n_packed - 1)) / G : -1;

    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

    /* DB: tile jt's K and V into buffer b (K at sKh + 2 b KB, V after it), zeros at keys >= end */
    auto issue = [&](int jt, int b) {
        unsigned char *kb = sKh + 2 * b * KB;
#pragma unroll
        for (int i = 0; i < BN * CH / FA_THREADS; i++) {
            const int c = tid + FA_THREADS * i, r = c / CH, cc = c % CH, key = jt * BN + r;
            const bool ok = key < end;
            const int64_t off = ((int64_t)(ok ? key : 0) * n_kv + kvh) * D + cc * 8;
            const uint32_t o = cu_swz<D>(r, cc);
            cu_cp_async16(cu_smem_addr(kb) + o, kc + off, ok);
            cu_cp_async16(cu_smem_addr(kb + KB) + o, vc + off, ok);
        }
        cu_cp_commit();
    };
    float4 st[DB ? 1 : 2 * CHT];
    if constexpr (DB) issue(0, 0);
    else fa_load_tile<D>(kc, 0, end, n_kv, kvh, st);
    for (int j = 0; j < n_kt; j++) {
        const int key0 = j * BN;
        const unsigned char *kb = sKh, *vb = sVh;
        if constexpr (DB) {
            kb = sKh + 2 * (j & 1) * KB, vb = kb + KB;
            cu_cp_wait<0>();
            __syncthreads(); /* tile j (and Q) visible; every warp is past tile j - 1, whose buffer is refilled */
            if (j + 1 < n_kt) issue(j + 1, (j + 1) & 1);
        } else {
            fa_store_tile<D, SPLIT>(sKh, sKl, st);
            fa_load_tile<D>(vc, key0, end, n_kv, kvh, st);
            __syncthreads(); /* K tile (and Q) visible; every warp is past the last P V */
        }
        const bool active = key0 <= w_last;
        uint32_t ph[BN / 16][4], pl[BN / 16][4];
        if (active) {
            float s[SN][4];
#pragma unroll
            for (int n = 0; n < SN; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                uint32_t qh[4], ql[4];
                const uint32_t qo = cu_swz<D>(warp * 16 + (lane & 15), 2 * ks + (lane >> 4));
                cu_ldsm_x4(cu_smem_addr(sQh) + qo, qh[0], qh[1], qh[2], qh[3]);
                if (SPLIT) cu_ldsm_x4(cu_smem_addr(sQl) + qo, ql[0], ql[1], ql[2], ql[3]);
#pragma unroll
                for (int np = 0; np < BN / 16; np++) {
                    const uint32_t ko =
                        cu_swz<D>(16 * np + ((lane >> 4) << 3) + (lane & 7), 2 * ks + ((lane >> 3) & 1));
                    uint32_t k0, k1, k2, k3;
                    cu_ldsm_x4(cu_smem_addr(kb) + ko, k0, k1, k2, k3);
                    cu_mma_bf16(s[2 * np], qh, k0, k1);
                    cu_mma_bf16(s[2 * np + 1], qh, k2, k3);
                    if (SPLIT) {
                        uint32_t x0, x1, x2, x3;
                        cu_ldsm_x4(cu_smem_addr(sKl) + ko, x0, x1, x2, x3);
                        cu_mma_bf16(s[2 * np], ql, k0, k1);
                        cu_mma_bf16(s[2 * np + 1], ql, k2, k3);
                        cu_mma_bf16(s[2 * np], qh, x0, x1);
                        cu_mma_bf16(s[2 * np + 1], qh, x2, x3);
                    }
                }
            }
            /* scores in log2 units, masked past each row's position */
            float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
            for (int n = 0; n < SN; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int kp = key0 + n * 8 + 2 * (lane & 3) + e;
                    s[n][e] = kp <= pos_a ? __fmul_rn(s[n][e], sl2) : -INFINITY;
                    s[n][2 + e] = kp <= pos_b ? __fmul_rn(s[n][2 + e], sl2) : -INFINITY;
                    mx_a = fmaxf(mx_a, s[n][e]);
                    mx_b = fmaxf(mx_b, s[n][2 + e]);
                }
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
            const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
            const float c_a = mn_a == m_a ? 1.0f : fa_exp2(__fsub_rn(m_a, mn_a));
            const float c_b = mn_b == m_b ? 1.0f : fa_exp2(__fsub_rn(m_b, mn_b));
            m_a = mn_a;
            m_b = mn_b;
            float rs_a = 0.0f, rs_b = 0.0f;
#pragma unroll
            for (int n = 0; n < SN; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    s[n][e] = fa_exp2(__fsub_rn(s[n][e], mn_a));
                    s[n][2 + e] = fa_exp2(__fsub_rn(s[n][2 + e], mn_b));
                    rs_a = __fadd_rn(rs_a, s[n][e]);
                    rs_b = __fadd_rn(rs_b, s[n][2 + e]);
                }
            l_a = __fadd_rn(__fmul_rn(l_a, c_a), rs_a);
            l_b = __fadd_rn(__fmul_rn(l_b, c_b), rs_b);
            if (!__all_sync(0xffffffffu, c_a == 1.0f && c_b == 1.0f)) { /* x * 1 is x: skipping is exact */
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    o[n][0] = __fmul_rn(o[n][0], c_a);
                    o[n][1] = __fmul_rn(o[n][1], c_a);
                    o[n][2] = __fmul_rn(o[n][2], c_b);
                    o[n][3] = __fmul_rn(o[n][3], c_b);
                }
            }
            /* P as A fragments (C layout of key n-tiles 2kk, 2kk+1 = A layout of k-step kk) */
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                ph[kk][0] = cu_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
                ph[kk][1] = cu_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
                ph[kk][2] = cu_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                ph[kk][3] = cu_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
                if (SPLIT) {
                    pl[kk][0] = cu_pack_bf16x2_lo(s[2 * kk][0], s[2 * kk][1], ph[kk][0]);
                    pl[kk][1] = cu_pack_bf16x2_lo(s[2 * kk][2], s[2 * kk][3], ph[kk][1]);
                    pl[kk][2] = cu_pack_bf16x2_lo(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[kk][2]);
                    pl[kk][3] = cu_pack_bf16x2_lo(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[kk][3]);
                }
            }
        }
        if constexpr (!DB) {
            fa_store_tile<D, SPLIT>(sVh, sVl, st); /* every warp passed the barrier after its last P V */
            if (j + 1 < n_kt) fa_load_tile<D>(kc, key0 + FA_BN, end, n_kv, kvh, st);
            __syncthreads(); /* V tile visible; every warp is done with the K tile */
        }
        if (active) {
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    const uint32_t vo = cu_swz<D>(16 * kk + (lane & 15), 2 * dp + (lane >> 4));
                    uint32_t v0, v1, v2, v3;
                    cu_ldsm_x4_t(cu_smem_addr(vb) + vo, v0, v1, v2, v3);
                    cu_mma_bf16(o[2 * dp], ph[kk], v0, v1);
                    cu_mma_bf16(o[2 * dp + 1], ph[kk], v2, v3);
                    if (SPLIT) {
                        uint32_t x0, x1, x2, x3;
                        cu_ldsm_x4_t(cu_smem_addr(sVl) + vo, x0, x1, x2, x3);
                        cu_mma_bf16(o[2 * dp], pl[kk], v0, v1);
                        cu_mma_bf16(o[2 * dp + 1], pl[kk], v2, v3);
                        cu_mma_bf16(o[2 * dp], ph[kk], x0, x1);
                        cu_mma_bf16(o[2 * dp + 1], ph[kk], x2, x3);
                    }
                }
        }
    }

    /* row sums over the quad (the same bits in every lane), then out = o / l (+ 0 drops -0) */
    l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, 1));
    l_a = __fadd_rn(l_a, __shfl_xor_sync(0xffffffffu, l_a, 2));
    l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, 1));
    l_b = __fadd_rn(l_b, __shfl_xor_sync(0xffffffffu, l_b, 2));
    const float inv_a = __fdiv_rn(1.0f, l_a), inv_b = __fdiv_rn(1.0f, l_b);
    const int col = 2 * (lane & 3);
    if (ra < n_packed) {
        float *dst = out + ((int64_t)(row0 + t0 + ra / G) * n_q + kvh * G + ra % G) * D + col;
#pragma unroll
        for (int n = 0; n < NT; n++)
            *(float2 *)(dst + n * 8) = make_float2(__fadd_rn(__fmul_rn(o[n][0], inv_a), 0.0f),
                                                   __fadd_rn(__fmul_rn(o[n][1], inv_a), 0.0f));
    }
    if (rb < n_packed) {
        float *dst = out + ((int64_t)(row0 + t0 + rb / G) * n_q + kvh * G + rb % G) * D + col;
#pragma unroll
        for (int n = 0; n < NT; n++)
            *(float2 *)(dst + n * 8) = make_float2(__fadd_rn(__fmul_rn(o[n][2], inv_b), 0.0f),
                                                   __fadd_rn(__fmul_rn(o[n][3], inv_b), 0.0f));
    }
}

static size_t fa_smem_bytes(int dim, int precision, bool db) {
    const size_t parts = precision == FLASH_SPLIT ? 2 : 1;
    return parts * (size_t)(FA_BM + (db ? 4 * FA_BN_DB : 2 * FA_BN)) * (size_t)dim * 2;
}

extern "C" int cuda_flash_precision(void) {
    int bf16 = 0; /* a bad value: split here; the prompt's first matmul has already failed on it */
    if (cu_prefill_precision_bf16(&bf16) != Q_OK) bf16 = 0;
    return bf16 ? FLASH_BF16 : FLASH_SPLIT;
}

/* The device's opt-in shared memory per block (read once). */
static size_t fa_optin(void) {
    static int optin = -1;
    if (optin < 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
            v = 0;
        optin = v;
    }
    return (size_t)optin;
}

extern "C" int cuda_flash_supported(int n_q, int n_kv, int dim) {
    if (n_kv <= 0 || n_q % n_kv || n_q / n_kv > FA_BM || (dim != 64 && dim != 128 && dim != 256)) return 0;
    return fa_smem_bytes(dim, cuda_flash_precision(), false) <= fa_optin();
}

template <int D, bool SPLIT, typename T, bool DB>
static qstatus fa_run(qbackend *be, const float *q, int row0, int n_rows, int pos0, const void *kc, const void *vc,
                      int n_q, int n_kv, float scale, float *out) {
    const size_t smem = fa_smem_bytes(D, SPLIT ? FLASH_SPLIT : FLASH_BF16, DB);
    /* every call (per device, cheap): more than 48 KiB of dynamic shared memory needs the opt-in */
    CU_TRY(cudaFuncSetAttribute(flash_prefill_kernel<D, SPLIT, T, DB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)smem),
           "flash prefill attention: shared memory");
    const int G = n_q / n_kv, P = FA_BM / G, n_qt = (n_rows + P - 1) / P;
    const int64_t blocks = (int64_t)n_qt * n_kv;
    if (blocks > INT_MAX) return q_fail(Q_EINVAL, "flash prefill attention: %d rows", n_rows);
    const float sl2 = scale * 1.4426950408889634f; /* scores in log2 units: exp(x) = exp2(x log2 e) */
    flash_prefill_kernel<D, SPLIT, T, DB><<<(unsigned)blocks, FA_THREADS, smem, cu_stream(be)>>>(
        q, row0, n_rows, pos0, (const T *)kc, (const T *)vc, n_q, n_kv, G, P, n_qt, sl2, out);
    CU_LAUNCHED("flash prefill attention");
    return Q_OK;
}

/* The double-buffered form where it applies and fits: a function of the precision, the cache type and the
 * device, the same for every call (EXACT(chunk), EXACT(batch)). */
template <int D, bool SPLIT, typename T>
static qstatus fa_launch(qbackend *be, const float *q, int row0, int n_rows, int pos0, const void *kc,
                         const void *vc, int n_q, int n_kv, float scale, float *out) {
    if constexpr (!SPLIT && sizeof(T) == 2)
        if (fa_smem_bytes(D, FLASH_BF16, true) <= fa_optin())
            return fa_run<D, SPLIT, T, true>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, scale, out);
    return fa_run<D, SPLIT, T, false>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, scale, out);
}

template <typename T>
static qstatus fa_dispatch(qbackend *be, const float *q, int row0, int n_rows, int pos0, const void *kc,
                           const void *vc, int n_q, int n_kv, int dim, float scale, bool split, float *out) {
    switch (dim) {
    case 64: return split ? fa_launch<64, true, T>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, scale, out)
                          : fa_launch<64, false, T>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, scale, out);
    case 128: return split ? fa_launch<128, true, T>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, scale, out)
                           : fa_launch<128, false, T>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, scale, out);
    case 256: return split ? fa_launch<256, true, T>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, scale, out)
                           : fa_launch<256, false, T>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, scale, out);
    default: return q_fail(Q_EUNSUPPORTED, "flash prefill attention: dim %d", dim);
    }
}

extern "C" qstatus cuda_flash_prefill(qbackend *be, const float *q, int row0, int n_rows, int pos0,
                                      const void *kc, const void *vc, qwfmt kv_fmt, int n_q, int n_kv, int dim,
                                      float scale, int precision, float *out) {
    if (n_rows <= 0) return Q_OK;
    if (n_kv <= 0 || n_q % n_kv || n_q / n_kv > FA_BM)
        return q_fail(Q_EINVAL, "flash prefill attention: heads %d/%d", n_q, n_kv);
    const bool split = precision == FLASH_SPLIT;
    if (kv_fmt == QW_BF16)
        return fa_dispatch<kv_bf16>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, dim, scale, split, out);
    if (kv_fmt == QW_Q8)
        return fa_dispatch<kv_q8>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, dim, scale, split, out);
    return fa_dispatch<float>(be, q, row0, n_rows, pos0, kc, vc, n_q, n_kv, dim, scale, split, out);
}
