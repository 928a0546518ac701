/* jinja_value.c: the value model of the Jinja interpreter and its text forms.
 * A jv is a small tagged value passed by copy; strings are (pointer, length) and may hold any bytes
 * (borrowed from the request JSON or arena copies, never modified); lists and dicts live in the
 * render's arena and are not mutated once built, except namespace() dicts (the one mutable object
 * jinja2's sandbox allows). Dicts keep insertion order (as Python's), looked up linearly.
 * Text forms follow Python exactly where a chat template can observe them: str() (True, None,
 * 1.0, "['a', 1]"), repr() of strings (quote choice and escapes), and json.dumps(ensure_ascii=False,
 * separators (', ', ': ') or (',', ': ') with indent) including float repr.
 * Not here: operators and evaluation (jinja_eval.c). repr() treats every non-ASCII code point as
 * printable except U+0080..U+00A0 and U+00AD (Python also escapes a few rarer format characters). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

/* ---- arena ----------------------------------------------------------------------------------- */

struct jarena_chunk {
    jarena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jarena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->total_bytes + cap > JINJA_ARENA_CAP) return NULL;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head, c->used = 0, c->cap = cap;
        a->head = c;
        a->total_bytes += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *ja_strdup(jarena *a, const char *s, size_t n) {
    char *p = ja_alloc(a, n + 1);
    if (p && n) memcpy(p, s, n);
    return p;
}

void ja_free_all(jarena *a) {
    jarena_chunk *c = a->head;
    while (c) {
        jarena_chunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->total_bytes = 0;
}

/* ---- buffer ---------------------------------------------------------------------------------- */

void jb_put(jbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1) {
            if (cap > JINJA_ARENA_CAP) { b->oom = 1; return; }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void jb_puts(jbuf *b, const char *s) { jb_put(b, s, strlen(s)); }
void jb_putc(jbuf *b, char c) { jb_put(b, &c, 1); }

/* ---- lists and dicts ------------------------------------------------------------------------- */

jlist *jl_new(jarena *a, size_t cap) {
    jlist *l = ja_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (cap && !(l->v = ja_alloc(a, cap * sizeof *l->v))) return NULL;
    l->cap = cap;
    return l;
}

int jl_push(jarena *a, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = ja_alloc(a, cap * sizeof *nv);
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv, l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

jdict *jd_new(jarena *a, size_t cap) {
    jdict *d = ja_alloc(a, sizeof *d);
    if (!d) return NULL;
    if (cap && (!(d->key = ja_alloc(a, cap * sizeof *d->key)) || !(d->val = ja_alloc(a, cap * sizeof *d->val))))
        return NULL;
    d->cap = cap;
    return d;
}

const jv *jd_getv(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->key[i], key)) return &d->val[i];
    return NULL;
}

const jv *jd_get(const jdict *d, const char *key, size_t n) { return jd_getv(d, jv_str(key, n)); }

int jd_set(jarena *a, jdict *d, jv key, jv val) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->key[i], key)) {
            d->val[i] = val;
            return 0;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = ja_alloc(a, cap * sizeof *nk), *nv = ja_alloc(a, cap * sizeof *nv);
        if (!nk || !nv) return -1;
        if (d->n) {
            memcpy(nk, d->key, d->n * sizeof *nk);
            memcpy(nv, d->val, d->n * sizeof *nv);
        }
        d->key = nk, d->val = nv, d->cap = cap;
    }
    d->key[d->n] = key, d->val[d->n] = val;
    d->n++;
    return 0;
}

/* ---- truth and equality (Python) ------------------------------------------------------------- */

int jv_truthy(jv v) {
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(jv v) { return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT; }
static double num_f(jv v) { return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : (double)v.u.b; }

int jv_equal(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
            int64_t x = a.k == JV_INT ? a.u.i : a.u.b, y = b.k == JV_INT ? b.u.i : b.u.b;
            return x == y;
        }
        return num_f(a) == num_f(b);
    }
    if (a.k != b.k) return 0;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.s.n == b.u.s.n && (a.u.s.n == 0 || memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const jv *o = jd_getv(b.u.d, a.u.d->key[i]);
            if (!o || !jv_equal(a.u.d->val[i], *o)) return 0;
        }
        return 1;
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.macro == b.u.macro;
    case JV_FUNC: return a.u.func == b.u.func;
    default: return 0;
    }
}

const char *jv_kind_name(jv v) {
    static const char *const forms[] = {"list", "tuple", "dict_keys", "dict_values", "dict_items", "generator"};
    if (v.k == JV_LIST) return forms[v.u.l->form];
    static const char *const names[] = {"undefined", "none", "bool", "int", "float", "str", "list",
                                        "dict", "namespace", "macro", "function", "method", "loop"};
    return names[v.k];
}

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

size_t ju_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80 || n < 2) { *cp = u[0]; return 1; }
    int len = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 1;
    if (len == 1 || (size_t)len > n) { *cp = u[0]; return 1; }
    uint32_t c = u[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) { *cp = u[0]; return 1; }
        c = (c << 6) | (u[i] & 0x3F);
    }
    *cp = c;
    return (size_t)len;
}

size_t ju_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += ju_decode(s + i, n - i, &cp);
        c++;
    }
    return c;
}

int ju_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* ---- text forms ------------------------------------------------------------------------------ */

/* Python repr(float): the shortest digits that round-trip; scientific when exp < -4 or >= 16. */
void jv_float_repr(jbuf *b, double f) {
    if (isnan(f)) { jb_puts(b, "nan"); return; }
    if (isinf(f)) { jb_puts(b, f < 0 ? "-inf" : "inf"); return; }
    char tmp[64];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, f);
        if (strtod(tmp, NULL) == f) break;
    }
    snprintf(tmp, sizeof tmp, "%.*e", prec, f);
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) jb_putc(b, '-');
    if (exp < -4 || exp >= 16) {
        jb_putc(b, digits[0]);
        if (nd > 1) {
            jb_putc(b, '.');
            jb_put(b, digits + 1, (size_t)nd - 1);
        }
        snprintf(tmp, sizeof tmp, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        jb_puts(b, tmp);
    } else if (exp < 0) {
        jb_puts(b, "0.");
        for (int i = 0; i < -exp - 1; i++) jb_putc(b, '0');
        jb_put(b, digits, (size_t)nd);
    } else {
        for (int i = 0; i <= exp; i++) jb_putc(b, i < nd ? digits[i] : '0');
        jb_putc(b, '.');
        if (nd > exp + 1) jb_put(b, digits + exp + 1, (size_t)(nd - exp - 1));
        else jb_putc(b, '0');
    }
}

static void repr_str(jbuf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jb_putc(b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = ju_decode(s + i, n - i, &cp);
        char esc[16];
        if (cp == (uint32_t)q || cp == '\\') { jb_putc(b, '\\'); jb_putc(b, (char)cp); }
        else if (cp == '\n') jb_puts(b, "\\n");
        else if (cp == '\r') jb_puts(b, "\\r");
        else if (cp == '\t') jb_puts(b, "\\t");
        else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
            snprintf(esc, sizeof esc, "\\x%02x", cp);
            jb_puts(b, esc);
        } else jb_put(b, s + i, k);
        i += k;
    }
    jb_putc(b, q);
}

static int text_form(jbuf *b, jv v, int repr, int depth) {
    char tmp[32];
    if (depth > JINJA_MAX_DEPTH) return -1;
    switch (v.k) {
    case JV_UNDEF: if (!repr) return 0; jb_puts(b, "Undefined"); return 0;
    case JV_NONE: jb_puts(b, "None"); return 0;
    case JV_BOOL: jb_puts(b, v.u.b ? "True" : "False"); return 0;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jb_puts(b, tmp); return 0;
    case JV_FLOAT: jv_float_repr(b, v.u.f); return 0;
    case JV_STR:
        if (repr) repr_str(b, v.u.s.p, v.u.s.n);
        else jb_put(b, v.u.s.p, v.u.s.n);
        return 0;
    case JV_LIST: {
        static const char *const view[] = {"", "", "dict_keys(", "dict_values(", "dict_items("};
        int form = v.u.l->form, tuple = form == JL_TUPLE;
        if (form == JL_GEN) return -1;
        jb_puts(b, view[form]);
        jb_putc(b, tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_puts(b, ", ");
            if (text_form(b, v.u.l->v[i], 1, depth + 1)) return -1;
        }
        if (tuple && v.u.l->n == 1) jb_putc(b, ',');
        jb_putc(b, tuple ? ')' : ']');
        if (form >= JL_KEYS) jb_putc(b, ')');
        return 0;
    }
    case JV_DICT:
        jb_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_puts(b, ", ");
            if (text_form(b, v.u.d->key[i], 1, depth + 1)) return -1;
            jb_puts(b, ": ");
            if (text_form(b, v.u.d->val[i], 1, depth + 1)) return -1;
        }
        jb_putc(b, '}');
        return 0;
    case JV_NS:
        jb_puts(b, "<Namespace {");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_puts(b, ", ");
            if (text_form(b, v.u.d->key[i], 1, depth + 1) ) return -1;
            jb_puts(b, ": ");
            if (text_form(b, v.u.d->val[i], 1, depth + 1)) return -1;
        }
        jb_puts(b, "}>");
        return 0;
    default: return -1;
    }
}

int jv_to_str(jbuf *b, jv v) { return text_form(b, v, 0, 0); }
int jv_repr(jbuf *b, jv v) { return text_form(b, v, 1, 0); }

qstatus jv_as_str(jarena *a, jv v, jv *out) {
    if (v.k == JV_STR) {
        *out = v;
        return Q_OK;
    }
    jbuf b = {0};
    if (jv_to_str(&b, v)) {
        free(b.p);
        return q_fail(Q_EUNSUPPORTED, "cannot convert a %s to a string", jv_kind_name(v));
    }
    if (b.oom) {
        free(b.p);
        return q_fail(Q_ENOMEM, "chat template: out of memory");
    }
    char *s = ja_strdup(a, b.p ? b.p : "", b.n);
    size_t n = b.n;
    free(b.p);
    if (!s) return q_fail(Q_ENOMEM, "chat template: out of memory");
    *out = jv_str(s, n);
    return Q_OK;
}

/* ---- JSON (Python json.dumps) ---------------------------------------------------------------- */

static void json_str(jbuf *b, const char *s, size_t n) {
    jb_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        jb_put(b, s + run, i - run);
        run = i + 1;
        char esc[8];
        switch (c) {
        case '"': jb_puts(b, "\\\""); break;
        case '\\': jb_puts(b, "\\\\"); break;
        case '\n': jb_puts(b, "\\n"); break;
        case '\r': jb_puts(b, "\\r"); break;
        case '\t': jb_puts(b, "\\t"); break;
        case '\b': jb_puts(b, "\\b"); break;
        case '\f': jb_puts(b, "\\f"); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c); jb_puts(b, esc);
        }
    }
    jb_put(b, s + run, n - run);
    jb_putc(b, '"');
}

static void newline_indent(jbuf *b, int indent, int level) {
    jb_putc(b, '\n');
    for (int i = 0; i < indent * level; i++) jb_putc(b, ' ');
}

static int cmp_keys(const void *x, const void *y) {
    const jv *a = *(const jv *const *)x, *b = *(const jv *const *)y;
    size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    int c = n ? memcmp(a->u.s.p, b->u.s.p, n) : 0;
    return c ? c : (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
}

static qstatus to_json(jbuf *b, jv v, int indent, int sort_keys, int level) {
    char tmp[32];
    if (level > JINJA_MAX_DEPTH) return q_fail(Q_EUNSUPPORTED, "tojson: nesting deeper than %d", JINJA_MAX_DEPTH);
    switch (v.k) {
    case JV_NONE: jb_puts(b, "null"); return Q_OK;
    case JV_BOOL: jb_puts(b, v.u.b ? "true" : "false"); return Q_OK;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jb_puts(b, tmp); return Q_OK;
    case JV_FLOAT:
        if (isnan(v.u.f)) jb_puts(b, "NaN");
        else if (isinf(v.u.f)) jb_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jv_float_repr(b, v.u.f);
        return Q_OK;
    case JV_STR: json_str(b, v.u.s.p, v.u.s.n); return Q_OK;
    case JV_LIST:
        if (v.u.l->form > JL_TUPLE) return q_fail(Q_EINVAL, "tojson: a dict view or generator is not JSON serializable");
        if (!v.u.l->n) { jb_puts(b, "[]"); return Q_OK; }
        jb_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(b, indent, level + 1);
            Q_TRY(to_json(b, v.u.l->v[i], indent, sort_keys, level + 1));
        }
        if (indent >= 0) newline_indent(b, indent, level);
        jb_putc(b, ']');
        return Q_OK;
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (!d->n) { jb_puts(b, "{}"); return Q_OK; }
        const jv **order = malloc(d->n * sizeof *order);
        if (!order) return q_fail(Q_ENOMEM, "tojson: out of memory");
        for (size_t i = 0; i < d->n; i++) {
            if (d->key[i].k != JV_STR) {
                free(order);
                return q_fail(Q_EUNSUPPORTED, "tojson: non-string dict key");
            }
            order[i] = &d->key[i];
        }
        if (sort_keys) qsort(order, d->n, sizeof *order, cmp_keys);
        jb_putc(b, '{');
        qstatus rc = Q_OK;
        for (size_t i = 0; i < d->n && rc == Q_OK; i++) {
            size_t k = (size_t)(order[i] - d->key);
            if (i) jb_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(b, indent, level + 1);
            json_str(b, d->key[k].u.s.p, d->key[k].u.s.n);
            jb_puts(b, ": ");
            rc = to_json(b, d->val[k], indent, sort_keys, level + 1);
        }
        free(order);
        Q_TRY(rc);
        if (indent >= 0) newline_indent(b, indent, level);
        jb_putc(b, '}');
        return Q_OK;
    }
    default:
        return q_fail(Q_EINVAL, "tojson: object of type %s is not JSON serializable", jv_kind_name(v));
    }
}

qstatus jv_to_json(jbuf *b, jv v, int indent, int sort_keys) { return to_json(b, v, indent, sort_keys, 0); }

qstatus jv_from_json(jarena *a, const json_t *j, jv *out, int depth) {
    if (depth > JINJA_MAX_DEPTH) return q_fail(Q_EINVAL, "request JSON nested deeper than %d", JINJA_MAX_DEPTH);
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return Q_OK;
    case JSON_TRUE: *out = jv_bool(1); return Q_OK;
    case JSON_FALSE: *out = jv_bool(0); return Q_OK;
    case JSON_INTEGER: *out = jv_int(json_integer_value(j)); return Q_OK;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return Q_OK;
    case JSON_STRING: *out = jv_str(json_string_value(j), json_string_length(j)); return Q_OK;
    case JSON_ARRAY: {
        jlist *l = jl_new(a, json_array_size(j));
        if (!l) return q_fail(Q_ENOMEM, "chat template: out of memory");
        for (size_t i = 0; i < json_array_size(j); i++)
            Q_TRY(jv_from_json(a, json_array_get(j, i), &l->v[l->n++], depth + 1));
        out->k = JV_LIST, out->u.l = l;
        return Q_OK;
    }
    case JSON_OBJECT: {
        jdict *d = jd_new(a, json_object_size(j));
        if (!d) return q_fail(Q_ENOMEM, "chat template: out of memory");
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            d->key[d->n] = jv_str(key, strlen(key));
            Q_TRY(jv_from_json(a, val, &d->val[d->n], depth + 1));
            d->n++;
        }
        out->k = JV_DICT, out->u.d = d;
        return Q_OK;
    }
    }
    return q_fail(Q_EINVAL, "unknown JSON type");
}
