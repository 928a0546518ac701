/* threadpool.c: persistent pthreads woken by a generation counter; the caller runs range 0 itself.
 *
 * A decode step is hundreds of short jobs back to back, and a futex wake costs tens of microseconds
 * on a VM. So a worker that finishes a job watches the generation for a while (SPIN_ROUNDS pauses,
 * ~100 us) before it sleeps on the condition variable, and the caller watches `pending` the same way
 * before it sleeps on `done`. The sleeping paths check under the mutex, and the counters change under
 * it or before the mutex is taken to signal, so no wake-up is lost (docs/performance.md, the
 * forty-eighth pass, has what it bought). */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ROUNDS 2000

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void spin_pause(void) { _mm_pause(); }
#else
static inline void spin_pause(void) {}
#endif

struct q_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    _Atomic uint64_t generation; /* bumped (under mu) for each job */
    _Atomic int pending;         /* workers still running the current job */
    int quit;
    /* the current job */
    q_range_fn fn;
    void *ctx;
    int64_t n;
    int n_parts;
};

typedef struct { q_pool *pool; int index; } worker_arg;

static void run_part(q_pool *p, int part) {
    int64_t begin = p->n * part / p->n_parts, end = p->n * (part + 1) / p->n_parts;
    if (begin < end) p->fn(p->ctx, begin, end, part);
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    q_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        for (int i = 0; (g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen && i < SPIN_ROUNDS; i++)
            spin_pause();
        if (g == seen) { /* nothing came while spinning: sleep */
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->generation)) == seen && !p->quit) pthread_cond_wait(&p->wake, &p->mu);
            int quit = p->quit;
            pthread_mutex_unlock(&p->mu);
            if (quit) return NULL;
        }
        seen = g; /* the job's fields were written before the generation was bumped */
        if (index < p->n_parts) run_part(p, index);
        if (atomic_fetch_sub(&p->pending, 1) == 1) { /* the last: the caller may be asleep on done */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

qstatus q_pool_create(int n_threads, q_pool **out) {
    if (n_threads <= 0) {
        const char *s = getenv("QUILL_THREADS");
        n_threads = s ? atoi(s) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n_threads <= 0) n_threads = 1;
    }
    q_pool *p = calloc(1, sizeof *p);
    if (!p) return q_fail(Q_ENOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { q_pool_destroy(p); return q_fail(Q_ENOMEM, "thread pool: out of memory"); }
    for (int i = 1; i < n_threads; i++) { /* thread 0 is the caller */
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n_threads = i; q_pool_destroy(p); return q_fail(Q_ENOMEM, "thread pool: out of memory"); }
        wa->pool = p;
        wa->index = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i;
            q_pool_destroy(p);
            return q_fail(Q_ENOMEM, "thread pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return Q_OK;
}

void q_pool_destroy(q_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int q_pool_size(const q_pool *p) { return p->n_threads; }

void q_parallel_for(q_pool *p, int64_t n, int64_t min_grain, q_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (min_grain < 1) min_grain = 1;
    int64_t parts = n / min_grain;
    if (parts < 1) parts = 1;
    if (parts > p->n_threads) parts = p->n_threads;
    if (parts == 1) { fn(ctx, 0, n, 0); return; }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->n_parts = (int)parts;
    atomic_store(&p->pending, p->n_threads - 1);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_part(p, 0);
    for (int i = 0; i < SPIN_ROUNDS && atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) spin_pause();
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
