/* draw.h: one sampled token from a row of logits (the backend op draw; engine/sample.c), by the Gumbel-max rule.
 *
 * The token is argmax_i (x_i / T + g_i), where g_i = -log(-log u_i) and u_i, uniform in (0, 1), is hashed from the
 * row's key and i alone. That is a draw from softmax(x / T) (Gumbel 1954; the "Gumbel-max trick"), and it needs no
 * sort, no sum and no order: every logit carries its own noise, so a chunk of the row can be scored anywhere and the
 * winner is the largest score, the lowest i among equal ones. A GPU therefore draws as it takes an argmax, and only
 * the id leaves it. The key is hashed from the request's seed and the token's position, so a stream's tokens do not
 * depend on what else shares its rounds.
 *
 * The functions below are the whole arithmetic; the host (draw.c) and the CUDA kernels (cuda_draw.cu) both include
 * them. Doubles: x / T and the two logs are IEEE operations the host and the GPU both round to nearest, except the
 * logs, whose last bit may differ between libm and CUDA (within 1 ulp); two scores that close (~1e-16 apart) are
 * the only case where the two can pick different ids. */
#ifndef QUILL_BACKEND_DRAW_H
#define QUILL_BACKEND_DRAW_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define QD_FN static inline __host__ __device__
#else
#define QD_FN static inline
#endif

/* One row's draw. temperature <= 0: the greedy choice instead (argmax's rule). The candidates, in the order of
 * their logits (the lower id first among equal ones), are the row's finite logits cut by, in turn:
 * - top_k > 0: the first top_k;
 * - min_rel: only those with (double)x_i - max >= min_rel, max the row's largest finite logit (min_p: T log(min_p),
 *   a probability at least min_p times the top one's; -INFINITY: none cut);
 * - top_p < 1: the shortest prefix whose mass, sum of exp(((double)x_i - max) / T) in order, reaches top_p of the
 *   set's (the top_k set's where top_k > 0, else every finite logit's).
 * The draw picks among what is left. key: draw_key(seed, position). */
typedef struct qdraw {
    double temperature;
    double min_rel;
    double top_p;
    int32_t top_k;
    uint64_t key;
} qdraw;

/* A candidate: a logit and its id. */
typedef struct draw_cand {
    float logit;
    int32_t id;
} draw_cand;

/* splitmix64's output function (Steele, Lea and Flood 2014), a strong 64-bit mixer. */
QD_FN uint64_t draw_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The key of the token at `position` of a stream seeded with `seed`. */
QD_FN uint64_t draw_key(uint64_t seed, int64_t position) { return draw_mix(draw_mix(seed) ^ (uint64_t)position); }

/* Logit i's noise: u = (53 hashed bits + 1/2) 2^-53, strictly inside (0, 1), so g is finite: |g| < 38. */
QD_FN double draw_gumbel(uint64_t key, int64_t i) {
    const double u = ((double)(draw_mix(key + (uint64_t)i) >> 11) + 0.5) * 0x1p-53;
    return -log(-log(u));
}

/* No noise reaches this (the largest u gives 54 ln 2 = 37.4): a logit whose x / T + DRAW_G_MAX is below the best score
 * so far cannot win, so its noise need not be made (the host's scan skips it; the result is the same). */
#define DRAW_G_MAX 38.0

/* Logit i's score. */
QD_FN double draw_score(float x, double temperature, uint64_t key, int64_t i) {
    return (double)x / temperature + draw_gumbel(key, i);
}

/* The draw's parameters for a temperature, a min_p (0: none), a top_k (0: none), a top_p (1: none) and a key. */
QD_FN qdraw draw_params(double temperature, double min_p, int top_k, double top_p, uint64_t key) {
    qdraw d;
    d.temperature = temperature;
    d.min_rel = min_p > 0.0 ? temperature * log(min_p) : -INFINITY;
    d.top_p = top_p;
    d.top_k = top_k;
    d.key = key;
    return d;
}

/* Whether the draw is over every finite logit (no top-k, no top-p): no order is needed. */
QD_FN int draw_whole_row(const qdraw *d) { return d->top_k == 0 && !(d->top_p < 1.0); }

/* The greedy choice of a row of n logits: the first index of the largest, each element winning only if strictly
 * greater than the best so far, so NaNs never win and x[0] NaN gives 0 (the argmax op's rule; draw.c). */
#ifdef __cplusplus
extern "C"
#endif
int32_t draw_argmax(const float *x, int n);

/* The host's draw of one row of n logits (draw.c): the token the rules above give. A row without a finite logit, or
 * a temperature <= 0, gives the greedy choice (the first largest; NaNs never win; x[0] NaN gives 0). work: n
 * entries of scratch where top-k or top-p cut (NULL where draw_whole_row). */
#ifdef __cplusplus
extern "C"
#endif
int32_t draw_row(const float *x, int n, const qdraw *d, draw_cand *work);

#endif
