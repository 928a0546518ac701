/* draw.c: the host's draw of one row (draw.h): the CPU backend's op and the engine's sampler call it. */
#include "draw.h"

static int32_t greedy(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int32_t draw_row(const float *x, int n, const qdraw *d) {
    if (n <= 0) return 0;
    if (!(d->temperature > 0.0)) return greedy(x, n);
    float max = 0.0f;
    int any = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i]) && (!any || x[i] > max)) max = x[i], any = 1;
    if (!any) return greedy(x, n);
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
