/* reqqueue.c: a fixed ring of waiting requests, oldest first (see reqqueue.h).
 * Invariants: 0 <= n <= cap; the live entries are ring[(head + i) % cap] for i in [0, n), in arrival
 * order. Not here: locking (the engine's mutex), references (the engine holds one per request). */
#include "reqqueue.h"

#include <stdlib.h>

qstatus reqqueue_init(reqqueue *q, int cap) {
    *q = (reqqueue){0};
    if (cap < 1) return q_fail(Q_EINVAL, "request queue: capacity must be positive, got %d", cap);
    q->ring = calloc((size_t)cap, sizeof *q->ring);
    if (!q->ring) return q_fail(Q_ENOMEM, "request queue: out of memory for %d entries", cap);
    q->cap = cap;
    return Q_OK;
}

void reqqueue_fini(reqqueue *q) {
    if (!q) return;
    free(q->ring);
    *q = (reqqueue){0};
}

qstatus reqqueue_push(reqqueue *q, struct qreq *r) {
    if (q->n == q->cap) return q_fail(Q_EFULL, "request queue is full (%d waiting)", q->n);
    q->ring[(q->head + q->n) % q->cap] = r;
    q->n++;
    return Q_OK;
}

struct qreq *reqqueue_pop(reqqueue *q) {
    if (q->n == 0) return NULL;
    struct qreq *r = q->ring[q->head];
    q->ring[q->head] = NULL;
    q->head = (q->head + 1) % q->cap;
    q->n--;
    return r;
}

int reqqueue_remove_if(reqqueue *q, int (*drop)(struct qreq *r), struct qreq **out) {
    int kept = 0, removed = 0;
    for (int i = 0; i < q->n; i++) { /* compact in place: kept entries slide towards the head */
        struct qreq *r = q->ring[(q->head + i) % q->cap];
        if (drop(r)) out[removed++] = r;
        else q->ring[(q->head + kept++) % q->cap] = r;
    }
    for (int i = kept; i < q->n; i++) q->ring[(q->head + i) % q->cap] = NULL;
    q->n = kept;
    return removed;
}
