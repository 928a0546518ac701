/* slot.h: the slot table, the memory streams run in (DESIGN.md "Streams own state, slots own memory").
 * Slot i holds qwen35_state i (made once at engine_create) and, while busy, the stream running in it:
 * its request (the engine's reference), its phase, its decode cursor and its K/V charge.
 * K/V: with kv_grow 0 each state holds n_ctx rows from the start (backend alloc). With kv_grow > 0
 * the slot owns a kvmem (kvmem.h) reserved for n_ctx rows that starts at first_rows = kv_grow rows,
 * grows as the stream needs (slot_reserve_rows) and returns to first_rows when it ends
 * (slot_give_back); the state's K/V pointers point into it and never move.
 * Only the engine thread touches the table. The phases of a stream in a slot and who moves them are
 * drawn in engine.c. */
#ifndef QUILL_SLOT_H
#define QUILL_SLOT_H

#include <stdint.h>

#include "../model/qwen35.h"
#include "kvmem.h"

struct qreq;

typedef enum slot_phase {
    SLOT_FREE = 0,   /* no stream; req == NULL */
    SLOT_PREFILL,    /* prompt rows [0, st->n_past) done, more to run */
    SLOT_DECODE      /* prompt done; next_token is the sampled token whose row runs next */
} slot_phase;

typedef struct qslot {
    qwen35_state *st;     /* owned; n_ctx positions; reset by slot_admit */
    kvmem kv;             /* kv_grow > 0: the state's K/V regions (owned); zeroed otherwise */
    int charge;           /* K/V rows charged to the budget by the stream here; 0 when free */
    int give_back;        /* the stream ended: return to first_rows once the round is over */
    struct qreq *req;     /* the engine's reference; NULL iff phase == SLOT_FREE */
    slot_phase phase;
    uint64_t admitted;    /* admission number: the oldest prefilling stream goes first */
    int n_gen;            /* tokens sampled so far (an eos included) */
    int32_t next_token;   /* SLOT_DECODE: input of the stream's next row */
} qslot;

typedef struct slot_table {
    qslot *slots;          /* [n] owned */
    qwen35_state **states; /* [n] states[i] == slots[i].st: the array qwen35_forward indexes */
    int n;
    int n_busy;            /* slots not SLOT_FREE */
    uint64_t n_admitted;   /* admissions so far */
    int n_ctx;             /* positions per slot */
    int kv_grow;           /* growth step in rows (a multiple of 16); 0: every slot holds n_ctx rows */
    int first_rows;        /* rows a slot holds with no stream: min(kv_grow, n_ctx), or n_ctx */
} slot_table;

/* Makes n slots of n_ctx positions each, K/V grown in steps of kv_grow rows (0: allocated whole).
 * On failure nothing is left allocated. Free with slot_table_fini (takes a zeroed or half-made table). */
qstatus slot_table_init(qwen35_model *m, int n, int n_ctx, int kv_grow, slot_table *t);
void slot_table_fini(qwen35_model *m, slot_table *t);

/* Index of a free slot, or -1. */
int slot_find_free(const slot_table *t);
/* WAITING -> PREFILL: resets slot i's state (a new stream never sees the previous tenant's) and
 * puts r (the engine's reference, moved in) there with its K/V charge (r->kv_charge). On failure the
 * slot stays free and r is not taken. */
qstatus slot_admit(qwen35_model *m, slot_table *t, int i, struct qreq *r);
/* The busy slot -> FREE; returns its request (the caller now holds the engine's reference). */
struct qreq *slot_vacate(slot_table *t, int i);
/* Makes busy slot i hold at least `need` rows (need <= n_ctx) for its next round, growing by the
 * policy of issue 6: a fresh prompt takes the rows it fills, rounded up to kv_grow (at least one
 * step), in one step; later growth takes `need` rounded up to kv_grow or a quarter more than held
 * (rounded up to 16), whichever is larger; never more than the stream's charge or n_ctx.
 * EXACT(grow): the policy decides how much is mapped, never what a kernel computes.
 * On failure every layer of the slot keeps the rows it had (kvmem_resize) and the error names the
 * rows. A no-op with kv_grow 0. */
qstatus slot_reserve_rows(slot_table *t, int i, int need);
/* The rows slot_reserve_rows would grow slot i to for `need` (exposed for the tests). */
int slot_grow_target(const slot_table *t, int i, int need);
/* Free slot i -> first_rows; the caller has made sure no pending backend work reads its K/V (the
 * vm_unmap waits for the backend anyway). Clears give_back. A no-op with kv_grow 0. */
qstatus slot_give_back(slot_table *t, int i);
/* Backend bytes of K/V the table holds now (mapped, or allocated with kv_grow 0). */
int64_t slot_table_kv_bytes(const qwen35_model *m, const slot_table *t);
/* The slots in SLOT_PREFILL, admitted first first, into out[] (room for t->n); returns how many. */
int slot_prefill_order(const slot_table *t, int *out);
/* Nonzero when slot i's invariants hold (for assert). */
int slot_check(const slot_table *t, int i);

#endif
