/* slot.c: the slot table (slot.h). Invariants, checked by slot_check:
 * (0) the state's n_kv_rows is its kvmem's rows (kv_grow > 0) or n_ctx, and a busy slot's K/V rows
 *     cover every position it has run: n_past <= n_kv_rows;
 * (1) phase == SLOT_FREE <=> req == NULL <=> charge == 0; n_busy counts the others;
 * (2) SLOT_PREFILL: 0 <= st->n_past < req->n_prompt and n_gen == 0;
 * (3) SLOT_DECODE: 1 <= n_gen < req->max_tokens and st->n_past == req->n_prompt + n_gen - 1 (every
 *     sampled token but next_token has run), so the next row fits: n_prompt + max_tokens <= n_ctx.
 * Not here: what runs in a round (engine.c), request hand-over (engine_req.c). */
#include "slot.h"

#include <stdlib.h>

#include "engine_internal.h"

/* Makes slot s's state and, with kv_grow, its K/V regions (K then V per attention layer), pointing
 * the state's K/V entries at them. */
static qstatus slot_make(qwen35_model *m, const slot_table *t, qslot *s) {
    const qwen35_config *c = &m->cfg;
    int n_attn = 0;
    for (int l = 0; l < c->n_layers; l++) n_attn += c->layer_is_attn[l];
    if (t->kv_grow == 0 || n_attn == 0) return qwen35_state_create(m, t->n_ctx, &s->st);
    if (!qwen35_kv_row_bytes(c))
        return q_fail(Q_EINVAL, "slot: %s K/V caches cannot hold head_dim %d", qwen35_kv_type_name(c), c->head_dim);
    Q_TRY(qwen35_state_create_nokv(m, t->n_ctx, &s->st));
    Q_TRY(kvmem_init(&s->kv, m->be, 2 * n_attn, (size_t)qwen35_kv_row_bytes(c), t->n_ctx, t->first_rows));
    for (int l = 0, a = 0; l < c->n_layers; l++) {
        if (!c->layer_is_attn[l]) continue;
        s->st->k_cache[l] = s->kv.base[2 * a];
        s->st->v_cache[l] = s->kv.base[2 * a + 1];
        a++;
    }
    s->st->n_kv_rows = s->kv.rows;
    return Q_OK;
}

qstatus slot_table_init(qwen35_model *m, int n, int n_ctx, int kv_grow, slot_table *t) {
    *t = (slot_table){0};
    if (n < 1) return q_fail(Q_EINVAL, "n_parallel: must be at least 1 (got %d)", n);
    if (kv_grow < 0 || kv_grow % 16)
        return q_fail(Q_EINVAL, "kv_grow: must be 0 or a positive multiple of 16 (got %d)", kv_grow);
    t->n_ctx = n_ctx;
    t->kv_grow = kv_grow;
    t->first_rows = kv_grow > 0 && kv_grow < n_ctx ? kv_grow : n_ctx;
    t->slots = calloc((size_t)n, sizeof *t->slots);
    t->states = calloc((size_t)n, sizeof *t->states);
    if (!t->slots || !t->states) {
        slot_table_fini(m, t);
        return q_fail(Q_ENOMEM, "slots: out of memory for %d", n);
    }
    t->n = n;
    for (int i = 0; i < n; i++) {
        qstatus st = slot_make(m, t, &t->slots[i]);
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
    for (int i = 0; t->slots && i < t->n; i++) {
        qwen35_state_destroy(m, t->slots[i].st); /* leaves the borrowed K/V to the kvmem */
        kvmem_fini(&t->slots[i].kv);
    }
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
    s->charge = r->kv_charge;
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
    s->charge = 0;
    s->give_back = t->kv_grow > 0 && s->st->n_kv_rows != t->first_rows;
    s->phase = SLOT_FREE;
    s->n_gen = 0;
    s->next_token = -1;
    return r;
}

static int round_up(int64_t x, int step) {
    return (int)((x + step - 1) / step * step);
}

int slot_grow_target(const slot_table *t, int i, int need) {
    const qslot *s = &t->slots[i];
    const int held = s->st->n_kv_rows, step = t->kv_grow;
    if (step == 0 || need <= held) return held;
    int target;
    if (s->phase == SLOT_PREFILL && s->st->n_past == 0 && s->req) /* a fresh prompt, in one step */
        target = round_up(s->req->n_prompt > need ? s->req->n_prompt : need, step);
    else {
        int by_need = round_up(need, step), by_quarter = round_up((int64_t)held + held / 4, 16);
        target = by_need > by_quarter ? by_need : by_quarter;
    }
    if (target < step) target = step;
    int cap = s->charge > 0 && s->charge < t->n_ctx ? s->charge : t->n_ctx; /* rows it may ever use */
    if (target > cap) target = cap;
    return target > need ? target : need;
}

qstatus slot_reserve_rows(slot_table *t, int i, int need) {
    qslot *s = &t->slots[i];
    if (need <= s->st->n_kv_rows) return Q_OK;
    if (t->kv_grow == 0 || need > t->n_ctx)
        return q_fail(Q_EINVAL, "slot %d: %d K/V rows needed, %d held (context %d)", i, need,
                      s->st->n_kv_rows, t->n_ctx);
    int target = slot_grow_target(t, i, need);
    qstatus st = kvmem_resize(&s->kv, target);
    s->st->n_kv_rows = s->kv.rows; /* unchanged on failure: every layer keeps its rows */
    if (st != Q_OK) return q_wrap(st, "slot %d: K/V growth from %d to %d rows", i, s->st->n_kv_rows, target);
    return Q_OK;
}

qstatus slot_give_back(slot_table *t, int i) {
    qslot *s = &t->slots[i];
    s->give_back = 0;
    if (t->kv_grow == 0 || s->phase != SLOT_FREE || !s->kv.base) return Q_OK;
    qstatus st = kvmem_resize(&s->kv, t->first_rows);
    s->st->n_kv_rows = s->kv.rows;
    if (st != Q_OK) return q_wrap(st, "slot %d: giving K/V back", i);
    return Q_OK;
}

int64_t slot_table_kv_bytes(const qwen35_model *m, const slot_table *t) {
    int64_t sum = 0;
    for (int i = 0; i < t->n; i++) {
        const qslot *s = &t->slots[i];
        if (s->kv.base) sum += kvmem_mapped_bytes(&s->kv);
        else sum += (int64_t)t->n_ctx * qwen35_kv_bytes_per_token(&m->cfg);
    }
    return sum;
}

int slot_prefill_order(const slot_table *t, int *out) {
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->slots[i].phase != SLOT_PREFILL) continue;
        int j = n++; /* insertion by admission number: a handful of slots, admitted is unique */
        for (; j > 0 && t->slots[out[j - 1]].admitted > t->slots[i].admitted; j--) out[j] = out[j - 1];
        out[j] = i;
    }
    return n;
}

int slot_check(const slot_table *t, int i) {
    const qslot *s = &t->slots[i];
    if (!s->st || t->states[i] != s->st) return 0;
    if ((s->phase == SLOT_FREE) != (s->req == NULL) || (s->phase == SLOT_FREE) != (s->charge == 0)) return 0;
    if (s->kv.base ? s->st->n_kv_rows != s->kv.rows : s->st->n_kv_rows != t->n_ctx) return 0;
    if (s->st->n_past > s->st->n_kv_rows && s->phase != SLOT_FREE) return 0;
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
