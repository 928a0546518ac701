/* cpu_backend.c: the CPU backend's lifetime, memory and op table. The reference implementation of
 * backend.h: every op is written for clarity first, runs over the thread pool, and is what CI checks
 * the model (and the CUDA backend) against.
 *
 * Memory: "backend memory" is host memory, 64-byte aligned, zeroed on alloc; upload/download/copy
 * are memcpy/memmove. Scratch: one 64-byte aligned block per pool thread, grown on demand by the op
 * before it starts the pool (grown rarely: the largest request is kept).
 * Invariants: (1) be->impl is a cpu_backend; (2) ops are called from one thread at a time.
 * Not here: the kernels (cpu_matmul.c, cpu_norm.c, cpu_attention.c, cpu_gdn*.c, cpu_elementwise.c). */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#define CPU_ALIGN 64

static void *aligned_zalloc(size_t bytes) {
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (rounded == 0) rounded = CPU_ALIGN;
    if (rounded < bytes) return NULL; /* overflow */
    void *p = aligned_alloc(CPU_ALIGN, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

qstatus cpu_scratch_reserve(cpu_backend *cb, size_t floats) {
    size_t stride = (floats + 15) / 16 * 16; /* keep each thread's block 64-byte aligned */
    if (stride <= cb->scratch_stride) return Q_OK;
    if (stride > SIZE_MAX / sizeof(float) / (size_t)cb->n_threads)
        return q_fail(Q_ENOMEM, "cpu backend: scratch of %zu floats per thread is too large", floats);
    float *p = aligned_zalloc(stride * sizeof(float) * (size_t)cb->n_threads);
    if (!p) return q_fail(Q_ENOMEM, "cpu backend: out of memory for %zu floats of scratch", floats);
    free(cb->scratch);
    cb->scratch = p;
    cb->scratch_stride = stride;
    return Q_OK;
}

qstatus cpu_index_reserve(cpu_backend *cb, size_t n, int64_t **out) {
    if (n > cb->index_cap) {
        int64_t *p = malloc(n * sizeof *p);
        if (!p) return q_fail(Q_ENOMEM, "cpu backend: out of memory for %zu index entries", n);
        free(cb->index);
        cb->index = p;
        cb->index_cap = n;
    }
    *out = cb->index;
    return Q_OK;
}

qstatus cpu_seqs_check(const qseq *seqs, int n_seqs, int64_t *prefix, const char *op) {
    if (n_seqs < 0 || (n_seqs > 0 && !seqs)) return q_fail(Q_EINVAL, "%s: bad seq list (n_seqs %d)", op, n_seqs);
    prefix[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        const qseq *q = &seqs[s];
        if (q->row0 < 0 || q->n_rows < 0 || q->pos0 < 0)
            return q_fail(Q_EINVAL, "%s: seq %d has row0 %d, n_rows %d, pos0 %d", op, s, q->row0,
                          q->n_rows, q->pos0);
        if ((int64_t)q->pos0 + q->n_rows > INT32_MAX)
            return q_fail(Q_EINVAL, "%s: seq %d runs past position %d", op, s, INT32_MAX);
        prefix[s + 1] = prefix[s] + q->n_rows;
    }
    return Q_OK;
}

int cpu_seq_of(const int64_t *prefix, int n_seqs, int64_t i) {
    int lo = 0, hi = n_seqs - 1; /* the last s with prefix[s] <= i */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (prefix[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void cpu_destroy(qbackend *be) {
    if (!be) return;
    cpu_backend *cb = be->impl;
    if (cb) {
        q_pool_destroy(cb->pool);
        free(cb->scratch);
        free(cb->index);
        free(cb);
    }
    free(be);
}

static qstatus cpu_alloc(qbackend *be, size_t bytes, void **out) {
    (void)be;
    if (!out) return q_fail(Q_EINVAL, "cpu alloc: out is NULL");
    void *p = aligned_zalloc(bytes);
    if (!p) return q_fail(Q_ENOMEM, "cpu alloc: out of memory for %zu bytes", bytes);
    *out = p;
    return Q_OK;
}

static void cpu_free(qbackend *be, void *p) {
    (void)be;
    free(p);
}

static qstatus cpu_upload(qbackend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes == 0) return Q_OK;
    if (!dst || !src) return q_fail(Q_EINVAL, "cpu upload: NULL pointer for %zu bytes", bytes);
    memcpy(dst, src, bytes);
    return Q_OK;
}

static qstatus cpu_download(qbackend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes == 0) return Q_OK;
    if (!dst || !src) return q_fail(Q_EINVAL, "cpu download: NULL pointer for %zu bytes", bytes);
    memcpy(dst, src, bytes);
    return Q_OK;
}

static qstatus cpu_copy(qbackend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes == 0) return Q_OK;
    if (!dst || !src) return q_fail(Q_EINVAL, "cpu copy: NULL pointer for %zu bytes", bytes);
    memmove(dst, src, bytes);
    return Q_OK;
}

static qstatus cpu_zero(qbackend *be, void *dst, size_t bytes) {
    (void)be;
    if (bytes == 0) return Q_OK;
    if (!dst) return q_fail(Q_EINVAL, "cpu zero: NULL pointer for %zu bytes", bytes);
    memset(dst, 0, bytes);
    return Q_OK;
}

static qstatus cpu_sync(qbackend *be) {
    (void)be;
    return Q_OK;
}

static const qbackend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .matmul_prefill = cpu_matmul, /* row-independent already: one kernel serves both */
    .rope = cpu_rope,
    .attention = cpu_attention,
    .mul_sigmoid = cpu_mul_sigmoid,
    .conv1d_silu = cpu_conv1d_silu,
    .gdn_gates = cpu_gdn_gates,
    .gated_delta = cpu_gated_delta,
    .gated_rmsnorm = cpu_gated_rmsnorm,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .add_rmsnorm = cpu_add_rmsnorm,
    .argmax = cpu_argmax,
    .draw = cpu_draw,
    .vm_reserve = cpu_vm_reserve,
    .vm_map = cpu_vm_map,
    .vm_unmap = cpu_vm_unmap,
    .vm_release = cpu_vm_release,
};

qstatus cpu_backend_create(int n_threads, qbackend **out) {
    if (!out) return q_fail(Q_EINVAL, "cpu backend: out is NULL");
    *out = NULL;
    qbackend *be = calloc(1, sizeof *be);
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!be || !cb) {
        free(be);
        free(cb);
        return q_fail(Q_ENOMEM, "cpu backend: out of memory");
    }
    be->ops = &cpu_ops;
    be->impl = cb;
    qstatus st = q_pool_create(n_threads, &cb->pool);
    if (st != Q_OK) {
        cpu_destroy(be);
        return q_wrap(st, "cpu backend");
    }
    cb->n_threads = q_pool_size(cb->pool);
    cb->simd = cpu_simd_level();
    *out = be;
    return Q_OK;
}
