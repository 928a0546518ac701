/* sample.h: choosing the next token from logits. Greedy at temperature 0; otherwise top-k, top-p and
 * min-p keep a set of candidates and one draw picks among them by the Gumbel-max rule (backend/draw.h),
 * its noise keyed by (seed, position, token id). So a reply's tokens depend only on (logits, parameters,
 * seed, position): EXACT(draft) and EXACT(batch) need that no draw depends on how many draws came before.
 * Without top-k and top-p the draw is the backend's op (sample_on_backend): no logits leave the GPU. */
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

/* Whether the backend's draw op gives this request's tokens (greedy, or neither top-k nor top-p: the draw
 * over every logit, min-p included): then the forward returns ids, not logits. */
int sample_on_backend(const qsampling *p);
/* The draw op's parameters for the token at `position` (the stream's length once the logits' row is in:
 * the row's position + 1). */
qdraw sample_draw(const qsampling *p, int64_t position);

/* Picks a token: the greedy choice, or the draw among top-k / top-p / min-p's candidates (sample_on_backend's
 * cases: draw_row over the whole row, the op's result). work: caller-owned scratch of n_vocab entries, so the
 * hot path does not allocate. */
typedef struct sample_cand { float logit; int32_t id; } sample_cand;
int32_t sample_token(const float *logits, int n_vocab, const qsampling *p, int64_t position,
                     sample_cand *work);

#endif
