/* threadpool.c: persistent pthreads woken by a generation counter; the caller runs range 0 itself. */
#include "threadpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct q_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped for each job */
    int pending;         /* workers still running the current job */
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
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->quit) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        int part = index;
        pthread_mutex_unlock(&p->mu);
        if (part < p->n_parts) run_part(p, part);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
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
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_part(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
