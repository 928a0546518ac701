/* cuda_gemm_lt.cu: cuBLASLt for the prefill matmul, loaded with dlopen on the first prefill call
 * (nothing links or loads it at startup): the entry points (g_lt), a backend's handle, workspace and
 * matmul descriptor (lt_ready), and the matrix layouts of one call (layouts_make). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_gemm_lt.h"

lt_api g_lt;
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

/* cuBLASLt for this backend, made when the first weight that takes it comes: the library (dlopen),
 * the handle, the workspace and the one matmul descriptor (bf16 x bf16 -> f32, f32 compute;
 * column-major D[n_out][n] = op_T(W stored K x n_out) . x stored K x n). */
qstatus lt_ready(cu_gemm *g) {
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

static qstatus layout(cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows, int64_t cols, int64_t ld) {
    LT_TRY(g_lt.p_cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld), "matrix layout");
    return Q_OK;
}


void layouts_free(lt_layouts *L) {
    if (L->a) g_lt.p_cublasLtMatrixLayoutDestroy(L->a);
    if (L->b) g_lt.p_cublasLtMatrixLayoutDestroy(L->b);
    if (L->c) g_lt.p_cublasLtMatrixLayoutDestroy(L->c);
    memset(L, 0, sizeof *L);
}

qstatus layouts_make(lt_layouts *L, int64_t n_out, int64_t k, int64_t n) {
    memset(L, 0, sizeof *L);
    qstatus st = layout(&L->a, CUDA_R_16BF, k, n_out, k);
    if (st == Q_OK) st = layout(&L->b, CUDA_R_16BF, k, n, k);
    if (st == Q_OK) st = layout(&L->c, CUDA_R_32F, n_out, n, n_out);
    if (st != Q_OK) layouts_free(L);
    return st;
}

