/* server.h: what every HTTP handler shares (the engine, tokenizer, chat template, metrics) and the
 * handler interface between http.c (transport) and the endpoint files (completion.c, endpoints.c).
 *
 * Shutdown: `stopping` is set and then the engine is destroyed under the write side of `engine_lock`;
 * every handler that touches the engine holds the read side and checks `stopping` first, so no request
 * can reach a destroyed engine (a keep-alive connection may send one during the shutdown). Requests
 * already submitted stay readable after engine_destroy (engine_internal.h). */
#ifndef QUILL_SERVER_H
#define QUILL_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../engine/engine.h"
#include "../tokenizer/chat.h"
#include "../tokenizer/tokenizer.h"
#include "metrics.h"
#include "openai_request.h"
#include "sbuf.h"

#define SERVER_MAX_BODY_BYTES (8u << 20) /* larger bodies get 413 */
#define SERVER_MAX_END_IDS 4

typedef struct qsrv {
    qengine *engine;           /* owned by cmd_serve; NULL after shutdown */
    pthread_rwlock_t engine_lock;
    atomic_int stopping;
    const qwen35_model *model; /* borrowed */
    const qtokenizer *tok;     /* borrowed */
    const chat_template *tmpl; /* borrowed; NULL: chat completions answer 400 */
    qmetrics *metrics;         /* borrowed */
    char model_name[128];      /* the id /v1/models reports and replies echo */
    int n_ctx, n_parallel, n_vocab;
    int stream_rows_max; /* engine_stream_rows_max: bounds the default max_tokens */
    int32_t end_ids[SERVER_MAX_END_IDS]; /* chat replies end at these (<|im_end|>, <|endoftext|>) */
    int n_end;
    int64_t weights_bytes, slot_bytes; /* for /memory */
    atomic_ullong serial;      /* request ids */
    long long started;         /* unix seconds */
} qsrv;

/* A request as the handlers see it. */
typedef struct hreq {
    const char *method, *url;
    const char *body;          /* NUL-terminated; "" when none */
    size_t body_n;
    int fd;                    /* the client's socket, for disconnect checks; -1 if unknown */
} hreq;

/* A reply: a whole body, or a stream (SSE) produced by read_cb on the connection's own thread. */
typedef struct hreply {
    int status;
    const char *ctype;         /* static string */
    sbuf body;                 /* owned by http.c once the handler returns */
    int retry_after;           /* seconds; 0: no Retry-After header */
    /* stream: read_cb fills up to max bytes and returns how many, or HTTP_STREAM_END /
     * HTTP_STREAM_ERROR; it may block. free_cb runs once when the connection is done with it. */
    ssize_t (*read_cb)(void *cls, char *buf, size_t max);
    void (*free_cb)(void *cls);
    void *cls;
} hreply;

#define HTTP_STREAM_END ((ssize_t)-1)
#define HTTP_STREAM_ERROR ((ssize_t)-2)

/* 1 when the client has closed its end of fd (read side shut or the socket failed). */
int http_client_gone(int fd);

/* Sets out to an OpenAI error reply. */
void server_error_reply(hreply *out, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Endpoints. */
void completion_handle(qsrv *s, const hreq *rq, int is_chat, hreply *out);
void endpoint_models(qsrv *s, const hreq *rq, hreply *out);
void endpoint_health(qsrv *s, const hreq *rq, hreply *out);
void endpoint_metrics(qsrv *s, const hreq *rq, hreply *out);
void endpoint_memory(qsrv *s, const hreq *rq, hreply *out);
void endpoint_tokenize(qsrv *s, const hreq *rq, hreply *out);
void endpoint_detokenize(qsrv *s, const hreq *rq, hreply *out);

/* The prompt ids of a chat request (template + tokenizer). Owned *ids. Fills err on failure. */
int server_chat_ids(qsrv *s, json_t *request, int32_t **ids, int *n, oai_error *err);

#endif
