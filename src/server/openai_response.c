/* openai_response.c: building OpenAI response JSON with jansson (see openai_response.h).
 *
 * Shapes (openai-python types chat_completion(_chunk).py, completion.py):
 *   chat:        {id, object: "chat.completion", created, model, choices: [{index, message: {role,
 *                content, reasoning_content?}, logprobs: null, finish_reason}], usage, quill}
 *   chat chunk:  {id, object: "chat.completion.chunk", created, model, choices: [{index, delta: {role?,
 *                content?, reasoning_content?}, logprobs: null, finish_reason}], usage?}
 *   completion:  {id, object: "text_completion", created, model, choices: [{index, text, logprobs: null,
 *                finish_reason}], usage}
 * "quill": {"completion_hash": "<16 hex>"} is our extension: the exactness tests compare it. */
#include "openai_response.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tokenizer/tokenizer.h"

void oai_resp_init(oai_resp *r, int is_chat, const char *model, uint64_t serial, long long created) {
    memset(r, 0, sizeof *r);
    r->is_chat = is_chat;
    snprintf(r->id, sizeof r->id, "%s-%016" PRIx64, is_chat ? "chatcmpl" : "cmpl", serial);
    r->created = created;
    snprintf(r->model, sizeof r->model, "%s", model ? model : "");
}

int oai_utf8_sanitize(sbuf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        const int len = tok_utf8_next(u + i, n - i); /* <= 0: invalid or cut short, one byte becomes U+FFFD */
        if (len > 0 && !(len == 1 && u[i] == 0)) {
            i += (size_t)len;
            continue;
        }
        if (sbuf_add(out, s + run, i - run)) return -1;
        if (sbuf_add(out, "\xEF\xBF\xBD", 3)) return -1; /* U+FFFD; NUL too, JSON text must not hold one */
        i++;
        run = i;
    }
    return sbuf_add(out, s + run, n - run);
}

size_t oai_utf8_complete_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        const int len = tok_utf8_next(u + i, n - i);
        if (len == 0) return i; /* a valid prefix cut short */
        i += len > 0 ? (size_t)len : 1; /* an invalid byte is complete: it becomes U+FFFD */
    }
    return n;
}

static json_t *jtext(const char *s, size_t n) {
    sbuf clean = {0};
    if (oai_utf8_sanitize(&clean, s ? s : "", s ? n : 0)) {
        sbuf_free(&clean);
        return NULL;
    }
    json_t *v = json_stringn(clean.p ? clean.p : "", clean.n);
    sbuf_free(&clean);
    return v;
}

/* Dumps root (stolen) to out, with prefix and suffix. */
static int dump(sbuf *out, json_t *root, const char *prefix, const char *suffix) {
    if (!root) return -1;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s) return -1;
    int rc = sbuf_adds(out, prefix) || sbuf_adds(out, s) || sbuf_adds(out, suffix) ? -1 : 0;
    free(s);
    return rc;
}

static json_t *usage_json(const oai_usage *u) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", u->prompt_tokens, "completion_tokens",
                     u->completion_tokens, "total_tokens", u->prompt_tokens + u->completion_tokens);
}

static json_t *quill_json(const oai_usage *u) {
    char h[20];
    snprintf(h, sizeof h, "%016" PRIx64, u->hash);
    return json_pack("{s:s}", "completion_hash", h);
}

static json_t *head(const oai_resp *r, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object", object, "created", (json_int_t)r->created,
                     "model", r->model);
}

/* json_object_set_new that reports failure of either the value or the set. */
static int set(json_t *o, const char *k, json_t *v) {
    if (!o || !v) {
        json_decref(v);
        return -1;
    }
    return json_object_set_new(o, k, v);
}

int oai_response_body(sbuf *out, const oai_resp *r, const char *content, size_t n, const char *reasoning,
                      size_t rn, const char *finish, const oai_usage *u) {
    json_t *root = head(r, r->is_chat ? "chat.completion" : "text_completion");
    json_t *choice = json_pack("{s:i, s:n, s:s}", "index", 0, "logprobs", "finish_reason", finish);
    int bad = 0;
    if (r->is_chat) {
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        bad |= set(msg, "content", jtext(content, n));
        if (reasoning) bad |= set(msg, "reasoning_content", jtext(reasoning, rn));
        bad |= set(choice, "message", msg);
    } else {
        bad |= set(choice, "text", jtext(content, n));
    }
    bad |= set(root, "choices", json_pack("[o]", choice));
    bad |= set(root, "usage", usage_json(u));
    bad |= set(root, "quill", quill_json(u));
    if (bad) {
        json_decref(root);
        return -1;
    }
    return dump(out, root, "", "");
}

int oai_sse_chunk(sbuf *out, const oai_resp *r, int role, const char *content, size_t n, const char *reasoning,
                  size_t rn, const char *finish, const oai_usage *u) {
    json_t *root = head(r, r->is_chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i, s:n}", "index", 0, "logprobs");
    int bad = set(choice, "finish_reason", finish ? json_string(finish) : json_null());
    if (r->is_chat) {
        json_t *delta = json_object();
        if (role) bad |= set(delta, "role", json_string("assistant"));
        if (content) bad |= set(delta, "content", jtext(content, n));
        if (reasoning) bad |= set(delta, "reasoning_content", jtext(reasoning, rn));
        bad |= set(choice, "delta", delta);
    } else {
        bad |= set(choice, "text", jtext(content, content ? n : 0));
    }
    bad |= set(root, "choices", json_pack("[o]", choice));
    if (r->include_usage) bad |= set(root, "usage", json_null());
    if (u) bad |= set(root, "quill", quill_json(u));
    if (bad) {
        json_decref(root);
        return -1;
    }
    return dump(out, root, "data: ", "\n\n");
}

int oai_sse_usage(sbuf *out, const oai_resp *r, const oai_usage *u) {
    json_t *root = head(r, r->is_chat ? "chat.completion.chunk" : "text_completion");
    int bad = set(root, "choices", json_array());
    bad |= set(root, "usage", usage_json(u));
    bad |= set(root, "quill", quill_json(u));
    if (bad) {
        json_decref(root);
        return -1;
    }
    return dump(out, root, "data: ", "\n\n");
}

static json_t *error_json(const oai_error *e) {
    json_t *err = json_pack("{s:s, s:n}", "type", e->http >= 500 ? "server_error" : "invalid_request_error",
                            "code");
    if (set(err, "message", jtext(e->message, strlen(e->message))) ||
        set(err, "param", e->param[0] ? jtext(e->param, strlen(e->param)) : json_null())) {
        json_decref(err);
        return NULL;
    }
    return json_pack("{s:o}", "error", err);
}

int oai_sse_error(sbuf *out, const oai_error *e) { return dump(out, error_json(e), "data: ", "\n\n"); }

int oai_sse_done(sbuf *out) { return sbuf_adds(out, "data: [DONE]\n\n"); }

int oai_error_body(sbuf *out, const oai_error *e) { return dump(out, error_json(e), "", ""); }
