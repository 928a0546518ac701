/* cuda_gemm.cu: the prefill matmul (op matmul_prefill): y[n][n_out] = x[n][n_in] . W^T for prompt
 * rows, n from 1 to thousands, on the tensor cores through cuBLASLt.
 *
 * Numerics. Activations are f32 and the model's goldens hold logits to 1e-4 of transformers' fp32, so
 * x is not simply rounded to bf16. Default ("split", f32-class): x = x_hi + x_lo, both bf16 (x_hi =
 * bf16(x), x_lo = bf16(x - x_hi); x is kept to about 2^-17 relative), and
 *   bf16 W:   y = W.x_hi (+) W.x_lo                      (bf16 weights are exact in bf16)
 *   4-bit W:  w = scale*code + bias in f32 (rounded as weight_at rounds it), w = w_hi + w_lo (bf16),
 *             y = w_hi.x_hi (+) w_hi.x_lo (+) w_lo.x_hi  (the w_lo.x_lo term, ~2^-18, is dropped)
 * each product a bf16 tensor-core GEMM with f32 accumulation, the next one added to y in the GEMM's
 * epilogue (beta = 1), always in this order. QUILL_PREFILL_PRECISION=bf16 ("bf16" mode) rounds x (and
 * a 4-bit w) to bf16 once: one product, about 2^-9 relative per input (rel err ~3e-3 on a GEMM),
 * twice as fast; it is for benchmarks and users who accept that, not for the goldens.
 *
 * EXACT(batch), EXACT(chunk). A row's result must not depend on n. cuBLASLt picks kernels by the whole
 * problem shape, so the algorithm (kernel, tile, stages, cluster, swizzle) is chosen ONCE per weight
 * shape (n_out, n_in) and the same algorithm runs for every n: split-K 1 and no reduction scheme (each
 * output element is one CTA's accumulation over all of K, in K order), and it must pass
 * cublasLtMatmulAlgoCheck at every probe row count (1 .. 65536) before it is taken; cublasLtMatmulAlgoCheck
 * confirms it again for each new n and a refusal fails the call loudly rather than changing the
 * arithmetic. Candidates come from cublasLtMatmulAlgoGetHeuristic at a reference row count
 * (QUILL_GEMM_REF_M, default 512: the default prefill chunk) and, where that yields nothing, from an
 * explicit enumeration of the algorithm ids with plain configurations; ones that need no workspace at any
 * row count are preferred (a workspace can hold stream-K partials, whose split of K follows the tile count,
 * so it is not batch-invariant), and those run with no workspace at all. Only when no such algorithm
 * exists is one that needs workspace (within QUILL_GEMM_WS_MB, default 32) taken, marked as such in
 * cuda_prefill_gemm_describe (see shape_select). The split and dequantization pre-passes are elementwise.
 * That a fixed, non-split cuBLASLt kernel computes each element independently of n is what
 * tests/cuda/bench_gemm.sh and test_cuda_ops check on the device (bitwise); cuBLAS does not document it.
 *
 * Which kernel a weight takes is a property of the weight alone: bf16 or 4-bit affine (any group that
 * is a multiple of 8), n_in % 8 == 0 and n_out % 4 == 0 take cuBLASLt; anything else (f32/f16, other
 * bit widths, odd shapes) takes the SIMT tiled kernel below, as does a shape for which neither the
 * heuristic nor the enumeration finds an algorithm that takes the probe row counts (shape_select).
 * QUILL_PREFILL_GEMM=tiled sends every weight to the tiled kernel.
 *
 * cuBLASLt is loaded with dlopen on the first prefill call (nothing links or loads it at startup);
 * the handle, workspace and bf16 scratch (x_hi/x_lo, and w_hi/w_lo for 4-bit weights, grown on
 * demand) belong to the backend and are freed by cu_gemm_free. Floors (H200, measured by cuBLAS
 * ~790 TFLOP/s bf16 dense): split costs two products for bf16 weights and three for 4-bit ones, plus
 * a dequantization pass over the 4-bit weight per call (reads 0.56 B, writes 4 B per weight). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>

#include <cublasLt.h>

#include "cuda_common.cuh"

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

__global__ void split_x4_kernel(const float4 *__restrict__ x, int64_t n4, __nv_bfloat16 *__restrict__ hi,
                                __nv_bfloat16 *__restrict__ lo) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
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
__global__ void split_x1_kernel(const float *__restrict__ x, int64_t n, __nv_bfloat16 *__restrict__ hi,
                                __nv_bfloat16 *__restrict__ lo) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        __nv_bfloat16 h, l;
        split1(x[i], &h, &l);
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
        const int64_t g = o * gpr + i0 / W.group;
        const float sc = load_as_f32(W.scales, W.sb_fmt, g), bi = load_as_f32(W.biases, W.sb_fmt, g);
        const uint32_t u = __ldg(codes + t);
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

static unsigned ew_blocks(qbackend *be, int64_t n) { /* grid-stride: a few waves at most */
    (void)be;
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 132 * 16 ? (b > 0 ? b : 1) : 132 * 16);
}

/* ---------------------------------------------------------------------------------------------- */
/* cuBLASLt, loaded on first use. */

#define LT_FUNCS(X)                                                                                     \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtGetStatusString)               \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)          \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate)      \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                          \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulAlgoConfigGetAttribute) X(cublasLtMatmulAlgoCheck) \
    X(cublasLtMatmul) X(cublasLtMatmulAlgoGetIds) X(cublasLtMatmulAlgoInit) X(cublasLtMatmulAlgoCapGetAttribute)  \
    X(cublasLtMatmulAlgoConfigSetAttribute)

typedef struct lt_api {
    void *lib;
#define LT_PTR(f) decltype(&::f) p_##f;
    LT_FUNCS(LT_PTR)
#undef LT_PTR
} lt_api;

static lt_api g_lt;
static char g_lt_err[512];
static pthread_once_t g_lt_once = PTHREAD_ONCE_INIT;

#ifndef QUILL_CUDA_LIBDIR
#define QUILL_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

static void lt_load(void) {
    const char *names[] = {"libcublasLt.so.13", QUILL_CUDA_LIBDIR "/libcublasLt.so.13", "libcublasLt.so",
                           "/usr/local/cuda/lib64/libcublasLt.so.13"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(g_lt_err, sizeof g_lt_err, "cannot load libcublasLt.so.13 (%s)", e ? e : "not found");
        return;
    }
    lt_api a;
    memset(&a, 0, sizeof a);
    a.lib = lib;
#define LT_SYM(f)                                                                                 \
    a.p_##f = (decltype(&::f))dlsym(lib, #f);                                                     \
    if (!a.p_##f) {                                                                               \
        snprintf(g_lt_err, sizeof g_lt_err, "libcublasLt.so lacks %s", #f);                       \
        dlclose(lib);                                                                             \
        return;                                                                                   \
    }
    LT_FUNCS(LT_SYM)
#undef LT_SYM
    g_lt = a;
}

#define LT_TRY(call, what)                                                                              \
    do {                                                                                                \
        cublasStatus_t lt_st_ = (call);                                                                 \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS)                                                            \
            return q_fail(Q_ECUDA, "cuda matmul_prefill: %s: %s (%d) (%s:%d)", what,                    \
                          g_lt.p_cublasLtGetStatusString(lt_st_), (int)lt_st_, __FILE__, __LINE__);     \
    } while (0)

enum { MODE_SPLIT, MODE_BF16, MODE_TILED };

#define GEMM_SHAPES 256
#define GEMM_CHECKED 24

typedef struct gemm_shape {
    int64_t n_out, k;
    int ok; /* 1: cuBLASLt with algo; 0: the tiled kernel */
    cublasLtMatmulAlgo_t algo;
    size_t ws_use; /* workspace the algorithm may have: 0, or the backend's (last-resort tiers) */
    int below_big; /* taken although it refuses K_PROBE_BIG rows (or wants workspace there) */
    int checked[GEMM_CHECKED], n_checked; /* row counts algo was confirmed for (a ring) */
    unsigned n_seen;
    char cfg[160]; /* the configuration, or "tiled SIMT" */
    char why[1024]; /* how it was chosen: tier, candidates and their refusals */
} gemm_shape;

struct cu_gemm {
    int mode, ref_m;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    void *ws;
    size_t ws_bytes;
    __nv_bfloat16 *x_hi, *x_lo, *w_hi, *w_lo;
    size_t x_cap, w_cap; /* elements in each of x_hi/x_lo, w_hi/w_lo */
    gemm_shape shapes[GEMM_SHAPES];
    int n_shapes;
};

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

/* The backend's GEMM state, made on the first prefill call: the mode and tuning from the environment,
 * read once, so every later call of this backend runs the same arithmetic. */
static qstatus gemm_state(qbackend *be, cu_gemm **out) {
    cuda_state *s = (cuda_state *)be->impl;
    if (s->gemm) {
        *out = s->gemm;
        return Q_OK;
    }
    int mode = MODE_SPLIT;
    const char *p = getenv("QUILL_PREFILL_PRECISION"), *k = getenv("QUILL_PREFILL_GEMM");
    if (p && *p && strcmp(p, "split") != 0) {
        if (strcmp(p, "bf16") == 0) mode = MODE_BF16;
        else return q_fail(Q_EINVAL, "QUILL_PREFILL_PRECISION=%s: expected split or bf16", p);
    }
    if (k && *k && strcmp(k, "cublaslt") != 0) {
        if (strcmp(k, "tiled") == 0) mode = MODE_TILED;
        else return q_fail(Q_EINVAL, "QUILL_PREFILL_GEMM=%s: expected cublaslt or tiled", k);
    }
    const int ref_m = env_int("QUILL_GEMM_REF_M", 512, 1, 1 << 20), ws_mb = env_int("QUILL_GEMM_WS_MB", 32, 0, 4096);
    if (ref_m < 0 || ws_mb < 0) return q_fail(Q_EINVAL, "QUILL_GEMM_REF_M (1..) or QUILL_GEMM_WS_MB (0..4096) is bad");
    cu_gemm *g = (cu_gemm *)calloc(1, sizeof *g);
    if (!g) return q_fail(Q_ENOMEM, "cuda matmul_prefill: out of memory");
    g->mode = mode;
    g->ref_m = ref_m;
    g->ws_bytes = (size_t)ws_mb << 20;
    s->gemm = g;
    *out = g;
    return Q_OK;
}

/* cuBLASLt for this backend, made when the first weight that takes it comes: the library (dlopen),
 * the handle, the workspace and the one matmul descriptor (bf16 x bf16 -> f32, f32 compute;
 * column-major D[n_out][n] = op_T(W stored K x n_out) . x stored K x n). */
static qstatus lt_ready(cu_gemm *g) {
    if (g->desc) return Q_OK;
    pthread_once(&g_lt_once, lt_load);
    if (!g_lt.lib)
        return q_fail(Q_ECUDA, "cuda matmul_prefill: %s; QUILL_PREFILL_GEMM=tiled uses the SIMT kernel instead", g_lt_err);
    if (!g->lt) {
        cublasStatus_t e = g_lt.p_cublasLtCreate(&g->lt);
        if (e != CUBLAS_STATUS_SUCCESS) {
            g->lt = NULL;
            return q_fail(Q_ECUDA, "cuda matmul_prefill: cublasLtCreate: %s", g_lt.p_cublasLtGetStatusString(e));
        }
    }
    if (g->ws_bytes && !g->ws) {
        cudaError_t ce = cudaMalloc(&g->ws, g->ws_bytes);
        if (ce != cudaSuccess) {
            cudaGetLastError();
            g->ws = NULL;
            return q_fail(Q_ENOMEM, "cuda matmul_prefill: workspace: %s", cudaGetErrorString(ce));
        }
    }
    cublasLtMatmulDesc_t d = NULL;
    LT_TRY(g_lt.p_cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (g_lt.p_cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        g_lt.p_cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) {
        g_lt.p_cublasLtMatmulDescDestroy(d);
        return q_fail(Q_ECUDA, "cuda matmul_prefill: setting transposes");
    }
    g->desc = d;
    return Q_OK;
}

/* Scratch: *p holds at least `elems` bf16 (grows; never shrinks). Waits for pending work first. */
static qstatus grow(cuda_state *s, __nv_bfloat16 **p, __nv_bfloat16 **p2, size_t *cap, size_t elems, int two) {
    if (elems <= *cap && (!two || *p2)) return Q_OK;
    CU_TRY(cudaStreamSynchronize(s->stream), "matmul_prefill scratch");
    size_t want = elems > *cap ? elems + elems / 4 : *cap;
    cudaFree(*p);
    cudaFree(*p2);
    *p = *p2 = NULL;
    *cap = 0;
    cudaError_t e = cudaMalloc((void **)p, want * 2);
    if (e == cudaSuccess && two) e = cudaMalloc((void **)p2, want * 2);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaFree(*p);
        *p = NULL;
        return q_fail(Q_ENOMEM, "cuda matmul_prefill scratch of %zu bytes: %s", want * 2 * (two ? 2 : 1),
                      cudaGetErrorString(e));
    }
    *cap = want;
    return Q_OK;
}

static qstatus layout(cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows, int64_t cols, int64_t ld) {
    LT_TRY(g_lt.p_cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld), "matrix layout");
    return Q_OK;
}

/* Layouts for n rows: A = W (K x n_out col-major, ld K, used transposed), B = x (K x n, ld K),
 * C = D = y (n_out x n, ld n_out, f32). */
typedef struct lt_layouts { cublasLtMatrixLayout_t a, b, c; } lt_layouts;

static void layouts_free(lt_layouts *L) {
    if (L->a) g_lt.p_cublasLtMatrixLayoutDestroy(L->a);
    if (L->b) g_lt.p_cublasLtMatrixLayoutDestroy(L->b);
    if (L->c) g_lt.p_cublasLtMatrixLayoutDestroy(L->c);
    memset(L, 0, sizeof *L);
}

static qstatus layouts_make(lt_layouts *L, int64_t n_out, int64_t k, int64_t n) {
    memset(L, 0, sizeof *L);
    qstatus st = layout(&L->a, CUDA_R_16BF, k, n_out, k);
    if (st == Q_OK) st = layout(&L->b, CUDA_R_16BF, k, n, k);
    if (st == Q_OK) st = layout(&L->c, CUDA_R_32F, n_out, n, n_out);
    if (st != Q_OK) layouts_free(L);
    return st;
}

static int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at, int dflt) {
    size_t size = 0, wr = 0; /* the size must match the attribute's own: ask it first */
    if (g_lt.p_cublasLtMatmulAlgoConfigGetAttribute(a, at, NULL, 0, &size) != CUBLAS_STATUS_SUCCESS || size == 0 ||
        size > 8)
        return dflt;
    uint64_t v = 0; /* little-endian: the low `size` bytes */
    if (g_lt.p_cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, size, &wr) != CUBLAS_STATUS_SUCCESS || wr != size)
        return dflt;
    if (size == 4) return (int)(int32_t)(uint32_t)v;
    if (size == 2) return (int)(uint16_t)v;
    return (int)v;
}

/* Sets a configuration attribute with the attribute's own size (asked first). 1: set. */
static int algo_set(cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at, uint64_t v) {
    size_t size = 0;
    if (g_lt.p_cublasLtMatmulAlgoConfigGetAttribute(a, at, NULL, 0, &size) != CUBLAS_STATUS_SUCCESS || size == 0 ||
        size > 8)
        return 0;
    return g_lt.p_cublasLtMatmulAlgoConfigSetAttribute(a, at, &v, size) == CUBLAS_STATUS_SUCCESS; /* low bytes */
}

/* A scalar capability (dflt when absent). */
static int64_t cap_scalar(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t at, int64_t dflt) {
    size_t size = 0, wr = 0;
    if (g_lt.p_cublasLtMatmulAlgoCapGetAttribute(a, at, NULL, 0, &size) != CUBLAS_STATUS_SUCCESS || size == 0 || size > 8)
        return dflt;
    uint64_t v = 0;
    if (g_lt.p_cublasLtMatmulAlgoCapGetAttribute(a, at, &v, size, &wr) != CUBLAS_STATUS_SUCCESS || wr != size)
        return dflt;
    if (size == 4) return (int64_t)(int32_t)(uint32_t)v;
    if (size == 2) return (int64_t)(uint16_t)v;
    return (int64_t)v;
}

/* An array capability of uint32_t (tile ids, stages ids): up to max entries into out; the count. */
static int cap_array(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t at, uint32_t *out, int max) {
    size_t size = 0, wr = 0;
    if (g_lt.p_cublasLtMatmulAlgoCapGetAttribute(a, at, NULL, 0, &size) != CUBLAS_STATUS_SUCCESS || size == 0 ||
        size % 4 || size > 4096 * 4)
        return 0;
    uint32_t *buf = (uint32_t *)malloc(size);
    if (!buf) return 0;
    int n = 0;
    if (g_lt.p_cublasLtMatmulAlgoCapGetAttribute(a, at, buf, size, &wr) == CUBLAS_STATUS_SUCCESS && wr <= size) {
        n = (int)(wr / 4);
        if (n > max) n = max;
        memcpy(out, buf, (size_t)n * 4);
    }
    free(buf);
    return n;
}

static void algo_name(const cublasLtMatmulAlgo_t *a, char *buf, size_t len) {
    snprintf(buf, len, "algo %d tile %d stages %d cluster %d swizzle %d custom %d inner %d splitK %d red %d",
             algo_attr(a, CUBLASLT_ALGO_CONFIG_ID, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID, -1),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, -1),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, -1),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, -1),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, -1));
}

/* QUILL_GEMM_TRACE=path: every candidate the selection looks at and why it was refused, appended to
 * path (for the first backend that selects; a diagnosis aid, not part of the arithmetic). */
static FILE *g_trace;
static const void *g_trace_owner;
static pthread_once_t g_trace_once = PTHREAD_ONCE_INIT;
static void trace_open(void) {
    const char *p = getenv("QUILL_GEMM_TRACE");
    if (p && *p) g_trace = fopen(p, "a");
}
#define TRACE(g, ...)                                                                                   \
    do {                                                                                                \
        if (g_trace && g_trace_owner == (const void *)(g)) fprintf(g_trace, __VA_ARGS__);               \
    } while (0)

/* The row counts a candidate must take: the likeliest to refuse first, then the reference count, then
 * K_PROBE_BIG last (an algorithm that takes all but that one is the last resort: prefill calls of more
 * than 16384 rows then fail loudly). With the runtime check (shape_confirm), a row count outside these
 * that the algorithm refuses fails loudly. */
static const int k_probe_m[] = {4096, 16384, 512, 2048, 1024, 8192, 256, 128, 64,   32,
                                16,   8,     7,   2,    1,    333,  1000, 3001, 12345, 32768};
#define K_PROBE_BIG 65536
#define N_PROBE_MAX 24

typedef struct probe_set {
    int n;
    int m[N_PROBE_MAX];
    lt_layouts L[N_PROBE_MAX];
} probe_set;

static void probes_free(probe_set *P) {
    for (int i = 0; i < P->n; i++) layouts_free(&P->L[i]);
    P->n = 0;
}

static qstatus probes_make(probe_set *P, int64_t n_out, int64_t k, int ref_m) {
    memset(P, 0, sizeof *P);
    int ms[N_PROBE_MAX], n = 0, have_ref = 0;
    for (size_t i = 0; i < sizeof k_probe_m / sizeof k_probe_m[0]; i++) {
        ms[n++] = k_probe_m[i];
        have_ref |= k_probe_m[i] == ref_m;
    }
    if (!have_ref && ref_m != K_PROBE_BIG) ms[n++] = ref_m;
    ms[n++] = K_PROBE_BIG;
    for (int i = 0; i < n; i++) {
        qstatus st = layouts_make(&P->L[i], n_out, k, ms[i]);
        if (st != Q_OK) {
            probes_free(P);
            return st;
        }
        P->m[i] = ms[i];
        P->n = i + 1;
    }
    return Q_OK;
}

/* Why the candidates of one phase were refused: counts per probe row count. */
typedef struct sel_count {
    int tried, pass0, passws;
    int refused[N_PROBE_MAX]; /* AlgoCheck refused at probe i */
    int wsover[N_PROBE_MAX];  /* needed more workspace than the limit at probe i */
    int wsneed[N_PROBE_MAX];  /* passed within the limit but needs workspace, first at probe i */
} sel_count;

/* Checks a at every probe row count with at most ws_allow bytes of workspace. 1: passes, *ws_max the
 * most it asked (0: a no-workspace algorithm); 0: refused, counted in c; *all_but_big (when not NULL)
 * says whether it took every probe but the last (K_PROBE_BIG) without workspace. */
static int probe_algo(cu_gemm *g, const probe_set *P, const cublasLtMatmulAlgo_t *a, size_t ws_allow, sel_count *c,
                      size_t *ws_max, const char *tag, int *all_but_big = NULL) {
    size_t most = 0;
    int first_ws = -1;
    if (all_but_big) *all_but_big = 0;
    c->tried++;
    for (int i = 0; i < P->n; i++) {
        cublasLtMatmulHeuristicResult_t chk;
        memset(&chk, 0, sizeof chk);
        const cublasStatus_t e =
            g_lt.p_cublasLtMatmulAlgoCheck(g->lt, g->desc, P->L[i].a, P->L[i].b, P->L[i].c, P->L[i].c, a, &chk);
        if ((e != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > ws_allow) && all_but_big && i == P->n - 1 && first_ws < 0)
            *all_but_big = 1;
        if (e != CUBLAS_STATUS_SUCCESS) {
            c->refused[i]++;
            TRACE(g, "  %s: refused at m %d: %s\n", tag, P->m[i], g_lt.p_cublasLtGetStatusString(e));
            return 0;
        }
        if (chk.workspaceSize > ws_allow) {
            c->wsover[i]++;
            TRACE(g, "  %s: needs %zu B workspace at m %d (limit %zu)\n", tag, chk.workspaceSize, P->m[i], ws_allow);
            return 0;
        }
        if (chk.workspaceSize && first_ws < 0) first_ws = i;
        if (chk.workspaceSize > most) most = chk.workspaceSize;
    }
    if (all_but_big && first_ws == P->n - 1) *all_but_big = 1;
    if (first_ws >= 0) {
        c->wsneed[first_ws]++;
        c->passws++;
        TRACE(g, "  %s: passes with workspace (first at m %d, at most %zu B)\n", tag, P->m[first_ws], most);
    } else {
        c->pass0++;
        TRACE(g, "  %s: passes without workspace\n", tag);
    }
    *ws_max = most;
    return 1;
}

/* "refused@4096 12 ws>lim@65536 3 ws@4096 5" */
static int count_str(const sel_count *c, const probe_set *P, char *buf, size_t len) {
    int p = 0;
    buf[0] = 0;
    for (int i = 0; i < P->n; i++) {
        if (c->refused[i] && p < (int)len) p += snprintf(buf + p, len - p, " refused@%d %d", P->m[i], c->refused[i]);
        if (c->wsover[i] && p < (int)len) p += snprintf(buf + p, len - p, " ws>lim@%d %d", P->m[i], c->wsover[i]);
        if (c->wsneed[i] && p < (int)len) p += snprintf(buf + p, len - p, " ws@%d %d", P->m[i], c->wsneed[i]);
    }
    return p;
}

/* Tile preference for the explicit enumeration (rows of W x rows of x). 128x128 first: at the default
 * 512-row chunk it gives the 9B shapes ~128 tiles, about one wave of 132 SMs; then larger, then smaller.
 * Tiles not listed follow in ascending id order. */
static const uint32_t k_tile_pref[] = {
    CUBLASLT_MATMUL_TILE_128x128, CUBLASLT_MATMUL_TILE_128x256, CUBLASLT_MATMUL_TILE_256x128,
    CUBLASLT_MATMUL_TILE_128x192, CUBLASLT_MATMUL_TILE_192x128, CUBLASLT_MATMUL_TILE_256x64,
    CUBLASLT_MATMUL_TILE_64x256,  CUBLASLT_MATMUL_TILE_128x160, CUBLASLT_MATMUL_TILE_160x128,
    CUBLASLT_MATMUL_TILE_128x96,  CUBLASLT_MATMUL_TILE_96x128,  CUBLASLT_MATMUL_TILE_128x64,
    CUBLASLT_MATMUL_TILE_64x128,  CUBLASLT_MATMUL_TILE_64x64};
/* Stages: automatic stage counts first (the kernel fills shared memory), then deep 64- and 32-wide ones. */
static const uint32_t k_stages_pref[] = {
    CUBLASLT_MATMUL_STAGES_64xAUTO, CUBLASLT_MATMUL_STAGES_128xAUTO, CUBLASLT_MATMUL_STAGES_32xAUTO,
    CUBLASLT_MATMUL_STAGES_256xAUTO, CUBLASLT_MATMUL_STAGES_16xAUTO, CUBLASLT_MATMUL_STAGES_8xAUTO,
    CUBLASLT_MATMUL_STAGES_64x4,    CUBLASLT_MATMUL_STAGES_64x3,     CUBLASLT_MATMUL_STAGES_64x5,
    CUBLASLT_MATMUL_STAGES_64x6,    CUBLASLT_MATMUL_STAGES_32x5,     CUBLASLT_MATMUL_STAGES_32x4,
    CUBLASLT_MATMUL_STAGES_32x6,    CUBLASLT_MATMUL_STAGES_32x3,     CUBLASLT_MATMUL_STAGES_32x10,
    CUBLASLT_MATMUL_STAGES_128x3,   CUBLASLT_MATMUL_STAGES_128x4,    CUBLASLT_MATMUL_STAGES_128x2,
    CUBLASLT_MATMUL_STAGES_64x2,    CUBLASLT_MATMUL_STAGES_32x2};

/* Sorts v[0..n) by position in pref (unlisted after, ascending). */
static void order_by_pref(uint32_t *v, int n, const uint32_t *pref, int n_pref) {
    int64_t key[512];
    if (n > 512) n = 512;
    for (int i = 0; i < n; i++) {
        key[i] = 1000000 + (int64_t)v[i];
        for (int j = 0; j < n_pref; j++)
            if (pref[j] == v[i]) key[i] = j;
    }
    for (int i = 1; i < n; i++) /* insertion sort: stable, tiny */
        for (int j = i; j > 0 && key[j - 1] > key[j]; j--) {
            const int64_t tk = key[j];
            key[j] = key[j - 1];
            key[j - 1] = tk;
            const uint32_t tv = v[j];
            v[j] = v[j - 1];
            v[j - 1] = tv;
        }
}

#define ENUM_MAX_CFGS 12000 /* a bound on AlgoCheck work per shape (counted, so deterministic) */

typedef struct enum_info {
    int n_ids, ids_init, ids_nontc, cfgs, capped;
    cublasStatus_t ids_err;
} enum_info;

/* Explicit enumeration: every algorithm id for bf16 x bf16 -> f32 (f32 compute), heuristic-seen ids
 * first (in the heuristic's order), then the rest ascending; per id the tiles by k_tile_pref, then
 * (cluster 1x1x1 | auto | auto with the sm80 inner shape), then the stages by k_stages_pref, each
 * configured plain (split-K 1, no reduction, no CTA swizzle, custom option 0). found0: the first that takes every probe without workspace (1 when found);
 * foundws: the first that takes them with workspace within the limit; found16: the first that takes
 * every probe but K_PROBE_BIG without workspace (the last two kept for the last resorts). */
static void enumerate(cu_gemm *g, const probe_set *P, const int *seen, int n_seen, sel_count *c, enum_info *ei,
                      cublasLtMatmulAlgo_t *found0, int *have0, cublasLtMatmulAlgo_t *foundws, int *havews,
                      size_t *ws_of_ws, cublasLtMatmulAlgo_t *found16, int *have16) {
    int ids[512], n_ids = 0, order[1024], n_order = 0;
    memset(ei, 0, sizeof *ei);
    const cublasStatus_t e = g_lt.p_cublasLtMatmulAlgoGetIds(g->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                                                             CUDA_R_32F, CUDA_R_32F, 512, ids, &n_ids);
    ei->ids_err = e;
    if (e != CUBLAS_STATUS_SUCCESS) {
        TRACE(g, " enumeration: AlgoGetIds: %s\n", g_lt.p_cublasLtGetStatusString(e));
        return;
    }
    if (n_ids > 512) n_ids = 512;
    ei->n_ids = n_ids;
    std::sort(ids, ids + n_ids);
    for (int i = 0; i < n_seen; i++)
        for (int j = 0; j < n_ids; j++)
            if (ids[j] == seen[i]) {
                int dup = 0;
                for (int q = 0; q < n_order; q++) dup |= order[q] == seen[i];
                if (!dup) order[n_order++] = seen[i];
            }
    for (int j = 0; j < n_ids; j++) {
        int dup = 0;
        for (int q = 0; q < n_order; q++) dup |= order[q] == ids[j];
        if (!dup) order[n_order++] = ids[j];
    }
    TRACE(g, " enumeration: %d ids:", n_ids);
    for (int i = 0; i < n_order; i++) TRACE(g, " %d", order[i]);
    TRACE(g, "\n");
    for (int oi = 0; oi < n_order && !*have0; oi++) {
        const int id = order[oi];
        cublasLtMatmulAlgo_t base;
        memset(&base, 0, sizeof base);
        if (g_lt.p_cublasLtMatmulAlgoInit(g->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F,
                                          CUDA_R_32F, id, &base) != CUBLAS_STATUS_SUCCESS) {
            ei->ids_init++;
            TRACE(g, " id %d: AlgoInit refused\n", id);
            continue;
        }
        uint32_t tiles[512], stages[256];
        int n_tiles = cap_array(&base, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, 512);
        int n_stages = cap_array(&base, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, 256);
        const int64_t splitk = cap_scalar(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, -1),
                      redmask = cap_scalar(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, -1),
                      cmax = cap_scalar(&base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, -1),
                      swz = cap_scalar(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, -1),
                      flags = cap_scalar(&base, CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS, -1);
        TRACE(g, " id %d: %d tiles, %d stages, splitK %lld, red mask %lld, custom max %lld, swizzle %lld, flags 0x%llx\n", id,
              n_tiles, n_stages, (long long)splitk, (long long)redmask, (long long)cmax, (long long)swz,
              (unsigned long long)flags);
        /* no SIMT (FMA) kernels, and f32 accumulation only, where the library says so */
        const uint64_t fl = (uint64_t)flags, op = fl & CUBLASLT_NUMERICAL_IMPL_FLAGS_OP_TYPE_MASK,
                       acc = fl & CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_TYPE_MASK;
        if (flags != -1 && (op == CUBLASLT_NUMERICAL_IMPL_FLAGS_FMA || (acc && !(acc & CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F)))) {
            ei->ids_nontc++;
            continue;
        }
        if (n_tiles == 0) tiles[n_tiles++] = CUBLASLT_MATMUL_TILE_UNDEFINED;
        if (n_stages == 0) stages[n_stages++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
        order_by_pref(tiles, n_tiles, k_tile_pref, (int)(sizeof k_tile_pref / sizeof k_tile_pref[0]));
        order_by_pref(stages, n_stages, k_stages_pref, (int)(sizeof k_stages_pref / sizeof k_stages_pref[0]));
        /* (cluster, inner shape): a 1x1 cluster, then the library's choice; inner shape unset, then the
         * sm80 mma (for kernels that want it named) */
        static const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_AUTO,
                                            CUBLASLT_CLUSTER_SHAPE_AUTO};
        static const uint16_t inners[] = {CUBLASLT_MATMUL_INNER_SHAPE_UNDEFINED, CUBLASLT_MATMUL_INNER_SHAPE_UNDEFINED,
                                          CUBLASLT_MATMUL_INNER_SHAPE_MMA16816};
        int done_id = 0; /* one no-workspace configuration per id is enough */
        for (int ti = 0; ti < n_tiles && !done_id; ti++) {
            if (tiles[ti] == CUBLASLT_MATMUL_TILE_UNDEFINED && n_tiles > 1) continue;
            for (int ci = 0; ci < 3 && !done_id; ci++)
                for (int si = 0; si < n_stages && !done_id; si++) {
                    if (stages[si] == CUBLASLT_MATMUL_STAGES_UNDEFINED && n_stages > 1) continue;
                    if (ei->cfgs >= ENUM_MAX_CFGS) {
                        ei->capped = 1;
                        return;
                    }
                    cublasLtMatmulAlgo_t a = base;
                    if (!algo_set(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, tiles[ti]) ||
                        !algo_set(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, stages[si]) ||
                        !algo_set(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1) ||
                        !algo_set(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_REDUCTION_SCHEME_NONE) ||
                        !algo_set(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 0) ||
                        !algo_set(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 0))
                        continue;
                    /* no cluster attribute: only the default (auto) */
                    if (!algo_set(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, clusters[ci]) && ci == 0) continue;
                    if (inners[ci] && !algo_set(&a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, inners[ci])) continue;
                    ei->cfgs++;
                    char tag[112];
                    snprintf(tag, sizeof tag, "enum id %d tile %u stages %u cluster %u inner %u", id, tiles[ti],
                             stages[si], (unsigned)clusters[ci], (unsigned)inners[ci]);
                    size_t wsm = 0;
                    int abb = 0;
                    const int pass = probe_algo(g, P, &a, g->ws_bytes, c, &wsm, tag, &abb);
                    if (abb && !*have16) {
                        *found16 = a;
                        *have16 = 1;
                    }
                    if (!pass) continue;
                    if (wsm == 0) {
                        *found0 = a;
                        *have0 = 1;
                        done_id = 1;
                    } else if (!*havews) {
                        *foundws = a;
                        *havews = 1;
                        *ws_of_ws = wsm;
                    }
                }
        }
    }
}

static double mono_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* The shape's algorithm, chosen once per weight shape, in this order (the first tier that has one wins;
 * within a tier the first candidate in the stated order):
 *   1. heuristic (at the reference row count; asked with no workspace, then with the limit; results in
 *      its order), custom option 0, split-K 1, no reduction, no workspace at any probe row count;
 *   2. explicit enumeration (see enumerate), no workspace at any probe row count;
 *   3. heuristic, custom option != 0, otherwise as 1;
 *   3b. heuristic, then enumeration: no workspace at any probe row count but K_PROBE_BIG, which it refuses
 *      or wants workspace for (prefill calls of more rows then fail loudly in shape_confirm);
 *   4. heuristic, any custom option (0 first), workspace within the limit at every probe row count;
 *   5. enumeration with workspace within the limit.
 * An algorithm that wants workspace at some row count may decompose the product by the problem size
 * there (stream-K style splits of K over the tile count are not batch-invariant), so tiers 1-3 run with
 * no workspace at all (cublasLtMatmul gets none, and shape_confirm refuses a row count that wants some);
 * 4 and 5 are the last resort, marked in the description, for bench_gemm's bitwise check to judge.
 * None: the tiled kernel, and the description says why. */
static qstatus shape_select(cu_gemm *g, gemm_shape *sh) {
    const int64_t n_out = sh->n_out, k = sh->k;
    pthread_once(&g_trace_once, trace_open);
    if (g_trace && !g_trace_owner) g_trace_owner = g;
    const double t0 = mono_ms();
    TRACE(g, "shape %lldx%lld (ref m %d, ws limit %zu B)\n", (long long)n_out, (long long)k, g->ref_m, g->ws_bytes);
    lt_layouts L;
    Q_TRY(layouts_make(&L, n_out, k, g->ref_m));
    probe_set P;
    qstatus st = probes_make(&P, n_out, k, g->ref_m);
    if (st != Q_OK) {
        layouts_free(&L);
        return st;
    }
    cublasLtMatmulPreference_t pref = NULL;
    enum { NRES = 32 };
    cublasLtMatmulHeuristicResult_t res[2 * NRES];
    int n_res = 0, n_asked[2] = {0, 0};
    cublasStatus_t heur_err[2] = {CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS};
    for (int pass = 0; pass < 2 && st == Q_OK; pass++) { /* workspace 0, then the limit */
        const uint64_t ws = pass == 0 ? 0 : g->ws_bytes;
        if (pass == 1 && ws == 0) break;
        cublasStatus_t e = g_lt.p_cublasLtMatmulPreferenceCreate(&pref);
        if (e != CUBLAS_STATUS_SUCCESS) {
            pref = NULL;
            st = q_fail(Q_ECUDA, "cuda matmul_prefill: preference: %s", g_lt.p_cublasLtGetStatusString(e));
            break;
        }
        const uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE, al = 16;
        if (g_lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ||
            g_lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red) ||
            g_lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al) ||
            g_lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al) ||
            g_lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al) ||
            g_lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al)) {
            st = q_fail(Q_ECUDA, "cuda matmul_prefill: setting preferences");
            break;
        }
        cublasLtMatmulHeuristicResult_t got[NRES];
        int n_got = 0;
        e = g_lt.p_cublasLtMatmulAlgoGetHeuristic(g->lt, g->desc, L.a, L.b, L.c, L.c, pref, NRES, got, &n_got);
        g_lt.p_cublasLtMatmulPreferenceDestroy(pref);
        pref = NULL;
        heur_err[pass] = e;
        if (e != CUBLAS_STATUS_SUCCESS) n_got = 0; /* not fatal: the enumeration still runs */
        if (n_got > NRES) n_got = NRES;
        n_asked[pass] = n_got;
        for (int i = 0; i < n_got; i++) { /* merge, dropping repeats */
            int dup = 0;
            for (int j = 0; j < n_res && !dup; j++) dup = !memcmp(&res[j].algo, &got[i].algo, sizeof got[i].algo);
            if (!dup) res[n_res++] = got[i];
        }
    }
    if (pref) g_lt.p_cublasLtMatmulPreferenceDestroy(pref);
    layouts_free(&L);
    if (st != Q_OK) {
        probes_free(&P);
        return st;
    }

    /* Tiers 1, 3, 4 from the heuristic's candidates: each probed once with the limit. */
    int h_state = 0, h_splitk = 0, h_red = 0, h_custom = 0, seen[2 * NRES], n_seen = 0;
    int t1 = -1, t3 = -1, t4 = -1, t4_custom0 = 0, t6 = -1, t6_custom0 = 0;
    size_t t4_ws = 0;
    sel_count hc;
    memset(&hc, 0, sizeof hc);
    for (int i = 0; i < n_res; i++) {
        const cublasLtMatmulAlgo_t *a = &res[i].algo;
        char name[192];
        algo_name(a, name, sizeof name);
        TRACE(g, " heuristic %d: %s, state %d, ws %zu B, waves %.2f\n", i, name, (int)res[i].state, res[i].workspaceSize,
              (double)res[i].wavesCount);
        if (res[i].state != CUBLAS_STATUS_SUCCESS) {
            h_state++;
            continue;
        }
        const int id = algo_attr(a, CUBLASLT_ALGO_CONFIG_ID, -1);
        int dup = 0;
        for (int q = 0; q < n_seen; q++) dup |= seen[q] == id;
        if (!dup && id >= 0) seen[n_seen++] = id;
        if (algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1) != 1) {
            h_splitk++;
            continue;
        }
        if (algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_REDUCTION_SCHEME_NONE) != CUBLASLT_REDUCTION_SCHEME_NONE) {
            h_red++;
            continue;
        }
        const int custom0 = algo_attr(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 0) == 0;
        h_custom += !custom0;
        size_t wsm = 0;
        char tag[32];
        snprintf(tag, sizeof tag, "heuristic %d", i);
        int abb = 0;
        const int pass = probe_algo(g, &P, a, g->ws_bytes, &hc, &wsm, tag, &abb);
        if (abb && (t6 < 0 || (custom0 && !t6_custom0))) { /* custom option 0 first */
            t6 = i;
            t6_custom0 = custom0;
        }
        if (!pass) continue;
        if (wsm == 0 && custom0 && t1 < 0) t1 = i;
        if (wsm == 0 && !custom0 && t3 < 0) t3 = i;
        if (t4 < 0 || (custom0 && !t4_custom0)) {
            t4 = i;
            t4_custom0 = custom0;
            t4_ws = wsm;
        }
    }
    /* Tiers 2 and 5: the enumeration, unless tier 1 already has one. */
    sel_count ec;
    memset(&ec, 0, sizeof ec);
    enum_info ei;
    memset(&ei, 0, sizeof ei);
    cublasLtMatmulAlgo_t e0, ews, e16;
    int have_e0 = 0, have_ews = 0, have_e16 = 0, ran_enum = 0;
    size_t ews_ws = 0;
    if (t1 < 0) {
        ran_enum = 1;
        enumerate(g, &P, seen, n_seen, &ec, &ei, &e0, &have_e0, &ews, &have_ews, &ews_ws, &e16, &have_e16);
    }
    const char *how = NULL;
    size_t ws_need = 0;
    if (t1 >= 0) sh->algo = res[t1].algo, how = "heuristic, no workspace";
    else if (have_e0) sh->algo = e0, how = "enumerated, no workspace";
    else if (t3 >= 0) sh->algo = res[t3].algo, how = "heuristic custom option, no workspace";
    else if (t6 >= 0) sh->algo = res[t6].algo, sh->below_big = 1, how = "heuristic, no workspace, ROWS <= 16384 ONLY";
    else if (have_e16) sh->algo = e16, sh->below_big = 1, how = "enumerated, no workspace, ROWS <= 16384 ONLY";
    else if (t4 >= 0) sh->algo = res[t4].algo, ws_need = t4_ws, how = "heuristic WITH WORKSPACE (m-independence unproven)";
    else if (have_ews) sh->algo = ews, ws_need = ews_ws, how = "enumerated WITH WORKSPACE (m-independence unproven)";
    sh->ok = how != NULL;
    sh->ws_use = ws_need ? g->ws_bytes : 0;
    if (sh->ok) {
        algo_name(&sh->algo, sh->cfg, sizeof sh->cfg);
        sh->checked[sh->n_seen++] = g->ref_m; /* every probe m passed; the reference one is remembered */
        sh->n_checked = 1;
    } else {
        snprintf(sh->cfg, sizeof sh->cfg, "tiled SIMT");
    }
    /* the reasons, for cuda_prefill_gemm_describe */
    char hs[384], es[384];
    count_str(&hc, &P, hs, sizeof hs);
    count_str(&ec, &P, es, sizeof es);
    int p = snprintf(sh->why, sizeof sh->why, "[%s]; heuristic %d+%d results (err %d/%d): state %d splitK %d red %d custom>0 %d, "
                     "%d probed, %d pass w/o ws, %d with ws;%s;",
                     sh->ok ? how : "TILED FALLBACK: no cuBLASLt algorithm takes every probe m", n_asked[0], n_asked[1], (int)heur_err[0], (int)heur_err[1], h_state, h_splitk,
                     h_red, h_custom, hc.tried, hc.pass0, hc.passws, hs);
    if (p < (int)sizeof sh->why) {
        if (ran_enum)
            p += snprintf(sh->why + p, sizeof sh->why - p,
                          " enum %d ids (err %d, init-fail %d, non-TC %d), %d cfgs%s: %d pass w/o ws, %d with ws;%s;",
                          ei.n_ids, (int)ei.ids_err, ei.ids_init, ei.ids_nontc, ei.cfgs, ei.capped ? " (CAPPED)" : "",
                          ec.pass0, ec.passws, es);
        else
            p += snprintf(sh->why + p, sizeof sh->why - p, " enum not needed;");
    }
    if (p < (int)sizeof sh->why) {
        if (ws_need) p += snprintf(sh->why + p, sizeof sh->why - p, " ws up to %zu B;", ws_need);
        snprintf(sh->why + p, sizeof sh->why - p, " %.0f ms", mono_ms() - t0);
    }
    TRACE(g, " chosen: %s\n %s\n", sh->cfg, sh->why);
    if (g_trace) fflush(g_trace);
    probes_free(&P);
    return Q_OK;
}

/* Choices already made in this process, by (device, shape, reference m, workspace limit): the selection
 * is a function of these (and the library), so a second backend takes the first one's answer, after
 * probing it again with its own handle (a refusal there: it selects afresh). */
typedef struct sel_cached {
    int dev, ref_m;
    int64_t n_out, k;
    size_t ws_bytes;
    gemm_shape sh;
} sel_cached;
#define SEL_CACHE 64
static sel_cached g_sel[SEL_CACHE];
static int g_n_sel;
static pthread_mutex_t g_sel_mu = PTHREAD_MUTEX_INITIALIZER;

static qstatus shape_get(cu_gemm *g, int64_t n_out, int64_t k, gemm_shape **out) {
    for (int i = 0; i < g->n_shapes; i++)
        if (g->shapes[i].n_out == n_out && g->shapes[i].k == k) {
            *out = &g->shapes[i];
            return Q_OK;
        }
    if (g->n_shapes == GEMM_SHAPES) return q_fail(Q_EFULL, "cuda matmul_prefill: more than %d weight shapes", GEMM_SHAPES);
    gemm_shape *sh = &g->shapes[g->n_shapes];
    memset(sh, 0, sizeof *sh);
    sh->n_out = n_out;
    sh->k = k;
    int dev = -1, hit = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        dev = -1;
    }
    pthread_mutex_lock(&g_sel_mu);
    for (int i = 0; i < g_n_sel && !hit; i++)
        if (g_sel[i].dev == dev && g_sel[i].n_out == n_out && g_sel[i].k == k && g_sel[i].ref_m == g->ref_m &&
            g_sel[i].ws_bytes == g->ws_bytes) {
            *sh = g_sel[i].sh;
            hit = 1;
        }
    pthread_mutex_unlock(&g_sel_mu);
    if (hit && sh->ok) {
        sh->n_checked = 0;
        sh->n_seen = 0;
        probe_set P;
        Q_TRY(probes_make(&P, n_out, k, g->ref_m));
        sel_count c;
        memset(&c, 0, sizeof c);
        size_t wsm = 0;
        int abb = 0;
        hit = probe_algo(g, &P, &sh->algo, sh->ws_use, &c, &wsm, "cached", &abb) || (sh->below_big && abb);
        probes_free(&P);
        if (hit) {
            sh->checked[sh->n_seen++] = g->ref_m;
            sh->n_checked = 1;
        } else {
            memset(sh, 0, sizeof *sh);
            sh->n_out = n_out;
            sh->k = k;
        }
    }
    if (!hit) {
        Q_TRY(shape_select(g, sh));
        pthread_mutex_lock(&g_sel_mu);
        if (g_n_sel < SEL_CACHE) {
            sel_cached *c = &g_sel[g_n_sel++];
            c->dev = dev;
            c->ref_m = g->ref_m;
            c->n_out = n_out;
            c->k = k;
            c->ws_bytes = g->ws_bytes;
            c->sh = *sh;
        }
        pthread_mutex_unlock(&g_sel_mu);
    }
    g->n_shapes++;
    *out = sh;
    return Q_OK;
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

static qstatus lt_prefill(qbackend *be, cu_gemm *g, gemm_shape *sh, const float *x, int n, const qweight *W, float *y) {
    cuda_state *s = (cuda_state *)be->impl;
    const int split = g->mode == MODE_SPLIT, affine = W->fmt == QW_AFFINE;
    if (((uintptr_t)y & 15) || (!affine && ((uintptr_t)W->w & 15)))
        return q_fail(Q_EINVAL, "cuda matmul_prefill: outputs and weights must be 16-byte aligned");
    const int64_t K = W->n_in, nx = (int64_t)n * K, nw = W->n_out * K;
    Q_TRY(grow(s, &g->x_hi, &g->x_lo, &g->x_cap, (size_t)nx, split));
    if (affine) Q_TRY(grow(s, &g->w_hi, &g->w_lo, &g->w_cap, (size_t)nw, split));
    lt_layouts L;
    Q_TRY(layouts_make(&L, W->n_out, K, n));
    qstatus st = shape_confirm(g, sh, &L, n);
    if (st == Q_OK) {
        __nv_bfloat16 *xl = split ? g->x_lo : NULL;
        if (((uintptr_t)x & 15) == 0)
            split_x4_kernel<<<ew_blocks(be, nx / 4), 256, 0, s->stream>>>((const float4 *)x, nx / 4, g->x_hi, xl);
        else
            split_x1_kernel<<<ew_blocks(be, nx), 256, 0, s->stream>>>(x, nx, g->x_hi, xl);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) st = q_fail(Q_ECUDA, "cuda matmul_prefill (split x): %s", cudaGetErrorString(e));
    }
    const __nv_bfloat16 *wh = (const __nv_bfloat16 *)W->w;
    if (st == Q_OK && affine) {
        dequant4_kernel<<<ew_blocks(be, nw / 8), 256, 0, s->stream>>>(*W, g->w_hi, split ? g->w_lo : NULL);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) st = q_fail(Q_ECUDA, "cuda matmul_prefill (dequantize): %s", cudaGetErrorString(e));
        wh = g->w_hi;
    }
    /* fixed order: hi.hi, then hi.lo, then (4-bit) lo.hi, each added to y */
    if (st == Q_OK) st = lt_mm(be, g, sh, &L, wh, g->x_hi, 0.0f, y);
    if (st == Q_OK && split) st = lt_mm(be, g, sh, &L, wh, g->x_lo, 1.0f, y);
    if (st == Q_OK && split && affine) st = lt_mm(be, g, sh, &L, g->w_lo, g->x_hi, 1.0f, y);
    layouts_free(&L);
    return st;
}

qstatus cuda_matmul_prefill(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    if (n <= 0) return Q_OK;
    Q_TRY(check_weight(W));
    cu_gemm *g = NULL;
    Q_TRY(gemm_state(be, &g));
    if (g->mode == MODE_TILED || !lt_eligible(W)) return tiled_prefill(be, x, n, W, y);
    Q_TRY(lt_ready(g));
    gemm_shape *sh = NULL;
    Q_TRY(shape_get(g, W->n_out, W->n_in, &sh));
    if (!sh->ok) return tiled_prefill(be, x, n, W, y);
    return lt_prefill(be, g, sh, x, n, W, y);
}

extern "C" int cuda_prefill_gemm_describe(qbackend *be, const qweight *W, char *buf, size_t len) {
    cu_gemm *g = NULL;
    if (gemm_state(be, &g) != Q_OK) return snprintf(buf, len, "error: %s", q_lasterr());
    const char *mode = g->mode == MODE_SPLIT ? "split" : g->mode == MODE_BF16 ? "bf16" : "tiled";
    if (g->mode == MODE_TILED || !lt_eligible(W)) return snprintf(buf, len, "%s: tiled SIMT", mode);
    if (lt_ready(g) != Q_OK) return snprintf(buf, len, "error: %s", q_lasterr());
    gemm_shape *sh = NULL;
    if (shape_get(g, W->n_out, W->n_in, &sh) != Q_OK) return snprintf(buf, len, "error: %s", q_lasterr());
    return snprintf(buf, len, "%s: %s (ref m %d, ws limit %zu MiB) %s", mode, sh->cfg, g->ref_m, g->ws_bytes >> 20,
                    sh->why);
}
