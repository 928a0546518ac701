/* generate.h: one stream, start to finish: prefill the prompt in chunks, then decode token by token.
 * What `quill run` and the golden tests use; the server's rounds (many streams) come later and must
 * give the same tokens (the exactness contract). */
#ifndef QUILL_GENERATE_H
#define QUILL_GENERATE_H

#include <stdint.h>

#include "../model/qwen35.h"
#include "sample.h"

typedef struct qgen_params {
    int n_predict;       /* tokens to generate at most */
    int prefill_chunk;   /* rows per prefill forward; EXACT(chunk): cuts at multiples from position 0 */
    int ignore_eos;      /* 0: stop after an end-of-sequence id from the config */
    qsampling sampling;
} qgen_params;

typedef struct qgen_result {
    int n_tokens;        /* generated, in out_tokens */
    double prefill_s, decode_s;
    int stopped_eos;
} qgen_result;

/* Resets st, runs prompt (n_prompt >= 1 ids) and generates up to p->n_predict tokens into
 * out_tokens. last_logits, if not NULL, receives the logits ([vocab]) of the last prompt position.
 * The stream's context must hold n_prompt + n_predict positions. */
qstatus generate(qwen35_model *m, qwen35_state *st, const int32_t *prompt, int n_prompt,
                 const qgen_params *p, int32_t *out_tokens, float *last_logits, qgen_result *res);

/* Row `row` (its flags' prompt bit kept) as the row whose output samples the next token with p: a greedy stream asks
 * the forward for its id (QROW_ARGMAX), any other for its drawn id (QROW_DRAW) keyed by the position the token takes
 * (the row's + 1, the one sample_token is given). */
qrow gen_out_row(const qsampling *p, qrow row);

/* Runs prompt rows [0, n) through st in chunks of `chunk` cut at multiples of chunk from position 0
 * (st must be at position 0 or at a multiple boundary it continues from). logits gets the last row's
 * logits. */
qstatus prefill(qwen35_model *m, qwen35_state *st, const int32_t *prompt, int n, int chunk,
                float *logits);

#endif
