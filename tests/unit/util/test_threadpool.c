/* test_threadpool.c: q_parallel_for runs every item exactly once, in the same contiguous ranges for a
 * given (n, threads), through many jobs back to back (the workers spinning between them) and after idle
 * gaps longer than the spin (the workers asleep), for 1 to 4 threads; a pool is destroyed whether its
 * workers spin or sleep. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "util/threadpool.h"

typedef struct job {
    int *count;       /* [n]: how many times item i ran */
    int *thread_of;   /* [n]: the thread that ran it */
} job;

static void mark(void *ctx, int64_t begin, int64_t end, int thread_index) {
    job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        j->count[i]++;
        j->thread_of[i] = thread_index;
    }
}

static void nap_ms(int ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

static void run_and_check(q_pool *p, int64_t n, int64_t grain, job *j, int *first_thread_of) {
    memset(j->count, 0, (size_t)n * sizeof *j->count);
    q_parallel_for(p, n, grain, mark, j);
    for (int64_t i = 0; i < n; i++) {
        if (j->count[i] != 1) fail_msg("item %lld ran %d times", (long long)i, j->count[i]);
        if (first_thread_of[i] < 0) first_thread_of[i] = j->thread_of[i];
        else if (first_thread_of[i] != j->thread_of[i]) fail_msg("item %lld moved between threads", (long long)i);
    }
}

static void test_every_item_once(void **state) {
    (void)state;
    enum { N = 1000 };
    int count[N], thread_of[N], first[N];
    job j = {count, thread_of};
    for (int threads = 1; threads <= 4; threads++) {
        q_pool *p = NULL;
        assert_ok(q_pool_create(threads, &p));
        assert_int_equal(q_pool_size(p), threads);
        for (int64_t n = 1; n <= N; n = n * 3 + 1) {
            for (int i = 0; i < N; i++) first[i] = -1;
            for (int rep = 0; rep < 2000; rep++) run_and_check(p, n, 1, &j, first); /* back to back */
            for (int rep = 0; rep < 3; rep++) {                                      /* after naps */
                nap_ms(3);
                run_and_check(p, n, 1, &j, first);
            }
            for (int i = 0; i < N; i++) first[i] = -1;
            run_and_check(p, n, n, &j, first); /* one part: the caller alone */
            for (int64_t i = 0; i < n; i++) assert_int_equal(first[i], 0);
        }
        q_pool_destroy(p);
    }
}

static void test_destroy_spinning_or_asleep(void **state) {
    (void)state;
    int count[8], thread_of[8];
    job j = {count, thread_of};
    for (int asleep = 0; asleep < 2; asleep++) {
        q_pool *p = NULL;
        assert_ok(q_pool_create(4, &p));
        memset(count, 0, sizeof count);
        q_parallel_for(p, 8, 1, mark, &j);
        if (asleep) nap_ms(5);
        q_pool_destroy(p); /* must return: joins every worker */
        for (int i = 0; i < 8; i++) assert_int_equal(count[i], 1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_once),
        cmocka_unit_test(test_destroy_spinning_or_asleep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
