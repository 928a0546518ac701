/* engine.h: many streams sharing each forward (continuous batching), run by one engine thread.
 *
 * Rounds (DESIGN.md): each round takes every decoding stream's next row plus at most one prefill chunk
 * (--prefill-chunk rows, cut at multiples of the chunk from position 0: EXACT(chunk)) of the oldest
 * stream still prefilling, runs one qwen35_forward, samples each stream that produced logits, and
 * hands the tokens over. New requests join between rounds; when all slots are busy they wait in a
 * bounded FIFO queue. A reply's tokens depend only on (model, prompt, sampling, seed): EXACT(batch).
 *
 * Threads: engine_submit / engine_next / engine_cancel / engine_release are called from client
 * threads (the HTTP server's); they never block a round. The engine thread owns the model and slots.
 *
 *   client thread                      engine thread
 *   engine_submit ---- queue ------->  admit into a free slot (state reset), prefill chunks,
 *   engine_next   <--- tokens -------  decode rounds, finish (length | eos | cancelled | error)
 *   engine_cancel ---- flag -------->  ends the stream at the next round, frees the slot
 *   engine_release     (client done; the request is freed once the engine is done with it too)
 */
#ifndef QUILL_ENGINE_H
#define QUILL_ENGINE_H

#include <stdint.h>

#include "../model/qwen35.h"
#include "sample.h"

typedef struct qengine_params {
    int n_parallel;     /* slots: streams decoding at once */
    int n_ctx;          /* positions per slot */
    int prefill_chunk;  /* rows of one prompt per round (default 512) */
    int queue_cap;      /* requests waiting beyond the slots; more get Q_EFULL (default 64) */
} qengine_params;

/* The defaults above, with n_parallel 1 and n_ctx 4096. engine_create checks every field (no 0 means
 * default): n_parallel >= 1, n_ctx >= 2, prefill_chunk >= 1, queue_cap >= 0. */
qengine_params engine_params_default(void);

typedef enum qfinish {
    QFINISH_NONE = 0,   /* still running */
    QFINISH_LENGTH,     /* max_tokens reached */
    QFINISH_STOP,       /* an end-of-sequence token (not returned), or engine_cancel(.., QFINISH_STOP) */
    QFINISH_CANCELLED,  /* the client went away */
    QFINISH_ERROR       /* the forward failed; message in engine_error */
} qfinish;

typedef struct qreq_params {
    const int32_t *prompt; /* copied by engine_submit */
    int n_prompt;          /* >= 1 */
    int max_tokens;        /* >= 1; n_prompt + max_tokens <= n_ctx is checked at submit */
    int ignore_eos;
    qsampling sampling;
} qreq_params;

typedef struct qengine qengine;
typedef struct qreq qreq;

typedef struct qengine_stats {
    int running, waiting;                       /* now */
    uint64_t prompt_tokens, completion_tokens;  /* since start */
    double prefill_seconds, decode_seconds;     /* forward time spent on each kind of row */
    uint64_t rounds;                            /* forwards run since start */
} qengine_stats;

/* Starts the engine thread over model m (borrowed; must outlive the engine). */
qstatus engine_create(qwen35_model *m, const qengine_params *p, qengine **out);
/* Ends every stream (QFINISH_CANCELLED), joins the thread, frees the slots. */
void engine_destroy(qengine *e);

/* Queues a request. Q_EINVAL (message names the field) for a bad request, Q_EFULL when the queue is
 * full. *out is the client's reference: pass it to engine_release when done. */
qstatus engine_submit(qengine *e, const qreq_params *p, qreq **out);

/* Waits up to timeout_ms (-1: forever, 0: not at all) for tokens after the first n_seen; copies up to
 * cap of them into buf and returns how many. *finish (if not NULL) is the finish reason once every
 * token has been handed over (QFINISH_NONE while more may come). Never blocks the engine. */
int engine_next(qreq *r, int n_seen, int32_t *buf, int cap, int timeout_ms, qfinish *finish);

/* Asks the engine to end the stream at the next round with `why` (QFINISH_STOP when the client matched
 * a stop string, QFINISH_CANCELLED when it disconnected). Safe to call more than once. */
void engine_cancel(qreq *r, qfinish why);
/* Drops the client's reference; r must not be used after. It does not end the stream (engine_cancel
 * does): the engine frees r when it is done too. Safe at any time, also after engine_destroy. */
void engine_release(qreq *r);

/* Seconds from submit to the first token (0 before it), and from first to last token. */
double engine_ttft(const qreq *r);
double engine_decode_seconds(const qreq *r);
const char *engine_error(const qreq *r);

void engine_get_stats(qengine *e, qengine_stats *out);

#endif
