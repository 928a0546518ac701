/* test_cuda_head.c: head_argmax (an 8-bit sketch of a bf16 lm_head, cuda_head_sketch.cuh) gives the id that matmul
 * then argmax give, on random heads and rows, rows with outliers, tied rows (the first wins), rows one bf16 step
 * apart, and a row that is not finite (-1: the caller runs the head); a head with a value that is not finite gets no
 * sketch. */
#include "cuda_test_util.h"

/* The full head's id and the sketch's for row x (device buffers). */
static void both_ids(const wpair *W, const void *sk, const buf *x, const buf *lg, const buf *id, int32_t *full,
                     int32_t *fast) {
    OK(gpu->ops->matmul(gpu, x->g, 1, &W->g, lg->g));
    OK(gpu->ops->argmax(gpu, lg->g, 1, (int)W->g.n_out, id->g));
    OK(gpu->ops->download(gpu, full, id->g, 4));
    OK(gpu->ops->head_argmax(gpu, x->g, &W->g, sk, id->g));
    OK(gpu->ops->download(gpu, fast, id->g, 4));
}

/* Row r of a bf16 weight as floats (host). */
static void row_of(const wpair *W, int64_t r, float *out) {
    const int64_t K = W->g.n_in;
    uint16_t *h = xmalloc((size_t)K * 2);
    OK(gpu->ops->download(gpu, h, (const uint16_t *)W->w.g + r * K, (size_t)K * 2));
    for (int64_t k = 0; k < K; k++) {
        const uint32_t u = (uint32_t)h[k] << 16;
        memcpy(&out[k], &u, 4);
    }
    free(h);
}

static void test_random_rows(void) {
    const int shapes[3][2] = {{20000, 512}, {6000, 4096}, {3000, 1024}};
    for (int s = 0; s < 3; s++) {
        const int V = shapes[s][0], K = shapes[s][1];
        wpair W = mk_weight(QW_BF16, V, K, 0, 0);
        void *sk = NULL;
        int64_t bytes = 0;
        OK(gpu->ops->head_sketch_make(gpu, &W.g, &sk, &bytes));
        char name[96];
        snprintf(name, sizeof name, "head sketch made, %dx%d", V, K);
        expect_flag(name, sk != NULL && bytes >= (int64_t)V * K);
        buf lg = mk((size_t)V * 4, NULL), id = mk(4, NULL);
        int same = 1, decided = 0;
        float *hx = xmalloc((size_t)K * 4);
        for (int t = 0; t < 12 && sk; t++) {
            const float scale = t < 4 ? 1.0f : t < 8 ? 1e-3f : 40.0f;
            for (int k = 0; k < K; k++) hx[k] = frand() * scale * (t % 4 == 3 && k % 97 == 0 ? 30.0f : 1.0f);
            buf x = mk((size_t)K * 4, hx);
            int32_t full, fast;
            both_ids(&W, sk, &x, &lg, &id, &full, &fast);
            same &= fast == full || fast == -1;
            decided += fast != -1;
            rm(x);
        }
        snprintf(name, sizeof name, "head_argmax = argmax, %dx%d, 12 rows", V, K);
        expect_flag(name, same);
        snprintf(name, sizeof name, "head_argmax decided, %dx%d (%d of 12)", V, K, decided);
        expect_flag(name, decided >= 10);
        free(hx);
        if (sk) gpu->ops->head_sketch_free(gpu, sk);
        rm(lg); rm(id); rm_weight(W);
    }
}

/* Rows 7, 5000 and V - 1 hold one row's values, x is that row: their logit is the largest, tied (the first wins);
 * rows 11 and 12 differ from row 3 by one bf16 step in one value, x is row 3. */
static void test_ties(void) {
    const int V = 8000, K = 2048;
    wpair W = mk_weight(QW_BF16, V, K, 0, 0);
    uint16_t *r = xmalloc((size_t)K * 2);
    float *rf = xmalloc((size_t)K * 4);
    /* positive and larger than the rest (|w| < 0.1), on the even values (the odd ones 0; row 3's the other way round,
     * so that neither row's x favours the other's rows) */
    for (int k = 0; k < K; k++) rf[k] = k % 2 ? 0.0f : 0.5f + 0.1f * frand();
    bf16_from(rf, r, (size_t)K);
    const int64_t tied[3] = {7, 5000, V - 1};
    for (int i = 0; i < 3; i++) OK(gpu->ops->upload(gpu, (uint16_t *)W.w.g + tied[i] * K, r, (size_t)K * 2));
    for (int k = 0; k < K; k++) rf[k] = k % 2 ? 0.5f + 0.1f * frand() : 0.0f;
    bf16_from(rf, r, (size_t)K);
    for (int i = 0; i < 2; i++) {
        r[101] = (uint16_t)(r[101] + (i ? 1 : -1)); /* 12: one step up; 11: one step down (then back) */
        OK(gpu->ops->upload(gpu, (uint16_t *)W.w.g + (int64_t)(11 + i) * K, r, (size_t)K * 2));
        r[101] = (uint16_t)(r[101] - (i ? 1 : -1));
    }
    OK(gpu->ops->upload(gpu, (uint16_t *)W.w.g + (int64_t)3 * K, r, (size_t)K * 2));
    void *sk = NULL;
    int64_t bytes = 0;
    OK(gpu->ops->head_sketch_make(gpu, &W.g, &sk, &bytes));
    buf lg = mk((size_t)V * 4, NULL), id = mk(4, NULL);
    float *hx = xmalloc((size_t)K * 4);
    int32_t full[2], fast[2];
    const int64_t src[2] = {7, 3};
    for (int i = 0; i < 2 && sk; i++) {
        row_of(&W, src[i], hx);
        buf x = mk((size_t)K * 4, hx);
        both_ids(&W, sk, &x, &lg, &id, &full[i], &fast[i]);
        rm(x);
    }
    expect_flag("head_argmax: tied rows, the first wins", sk && full[0] == 7 && fast[0] == 7);
    expect_flag("head_argmax: rows one bf16 step apart", sk && fast[1] == full[1] && full[1] == 12);
    /* a row that is not finite: undecided */
    hx[5] = NAN;
    buf x = mk((size_t)K * 4, hx);
    int32_t f = 0;
    if (sk) OK(gpu->ops->head_argmax(gpu, x.g, &W.g, sk, id.g));
    OK(gpu->ops->download(gpu, &f, id.g, 4));
    expect_flag("head_argmax: a NaN in x gives -1", sk && f == -1);
    /* more candidates than it takes: 600 more copies of row 7, x row 7 */
    uint16_t *r7 = xmalloc((size_t)K * 2);
    OK(gpu->ops->download(gpu, r7, (const uint16_t *)W.w.g + (int64_t)7 * K, (size_t)K * 2));
    for (int64_t i = 1000; i < 1600; i++) OK(gpu->ops->upload(gpu, (uint16_t *)W.w.g + i * K, r7, (size_t)K * 2));
    free(r7);
    if (sk) gpu->ops->head_sketch_free(gpu, sk);
    sk = NULL;
    OK(gpu->ops->head_sketch_make(gpu, &W.g, &sk, &bytes));
    row_of(&W, 7, hx);
    buf x7 = mk((size_t)K * 4, hx);
    int32_t f7 = 0, g7 = 0;
    if (sk) both_ids(&W, sk, &x7, &lg, &id, &f7, &g7);
    expect_flag("head_argmax: 603 tied rows, more than it takes: -1", sk && f7 == 7 && g7 == -1);
    rm(x7);
    if (sk) gpu->ops->head_sketch_free(gpu, sk);
    /* a weight that is not finite: no sketch */
    r[9] = 0x7f80u; /* +inf */
    OK(gpu->ops->upload(gpu, (uint16_t *)W.w.g + (int64_t)42 * K, r, (size_t)K * 2));
    sk = NULL;
    OK(gpu->ops->head_sketch_make(gpu, &W.g, &sk, &bytes));
    expect_flag("head sketch: an inf in the head, none", sk == NULL);
    if (sk) gpu->ops->head_sketch_free(gpu, sk);
    /* shapes it does not take */
    wpair W2 = mk_weight(QW_BF16, 300, 640, 0, 0), W4 = mk_weight(QW_AFFINE, 300, 512, 4, 64);
    void *s2 = NULL, *s4 = NULL;
    OK(gpu->ops->head_sketch_make(gpu, &W2.g, &s2, &bytes));
    OK(gpu->ops->head_sketch_make(gpu, &W4.g, &s4, &bytes));
    expect_flag("head sketch: n_in % 512, 4-bit: none", !s2 && !s4);
    free(r); free(rf); free(hx);
    rm(x); rm(lg); rm(id); rm_weight(W); rm_weight(W2); rm_weight(W4);
}

int main(void) {
    static void (*const tests[])(void) = {test_random_rows, test_ties};
    return run_cuda_tests(tests, (int)(sizeof tests / sizeof tests[0]));
}
