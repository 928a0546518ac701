/* engine.c: continuous batching. One engine thread runs rounds over the streams in the slots; client
 * threads submit, read and cancel through requests (engine_req.c) and never wait on a round.
 *
 * Governing idea (DESIGN.md "Rounds"): each round is ONE qwen35_forward over every decoding stream's
 * next row plus whole prefill chunks of the streams still prefilling, oldest first, as many as fit in
 * prefill_chunk prompt rows (the oldest's chunk always goes); then each stream that
 * produced logits samples and hands its token over on its own. Because every row is computed as if
 * alone (EXACT(batch), tests/golden/test_model_batch.c), prefill is cut where generate() cuts it
 * (EXACT(chunk)) and sampling is keyed by (seed, position) at the same position generate() uses, a
 * stream's tokens equal generate()'s: tests/unit/engine/test_engine.c compares their hashes.
 *
 * A stream's life (the slot phases are in slot.h; DONE means the request's finish is set and the
 * engine has dropped its reference):
 *
 *   WAITING --admit_waiting--> PREFILL --stream_commit--> DECODE --stream_commit--+
 *   (queue)   (slot_admit:        |     (first token)       |     (next tokens)   |
 *      |       state reset)       |                         +<--------------------+
 *      v                          v                         v
 *     DONE <----------------------+-------------------------+
 *
 *   WAITING -> DONE         drop_cancelled_waiting (cancelled in the queue), admit_waiting (the state
 *                           reset failed: ERROR), drain (engine_destroy: CANCELLED)
 *   PREFILL/DECODE -> DONE  stream_commit (eos: STOP, max_tokens: LENGTH), stream_end (cancel at the
 *                           start of a round, forward error: ERROR, engine_destroy: CANCELLED); the
 *                           slot is freed (slot_vacate) before the client sees the end
 *
 * Threads and locks. e->mu guards the (mu) fields of struct qengine: the waiting queue, n_running
 * (busy slots, also what engine_submit's capacity check counts), the stop flag and the statistics.
 * e->wake wakes the engine thread on submit and stop; it sleeps there only when no stream is
 * waiting or running, so it never polls. Everything else in struct qengine (slots, row/logit
 * buffers) belongs to the engine thread alone. Request fields have their own mutex; the engine
 * takes e->mu before a request's mutex when it ever holds both (engine_internal.h).
 *
 * Capacity: engine_submit accepts while waiting + running < queue_cap + n_parallel, so with
 * n_parallel 1 and queue_cap 2 the 4th concurrent request gets Q_EFULL whether or not the engine has
 * admitted the first yet.
 *
 * K/V memory (issue 6). Each request is charged charge = prompt + max_tokens rows, rounded up to
 * kv_grow, at least first_rows, at most n_ctx (kv_charge); an idle slot counts first_rows. kv_committed
 * (the charges of busy slots plus first_rows per idle slot) never exceeds kv_budget_rows: the head of
 * the queue is admitted only when a slot is free AND its charge fits; until then it blocks every
 * later request (FIFO, no starvation of large requests by small ones). A request whose charge could
 * never fit (even with every other slot idle) gets Q_EINVAL at submit naming prompt or max_tokens.
 * A slot never grows past its stream's charge (slot_grow_target), so K/V held <= kv_committed <=
 * budget and no admitted stream can run out of budget mid-reply. A growth the backend still refuses
 * (the device ran out anyway, or the test hook) ends only that stream with QFINISH_ERROR.
 * Give-back: stream_end marks the slot (slot_vacate sets give_back); after the round, once the
 * backend has drained, give_back_pending returns it to first_rows. No stream waits for that.
 *
 * Not here: the request object and client calls (engine_req.c), slot bookkeeping (slot.c), the FIFO
 * (reqqueue.c), the forward (model/qwen35.c), sampling (sample.c). */
#include "engine.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/log.h"
#include "engine_internal.h"
#include "generate.h"
#include "reqqueue.h"
#include "slot.h"

struct qengine {
    qwen35_model *m;           /* borrowed */
    qengine_params p;          /* validated copy */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t wake;       /* submit, stop */
    int stop;                  /* (mu) engine_destroy asked the thread to end */
    reqqueue queue;            /* (mu) WAITING requests, the engine's references; cap queue_cap + n_parallel */
    int n_running;             /* (mu) busy slots (those being admitted included) */
    qengine_stats stats;       /* (mu) running/waiting are filled in by engine_get_stats */
    int64_t kv_budget;         /* rows; validated, 0 resolved */
    int first_rows;            /* rows an idle slot holds (slot_table.first_rows) */
    int64_t kv_committed;      /* (mu) see the K/V note above */
    qengine_memory mem;        /* (mu) published by the engine thread (publish_memory) */
    int *mem_rows, *mem_charge; /* (mu) [n_parallel] rows held and charge per slot */
    int max_round_rows;        /* engine thread: the largest round so far (scratch accounting) */
    /* engine thread only */
    slot_table slots;
    qrow *rows;                /* [n_parallel + prefill_chunk] the round's rows */
    int32_t *ids;              /* [n_parallel]: the round's tokens, chosen on the backend (QROW_ARGMAX, QROW_DRAW) */
    int *batch;                /* [n_parallel] slots with rows in the round */
    int *order;                /* [n_parallel] the prefilling slots, oldest first (slot_prefill_order) */
    qreq **taken;              /* [queue cap] requests moved out of the queue this round */
};

qengine_params engine_params_default(void) {
    return (qengine_params){.n_parallel = 1, .n_ctx = 4096, .prefill_chunk = 512, .queue_cap = 64};
}

qstatus engine_params_from_env(qengine_params *p) {
    const char *v = getenv("QUILL_KV_GROW");
    if (!v || !*v) return Q_OK;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > (1 << 24) || n % 16)
        return q_fail(Q_EINVAL, "QUILL_KV_GROW: must be 0 or a positive multiple of 16 (got '%s')", v);
    p->kv_grow = (int)n;
    return Q_OK;
}

static qstatus check_params(const qengine_params *p) {
    if (!p) return q_fail(Q_EINVAL, "engine: missing parameters");
    if (p->n_parallel < 1) return q_fail(Q_EINVAL, "n_parallel: must be at least 1 (got %d)", p->n_parallel);
    if (p->n_ctx < 2) return q_fail(Q_EINVAL, "n_ctx: must be at least 2 (got %d)", p->n_ctx);
    if (p->prefill_chunk < 1)
        return q_fail(Q_EINVAL, "prefill_chunk: must be at least 1 (got %d)", p->prefill_chunk);
    if (p->queue_cap < 0) return q_fail(Q_EINVAL, "queue_cap: must not be negative (got %d)", p->queue_cap);
    if (p->queue_cap > (1 << 24) || p->n_parallel > (1 << 16) || p->prefill_chunk > (1 << 24))
        return q_fail(Q_EINVAL, "engine: n_parallel %d, prefill_chunk %d or queue_cap %d is too large",
                      p->n_parallel, p->prefill_chunk, p->queue_cap);
    if (p->kv_grow < 0 || p->kv_grow % 16 || p->kv_grow > (1 << 24))
        return q_fail(Q_EINVAL, "kv_grow: must be 0 or a positive multiple of 16 (got %d)", p->kv_grow);
    int first = p->kv_grow > 0 && p->kv_grow < p->n_ctx ? p->kv_grow : p->n_ctx;
    if (p->kv_budget_rows != 0 && p->kv_budget_rows < (int64_t)p->n_parallel * first)
        return q_fail(Q_EINVAL, "kv_budget_rows: %lld rows cannot hold %d idle slots of %d rows",
                      (long long)p->kv_budget_rows, p->n_parallel, first);
    return Q_OK;
}

/* The K/V rows a request is charged while it holds a slot (see the K/V note at the top). */
static int kv_charge(const qengine *e, int64_t rows) {
    const int step = e->p.kv_grow > 0 ? e->p.kv_grow : 16;
    int64_t c = (rows + step - 1) / step * step;
    if (c < e->first_rows) c = e->first_rows;
    return c > e->p.n_ctx ? e->p.n_ctx : (int)c;
}

/* Engine thread: copies the figures engine_get_memory reports under e->mu, and keeps the peaks. */
static void publish_memory(qengine *e) {
    const qwen35_model *m = e->m;
    int64_t kv = slot_table_kv_bytes(m, &e->slots), held_rows = 0;
    int64_t scratch = e->max_round_rows > 0 ? qwen35_scratch_bytes(&m->cfg, e->max_round_rows) : 0;
    pthread_mutex_lock(&e->mu);
    qengine_memory *g = &e->mem;
    for (int i = 0; i < e->slots.n; i++) {
        e->mem_rows[i] = e->slots.slots[i].st->n_kv_rows;
        e->mem_charge[i] = e->slots.slots[i].charge;
        held_rows += e->mem_rows[i];
    }
    g->kv_bytes = kv;
    if (kv > g->kv_peak_bytes) g->kv_peak_bytes = kv;
    g->scratch_bytes = scratch;
    g->kv_held_rows = held_rows;
    g->total_bytes = g->weights_bytes + kv + g->gdn_bytes + scratch + g->prompt_cache_bytes;
    if (g->total_bytes > g->total_peak_bytes) g->total_peak_bytes = g->total_bytes;
    pthread_mutex_unlock(&e->mu);
}

/* Engine thread, after a round: returns every slot whose stream ended to first_rows. The backend
 * drains first, so no pending kernel still reads the memory given back. A failure is logged; the
 * slot then keeps (and reports) what it still holds. */
static void give_back_pending(qengine *e) {
    int any = 0;
    for (int i = 0; i < e->slots.n; i++) any |= e->slots.slots[i].give_back;
    if (!any) return;
    qbackend *be = e->m->be;
    if (be->ops->sync(be) != Q_OK) q_error("engine: sync before K/V give-back: %s", q_lasterr());
    for (int i = 0; i < e->slots.n; i++)
        if (e->slots.slots[i].give_back && slot_give_back(&e->slots, i) != Q_OK)
            q_error("engine: %s", q_lasterr());
    publish_memory(e);
}

/* ---- stream transitions (engine thread) -------------------------------------------------------- */

static int is_eos(const qwen35_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return 1;
    return 0;
}

/* PREFILL/DECODE -> DONE: frees slot i, then hands over tok (if >= 0) and the finish reason. The
 * slot is counted free before the client can see the end, so stats read after it are settled. */
static void stream_end(qengine *e, int i, int32_t tok, qfinish why, const char *err) {
    const int charge = e->slots.slots[i].charge;
    qreq *r = slot_vacate(&e->slots, i); /* marks the slot for give_back_pending */
    pthread_mutex_lock(&e->mu);
    e->n_running--;
    e->kv_committed -= charge - e->first_rows;
    pthread_mutex_unlock(&e->mu);
    req_deliver(r, tok, why, err);
    req_unref(r); /* the engine's reference */
}

/* Takes slot i's next token and moves the stream on: PREFILL -> DECODE on its first token, DECODE ->
 * DECODE, or -> DONE on an eos (not handed over) or at max_tokens. */
static void stream_commit(qengine *e, int i, int32_t tok) {
    qslot *s = &e->slots.slots[i];
    qreq *r = s->req;
    const qwen35_config *c = &e->m->cfg;
    /* The token was chosen on the backend: a greedy stream's by sample_argmax's rule (QROW_ARGMAX), a sampled
     * one's by sample_token's (QROW_DRAW), keyed by the stream's own position as generate() keys it (EXACT(batch);
     * tests/unit/engine/test_engine.c, test_alone_vs_batched). */
    s->n_gen++;
    if (!r->ignore_eos && is_eos(c, tok)) {
        stream_end(e, i, -1, QFINISH_STOP, NULL);
    } else if (s->n_gen >= r->max_tokens) {
        stream_end(e, i, tok, QFINISH_LENGTH, NULL); /* the last token needs no forward */
    } else {
        s->phase = SLOT_DECODE;
        s->next_token = tok;
        req_deliver(r, tok, QFINISH_NONE, NULL);
        assert(slot_check(&e->slots, i));
    }
}

/* ---- admission and cancellation ---------------------------------------------------------------- */

static int cancel_asked(qreq *r) {
    return req_cancel_asked(r) != QFINISH_NONE;
}

/* WAITING -> DONE for queued requests whose client cancelled: they never take a slot. Called with
 * e->mu held; returns how many were moved to e->taken. */
static int drop_cancelled_waiting(qengine *e) {
    return reqqueue_remove_if(&e->queue, cancel_asked, e->taken);
}

/* WAITING -> PREFILL: moves queued requests into free slots (oldest first) while the head's K/V
 * charge fits the budget; a head that does not fit blocks the rest (FIFO). With e->mu held only the
 * bookkeeping moves (n_running and kv_committed count them at once); the state resets run after
 * unlocking. Returns how many were moved, in e->taken from index `from`. */
static int take_waiting(qengine *e, int from) {
    int n = 0;
    while (e->n_running < e->p.n_parallel && e->queue.n > 0) {
        const qreq *head = e->queue.ring[e->queue.head];
        if (e->kv_committed - e->first_rows + head->kv_charge > e->kv_budget) break;
        e->taken[from + n++] = reqqueue_pop(&e->queue);
        e->n_running++;
        e->kv_committed += head->kv_charge - e->first_rows;
    }
    return n;
}

static void admit_waiting(qengine *e, qreq *r) {
    int i = slot_find_free(&e->slots);
    qstatus st = i < 0 ? q_fail(Q_EINVAL, "engine: no free slot for an admitted request") /* n_running bug */
                       : slot_admit(e->m, &e->slots, i, r);
    if (st == Q_OK) {
        assert(slot_check(&e->slots, i));
        return;
    }
    char msg[REQ_ERROR_BYTES];
    snprintf(msg, sizeof msg, "admission failed: %s", q_lasterr());
    q_error("engine: %s", msg);
    pthread_mutex_lock(&e->mu);
    e->n_running--;
    e->kv_committed -= r->kv_charge - e->first_rows;
    pthread_mutex_unlock(&e->mu);
    req_deliver(r, -1, QFINISH_ERROR, msg);
    req_unref(r);
}

/* PREFILL/DECODE -> DONE for streams whose client cancelled (at the start of a round). */
static void end_cancelled(qengine *e) {
    for (int i = 0; i < e->slots.n; i++) {
        qslot *s = &e->slots.slots[i];
        if (s->phase == SLOT_FREE) continue;
        qfinish why = req_cancel_asked(s->req);
        if (why != QFINISH_NONE) stream_end(e, i, -1, why, NULL);
    }
}

/* ---- a round ----------------------------------------------------------------------------------- */

/* Rows of slot i's next prefill chunk. EXACT(chunk): the chunk ends at the next multiple of prefill_chunk
 * from position 0 (or at the prompt's end), exactly where generate.c's prefill() cuts, never where a row
 * budget runs out; tests/unit/engine/test_engine.c runs prompts of 3..150 rows with chunk 64 against generate(). */
static int next_chunk_rows(const qengine *e, int i) {
    const qslot *s = &e->slots.slots[i];
    const int chunk = e->p.prefill_chunk, pos = s->st->n_past; /* == prompt rows done: the state started at 0 */
    const int end = (pos / chunk + 1) * chunk;
    return (end < s->req->n_prompt ? end : s->req->n_prompt) - pos;
}

/* Appends slot i's next prefill chunk (len rows) to the round; returns the new row count. */
static int add_prefill_rows(qengine *e, int i, int len, int n) {
    const qslot *s = &e->slots.slots[i];
    const qreq *r = s->req;
    for (int p = s->st->n_past, end = p + len; p < end; p++) {
        int last = p == r->n_prompt - 1;
        const qrow row = {.stream = i, .pos = p, .token = r->prompt[p], .flags = QROW_PREFILL};
        e->rows[n++] = last ? gen_out_row(&r->sampling, row) : row;
    }
    return n;
}

/* Makes slot i hold `need` K/V rows for this round; on failure ends its stream (ERROR) and returns 0.
 * EXACT(grow): growing maps memory after the rows held and changes nothing a kernel computes, so the
 * stream's tokens do not depend on kv_grow; tests/unit/engine/test_kvgrow.c. */
static int grow_or_end(qengine *e, int i, int need) {
    if (slot_reserve_rows(&e->slots, i, need) == Q_OK) return 1;
    char msg[REQ_ERROR_BYTES];
    snprintf(msg, sizeof msg, "out of K/V memory: %s", q_lasterr());
    q_error("engine: %s", msg);
    stream_end(e, i, -1, QFINISH_ERROR, msg);
    return 0;
}

/* Builds and runs one round, then commits every stream that got logits. */
static void run_round(qengine *e) {
    slot_table *t = &e->slots;
    int n = 0, n_batch = 0;
    for (int i = 0; i < t->n; i++) { /* every decoding stream's next row */
        qslot *s = &t->slots[i];
        if (s->phase != SLOT_DECODE || !grow_or_end(e, i, s->st->n_past + 1)) continue;
        const qrow row = {.stream = i, .pos = s->st->n_past, .token = s->next_token};
        e->rows[n++] = gen_out_row(&s->req->sampling, row);
        e->batch[n_batch++] = i;
    }
    const int n_decode = n;
    /* plus whole prefill chunks, oldest stream first, while the round's prompt rows stay within prefill_chunk
     * (the oldest's chunk always goes): many short prompts share one forward instead of a round each */
    int n_prefill = 0;
    for (int k = 0, n_order = slot_prefill_order(t, e->order); k < n_order; k++) {
        const int i = e->order[k], len = next_chunk_rows(e, i);
        if (n_prefill > 0 && n_prefill + len > e->p.prefill_chunk) continue;
        if (!grow_or_end(e, i, t->slots[i].st->n_past + len)) continue;
        n = add_prefill_rows(e, i, len, n);
        n_prefill += len;
        e->batch[n_batch++] = i;
    }
    if (n == 0) return;
    if (n > e->max_round_rows) e->max_round_rows = n;

    double t0 = req_now();
    qstatus rc = qwen35_forward_ex(e->m, e->rows, n, t->states, NULL, e->ids);
    double dt = req_now() - t0;
    if (rc != Q_OK) {
        /* A failed forward leaves every stream of the batch undefined (qwen35.h): end them all. Their
         * states are reset when the slots are next admitted into (slot_admit). */
        char msg[REQ_ERROR_BYTES];
        snprintf(msg, sizeof msg, "forward failed: %s", q_lasterr());
        q_error("engine: %s (%d streams ended)", msg, n_batch);
        for (int k = 0; k < n_batch; k++) stream_end(e, e->batch[k], -1, QFINISH_ERROR, msg);
        return;
    }
    int n_logits = 0;
    for (int k = 0; k < n; k++) n_logits += (e->rows[k].flags & (QROW_ARGMAX | QROW_DRAW)) != 0;
    pthread_mutex_lock(&e->mu);
    /* Mixed rounds split the forward's time by rows: a decode row and a prompt row cost about the same
     * in the dense layers, which dominate. */
    e->stats.rounds++;
    e->stats.prompt_tokens += (uint64_t)(n - n_decode);
    e->stats.completion_tokens += (uint64_t)n_logits; /* sampled tokens, an eos included */
    e->stats.prefill_seconds += dt * (double)(n - n_decode) / n;
    e->stats.decode_seconds += dt * (double)n_decode / n;
    pthread_mutex_unlock(&e->mu);

    for (int k = 0, j = 0; k < n; k++) /* the ids come back in row order */
        if (e->rows[k].flags & (QROW_ARGMAX | QROW_DRAW)) stream_commit(e, e->rows[k].stream, e->ids[j++]);
    for (int k = 0; k < n_batch; k++)
        assert(t->slots[e->batch[k]].phase != SLOT_PREFILL || slot_check(t, e->batch[k]));
}

/* ---- the engine thread ------------------------------------------------------------------------- */

/* Ends everything still held (engine_destroy): running streams and waiting requests, CANCELLED. */
static void drain(qengine *e) {
    for (int i = 0; i < e->slots.n; i++)
        if (e->slots.slots[i].phase != SLOT_FREE) stream_end(e, i, -1, QFINISH_CANCELLED, NULL);
    pthread_mutex_lock(&e->mu);
    int n = 0;
    for (qreq *r; (r = reqqueue_pop(&e->queue));) e->taken[n++] = r;
    pthread_mutex_unlock(&e->mu);
    for (int k = 0; k < n; k++) {
        req_deliver(e->taken[k], -1, QFINISH_CANCELLED, NULL);
        req_unref(e->taken[k]);
    }
}

static void *engine_main(void *arg) {
    qengine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->queue.n == 0 && e->n_running == 0) pthread_cond_wait(&e->wake, &e->mu);
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        assert(e->n_running == e->slots.n_busy); /* every earlier admission has completed */
        int n_drop = drop_cancelled_waiting(e);
        int n_take = take_waiting(e, n_drop);
        pthread_mutex_unlock(&e->mu);

        for (int k = 0; k < n_drop; k++) {
            req_deliver(e->taken[k], -1, req_cancel_asked(e->taken[k]), NULL);
            req_unref(e->taken[k]);
        }
        for (int k = 0; k < n_take; k++) admit_waiting(e, e->taken[n_drop + k]);
        end_cancelled(e);
        run_round(e);
        publish_memory(e); /* before give-back, so the peak sees what the round held */
        give_back_pending(e);
    }
    drain(e);
    return NULL;
}

/* ---- public API -------------------------------------------------------------------------------- */

void engine_destroy(qengine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        pthread_cond_destroy(&e->wake);
        pthread_mutex_destroy(&e->mu);
    }
    slot_table_fini(e->m, &e->slots);
    reqqueue_fini(&e->queue);
    free(e->mem_rows);
    free(e->mem_charge);
    free(e->rows);
    free(e->ids);
    free(e->batch);
    free(e->order);
    free(e->taken);
    free(e);
}

qstatus engine_create(qwen35_model *m, const qengine_params *p, qengine **out) {
    *out = NULL;
    if (!m) return q_fail(Q_EINVAL, "engine: no model");
    Q_TRY(check_params(p));
    qengine *e = calloc(1, sizeof *e);
    if (!e) return q_fail(Q_ENOMEM, "engine: out of memory");
    e->m = m;
    e->p = *p;
    const int cap = p->queue_cap + p->n_parallel;
    const char *hook = getenv("QUILL_TEST_KV_FAIL_AFTER"); /* kvmem.h: forces one mapping failure */
    if (hook && *hook) kvmem_test_fail_after(atoi(hook));
    qstatus st = slot_table_init(m, p->n_parallel, p->n_ctx, p->kv_grow, &e->slots);
    e->first_rows = e->slots.first_rows;
    e->kv_budget = p->kv_budget_rows > 0 ? p->kv_budget_rows : (int64_t)p->n_parallel * p->n_ctx;
    e->kv_committed = (int64_t)p->n_parallel * e->first_rows;
    if (st == Q_OK) st = reqqueue_init(&e->queue, cap);
    if (st == Q_OK) {
        e->rows = malloc((size_t)(p->n_parallel + p->prefill_chunk) * sizeof *e->rows);
        e->ids = malloc((size_t)p->n_parallel * sizeof *e->ids);
        e->batch = malloc((size_t)p->n_parallel * sizeof *e->batch);
        e->order = malloc((size_t)p->n_parallel * sizeof *e->order);
        e->taken = malloc((size_t)cap * sizeof *e->taken);
        e->mem_rows = calloc((size_t)p->n_parallel, sizeof *e->mem_rows);
        e->mem_charge = calloc((size_t)p->n_parallel, sizeof *e->mem_charge);
        if (!e->rows || !e->ids || !e->batch || !e->order || !e->taken || !e->mem_rows || !e->mem_charge)
            st = q_fail(Q_ENOMEM, "engine: out of memory for round buffers (%d slots, chunk %d)",
                        p->n_parallel, p->prefill_chunk);
    }
    if (st == Q_OK && pthread_mutex_init(&e->mu, NULL) != 0)
        st = q_fail(Q_ENOMEM, "engine: cannot create its mutex");
    if (st == Q_OK && pthread_cond_init(&e->wake, NULL) != 0) {
        pthread_mutex_destroy(&e->mu);
        st = q_fail(Q_ENOMEM, "engine: cannot create its condvar");
    }
    if (st == Q_OK) {
        qengine_memory *g = &e->mem;
        g->backend = m->be->ops->name;
        g->weights_bytes = m->w.n_bytes;
        g->gdn_bytes = (int64_t)p->n_parallel * qwen35_gdn_state_bytes(&m->cfg);
        g->host_bytes = (int64_t)((size_t)(p->n_parallel + p->prefill_chunk) * sizeof *e->rows +
                                  (size_t)p->n_parallel * sizeof *e->ids);
        g->kv_bytes_per_row = qwen35_kv_bytes_per_token(&m->cfg);
        g->kv_type = qwen35_kv_type_name(&m->cfg);
        g->gdn_state_type = qwen35_gdn_state_type_name(&m->cfg);
        g->n_parallel = p->n_parallel;
        g->n_ctx = p->n_ctx;
        g->kv_grow = p->kv_grow;
        g->first_rows = e->first_rows;
        g->kv_budget_rows = e->kv_budget;
        publish_memory(e); /* the mutex exists by now; the thread does not yet */
    }
    if (st == Q_OK && pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        pthread_cond_destroy(&e->wake);
        pthread_mutex_destroy(&e->mu);
        st = q_fail(Q_ENOMEM, "engine: cannot start its thread");
    }
    if (st != Q_OK) {
        engine_destroy(e); /* thread_started == 0: frees what was made */
        return st;
    }
    e->thread_started = 1;
    *out = e;
    return Q_OK;
}

int engine_stream_rows_max(const qengine *e) {
    int64_t most = e->kv_budget - (int64_t)(e->p.n_parallel - 1) * e->first_rows;
    if (e->p.kv_grow > 0) most -= most % e->p.kv_grow; /* charges round up to the step */
    return most < e->p.n_ctx ? (int)most : e->p.n_ctx;
}

qstatus engine_submit(qengine *e, const qreq_params *p, qreq **out) {
    *out = NULL;
    qreq *r = NULL;
    Q_TRY(req_create(p, e->m->cfg.vocab_size, e->p.n_ctx, &r));
    r->kv_charge = kv_charge(e, (int64_t)p->n_prompt + p->max_tokens);
    qstatus st = Q_OK;
    /* the most one stream can be charged: the budget less first_rows for every other (idle) slot */
    const int64_t most = e->kv_budget - (int64_t)(e->p.n_parallel - 1) * e->first_rows;
    if (r->kv_charge > most) {
        if (kv_charge(e, (int64_t)p->n_prompt + 1) > most)
            st = q_fail(Q_EINVAL, "prompt: %d tokens need more K/V rows than the budget lets one stream "
                        "hold (%lld)", p->n_prompt, (long long)most);
        else
            st = q_fail(Q_EINVAL, "max_tokens: prompt (%d tokens) + max_tokens (%d) need %d K/V rows; the "
                        "budget lets one stream hold %lld", p->n_prompt, p->max_tokens, r->kv_charge,
                        (long long)most);
        req_unref(r);
        req_unref(r);
        return st;
    }
    pthread_mutex_lock(&e->mu);
    if (e->stop) {
        st = q_fail(Q_EFULL, "engine is shutting down");
    } else if (e->queue.n + e->n_running >= e->p.queue_cap + e->p.n_parallel) {
        st = q_fail(Q_EFULL, "engine: queue full (%d waiting, queue_cap %d; %d running)", e->queue.n,
                    e->p.queue_cap, e->n_running);
    } else {
        st = reqqueue_push(&e->queue, r); /* cannot fail: the check above bounds it by the ring */
        if (st == Q_OK) pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->mu);
    if (st != Q_OK) {
        req_unref(r); /* both references: nobody else saw it */
        req_unref(r);
        return st;
    }
    *out = r;
    return Q_OK;
}

void engine_get_memory(qengine *e, qengine_memory *out, int *slot_rows, int *slot_charge, int cap) {
    pthread_mutex_lock(&e->mu);
    *out = e->mem;
    out->kv_committed_rows = e->kv_committed;
    for (int i = 0; i < e->p.n_parallel && i < cap; i++) {
        if (slot_rows) slot_rows[i] = e->mem_rows[i];
        if (slot_charge) slot_charge[i] = e->mem_charge[i];
    }
    pthread_mutex_unlock(&e->mu);
}

void engine_get_stats(qengine *e, qengine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->running = e->n_running;
    out->waiting = e->queue.n;
    pthread_mutex_unlock(&e->mu);
}
