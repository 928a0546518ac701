/* engine_req.c: the request object shared by a client and the engine: validation at submit,
 * reference counting, token hand-over (engine side) and engine_next / engine_cancel /
 * engine_release / timing (client side). Locking and ownership rules: engine_internal.h.
 * Invariants: (1) 0 <= n_tokens <= max_tokens; (2) finish is set once and nothing is appended after
 * it; (3) t_first != 0 iff n_tokens > 0. Not here: scheduling (engine.c), slots (slot.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

double req_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static qstatus validate(const qreq_params *p, int n_vocab, int n_ctx) {
    if (!p) return q_fail(Q_EINVAL, "request: missing parameters");
    if (p->n_prompt < 1 || !p->prompt)
        return q_fail(Q_EINVAL, "prompt: must hold at least one token (got %d)", p->n_prompt);
    if (p->max_tokens < 1)
        return q_fail(Q_EINVAL, "max_tokens: must be at least 1 (got %d)", p->max_tokens);
    if ((int64_t)p->n_prompt + p->max_tokens > n_ctx)
        return q_fail(Q_EINVAL, "max_tokens: prompt (%d tokens) + max_tokens (%d) exceed the context (%d)",
                      p->n_prompt, p->max_tokens, n_ctx);
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= n_vocab)
            return q_fail(Q_EINVAL, "prompt: token id %d at index %d is outside the vocabulary (0..%d)",
                          (int)p->prompt[i], i, n_vocab - 1);
    return qsampling_check(&p->sampling);
}

static void req_free(qreq *r) {
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->prompt);
    free(r->tokens);
    free(r);
}

qstatus req_create(const qreq_params *p, int n_vocab, int n_ctx, qreq **out) {
    *out = NULL;
    Q_TRY(validate(p, n_vocab, n_ctx));
    qreq *r = calloc(1, sizeof *r);
    if (!r) return q_fail(Q_ENOMEM, "request: out of memory");
    r->prompt = malloc((size_t)p->n_prompt * sizeof *r->prompt);
    r->tokens = malloc((size_t)p->max_tokens * sizeof *r->tokens);
    if (!r->prompt || !r->tokens) {
        free(r->prompt);
        free(r->tokens);
        free(r);
        return q_fail(Q_ENOMEM, "request: out of memory for %d + %d tokens", p->n_prompt, p->max_tokens);
    }
    pthread_condattr_t ca;
    int ok = pthread_condattr_init(&ca) == 0;
    if (ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0) ok = 0;
    if (ok && pthread_cond_init(&r->cv, &ca) != 0) ok = 0;
    pthread_condattr_destroy(&ca);
    if (ok && pthread_mutex_init(&r->mu, NULL) != 0) {
        pthread_cond_destroy(&r->cv);
        ok = 0;
    }
    if (!ok) {
        free(r->prompt);
        free(r->tokens);
        free(r);
        return q_fail(Q_ENOMEM, "request: cannot create its mutex/condvar");
    }
    memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof *r->prompt);
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->ignore_eos = p->ignore_eos;
    r->sampling = p->sampling;
    r->refs = 2;
    r->t_submit = req_now();
    atomic_init(&r->cancel, QFINISH_NONE);
    *out = r;
    return Q_OK;
}

void req_unref(qreq *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last) req_free(r);
}

void req_deliver(qreq *r, int32_t tok, qfinish fin, const char *err) {
    double now = req_now();
    pthread_mutex_lock(&r->mu);
    if (r->finish == QFINISH_NONE) { /* invariant (2): nothing after the end */
        if (tok >= 0 && r->n_tokens < r->max_tokens) {
            r->tokens[r->n_tokens++] = tok;
            if (r->t_first == 0) r->t_first = now;
            r->t_last = now;
        }
        if (fin != QFINISH_NONE) {
            if (fin == QFINISH_ERROR) snprintf(r->error, sizeof r->error, "%s", err && *err ? err : "error");
            r->finish = fin;
        }
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

qfinish req_cancel_asked(qreq *r) {
    return (qfinish)atomic_load(&r->cancel);
}

/* ---- client side (engine.h) ------------------------------------------------------------------- */

int engine_next(qreq *r, int n_seen, int32_t *buf, int cap, int timeout_ms, qfinish *finish) {
    struct timespec until;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    if (n_seen < 0) n_seen = 0;
    pthread_mutex_lock(&r->mu);
    while (r->n_tokens <= n_seen && r->finish == QFINISH_NONE && timeout_ms != 0) {
        if (timeout_ms < 0) pthread_cond_wait(&r->cv, &r->mu);
        else if (pthread_cond_timedwait(&r->cv, &r->mu, &until) != 0) break; /* ETIMEDOUT */
    }
    if (n_seen > r->n_tokens) n_seen = r->n_tokens;
    int n = r->n_tokens - n_seen;
    if (n > cap) n = cap;
    if (n < 0 || !buf) n = 0;
    if (n > 0) memcpy(buf, r->tokens + n_seen, (size_t)n * sizeof *buf);
    qfinish f = n_seen + n == r->n_tokens ? r->finish : QFINISH_NONE;
    pthread_mutex_unlock(&r->mu);
    if (finish) *finish = f;
    return n;
}

void engine_cancel(qreq *r, qfinish why) {
    if (!r) return;
    if (why != QFINISH_STOP) why = QFINISH_CANCELLED;
    int none = QFINISH_NONE;
    /* First call wins. The engine thread is never asleep while r is queued or in a slot (it sleeps
     * only with no work), so no wake-up is needed: it sees the flag at its next round. */
    atomic_compare_exchange_strong(&r->cancel, &none, (int)why);
}

void engine_release(qreq *r) {
    req_unref(r);
}

double engine_ttft(const qreq *r) {
    qreq *w = (qreq *)r; /* the mutex is not const; the request itself was never defined const */
    pthread_mutex_lock(&w->mu);
    double t = w->t_first > 0 ? w->t_first - w->t_submit : 0;
    pthread_mutex_unlock(&w->mu);
    return t;
}

double engine_decode_seconds(const qreq *r) {
    qreq *w = (qreq *)r;
    pthread_mutex_lock(&w->mu);
    double t = w->t_first > 0 ? w->t_last - w->t_first : 0;
    pthread_mutex_unlock(&w->mu);
    return t;
}

const char *engine_error(const qreq *r) {
    qreq *w = (qreq *)r;
    pthread_mutex_lock(&w->mu);
    /* error is written before finish and never again, so the pointer stays valid and stable. */
    const char *e = w->finish == QFINISH_ERROR ? w->error : "";
    pthread_mutex_unlock(&w->mu);
    return e;
}
