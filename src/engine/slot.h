/* slot.h: the slot table, the memory streams run in (DESIGN.md "Streams own state, slots own memory").
 * Slot i holds qwen35_state i (n_ctx positions, made once at engine_create) and, while busy, the
 * stream running in it: its request (the engine's reference), its phase and its decode cursor.
 * Only the engine thread touches the table. The phases of a stream in a slot and who moves them are
 * drawn in engine.c. */
#ifndef QUILL_SLOT_H
#define QUILL_SLOT_H

#include <stdint.h>

#include "../model/qwen35.h"

struct qreq;

typedef enum slot_phase {
    SLOT_FREE = 0,   /* no stream; req == NULL */
    SLOT_PREFILL,    /* prompt rows [0, st->n_past) done, more to run */
    SLOT_DECODE      /* prompt done; next_token is the sampled token whose row runs next */
} slot_phase;

typedef struct qslot {
    qwen35_state *st;     /* owned; n_ctx positions; reset by slot_admit */
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
} slot_table;

/* Makes n slots of n_ctx positions each. On failure nothing is left allocated. Free with
 * slot_table_fini (which takes a zeroed or half-made table). */
qstatus slot_table_init(qwen35_model *m, int n, int n_ctx, slot_table *t);
void slot_table_fini(qwen35_model *m, slot_table *t);

/* Index of a free slot, or -1. */
int slot_find_free(const slot_table *t);
/* WAITING -> PREFILL: resets slot i's state (a new stream never sees the previous tenant's) and
 * puts r (the engine's reference, moved in) there. On failure the slot stays free and r is not taken. */
qstatus slot_admit(qwen35_model *m, slot_table *t, int i, struct qreq *r);
/* The busy slot -> FREE; returns its request (the caller now holds the engine's reference). */
struct qreq *slot_vacate(slot_table *t, int i);
/* Slot index of the stream in SLOT_PREFILL admitted first, or -1. */
int slot_oldest_prefill(const slot_table *t);
/* Nonzero when slot i's invariants hold (for assert). */
int slot_check(const slot_table *t, int i);

#endif
