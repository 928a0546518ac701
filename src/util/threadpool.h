/* threadpool.h: a fixed pool of worker threads running one parallel_for at a time.
 * The work [0, n) is cut into n_threads contiguous ranges, so which thread computes an item never
 * changes its arithmetic: each item is computed whole by one thread (EXACT(batch) relies on it).
 * QUILL_THREADS sets the count (default: all online cores). */
#ifndef QUILL_THREADPOOL_H
#define QUILL_THREADPOOL_H

#include <stdint.h>

#include "status.h"

typedef struct q_pool q_pool;

/* fn(ctx, begin, end, thread_index) computes items [begin, end). */
typedef void (*q_range_fn)(void *ctx, int64_t begin, int64_t end, int thread_index);

/* Creates a pool of n_threads (0: QUILL_THREADS or the online core count). Owned; free with
 * q_pool_destroy. */
qstatus q_pool_create(int n_threads, q_pool **out);
void q_pool_destroy(q_pool *pool);
int q_pool_size(const q_pool *pool);

/* Runs fn over [0, n) on all threads and returns when every range is done. Items below min_grain per
 * thread are run on fewer threads. Not reentrant: call from one thread at a time. */
void q_parallel_for(q_pool *pool, int64_t n, int64_t min_grain, q_range_fn fn, void *ctx);

#endif
