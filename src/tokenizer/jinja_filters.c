/* jinja_filters.c: the filters, tests and str/dict methods a chat template may call, each with the
 * semantics of jinja2 3.1 / Python 3 as transformers runs them (tojson is transformers' own:
 * json.dumps(ensure_ascii=False, indent=None, separators=None, sort_keys=False)).
 * Filters: tojson trim length count string items safe list first last join upper lower default d
 *   replace int float abs reverse map select reject selectattr rejectattr.
 * Tests: defined undefined none string number integer float boolean true false mapping sequence
 *   iterable callable odd even divisibleby eq equalto == ne != lt < le <= gt > ge >= in sameas.
 * str methods: startswith endswith split rsplit strip lstrip rstrip replace find count join upper
 *   lower; dict methods: items keys values get.
 * Invariants: results live in the render arena; a name jinja2/Python knows but we do not implement
 * fails with Q_EUNSUPPORTED naming the line (never a silently different result). upper/lower handle
 * ASCII only and refuse other text. Not here: operators (jinja_eval.c). */
#include <math.h>
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

static qstatus mkstr(jctx *cx, jbuf *b, jv *out) {
    char *s = b->oom ? NULL : ja_strdup(cx->a, b->p ? b->p : "", b->n);
    size_t n = b->n;
    free(b->p);
    if (!s) return OOM();
    *out = jv_str(s, n);
    return Q_OK;
}

static qstatus need_str(jctx *cx, jv v, const char *what) {
    if (v.k == JV_STR) return Q_OK;
    return FAIL(Q_EINVAL, "%s expects a string, got %s", cx->line, what, jv_kind_name(v));
}

qstatus jinja_iterate(jctx *cx, jv v, jlist **out) {
    jlist *l;
    switch (v.k) {
    case JV_LIST: *out = v.u.l; return Q_OK;
    case JV_UNDEF: return (*out = jl_new(cx->a, 0)) ? Q_OK : OOM();
    case JV_DICT:
        if (!(l = jl_new(cx->a, v.u.d->n))) return OOM();
        for (size_t i = 0; i < v.u.d->n; i++) l->v[l->n++] = v.u.d->key[i];
        *out = l;
        return Q_OK;
    case JV_STR:
        if (!(l = jl_new(cx->a, 0))) return OOM();
        for (size_t i = 0; i < v.u.s.n;) {
            uint32_t cp;
            size_t k = ju_decode(v.u.s.p + i, v.u.s.n - i, &cp);
            if (jl_push(cx->a, l, jv_str(v.u.s.p + i, k))) return OOM();
            i += k;
        }
        *out = l;
        return Q_OK;
    default: return FAIL(Q_EINVAL, "'%s' object is not iterable", cx->line, jv_kind_name(v));
    }
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

static jv strip(jv s, const jv *chars, int left, int right) {
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

static const char *find_sub(const char *h, size_t hn, const char *n, size_t nn) {
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
                jv rest = strip(jv_str(p + st, n - st), NULL, 0, 1);
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
            while ((maxsplit < 0 || (int64_t)l->n < maxsplit) && (f = find_sub(p + st, n - st, sep->u.s.p, sn))) {
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

static qstatus str_replace(jctx *cx, jv s, jv old, jv new, int64_t count, jv *out) {
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
        return mkstr(cx, &b, out);
    }
    const char *f;
    while ((count < 0 || done < count) && (f = find_sub(p + i, n - i, old.u.s.p, old.u.s.n))) {
        jb_put(&b, p + i, (size_t)(f - (p + i)));
        jb_put(&b, new.u.s.p, new.u.s.n);
        i = (size_t)(f - p) + old.u.s.n;
        done++;
    }
    jb_put(&b, p + i, n - i);
    return mkstr(cx, &b, out);
}

static qstatus str_case(jctx *cx, jv s, int upper, jv *out) {
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
    return mkstr(cx, &b, out);
}

static qstatus join(jctx *cx, jlist *l, jv sep, int strict, jv *out) {
    jbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i) jb_put(&b, sep.u.s.p, sep.u.s.n);
        if ((strict && l->v[i].k != JV_STR) || jv_to_str(&b, l->v[i])) {
            free(b.p);
            return FAIL(Q_EINVAL, "join: item %zu is a %s", cx->line, i, jv_kind_name(l->v[i]));
        }
    }
    return mkstr(cx, &b, out);
}

/* ---- methods --------------------------------------------------------------------------------- */

/* Python float(s) for an already stripped s: [+-] digits [. digits] [e [+-] digits] with single
 * underscores between digits, or inf/infinity/nan. 1 and *out on success. (int(s) accepts a
 * subset of these, and jinja2's int filter falls back to float(s), so one parser serves both.) */
static int parse_number(jv s, double *out) {
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

static int64_t int_arg(const jv *v, int64_t dflt) {
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
            Q_TRY(need_str(cx, opts[i], nm));
            size_t pn = opts[i].u.s.n;
            r = pn <= s.u.s.n && (pn == 0 || memcmp(s.u.s.p + (ends ? s.u.s.n - pn : 0), opts[i].u.s.p, pn) == 0);
        }
        *out = jv_bool(r);
        return Q_OK;
    }
    if (!strcmp(nm, "split") || !strcmp(nm, "rsplit")) {
        const jv *sep = (a0 && a0->k != JV_NONE) ? a0 : NULL;
        return str_split(cx, s, sep, int_arg(a1, -1), nm[0] == 'r', out);
    }
    if (!strcmp(nm, "strip") || !strcmp(nm, "lstrip") || !strcmp(nm, "rstrip")) {
        const jv *chars = (a0 && a0->k != JV_NONE) ? a0 : NULL;
        if (chars) Q_TRY(need_str(cx, *chars, nm));
        *out = strip(s, chars, nm[0] != 'r', nm[0] != 'l');
        return Q_OK;
    }
    if (!strcmp(nm, "replace")) {
        if (!a0 || !a1) return FAIL(Q_EINVAL, "replace() needs 2 arguments", cx->line);
        return str_replace(cx, s, *a0, *a1, int_arg(a2, -1), out);
    }
    if (!strcmp(nm, "find") || !strcmp(nm, "count")) {
        if (!a0) return FAIL(Q_EINVAL, "%s() needs an argument", cx->line, nm);
        if (a1) return FAIL(Q_EUNSUPPORTED, "%s() with start/end not supported", cx->line, nm);
        Q_TRY(need_str(cx, *a0, nm));
        if (nm[0] == 'f') {
            const char *f = find_sub(s.u.s.p, s.u.s.n, a0->u.s.p, a0->u.s.n);
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
        if (!a0) return FAIL(Q_EINVAL, "join() needs an argument", cx->line);
        Q_TRY(jinja_iterate(cx, *a0, &l));
        return join(cx, l, s, 1, out);
    }
    return str_case(cx, s, nm[0] == 'u', out);
}

/* ---- tests ----------------------------------------------------------------------------------- */

qstatus jinja_test(jctx *cx, const char *name, size_t n, jv v, const jv *args, size_t n_args, int *out) {
    const jv *a0 = n_args ? &args[0] : NULL;
#define T(lit) IS(name, n, lit)
    if (T("defined")) *out = v.k != JV_UNDEF;
    else if (T("undefined")) *out = v.k == JV_UNDEF;
    else if (T("none")) *out = v.k == JV_NONE;
    else if (T("string")) *out = v.k == JV_STR;
    else if (T("number")) *out = v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL;
    else if (T("integer")) *out = v.k == JV_INT;
    else if (T("float")) *out = v.k == JV_FLOAT;
    else if (T("boolean")) *out = v.k == JV_BOOL;
    else if (T("true")) *out = v.k == JV_BOOL && v.u.b;
    else if (T("false")) *out = v.k == JV_BOOL && !v.u.b;
    else if (T("mapping")) *out = v.k == JV_DICT;
    else if (T("sequence")) *out = v.k == JV_STR || v.k == JV_DICT || v.k == JV_UNDEF || (v.k == JV_LIST && v.u.l->form <= JL_TUPLE);
    else if (T("iterable")) *out = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF;
    else if (T("callable")) *out = v.k == JV_MACRO || v.k == JV_FUNC || v.k == JV_METHOD;
    else if (T("odd") || T("even") || T("divisibleby")) {
        if (v.k != JV_INT) return FAIL(Q_EINVAL, "test '%.*s' needs an integer", cx->line, (int)n, name);
        int64_t d = T("divisibleby") ? int_arg(a0, 0) : 2;
        if (d == 0) return FAIL(Q_EINVAL, "divisibleby 0", cx->line);
        int64_t m = v.u.i % d;
        *out = T("odd") ? m != 0 : m == 0;
    } else if (T("eq") || T("equalto") || T("==") || T("ne") || T("!=") || T("sameas")) {
        if (!a0) return FAIL(Q_EINVAL, "test '%.*s' needs an argument", cx->line, (int)n, name);
        if (T("sameas") && (v.k > JV_BOOL || a0->k > JV_BOOL))
            return FAIL(Q_EUNSUPPORTED, "'sameas' only for none/true/false", cx->line);
        *out = (T("sameas") && v.k != a0->k) ? 0 : jv_equal(v, *a0);
        if (T("ne") || T("!=")) *out = !*out;
    } else if (T("lt") || T("<") || T("le") || T("<=") || T("gt") || T(">") || T("ge") || T(">=")) {
        if (!a0) return FAIL(Q_EINVAL, "test '%.*s' needs an argument", cx->line, (int)n, name);
        int num = (v.k == JV_INT || v.k == JV_FLOAT) && (a0->k == JV_INT || a0->k == JV_FLOAT);
        if (!num) return FAIL(Q_EUNSUPPORTED, "test '%.*s' only for numbers", cx->line, (int)n, name);
        double x = v.k == JV_INT ? (double)v.u.i : v.u.f, y = a0->k == JV_INT ? (double)a0->u.i : a0->u.f;
        *out = name[0] == 'l' || name[0] == '<' ? (n == 2 && name[1] != 't' ? x <= y : x < y) : (n == 2 && name[1] != 't' ? x >= y : x > y);
    } else if (T("in")) {
        if (!a0) return FAIL(Q_EINVAL, "test 'in' needs an argument", cx->line);
        jlist *l;
        if (a0->k == JV_STR) {
            if (v.k != JV_STR) return FAIL(Q_EINVAL, "'in <string>' needs a string", cx->line);
            *out = find_sub(a0->u.s.p, a0->u.s.n, v.u.s.p, v.u.s.n) != NULL;
            return Q_OK;
        }
        if (a0->k == JV_DICT) { *out = jd_getv(a0->u.d, v) != NULL; return Q_OK; }
        Q_TRY(jinja_iterate(cx, *a0, &l));
        *out = 0;
        for (size_t i = 0; i < l->n && !*out; i++) *out = jv_equal(l->v[i], v);
    } else return FAIL(Q_EUNSUPPORTED, "unknown test '%.*s'", cx->line, (int)n, name);
#undef T
    return Q_OK;
}

/* ---- filters --------------------------------------------------------------------------------- */

static jv attr_of(jv item, jv attr) {
    /* jinja2 make_attrgetter: dotted path of keys (integers index lists) */
    if (attr.k != JV_STR) return jv_undef();
    const char *p = attr.u.s.p, *end = p + attr.u.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        if (item.k == JV_DICT || item.k == JV_NS) {
            const jv *v = jd_get(item.u.d, p, len);
            item = v ? *v : jv_undef();
        } else return jv_undef();
        if (!dot) break;
        p = dot + 1;
    }
    return item;
}

static const jv *kwarg(const char **kwname, const size_t *kwlen, const jv *kw, size_t n_kw, const char *name) {
    for (size_t k = 0; k < n_kw; k++)
        if (kwlen[k] == strlen(name) && memcmp(kwname[k], name, kwlen[k]) == 0) return &kw[k];
    return NULL;
}

static qstatus select_filter(jctx *cx, const char *name, size_t n, jv in, const jv *args, size_t n_args, jv *out) {
    int attr = name[n - 4] == 'a' && n > 6; /* selectattr / rejectattr */
    int reject = name[0] == 'r';
    jlist *l, *res = jl_new(cx->a, 0);
    if (!res) return OOM();
    Q_TRY(jinja_iterate(cx, in, &l));
    if (attr && n_args < 1) return FAIL(Q_EINVAL, "%.*s needs an attribute", cx->line, (int)n, name);
    size_t ti = attr ? 1 : 0;
    for (size_t i = 0; i < l->n; i++) {
        jv x = attr ? attr_of(l->v[i], args[0]) : l->v[i];
        int t;
        if (n_args > ti) {
            if (args[ti].k != JV_STR) return FAIL(Q_EINVAL, "%.*s: test name must be a string", cx->line, (int)n, name);
            Q_TRY(jinja_test(cx, args[ti].u.s.p, args[ti].u.s.n, x, args + ti + 1, n_args - ti - 1, &t));
        } else t = jv_truthy(x);
        if (t != reject && jl_push(cx->a, res, l->v[i])) return OOM();
    }
    res->form = JL_GEN;
    out->k = JV_LIST, out->u.l = res;
    return Q_OK;
}

qstatus jinja_filter(jctx *cx, const char *name, size_t n, jv in, const jv *args, size_t n_args,
                     const char **kwname, const size_t *kwlen, const jv *kw, size_t n_kw, jv *out) {
    const jv *a0 = n_args ? &args[0] : NULL;
    jbuf b = {0};
    jlist *l;
#define F(lit) IS(name, n, lit)
    if (F("safe")) { *out = in; return Q_OK; }
    if (F("tojson")) {
        const jv *ind = kwarg(kwname, kwlen, kw, n_kw, "indent"), *sk = kwarg(kwname, kwlen, kw, n_kw, "sort_keys");
        const jv *ea = kwarg(kwname, kwlen, kw, n_kw, "ensure_ascii");
        if (!ind && a0) ind = a0;
        if (n_args > 1 || kwarg(kwname, kwlen, kw, n_kw, "separators") || (ea && jv_truthy(*ea)) ||
            (ind && ind->k != JV_INT && ind->k != JV_NONE))
            return FAIL(Q_EUNSUPPORTED, "tojson: only indent (int) and sort_keys supported", cx->line);
        qstatus rc = jv_to_json(&b, in, ind && ind->k == JV_INT ? (int)int_arg(ind, -1) : -1, sk ? jv_truthy(*sk) : 0);
        if (rc) { free(b.p); return q_wrap(rc, "chat template line %d", cx->line); }
        return mkstr(cx, &b, out);
    }
    if (F("string")) return jv_as_str(cx->a, in, out) ? FAIL(Q_EUNSUPPORTED, "cannot convert a %s to a string", cx->line, jv_kind_name(in)) : Q_OK;
    if (F("trim")) {
        jv s;
        if (a0 && a0->k != JV_STR && a0->k != JV_NONE) return FAIL(Q_EINVAL, "trim chars must be a string", cx->line);
        Q_TRY(jv_as_str(cx->a, in, &s));
        *out = strip(s, (a0 && a0->k == JV_STR) ? a0 : NULL, 1, 1);
        return Q_OK;
    }
    if (F("length") || F("count")) {
        switch (in.k) {
        case JV_UNDEF: *out = jv_int(0); return Q_OK;
        case JV_STR: *out = jv_int((int64_t)ju_count(in.u.s.p, in.u.s.n)); return Q_OK;
        case JV_LIST:
            if (in.u.l->form == JL_GEN) return FAIL(Q_EINVAL, "object of type 'generator' has no len()", cx->line);
            *out = jv_int((int64_t)in.u.l->n);
            return Q_OK;
        case JV_DICT: *out = jv_int((int64_t)in.u.d->n); return Q_OK;
        default: return FAIL(Q_EINVAL, "object of type '%s' has no len()", cx->line, jv_kind_name(in));
        }
    }
    if (F("items")) {
        if (in.k == JV_UNDEF) return (out->k = JV_LIST, out->u.l = jl_new(cx->a, 0)) ? Q_OK : OOM();
        if (in.k != JV_DICT) return FAIL(Q_EINVAL, "items: can only get item pairs from a mapping, not a %s", cx->line, jv_kind_name(in));
        jmethod m = {.self = in, .name = "items"};
        Q_TRY(jinja_method_call(cx, &m, NULL, 0, NULL, NULL, NULL, 0, out));
        out->u.l->form = JL_GEN;
        return Q_OK;
    }
    if (F("list")) {
        Q_TRY(jinja_iterate(cx, in, &l));
        jlist *c = jl_new(cx->a, l->n);
        if (!c) return OOM();
        for (size_t i = 0; i < l->n; i++) c->v[c->n++] = l->v[i];
        out->k = JV_LIST, out->u.l = c;
        return Q_OK;
    }
    if (F("first") || F("last") || F("reverse")) {
        Q_TRY(jinja_iterate(cx, in, &l));
        if (F("reverse")) {
            jlist *r = jl_new(cx->a, l->n);
            if (!r) return OOM();
            for (size_t i = l->n; i-- > 0;) r->v[r->n++] = l->v[i];
            r->form = JL_GEN;
            if (in.k != JV_STR) { out->k = JV_LIST, out->u.l = r; return Q_OK; }
            return join(cx, r, jv_str("", 0), 0, out);
        }
        if (F("last") && in.k == JV_LIST && in.u.l->form == JL_GEN) return FAIL(Q_EINVAL, "last: a generator is not reversible", cx->line);
        *out = !l->n ? jv_undef() : F("first") ? l->v[0] : l->v[l->n - 1];
        return Q_OK;
    }
    if (F("join")) {
        const jv *attr = kwarg(kwname, kwlen, kw, n_kw, "attribute");
        jv sep = a0 ? *a0 : jv_str("", 0);
        Q_TRY(need_str(cx, sep, "join separator"));
        Q_TRY(jinja_iterate(cx, in, &l));
        if (attr) {
            jlist *m = jl_new(cx->a, l->n);
            if (!m) return OOM();
            for (size_t i = 0; i < l->n; i++) m->v[m->n++] = attr_of(l->v[i], *attr);
            l = m;
        }
        return join(cx, l, sep, 0, out);
    }
    if (F("upper") || F("lower")) {
        jv s;
        Q_TRY(jv_as_str(cx->a, in, &s));
        return str_case(cx, s, F("upper"), out);
    }
    if (F("default") || F("d")) {
        const jv *bo = n_args > 1 ? &args[1] : kwarg(kwname, kwlen, kw, n_kw, "boolean");
        int use = in.k == JV_UNDEF || (bo && jv_truthy(*bo) && !jv_truthy(in));
        *out = use ? (a0 ? *a0 : jv_str("", 0)) : in;
        return Q_OK;
    }
    if (F("replace")) {
        jv s;
        if (n_args < 2) return FAIL(Q_EINVAL, "replace needs 2 arguments", cx->line);
        Q_TRY(jv_as_str(cx->a, in, &s));
        return str_replace(cx, s, args[0], args[1], int_arg(n_args > 2 ? &args[2] : NULL, -1), out);
    }
    if (F("int") || F("float") || F("abs")) {
        if (F("abs")) {
            if (in.k == JV_INT && in.u.i != INT64_MIN) *out = jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
            else if (in.k == JV_FLOAT) *out = jv_float(in.u.f < 0 ? -in.u.f : in.u.f);
            else return FAIL(Q_EINVAL, "abs of a %s", cx->line, jv_kind_name(in));
            return Q_OK;
        }
        int want_int = F("int");
        double f = 0;
        int ok = 1;
        if (in.k == JV_INT || in.k == JV_BOOL) f = (double)(in.k == JV_INT ? in.u.i : in.u.b);
        else if (in.k == JV_FLOAT) f = in.u.f;
        else if (in.k == JV_STR) ok = parse_number(strip(in, NULL, 1, 1), &f);
        else ok = 0;
        if (want_int && ok && !isfinite(f)) ok = 0; /* int(nan/inf) fails: the default */
        if (!ok) *out = a0 ? *a0 : (want_int ? jv_int(0) : jv_float(0.0));
        else if (want_int && in.k == JV_INT) *out = in;
        else if (want_int && !(f > -9.2e18 && f < 9.2e18))
            return FAIL(Q_EUNSUPPORTED, "int: value out of range", cx->line);
        else *out = want_int ? jv_int((int64_t)f) : jv_float(f);
        return Q_OK;
    }
    if (F("map")) {
        const jv *attr = kwarg(kwname, kwlen, kw, n_kw, "attribute");
        Q_TRY(jinja_iterate(cx, in, &l));
        jlist *m = jl_new(cx->a, l->n);
        if (!m) return OOM();
        if (!attr && (!a0 || a0->k != JV_STR)) return FAIL(Q_EUNSUPPORTED, "map needs attribute= or a filter name", cx->line);
        for (size_t i = 0; i < l->n; i++) {
            if (attr) m->v[m->n++] = attr_of(l->v[i], *attr);
            else Q_TRY(jinja_filter(cx, a0->u.s.p, a0->u.s.n, l->v[i], args + 1, n_args - 1, NULL, NULL, NULL, 0, &m->v[m->n++]));
        }
        m->form = JL_GEN;
        out->k = JV_LIST, out->u.l = m;
        return Q_OK;
    }
    if (F("select") || F("reject") || F("selectattr") || F("rejectattr"))
        return select_filter(cx, name, n, in, args, n_args, out);
#undef F
    return FAIL(Q_EUNSUPPORTED, "unknown filter '%.*s'", cx->line, (int)n, name);
}
