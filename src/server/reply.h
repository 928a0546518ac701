/* reply.h: one reply's text as its token ids arrive: incremental detokenization (tokenizer/detok.h),
 * then stop strings (stop_strings.h) over the whole text, then the reasoning split (reasoning.h). The
 * reply also keeps the ids it consumed, for usage and the completion hash. Not here: HTTP, the engine
 * (completion.c reads ids from the engine and tells it to stop when reply_feed says so). */
#ifndef QUILL_REPLY_H
#define QUILL_REPLY_H

#include <stdint.h>

#include "../tokenizer/detok.h"
#include "reasoning.h"
#include "stop_strings.h"

#define REPLY_MAX_END 4

typedef struct qreply {
    detok *dt;          /* owned */
    qstop stop;
    qreason reason;
    int32_t end_ids[REPLY_MAX_END]; /* ids that end the reply, not returned (<|im_end|>, ...) */
    int n_end;
    int32_t *ids;       /* owned: the ids consumed, [n_ids] */
    int n_ids, cap_ids;
    int over;           /* write-once: a stop string or an end id was met; later ids are ignored */
    sbuf text;          /* scratch: stop-string output of one feed */
    sbuf content;       /* new content since the caller last cleared it */
    sbuf reasoning;     /* new reasoning since the caller last cleared it */
} qreply;

/* stops: borrowed, must outlive r. think_opened: the prompt ended with "<think>\n". end_ids: copied.
 * Returns Q_OK or Q_ENOMEM. */
qstatus reply_init(qreply *r, const qtokenizer *tok, const char *const *stops, int n_stops, int think_opened,
                   const int32_t *end_ids, int n_end);
void reply_fini(qreply *r);

/* Consumes ids; appends their text to r->content / r->reasoning. Returns 1 when the reply is over (a
 * stop string matched, or an end id came): the caller ends the stream with QFINISH_STOP. 0 while it
 * goes on; -1 when out of memory. */
int reply_feed(qreply *r, const int32_t *ids, int n);
/* The stream ended: flushes held text into content / reasoning. 0 or -1. */
int reply_finish(qreply *r);

#endif
