/* cuda_gemm_probe.h: the tools of the prefill matmul's algorithm selection (cuda_gemm_probe.cu), shared by
 * cuda_gemm_select.cu. Internal to the CUDA backend. */
#ifndef QUILL_CUDA_GEMM_PROBE_H
#define QUILL_CUDA_GEMM_PROBE_H

#include <stdio.h>

#include "cuda_gemm_lt.h"

/* A configuration attribute of a (dflt when absent), and setting one; both at the attribute's own size. */
int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at, int dflt);
int algo_set(cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at, uint64_t v);
/* A scalar capability (dflt when absent); an array capability of uint32_t (up to max entries, the count). */
int64_t cap_scalar(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t at, int64_t dflt);
int cap_array(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t at, uint32_t *out, int max);
/* "algo 21 tile 20 stages ..." */
void algo_name(const cublasLtMatmulAlgo_t *a, char *buf, size_t len);

/* QUILL_GEMM_TRACE=path: every candidate the selection looks at and why it was refused, appended to path,
 * for the first backend that selects (trace_begin claims it). */
extern FILE *g_trace;
extern const void *g_trace_owner;
void trace_begin(const void *g);
#define TRACE(g, ...)                                                                                   \
    do {                                                                                                \
        if (g_trace && g_trace_owner == (const void *)(g)) fprintf(g_trace, __VA_ARGS__);               \
    } while (0)

#define K_PROBE_BIG 65536
#define N_PROBE_MAX 24
typedef struct probe_set {
    int n;
    int m[N_PROBE_MAX];
    lt_layouts L[N_PROBE_MAX];
} probe_set;
void probes_free(probe_set *P);
qstatus probes_make(probe_set *P, int64_t n_out, int64_t k, int ref_m);

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
int probe_algo(cu_gemm *g, const probe_set *P, const cublasLtMatmulAlgo_t *a, size_t ws_allow, sel_count *c,
               size_t *ws_max, const char *tag, int *all_but_big = NULL);
/* "refused@4096 12 ws>lim@65536 3 ws@4096 5" */
int count_str(const sel_count *c, const probe_set *P, char *buf, size_t len);

#endif
