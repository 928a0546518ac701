/* cuda_gemm_probe.cu: the prefill matmul's algorithm selection, its tools (cuda_gemm_select.cu does the
 * choosing): cuBLASLt algorithm attributes and capabilities read and set at their own sizes, the probe row
 * counts a candidate must take, the check of a candidate at each of them, and QUILL_GEMM_TRACE. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gemm_probe.h"

int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at, int dflt) {
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
int algo_set(cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at, uint64_t v) {
    size_t size = 0;
    if (g_lt.p_cublasLtMatmulAlgoConfigGetAttribute(a, at, NULL, 0, &size) != CUBLAS_STATUS_SUCCESS || size == 0 ||
        size > 8)
        return 0;
    return g_lt.p_cublasLtMatmulAlgoConfigSetAttribute(a, at, &v, size) == CUBLAS_STATUS_SUCCESS; /* low bytes */
}

/* A scalar capability (dflt when absent). */
int64_t cap_scalar(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t at, int64_t dflt) {
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
int cap_array(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t at, uint32_t *out, int max) {
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

void algo_name(const cublasLtMatmulAlgo_t *a, char *buf, size_t len) {
    snprintf(buf, len, "algo %d tile %d stages %d cluster %d swizzle %d custom %d inner %d splitK %d red %d",
             algo_attr(a, CUBLASLT_ALGO_CONFIG_ID, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID, -1),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, -1),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, -1),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, -1), algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, -1),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, -1));
}

/* QUILL_GEMM_TRACE=path: every candidate the selection looks at and why it was refused, appended to
 * path (for the first backend that selects; a diagnosis aid, not part of the arithmetic). */
FILE *g_trace;
const void *g_trace_owner;
static pthread_once_t g_trace_once = PTHREAD_ONCE_INIT;
static void trace_open(void) {
    const char *p = getenv("QUILL_GEMM_TRACE");
    if (p && *p) g_trace = fopen(p, "a");
}
void trace_begin(const void *g) {
    pthread_once(&g_trace_once, trace_open);
    if (g_trace && !g_trace_owner) g_trace_owner = g;
}

/* The row counts a candidate must take: the likeliest to refuse first, then the reference count, then
 * K_PROBE_BIG last (an algorithm that takes all but that one is the last resort: prefill calls of more
 * than 16384 rows then fail loudly). With the runtime check (shape_confirm), a row count outside these
 * that the algorithm refuses fails loudly. */
static const int k_probe_m[] = {4096, 16384, 512, 2048, 1024, 8192, 256, 128, 64,   32,
                                16,   8,     7,   2,    1,    333,  1000, 3001, 12345, 32768};


void probes_free(probe_set *P) {
    for (int i = 0; i < P->n; i++) layouts_free(&P->L[i]);
    P->n = 0;
}

qstatus probes_make(probe_set *P, int64_t n_out, int64_t k, int ref_m) {
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


/* Checks a at every probe row count with at most ws_allow bytes of workspace. 1: passes, *ws_max the
 * most it asked (0: a no-workspace algorithm); 0: refused, counted in c; *all_but_big (when not NULL)
 * says whether it took every probe but the last (K_PROBE_BIG) without workspace. */
int probe_algo(cu_gemm *g, const probe_set *P, const cublasLtMatmulAlgo_t *a, size_t ws_allow, sel_count *c,
               size_t *ws_max, const char *tag, int *all_but_big) {
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
int count_str(const sel_count *c, const probe_set *P, char *buf, size_t len) {
    int p = 0;
    buf[0] = 0;
    for (int i = 0; i < P->n; i++) {
        if (c->refused[i] && p < (int)len) p += snprintf(buf + p, len - p, " refused@%d %d", P->m[i], c->refused[i]);
        if (c->wsover[i] && p < (int)len) p += snprintf(buf + p, len - p, " ws>lim@%d %d", P->m[i], c->wsover[i]);
        if (c->wsneed[i] && p < (int)len) p += snprintf(buf + p, len - p, " ws@%d %d", P->m[i], c->wsneed[i]);
    }
    return p;
}
