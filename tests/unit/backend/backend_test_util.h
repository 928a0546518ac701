/* backend_test_util.h: what the CPU backend tests share: a seeded RNG, random fills, and a
 * backend of a given thread count. Header-only (each test_*.c is its own executable). */
#ifndef QUILL_BACKEND_TEST_UTIL_H
#define QUILL_BACKEND_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "backend/backend.h"

typedef struct trng { uint64_t s; } trng;

static inline uint64_t trng_next(trng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline float trng_unif(trng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(trng_next(r) >> 40) / (double)(1ull << 24));
}
static inline void trng_fill(trng *r, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = trng_unif(r, lo, hi);
}

/* calloc that fails the test instead of returning NULL */
static inline void *tcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) fail_msg("out of memory");
    return p;
}
static inline float *tfloats(int64_t n) { return tcalloc((size_t)n, sizeof(float)); }
static inline float *tcopy(const float *x, int64_t n) {
    float *p = tfloats(n);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

static inline qbackend *tbackend(int n_threads) {
    qbackend *be = NULL;
    assert_ok(cpu_backend_create(n_threads, &be));
    return be;
}

/* max |a - b| over n, and max |b| (the scale a tolerance is relative to) */
static inline double tmax_diff(const float *a, const double *b, int64_t n, double *scale) {
    double m = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* catches nan */
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    if (scale) *scale = s;
    return m;
}

#define assert_bits_equal(a, b, n) assert_memory_equal((a), (b), (size_t)(n) * sizeof(float))

#endif
