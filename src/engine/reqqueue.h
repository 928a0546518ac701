/* reqqueue.h: the bounded FIFO of requests waiting for a slot (engine.c). A ring of borrowed qreq
 * pointers; it never takes or drops a reference. Not thread-safe by itself: the engine's mutex guards
 * it. Capacity is fixed at creation (queue_cap + n_parallel: see engine_submit), so pushing never
 * allocates. */
#ifndef QUILL_REQQUEUE_H
#define QUILL_REQQUEUE_H

#include "../util/status.h"

struct qreq;

typedef struct reqqueue {
    struct qreq **ring; /* [cap] owned array; entries borrowed */
    int cap;            /* > 0 */
    int head;           /* index of the oldest entry */
    int n;              /* entries held, 0..cap */
} reqqueue;

/* Allocates the ring for cap (>= 1) entries. Free with reqqueue_fini. */
qstatus reqqueue_init(reqqueue *q, int cap);
void reqqueue_fini(reqqueue *q);

/* Appends r; Q_EFULL when n == cap. */
qstatus reqqueue_push(reqqueue *q, struct qreq *r);
/* Removes and returns the oldest entry, or NULL when empty. */
struct qreq *reqqueue_pop(reqqueue *q);
/* Removes every entry for which drop(r) is nonzero, keeping the others in order, and writes the
 * removed ones to out (room for q->n entries) in order. Returns how many were removed. */
int reqqueue_remove_if(reqqueue *q, int (*drop)(struct qreq *r), struct qreq **out);

#endif
