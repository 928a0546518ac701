/* draw.c: the host's draw of one row (draw.h): the CPU backend's op, the engine's sampler and the GPU op's fallback
 * call it. None of it sorts the vocabulary: the draw needs no order, top-k keeps a bounded heap over one scan and
 * sorts only its k, top-p pops a heap only as far as its mass reaches (a vocabulary of 248k sorted for every token
 * cost ~40 ms on a server's CPU). */
#include "draw.h"

#include <stdlib.h>

int32_t draw_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* a comes before b: the larger logit, the lower id on ties. */
static int before(draw_cand a, draw_cand b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }
static int by_order(const void *a, const void *b) {
    return before(*(const draw_cand *)a, *(const draw_cand *)b) ? -1 : 1; /* ids differ: never equal */
}

/* Sifts h[i] down a heap of n whose root comes first (top = 1) or last (top = 0) in the order. */
static void sift(draw_cand *h, int n, int i, int top) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(h[c + 1], h[c]) == top) c++;
        if (before(h[c], h[i]) != top) return;
        draw_cand t = h[i];
        h[i] = h[c], h[c] = t, i = c;
    }
}

/* Moves the first k of w[0..m) in the order to w[0..k), sorted: a heap of the k best so far whose root is the last
 * of them, one scan, then a sort of the k. */
static void keep_top_k(draw_cand *w, int m, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) sift(w, k, i, 0);
    for (int j = k; j < m; j++)
        if (before(w[j], w[0])) {
            w[0] = w[j];
            sift(w, k, 0, 0);
        }
    qsort(w, (size_t)k, sizeof *w, by_order);
}

static double mass(draw_cand c, double max, const qdraw *d) { return exp(((double)c.logit - max) / d->temperature); }

/* The draw among the finite logits w[0..m) (in id order) that the cuts leave. */
static int32_t draw_cut(draw_cand *w, int m, double max, const qdraw *d) {
    const draw_cand *c = w;
    int kept = 0;
    double cum = 0.0;
    if (d->top_k > 0) { /* the first k, in order; top-p over their mass */
        const int k = d->top_k < m ? d->top_k : m;
        keep_top_k(w, m, k);
        double total = 0.0;
        for (int i = 0; i < k && d->top_p < 1.0; i++) total += mass(w[i], max, d);
        for (; kept < k && (double)w[kept].logit - max >= d->min_rel; kept++)
            if (d->top_p < 1.0 && (cum += mass(w[kept], max, d)) >= d->top_p * total) {
                kept++; /* the candidate that reaches the share is kept */
                break;
            }
    } else { /* top-p over every finite logit's mass: pop a heap in order until it reaches the share */
        double total = 0.0;
        for (int i = 0; i < m; i++) total += mass(w[i], max, d);
        for (int i = m / 2 - 1; i >= 0; i--) sift(w, m, i, 1);
        for (int left = m; left > 0 && cum < d->top_p * total;) {
            const draw_cand top = w[0];
            if ((double)top.logit - max < d->min_rel) break;
            w[0] = w[--left]; /* the root goes to the end, where the kept ones collect */
            sift(w, left, 0, 1);
            w[left] = top;
            cum += mass(top, max, d);
            kept++;
        }
        c = w + m - kept;
    }
    int32_t best = -1;
    double best_s = 0.0;
    for (int i = 0; i < kept; i++) {
        const double s = draw_score(c[i].logit, d->temperature, d->key, c[i].id);
        if (best < 0 || s > best_s || (s == best_s && c[i].id < best)) best = c[i].id, best_s = s;
    }
    return best; /* >= 0: the top passes every cut */
}

int32_t draw_row(const float *x, int n, const qdraw *d, draw_cand *work) {
    if (n <= 0) return 0;
    if (!(d->temperature > 0.0)) return draw_argmax(x, n);
    float max = 0.0f;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i]) && (m++ == 0 || x[i] > max)) max = x[i];
    if (m == 0) return draw_argmax(x, n);
    if (!draw_whole_row(d)) {
        for (int i = 0, j = 0; i < n; i++)
            if (isfinite(x[i])) work[j++] = (draw_cand){x[i], i};
        return draw_cut(work, m, max, d);
    }
    const double T = d->temperature;
    int32_t best = -1;
    double best_s = 0.0;
    for (int i = 0; i < n; i++) {
        const float v = x[i];
        if (!isfinite(v) || (double)v - (double)max < d->min_rel) continue;
        if (best >= 0 && (double)v / T + DRAW_G_MAX < best_s) continue; /* cannot reach the best: no noise needed */
        const double s = draw_score(v, T, d->key, i);
        if (best < 0 || s > best_s) best = i, best_s = s; /* equal scores: the first (lowest i) stays */
    }
    return best;
}
