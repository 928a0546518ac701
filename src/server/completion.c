/* completion.c: POST /v1/chat/completions and /v1/completions, from the parsed request to the last
 * byte: prompt ids, the context check, engine_submit, then either one JSON body or an SSE stream.
 *
 * Order of checks (all before any token, so a bad request never costs the engine anything): JSON and
 * field types (openai_request.c), the template or tokenizer, token ids against the vocabulary, prompt
 * plus max_tokens against --context, then the queue (503 + Retry-After when full).
 * A stream's events: [chat: a first chunk with the role] -> content chunks (finish_reason null) -> one
 * chunk with finish_reason (and our "quill" hash) -> [include_usage: a chunk with choices [] and usage]
 * -> data: [DONE]. A client that goes away (socket closed while waiting, or a failed write, which makes
 * MHD call stream_free early) cancels its stream with QFINISH_CANCELLED: the engine frees the slot at
 * the next round. Every finished request logs one line (id, tokens, TTFT, tokens/s, finish, hash). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../util/hash.h"
#include "../util/log.h"
#include "openai_response.h"
#include "reply.h"
#include "server.h"

#define POLL_MS 50 /* how long a wait for tokens lasts before the client's socket is checked again */

enum { PH_START, PH_RUN, PH_END };

typedef struct completion {
    qsrv *s;
    oai_request req;
    oai_resp resp;
    qreply reply;
    int reply_ready;
    qreq *r;            /* engine request (client reference) or NULL */
    int32_t *prompt;    /* owned */
    int n_prompt, max_tokens;
    int n_seen;         /* ids read from the engine */
    int think;          /* the rendered prompt opened a think block: reasoning_content is reported */
    int fd;
    int done;           /* the reply is complete (finish set) or failed */
    const char *finish; /* "stop" | "length" once done without failure */
    int failed;         /* err holds why (engine error, shutdown, out of memory) */
    oai_error err;
    int gone;           /* the client disconnected */
    int logged;
    sbuf out;           /* stream: bytes not yet given to MHD, from out_off */
    size_t out_off;
    int phase;
} completion;

static void completion_free(completion *c) {
    if (!c) return;
    if (c->r) engine_release(c->r);
    if (c->reply_ready) reply_fini(&c->reply);
    oai_request_fini(&c->req);
    free(c->prompt);
    sbuf_free(&c->out);
    free(c);
}

static void log_done(completion *c) {
    if (c->logged) return;
    c->logged = 1;
    const char *why = c->gone ? "cancelled" : c->failed ? (c->err.http == 503 ? "cancelled" : "error")
                                                        : c->finish;
    double ttft = c->r ? engine_ttft(c->r) : 0, dec = c->r ? engine_decode_seconds(c->r) : 0;
    int n = c->reply.n_ids;
    double tps = n > 1 && dec > 0 ? (n - 1) / dec : 0;
    uint64_t h = q_hash_tokens(c->reply.ids, (size_t)n);
    q_info("%s: prompt %d tokens, completion %d tokens, ttft %.3f s, %.1f tokens/s, finish %s, hash %016" PRIx64,
           c->resp.id, c->n_prompt, n, ttft, tps, why ? why : "?", h);
    metrics_reply(c->s->metrics, c->n_prompt, n, ttft, dec);
}

static void fail(completion *c, int http, const char *fmt, const char *detail) {
    c->failed = 1;
    c->done = 1;
    oai_fail(&c->err, http, "", fmt, detail ? detail : "");
}

/* Reads what the engine has (waiting up to wait_ms) into the reply. Returns 1 once done. */
static int pump(completion *c, int wait_ms) {
    int32_t ids[256];
    qfinish fin = QFINISH_NONE;
    int n = engine_next(c->r, c->n_seen, ids, (int)(sizeof ids / sizeof ids[0]), wait_ms, &fin);
    if (n > 0) {
        c->n_seen += n;
        int m = reply_feed(&c->reply, ids, n);
        if (m < 0) {
            engine_cancel(c->r, QFINISH_CANCELLED);
            fail(c, 500, "out of memory%s", "");
        } else if (m == 1) {
            engine_cancel(c->r, QFINISH_STOP); /* a stop string or an end id: the slot is freed */
            c->finish = "stop";
            c->done = 1;
        }
    }
    if (!c->done && fin != QFINISH_NONE) {
        c->done = 1;
        if (fin == QFINISH_LENGTH) c->finish = "length";
        else if (fin == QFINISH_STOP) c->finish = "stop";
        else if (fin == QFINISH_CANCELLED) fail(c, 503, "the server is shutting down%s", "");
        else fail(c, 500, "generation failed: %s", engine_error(c->r));
    }
    if (c->done && !c->failed && reply_finish(&c->reply)) fail(c, 500, "out of memory%s", "");
    return c->done;
}

static oai_usage usage_of(const completion *c) {
    return (oai_usage){.prompt_tokens = c->n_prompt, .completion_tokens = c->reply.n_ids,
                       .hash = q_hash_tokens(c->reply.ids, (size_t)c->reply.n_ids)};
}

/* Appends the text made since the last call as one chunk (none if there is none). */
static int emit_delta(completion *c) {
    sbuf *ct = &c->reply.content, *rs = &c->reply.reasoning;
    int rc = 0;
    if (ct->n || rs->n) {
        if (c->resp.is_chat)
            rc = oai_sse_chunk(&c->out, &c->resp, 0, ct->n ? ct->p : NULL, ct->n, rs->n ? rs->p : NULL, rs->n, NULL,
                               NULL);
        else
            rc = oai_sse_chunk(&c->out, &c->resp, 0, ct->p, ct->n, NULL, 0, NULL, NULL);
    }
    sbuf_clear(ct);
    sbuf_clear(rs);
    return rc;
}

static int emit_end(completion *c) {
    if (c->failed) return oai_sse_error(&c->out, &c->err) || oai_sse_done(&c->out) ? -1 : 0;
    oai_usage u = usage_of(c);
    int rc = c->resp.is_chat ? oai_sse_chunk(&c->out, &c->resp, 0, NULL, 0, NULL, 0, c->finish, &u)
                             : oai_sse_chunk(&c->out, &c->resp, 0, "", 0, NULL, 0, c->finish, &u);
    if (!rc && c->resp.include_usage) rc = oai_sse_usage(&c->out, &c->resp, &u);
    if (!rc) rc = oai_sse_done(&c->out);
    return rc;
}

static ssize_t stream_read(void *cls, char *buf, size_t max) {
    completion *c = cls;
    for (;;) {
        if (c->out_off < c->out.n) {
            size_t n = c->out.n - c->out_off;
            if (n > max) n = max;
            memcpy(buf, c->out.p + c->out_off, n);
            c->out_off += n;
            return (ssize_t)n;
        }
        sbuf_clear(&c->out);
        c->out_off = 0;
        if (c->phase == PH_END) return HTTP_STREAM_END;
        if (c->phase == PH_START) {
            c->phase = PH_RUN;
            if (c->resp.is_chat && oai_sse_chunk(&c->out, &c->resp, 1, "", 0, NULL, 0, NULL, NULL)) goto oom;
            continue;
        }
        if (http_client_gone(c->fd)) {
            c->gone = 1;
            engine_cancel(c->r, QFINISH_CANCELLED);
            log_done(c);
            return HTTP_STREAM_ERROR;
        }
        int done = pump(c, POLL_MS);
        if (emit_delta(c)) goto oom;
        if (done) {
            if (emit_end(c)) goto oom;
            c->phase = PH_END;
            log_done(c);
        }
    }
oom:
    engine_cancel(c->r, QFINISH_CANCELLED);
    fail(c, 500, "out of memory%s", "");
    log_done(c);
    return HTTP_STREAM_ERROR;
}

static void stream_free(void *cls) {
    completion *c = cls;
    if (!c->done) { /* MHD gave up on the connection (the client went away, a write failed) */
        c->gone = 1;
        engine_cancel(c->r, QFINISH_CANCELLED);
    }
    log_done(c);
    completion_free(c);
}

int server_chat_ids(qsrv *s, json_t *request, int32_t **ids, int *n, oai_error *err) {
    if (!s->tmpl) return oai_fail(err, 400, "messages", "this model has no chat template: use /v1/completions");
    size_t nn = 0;
    q_clearerr();
    qstatus st = chat_prompt_ids(s->tok, s->tmpl, request, ids, &nn);
    if (st == Q_ENOMEM) return oai_fail(err, 500, "", "out of memory");
    if (st != Q_OK) return oai_fail(err, 400, "messages", "chat template: %s", q_lasterr());
    if (nn == 0 || nn > INT32_MAX / 2) {
        free(*ids);
        *ids = NULL;
        return oai_fail(err, 400, "messages", "the rendered prompt is empty or too long");
    }
    *n = (int)nn;
    return 0;
}

/* The prompt ids of c's request, checked against the vocabulary. */
static int prompt_ids(completion *c, oai_error *err) {
    qsrv *s = c->s;
    oai_request *q = &c->req;
    const char *field = q->is_chat ? "messages" : "prompt";
    if (q->is_chat) {
        if (server_chat_ids(s, q->root, &c->prompt, &c->n_prompt, err)) return -1;
    } else if (q->prompt_ids) {
        c->prompt = q->prompt_ids;
        c->n_prompt = q->n_prompt_ids;
        q->prompt_ids = NULL;
    } else {
        size_t nn = 0;
        if (tok_encode(s->tok, q->prompt_text, q->prompt_len, 1, &c->prompt, &nn) != Q_OK)
            return oai_fail(err, 400, "prompt", "cannot tokenize the prompt: %s", q_lasterr());
        if (nn == 0 || nn > INT32_MAX / 2) return oai_fail(err, 400, "prompt", "the prompt has no tokens");
        c->n_prompt = (int)nn;
    }
    for (int i = 0; i < c->n_prompt; i++)
        if (c->prompt[i] < 0 || c->prompt[i] >= s->n_vocab)
            return oai_fail(err, 400, field, "token id %d at position %d is not in the vocabulary (0..%d)",
                            c->prompt[i], i, s->n_vocab - 1);
    if (c->n_prompt >= s->n_ctx)
        return oai_fail(err, 400, field, "the prompt has %d tokens; the context holds %d (prompt + max_tokens)",
                        c->n_prompt, s->n_ctx);
    /* absent max_tokens: as much as the context, or the K/V budget, lets one stream have */
    int rows_max = s->stream_rows_max > 0 && s->stream_rows_max < s->n_ctx ? s->stream_rows_max : s->n_ctx;
    if (q->max_tokens < 0 && c->n_prompt >= rows_max)
        return oai_fail(err, 400, field, "the prompt has %d tokens; the K/V budget lets one stream hold %d",
                        c->n_prompt, rows_max);
    c->max_tokens = q->max_tokens < 0 ? rows_max - c->n_prompt : q->max_tokens;
    if ((long long)c->n_prompt + c->max_tokens > s->n_ctx)
        return oai_fail(err, 400, "max_tokens",
                        "prompt (%d tokens) + max_tokens (%d) is more than the context (%d tokens)", c->n_prompt,
                        c->max_tokens, s->n_ctx);
    return 0;
}

/* 1 when the rendered chat prompt ends by opening a think block. */
static int think_opened(const completion *c) {
    if (!c->req.is_chat) return 0;
    int k = c->n_prompt < 8 ? c->n_prompt : 8;
    char *text = NULL;
    size_t n = 0;
    if (tok_decode(c->s->tok, c->prompt + c->n_prompt - k, (size_t)k, 0, &text, &n) != Q_OK) return 0;
    int opened = reason_prompt_opened(text, n);
    free(text);
    return opened;
}

static void error_out(hreply *out, const oai_error *e) {
    sbuf_clear(&out->body);
    out->status = e->http ? e->http : 400;
    out->ctype = "application/json";
    if (oai_error_body(&out->body, e)) server_error_reply(out, 500, "", "out of memory");
}

/* Submits c to the engine. 0, or -1 with err filled (and out->retry_after for a full queue). */
static int submit(completion *c, oai_error *err, hreply *out) {
    qsrv *s = c->s;
    qreq_params p = {.prompt = c->prompt, .n_prompt = c->n_prompt, .max_tokens = c->max_tokens,
                     .ignore_eos = c->req.ignore_eos, .sampling = c->req.sampling};
    if (!c->req.has_seed) p.sampling.seed = draw_mix((uint64_t)time(NULL) ^ draw_mix(atomic_load(&s->serial)));
    pthread_rwlock_rdlock(&s->engine_lock);
    qstatus st = Q_EINVAL;
    if (atomic_load(&s->stopping) || !s->engine) {
        pthread_rwlock_unlock(&s->engine_lock);
        out->retry_after = 5;
        return oai_fail(err, 503, "", "the server is shutting down");
    }
    q_clearerr();
    st = engine_submit(s->engine, &p, &c->r);
    pthread_rwlock_unlock(&s->engine_lock);
    if (st == Q_OK) return 0;
    c->r = NULL;
    if (st == Q_EFULL) {
        out->retry_after = 1;
        return oai_fail(err, 503, "", "the server is busy (all slots and the queue are full); retry later");
    }
    if (st == Q_ENOMEM) return oai_fail(err, 500, "", "out of memory");
    /* the engine's messages open with the field they refuse ("max_tokens: ...") */
    const char *msg = q_lasterr();
    char param[32] = "";
    size_t k = strspn(msg, "abcdefghijklmnopqrstuvwxyz_");
    if (k > 0 && k < sizeof param && msg[k] == ':') memcpy(param, msg, k), param[k] = 0;
    return oai_fail(err, 400, param, "%s", msg);
}

void completion_handle(qsrv *s, const hreq *rq, int is_chat, hreply *out) {
    oai_error err = {0};
    completion *c = calloc(1, sizeof *c);
    if (!c) {
        server_error_reply(out, 500, "", "out of memory");
        return;
    }
    c->s = s;
    c->fd = rq->fd;
    uint64_t serial = atomic_fetch_add(&s->serial, 1) + 1;
    if (oai_request_parse(rq->body, rq->body_n, is_chat, &c->req, &err)) goto bad;
    oai_resp_init(&c->resp, is_chat, s->model_name, ((uint64_t)s->started << 24) ^ serial, (long long)time(NULL));
    c->resp.include_usage = c->req.stream && c->req.include_usage;
    if (prompt_ids(c, &err)) goto bad;
    int has_end = is_chat && !c->req.ignore_eos;
    c->think = think_opened(c);
    if (reply_init(&c->reply, s->tok, (const char *const *)c->req.stop, c->req.n_stop, c->think, s->end_ids,
                   has_end ? s->n_end : 0) != Q_OK) {
        oai_fail(&err, 500, "", "out of memory");
        goto bad;
    }
    c->reply_ready = 1;
    if (submit(c, &err, out)) goto bad;

    if (c->req.stream) {
        out->status = 200;
        out->ctype = "text/event-stream";
        out->read_cb = stream_read;
        out->free_cb = stream_free;
        out->cls = c;
        return;
    }
    while (!pump(c, POLL_MS)) {
        if (http_client_gone(c->fd)) {
            c->gone = 1;
            engine_cancel(c->r, QFINISH_CANCELLED);
            log_done(c);
            server_error_reply(out, 499, "", "client closed the connection");
            completion_free(c);
            return;
        }
    }
    log_done(c);
    if (c->failed) {
        error_out(out, &c->err);
        if (c->err.http == 503) out->retry_after = 5;
    } else {
        oai_usage u = usage_of(c);
        out->status = 200;
        out->ctype = "application/json";
        if (oai_response_body(&out->body, &c->resp, c->reply.content.p, c->reply.content.n,
                              c->think ? (c->reply.reasoning.p ? c->reply.reasoning.p : "") : NULL,
                              c->reply.reasoning.n, c->finish, &u))
            server_error_reply(out, 500, "", "out of memory");
    }
    completion_free(c);
    return;
bad:
    error_out(out, &err);
    completion_free(c);
}
