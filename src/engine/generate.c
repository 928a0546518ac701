/* generate.c: single-stream prefill + decode over qwen35_forward. */
#include "generate.h"

#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

qstatus prefill(qwen35_model *m, qwen35_state *st, const int32_t *prompt, int n, int chunk,
                float *logits) {
    if (chunk <= 0) return q_fail(Q_EINVAL, "prefill chunk must be positive");
    qrow *rows = malloc((size_t)(n < chunk ? n : chunk) * sizeof *rows);
    if (!rows) return q_fail(Q_ENOMEM, "prefill: out of memory");
    qwen35_state *states[1] = {st};
    qstatus rc = Q_OK;
    int i = 0;
    while (i < n && rc == Q_OK) {
        int pos = st->n_past;
        int end_pos = (pos / chunk + 1) * chunk; /* EXACT(chunk): next multiple of chunk */
        int k = end_pos - pos;
        if (k > n - i) k = n - i;
        for (int j = 0; j < k; j++) {
            int last = i + j == n - 1;
            rows[j] = (qrow){.stream = 0, .pos = pos + j, .token = prompt[i + j],
                             .flags = QROW_PREFILL | (last ? QROW_LOGITS : 0u)};
        }
        rc = qwen35_forward(m, rows, k, states, i + k == n ? logits : NULL);
        i += k;
    }
    free(rows);
    return rc;
}

static int is_eos(const qwen35_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return 1;
    return 0;
}

qrow gen_out_row(const qsampling *p, qrow row) {
    if (p->temperature <= 0.0f) {
        row.flags |= QROW_ARGMAX;
    } else {
        row.flags |= QROW_DRAW;
        row.draw = sample_draw(p, (int64_t)row.pos + 1);
    }
    return row;
}

qstatus generate(qwen35_model *m, qwen35_state *st, const int32_t *prompt, int n_prompt,
                 const qgen_params *p, int32_t *out_tokens, float *last_logits, qgen_result *res) {
    const int V = m->cfg.vocab_size;
    *res = (qgen_result){0};
    if (n_prompt < 1) return q_fail(Q_EINVAL, "prompt is empty");
    if (n_prompt + p->n_predict > st->n_ctx)
        return q_fail(Q_EINVAL, "prompt (%d) + tokens to generate (%d) exceed the context (%d)",
                      n_prompt, p->n_predict, st->n_ctx);
    Q_TRY(qsampling_check(&p->sampling));
    float *logits = malloc((size_t)V * sizeof *logits);
    sample_cand *work = malloc((size_t)V * sizeof *work);
    if (!logits || !work) {
        free(logits);
        free(work);
        return q_fail(Q_ENOMEM, "generate: out of memory");
    }
    qstatus rc = qwen35_state_reset(m, st);
    double t0 = now_s();
    if (rc == Q_OK) rc = prefill(m, st, prompt, n_prompt, p->prefill_chunk, logits);
    double t1 = now_s();
    res->prefill_s = t1 - t0;
    if (rc == Q_OK && last_logits)
        for (int i = 0; i < V; i++) last_logits[i] = logits[i];
    qwen35_state *states[1] = {st};
    /* The backend picks each token and only its id comes back (gen_out_row: QROW_ARGMAX, sample_argmax's rule, or
     * QROW_DRAW, sample_token's). The first comes from the prompt's logits, on the host, by the same rules. */
    int32_t next_id = -1; /* set by the forward after the first token */
    for (int i = 0; rc == Q_OK && i < p->n_predict; i++) {
        int32_t pos = st->n_past;
        int32_t tok = next_id >= 0 ? next_id : sample_token(logits, V, &p->sampling, pos, work);
        out_tokens[res->n_tokens++] = tok;
        if (!p->ignore_eos && is_eos(&m->cfg, tok)) { res->stopped_eos = 1; break; }
        if (i + 1 == p->n_predict) break; /* the last token needs no forward */
        const qrow row = gen_out_row(&p->sampling, (qrow){.stream = 0, .pos = pos, .token = tok});
        rc = qwen35_forward_ex(m, &row, 1, states, logits, &next_id);
    }
    res->decode_s = now_s() - t1;
    free(logits);
    free(work);
    return rc;
}
