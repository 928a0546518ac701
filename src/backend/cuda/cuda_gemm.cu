/* cuda_gemm.cu: the prefill matmul (op matmul_prefill): y[n][n_out] = x[n][n_in] . W^T for prompt
 * rows, n from 1 to thousands, on the tensor cores: our wgmma kernel (cuda_gemm_wg.cuh) on Hopper, cuBLASLt
 * for the weights it does not take and on other GPUs.
 *
 * Numerics. Activations are f32 and the model's goldens hold logits to 1e-4 of transformers' fp32, so
 * x is not simply rounded to bf16. Default ("split", f32-class): x = x_hi + x_lo, both bf16 (x_hi =
 * bf16(x), x_lo = bf16(x - x_hi); x is kept to about 2^-17 relative), and
 *   bf16 W:   y = W.x_hi (+) W.x_lo                      (bf16 weights are exact in bf16)
 *   4-bit W:  w = scale*code + bias in f32 (rounded as weight_at rounds it), w = w_hi + w_lo (bf16),
 *             y = w_hi.x_hi (+) w_hi.x_lo (+) w_lo.x_hi  (the w_lo.x_lo term, ~2^-18, is dropped)
 * each product a bf16 tensor-core product with f32 accumulation. The wgmma kernel sums them in one
 * accumulator, smallest first (hi.lo, lo.hi, then hi.hi); cuBLASLt runs one GEMM per product, hi.hi first,
 * each next one added to y in the epilogue (beta = 1). QUILL_PREFILL_PRECISION=bf16 ("bf16" mode) rounds x
 * (and a 4-bit w) to bf16 once: one product, about 2^-9 relative per input (rel err ~3e-3 on a GEMM),
 * 1.5-2x faster; it is for benchmarks and users who accept that, not for the goldens.
 *
 * EXACT(batch), EXACT(chunk). A row's result must not depend on n. The wgmma kernel has that by construction
 * (each output is one block's accumulation over K in K order; rows never meet). cuBLASLt picks kernels by
 * the whole problem shape, so there the algorithm (kernel, tile, stages, cluster, swizzle) is chosen ONCE
 * per weight shape (n_out, n_in) and the same algorithm runs for every n: split-K 1 and no reduction scheme
 * (each output element is one CTA's accumulation over all of K, in K order), and it must pass
 * cublasLtMatmulAlgoCheck at every probe row count (1 .. 65536) before it is taken; cublasLtMatmulAlgoCheck
 * confirms it again for each new n and a refusal fails the call loudly rather than changing the
 * arithmetic. Candidates come from cublasLtMatmulAlgoGetHeuristic at a reference row count
 * (QUILL_GEMM_REF_M, default 512: the default prefill chunk) and, where that yields nothing, from an
 * explicit enumeration of the algorithm ids with plain configurations; ones that need no workspace at any
 * row count are preferred (a workspace can hold stream-K partials, whose split of K follows the tile count,
 * so it is not batch-invariant), and those run with no workspace at all. Only when no such algorithm
 * exists is one that needs workspace (within QUILL_GEMM_WS_MB, default 32) taken, marked as such in
 * cuda_prefill_gemm_describe (see shape_select in cuda_gemm_select.cu). The split and dequantization
 * pre-passes are elementwise.
 * That a fixed, non-split cuBLASLt kernel computes each element independently of n is what
 * tests/cuda/bench_gemm.sh and test_cuda_ops check on the device (bitwise); cuBLAS does not document it.
 *
 * Which kernel a weight takes is a property of the weight (and the build and device) alone: bf16 or 4-bit
 * affine (any group that is a multiple of 8), n_in % 8 == 0 and n_out % 4 == 0 take the tensor cores, the
 * wgmma kernel when wg_eligible (n_in % 64 == 0) on an sm_90a build and a compute 9.0 device (takes_wgmma),
 * else cuBLASLt; anything else (f32/f16, other bit widths, odd shapes) takes the SIMT tiled kernel below,
 * as does a shape for which neither the heuristic nor the enumeration finds a cuBLASLt algorithm that takes
 * the probe row counts (shape_select). QUILL_PREFILL_GEMM=cublaslt keeps every weight off the wgmma kernel
 * (the A/B), QUILL_PREFILL_GEMM=tiled sends every weight to the tiled kernel. matmul_prefill_multi (a block's
 * projections) splits x once and runs its weights in one wgmma launch when they all take it.
 *
 * cuBLASLt is loaded with dlopen on the first call that needs it (cuda_gemm_lt.cu; nothing loads it at
 * startup); the handle, workspace and bf16 scratch (x_hi/x_lo, and w_hi/w_lo for 4-bit weights, grown on
 * demand) belong to the backend and are freed by cu_gemm_free. Floors (H200, measured by cuBLAS
 * ~790 TFLOP/s bf16 dense): split costs two products for bf16 weights and three for 4-bit ones, plus
 * a dequantization pass over the 4-bit weight per call (reads 0.56 B, writes 4 B per weight).
 * In split mode 4-bit weights go from their codes instead (cuda_gemm_wgq.cuh: two products of the codes, folded per
 * K tile with the scale and bias; no pass, its own arithmetic: takes_fold), unless QUILL_PREFILL_DEQUANT=pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_gemm_lt.h"
#include "cuda_gemm_wgq.cuh"

/* ---------------------------------------------------------------------------------------------- */
/* The SIMT tiled kernel: formats cuBLASLt does not take here.
 * A block computes a TM x TN tile of y (rows x outputs) with 256 threads of 4 x 4 outputs each,
 * staging TK-wide slices of x and of the dequantized W in shared memory. Each output is one thread's
 * fma chain over k = 0, 1, ..., n_in - 1 in order, so a row's result does not depend on n or on its
 * place in the tile (EXACT(batch), EXACT(chunk)). Floor: f32 FMA rate. */
#define TM 64
#define TN 64
#define TK 16

__global__ void __launch_bounds__(256) matmul_tiled_kernel(const float *__restrict__ x, int n, qweight W,
                                                           float *__restrict__ y) {
    __shared__ float As[TK][TM + 4], Bs[TK][TN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t row0 = (int64_t)blockIdx.y * TM, col0 = (int64_t)blockIdx.x * TN;
    const int64_t K = W.n_in;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += TK) {
#pragma unroll
        for (int e = 0; e < 4; e++) { /* 1024 elements of each tile, 4 per thread */
            const int idx = tid + e * 256, kk = idx % TK, mm = idx / TK;
            const int64_t k = k0 + kk, r = row0 + mm, c = col0 + mm;
            As[kk][mm] = (r < n && k < K) ? x[r * K + k] : 0.0f;
            Bs[kk][mm] = (c < W.n_out && k < K) ? weight_at(W, c, k) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t r = row0 + ty * 4 + i;
        if (r >= n) break;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t c = col0 + tx * 4 + j;
            if (c < W.n_out) y[r * W.n_out + c] = acc[i][j];
        }
    }
}

static qstatus tiled_prefill(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    dim3 grid(cu_blocks(W->n_out, TN), cu_blocks(n, TM));
    matmul_tiled_kernel<<<grid, 256, 0, cu_stream(be)>>>(x, n, *W, y);
    CU_LAUNCHED("matmul_prefill (tiled)");
    return Q_OK;
}

static qstatus check_weight(const qweight *W) {
    if (W->fmt == QW_AFFINE) {
        if (W->bits < 2 || W->bits > 8 || W->group <= 0 || W->n_in % W->group || (W->n_in * W->bits) % 32)
            return q_fail(Q_EINVAL, "cuda matmul_prefill: bad affine weight (bits %d, group %d, n_in %lld)",
                          W->bits, W->group, (long long)W->n_in);
    }
    if (W->n_out > 2147483647LL || W->n_in > 2147483647LL)
        return q_fail(Q_EINVAL, "cuda matmul_prefill: weight too large");
    return Q_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Pre-passes: elementwise, so a row's bf16 operands do not depend on n. */

/* hi[i] = bf16(x[i]); lo[i] = bf16(x[i] - hi[i]) (exact difference) when lo is not NULL. */
__device__ __forceinline__ void split1(float v, __nv_bfloat16 *h, __nv_bfloat16 *l) {
    const __nv_bfloat16 hb = __float2bfloat16_rn(v);
    const float r = v - __bfloat162float(hb);
    *h = hb;
    *l = __float2bfloat16_rn(isfinite(r) ? r : 0.0f);
}

/* x itself, or (up not NULL) silu(x) * up as cuda_swiglu computes it: the product rounded to f32 before the
 * split (swiglu_f: never contracted into the split's subtraction). */
__device__ __forceinline__ float split_in(const float *__restrict__ x, const float *__restrict__ up, int64_t i) {
    return up ? swiglu_f(x[i], up[i]) : x[i];
}

__global__ void split_x4_kernel(const float4 *__restrict__ x, const float4 *__restrict__ up, int64_t n4,
                                __nv_bfloat16 *__restrict__ hi, __nv_bfloat16 *__restrict__ lo) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        if (up) {
            const float4 u = up[i];
            v = make_float4(swiglu_f(v.x, u.x), swiglu_f(v.y, u.y), swiglu_f(v.z, u.z), swiglu_f(v.w, u.w));
        }
        __align__(8) __nv_bfloat16 h[4], l[4];
        split1(v.x, &h[0], &l[0]);
        split1(v.y, &h[1], &l[1]);
        split1(v.z, &h[2], &l[2]);
        split1(v.w, &h[3], &l[3]);
        ((uint2 *)hi)[i] = *(const uint2 *)h;
        if (lo) ((uint2 *)lo)[i] = *(const uint2 *)l;
    }
}

/* The same for x not 16-byte aligned: the same arithmetic element by element. */
__global__ void split_x1_kernel(const float *__restrict__ x, const float *__restrict__ up, int64_t n,
                                __nv_bfloat16 *__restrict__ hi, __nv_bfloat16 *__restrict__ lo) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        __nv_bfloat16 h, l;
        split1(split_in(x, up, i), &h, &l);
        hi[i] = h;
        if (lo) lo[i] = l;
    }
}

/* 4-bit affine W -> bf16 w_hi (and w_lo): thread t takes code word t (8 codes of one row, one group:
 * group % 8 == 0), w = scale*code + bias rounded as weight_at rounds it (no FMA). */
__global__ void dequant4_kernel(qweight W, __nv_bfloat16 *__restrict__ hi, __nv_bfloat16 *__restrict__ lo) {
    const int64_t wpr = W.n_in / 8, total = W.n_out * wpr, gpr = W.n_in / W.group;
    const uint32_t *codes = (const uint32_t *)W.w;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / wpr, i0 = (t - o * wpr) * 8;
        const int64_t g = q4_sb_at(W.tiled, o, i0 / W.group, gpr);
        const float sc = load_as_f32(W.scales, W.sb_fmt, g), bi = load_as_f32(W.biases, W.sb_fmt, g);
        const uint32_t u = __ldg(codes + q4_code_byte_at(W.tiled, o, i0, W.n_in) / 4);
        __align__(16) __nv_bfloat16 h[8], l[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float w = __fadd_rn(__fmul_rn(sc, (float)((u >> (4 * e)) & 15u)), bi);
            split1(w, &h[e], &l[e]);
        }
        ((uint4 *)hi)[t] = *(const uint4 *)h;
        if (lo) ((uint4 *)lo)[t] = *(const uint4 *)l;
    }
}

/* xs[t][r] (pitch floats a row) = the sum of row r's values (split_in's) over K tile t (64 values), transposed for
 * the fold kernel's TMA boxes: a warp a (row, tile), two values a lane, in a fixed order (the lane pairs, then the
 * xor tree), so a row's sums do not depend on n. */
__global__ void xsum_kernel(const float *__restrict__ x, const float *__restrict__ up, int n, int K, int64_t pitch,
                            float *__restrict__ xs) {
    const int lane = threadIdx.x & 31, KT = K / 64;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= (int64_t)n * KT) return;
    const int64_t r = w / KT, t = w % KT, i = r * K + t * 64 + 2 * lane;
    float v = split_in(x, up, i) + split_in(x, up, i + 1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) xs[t * pitch + r] = v;
}

static unsigned ew_blocks(qbackend *be, int64_t n) { /* grid-stride: a few waves at most */
    (void)be;
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 132 * 16 ? (b > 0 ? b : 1) : 132 * 16);
}

void cu_gemm_free(cuda_state *s) {
    cu_gemm *g = s->gemm;
    if (!g) return;
    if (g->desc) g_lt.p_cublasLtMatmulDescDestroy(g->desc);
    if (g->lt) g_lt.p_cublasLtDestroy(g->lt);
    cudaFree(g->ws);
    cudaFree(g->x_hi);
    cudaFree(g->x_lo);
    cudaFree(g->w_hi);
    cudaFree(g->w_lo);
    cudaFree(g->xs);
    free(g);
    s->gemm = NULL;
}

static int env_int(const char *name, int dflt, int lo, int hi) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) return -1;
    return (int)x;
}

/* The prompt GEMM's mode and whether it may take the wgmma kernels, from the environment (QUILL_PREFILL_PRECISION,
 * QUILL_PREFILL_GEMM) and the current device. */
static qstatus gemm_env(int *mode_out, int *wgmma_out) {
    int bf16 = 0;
    Q_TRY(cu_prefill_precision_bf16(&bf16));
    int mode = bf16 ? MODE_BF16 : MODE_SPLIT;
    const char *k = getenv("QUILL_PREFILL_GEMM");
    int wgmma = wg_available();
    if (k && *k) {
        if (strcmp(k, "tiled") == 0) mode = MODE_TILED;
        else if (strcmp(k, "cublaslt") == 0) wgmma = 0;
        else if (strcmp(k, "wgmma") != 0 || !wgmma)
            return q_fail(Q_EINVAL, "QUILL_PREFILL_GEMM=%s: expected wgmma (sm_90a builds on compute 9.0 devices), "
                                    "cublaslt or tiled", k);
    }
    *mode_out = mode, *wgmma_out = wgmma;
    return Q_OK;
}

/* The backend's GEMM state, made on the first prefill call: the mode and tuning from the environment,
 * read once, so every later call of this backend runs the same arithmetic. */
static qstatus gemm_state(qbackend *be, cu_gemm **out) {
    cuda_state *s = (cuda_state *)be->impl;
    if (s->gemm) {
        *out = s->gemm;
        return Q_OK;
    }
    int mode = 0, wgmma = 0;
    Q_TRY(gemm_env(&mode, &wgmma));
    const int ref_m = env_int("QUILL_GEMM_REF_M", 512, 1, 1 << 20), ws_mb = env_int("QUILL_GEMM_WS_MB", 32, 0, 4096);
    if (ref_m < 0 || ws_mb < 0) return q_fail(Q_EINVAL, "QUILL_GEMM_REF_M (1..) or QUILL_GEMM_WS_MB (0..4096) is bad");
    cu_gemm *g = (cu_gemm *)calloc(1, sizeof *g);
    if (!g) return q_fail(Q_ENOMEM, "cuda matmul_prefill: out of memory");
    g->mode = mode;
    g->wgmma = wgmma;
    g->ref_m = ref_m;
    g->ws_bytes = (size_t)ws_mb << 20;
    s->gemm = g;
    *out = g;
    return Q_OK;
}

/* bf16 scratch of at least elems values in *hi, and in *lo when two (cu_grow: grows with headroom, never
 * shrinks, waits for pending work first). */
static qstatus grow_pair(cuda_state *s, __nv_bfloat16 **hi, size_t *hi_bytes, __nv_bfloat16 **lo, size_t *lo_bytes,
                         size_t elems, int two) {
    Q_TRY(cu_grow(s, (void **)hi, hi_bytes, elems * 2, "matmul_prefill scratch"));
    return two ? cu_grow(s, (void **)lo, lo_bytes, elems * 2, "matmul_prefill scratch") : Q_OK;
}

/* The shape's algorithm must take n rows as it is: checked once per n, never replaced. */
static qstatus shape_confirm(cu_gemm *g, gemm_shape *sh, const lt_layouts *L, int n) {
    for (int i = 0; i < sh->n_checked; i++)
        if (sh->checked[i] == n) return Q_OK;
    cublasLtMatmulHeuristicResult_t chk;
    cublasStatus_t e = g_lt.p_cublasLtMatmulAlgoCheck(g->lt, g->desc, L->a, L->b, L->c, L->c, &sh->algo, &chk);
    if (e != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > sh->ws_use)
        return q_fail(Q_ECUDA, "cuda matmul_prefill: the %lldx%lld algorithm (%s) refuses %d rows: %s",
                      (long long)sh->n_out, (long long)sh->k, sh->cfg, n,
                      e != CUBLAS_STATUS_SUCCESS ? g_lt.p_cublasLtGetStatusString(e) : "it wants workspace");
    sh->checked[sh->n_seen++ % GEMM_CHECKED] = n; /* the last GEMM_CHECKED row counts */
    if (sh->n_checked < GEMM_CHECKED) sh->n_checked++;
    return Q_OK;
}

/* y (+)= A . B with the shape's algorithm; beta 0 overwrites y, 1 adds to it. */
static qstatus lt_mm(qbackend *be, cu_gemm *g, const gemm_shape *sh, const lt_layouts *L, const __nv_bfloat16 *A,
                     const __nv_bfloat16 *B, float beta, float *y) {
    const float alpha = 1.0f;
    /* no workspace unless the algorithm was chosen with it: nothing size-dependent can use one */
    LT_TRY(g_lt.p_cublasLtMatmul(g->lt, g->desc, &alpha, A, L->a, B, L->b, &beta, y, L->c, y, L->c, &sh->algo,
                                 sh->ws_use ? g->ws : NULL, sh->ws_use, cu_stream(be)),
           "cublasLtMatmul");
    return Q_OK;
}

/* Whether a weight can take cuBLASLt: its properties only. */
static int lt_eligible(const qweight *W) {
    if (W->n_in % 8 || W->n_out % 4) return 0;
    if (W->fmt == QW_BF16) return 1;
    return W->fmt == QW_AFFINE && W->bits == 4 && W->group % 8 == 0;
}

/* x (or, with up, silu(x) * up) split into g->x_hi (and g->x_lo in split mode): once per call, shared by the
 * call's weights. */
static qstatus split_x(qbackend *be, cu_gemm *g, const float *x, const float *up, int n, int64_t K) {
    cuda_state *s = (cuda_state *)be->impl;
    const int split = g->mode == MODE_SPLIT;
    const int64_t nx = (int64_t)n * K;
    Q_TRY(grow_pair(s, &g->x_hi, &g->x_hi_bytes, &g->x_lo, &g->x_lo_bytes, (size_t)nx, split));
    __nv_bfloat16 *xl = split ? g->x_lo : NULL;
    if (cu_aligned16(x) && cu_aligned16(up))
        split_x4_kernel<<<ew_blocks(be, nx / 4), 256, 0, s->stream>>>((const float4 *)x, (const float4 *)up, nx / 4,
                                                                     g->x_hi, xl);
    else
        split_x1_kernel<<<ew_blocks(be, nx), 256, 0, s->stream>>>(x, up, nx, g->x_hi, xl);
    CU_LAUNCHED("matmul_prefill (split x)");
    return Q_OK;
}

/* A 4-bit W dequantized into g->w_hi (and g->w_lo in split mode) at element offset off (the scratch already
 * holds it); *wh is W's hi part (the weight itself when bf16). */
static qstatus weight_hi(qbackend *be, cu_gemm *g, const qweight *W, int64_t off, const __nv_bfloat16 **wh) {
    *wh = (const __nv_bfloat16 *)W->w;
    if (W->fmt != QW_AFFINE) return Q_OK;
    const int64_t nw = W->n_out * W->n_in;
    dequant4_kernel<<<ew_blocks(be, nw / 8), 256, 0, cu_stream(be)>>>(*W, g->w_hi + off,
                                                                      g->mode == MODE_SPLIT ? g->w_lo + off : NULL);
    CU_LAUNCHED("matmul_prefill (dequantize)");
    *wh = g->w_hi + off;
    return Q_OK;
}

/* Grows the weight scratch for `elems` dequantized elements (none when every weight is bf16). */
static qstatus grow_w(qbackend *be, cu_gemm *g, int64_t elems) {
    if (elems == 0) return Q_OK;
    return grow_pair((cuda_state *)be->impl, &g->w_hi, &g->w_hi_bytes, &g->w_lo, &g->w_lo_bytes, (size_t)elems,
                     g->mode == MODE_SPLIT);
}

/* The bf16 operands of a one-weight prompt call (the cuBLASLt path). */
static qstatus prefill_operands(qbackend *be, cu_gemm *g, const float *x, int n, const qweight *W,
                                const __nv_bfloat16 **wh) {
    Q_TRY(grow_w(be, g, W->fmt == QW_AFFINE ? W->n_out * W->n_in : 0));
    Q_TRY(split_x(be, g, x, NULL, n, W->n_in));
    return weight_hi(be, g, W, 0, wh);
}

static qstatus lt_prefill(qbackend *be, cu_gemm *g, gemm_shape *sh, const float *x, int n, const qweight *W, float *y) {
    const int split = g->mode == MODE_SPLIT, affine = W->fmt == QW_AFFINE;
    if (!cu_aligned16(y) || (!affine && !cu_aligned16(W->w)))
        return q_fail(Q_EINVAL, "cuda matmul_prefill: outputs and weights must be 16-byte aligned");
    lt_layouts L;
    Q_TRY(layouts_make(&L, W->n_out, W->n_in, n));
    qstatus st = shape_confirm(g, sh, &L, n);
    const __nv_bfloat16 *wh = NULL;
    if (st == Q_OK) st = prefill_operands(be, g, x, n, W, &wh);
    /* fixed order: hi.hi, then hi.lo, then (4-bit) lo.hi, each added to y */
    if (st == Q_OK) st = lt_mm(be, g, sh, &L, wh, g->x_hi, 0.0f, y);
    if (st == Q_OK && split) st = lt_mm(be, g, sh, &L, wh, g->x_lo, 1.0f, y);
    if (st == Q_OK && split && affine) st = lt_mm(be, g, sh, &L, g->w_lo, g->x_hi, 1.0f, y);
    layouts_free(&L);
    return st;
}

/* Whether a weight takes the wgmma kernel: its properties only. */
static int wg_eligible(const qweight *W) {
    return lt_eligible(W) && W->n_in % WG_BK == 0 && W->n_out <= 2147483647LL &&
           (W->fmt == QW_AFFINE || cu_aligned16(W->w));
}

/* W as cuda_gemm_wgq.cuh's operand. */
static wg_q4 q4_of(const qweight *W) {
    wg_q4 q = {(const uint32_t *)W->w, W->scales, W->biases, W->group, (int)W->sb_fmt, W->tiled};
    return q;
}

/* 0 where QUILL_PREFILL_DEQUANT=pass (read once) keeps 4-bit weights on the dequantization pass. */
static int fold_on(void) {
    static int fold = -1; /* racing first callers store the same value */
    if (fold < 0) {
        const char *v = getenv("QUILL_PREFILL_DEQUANT");
        fold = !(v && !strcmp(v, "pass"));
    }
    return fold;
}
/* Whether a launch of these weights takes the fold kernel (cuda_gemm_wgq.cuh): split mode and every weight 4-bit in a
 * layout it takes, unless QUILL_PREFILL_DEQUANT=pass (read once) asks for the dequantization pass. Its arithmetic is
 * its own (more exact: no w rounded to hi and lo parts), so the choice is the process's and the weight's, never a
 * launch's. Against the pass (docs/performance.md, sessions 43-44): faster at the default 512-row chunks and below,
 * ~0.95x at 4096-row chunks; and no dequantized scratch. */
static int takes_fold(const cu_gemm *g, int count, const qweight *const *W) {
    if (!fold_on() || g->mode != MODE_SPLIT) return 0;
    for (int i = 0; i < count; i++) {
        const wg_q4 q = q4_of(W[i]);
        if (W[i]->fmt != QW_AFFINE || W[i]->bits != 4 || !wg_q4_ok(&q, W[i]->n_in)) return 0;
    }
    return 1;
}

/* cuda_backend.h: whether this process's prompt GEMM on the current device takes 4-bit affine weights of this group
 * (and n_in a multiple of 64) from their codes: the fold, which keeps no dequantized copy (the memory fit's
 * question). The same choice as gemm_state + takes_wgmma + takes_fold; 0 where the environment is bad (the backend
 * then refuses it on its first prompt call). */
extern "C" int cuda_prefill_folds(int bits, int group) {
    int mode = 0, wgmma = 0;
    if (gemm_env(&mode, &wgmma) != Q_OK) return 0;
    return mode == MODE_SPLIT && wgmma && fold_on() && bits == 4 && group > 0 && group % WG_BK == 0;
}

/* The fold kernel's launch (wg_prefill checked y): x split and summed over its K tiles, then the weights from their
 * codes. */
static qstatus wq_prefill(qbackend *be, cu_gemm *g, const float *x, const float *up, int n, int count,
                          const qweight *const *W, float *const *y) {
    cuda_state *s = (cuda_state *)be->impl;
    const int64_t K = W[0]->n_in, nt = (int64_t)n * (K / 64), pitch = (n + 3) & ~3; /* 16-byte rows for TMA */
    Q_TRY(split_x(be, g, x, up, n, K));
    Q_TRY(cu_grow(s, (void **)&g->xs, &g->xs_bytes, (size_t)(K / 64) * pitch * 4, "matmul_prefill scratch"));
    xsum_kernel<<<(unsigned)((nt + 7) / 8), 256, 0, s->stream>>>(x, up, n, (int)K, pitch, g->xs);
    CU_LAUNCHED("matmul_prefill (x sums)");
    wq_args a;
    memset(&a, 0, sizeof a);
    a.x_hi = g->x_hi, a.x_lo = g->x_lo, a.xs_t = g->xs, a.xs_pitch = pitch, a.count = count;
    for (int i = 0; i < count; i++) a.q[i] = q4_of(W[i]), a.y[i] = y[i], a.n[i] = (int)W[i]->n_out;
    CU_TRY(wq_gemm(&a, n, (int)K, s->stream), "matmul_prefill (wgmma, 4-bit codes)");
    return Q_OK;
}

/* Whether this backend runs W on the wgmma kernel (cuda_matmul_prefill and the ops that join its calls). */
static int takes_wgmma(const cu_gemm *g, const qweight *W) {
    return g->mode != MODE_TILED && g->wgmma && wg_eligible(W);
}

/* The weights that share x in one wgmma launch: x split once, the 4-bit ones dequantized side by side in the
 * scratch; per weight the same products as lt_prefill, summed in one accumulator. */
static qstatus wg_prefill(qbackend *be, cu_gemm *g, const float *x, const float *up, int n, int count,
                          const qweight *const *W, float *const *y) {
    for (int i = 0; i < count; i++)
        if (!cu_aligned16(y[i])) return q_fail(Q_EINVAL, "cuda matmul_prefill: outputs must be 16-byte aligned");
    if (takes_fold(g, count, W)) return wq_prefill(be, g, x, up, n, count, W, y);
    const int split = g->mode == MODE_SPLIT;
    int64_t deq = 0;
    for (int i = 0; i < count; i++)
        if (W[i]->fmt == QW_AFFINE) deq += W[i]->n_out * W[i]->n_in;
    Q_TRY(grow_w(be, g, deq));
    Q_TRY(split_x(be, g, x, up, n, W[0]->n_in));
    wg_args a;
    memset(&a, 0, sizeof a);
    a.x[0] = g->x_hi, a.x[1] = split ? g->x_lo : NULL, a.count = count;
    int64_t off = 0;
    for (int i = 0; i < count; i++) {
        const __nv_bfloat16 *wh = NULL;
        Q_TRY(weight_hi(be, g, W[i], off, &wh));
        /* smallest first: hi.lo, (4-bit) lo.hi, then hi.hi */
        int np = 0;
        if (split) a.xsel[np] = 1, a.w[i][np++] = wh;
        if (split && W[i]->fmt == QW_AFFINE) a.xsel[np] = 0, a.w[i][np++] = g->w_lo + off;
        a.xsel[np] = 0, a.w[i][np++] = wh;
        a.products = np; /* the same for every weight: mode and format agree (cuda_matmul_prefill_multi) */
        a.y[i] = y[i], a.n[i] = (int)W[i]->n_out;
        if (W[i]->fmt == QW_AFFINE) off += W[i]->n_out * W[i]->n_in;
    }
    CU_TRY(wg_gemm(&a, n, (int)W[0]->n_in, cu_stream(be)), "matmul_prefill (wgmma)");
    return Q_OK;
}

qstatus cuda_matmul_prefill(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W));
    cu_gemm *g = NULL;
    Q_TRY(gemm_state(be, &g));
    if (takes_wgmma(g, W)) return wg_prefill(be, g, x, NULL, n, 1, &W, &y);
    if (g->mode == MODE_TILED || !lt_eligible(W)) return tiled_prefill(be, x, n, W, y);
    Q_TRY(lt_ready(g));
    gemm_shape *sh = NULL;
    Q_TRY(shape_get(g, W->n_out, W->n_in, &sh));
    if (!sh->ok) return tiled_prefill(be, x, n, W, y);
    return lt_prefill(be, g, sh, x, n, W, y);
}

/* Weights that share the prompt rows x: one wgmma launch when every weight takes it and they agree on n_in
 * and format (the products per weight follow the format), else one call each; bitwise the same either way. */
qstatus cuda_matmul_prefill_multi(qbackend *be, const float *x, int n, int count, const qweight *const *W,
                                  float *const *y) {
    if (count < 1 || count > WG_WEIGHTS)
        return q_fail(Q_EINVAL, "cuda matmul_prefill_multi: %d weights (1..%d)", count, WG_WEIGHTS);
    if (n <= 0) return Q_OK;
    cu_gemm *g = NULL;
    Q_TRY(gemm_state(be, &g));
    int one = 1;
    for (int i = 0; i < count; i++) {
        Q_TRY(check_weight(W[i]));
        one &= takes_wgmma(g, W[i]) && W[i]->n_in == W[0]->n_in && W[i]->fmt == W[0]->fmt;
    }
    if (one) return wg_prefill(be, g, x, NULL, n, count, W, y);
    for (int i = 0; i < count; i++) Q_TRY(cuda_matmul_prefill(be, x, n, W[i], y[i]));
    return Q_OK;
}

/* y = swiglu(gate, up) . W^T for prompt rows, bitwise what cuda_swiglu then cuda_matmul_prefill give: on the
 * wgmma path the product goes straight into the split of x (no f32 copy of it is written); elsewhere gate is
 * overwritten with it first. */
qstatus cuda_swiglu_matmul_prefill(qbackend *be, float *gate, const float *up, int n, const qweight *W, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W));
    cu_gemm *g = NULL;
    Q_TRY(gemm_state(be, &g));
    if (takes_wgmma(g, W)) return wg_prefill(be, g, gate, up, n, 1, &W, &y);
    Q_TRY(cuda_swiglu(be, gate, up, (int64_t)n * W->n_in, gate));
    return cuda_matmul_prefill(be, gate, n, W, y);
}

extern "C" int cuda_prefill_gemm_describe(qbackend *be, const qweight *W, char *buf, size_t len) {
    cu_gemm *g = NULL;
    if (gemm_state(be, &g) != Q_OK) return snprintf(buf, len, "error: %s", q_lasterr());
    const char *mode = g->mode == MODE_SPLIT ? "split" : g->mode == MODE_BF16 ? "bf16" : "tiled";
    if (takes_wgmma(g, W)) return snprintf(buf, len, "%s: wgmma (cuda_gemm_wg.cuh)", mode);
    if (g->mode == MODE_TILED || !lt_eligible(W)) return snprintf(buf, len, "%s: tiled SIMT", mode);
    if (lt_ready(g) != Q_OK) return snprintf(buf, len, "error: %s", q_lasterr());
    gemm_shape *sh = NULL;
    if (shape_get(g, W->n_out, W->n_in, &sh) != Q_OK) return snprintf(buf, len, "error: %s", q_lasterr());
    return snprintf(buf, len, "%s: %s (ref m %d, ws limit %zu MiB) %s", mode, sh->cfg, g->ref_m, g->ws_bytes >> 20,
                    sh->why);
}
