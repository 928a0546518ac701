/* cpu_elementwise.c: elementwise ops: add, swiglu (silu(gate) * up), mul_sigmoid (the attention
 * output gate, out *= sigmoid(gate)); and argmax and draw per row (greedy and sampled decoding).
 * Layout: flat f32 arrays; mul_sigmoid's gate vector v starts at gate + v*gate_stride (the gate is
 * interleaved with the query in q_proj's output, reference 2.3). Invariants: each element is one
 * f32 expression of its own inputs, so results never depend on n or the thread count (EXACT(batch)
 * trivially). Not here: embed (cpu_matmul.c), gdn_gates (cpu_gdn.c). */
#include <stdlib.h>

#include "cpu_internal.h"

#define EW_GRAIN 16384

typedef struct ew_job {
    float *out;
    const float *a, *b;
    int64_t stride;
    int dim;
} ew_job;

static void add_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const ew_job *j = ctx;
    for (int64_t i = begin; i < end; i++) j->out[i] += j->a[i];
}

static void swiglu_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const ew_job *j = ctx;
    for (int64_t i = begin; i < end; i++) j->out[i] = cpu_silu(j->a[i]) * j->b[i];
}

static void mul_sigmoid_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const ew_job *j = ctx;
    for (int64_t v = begin; v < end; v++) {
        float *o = j->out + v * j->dim;
        const float *g = j->a + v * j->stride;
        for (int d = 0; d < j->dim; d++) o[d] *= cpu_sigmoid(g[d]);
    }
}

qstatus cpu_add(qbackend *be, float *x, const float *y, int64_t n) {
    if (n < 0) return q_fail(Q_EINVAL, "add: n = %lld", (long long)n);
    if (n == 0) return Q_OK;
    if (!x || !y) return q_fail(Q_EINVAL, "add: NULL pointer");
    ew_job job = {x, y, NULL, 0, 0};
    q_parallel_for(cpu_impl(be)->pool, n, EW_GRAIN, add_range, &job);
    return Q_OK;
}

qstatus cpu_swiglu(qbackend *be, const float *gate, const float *up, int64_t n, float *y) {
    if (n < 0) return q_fail(Q_EINVAL, "swiglu: n = %lld", (long long)n);
    if (n == 0) return Q_OK;
    if (!gate || !up || !y) return q_fail(Q_EINVAL, "swiglu: NULL pointer");
    ew_job job = {y, gate, up, 0, 0};
    q_parallel_for(cpu_impl(be)->pool, n, EW_GRAIN, swiglu_range, &job);
    return Q_OK;
}

qstatus cpu_mul_sigmoid(qbackend *be, float *out, const float *gate, int64_t gate_stride, int64_t n_vec,
                        int dim) {
    if (dim <= 0 || n_vec < 0)
        return q_fail(Q_EINVAL, "mul_sigmoid: dim %d, n_vec %lld", dim, (long long)n_vec);
    if (n_vec == 0) return Q_OK;
    if (!out || !gate) return q_fail(Q_EINVAL, "mul_sigmoid: NULL pointer");
    if (n_vec > 1 && gate_stride < dim)
        return q_fail(Q_EINVAL, "mul_sigmoid: gate stride %lld below dim %d", (long long)gate_stride, dim);
    ew_job job = {out, gate, NULL, gate_stride, dim};
    q_parallel_for(cpu_impl(be)->pool, n_vec, EW_GRAIN / dim + 1, mul_sigmoid_range, &job);
    return Q_OK;
}

qstatus cpu_argmax(qbackend *be, const float *x, int n_rows, int n_cols, int32_t *out) {
    (void)be;
    if (n_rows < 0 || n_cols <= 0) return q_fail(Q_EINVAL, "argmax: %d rows of %d", n_rows, n_cols);
    for (int r = 0; r < n_rows; r++) out[r] = draw_argmax(x + (int64_t)r * n_cols, n_cols);
    return Q_OK;
}

typedef struct draw_job {
    const float *x;
    int n_cols;
    const qdraw *d;
    int32_t *out;
    int failed; /* a row's scratch could not be had */
} draw_job;

static void draw_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    draw_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const int cut = !draw_whole_row(&j->d[r]); /* top-k / top-p need a row of scratch */
        draw_cand *work = cut ? malloc((size_t)j->n_cols * sizeof *work) : NULL;
        if (cut && !work) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            continue;
        }
        j->out[r] = draw_row(j->x + r * j->n_cols, j->n_cols, &j->d[r], work);
        free(work);
    }
}

qstatus cpu_draw(qbackend *be, const float *x, int n_rows, int n_cols, const qdraw *d, int32_t *out) {
    if (n_rows < 0 || n_cols <= 0) return q_fail(Q_EINVAL, "draw: %d rows of %d", n_rows, n_cols);
    draw_job job = {x, n_cols, d, out, 0};
    q_parallel_for(cpu_impl(be)->pool, n_rows, 1, draw_range, &job); /* a row each: rows are independent */
    return job.failed ? q_fail(Q_ENOMEM, "draw: no scratch for a row of %d", n_cols) : Q_OK;
}
