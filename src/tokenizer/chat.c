/* chat.c: OpenAI chat request -> template variables -> prompt text (chat_render) and ids
 * (chat_prompt_ids). The request contract and the normalisation (string tool-call arguments parsed,
 * content format chosen by whether the template loops over content) are documented in chat.h.
 * Invariants: the request is never modified (normalised messages are a deep copy); every rejected
 * field is named in the error ("messages[2].role"). Not here: the Jinja language (jinja_*.c),
 * HTTP-level validation of other request fields (server/openai_request.c). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "../util/fileio.h"
#include "jinja.h"

struct chat_template {
    jinja_tmpl *tmpl;
    char origin[4096];   /* the file the template came from (empty: given as source) */
    int content_as_list; /* the template loops over message content ("openai" content format) */
    json_t *special;     /* {bos_token: "...", ...}: the special tokens given as strings */
};

static qstatus from_source(const char *src, size_t n, json_t *special, chat_template **out) {
    chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(special);
        return q_fail(Q_ENOMEM, "chat template: out of memory");
    }
    t->special = special ? special : json_object();
    if (!t->special) {
        free(t);
        return q_fail(Q_ENOMEM, "chat template: out of memory");
    }
    qstatus rc = jinja_compile(src, n, &t->tmpl);
    if (rc) {
        chat_template_free(t);
        return rc;
    }
    t->content_as_list = jinja_loops_over(t->tmpl, "content");
    *out = t;
    return Q_OK;
}

qstatus chat_template_from_source(const char *source, chat_template **out) {
    return from_source(source, strlen(source), NULL, out);
}

qstatus chat_template_blame(const chat_template *t, qstatus st) {
    return st == Q_OK || st == Q_ENOMEM ? st : q_wrap(st, "%s", t->origin[0] ? t->origin : "chat template");
}

void chat_template_free(chat_template *t) {
    if (!t) return;
    jinja_free(t->tmpl);
    json_decref(t->special);
    free(t);
}

qstatus chat_template_load_dir(const char *dir, chat_template **out) {
    char path[4096];
    json_t *cfg = NULL, *special = json_object();
    char *file = NULL;
    size_t n = 0;
    const char *src = NULL;
    char origin[4096] = "";
    qstatus rc = Q_OK;
    if (!special) return q_fail(Q_ENOMEM, "chat template: out of memory");
    if ((rc = q_path_join(path, sizeof path, dir, "tokenizer_config.json"))) goto out;
    if (q_file_exists(path)) {
        json_error_t je;
        cfg = json_load_file(path, 0, &je);
        if (!cfg || !json_is_object(cfg)) {
            rc = q_fail(Q_EFORMAT, "%s: not a JSON object (line %d: %s)", path, je.line, cfg ? "" : je.text);
            goto out;
        }
        static const char *const names[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
        for (size_t i = 0; i < 4; i++) {
            json_t *v = json_object_get(cfg, names[i]);
            if (json_is_object(v)) v = json_object_get(v, "content");
            if (json_is_string(v) && json_object_set(special, names[i], v)) {
                rc = q_fail(Q_ENOMEM, "chat template: out of memory");
                goto out;
            }
        }
        json_t *ct = json_object_get(cfg, "chat_template");
        snprintf(origin, sizeof origin, "%s", path);
        if (json_is_string(ct)) {
            src = json_string_value(ct), n = json_string_length(ct);
        } else if (json_is_array(ct)) {
            size_t i;
            json_t *e;
            json_array_foreach(ct, i, e) {
                json_t *nm = json_object_get(e, "name"), *tp = json_object_get(e, "template");
                if (json_is_string(nm) && !strcmp(json_string_value(nm), "default") && json_is_string(tp))
                    src = json_string_value(tp), n = json_string_length(tp);
            }
            if (!src) {
                rc = q_fail(Q_EFORMAT, "%s: chat_template: no template named \"default\"", path);
                goto out;
            }
        } else if (ct && !json_is_null(ct)) {
            rc = q_fail(Q_EFORMAT, "%s: chat_template: expected a string or a list", path);
            goto out;
        }
    }
    if ((rc = q_path_join(path, sizeof path, dir, "chat_template.jinja"))) goto out;
    if (q_file_exists(path)) {
        if ((rc = q_read_file(path, &file, &n))) goto out;
        src = file;
        snprintf(origin, sizeof origin, "%s", path);
    }
    if (!src) {
        rc = q_fail(Q_EFORMAT, "%s: no chat template (neither tokenizer_config.json's chat_template nor chat_template.jinja)", dir);
        goto out;
    }
    rc = from_source(src, n, special, out);
    special = NULL;
    if (rc) q_wrap(rc, "%s", origin);
    else snprintf((*out)->origin, sizeof (*out)->origin, "%s", origin);
out:
    json_decref(special);
    json_decref(cfg);
    free(file);
    return rc;
}

/* ---- request -> variables -------------------------------------------------------------------- */

static qstatus bad(const char *field, const char *what) { return q_fail(Q_EINVAL, "%s: %s", field, what); }

/* Content for the template: see chat.h. Returns a new reference in *out. */
static qstatus norm_content(const chat_template *t, json_t *c, const char *field, json_t **out) {
    char f[128];
    if (!c || json_is_null(c)) {
        *out = t->content_as_list ? json_array() : json_string("");
        return *out ? Q_OK : q_fail(Q_ENOMEM, "out of memory");
    }
    if (json_is_string(c)) {
        *out = json_incref(c);
        return Q_OK;
    }
    if (!json_is_array(c)) return bad(field, "content must be a string, null or a list of text parts");
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        snprintf(f, sizeof f, "%s[%zu]", field, i);
        if (!json_is_object(part)) return bad(f, "a content part must be an object");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text"))
            return q_fail(Q_EINVAL, "%s.type: only \"text\" content parts are supported", f);
        if (!json_is_string(text)) return q_fail(Q_EINVAL, "%s.text: must be a string", f);
    }
    if (t->content_as_list) {
        *out = json_deep_copy(c);
        return *out ? Q_OK : q_fail(Q_ENOMEM, "out of memory");
    }
    size_t len = 0;
    json_array_foreach(c, i, part) len += json_string_length(json_object_get(part, "text")) + 1;
    char *s = malloc(len + 1), *p = s;
    if (!s) return q_fail(Q_ENOMEM, "out of memory");
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        if (i) *p++ = '\n';
        memcpy(p, json_string_value(text), json_string_length(text));
        p += json_string_length(text);
    }
    *out = json_stringn(s, (size_t)(p - s));
    free(s);
    return *out ? Q_OK : q_fail(Q_ENOMEM, "out of memory");
}

static qstatus norm_tool_calls(json_t *m, const char *field) {
    json_t *tcs = json_object_get(m, "tool_calls");
    char f[160];
    if (!tcs || json_is_null(tcs)) return Q_OK;
    if (!json_is_array(tcs)) return q_fail(Q_EINVAL, "%s.tool_calls: must be a list", field);
    size_t i;
    json_t *tc;
    json_array_foreach(tcs, i, tc) {
        snprintf(f, sizeof f, "%s.tool_calls[%zu]", field, i);
        if (!json_is_object(tc)) return bad(f, "must be an object");
        json_t *fn = json_object_get(tc, "function");
        if (!json_is_object(fn)) return q_fail(Q_EINVAL, "%s.function: must be an object", f);
        json_t *args = json_object_get(fn, "arguments");
        if (json_is_string(args)) {
            json_error_t je;
            json_t *v = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &je);
            if (!v) return q_fail(Q_EINVAL, "%s.function.arguments: not valid JSON (%s)", f, je.text);
            if (json_object_set_new(fn, "arguments", v)) return q_fail(Q_ENOMEM, "out of memory");
        }
    }
    return Q_OK;
}

static qstatus build_vars(const chat_template *t, const json_t *req, json_t *vars) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    char f[64];
    if (!json_is_object(req)) return q_fail(Q_EINVAL, "request: must be a JSON object");
    json_t *msgs = json_object_get(req, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) return bad("messages", "must be a non-empty list");
    json_t *kw = json_object_get(req, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return bad("chat_template_kwargs", "must be an object");
        if (json_object_update(vars, kw)) return q_fail(Q_ENOMEM, "out of memory");
    }
    json_t *out_msgs = json_array();
    if (!out_msgs || json_object_set_new(vars, "messages", out_msgs)) return q_fail(Q_ENOMEM, "out of memory");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        snprintf(f, sizeof f, "messages[%zu]", i);
        if (!json_is_object(m)) return bad(f, "must be an object");
        json_t *role = json_object_get(m, "role");
        int known = 0;
        for (size_t k = 0; k < 5 && json_is_string(role); k++) known |= !strcmp(json_string_value(role), roles[k]);
        if (!known) {
            snprintf(f, sizeof f, "messages[%zu].role", i);
            return bad(f, "must be one of system, developer, user, assistant, tool");
        }
        json_t *c = json_deep_copy(m), *content = NULL;
        if (!c || json_array_append_new(out_msgs, c)) return q_fail(Q_ENOMEM, "out of memory");
        snprintf(f, sizeof f, "messages[%zu].content", i);
        Q_TRY(norm_content(t, json_object_get(m, "content"), f, &content));
        if (json_object_set_new(c, "content", content)) return q_fail(Q_ENOMEM, "out of memory");
        snprintf(f, sizeof f, "messages[%zu]", i);
        Q_TRY(norm_tool_calls(c, f));
    }
    json_t *tools = json_object_get(req, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return bad("tools", "must be a list");
    if (json_object_set(vars, "tools", tools ? tools : json_null()) ||
        json_object_set_new(vars, "documents", json_null()))
        return q_fail(Q_ENOMEM, "out of memory");
    json_t *agp = json_object_get(req, "add_generation_prompt");
    if (agp && !json_is_boolean(agp)) return bad("add_generation_prompt", "must be a boolean");
    if (json_object_set_new(vars, "add_generation_prompt", json_boolean(agp ? json_is_true(agp) : 1)))
        return q_fail(Q_ENOMEM, "out of memory");
    return Q_OK;
}

static qstatus render(const chat_template *t, const json_t *request, char **out, size_t *n) {
    json_t *vars = json_deep_copy(t->special);
    if (!vars) return q_fail(Q_ENOMEM, "out of memory");
    qstatus rc = build_vars(t, request, vars);
    if (rc == Q_OK) rc = jinja_render(t->tmpl, vars, out, n);
    json_decref(vars);
    return rc;
}

qstatus chat_render(const chat_template *t, const json_t *request, char **out) {
    size_t n;
    return render(t, request, out, &n);
}

qstatus chat_prompt_ids(const qtokenizer *tok, const chat_template *t, const json_t *request,
                        int32_t **ids, size_t *n) {
    char *text;
    size_t len;
    Q_TRY(render(t, request, &text, &len));
    qstatus rc = tok_encode(tok, text, len, 1, ids, n);
    free(text);
    return rc;
}
