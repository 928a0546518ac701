/* cpu_matmul.c: y = x W^T for every weight format, and the embedding lookup.
 *
 * Algorithm: the pool splits the n_out weight rows into contiguous ranges. A thread dequantizes a
 * block of MM_BLOCK weight rows to f32 (cpu_weight_row) into its scratch, then for every input row r
 * computes y[r][o] = cpu_dot(x[r], w[o]) for the block (four at a time by cpu_dot4, which is
 * bit-identical to cpu_dot); f32 weights are read in place. The block only keeps the dequantized
 * rows hot across the input rows; it changes no arithmetic. Where the CPU has AVX2 both steps take
 * cpu_simd.c's forms; with AVX-512, cpu_simd_pairs.c takes the whole range for the formats it takes.
 * Both compute the same bits.
 * Layout: x [n][n_in], y [n][n_out], W [n_out][n_in] (backend.h). Embed: y [n][n_in].
 * Invariants: y[r][o] is one cpu_dot over n_in in a fixed order, computed whole by one thread.
 * EXACT(batch): a row's outputs are bit-identical whatever n and the thread count;
 * tests/unit/backend/test_cpu_ops.c (matmul_batch_invariant, thread_count_invariant).
 * Not here: the formats themselves (cpu_quant.c). */
#include <stdint.h>

#include "cpu_internal.h"

#define MM_BLOCK 16

typedef struct mm_job {
    cpu_backend *cb;
    const float *x;
    int n;
    const qweight *W;
    float *y;
} mm_job;

static void mm_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    const mm_job *j = ctx;
    const qweight *W = j->W;
    const int64_t n_in = W->n_in, n_out = W->n_out;
    float *scratch = cpu_scratch_at(j->cb, thread_index);
    const int simd = j->cb->simd;
    if (simd >= CPU_SIMD_AVX512 && cpu_pairs_take(W)) {
        cpu_matmul_pairs(W, j->x, j->n, j->y, begin, end, scratch);
        return;
    }
    const float *rows[MM_BLOCK];
    for (int64_t o0 = begin; o0 < end; o0 += MM_BLOCK) {
        int nb = (int)(end - o0 < MM_BLOCK ? end - o0 : MM_BLOCK);
        for (int b = 0; b < nb; b++) {
            if (W->fmt == QW_F32) {
                rows[b] = (const float *)W->w + (o0 + b) * n_in;
            } else {
                if (!cpu_weight_row_simd(simd, W, o0 + b, scratch + (int64_t)b * n_in))
                    cpu_weight_row(W, o0 + b, scratch + (int64_t)b * n_in);
                rows[b] = scratch + (int64_t)b * n_in;
            }
        }
        for (int r = 0; r < j->n; r++) {
            const float *xr = j->x + (int64_t)r * n_in;
            float *yr = j->y + (int64_t)r * n_out + o0;
            int b = 0;
            if (simd >= CPU_SIMD_AVX2) {
                for (; b + 4 <= nb; b += 4)
                    cpu_dot4_avx2(xr, rows[b], rows[b + 1], rows[b + 2], rows[b + 3], n_in, yr + b);
                for (; b < nb; b++) yr[b] = cpu_dot_avx2(xr, rows[b], n_in);
            }
            for (; b + 4 <= nb; b += 4) cpu_dot4(xr, rows[b], rows[b + 1], rows[b + 2], rows[b + 3], n_in, yr + b);
            for (; b < nb; b++) yr[b] = cpu_dot(xr, rows[b], n_in);
        }
    }
}

qstatus cpu_matmul(qbackend *be, const float *x, int n, const qweight *W, float *y) {
    Q_TRY(cpu_weight_check(W, "matmul"));
    if (n < 0) return q_fail(Q_EINVAL, "matmul: n = %d", n);
    if (n == 0) return Q_OK;
    if (!x || !y) return q_fail(Q_EINVAL, "matmul: x or y is NULL");
    cpu_backend *cb = cpu_impl(be);
    if (W->fmt != QW_F32) Q_TRY(cpu_scratch_reserve(cb, (size_t)MM_BLOCK * (size_t)W->n_in));
    mm_job job = {cb, x, n, W, y};
    int64_t work = (int64_t)n * W->n_in; /* multiply-adds per weight row */
    int64_t grain = work >= 65536 ? 1 : 65536 / (work + 1) + 1;
    q_parallel_for(cb->pool, W->n_out, grain, mm_range, &job);
    return Q_OK;
}

typedef struct embed_job {
    const qweight *table;
    const int32_t *ids;
    float *y;
} embed_job;

static void embed_range(void *ctx, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const embed_job *j = ctx;
    for (int64_t r = begin; r < end; r++) cpu_weight_row(j->table, j->ids[r], j->y + r * j->table->n_in);
}

qstatus cpu_embed(qbackend *be, const qweight *table, const int32_t *ids, int n, float *y) {
    Q_TRY(cpu_weight_check(table, "embed"));
    if (n < 0) return q_fail(Q_EINVAL, "embed: n = %d", n);
    if (n == 0) return Q_OK;
    if (!ids || !y) return q_fail(Q_EINVAL, "embed: ids or y is NULL");
    for (int r = 0; r < n; r++)
        if (ids[r] < 0 || ids[r] >= table->n_out)
            return q_fail(Q_EINVAL, "embed: id %d at row %d is outside the table's %lld rows", (int)ids[r],
                          r, (long long)table->n_out);
    embed_job job = {table, ids, y};
    cpu_backend *cb = cpu_impl(be);
    q_parallel_for(cb->pool, n, 16, embed_range, &job);
    return Q_OK;
}
