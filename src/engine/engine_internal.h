/* engine_internal.h: what engine.c, engine_req.c and slot.c share: the request object.
 *
 * A request (struct qreq) is shared by two owners, the client (engine_submit's *out, dropped by
 * engine_release) and the engine (dropped when the stream is DONE); whichever drops the last
 * reference frees it, so either may go first. It does not point back at the engine, so a client may
 * read or release it after engine_destroy.
 *
 * Locking: each request has its own mutex `mu` guarding the fields marked (mu) and a condvar `cv`
 * (on CLOCK_MONOTONIC) that engine_next waits on. Fields marked (const) are written by engine_submit
 * before the request is visible to the engine thread and never change. `cancel` is atomic so the
 * engine can poll it while holding its own mutex. Lock order: engine mutex, then a request's mutex
 * (never the reverse); no client-side path takes the engine mutex while holding a request's. */
#ifndef QUILL_ENGINE_INTERNAL_H
#define QUILL_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine.h"

#define REQ_ERROR_BYTES 256

struct qreq {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* broadcast when tokens arrive or the stream finishes */
    int refs;              /* (mu) 2 at submit: client + engine */
    /* (const) */
    int32_t *prompt;       /* [n_prompt] owned copy */
    int n_prompt;          /* >= 1 */
    int max_tokens;        /* >= 1 */
    int ignore_eos;
    qsampling sampling;
    double t_submit;       /* monotonic seconds */
    int kv_charge;         /* K/V rows charged to the budget while it holds a slot (engine_submit) */
    /* (mu) written by the engine thread, read by clients */
    int32_t *tokens;       /* [max_tokens] owned; sized at submit so the round never allocates */
    int n_tokens;          /* handed-over tokens in tokens[]; an eos is never among them */
    qfinish finish;        /* write-once: QFINISH_NONE until DONE */
    double t_first, t_last; /* monotonic seconds of the first and latest token; 0 before */
    char error[REQ_ERROR_BYTES]; /* QFINISH_ERROR's message, written before finish */
    atomic_int cancel;     /* qfinish asked by engine_cancel (first call wins); 0: none */
};

/* Monotonic clock in seconds. */
double req_now(void);
/* Validates p against the model's vocabulary and n_ctx (Q_EINVAL naming the field) and makes a
 * request holding two references. Owned; drop each with req_unref. */
qstatus req_create(const qreq_params *p, int n_vocab, int n_ctx, qreq **out);
/* Drops one reference; frees the request when it was the last. NULL is ignored. */
void req_unref(qreq *r);
/* Engine thread: hands over one token (tok >= 0; tok < 0 hands none) and, when fin != QFINISH_NONE,
 * ends the stream with fin (message err for QFINISH_ERROR), in one critical section. */
void req_deliver(qreq *r, int32_t tok, qfinish fin, const char *err);
/* The finish reason a client asked for with engine_cancel, or QFINISH_NONE. */
qfinish req_cancel_asked(qreq *r);

#endif
