/* jinja_methods.c: str and dict methods (Python semantics) and the string operations behind them,
 * which the filters share: Unicode-aware strip (Python's whitespace, or a set of code points),
 * split/rsplit (with and without separator, maxsplit), replace (count; empty pattern as Python),
 * find/count in code points, join, ASCII upper/lower, and Python's float() number syntax.
 * str methods: startswith endswith split rsplit strip lstrip rstrip replace find count join upper
 * lower; dict methods: items keys values get (items/keys/values are dict views).
 * Invariants: results live in the render arena; a Python method we do not implement fails with
 * Q_EUNSUPPORTED naming the line. upper/lower refuse non-ASCII text (Python's Unicode case mapping
 * is not implemented). Not here: filters and tests (jinja_filters.c). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jinja.h"

#define OOM() q_fail(Q_ENOMEM, "chat template: out of memory rendering")
#define FAIL(st, ...) q_fail(st, "chat template line %d: " __VA_ARGS__)
#define IS(s, n, lit) ((n) == sizeof(lit) - 1 && memcmp((s), (lit), (n)) == 0)

static int in_list(const char *s, size_t n, const char *const *names) {
    for (; *names; names++)
        if (strlen(*names) == n && memcmp(*names, s, n) == 0) return 1;
    return 0;
}

/* ---- string helpers -------------------------------------------------------------------------- */

/* Does code point cp belong to chars (NULL: Python whitespace)? */
static int strip_match(uint32_t cp, const jv *chars) {
    if (!chars) return ju_isspace(cp);
    for (size_t i = 0; i < chars->u.s.n;) {
        uint32_t c;
        i += ju_decode(chars->u.s.p + i, chars->u.s.n - i, &c);
        if (c == cp) return 1;
    }
    return 0;
}

jv jinja_str_strip(jv s, const jv *chars, int left, int right) {
    const char *p = s.u.s.p;
    size_t a = 0, b = s.u.s.n;
    uint32_t cp;
    while (left && a < b) {
        size_t k = ju_decode(p + a, b - a, &cp);
        if (!strip_match(cp, chars)) break;
        a += k;
    }
    while (right && b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80 && b - st < 4) st--;
        size_t k = ju_decode(p + st, b - st, &cp);
        if (st + k != b) st = b - 1, cp = (unsigned char)p[st]; /* not a whole sequence: one byte */
        if (!strip_match(cp, chars)) break;
        b = st;
    }
    return jv_str(p + a, b - a);
}

const char *jinja_str_find(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(h + i, n, nn) == 0) return h + i;
    return NULL;
}

static const char *rfind_sub(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (memcmp(h + i, n, nn) == 0) return h + i;
    return NULL;
}

static qstatus str_split(jctx *cx, jv s, const jv *sep, int64_t maxsplit, int from_right, jv *out) {
    jlist *l = jl_new(cx->a, 0);
    if (!l) return OOM();
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (!sep) {
        if (from_right && maxsplit >= 0) return FAIL(Q_EUNSUPPORTED, "rsplit(None, maxsplit) not supported", cx->line);
        size_t i = 0;
        uint32_t cp;
        while (i < n) {
            while (i < n) { size_t k = ju_decode(p + i, n - i, &cp); if (!ju_isspace(cp)) break; i += k; }
            if (i >= n) break;
            size_t st = i;
            if (maxsplit >= 0 && (int64_t)l->n == maxsplit) {
                jv rest = jinja_str_strip(jv_str(p + st, n - st), NULL, 0, 1);
                if (jl_push(cx->a, l, rest)) return OOM();
                break;
            }
            while (i < n) { size_t k = ju_decode(p + i, n - i, &cp); if (ju_isspace(cp)) break; i += k; }
            if (jl_push(cx->a, l, jv_str(p + st, i - st))) return OOM();
        }
    } else {
        if (sep->k != JV_STR) return FAIL(Q_EINVAL, "split separator must be a string", cx->line);
        if (sep->u.s.n == 0) return FAIL(Q_EINVAL, "empty separator", cx->line);
        size_t sn = sep->u.s.n;
        if (!from_right) {
            size_t st = 0;
            const char *f;
            while ((maxsplit < 0 || (int64_t)l->n < maxsplit) && (f = jinja_str_find(p + st, n - st, sep->u.s.p, sn))) {
                if (jl_push(cx->a, l, jv_str(p + st, (size_t)(f - (p + st))))) return OOM();
                st = (size_t)(f - p) + sn;
            }
            if (jl_push(cx->a, l, jv_str(p + st, n - st))) return OOM();
        } else {
            jlist *rev = jl_new(cx->a, 0);
            if (!rev) return OOM();
            size_t end = n;
            const char *f;
            while ((maxsplit < 0 || (int64_t)rev->n < maxsplit) && (f = rfind_sub(p, end, sep->u.s.p, sn))) {
                size_t fp = (size_t)(f - p);
                if (jl_push(cx->a, rev, jv_str(p + fp + sn, end - fp - sn))) return OOM();
                end = fp;
            }
            if (jl_push(cx->a, l, jv_str(p, end))) return OOM();
            for (size_t i = rev->n; i-- > 0;)
                if (jl_push(cx->a, l, rev->v[i])) return OOM();
        }
    }
    out->k = JV_LIST, out->u.l = l;
    return Q_OK;
}

qstatus jinja_str_replace(jctx *cx, jv s, jv old, jv new, int64_t count, jv *out) {
    if (old.k != JV_STR || new.k != JV_STR) return FAIL(Q_EINVAL, "replace() arguments must be strings", cx->line);
    jbuf b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) { /* Python inserts `new` around every code point */
        uint32_t cp;
        while (count < 0 || done < count) {
            jb_put(&b, new.u.s.p, new.u.s.n);
            done++;
            if (i >= n) break;
            size_t k = ju_decode(p + i, n - i, &cp);
            jb_put(&b, p + i, k);
            i += k;
        }
        jb_put(&b, p + i, n - i);
        return jinja_str_from_buf(cx, &b, out);
    }
    const char *f;
    while ((count < 0 || done < count) && (f = jinja_str_find(p + i, n - i, old.u.s.p, old.u.s.n))) {
        jb_put(&b, p + i, (size_t)(f - (p + i)));
        jb_put(&b, new.u.s.p, new.u.s.n);
        i = (size_t)(f - p) + old.u.s.n;
        done++;
    }
    jb_put(&b, p + i, n - i);
    return jinja_str_from_buf(cx, &b, out);
}

qstatus jinja_str_case(jctx *cx, jv s, int upper, jv *out) {
    jbuf b = {0};
    for (size_t i = 0; i < s.u.s.n; i++) {
        char c = s.u.s.p[i];
        if ((unsigned char)c >= 0x80) {
            free(b.p);
            return FAIL(Q_EUNSUPPORTED, "upper/lower of non-ASCII text not supported", cx->line);
        }
        if (upper && c >= 'a' && c <= 'z') c = (char)(c - 32);
        if (!upper && c >= 'A' && c <= 'Z') c = (char)(c + 32);
        jb_putc(&b, c);
    }
    return jinja_str_from_buf(cx, &b, out);
}

qstatus jinja_str_join(jctx *cx, jlist *l, jv sep, int strict, jv *out) {
    jbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i) jb_put(&b, sep.u.s.p, sep.u.s.n);
        if ((strict && l->v[i].k != JV_STR) || jv_to_str(&b, l->v[i])) {
            free(b.p);
            return FAIL(Q_EINVAL, "join: item %zu is a %s", cx->line, i, jv_kind_name(l->v[i]));
        }
    }
    return jinja_str_from_buf(cx, &b, out);
}

/* ---- methods --------------------------------------------------------------------------------- */

/* Python float(s) for an already stripped s: [+-] digits [. digits] [e [+-] digits] with single
 * underscores between digits, or inf/infinity/nan. 1 and *out on success. (int(s) accepts a
 * subset of these, and jinja2's int filter falls back to float(s), so one parser serves both.) */
int jinja_parse_number(jv s, double *out) {
    char tmp[80];
    size_t m = 0, i = 0, n = s.u.s.n;
    const char *p = s.u.s.p;
    int digits = 0;
    if (n == 0 || n >= sizeof tmp) return 0;
    if (p[i] == '+' || p[i] == '-') tmp[m++] = p[i++];
    const char *rest = p + i;
    size_t rn = n - i;
    static const char *const words[] = {"inf", "infinity", "nan"};
    for (size_t w = 0; w < 3; w++)
        if (rn == strlen(words[w]) && !strncasecmp(rest, words[w], rn)) {
            memcpy(tmp + m, rest, rn);
            tmp[m + rn] = 0;
            *out = strtod(tmp, NULL);
            return 1;
        }
    int seen_dot = 0, seen_e = 0;
    for (; i < n; i++) {
        char c = p[i];
        if (c >= '0' && c <= '9') digits++;
        else if (c == '_' && i > 0 && i + 1 < n && p[i - 1] >= '0' && p[i - 1] <= '9' && p[i + 1] >= '0' && p[i + 1] <= '9') continue;
        else if (c == '.' && !seen_dot && !seen_e) seen_dot = 1;
        else if ((c == 'e' || c == 'E') && digits && !seen_e) {
            seen_e = 1;
            tmp[m++] = c;
            if (i + 1 < n && (p[i + 1] == '+' || p[i + 1] == '-')) tmp[m++] = p[++i];
            if (i + 1 >= n || p[i + 1] < '0' || p[i + 1] > '9') return 0;
            continue;
        } else return 0;
        tmp[m++] = c;
    }
    if (!digits) return 0;
    tmp[m] = 0;
    *out = strtod(tmp, NULL);
    return 1;
}

static const char *const str_methods[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip",
    "rstrip", "replace", "find", "count", "join", "upper", "lower", NULL};
static const char *const str_python[] = {"capitalize", "casefold", "center", "encode", "expandtabs",
    "format", "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
    "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "ljust",
    "maketrans", "partition", "removeprefix", "removesuffix", "rfind", "rindex", "rjust", "rpartition",
    "splitlines", "swapcase", "title", "translate", "zfill", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", NULL};
static const char *const dict_python[] = {"clear", "copy", "fromkeys", "pop", "popitem", "setdefault",
    "update", NULL};
static const char *const list_python[] = {"append", "clear", "copy", "count", "extend", "index",
    "insert", "pop", "remove", "reverse", "sort", NULL};

qstatus jinja_method_lookup(jctx *cx, jv self, const char *name, size_t n, jv *out, int *found) {
    *found = 0;
    const char *const *ours = self.k == JV_STR ? str_methods : self.k == JV_DICT ? dict_methods : NULL;
    const char *const *py = self.k == JV_STR ? str_python : self.k == JV_DICT ? dict_python : list_python;
    if (ours && in_list(name, n, ours)) {
        jmethod *m = ja_alloc(cx->a, sizeof *m);
        char *nm = ja_strdup(cx->a, name, n);
        if (!m || !nm) return OOM();
        m->self = self, m->name = nm;
        out->k = JV_METHOD, out->u.m = m;
        *found = 1;
        return Q_OK;
    }
    if (in_list(name, n, py))
        return FAIL(Q_EUNSUPPORTED, "method %s.%.*s not supported", cx->line, jv_kind_name(self), (int)n, name);
    return Q_OK;
}

int64_t jinja_int_arg(const jv *v, int64_t dflt) {
    if (!v || v->k == JV_NONE || v->k == JV_UNDEF) return dflt;
    return v->k == JV_INT ? v->u.i : v->k == JV_BOOL ? v->u.b : dflt;
}

qstatus jinja_method_call(jctx *cx, const jmethod *m, const jv *args, size_t n_args,
                          const char **kwname, const size_t *kwlen, const jv *kw, size_t n_kw, jv *out) {
    const char *nm = m->name;
    jv s = m->self;
    const jv *a0 = n_args > 0 ? &args[0] : NULL, *a1 = n_args > 1 ? &args[1] : NULL, *a2 = n_args > 2 ? &args[2] : NULL;
    for (size_t k = 0; k < n_kw; k++) { /* the keyword forms Python accepts */
        if (IS(kwname[k], kwlen[k], "sep") && !a0) a0 = &kw[k];
        else if (IS(kwname[k], kwlen[k], "maxsplit") && !a1) a1 = &kw[k];
        else if (IS(kwname[k], kwlen[k], "count") && !a2) a2 = &kw[k];
        else return FAIL(Q_EUNSUPPORTED, "%s() keyword '%.*s' not supported", cx->line, nm, (int)kwlen[k], kwname[k]);
    }
    if (s.k == JV_DICT) {
        jdict *d = s.u.d;
        if (!strcmp(nm, "get")) {
            if (!a0) return FAIL(Q_EINVAL, "get() needs a key", cx->line);
            const jv *v = jd_getv(d, *a0);
            *out = v ? *v : a1 ? *a1 : jv_none();
            return Q_OK;
        }
        jlist *l = jl_new(cx->a, d->n);
        if (!l) return OOM();
        for (size_t i = 0; i < d->n; i++) {
            if (!strcmp(nm, "items")) {
                jlist *pair = jl_new(cx->a, 2);
                if (!pair) return OOM();
                pair->v[0] = d->key[i], pair->v[1] = d->val[i], pair->n = 2, pair->form = JL_TUPLE;
                l->v[l->n].k = JV_LIST, l->v[l->n++].u.l = pair;
            } else {
                l->v[l->n++] = !strcmp(nm, "keys") ? d->key[i] : d->val[i];
            }
        }
        l->form = !strcmp(nm, "items") ? JL_ITEMS : !strcmp(nm, "keys") ? JL_KEYS : JL_VALUES;
        out->k = JV_LIST, out->u.l = l;
        return Q_OK;
    }
    /* str methods */
    if (!strcmp(nm, "startswith") || !strcmp(nm, "endswith")) {
        int ends = nm[0] == 'e';
        if (!a0) return FAIL(Q_EINVAL, "%s() needs an argument", cx->line, nm);
        if (a1) return FAIL(Q_EUNSUPPORTED, "%s() with start/end not supported", cx->line, nm);
        const jv *opts = a0->k == JV_LIST ? a0->u.l->v : a0;
        size_t n_opts = a0->k == JV_LIST ? a0->u.l->n : 1;
        int r = 0;
        for (size_t i = 0; i < n_opts && !r; i++) {
            Q_TRY(jinja_need_str(cx, opts[i], nm));
            size_t pn = opts[i].u.s.n;
            r = pn <= s.u.s.n && (pn == 0 || memcmp(s.u.s.p + (ends ? s.u.s.n - pn : 0), opts[i].u.s.p, pn) == 0);
        }
        *out = jv_bool(r);
        return Q_OK;
    }
    if (!strcmp(nm, "split") || !strcmp(nm, "rsplit")) {
        const jv *sep = (a0 && a0->k != JV_NONE) ? a0 : NULL;
        return str_split(cx, s, sep, jinja_int_arg(a1, -1), nm[0] == 'r', out);
    }
    if (!strcmp(nm, "strip") || !strcmp(nm, "lstrip") || !strcmp(nm, "rstrip")) {
        const jv *chars = (a0 && a0->k != JV_NONE) ? a0 : NULL;
        if (chars) Q_TRY(jinja_need_str(cx, *chars, nm));
        *out = jinja_str_strip(s, chars, nm[0] != 'r', nm[0] != 'l');
        return Q_OK;
    }
    if (!strcmp(nm, "replace")) {
        if (!a0 || !a1) return FAIL(Q_EINVAL, "replace() needs 2 arguments", cx->line);
        return jinja_str_replace(cx, s, *a0, *a1, jinja_int_arg(a2, -1), out);
    }
    if (!strcmp(nm, "find") || !strcmp(nm, "count")) {
        if (!a0) return FAIL(Q_EINVAL, "%s() needs an argument", cx->line, nm);
        if (a1) return FAIL(Q_EUNSUPPORTED, "%s() with start/end not supported", cx->line, nm);
        Q_TRY(jinja_need_str(cx, *a0, nm));
        if (nm[0] == 'f') {
            const char *f = jinja_str_find(s.u.s.p, s.u.s.n, a0->u.s.p, a0->u.s.n);
            *out = jv_int(f ? (int64_t)ju_count(s.u.s.p, (size_t)(f - s.u.s.p)) : -1);
            return Q_OK;
        }
        int64_t c = 0;
        if (a0->u.s.n == 0) c = (int64_t)ju_count(s.u.s.p, s.u.s.n) + 1;
        else
            for (size_t i = 0; i + a0->u.s.n <= s.u.s.n;)
                if (memcmp(s.u.s.p + i, a0->u.s.p, a0->u.s.n) == 0) c++, i += a0->u.s.n;
                else i++;
        *out = jv_int(c);
        return Q_OK;
    }
    if (!strcmp(nm, "join")) {
        jlist *l;
        if (!a0) return FAIL(Q_EINVAL, "jinja_str_join() needs an argument", cx->line);
        Q_TRY(jinja_iterate(cx, *a0, &l));
        return jinja_str_join(cx, l, s, 1, out);
    }
    return jinja_str_case(cx, s, nm[0] == 'u', out);
}

