/* sample.c: greedy and filtered sampling (see sample.h). Candidates are ordered by logit, then by id, so
 * the filters' sets never depend on how they are found. None of it sorts the vocabulary: top-k keeps a
 * bounded heap over one scan, top-p pops a heap only as far as its mass reaches, and the draw needs no
 * order at all (a vocabulary of 248k sorted for every token cost ~50 ms on a server's CPU). */
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

int32_t sample_argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int sample_on_backend(const qsampling *p) {
    return p->temperature <= 0.0f || (p->top_k == 0 && p->top_p >= 1.0f);
}

qdraw sample_draw(const qsampling *p, int64_t position) {
    return draw_params(p->temperature, p->min_p, draw_key(p->seed, position));
}

/* a comes before b: the larger logit, the lower id on ties. */
static int before(sample_cand a, sample_cand b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

/* Sifts h[i] down a heap of n whose root comes first (top = 1) or last (top = 0) in the order. */
static void sift(sample_cand *h, int n, int i, int top) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(h[c + 1], h[c]) == top) c++;
        if (before(h[c], h[i]) != top) return;
        sample_cand t = h[i];
        h[i] = h[c], h[c] = t, i = c;
    }
}

/* Moves the first k of w[0..m) in the order to w[0..k) (in no order): a heap of the k best so far whose root is
 * the last of them, one scan. */
static void keep_top_k(sample_cand *w, int m, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) sift(w, k, i, 0);
    for (int j = k; j < m; j++)
        if (before(w[j], w[0])) {
            w[0] = w[j];
            sift(w, k, 0, 0);
        }
}

/* The top-p set of w[0..k) (in order, min-p's cut on the way): the first candidates whose mass
 * exp((logit - max) / T) reaches top_p of the set's; they end at w[k - n .. k). Returns n. */
static int keep_top_p(sample_cand *w, int k, double max, const qdraw *d, double top_p) {
    double total = 0.0;
    for (int i = 0; i < k; i++) total += exp(((double)w[i].logit - max) / d->temperature);
    const double target = top_p * total;
    for (int i = k / 2 - 1; i >= 0; i--) sift(w, k, i, 1);
    double cum = 0.0;
    int n = 0;
    for (int left = k; left > 0 && cum < target;) {
        const sample_cand c = w[0];
        if ((double)c.logit - max < d->min_rel) break;
        w[0] = w[--left]; /* pop: the root goes to the end, where the kept ones collect */
        sift(w, left, 0, 1);
        w[left] = c;
        cum += exp(((double)c.logit - max) / d->temperature);
        n++;
    }
    return n;
}

int32_t sample_token(const float *logits, int n, const qsampling *p, int64_t position, sample_cand *work) {
    if (p->temperature <= 0.0f) return sample_argmax(logits, n);
    const qdraw d = sample_draw(p, position);
    if (sample_on_backend(p)) return draw_row(logits, n, &d);
    int m = 0;
    float max = 0.0f;
    for (int i = 0; i < n; i++)
        if (isfinite(logits[i])) {
            if (m == 0 || logits[i] > max) max = logits[i];
            work[m++] = (sample_cand){logits[i], i};
        }
    if (m == 0) return sample_argmax(logits, n);
    const int k = p->top_k > 0 && p->top_k < m ? p->top_k : m;
    if (k < m) keep_top_k(work, m, k);
    const sample_cand *c = work;
    int kept = k;
    if (p->top_p < 1.0f) {
        kept = keep_top_p(work, k, max, &d, p->top_p);
        c = work + k - kept;
    }
    int32_t best = -1;
    double best_s = 0.0;
    for (int i = 0; i < kept; i++) { /* the draw among them; top-p's set passed min-p already */
        if ((double)c[i].logit - (double)max < d.min_rel) continue;
        const double s = draw_score(c[i].logit, d.temperature, d.key, c[i].id);
        if (best < 0 || s > best_s || (s == best_s && c[i].id < best)) best = c[i].id, best_s = s;
    }
    return best; /* >= 0: the largest logit is among the candidates and passes min-p */
}
