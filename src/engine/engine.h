/* engine.h: many streams sharing each forward (continuous batching), run by one engine thread.
 *
 * Rounds (DESIGN.md): each round takes every decoding stream's next row plus the next prefill chunks
 * (--prefill-chunk rows, cut at multiples of the chunk from position 0: EXACT(chunk)) of the streams
 * still prefilling, oldest first, while the round's prompt rows stay within one chunk (the oldest's
 * always goes), runs one qwen35_forward, samples each stream that produced logits, and
 * hands the tokens over. New requests join between rounds; when all slots are busy, or the K/V
 * budget cannot take the charge of the oldest waiting one (prompt + max_tokens rows), they wait in a
 * bounded FIFO queue. With kv_grow a slot's K/V grows as its stream uses it and is given back when it
 * ends (engine.c, slot.h, kvmem.h). A reply's tokens depend only on (model, prompt, sampling, seed):
 * EXACT(batch), EXACT(grow).
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
    int n_ctx;          /* positions per slot (may exceed the model's max_position_embeddings) */
    int prefill_chunk;  /* a prompt's chunk, and the prompt rows of one round (default 512) */
    int queue_cap;      /* requests waiting beyond the slots; more get Q_EFULL (default 64) */
    int kv_grow;        /* --kv-grow / QUILL_KV_GROW: K/V growth step in rows, a multiple of 16; a
                           slot holds this many rows with no stream and grows as used. 0 (default):
                           every slot holds n_ctx rows from the start */
    int64_t kv_budget_rows; /* K/V rows all slots may hold together; 0 (default): n_parallel * n_ctx.
                           A stream is charged prompt + max_tokens rows (rounded up to kv_grow, at
                           least kv_grow, at most n_ctx), an idle slot kv_grow rows (n_ctx with
                           kv_grow 0); admission keeps the sum within the budget (see engine.c) */
} qengine_params;

/* The defaults above, with n_parallel 1 and n_ctx 4096. engine_create checks every field (0 means
 * default only where said): n_parallel >= 1, n_ctx >= 2, prefill_chunk >= 1, queue_cap >= 0,
 * kv_grow >= 0 and a multiple of 16, kv_budget_rows 0 or >= n_parallel * min(kv_grow, n_ctx). */
qengine_params engine_params_default(void);
/* Applies QUILL_KV_GROW (when set) to p->kv_grow; Q_EINVAL naming the variable when it is not a
 * non-negative multiple of 16. Call before applying command-line flags, which win. */
qstatus engine_params_from_env(qengine_params *p);

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
/* The most rows (prompt + max_tokens) one stream can ever be admitted with: the context, or less when
 * the K/V budget is smaller (the budget less the first rows of every other slot, in whole steps).
 * A server uses it for the default max_tokens. */
int engine_stream_rows_max(const qengine *e);

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

/* Memory held by the engine's backend, now and at its peak since engine_create (bytes), and the K/V
 * budget. Backend memory is the GPU's with the CUDA backend, host RAM with the CPU backend. */
typedef struct qengine_memory {
    const char *backend;        /* the backend's name ("cpu", "cuda"); static */
    const char *kv_type;        /* the K/V caches' element type ("f32", "bf16"); static */
    const char *gdn_state_type; /* the GDN recurrent states' element type ("f32", "bf16"); static */
    int64_t weights_bytes;      /* model weights */
    int64_t kv_bytes, kv_peak_bytes;   /* K/V mapped (grow) or allocated (no grow) */
    int64_t gdn_bytes;          /* GDN conv + recurrent states, every slot */
    int64_t scratch_bytes;      /* activation scratch of the largest round so far */
    int64_t prompt_cache_bytes; /* 0 until the prompt cache exists */
    int64_t total_bytes, total_peak_bytes;
    int64_t host_bytes;         /* the engine's host round buffers (rows, ids) */
    int64_t kv_bytes_per_row;   /* one position over every attention layer, K and V */
    int n_parallel, n_ctx, kv_grow, first_rows;
    int64_t kv_budget_rows;     /* the budget */
    int64_t kv_committed_rows;  /* charges of busy slots + first_rows of each idle one (<= budget) */
    int64_t kv_held_rows;       /* rows held now over all slots */
} qengine_memory;

/* Fills *out; slot_rows[i] / slot_charge[i] (either may be NULL) get slot i's rows held and charge
 * (0 when idle) for i < min(cap, n_parallel). Any thread; never waits for a round. */
void engine_get_memory(qengine *e, qengine_memory *out, int *slot_rows, int *slot_charge, int cap);

/* engine_memory.c: renders engine_get_memory for GET /memory as an owned JSON string (free with
 * free()), or appends Prometheus gauges (quill_memory_bytes{kind=...}, quill_memory_peak_bytes,
 * quill_kv_budget_rows, quill_kv_committed_rows, quill_kv_held_rows, quill_slot_kv_rows{slot=...})
 * to buf: returns the length the text needs (like snprintf), writing at most cap bytes with a NUL. */
qstatus engine_memory_json(qengine *e, char **out);
size_t engine_memory_prometheus(qengine *e, char *buf, size_t cap);

#endif
