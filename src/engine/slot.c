/* slot.c: the slot table (slot.h). Invariants, checked by slot_check:
 * (1) phase == SLOT_FREE <=> req == NULL; n_busy counts the others;
 * (2) SLOT_PREFILL: 0 <= st->n_past < req->n_prompt and n_gen == 0;
 * (3) SLOT_DECODE: 1 <= n_gen < req->max_tokens and st->n_past == req->n_prompt + n_gen - 1 (every
 *     sampled token but next_token has run), so the next row fits: n_prompt + max_tokens <= n_ctx.
 * Not here: what runs in a round (engine.c), request hand-over (engine_req.c). */
#include "slot.h"

#include <stdlib.h>

#include "engine_internal.h"

qstatus slot_table_init(qwen35_model *m, int n, int n_ctx, slot_table *t) {
    *t = (slot_table){0};
    if (n < 1) return q_fail(Q_EINVAL, "n_parallel: must be at least 1 (got %d)", n);
    t->slots = calloc((size_t)n, sizeof *t->slots);
    t->states = calloc((size_t)n, sizeof *t->states);
    if (!t->slots || !t->states) {
        slot_table_fini(m, t);
        return q_fail(Q_ENOMEM, "slots: out of memory for %d", n);
    }
    t->n = n;
    for (int i = 0; i < n; i++) {
        qstatus st = qwen35_state_create(m, n_ctx, &t->slots[i].st);
        if (st != Q_OK) {
            slot_table_fini(m, t);
            return q_wrap(st, "slot %d of %d", i, n);
        }
        t->states[i] = t->slots[i].st;
    }
    return Q_OK;
}

void slot_table_fini(qwen35_model *m, slot_table *t) {
    if (!t) return;
    for (int i = 0; t->slots && i < t->n; i++) qwen35_state_destroy(m, t->slots[i].st);
    free(t->slots);
    free(t->states);
    *t = (slot_table){0};
}

int slot_find_free(const slot_table *t) {
    for (int i = 0; i < t->n; i++)
        if (t->slots[i].phase == SLOT_FREE) return i;
    return -1;
}

qstatus slot_admit(qwen35_model *m, slot_table *t, int i, struct qreq *r) {
    qslot *s = &t->slots[i];
    if (s->phase != SLOT_FREE) return q_fail(Q_EINVAL, "slot %d is busy", i);
    Q_TRY(qwen35_state_reset(m, s->st)); /* n_past = 0, recurrent + conv state zeroed */
    s->req = r;
    s->phase = SLOT_PREFILL;
    s->admitted = t->n_admitted++;
    s->n_gen = 0;
    s->next_token = -1;
    t->n_busy++;
    return Q_OK;
}

struct qreq *slot_vacate(slot_table *t, int i) {
    qslot *s = &t->slots[i];
    struct qreq *r = s->req;
    if (s->phase != SLOT_FREE) t->n_busy--;
    s->req = NULL;
    s->phase = SLOT_FREE;
    s->n_gen = 0;
    s->next_token = -1;
    return r;
}

int slot_oldest_prefill(const slot_table *t) {
    int best = -1;
    for (int i = 0; i < t->n; i++)
        if (t->slots[i].phase == SLOT_PREFILL && (best < 0 || t->slots[i].admitted < t->slots[best].admitted))
            best = i;
    return best;
}

int slot_check(const slot_table *t, int i) {
    const qslot *s = &t->slots[i];
    if (!s->st || t->states[i] != s->st) return 0;
    if ((s->phase == SLOT_FREE) != (s->req == NULL)) return 0;
    const struct qreq *r = s->req;
    switch (s->phase) {
    case SLOT_FREE: return 1;
    case SLOT_PREFILL: return s->n_gen == 0 && s->st->n_past >= 0 && s->st->n_past < r->n_prompt;
    case SLOT_DECODE:
        return s->n_gen >= 1 && s->n_gen < r->max_tokens && s->st->n_past == r->n_prompt + s->n_gen - 1 &&
               s->next_token >= 0;
    }
    return 0;
}
