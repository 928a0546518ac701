/* test_sample.c: the sampler (engine/sample.c) and the draw it shares with the backends (backend/draw.c).
 * - draws follow softmax(x / T): frequencies over many positions within 5 sigma of the probabilities;
 * - min-p, top-k (ties by id) and top-p keep the sets the rules name, and the draw among them is renormalised;
 * - non-finite logits never win; a row without a finite one, and temperature 0, give the greedy choice;
 * - a (seed, position) pair always gives the same token, and other positions and seeds give others;
 * - on a 248k vocabulary: draw_row (which skips the noise of logits that cannot win) equals a plain argmax of every
 *   score, sample_token takes draw_row's answer where the backend draws, and the top-k / top-p answers lie in the
 *   sets a full sort gives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sample.h"
#include "harness.h"

#define DRAWS 40000

/* Draws tokens at positions 0 .. DRAWS-1 of logits x[n] and counts them. */
static void count_draws(const float *x, int n, const qsampling *p, int *count) {
    sample_cand *work = malloc((size_t)n * sizeof *work);
    assert_non_null(work);
    memset(count, 0, (size_t)n * sizeof *count);
    for (int pos = 0; pos < DRAWS; pos++) {
        const int32_t t = sample_token(x, n, p, pos, work);
        assert_true(t >= 0 && t < n);
        count[t]++;
    }
    free(work);
}

/* Each count within 5 sigma of DRAWS * prob (prob 0: never drawn). */
static void expect_freq(const int *count, const double *prob, int n) {
    for (int i = 0; i < n; i++) {
        const double mean = DRAWS * prob[i], sd = sqrt(DRAWS * prob[i] * (1.0 - prob[i]));
        if (prob[i] == 0.0) assert_int_equal(count[i], 0);
        else if (fabs(count[i] - mean) > 5.0 * sd + 1.0)
            fail_msg("token %d drawn %d times, expected %.1f +- %.1f", i, count[i], mean, sd);
    }
}

static qsampling at(float t) {
    qsampling p = qsampling_default();
    p.temperature = t;
    p.seed = 1234;
    return p;
}

static void test_softmax_frequencies(void **state) {
    (void)state;
    const float x[5] = {2.0f, 1.0f, 0.5f, -1.0f, 0.0f};
    const float T = 0.8f;
    double prob[5], sum = 0.0;
    for (int i = 0; i < 5; i++) sum += prob[i] = exp(x[i] / T);
    for (int i = 0; i < 5; i++) prob[i] /= sum;
    int count[5];
    const qsampling p = at(T);
    count_draws(x, 5, &p, count);
    expect_freq(count, prob, 5);
}

static void test_min_p(void **state) {
    (void)state;
    const float x[4] = {0.0f, -1.0f, -3.0f, -5.0f}; /* at T = 1: 1, 0.37, 0.050, 0.0067 of the top */
    qsampling p = at(1.0f);
    p.min_p = 0.04f;
    const double s = 1.0 + exp(-1.0) + exp(-3.0);
    const double prob[4] = {1.0 / s, exp(-1.0) / s, exp(-3.0) / s, 0.0};
    int count[4];
    count_draws(x, 4, &p, count);
    expect_freq(count, prob, 4);
    p.min_p = 1.0f; /* only the top */
    count_draws(x, 4, &p, count);
    assert_int_equal(count[0], DRAWS);
}

static void test_top_k_ties_by_id(void **state) {
    (void)state;
    const float x[5] = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
    qsampling p = at(1.0f);
    p.top_k = 2; /* three logits of 3: the two lowest ids */
    const double prob[5] = {0.0, 0.5, 0.5, 0.0, 0.0};
    int count[5];
    count_draws(x, 5, &p, count);
    expect_freq(count, prob, 5);
}

static void test_top_p(void **state) {
    (void)state;
    const float x[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    qsampling p = at(1.0f);
    p.top_p = 0.75f; /* 0.5 < 0.75 <= 0.8: the first two */
    const double two[4] = {0.625, 0.375, 0.0, 0.0};
    int count[4];
    count_draws(x, 4, &p, count);
    expect_freq(count, two, 4);
    p.top_k = 3; /* over the top three (0.95): 0.526, 0.842, then 1 >= 0.9: all three */
    p.top_p = 0.9f;
    const double three[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
    count_draws(x, 4, &p, count);
    expect_freq(count, three, 4);
    p.top_k = 0; /* and min-p cuts first where it is tighter */
    p.min_p = 0.5f;
    count_draws(x, 4, &p, count);
    expect_freq(count, two, 4);
}

static void test_non_finite_and_greedy(void **state) {
    (void)state;
    const float x[5] = {NAN, -INFINITY, 1.0f, INFINITY, 0.0f};
    const double prob[5] = {0.0, 0.0, 1.0 / (1.0 + exp(-1.0)), 0.0, exp(-1.0) / (1.0 + exp(-1.0))};
    int count[5];
    qsampling p = at(1.0f);
    count_draws(x, 5, &p, count);
    expect_freq(count, prob, 5);
    p.top_k = 1;
    count_draws(x, 5, &p, count);
    assert_int_equal(count[2], DRAWS);
    sample_cand work[3];
    const float none[3] = {NAN, -INFINITY, NAN}; /* no finite logit: the greedy choice, the scan's 0 */
    assert_int_equal(sample_token(none, 3, &p, 7, work), 0);
    const float ties[4] = {1.0f, 5.0f, 5.0f, NAN};
    const qsampling g = at(0.0f);
    assert_int_equal(sample_token(ties, 4, &g, 3, work), 1);
    const qdraw greedy = draw_params(0.0, 0.0, 0, 1.0, 99);
    assert_int_equal(draw_row(ties, 4, &greedy, NULL), 1);
    const float nan_first[3] = {NAN, 2.0f, 3.0f};
    assert_int_equal(draw_row(nan_first, 3, &greedy, NULL), 0); /* argmax's rule */
}

static void test_keyed(void **state) {
    (void)state;
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = 0.0f; /* uniform: every token equally likely */
    sample_cand work[64];
    qsampling p = at(1.0f);
    int differ_pos = 0, differ_seed = 0;
    for (int pos = 0; pos < 200; pos++) {
        const int32_t a = sample_token(x, 64, &p, pos, work);
        assert_int_equal(sample_token(x, 64, &p, pos, work), a);
        differ_pos += a != sample_token(x, 64, &p, pos + 1, work);
        qsampling q = p;
        q.seed = p.seed + 1;
        differ_seed += a != sample_token(x, 64, &q, pos, work);
    }
    assert_true(differ_pos > 180 && differ_seed > 180); /* 1/64 of them equal by chance */
}

static int by_order(const void *a, const void *b) {
    const sample_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void test_large_vocabulary(void **state) {
    (void)state;
    const int V = 248320;
    float *x = malloc((size_t)V * sizeof *x);
    sample_cand *work = malloc((size_t)V * sizeof *work), *sorted = malloc((size_t)V * sizeof *sorted);
    assert_true(x && work && sorted);
    srand(7);
    for (int i = 0; i < V; i++) x[i] = (float)(rand() % 20000) / 1000.0f - 10.0f; /* ties among 20k values */
    for (int i = 0; i < V; i++) sorted[i] = (sample_cand){x[i], i};
    qsort(sorted, (size_t)V, sizeof *sorted, by_order);
    const float max = sorted[0].logit;
    for (int pos = 0; pos < 6; pos++) {
        qsampling p = at(pos < 3 ? 0.5f : 1.5f);
        p.min_p = pos % 3 == 2 ? 0.01f : 0.0f;
        const qdraw d = sample_draw(&p, pos);
        int32_t plain = -1;
        double best = 0.0;
        for (int i = 0; i < V; i++) { /* every score, no skipping */
            if ((double)x[i] - max < d.min_rel) continue;
            const double s = draw_score(x[i], d.temperature, d.key, i);
            if (plain < 0 || s > best) plain = i, best = s;
        }
        assert_int_equal(draw_row(x, V, &d, NULL), plain);
        assert_int_equal(sample_token(x, V, &p, pos, work), plain);
        p.top_k = 20;
        const int32_t k = sample_token(x, V, &p, pos, work);
        int in_k = 0;
        for (int j = 0; j < 20; j++) in_k |= sorted[j].id == k;
        assert_true(in_k);
        p.top_k = 0;
        p.top_p = 0.3f;
        const int32_t t = sample_token(x, V, &p, pos, work);
        double total = 0.0, cum = 0.0;
        for (int j = 0; j < V; j++) total += exp(((double)sorted[j].logit - max) / p.temperature);
        int in_p = 0;
        for (int j = 0; j < V && cum < 0.3 * total * (1.0 + 1e-9); j++) {
            cum += exp(((double)sorted[j].logit - max) / p.temperature);
            in_p |= sorted[j].id == t;
        }
        assert_true(in_p);
    }
    free(x);
    free(work);
    free(sorted);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_frequencies),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_top_k_ties_by_id),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_non_finite_and_greedy),
        cmocka_unit_test(test_keyed),
        cmocka_unit_test(test_large_vocabulary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
