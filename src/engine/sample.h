/* sample.h: choosing the next token from logits. Greedy at temperature 0; otherwise top-k, top-p and
 * min-p keep a set of candidates and one draw picks among them by the Gumbel-max rule (backend/draw.h),
 * its noise keyed by (seed, position, token id). So a reply's tokens depend only on (logits, parameters,
 * seed, position): EXACT(draft) and EXACT(batch) need that no draw depends on how many draws came before.
 * The forward makes the draw on the backend (QROW_DRAW with sample_draw's parameters): no logits leave
 * the GPU; sample_token is the same rule on logits the host holds. */
#ifndef QUILL_SAMPLE_H
#define QUILL_SAMPLE_H

#include <stdint.h>

#include "../backend/draw.h"
#include "../util/status.h"

typedef struct qsampling {
    float temperature; /* <= 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    uint64_t seed;
} qsampling;

qsampling qsampling_default(void);
/* Validates ranges: temperature >= 0, top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1. Names the field. */
qstatus qsampling_check(const qsampling *p);

/* Index of the largest logit (the first on ties). */
int32_t sample_argmax(const float *logits, int n_vocab);

/* The draw's parameters for the token at `position` (the stream's length once the logits' row is in: the
 * row's position + 1). */
qdraw sample_draw(const qsampling *p, int64_t position);

/* Picks a token: the greedy choice, or draw_row with sample_draw's parameters. work: caller-owned scratch of
 * n_vocab entries, so the hot path does not allocate. */
typedef draw_cand sample_cand;
int32_t sample_token(const float *logits, int n_vocab, const qsampling *p, int64_t position,
                     sample_cand *work);

#endif
