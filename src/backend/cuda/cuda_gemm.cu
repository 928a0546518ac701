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
 * shape (n_out, n_in), from cublasLtMatmulAlgoGetHeuristic at a fixed reference row count
 * (QUILL_GEMM_REF_M, default 512: the default prefill chunk) with split-K and every reduction scheme
 * excluded (each output element is one CTA's accumulation over all of K, in K order), and the same
 * algorithm runs for every n; cublasLtMatmulAlgoCheck confirms it for each new n and a refusal fails
 * the call loudly rather than changing the arithmetic. The split and dequantization pre-passes are
 * elementwise. That a fixed, non-split cuBLASLt kernel computes each element independently of n is what
 * tests/cuda/bench_gemm.sh and test_cuda_ops check on the device (bitwise); cuBLAS does not document it.
 * The workspace is fixed per backend (QUILL_GEMM_WS_MB, default 32); a candidate must take every row
 * count from 1 to 65536 within it.
 *
 * Which kernel a weight takes is a property of the weight alone: bf16 or 4-bit affine (any group that
 * is a multiple of 8), n_in % 8 == 0 and n_out % 4 == 0 take cuBLASLt; anything else (f32/f16, other
 * bit widths, odd shapes) takes the SIMT tiled kernel below, as does a shape for which the heuristic
 * offers no non-split algorithm. QUILL_PREFILL_GEMM=tiled sends every weight to the tiled kernel.
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
    X(cublasLtMatmul)

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
    int checked[GEMM_CHECKED], n_checked; /* row counts algo was confirmed for (a ring) */
    unsigned n_seen;
    char desc[96];
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

/* The shape's algorithm, chosen once from the heuristic at the reference row count: the first
 * candidate with split-K 1 and no reduction scheme that the check accepts. None: the tiled kernel. */
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
    lt_layouts L;
    Q_TRY(layouts_make(&L, n_out, k, g->ref_m));
    cublasLtMatmulPreference_t pref = NULL;
    qstatus st = Q_OK;
    cublasLtMatmulHeuristicResult_t res[16];
    int n_res = 0;
    do {
        cublasStatus_t e = g_lt.p_cublasLtMatmulPreferenceCreate(&pref);
        if (e != CUBLAS_STATUS_SUCCESS) {
            pref = NULL;
            st = q_fail(Q_ECUDA, "cuda matmul_prefill: preference: %s", g_lt.p_cublasLtGetStatusString(e));
            break;
        }
        const uint64_t ws = g->ws_bytes;
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
        e = g_lt.p_cublasLtMatmulAlgoGetHeuristic(g->lt, g->desc, L.a, L.b, L.c, L.c, pref, 16, res, &n_res);
        if (e != CUBLAS_STATUS_SUCCESS && e != CUBLAS_STATUS_NOT_SUPPORTED) {
            st = q_fail(Q_ECUDA, "cuda matmul_prefill: heuristic for %lldx%lld: %s", (long long)n_out, (long long)k,
                        g_lt.p_cublasLtGetStatusString(e));
            break;
        }
        if (e != CUBLAS_STATUS_SUCCESS) n_res = 0;
        /* Plain tiled algorithms (custom option 0) first, in the heuristic's order; then the rest. A
         * candidate must take every row count from 1 to 65536 without workspace: an algorithm that
         * wants workspace at some m decomposes the product differently there. */
        for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n_res && !sh->ok; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > g->ws_bytes) continue;
            const cublasLtMatmulAlgo_t *a = &res[i].algo;
            if ((algo_attr(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 0) != 0) != pass) continue;
            if (algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1) != 1) continue;
            if (algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_REDUCTION_SCHEME_NONE) != CUBLASLT_REDUCTION_SCHEME_NONE)
                continue;
            static const int probe_m[] = {1, 7, 64, 512, 4096, 16384, 65536};
            int fits = 1;
            for (size_t pm = 0; fits && pm < sizeof probe_m / sizeof probe_m[0]; pm++) {
                lt_layouts P;
                if (layouts_make(&P, n_out, k, probe_m[pm]) != Q_OK) { fits = 0; break; }
                cublasLtMatmulHeuristicResult_t chk;
                fits = g_lt.p_cublasLtMatmulAlgoCheck(g->lt, g->desc, P.a, P.b, P.c, P.c, a, &chk) == CUBLAS_STATUS_SUCCESS &&
                       chk.workspaceSize <= g->ws_bytes;
                layouts_free(&P);
            }
            if (!fits) continue;
            sh->algo = *a;
            sh->ok = 1;
            sh->checked[sh->n_seen++] = g->ref_m;
            sh->n_checked = 1;
            snprintf(sh->desc, sizeof sh->desc, "algo %d tile %d stages %d cluster %d swizzle %d custom %d inner %d",
                     algo_attr(a, CUBLASLT_ALGO_CONFIG_ID, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID, -1),
                     algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, -1),
                     algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, -1),
                     algo_attr(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, -1));
        }
    } while (0);
    if (pref) g_lt.p_cublasLtMatmulPreferenceDestroy(pref);
    layouts_free(&L);
    if (st != Q_OK) return st;
    if (!sh->ok) /* cuda_prefill_gemm_describe reports it */
        snprintf(sh->desc, sizeof sh->desc, "tiled (cuBLASLt offers no non-split algorithm)");
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
    if (e != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > g->ws_bytes)
        return q_fail(Q_ECUDA, "cuda matmul_prefill: the %lldx%lld algorithm (%s) refuses %d rows: %s",
                      (long long)sh->n_out, (long long)sh->k, sh->desc, n,
                      e != CUBLAS_STATUS_SUCCESS ? g_lt.p_cublasLtGetStatusString(e) : "workspace");
    sh->checked[sh->n_seen++ % GEMM_CHECKED] = n; /* the last GEMM_CHECKED row counts */
    if (sh->n_checked < GEMM_CHECKED) sh->n_checked++;
    return Q_OK;
}

/* y (+)= A . B with the shape's algorithm; beta 0 overwrites y, 1 adds to it. */
static qstatus lt_mm(qbackend *be, cu_gemm *g, const gemm_shape *sh, const lt_layouts *L, const __nv_bfloat16 *A,
                     const __nv_bfloat16 *B, float beta, float *y) {
    const float alpha = 1.0f;
    LT_TRY(g_lt.p_cublasLtMatmul(g->lt, g->desc, &alpha, A, L->a, B, L->b, &beta, y, L->c, y, L->c, &sh->algo, g->ws,
                                 g->ws_bytes, cu_stream(be)),
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
    return snprintf(buf, len, "%s: %s (ref m %d, ws %zu MiB)", mode, sh->desc, g->ref_m, g->ws_bytes >> 20);
}
