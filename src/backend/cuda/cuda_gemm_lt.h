/* cuda_gemm_lt.h: what the prefill matmul's three files share (cuda_gemm.cu: the op, its kernels and
 * state; cuda_gemm_lt.cu: cuBLASLt loaded with dlopen, the handle, descriptor and layouts;
 * cuda_gemm_select.cu: choosing one m-independent algorithm per weight shape). Internal to them. */
#ifndef QUILL_CUDA_GEMM_LT_H
#define QUILL_CUDA_GEMM_LT_H

#include <cublasLt.h>

#include "cuda_common.cuh"

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

/* The library's entry points, filled by lt_ready's first call (cuda_gemm_lt.cu). */
extern lt_api g_lt;

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
    int wgmma; /* the wgmma kernel (cuda_gemm_wg.cuh) takes the weights it can (off: QUILL_PREFILL_GEMM=cublaslt) */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    void *ws;
    size_t ws_bytes;
    __nv_bfloat16 *x_hi, *x_lo, *w_hi, *w_lo;
    float *xs; /* x's sums over each 64-wide K tile (cuda_gemm_wgq.cuh's fold) */
    size_t x_hi_bytes, x_lo_bytes, w_hi_bytes, w_lo_bytes, xs_bytes; /* what each scratch holds (cu_grow) */
    gemm_shape shapes[GEMM_SHAPES];
    int n_shapes;
};

/* Layouts for n rows: A = W (K x n_out col-major, ld K, used transposed), B = x (K x n, ld K),
 * C = D = y (n_out x n, ld n_out, f32). */
typedef struct lt_layouts { cublasLtMatrixLayout_t a, b, c; } lt_layouts;

/* cuda_gemm_lt.cu */
qstatus lt_ready(cu_gemm *g);
qstatus layouts_make(lt_layouts *L, int64_t n_out, int64_t k, int64_t n);
void layouts_free(lt_layouts *L);
/* cuda_gemm_select.cu: the shape's algorithm (chosen on first use, then kept; sh->ok 0: the tiled
 * kernel), from the process's earlier choices or a fresh selection. */
qstatus shape_get(cu_gemm *g, int64_t n_out, int64_t k, gemm_shape **out);

#endif
