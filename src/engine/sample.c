/* sample.c: greedy and filtered sampling (see sample.h). Candidates are ordered by logit, then by id,
 * so ties never depend on sort stability. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>

qsampling qsampling_default(void) {
    return (qsampling){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
}

qstatus qsampling_check(const qsampling *p) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return q_fail(Q_EINVAL, "temperature must be a finite number >= 0");
    if (p->top_k < 0) return q_fail(Q_EINVAL, "top_k must be >= 0");
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return q_fail(Q_EINVAL, "top_p must be in (0, 1]");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return q_fail(Q_EINVAL, "min_p must be in [0, 1]");
    return Q_OK;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double sample_uniform(uint64_t seed, int64_t position) {
    uint64_t r = splitmix64(splitmix64(seed) ^ (uint64_t)position);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0); /* 53 bits */
}

int32_t sample_argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static int cand_cmp(const void *a, const void *b) {
    const sample_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

int32_t sample_token(const float *logits, int n, const qsampling *p, int64_t position,
                     sample_cand *work) {
    if (p->temperature <= 0.0f) return sample_argmax(logits, n);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(logits[i])) work[m++] = (sample_cand){logits[i], i};
    if (m == 0) return sample_argmax(logits, n);
    qsort(work, (size_t)m, sizeof *work, cand_cmp);
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    /* softmax over the kept candidates at the temperature; logit becomes the probability */
    double sum = 0.0, max = work[0].logit;
    for (int i = 0; i < m; i++) {
        double e = exp(((double)work[i].logit - max) / p->temperature);
        work[i].logit = (float)e;
        sum += e;
    }
    double cum = 0.0;
    int keep = m;
    for (int i = 0; i < m; i++) {
        double pi = work[i].logit / sum;
        if (p->min_p > 0.0f && pi < p->min_p * (work[0].logit / sum)) { keep = i; break; }
        cum += pi;
        if (cum >= p->top_p) { keep = i + 1; break; }
    }
    if (keep < 1) keep = 1;
    double total = 0.0;
    for (int i = 0; i < keep; i++) total += work[i].logit;
    double u = sample_uniform(p->seed, position) * total, acc = 0.0;
    for (int i = 0; i < keep; i++) {
        acc += work[i].logit;
        if (u < acc) return work[i].id;
    }
    return work[keep - 1].id;
}
