/* openai_request.c: validating an OpenAI request body field by field.
 *
 * Rule: every field we read is type-checked, and a wrong type, a value out of range or a feature we do
 * not have (n > 1, several prompts, logprobs) is a 400 naming the field, before any token is made.
 * Fields we do not know are ignored (clients send "user", "frequency_penalty": 0, ...), as OpenAI's own
 * server does for optional extras. Ranges follow OpenAI's documented ones where they exist
 * (temperature 0..2, top_p (0, 1]) and vLLM's for the extensions (top_k -1 or >= 0, min_p 0..1).
 * Not here: prompt length against the context (completion.c knows n_ctx and the template). */
#include "openai_request.h"

#include "json_gate.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int oai_fail(oai_error *err, int http, const char *param, const char *fmt, ...) {
    err->http = http;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

void oai_request_fini(oai_request *req) {
    if (!req) return;
    json_decref(req->root);
    free(req->prompt_ids);
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    memset(req, 0, sizeof *req);
}

/* A JSON number that is a whole number in [lo, hi] (2.0 counts as 2, as Python clients may send). */
static int get_int(json_t *v, const char *name, long long lo, long long hi, long long *out, oai_error *err) {
    double d;
    if (json_is_integer(v)) {
        long long x = json_integer_value(v);
        if (x < lo || x > hi)
            return oai_fail(err, 400, name, "'%s' must be between %lld and %lld, got %lld", name, lo, hi, x);
        *out = x;
        return 0;
    }
    if (!json_is_real(v)) return oai_fail(err, 400, name, "'%s' must be an integer", name);
    d = json_real_value(v);
    if (d != floor(d) || !(d >= (double)lo && d <= (double)hi))
        return oai_fail(err, 400, name, "'%s' must be an integer between %lld and %lld", name, lo, hi);
    *out = (long long)d;
    return 0;
}

static int get_num(json_t *v, const char *name, double lo, double hi, double *out, oai_error *err) {
    if (!json_is_number(v)) return oai_fail(err, 400, name, "'%s' must be a number", name);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return oai_fail(err, 400, name, "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    *out = d;
    return 0;
}

static int get_bool(json_t *v, const char *name, int *out, oai_error *err) {
    if (!json_is_boolean(v)) return oai_fail(err, 400, name, "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

static int add_stop(oai_request *req, json_t *s, oai_error *err) {
    if (!json_is_string(s)) return oai_fail(err, 400, "stop", "'stop' must be a string or a list of strings");
    size_t n = json_string_length(s);
    if (n == 0) return 0; /* an empty stop string would stop at once: ignored, as vLLM does */
    if (n > OAI_MAX_STOP_BYTES)
        return oai_fail(err, 400, "stop", "each stop string must be at most %d bytes", OAI_MAX_STOP_BYTES);
    if (memchr(json_string_value(s), 0, n))
        return oai_fail(err, 400, "stop", "stop strings must not contain NUL");
    if (req->n_stop == OAI_MAX_STOP)
        return oai_fail(err, 400, "stop", "at most %d stop strings", OAI_MAX_STOP);
    char *c = strdup(json_string_value(s));
    if (!c) return oai_fail(err, 500, "", "out of memory");
    req->stop[req->n_stop++] = c;
    return 0;
}

static const char *const ROLES[] = {"system", "developer", "user", "assistant", "tool"};

/* content: a string, null (an assistant turn with tool calls), or a list of {"type": "text", "text"}
 * parts. Images and audio are not supported by a text model: 400. */
static int check_content(json_t *c, int is_assistant, const char *name, oai_error *err) {
    if (json_is_string(c)) return 0;
    if (json_is_null(c) || !c) {
        if (is_assistant) return 0;
        return oai_fail(err, 400, name, "'%s' is required", name);
    }
    if (!json_is_array(c)) return oai_fail(err, 400, name, "'%s' must be a string or a list of parts", name);
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type");
        if (!json_is_object(part) || !json_is_string(type))
            return oai_fail(err, 400, name, "'%s[%zu]' must be an object with a string 'type'", name, i);
        if (strcmp(json_string_value(type), "text"))
            return oai_fail(err, 400, name, "'%s[%zu]': part type '%s' is not supported (text only)", name, i,
                            json_string_value(type));
        if (!json_is_string(json_object_get(part, "text")))
            return oai_fail(err, 400, name, "'%s[%zu].text' must be a string", name, i);
    }
    return 0;
}

static int check_messages(json_t *msgs, oai_error *err) {
    if (!msgs) return oai_fail(err, 400, "messages", "'messages' is required");
    if (!json_is_array(msgs)) return oai_fail(err, 400, "messages", "'messages' must be a list");
    if (json_array_size(msgs) == 0) return oai_fail(err, 400, "messages", "'messages' must not be empty");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char name[64];
        snprintf(name, sizeof name, "messages[%zu]", i);
        if (!json_is_object(m)) return oai_fail(err, 400, name, "'%s' must be an object", name);
        json_t *role = json_object_get(m, "role");
        snprintf(name, sizeof name, "messages[%zu].role", i);
        if (!json_is_string(role)) return oai_fail(err, 400, name, "'%s' must be a string", name);
        int known = 0;
        for (size_t r = 0; r < sizeof ROLES / sizeof ROLES[0]; r++)
            if (!strcmp(json_string_value(role), ROLES[r])) known = 1;
        if (!known)
            return oai_fail(err, 400, name, "'%s': unknown role '%.40s' (system, developer, user, assistant, tool)",
                            name, json_string_value(role));
        snprintf(name, sizeof name, "messages[%zu].content", i);
        if (check_content(json_object_get(m, "content"), !strcmp(json_string_value(role), "assistant"), name, err))
            return -1;
    }
    return 0;
}

/* A list of token ids, each in [0, INT32_MAX] (the vocabulary bound is checked later, where it is
 * known). */
static int get_ids(json_t *arr, oai_request *req, oai_error *err) {
    size_t n = json_array_size(arr), i;
    if (n == 0) return oai_fail(err, 400, "prompt", "'prompt' must not be empty");
    req->prompt_ids = malloc(n * sizeof *req->prompt_ids);
    if (!req->prompt_ids) return oai_fail(err, 500, "", "out of memory");
    json_t *v;
    json_array_foreach(arr, i, v) {
        long long x;
        if (!json_is_integer(v) || (x = json_integer_value(v)) < 0 || x > INT32_MAX)
            return oai_fail(err, 400, "prompt", "'prompt[%zu]' must be a token id (a non-negative integer)", i);
        req->prompt_ids[i] = (int32_t)x;
    }
    req->n_prompt_ids = (int)n;
    return 0;
}

static int check_prompt(json_t *p, oai_request *req, oai_error *err) {
    if (!p) return oai_fail(err, 400, "prompt", "'prompt' is required");
    if (json_is_string(p)) {
        if (json_string_length(p) == 0) return oai_fail(err, 400, "prompt", "'prompt' must not be empty");
        req->prompt_text = json_string_value(p);
        req->prompt_len = json_string_length(p);
        return 0;
    }
    if (!json_is_array(p)) return oai_fail(err, 400, "prompt", "'prompt' must be a string or a list of token ids");
    json_t *first = json_array_get(p, 0);
    if (json_is_string(first) || json_is_array(first)) { /* a list of prompts: only one is served */
        if (json_array_size(p) != 1)
            return oai_fail(err, 400, "prompt", "n/prompt must be single: %zu prompts given", json_array_size(p));
        if (json_is_array(first)) return get_ids(first, req, err);
        return check_prompt(first, req, err);
    }
    return get_ids(p, req, err);
}

static int parse_fields(json_t *root, int is_chat, oai_request *req, oai_error *err) {
    json_t *v;
    long long iv = 0;
    double dv = 0;
    if ((v = json_object_get(root, "model")) && !json_is_null(v)) {
        if (!json_is_string(v)) return oai_fail(err, 400, "model", "'model' must be a string");
        snprintf(req->model, sizeof req->model, "%s", json_string_value(v));
    }
    if (is_chat) {
        if (check_messages(json_object_get(root, "messages"), err)) return -1;
        req->messages = json_object_get(root, "messages");
    } else if (check_prompt(json_object_get(root, "prompt"), req, err)) {
        return -1;
    } else if (req->prompt_ids) { /* the ids are copied out: free the json array (~40 bytes an id) now */
        json_object_del(root, "prompt");
    }
    /* max_completion_tokens is the newer name; when both are given the newer wins (OpenAI). */
    static const char *const MAXES[] = {"max_tokens", "max_completion_tokens"};
    for (int i = 0; i < 2; i++) {
        if ((v = json_object_get(root, MAXES[i])) && !json_is_null(v)) {
            if (get_int(v, MAXES[i], 1, INT32_MAX, &iv, err)) return -1;
            req->max_tokens = (int)iv;
        }
    }
    if ((v = json_object_get(root, "n")) && !json_is_null(v)) {
        if (get_int(v, "n", 1, 1000000, &iv, err)) return -1;
        if (iv != 1) return oai_fail(err, 400, "n", "n/prompt must be single: 'n' must be 1, got %lld", iv);
    }
    if ((v = json_object_get(root, "best_of")) && !json_is_null(v)) {
        if (get_int(v, "best_of", 1, 1, &iv, err)) return -1;
    }
    if ((v = json_object_get(root, "temperature")) && !json_is_null(v)) {
        if (get_num(v, "temperature", 0, 2, &dv, err)) return -1;
        req->sampling.temperature = (float)dv;
    }
    if ((v = json_object_get(root, "top_p")) && !json_is_null(v)) {
        if (get_num(v, "top_p", 0, 1, &dv, err)) return -1;
        if (dv <= 0) return oai_fail(err, 400, "top_p", "'top_p' must be in (0, 1]");
        req->sampling.top_p = (float)dv;
    }
    if ((v = json_object_get(root, "top_k")) && !json_is_null(v)) {
        if (get_int(v, "top_k", -1, INT32_MAX, &iv, err)) return -1;
        req->sampling.top_k = iv < 0 ? 0 : (int)iv; /* -1: off (vLLM) */
    }
    if ((v = json_object_get(root, "min_p")) && !json_is_null(v)) {
        if (get_num(v, "min_p", 0, 1, &dv, err)) return -1;
        req->sampling.min_p = (float)dv;
    }
    if ((v = json_object_get(root, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v)) return oai_fail(err, 400, "seed", "'seed' must be an integer");
        req->sampling.seed = (uint64_t)json_integer_value(v);
        req->has_seed = 1;
    }
    if ((v = json_object_get(root, "stop")) && !json_is_null(v)) {
        if (json_is_array(v)) {
            size_t i;
            json_t *s;
            json_array_foreach(v, i, s) if (add_stop(req, s, err)) return -1;
        } else if (add_stop(req, v, err)) {
            return -1;
        }
    }
    if ((v = json_object_get(root, "stream")) && !json_is_null(v) && get_bool(v, "stream", &req->stream, err))
        return -1;
    if ((v = json_object_get(root, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v)) return oai_fail(err, 400, "stream_options", "'stream_options' must be an object");
        json_t *u = json_object_get(v, "include_usage");
        if (u && !json_is_null(u) && get_bool(u, "stream_options.include_usage", &req->include_usage, err))
            return -1;
    }
    if ((v = json_object_get(root, "ignore_eos")) && !json_is_null(v) &&
        get_bool(v, "ignore_eos", &req->ignore_eos, err))
        return -1;
    /* "draft": false asks for the serial reference; with no drafter every reply is serial already. */
    if ((v = json_object_get(root, "draft")) && !json_is_null(v) && get_bool(v, "draft", &req->draft, err))
        return -1;
    if ((v = json_object_get(root, "chat_template_kwargs")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return oai_fail(err, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        req->chat_template_kwargs = v;
    }
    int flag = 0;
    if ((v = json_object_get(root, "logprobs")) && !json_is_null(v)) {
        if (!is_chat) {
            if (get_int(v, "logprobs", 0, 0, &iv, err)) return -1;
        } else if (get_bool(v, "logprobs", &flag, err)) {
            return -1;
        } else if (flag) {
            return oai_fail(err, 400, "logprobs", "'logprobs' is not supported");
        }
    }
    if ((v = json_object_get(root, "echo")) && !json_is_null(v)) {
        if (get_bool(v, "echo", &flag, err)) return -1;
        if (flag) return oai_fail(err, 400, "echo", "'echo' is not supported");
    }
    return 0;
}

int oai_request_parse(const char *body, size_t n, int is_chat, oai_request *req, oai_error *err) {
    memset(req, 0, sizeof *req);
    memset(err, 0, sizeof *err);
    req->is_chat = is_chat;
    req->max_tokens = -1;
    req->draft = 1;
    req->sampling = qsampling_default();
    req->sampling.temperature = 1.0f; /* OpenAI's default */
    json_error_t jerr;
    req->root = json_gate_loadb(body, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!req->root) {
        oai_fail(err, 400, "", "the body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                 jerr.column);
        oai_request_fini(req);
        return -1;
    }
    if (!json_is_object(req->root)) {
        oai_fail(err, 400, "", "the body must be a JSON object");
        oai_request_fini(req);
        return -1;
    }
    if (parse_fields(req->root, is_chat, req, err)) {
        oai_request_fini(req);
        return -1;
    }
    return 0;
}
