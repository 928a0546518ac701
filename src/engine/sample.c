/* sample.c: greedy and filtered sampling (see sample.h); the rules themselves are backend/draw.c's. */
#include "sample.h"

#include <math.h>

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

int32_t sample_argmax(const float *logits, int n) { return draw_argmax(logits, n); }

qdraw sample_draw(const qsampling *p, int64_t position) {
    return draw_params(p->temperature, p->min_p, p->top_k, p->top_p, draw_key(p->seed, position));
}

int32_t sample_token(const float *logits, int n, const qsampling *p, int64_t position, sample_cand *work) {
    const qdraw d = sample_draw(p, position); /* temperature 0: draw_row takes the argmax */
    return draw_row(logits, n, &d, work);
}
