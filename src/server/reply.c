/* reply.c: ids -> text -> stop strings -> reasoning split (see reply.h).
 *
 * Counting: an id that completes a stop string is consumed (it counts in usage and the hash, as the
 * engine did generate it); ids after it, which the engine may still hand over before it sees the
 * cancel, are ignored. An end id (<|im_end|> for chat) is neither consumed nor returned, matching the
 * engine's own end-of-sequence rule. */
#include "reply.h"

#include <stdlib.h>
#include <string.h>

#include "../util/status.h"

qstatus reply_init(qreply *r, const qtokenizer *tok, const char *const *stops, int n_stops, int think_opened,
                   const int32_t *end_ids, int n_end) {
    memset(r, 0, sizeof *r);
    if (tok) {
        qstatus st = detok_create(tok, 1, &r->dt);
        if (st != Q_OK) return st;
    }
    stop_init(&r->stop, stops, n_stops);
    reason_init(&r->reason, think_opened);
    for (int i = 0; i < n_end && r->n_end < REPLY_MAX_END; i++)
        if (end_ids[i] >= 0) r->end_ids[r->n_end++] = end_ids[i];
    return Q_OK;
}

void reply_fini(qreply *r) {
    if (!r) return;
    detok_destroy(r->dt);
    stop_fini(&r->stop);
    reason_fini(&r->reason);
    free(r->ids);
    sbuf_free(&r->text);
    sbuf_free(&r->content);
    sbuf_free(&r->reasoning);
    memset(r, 0, sizeof *r);
}

static int push_id(qreply *r, int32_t id) {
    if (r->n_ids == r->cap_ids) {
        int cap = r->cap_ids ? r->cap_ids * 2 : 64;
        int32_t *p = realloc(r->ids, (size_t)cap * sizeof *p);
        if (!p) return -1;
        r->ids = p;
        r->cap_ids = cap;
    }
    r->ids[r->n_ids++] = id;
    return 0;
}

/* Runs text through the stop strings and the reasoning split. Returns 1 on a stop match. */
static int pass_text(qreply *r, const char *t, size_t n) {
    sbuf_clear(&r->text);
    int m = stop_feed(&r->stop, t, n, &r->text);
    if (m < 0) return -1;
    if (r->text.n && reason_feed(&r->reason, r->text.p, r->text.n, &r->reasoning, &r->content)) return -1;
    return m;
}

int reply_feed(qreply *r, const int32_t *ids, int n) {
    for (int i = 0; i < n && !r->over; i++) {
        for (int e = 0; e < r->n_end; e++) {
            if (ids[i] == r->end_ids[e]) {
                r->over = 1;
                return 1;
            }
        }
        if (push_id(r, ids[i])) return -1;
        const char *t = "";
        size_t tn = 0;
        /* An id the tokenizer does not know (a model vocabulary larger than the tokenizer's, padded
         * rows) has no text; it still counts. */
        if (r->dt && detok_feed(r->dt, ids[i], &t, &tn) != Q_OK) tn = 0;
        int m = pass_text(r, t, tn);
        if (m < 0) return -1;
        if (m) r->over = 1;
    }
    return r->over;
}

int reply_finish(qreply *r) {
    if (!r->stop.matched && r->dt) {
        const char *t = "";
        size_t tn = 0;
        if (detok_flush(r->dt, &t, &tn) == Q_OK && tn && pass_text(r, t, tn) < 0) return -1;
    }
    sbuf_clear(&r->text);
    if (stop_flush(&r->stop, &r->text)) return -1;
    if (r->text.n && reason_feed(&r->reason, r->text.p, r->text.n, &r->reasoning, &r->content)) return -1;
    return reason_flush(&r->reason, &r->reasoning);
}
