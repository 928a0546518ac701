/* endpoints.c: the small endpoints: GET /v1/models, /health, /metrics, /memory; POST /tokenize and
 * /detokenize (vLLM's fields: {"prompt"} or {"messages"} -> {"tokens", "count", "max_model_len"};
 * {"tokens"} -> {"prompt"}). Not here: completions (completion.c). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "json_gate.h"
#include "openai_response.h"
#include "server.h"

/* Puts text (owned, JSON; NULL: out of memory) into out as a 200 JSON body. */
static void text_out(hreply *out, char *text) {
    if (!text || sbuf_adds(&out->body, text)) {
        free(text);
        server_error_reply(out, 500, "", "out of memory");
        return;
    }
    free(text);
    out->status = 200;
    out->ctype = "application/json";
}

/* Dumps root (stolen) into out as a 200 JSON body. */
static void json_out(hreply *out, json_t *root) {
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    text_out(out, s);
}

void endpoint_models(qsrv *s, const hreq *rq, hreply *out) {
    (void)rq;
    json_out(out, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i}]}", "object", "list", "data", "id", s->model_name,
                            "object", "model", "created", (json_int_t)s->started, "owned_by", "quill",
                            "max_model_len", s->n_ctx));
}

void endpoint_health(qsrv *s, const hreq *rq, hreply *out) {
    (void)rq;
    if (atomic_load(&s->stopping)) {
        server_error_reply(out, 503, "", "the server is shutting down");
        return;
    }
    json_out(out, json_pack("{s:s}", "status", "ok"));
}

void endpoint_metrics(qsrv *s, const hreq *rq, hreply *out) {
    (void)rq;
    qengine_stats st;
    int have = 0;
    pthread_rwlock_rdlock(&s->engine_lock);
    if (s->engine && !atomic_load(&s->stopping)) {
        engine_get_stats(s->engine, &st);
        have = 1;
    }
    pthread_rwlock_unlock(&s->engine_lock);
    char *mem = NULL;
    pthread_rwlock_rdlock(&s->engine_lock);
    if (have && s->engine && !atomic_load(&s->stopping)) { /* memory gauges, same figures as /memory */
        /* each call takes a fresh snapshot: render until one fits whole (a figure may gain digits) */
        for (size_t cap = engine_memory_prometheus(s->engine, NULL, 0) + 256;; cap *= 2) {
            free(mem);
            if (!(mem = malloc(cap))) break;
            if (engine_memory_prometheus(s->engine, mem, cap) < cap) break;
        }
    }
    pthread_rwlock_unlock(&s->engine_lock);
    int bad = metrics_render(s->metrics, have ? &st : NULL, &out->body) || (mem && sbuf_adds(&out->body, mem));
    free(mem);
    if (bad) {
        server_error_reply(out, 500, "", "out of memory");
        return;
    }
    out->status = 200;
    out->ctype = "text/plain; version=0.0.4";
}

/* What is held now and its peak (engine/engine_memory.c renders it). */
void endpoint_memory(qsrv *s, const hreq *rq, hreply *out) {
    (void)rq;
    char *text = NULL;
    qstatus st = Q_EINVAL;
    pthread_rwlock_rdlock(&s->engine_lock);
    if (s->engine && !atomic_load(&s->stopping)) st = engine_memory_json(s->engine, &text);
    pthread_rwlock_unlock(&s->engine_lock);
    if (st != Q_OK) {
        free(text);
        server_error_reply(out, 503, "", "memory figures unavailable: %s", q_lasterr());
        return;
    }
    text_out(out, text);
}

static json_t *parse_body(const hreq *rq, hreply *out) {
    json_error_t e;
    json_t *root = json_gate_loadb(rq->body, rq->body_n, JSON_REJECT_DUPLICATES, &e);
    if (!root) {
        server_error_reply(out, 400, "", "the body is not valid JSON: %s (line %d)", e.text, e.line);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        server_error_reply(out, 400, "", "the body must be a JSON object");
        return NULL;
    }
    return root;
}

void endpoint_tokenize(qsrv *s, const hreq *rq, hreply *out) {
    json_t *root = parse_body(rq, out);
    if (!root) return;
    json_t *prompt = json_object_get(root, "prompt"), *msgs = json_object_get(root, "messages");
    int32_t *ids = NULL;
    int n = 0;
    oai_error err = {0};
    if (msgs) {
        oai_request tmp;
        /* the same checks as a chat completion; the body is parsed twice, which is cheap next to
         * rendering the template */
        if (oai_request_parse(rq->body, rq->body_n, 1, &tmp, &err)) goto bad;
        oai_request_fini(&tmp);
        if (server_chat_ids(s, root, &ids, &n, &err)) goto bad;
    } else if (json_is_string(prompt)) {
        json_t *sp = json_object_get(root, "add_special_tokens");
        if (sp && !json_is_boolean(sp)) {
            oai_fail(&err, 400, "add_special_tokens", "'add_special_tokens' must be a boolean");
            goto bad;
        }
        size_t nn = 0;
        if (tok_encode(s->tok, json_string_value(prompt), json_string_length(prompt), 1, &ids, &nn) != Q_OK) {
            oai_fail(&err, 400, "prompt", "cannot tokenize: %s", q_lasterr());
            goto bad;
        }
        n = (int)nn;
    } else {
        oai_fail(&err, 400, prompt ? "prompt" : "", "give 'prompt' (a string) or 'messages' (a list)");
        goto bad;
    }
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_integer(ids[i]))) {
            json_decref(arr);
            arr = NULL;
        }
    free(ids);
    json_decref(root);
    json_out(out, arr ? json_pack("{s:o, s:i, s:i}", "tokens", arr, "count", n, "max_model_len", s->n_ctx) : NULL);
    return;
bad:
    free(ids);
    json_decref(root);
    sbuf_clear(&out->body);
    out->status = err.http;
    out->ctype = "application/json";
    if (oai_error_body(&out->body, &err)) server_error_reply(out, 500, "", "out of memory");
}

void endpoint_detokenize(qsrv *s, const hreq *rq, hreply *out) {
    json_t *root = parse_body(rq, out);
    if (!root) return;
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        json_decref(root);
        server_error_reply(out, 400, "tokens", "'tokens' must be a list of token ids");
        return;
    }
    size_t n = json_array_size(toks), i;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        json_decref(root);
        server_error_reply(out, 500, "", "out of memory");
        return;
    }
    json_t *v;
    json_array_foreach(toks, i, v) {
        long long x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x < 0 || x >= tok_n_vocab(s->tok)) {
            free(ids);
            json_decref(root);
            server_error_reply(out, 400, "tokens", "'tokens[%zu]' is not a token id of this tokenizer (0..%d)", i,
                               tok_n_vocab(s->tok) - 1);
            return;
        }
        ids[i] = (int32_t)x;
    }
    json_decref(root);
    char *text = NULL;
    size_t tn = 0;
    qstatus st = tok_decode(s->tok, ids, n, 0, &text, &tn);
    free(ids);
    if (st != Q_OK) {
        server_error_reply(out, 400, "tokens", "%s", q_lasterr());
        return;
    }
    sbuf clean = {0};
    int bad = oai_utf8_sanitize(&clean, text, tn);
    free(text);
    json_out(out, bad ? NULL : json_pack("{s:s%}", "prompt", clean.p ? clean.p : "", clean.n));
    sbuf_free(&clean);
}
