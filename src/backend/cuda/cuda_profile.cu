/* cuda_profile.cu: where a forward's GPU time goes. cuda_profile_enable swaps the backend's ops table
 * for one whose every op records a CUDA event before and after the real op; cuda_profile_report
 * waits, sums the elapsed time per label (the op's name; matmuls also by weight shape and format)
 * and prints a table. For `quill bench --profile` (issue 7's per-kernel table): the events cost a
 * little host time per op, so profiled runs are not the benchmark's figures. One profiled backend at
 * a time (the state is global). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_common.cuh"

#define PROF_EVENTS 8192 /* pairs in flight before a flush */
#define PROF_LABELS 256

typedef struct prof_label {
    char name[64];
    double ms;
    long calls;
} prof_label;

static struct {
    const qbackend_ops *real;
    cudaEvent_t start[PROF_EVENTS], end[PROF_EVENTS];
    int label_of[PROF_EVENTS];
    int n_pending, ready;
    prof_label labels[PROF_LABELS];
    int n_labels;
    cudaEvent_t wall0, wall1;
    int wall_started;
} P;

static int label_index(const char *name) {
    for (int i = 0; i < P.n_labels; i++)
        if (!strcmp(P.labels[i].name, name)) return i;
    if (P.n_labels == PROF_LABELS) return PROF_LABELS - 1; /* overflow shares the last row */
    snprintf(P.labels[P.n_labels].name, sizeof P.labels[0].name, "%s", name);
    return P.n_labels++;
}

/* Adds every pending pair's time to its label. */
static void flush(void) {
    if (P.n_pending == 0) return;
    cudaEventSynchronize(P.end[P.n_pending - 1]);
    for (int i = 0; i < P.n_pending; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, P.start[i], P.end[i]) == cudaSuccess) {
            P.labels[P.label_of[i]].ms += ms;
            P.labels[P.label_of[i]].calls++;
        }
    }
    cudaGetLastError();
    P.n_pending = 0;
}

static int begin(qbackend *be, const char *name) {
    if (P.n_pending == PROF_EVENTS) flush();
    const int k = P.n_pending++;
    P.label_of[k] = label_index(name);
    if (!P.wall_started) {
        cudaEventRecord(P.wall0, cu_stream(be));
        P.wall_started = 1;
    }
    cudaEventRecord(P.start[k], cu_stream(be));
    return k;
}

static void end(qbackend *be, int k) {
    cudaEventRecord(P.end[k], cu_stream(be));
    cudaEventRecord(P.wall1, cu_stream(be));
}

static const char *fmt_name(const qweight *W) {
    switch (W->fmt) {
    case QW_F32: return "f32";
    case QW_F16: return "f16";
    case QW_BF16: return "bf16";
    default: return W->bits == 4 ? "q4" : W->bits == 8 ? "q8" : "q";
    }
}

/* One wrapper per op signature, named by the op's table slot. */
template <typename F, F *Real, int Id> struct timed;
template <typename... A, qstatus (*Real)(qbackend *, A...), int Id>
struct timed<qstatus(qbackend *, A...), Real, Id> {
    static const char *name;
    static qstatus call(qbackend *be, A... a) {
        const int k = begin(be, name);
        const qstatus s = Real(be, a...);
        end(be, k);
        return s;
    }
};
template <typename... A, qstatus (*Real)(qbackend *, A...), int Id>
const char *timed<qstatus(qbackend *, A...), Real, Id>::name = "";

/* "what n_outxn_in fmt": the label of a call on W */
static int begin_w(qbackend *be, const char *what, const qweight *W) {
    char name[64];
    snprintf(name, sizeof name, "%s %lldx%lld %s", what, (long long)W->n_out, (long long)W->n_in, fmt_name(W));
    return begin(be, name);
}
static qstatus timed_matmul(const char *what, qbackend *be, const float *x, int n, const qweight *W, float *y,
                            qstatus (*real)(qbackend *, const float *, int, const qweight *, float *)) {
    const int k = begin_w(be, what, W);
    const qstatus s = real(be, x, n, W, y);
    end(be, k);
    return s;
}
static qstatus p_matmul(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    return timed_matmul("matmul", be, x, n, W, y, P.real->matmul);
}
static qstatus p_matmul_prefill(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    return timed_matmul("matmul_prefill", be, x, n, W, y, P.real->matmul_prefill);
}

static qstatus p_swiglu_matmul_prefill(qbackend *be, float *gate, const float *up, int n, const qweight *W, float *y) {
    const int k = begin_w(be, "swiglu+matmul_prefill", W);
    const qstatus s = P.real->swiglu_matmul_prefill(be, gate, up, n, W, y);
    end(be, k);
    return s;
}
/* The gate of a glu_matmul or resid_matmul in its label (with `resid`, the residual add after it). */
static const char *glu_label(const qglu *glu, int resid) {
    if (!glu) return resid ? "matmul+resid" : "matmul";
    if (glu->norm_w) return resid ? "gated_rmsnorm+matmul+resid" : "gated_rmsnorm+matmul";
    if (glu->act == QGLU_SILU) return resid ? "swiglu+matmul+resid" : "swiglu+matmul";
    return resid ? "sigmoid+matmul+resid" : "sigmoid+matmul";
}
static qstatus p_glu_matmul(qbackend *be, float *x, const qglu *glu, int n, const qweight *W, float *y) {
    const int k = begin_w(be, glu_label(glu, 0), W);
    const qstatus s = P.real->glu_matmul(be, x, glu, n, W, y);
    end(be, k);
    return s;
}

static qstatus p_resid_matmul(qbackend *be, float *xin, const qglu *glu, int n, const qweight *W, float *x, float *ss,
                              const float *next_w) {
    const int k = begin_w(be, glu_label(glu, 1), W);
    const qstatus s = P.real->resid_matmul(be, xin, glu, n, W, x, ss, next_w);
    end(be, k);
    return s;
}

/* "what n_out1+n_out2... xn_in fmt": the label of a call on several weights */
static int begin_multi(qbackend *be, const char *what, int count, const qweight *const *W) {
    char name[64];
    int len = snprintf(name, sizeof name, "%s", what);
    for (int i = 0; i < count && len < (int)sizeof name; i++)
        len += snprintf(name + len, sizeof name - (size_t)len, "%s%lld", i ? "+" : " ", (long long)W[i]->n_out);
    if (count > 0 && len < (int)sizeof name)
        snprintf(name + len, sizeof name - (size_t)len, " x%lld %s", (long long)W[0]->n_in, fmt_name(W[0]));
    return begin(be, name);
}
typedef qstatus (*multi_fn)(qbackend *, const float *, int, int, const qweight *const *, float *const *);
static qstatus timed_multi(const char *what, qbackend *be, const float *x, int n, int count, const qweight *const *W,
                           float *const *y, multi_fn real) {
    const int k = begin_multi(be, what, count, W);
    const qstatus s = real(be, x, n, count, W, y);
    end(be, k);
    return s;
}
static qstatus p_norm_matmul_multi(qbackend *be, const float *x, const qnorm *nm, int n, int count,
                                   const qweight *const *W, float *const *y) {
    const int k = begin_multi(be, "norm+matmul_multi", count, W);
    const qstatus s = P.real->norm_matmul_multi(be, x, nm, n, count, W, y);
    end(be, k);
    return s;
}
static qstatus p_matmul_multi(qbackend *be, const float *x, int n, int count, const qweight *const *W,
                              float *const *y) {
    return timed_multi("matmul_multi", be, x, n, count, W, y, P.real->matmul_multi);
}
static qstatus p_matmul_prefill_multi(qbackend *be, const float *x, int n, int count, const qweight *const *W,
                                      float *const *y) {
    return timed_multi("matmul_prefill", be, x, n, count, W, y, P.real->matmul_prefill_multi);
}

#define TIMED(op, fn) timed<decltype(fn), fn, __LINE__>
#define WRAP(op, fn)                          \
    do {                                      \
        TIMED(op, fn)::name = #op;            \
        o.op = TIMED(op, fn)::call;           \
    } while (0)

static qbackend_ops profiled;

extern "C" qstatus cuda_profile_enable(qbackend *be) {
    if (strcmp(be->ops->name, "cuda")) return q_fail(Q_EINVAL, "profile: backend %s is not cuda", be->ops->name);
    if (P.real) return q_fail(Q_EINVAL, "profile: already enabled");
    for (int i = 0; i < PROF_EVENTS; i++) {
        CU_TRY(cudaEventCreate(&P.start[i]), "profile events");
        CU_TRY(cudaEventCreate(&P.end[i]), "profile events");
    }
    CU_TRY(cudaEventCreate(&P.wall0), "profile events");
    CU_TRY(cudaEventCreate(&P.wall1), "profile events");
    P.real = be->ops;
    qbackend_ops o = *be->ops;
    WRAP(embed, cuda_embed);
    WRAP(rmsnorm, cuda_rmsnorm);
    WRAP(rope, cuda_rope);
    WRAP(qk_norm_rope, cuda_qk_norm_rope);
    WRAP(attention, cuda_attention);
    WRAP(attention_gated, cuda_attention_gated);
    WRAP(mul_sigmoid, cuda_mul_sigmoid);
    WRAP(conv1d_silu, cuda_conv1d_silu);
    WRAP(gdn_gates, cuda_gdn_gates);
    WRAP(conv1d_silu_gates, cuda_conv1d_silu_gates);
    WRAP(gated_delta, cuda_gated_delta);
    WRAP(gated_rmsnorm, cuda_gated_rmsnorm);
    WRAP(swiglu, cuda_swiglu);
    WRAP(add, cuda_add);
    WRAP(add_rmsnorm, cuda_add_rmsnorm);
    WRAP(argmax, cuda_argmax);
    WRAP(draw, cuda_draw);
    WRAP(head_argmax, cuda_head_argmax);
    o.graph_begin = NULL; /* per-op events need the ops issued one by one */
    o.graph_end = NULL;
    o.matmul = p_matmul;
    o.matmul_prefill = p_matmul_prefill;
    if (o.matmul_multi) o.matmul_multi = p_matmul_multi;
    if (o.matmul_prefill_multi) o.matmul_prefill_multi = p_matmul_prefill_multi;
    if (o.swiglu_matmul_prefill) o.swiglu_matmul_prefill = p_swiglu_matmul_prefill;
    if (o.glu_matmul) o.glu_matmul = p_glu_matmul;
    if (o.resid_matmul) o.resid_matmul = p_resid_matmul;
    if (o.norm_matmul_multi) o.norm_matmul_multi = p_norm_matmul_multi;
    profiled = o;
    be->ops = &profiled;
    return Q_OK;
}

/* Forgets what was measured so far (after a warm-up). */
extern "C" void cuda_profile_reset(void) {
    flush();
    for (int i = 0; i < P.n_labels; i++) P.labels[i].ms = 0, P.labels[i].calls = 0;
    P.wall_started = 0;
}

static int by_time(const void *a, const void *b) {
    const prof_label *x = (const prof_label *)a, *y = (const prof_label *)b;
    return (x->ms < y->ms) - (x->ms > y->ms);
}

/* Prints the table: per label its calls and time per unit (a decode step, a prefill), largest first,
 * and the GPU time the ops cover against the stream's whole span (the rest is gaps and copies). */
extern "C" void cuda_profile_report(FILE *f, const char *unit, int units) {
    flush();
    float span = 0.0f;
    if (P.wall_started) {
        cudaEventSynchronize(P.wall1);
        cudaEventElapsedTime(&span, P.wall0, P.wall1);
    }
    cudaGetLastError();
    prof_label sorted[PROF_LABELS];
    memcpy(sorted, P.labels, sizeof(prof_label) * (size_t)P.n_labels);
    qsort(sorted, (size_t)P.n_labels, sizeof sorted[0], by_time);
    double total = 0.0;
    for (int i = 0; i < P.n_labels; i++) total += sorted[i].ms;
    if (units < 1) units = 1;
    fprintf(f, "| op (per %s) | calls | us | share of op time |\n|---|---|---|---|\n", unit);
    for (int i = 0; i < P.n_labels; i++) {
        if (sorted[i].calls == 0) continue;
        fprintf(f, "| %s | %.0f | %.1f | %.1f %% |\n", sorted[i].name, (double)sorted[i].calls / units,
                1000.0 * sorted[i].ms / units, total > 0 ? 100.0 * sorted[i].ms / total : 0.0);
    }
    fprintf(f, "| all ops | | %.1f | stream span %.1f us per %s (ops cover %.0f %%) |\n", 1000.0 * total / units,
            1000.0 * span / units, unit, span > 0 ? 100.0 * total / span : 0.0);
}
