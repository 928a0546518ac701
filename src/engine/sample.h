/* sample.h: choosing the next token from logits. Greedy at temperature 0; otherwise top-k, top-p and
 * min-p filters, then one draw from a counter-based RNG keyed by (seed, position), so a reply's
 * tokens depend only on (logits, parameters, seed, position): EXACT(draft) and EXACT(batch) need that
 * no draw depends on how many draws came before. */
#ifndef QUILL_SAMPLE_H
#define QUILL_SAMPLE_H

#include <stdint.h>

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

/* Uniform double in [0, 1) for (seed, position). */
double sample_uniform(uint64_t seed, int64_t position);

/* Index of the largest logit (the first on ties). */
int32_t sample_argmax(const float *logits, int n_vocab);

/* Picks a token. work: caller-owned scratch of n_vocab entries (see sample_work_size), so the hot
 * path does not allocate. */
typedef struct sample_cand { float logit; int32_t id; } sample_cand;
int32_t sample_token(const float *logits, int n_vocab, const qsampling *p, int64_t position,
                     sample_cand *work);

#endif
