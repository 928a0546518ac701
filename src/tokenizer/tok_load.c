/* tok_load.c: tokenizer.json -> qtokenizer (vocabulary, merges, added tokens, pipeline checks).
 *
 * Supported (what Qwen2/3/3.5 files use, plus near relatives): model BPE (merges as "a b" strings or
 * [a, b] pairs, ignore_merges), added_tokens with all five flags, normalizer null / NFC / Sequence of
 * those, pre_tokenizer Sequence of Split{Regex|String, Isolated} and ByteLevel{add_prefix_space
 * false, use_regex any}, decoder ByteLevel, post_processor null / ByteLevel (adds no ids).
 * Anything else fails: Q_EUNSUPPORTED for a valid component this code does not implement (naming
 * the JSON field and its type), Q_EFORMAT for a malformed file (naming the field).
 * Invariants established here: see tok_internal.h. Not here: encoding (tok_encode.c). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "tok_internal.h"
#include "util/fileio.h"

/* GPT-2's split pattern: what ByteLevel{use_regex: true} splits with. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static qstatus bad(const char *file, const char *field, const char *what) {
    return q_fail(Q_EFORMAT, "%s: %s: %s", file, field, what);
}

static qstatus unsupported(const char *file, const char *field, const char *type) {
    return q_fail(Q_EUNSUPPORTED, "%s: %s: unsupported type \"%s\"", file, field, type);
}

static int is_null(const json_t *v) { return !v || json_is_null(v); }

static qstatus get_bool(const char *file, const json_t *obj, const char *key, const char *field,
                        int dflt, uint8_t *out) {
    json_t *v = json_object_get(obj, key);
    if (is_null(v)) {
        *out = (uint8_t)dflt;
        return Q_OK;
    }
    if (!json_is_boolean(v)) return q_fail(Q_EFORMAT, "%s: %s.%s: not a boolean", file, field, key);
    *out = json_is_true(v);
    return Q_OK;
}

static qstatus check_normalizer(qtokenizer *tok, const json_t *n, const char *field) {
    if (is_null(n)) return Q_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!json_is_object(n) || !type) return bad(tok->path, field, "missing \"type\"");
    if (strcmp(type, "NFC") == 0) {
        tok->nfc = 1;
        return Q_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return bad(tok->path, field, "Sequence without a \"normalizers\" array");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", field, i);
            Q_TRY(check_normalizer(tok, e, sub));
        }
        return Q_OK;
    }
    return unsupported(tok->path, field, type);
}

static qstatus add_split(qtokenizer *tok, const char *pattern, const char *field) {
    if (tok->n_split == TOK_MAX_SPLITS) return q_fail(Q_EUNSUPPORTED, "%s: %s: more than %d splits", tok->path, field, TOK_MAX_SPLITS);
    Q_TRY(tok_regex_compile(pattern, tok->path, field, &tok->split_re[tok->n_split]));
    tok->n_split++;
    return Q_OK;
}

/* Escapes a literal for PCRE2 (Split{pattern: {String: ...}}). */
static qstatus add_literal_split(qtokenizer *tok, const char *lit, const char *field) {
    size_t n = strlen(lit);
    char *p = malloc(2 * n + 1);
    if (!p) return q_fail(Q_ENOMEM, "%s: out of memory", tok->path);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strchr("\\^$.|?*+()[]{}", lit[i])) p[k++] = '\\';
        p[k++] = lit[i];
    }
    p[k] = '\0';
    qstatus rc = add_split(tok, p, field);
    free(p);
    return rc;
}

static qstatus check_pretok(qtokenizer *tok, const json_t *p, const char *field, int *byte_level) {
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!json_is_object(p) || !type) return bad(tok->path, field, "missing \"type\"");
    char sub[128];
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) return bad(tok->path, field, "Sequence without a \"pretokenizers\" array");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", field, i);
            Q_TRY(check_pretok(tok, e, sub, byte_level));
        }
        return Q_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const char *behavior = json_string_value(json_object_get(p, "behavior"));
        snprintf(sub, sizeof sub, "%s.behavior", field);
        if (!behavior) return bad(tok->path, sub, "missing");
        if (strcmp(behavior, "Isolated") != 0) return q_fail(Q_EUNSUPPORTED, "%s: %s: unsupported behavior \"%s\"", tok->path, sub, behavior);
        json_t *pat = json_object_get(p, "pattern");
        const char *re = json_string_value(json_object_get(pat, "Regex"));
        const char *lit = json_string_value(json_object_get(pat, "String"));
        snprintf(sub, sizeof sub, "%s.pattern", field);
        if (re) return add_split(tok, re, sub);
        if (lit) return add_literal_split(tok, lit, sub);
        return bad(tok->path, sub, "needs {\"Regex\": ...} or {\"String\": ...}");
    }
    if (strcmp(type, "ByteLevel") == 0) {
        uint8_t prefix = 0, use_regex = 1;
        Q_TRY(get_bool(tok->path, p, "add_prefix_space", field, 0, &prefix));
        Q_TRY(get_bool(tok->path, p, "use_regex", field, 1, &use_regex));
        if (prefix) return q_fail(Q_EUNSUPPORTED, "%s: %s.add_prefix_space: true is not supported", tok->path, field);
        *byte_level = 1;
        if (use_regex) {
            snprintf(sub, sizeof sub, "%s (ByteLevel use_regex)", field);
            return add_split(tok, GPT2_PATTERN, sub);
        }
        return Q_OK;
    }
    return unsupported(tok->path, field, type);
}

static qstatus check_components(qtokenizer *tok, const json_t *root) {
    Q_TRY(check_normalizer(tok, json_object_get(root, "normalizer"), "normalizer"));
    json_t *p = json_object_get(root, "pre_tokenizer");
    int byte_level = 0;
    if (!is_null(p)) Q_TRY(check_pretok(tok, p, "pre_tokenizer", &byte_level));
    if (!byte_level) return q_fail(Q_EUNSUPPORTED, "%s: pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)", tok->path);
    json_t *d = json_object_get(root, "decoder");
    const char *dt = json_string_value(json_object_get(d, "type"));
    if (is_null(d)) return q_fail(Q_EUNSUPPORTED, "%s: decoder: null (only ByteLevel is supported)", tok->path);
    if (!dt) return bad(tok->path, "decoder", "missing \"type\"");
    if (strcmp(dt, "ByteLevel") != 0) return unsupported(tok->path, "decoder", dt);
    json_t *pp = json_object_get(root, "post_processor");
    if (!is_null(pp)) {
        const char *pt = json_string_value(json_object_get(pp, "type"));
        if (!pt) return bad(tok->path, "post_processor", "missing \"type\"");
        if (strcmp(pt, "ByteLevel") != 0) return unsupported(tok->path, "post_processor", pt);
    }
    if (!is_null(json_object_get(root, "truncation")))
        return q_fail(Q_EUNSUPPORTED, "%s: truncation: only null is supported", tok->path);
    if (!is_null(json_object_get(root, "padding")))
        return q_fail(Q_EUNSUPPORTED, "%s: padding: only null is supported", tok->path);
    return Q_OK;
}

static qstatus check_model(qtokenizer *tok, const json_t *m) {
    if (!json_is_object(m)) return bad(tok->path, "model", "missing or not an object");
    const char *type = json_string_value(json_object_get(m, "type"));
    if (type && strcmp(type, "BPE") != 0) return unsupported(tok->path, "model.type", type);
    if (!is_null(json_object_get(m, "dropout")))
        return q_fail(Q_EUNSUPPORTED, "%s: model.dropout: only null is supported", tok->path);
    static const char *const empty_str[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(m, empty_str[i]);
        if (!is_null(v) && (!json_is_string(v) || json_string_length(v) != 0))
            return q_fail(Q_EUNSUPPORTED, "%s: model.%s: only null or \"\" is supported", tok->path, empty_str[i]);
    }
    uint8_t fallback = 0, ignore = 0;
    Q_TRY(get_bool(tok->path, m, "byte_fallback", "model", 0, &fallback));
    Q_TRY(get_bool(tok->path, m, "ignore_merges", "model", 0, &ignore));
    if (fallback) return q_fail(Q_EUNSUPPORTED, "%s: model.byte_fallback: true is not supported", tok->path);
    tok->ignore_merges = ignore;
    if (!json_is_object(json_object_get(m, "vocab"))) return bad(tok->path, "model.vocab", "missing or not an object");
    if (!json_is_array(json_object_get(m, "merges"))) return bad(tok->path, "model.merges", "missing or not an array");
    return Q_OK;
}

/* Decoded bytes of a token string: each code point through the inverse byte-level map, or, when
 * one is not in the map, the string's own UTF-8 bytes (HF's ByteLevel decoder does the same). */
static size_t decode_token(const char *s, size_t n, uint8_t *out) {
    size_t k = 0, i = 0;
    while (i < n) {
        int len = tok_utf8_next((const uint8_t *)s + i, n - i);
        int b = len > 0 ? tok_cp_to_byte(tok_utf8_cp((const uint8_t *)s + i, len)) : -1;
        if (b < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[k++] = (uint8_t)b;
        i += (size_t)len;
    }
    return k;
}

static qstatus load_vocab(qtokenizer *tok, const json_t *vocab, const json_t *added) {
    const char *key;
    json_t *v;
    size_t blob = 0;
    int64_t max_id = -1;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 30))
            return q_fail(Q_EFORMAT, "%s: model.vocab[\"%s\"]: id is not an integer in [0, 2^30)", tok->path, key);
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
        blob += strlen(key) + 1;
    }
    size_t i;
    json_array_foreach((json_t *)added, i, v) {
        json_t *id = json_object_get(v, "id");
        const char *content = json_string_value(json_object_get(v, "content"));
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 30))
            return q_fail(Q_EFORMAT, "%s: added_tokens[%zu].id: missing or not an integer in [0, 2^30)", tok->path, i);
        if (!content) return q_fail(Q_EFORMAT, "%s: added_tokens[%zu].content: missing or not a string", tok->path, i);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
        blob += strlen(content) + 1;
    }
    tok->n_base = (int)json_object_size(vocab);
    tok->n_vocab = (int)(max_id + 1);
    size_t nv = (size_t)tok->n_vocab;
    tok->str_blob = malloc(blob ? blob : 1);
    tok->dec_blob = malloc(blob ? blob : 1); /* decoded bytes never outnumber the string's */
    tok->str_off = malloc((nv ? nv : 1) * sizeof *tok->str_off);
    tok->dec_off = calloc(nv + 1, sizeof *tok->dec_off);
    tok->is_special = calloc(nv ? nv : 1, 1);
    if (!tok->str_blob || !tok->dec_blob || !tok->str_off || !tok->dec_off || !tok->is_special)
        return q_fail(Q_ENOMEM, "%s: out of memory (vocabulary of %zu)", tok->path, nv);
    memset(tok->str_off, 0xFF, nv * sizeof *tok->str_off);
    Q_TRY(tok_strmap_init(&tok->vocab, (size_t)tok->n_base));
    size_t off = 0;
    json_object_foreach((json_t *)vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (tok->str_off[id] != UINT32_MAX)
            return q_fail(Q_EFORMAT, "%s: model.vocab[\"%s\"]: id %d is used twice", tok->path, key, id);
        size_t len = strlen(key);
        memcpy(tok->str_blob + off, key, len + 1);
        tok->str_off[id] = (uint32_t)off;
        Q_TRY(tok_strmap_put(&tok->vocab, tok->str_blob + off, len, id));
        off += len + 1;
    }
    tok->n_added = (int)json_array_size(added);
    tok->added = calloc(tok->n_added ? (size_t)tok->n_added : 1, sizeof *tok->added);
    if (!tok->added) return q_fail(Q_ENOMEM, "%s: out of memory", tok->path);
    json_array_foreach((json_t *)added, i, v) {
        tok_added *a = &tok->added[i];
        char field[48];
        snprintf(field, sizeof field, "added_tokens[%zu]", i);
        const char *content = json_string_value(json_object_get(v, "content"));
        a->len = strlen(content);
        a->content = strdup(content);
        if (!a->content) return q_fail(Q_ENOMEM, "%s: out of memory", tok->path);
        a->id = (int32_t)json_integer_value(json_object_get(v, "id"));
        Q_TRY(get_bool(tok->path, v, "special", field, 0, &a->special));
        Q_TRY(get_bool(tok->path, v, "lstrip", field, 0, &a->lstrip));
        Q_TRY(get_bool(tok->path, v, "rstrip", field, 0, &a->rstrip));
        Q_TRY(get_bool(tok->path, v, "normalized", field, 1, &a->normalized));
        Q_TRY(get_bool(tok->path, v, "single_word", field, 0, &a->single_word));
        /* The added token's string wins for its id (HF: added vocabulary first). */
        memcpy(tok->str_blob + off, content, a->len + 1);
        tok->str_off[a->id] = (uint32_t)off;
        off += a->len + 1;
        tok->is_special[a->id] = a->special;
    }
    /* Decoded bytes, in id order. */
    size_t doff = 0;
    for (size_t id = 0; id < nv; id++) {
        tok->dec_off[id] = (uint32_t)doff;
        if (tok->str_off[id] == UINT32_MAX) continue;
        const char *s = tok->str_blob + tok->str_off[id];
        doff += decode_token(s, strlen(s), tok->dec_blob + doff);
    }
    tok->dec_off[nv] = (uint32_t)doff;
    for (int b = 0; b < 256; b++) {
        char u[4];
        int len = tok_utf8_put(tok_byte_to_cp((uint8_t)b), u);
        tok->byte_id[b] = tok_strmap_get(&tok->vocab, u, (size_t)len);
    }
    return Q_OK;
}

static qstatus load_merges(qtokenizer *tok, const json_t *merges) {
    size_t n = json_array_size(merges);
    Q_TRY(tok_pairmap_init(&tok->merges, n));
    char *buf = NULL;
    size_t cap = 0;
    qstatus rc = Q_OK;
    size_t i;
    json_t *m;
    json_array_foreach((json_t *)merges, i, m) {
        const char *a, *b;
        size_t la, lb;
        const char *s = json_string_value(m);
        if (s) {
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                rc = q_fail(Q_EFORMAT, "%s: model.merges[%zu]: \"%s\" is not two tokens separated by one space", tok->path, i, s);
                break;
            }
            a = s;
            la = (size_t)(sp - s);
            b = sp + 1;
            lb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            la = strlen(a);
            lb = strlen(b);
        } else {
            rc = q_fail(Q_EFORMAT, "%s: model.merges[%zu]: neither \"a b\" nor [\"a\", \"b\"]", tok->path, i);
            break;
        }
        int32_t ia = tok_strmap_get(&tok->vocab, a, la), ib = tok_strmap_get(&tok->vocab, b, lb);
        if (ia < 0 || ib < 0) {
            rc = q_fail(Q_EFORMAT, "%s: model.merges[%zu]: token \"%.*s\" is not in model.vocab", tok->path, i,
                        (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
            break;
        }
        if (la + lb + 1 > cap) {
            cap = 2 * (la + lb + 1);
            char *p = realloc(buf, cap);
            if (!p) {
                rc = q_fail(Q_ENOMEM, "%s: out of memory", tok->path);
                break;
            }
            buf = p;
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t im = tok_strmap_get(&tok->vocab, buf, la + lb);
        if (im < 0) {
            rc = q_fail(Q_EFORMAT, "%s: model.merges[%zu]: merged token \"%.*s\" is not in model.vocab", tok->path, i,
                        (int)(la + lb), buf);
            break;
        }
        tok_pairmap_put(&tok->merges, ia, ib, (int32_t)i, im);
    }
    free(buf);
    return rc;
}

/* Orders added tokens by the first byte of the string they match (content, or NFC(content) for
 * normalized ones) so the scan tests only the tokens that can start at a byte. */
static qstatus index_added(qtokenizer *tok) {
    for (int i = 0; i < tok->n_added; i++) {
        tok_added *a = &tok->added[i];
        if (!a->normalized || !tok->nfc) continue;
        char *owned;
        const char *s;
        size_t n;
        Q_TRY(tok_nfc(a->content, a->len, &owned, &s, &n));
        a->norm = owned ? owned : strdup(a->content);
        if (!a->norm) return q_fail(Q_ENOMEM, "%s: out of memory", tok->path);
        a->norm_len = n;
    }
    tok->added_first = calloc(257, sizeof *tok->added_first);
    tok->added_order = malloc((tok->n_added ? (size_t)tok->n_added : 1) * sizeof *tok->added_order);
    if (!tok->added_first || !tok->added_order) return q_fail(Q_ENOMEM, "%s: out of memory", tok->path);
    int k = 0;
    for (int b = 0; b < 256; b++) {
        tok->added_first[b] = (int32_t)k;
        for (int i = 0; i < tok->n_added; i++) {
            const tok_added *a = &tok->added[i];
            const char *pat = a->norm ? a->norm : a->content;
            size_t len = a->norm ? a->norm_len : a->len;
            if (len > 0 && (unsigned char)pat[0] == b) tok->added_order[k++] = i;
        }
    }
    tok->added_first[256] = (int32_t)k;
    return Q_OK;
}

qstatus tok_load(const char *path, qtokenizer **out) {
    *out = NULL;
    char file[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        Q_TRY(q_path_join(file, sizeof file, path, "tokenizer.json"));
    } else {
        if (strlen(path) >= sizeof file) return q_fail(Q_EINVAL, "tokenizer: path too long: %s", path);
        strcpy(file, path);
    }
    if (!q_file_exists(file)) return q_fail(Q_EIO, "%s: no such file (a tokenizer.json is needed)", file);
    json_error_t jerr;
    json_t *root = json_load_file(file, 0, &jerr);
    if (!root) return q_fail(Q_EFORMAT, "%s:%d:%d: bad JSON: %s", file, jerr.line, jerr.column, jerr.text);
    qtokenizer *tok = calloc(1, sizeof *tok);
    qstatus rc = Q_OK;
    if (!tok || !(tok->path = strdup(file))) {
        rc = q_fail(Q_ENOMEM, "%s: out of memory", file);
        goto out;
    }
    if (!json_is_object(root)) {
        rc = bad(file, "(root)", "not a JSON object");
        goto out;
    }
    json_t *model = json_object_get(root, "model");
    json_t *added = json_object_get(root, "added_tokens");
    if (is_null(added)) added = json_array();
    else json_incref(added);
    if (!json_is_array(added)) {
        json_decref(added);
        rc = bad(file, "added_tokens", "not an array");
        goto out;
    }
    rc = check_model(tok, model);
    if (!rc) rc = check_components(tok, root);
    if (!rc) rc = load_vocab(tok, json_object_get(model, "vocab"), added);
    json_decref(added);
    if (!rc) rc = load_merges(tok, json_object_get(model, "merges"));
    if (!rc) rc = index_added(tok);
out:
    json_decref(root);
    if (rc) {
        tok_free(tok);
        return rc;
    }
    *out = tok;
    return Q_OK;
}

void tok_free(qtokenizer *tok) {
    if (!tok) return;
    for (int i = 0; i < tok->n_split; i++) pcre2_code_free(tok->split_re[i]);
    if (tok->added) {
        for (int i = 0; i < tok->n_added; i++) {
            free(tok->added[i].content);
            free(tok->added[i].norm);
        }
    }
    free(tok->added);
    free(tok->added_first);
    free(tok->added_order);
    tok_strmap_fini(&tok->vocab);
    tok_pairmap_fini(&tok->merges);
    free(tok->str_blob);
    free(tok->str_off);
    free(tok->dec_blob);
    free(tok->dec_off);
    free(tok->is_special);
    free(tok->path);
    free(tok);
}
