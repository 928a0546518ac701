/* cpu_norm.c: RMSNorm and gated RMSNorm (reference/qwen35-architecture.md 2.2).
 *
 * rmsnorm:       y = (x * r) * w,            r = 1 / sqrtf(mean(x^2) + eps)
 * gated_rmsnorm: y = ((x * r) * w) * silu(z)  (HF Qwen3_5RMSNormGated order, all f32)
 * Zero-centred norms arrive with (1 + w) already folded into w (the model's load step).
 * Layout: vectors of `dim` floats; rmsnorm vector v at x + v*x_stride / y + v*y_stride; gated
 * vectors contiguous. Invariants: sum of squares by cpu_dot (fixed order); r is computed before any
 * write, so x == y (in place) is safe. EXACT(batch): each vector computed whole by one thread, the
 * same for any n_vec; tests/unit/backend/test_cpu_ops.c. */
#include "cpu_internal.h"

typedef struct norm_job {
    const float *x, *z, *w;
    int64_t x_stride, y_stride;
    int dim;
    float eps;
    float *y;
} norm_job;

static float inv_rms(const float *x, int dim, float eps) {
    float ss = cpu_dot(x, x, dim);
    return 1.0f / sqrtf(ss / (float)dim + eps);
}

static void rmsnorm_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const norm_job *j = ctx;
    for (int64_t v = begin; v < end; v++) {
        const float *x = j->x + v * j->x_stride;
        float *y = j->y + v * j->y_stride;
        float r = inv_rms(x, j->dim, j->eps);
        for (int d = 0; d < j->dim; d++) y[d] = (x[d] * r) * j->w[d];
    }
}

static void gated_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const norm_job *j = ctx;
    for (int64_t v = begin; v < end; v++) {
        const float *x = j->x + v * j->dim, *z = j->z + v * j->dim;
        float *y = j->y + v * j->dim;
        float r = inv_rms(x, j->dim, j->eps);
        for (int d = 0; d < j->dim; d++) y[d] = ((x[d] * r) * j->w[d]) * cpu_silu(z[d]);
    }
}

static int64_t grain_for(int dim) { return dim >= 8192 ? 1 : 8192 / dim + 1; }

qstatus cpu_rmsnorm(qbackend *be, const float *x, int64_t x_stride, const float *w, int64_t n_vec, int dim,
                    float eps, float *y, int64_t y_stride) {
    if (dim <= 0 || n_vec < 0) return q_fail(Q_EINVAL, "rmsnorm: dim %d, n_vec %lld", dim, (long long)n_vec);
    if (n_vec == 0) return Q_OK;
    if (!x || !w || !y) return q_fail(Q_EINVAL, "rmsnorm: NULL pointer");
    if ((n_vec > 1 && (x_stride < dim || y_stride < dim)) || x_stride < 0 || y_stride < 0)
        return q_fail(Q_EINVAL, "rmsnorm: strides %lld/%lld below dim %d", (long long)x_stride,
                      (long long)y_stride, dim);
    if (x == y && x_stride != y_stride)
        return q_fail(Q_EINVAL, "rmsnorm: in place needs equal strides (%lld vs %lld)", (long long)x_stride,
                      (long long)y_stride);
    norm_job job = {x, NULL, w, x_stride, y_stride, dim, eps, y};
    cpu_backend *cb = cpu_impl(be);
    q_parallel_for(cb->pool, n_vec, grain_for(dim), rmsnorm_range, &job);
    return Q_OK;
}

qstatus cpu_gated_rmsnorm(qbackend *be, const float *x, const float *z, const float *w, int64_t n_vec,
                          int dim, float eps, float *y) {
    if (dim <= 0 || n_vec < 0)
        return q_fail(Q_EINVAL, "gated_rmsnorm: dim %d, n_vec %lld", dim, (long long)n_vec);
    if (n_vec == 0) return Q_OK;
    if (!x || !z || !w || !y) return q_fail(Q_EINVAL, "gated_rmsnorm: NULL pointer");
    norm_job job = {x, z, w, dim, dim, dim, eps, y};
    cpu_backend *cb = cpu_impl(be);
    q_parallel_for(cb->pool, n_vec, grain_for(dim), gated_range, &job);
    return Q_OK;
}

/* The reference of the fused op is the two ops in turn: the same arithmetic by definition. */
qstatus cpu_add_rmsnorm(qbackend *be, float *x, const float *r, const float *w, int64_t n_vec, int dim,
                        float eps, float *y) {
    if (dim <= 0 || n_vec < 0) return q_fail(Q_EINVAL, "add_rmsnorm: dim %d, n_vec %lld", dim, (long long)n_vec);
    Q_TRY(cpu_add(be, x, r, n_vec * dim));
    return cpu_rmsnorm(be, x, dim, w, n_vec, dim, eps, y, dim);
}
